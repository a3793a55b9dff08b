"""When does GPU allocation reach capacity? A least-squares line through daily allocation. Pure.

A straight line fitted to N days is trusted for at most ``HORIZON_FACTOR`` x N days ahead; fewer than
``MIN_POINTS`` daily points is "not enough data". The answer says which case it is rather than printing a
date it cannot back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIN_POINTS = 7
HORIZON_FACTOR = 3
DAY_S = 86400

OK = "date"
REACHED = "reached"
BEYOND = "not within the horizon"
NOT_ENOUGH = "not enough data"
NO_CAPACITY = "no capacity"


@dataclass(frozen=True)
class Forecast:
    status: str  # one of OK, REACHED, BEYOND, NOT_ENOUGH, NO_CAPACITY
    capacity: float  # GPUs allocatable (the line is compared with this)
    points: int  # daily points fitted
    slope: float | None = None  # GPUs per day
    intercept: float | None = None  # fitted GPUs allocated at ``origin``
    origin: float | None = None  # Unix time x = 0 refers to (the end of the window)
    horizon_days: float | None = None
    when: float | None = None  # Unix time the line reaches capacity (status OK)

    @property
    def days_left(self) -> float | None:
        if self.when is None or self.origin is None:
            return None
        return (self.when - self.origin) / DAY_S

    def describe(self) -> str:
        """One line for people, e.g. ``reaches 64 GPUs around 2027-01-03 (in 40 days)``."""
        from gpustack.report.inputs import iso

        slope = "" if self.slope is None else f"{self.slope:+.2f} GPUs/day; "
        if self.status == OK and self.when is not None:
            return f"{slope}reaches {self.capacity:g} GPUs around {iso(self.when)[:10]} (in {self.days_left:.0f} days)"
        if self.status == REACHED:
            return f"{slope}allocation is at capacity ({self.capacity:g} GPUs) already"
        if self.status == BEYOND:
            return f"{slope}capacity ({self.capacity:g} GPUs) not reached within the horizon ({self.horizon_days:.0f} days)"
        if self.status == NO_CAPACITY:
            return "no allocatable GPUs: nothing to forecast"
        return f"not enough data: {self.points} daily point(s), at least {MIN_POINTS} needed"


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """``(intercept, slope)`` of the ordinary least-squares line through the points (at least two distinct xs)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("least squares needs at least two distinct x values")
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    return mean_y - slope * mean_x, slope


def forecast(points: Sequence[tuple[float, float]], capacity: float, origin: float, window_days: float) -> Forecast:
    """Fit ``(unix time, GPUs allocated)`` daily points; when does the line reach ``capacity``?

    ``origin`` is the end of the window; the horizon is ``HORIZON_FACTOR`` x ``window_days``.
    """
    horizon = HORIZON_FACTOR * window_days
    if capacity <= 0:
        return Forecast(NO_CAPACITY, capacity, len(points), horizon_days=horizon)
    if len(points) < MIN_POINTS:
        return Forecast(NOT_ENOUGH, capacity, len(points), horizon_days=horizon)
    xs = [(t - origin) / DAY_S for t, _ in points]
    ys = [y for _, y in points]
    intercept, slope = least_squares(xs, ys)
    common = {"slope": slope, "intercept": intercept, "origin": origin, "horizon_days": horizon}
    if intercept >= capacity or ys[-1] >= capacity:
        return Forecast(REACHED, capacity, len(points), **common)
    if slope <= 0:
        return Forecast(BEYOND, capacity, len(points), **common)
    days = (capacity - intercept) / slope
    if days > horizon:
        return Forecast(BEYOND, capacity, len(points), **common)
    return Forecast(OK, capacity, len(points), when=origin + days * DAY_S, **common)
