"""The report's command-line values, checked and parsed. Pure.

Every bad value is a :class:`~gpustack.errors.UsageError` (exit 2) whose message starts with the option
and the value as typed, and shows the accepted form.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from gpustack.config.fields import LABEL_KEY_RE, url_problem
from gpustack.errors import UsageError
from gpustack.monitoring.ksm import label_name

BY_CHOICES = ("namespace", "team", "node", "model")
OUTPUTS = ("table", "csv", "json")
MIN_WINDOW_S = 3600
MAX_WINDOW_S = 730 * 86400
_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"^(?:\d+[wdhms])+$")
_PART = re.compile(r"(\d+)([wdhms])")


def parse_prometheus_url(text: str | None) -> str | None:
    """``--prometheus-url``: an http:// or https:// URL with a host and a port in range, else None."""
    if text is None:
        return None
    problem = url_problem(text)
    if problem is not None:
        raise UsageError(
            f"--prometheus-url {text!r}: {problem}",
            hint="e.g. --prometheus-url http://127.0.0.1:9090 (after kubectl port-forward)",
        )
    return text.rstrip("/")


def parse_duration(text: str, option: str = "--since") -> int:
    """``30d``, ``12h``, ``2w``, ``1d12h`` -> seconds (between an hour and two years)."""
    value = text.strip()
    if not _DURATION.match(value):
        raise UsageError(f"{option} {text!r}: not a duration: use a number and a unit, e.g. 30d, 12h, 2w or 1d12h")
    seconds = sum(int(n) * _UNITS[u] for n, u in _PART.findall(value))
    if not MIN_WINDOW_S <= seconds <= MAX_WINDOW_S:
        raise UsageError(f"{option} {text!r}: the window must be between 1h and 730d")
    return seconds


def format_duration(seconds: float) -> str:
    """``2592000`` -> ``30d``; ``5400`` -> ``1h30m`` (largest units first, no zero parts)."""
    left, out = round(seconds), ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out or "0s"


def parse_until(text: str | None, now: float) -> float:
    """``--until``: None -> now; ``2026-11-01`` (midnight UTC) or an ISO 8601 time (UTC unless it says
    otherwise) -> a Unix time, never in the future."""
    if text is None or text.strip() == "" or text.strip() == "now":
        return now
    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise UsageError(
            f"--until {text!r}: not a date or time: use 2026-11-01 (midnight UTC) or 2026-11-01T08:00:00Z"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    stamp = when.timestamp()
    if stamp > now + 60:
        raise UsageError(f"--until {text!r}: is in the future (now is {iso(now)})")
    return stamp


def iso(stamp: float) -> str:
    """A Unix time as ``2026-11-24T19:58:00Z``."""
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_by(text: str) -> str:
    value = text.strip().lower()
    if value not in BY_CHOICES:
        raise UsageError(f"--by {text!r}: choose one of {', '.join(BY_CHOICES)}")
    return value


def parse_output(text: str) -> str:
    value = text.strip().lower()
    if value not in OUTPUTS:
        raise UsageError(f"--output {text!r}: choose one of {', '.join(OUTPUTS)}")
    return value


def parse_team_label(text: str, option: str = "--team-label") -> str:
    """A Kubernetes label key (``team``, ``example.com/team``)."""
    value = text.strip()
    if not LABEL_KEY_RE.match(value):
        raise UsageError(f"{option} {text!r}: not a Kubernetes label key (e.g. team or example.com/team)")
    return value


def ksm_label_name(key: str) -> str:
    """The Prometheus label kube-state-metrics gives Kubernetes label ``key`` (``team`` -> ``label_team``)."""
    return label_name(key)


@dataclass(frozen=True)
class Prices:
    """USD per GPU-hour: per GPU model (matched as below) and/or one price for every other model."""

    by_model: dict[str, float] = field(default_factory=dict)
    default: float | None = None

    @property
    def given(self) -> bool:
        return bool(self.by_model) or self.default is not None

    def key_for(self, model: str) -> str | None:
        """The price entry that applies to ``model``: an exact name, else the longest entry contained in it
        (case-insensitive: ``H100`` prices ``NVIDIA H100 80GB HBM3``), else the default (``"*"``)."""
        if model in self.by_model:
            return model
        lowered = model.lower()
        hits = [k for k in self.by_model if k.lower() in lowered]
        if hits:
            return max(hits, key=lambda k: (len(k), k))
        return "*" if self.default is not None else None

    def for_model(self, model: str) -> float | None:
        key = self.key_for(model)
        if key is None:
            return None
        return self.default if key == "*" else self.by_model[key]


def _price_value(item: str, number: str) -> float:
    try:
        value = float(number.strip().lstrip("$"))
    except ValueError:
        raise UsageError(
            f"--price {item!r}: {number.strip()!r} is not a price in USD per GPU-hour (e.g. 2.50, or H100=2.50)"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--price {item!r}: a price must be a finite number of USD per GPU-hour, 0 or more")
    return value


def parse_prices(values: list[str] | None) -> Prices:
    """``--price`` (repeatable, comma-separated): ``2.5`` prices every GPU model; ``MODEL=2.5`` one model."""
    by_model: dict[str, float] = {}
    default: float | None = None
    for raw in values or []:
        for item in raw.split(","):
            entry = item.strip()
            if not entry:
                raise UsageError(f"--price {raw!r}: an empty entry (a stray comma?); use e.g. H100=3.20,A100=1.80")
            if "=" in entry:
                model, _, number = entry.rpartition("=")
                model = model.strip()
                if not model:
                    raise UsageError(f"--price {entry!r}: no GPU model before '='; use e.g. H100=3.20")
                if model.lower() in {m.lower() for m in by_model}:
                    raise UsageError(f"--price {entry!r}: {model} is priced twice")
                by_model[model] = _price_value(entry, number)
            else:
                value = _price_value(entry, entry)
                if default is not None:
                    raise UsageError(
                        f"--price {entry!r}: two prices for every model ({default:g} and {value:g}); "
                        "give one, and MODEL=PRICE for the others"
                    )
                default = value
    return Prices(by_model, default)
