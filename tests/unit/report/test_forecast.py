"""gpustack.report.forecast: least squares on daily allocation, and honest answers when it cannot say."""

from __future__ import annotations

import pytest

from gpustack.report import forecast as fc

END = 1_800_000_000.0
DAY = fc.DAY_S


def daily(values: list[float]) -> list[tuple[float, float]]:
    """Points ending at END, one a day, oldest first."""
    n = len(values)
    return [(END - (n - 1 - i) * DAY, v) for i, v in enumerate(values)]


def test_least_squares_recovers_a_line() -> None:
    assert fc.least_squares([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx((1.0, 2.0))
    assert fc.least_squares([0, 1, 2, 3], [1, 2, 1, 2]) == pytest.approx((1.2, 0.2))
    with pytest.raises(ValueError):
        fc.least_squares([2, 2], [1, 3])


def test_a_linear_trend_gives_the_date() -> None:
    # 10 + 0.5 GPUs a day over 30 days: 24.5 at the end; 64 GPUs are 79 days later
    f = fc.forecast(daily([10 + 0.5 * i for i in range(30)]), 64, END, 30)
    assert f.status == fc.OK
    assert f.slope == pytest.approx(0.5) and f.intercept == pytest.approx(24.5)
    assert f.when == pytest.approx(END + 79 * DAY) and f.days_left == pytest.approx(79)
    assert "reaches 64 GPUs around" in f.describe() and "(in 79 days)" in f.describe()


def test_noise_around_a_line() -> None:
    noise = [0.3, -0.2, 0.1, -0.4, 0.2, 0.0, -0.1, 0.3, -0.3, 0.1] * 3
    f = fc.forecast(daily([10 + 0.5 * i + e for i, e in enumerate(noise)]), 64, END, 30)
    assert f.status == fc.OK and abs(f.when - (END + 79 * DAY)) < 2 * DAY  # type: ignore[operator]


@pytest.mark.parametrize(
    ("values", "capacity", "status", "text"),
    [
        ([5.0] * 30, 64, fc.BEYOND, "not reached within the horizon (90 days)"),
        ([30 - 0.5 * i for i in range(30)], 64, fc.BEYOND, "-0.50 GPUs/day"),
        ([1 + 0.1 * i for i in range(30)], 64, fc.BEYOND, "within the horizon"),  # 601 days away
        ([60 + i for i in range(30)], 64, fc.REACHED, "at capacity"),
        ([1.0, 2.0, 3.0], 64, fc.NOT_ENOUGH, "not enough data: 3 daily point(s), at least 7 needed"),
        ([], 64, fc.NOT_ENOUGH, "0 daily point"),
        ([1.0] * 10, 0, fc.NO_CAPACITY, "no allocatable GPUs"),
    ],
)
def test_what_it_cannot_say_it_says(values: list[float], capacity: float, status: str, text: str) -> None:
    f = fc.forecast(daily(values), capacity, END, 30)
    assert f.status == status and f.when is None
    assert text in f.describe()


def test_horizon_is_three_windows() -> None:
    # reaches capacity 80 days out: inside a 30-day window's horizon (90), outside a 20-day one's (60)
    values = [20 + 0.5 * i for i in range(20)]  # 29.5 at the end; 69.5 is 80 days later
    assert fc.forecast(daily(values), 69.5, END, 30).status == fc.OK
    assert fc.forecast(daily(values), 69.5, END, 20).status == fc.BEYOND
