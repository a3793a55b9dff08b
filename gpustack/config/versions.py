"""Version strings compared as numbers: the helpers the pin table (gpustack/config/pins.py) and its readers use."""

from __future__ import annotations


def version_tuple(version: str) -> tuple[int, ...]:
    """'v2.1.9+ds1' -> (2, 1, 9); 'R595' (a driver branch) -> (595,); the numeric dotted prefix only."""
    out: list[int] = []
    for part in version.strip().lstrip("vVrR").split("."):
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        out.append(int(digits))
        if len(digits) != len(part):
            break
    return tuple(out)


def at_least(version: str, minimum: str) -> bool:
    return version_tuple(version) >= version_tuple(minimum)
