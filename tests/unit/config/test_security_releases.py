"""Open security releases (gpustack/config/security_releases.py) and the advice built on them and on the support horizons
(gpustack/config/advice.py): a warning only with a way out that changes something, else a note."""

from __future__ import annotations

import re
from datetime import date, timedelta

import pytest

from gpustack.config import advice, horizons, lifecycle, pins, security_releases

DAY = date(2026, 11, 26)


def test_every_security_release_names_its_cves_public_sources_and_why_it_is_not_pinned() -> None:
    for r in security_releases.SECURITY_RELEASES:
        assert r.fixes and all(re.match(r"(CVE-\d{4}-\d+|GHSA-[a-z0-9-]+)", f) for f in r.fixes), r
        assert r.sources and all(u.startswith("https://github.com/") for u in r.sources), r
        assert "3P id" not in r.why_not_pinned and r.why_not_pinned and date.fromisoformat(r.released)
        assert "{arch}" in r.checksum_url and r.version in r.checksum_url
        # an open security release is, by definition, not pinned
        assert r.version not in pins.CONTAINERD_SHA256


@pytest.mark.parametrize(
    ("version", "open_"),
    [("2.3.4", ["2.3.5", "2.3.6"]), ("2.3.5", ["2.3.6"]), ("2.3.6", []), ("2.2.7", []), ("2.3.1", ["2.3.5", "2.3.6"]),
     ("garbage", [])],
)  # fmt: skip
def test_open_releases_are_newer_patches_of_the_same_branch(version: str, open_: list[str]) -> None:
    assert [r.version for r in security_releases.open_releases("containerd", version)] == open_
    assert security_releases.open_releases("runc", version) == []


def test_the_pinned_containerd_carries_its_open_security_releases() -> None:
    (cd,) = [j for j in lifecycle.pin_support(None, DAY) if j.component == "containerd"]
    assert [r.version for r in cd.security] == ["2.3.5", "2.3.6"]
    assert [r["version"] for r in cd.to_json()["open_security_releases"]] == ["2.3.5", "2.3.6"]  # type: ignore[index]
    (a,) = advice.advise([cd], DAY)
    assert a.level == "warn" and "CVE-2026-53493" in a.text and "versions.containerd: 2.3.6" in a.fix


def _judged(component: str, version: str, on: date) -> lifecycle.Judged:
    return lifecycle.judge(component, version, on)


def test_the_default_driver_near_its_end_is_a_note_when_no_newer_supported_branch_exists() -> None:
    on = date(2026, 12, 15)
    (a,) = advice.advise([_judged("nvidia-driver", "595.91.07", on)], on)
    assert a.level == "info" and a.fix == "" and "reinstall 595.91.07" in a.text
    # the branches GPU Operator v26.7.0 supports, judged: R610 past (NFB, August 2026), R580 an older LTSB
    branches = {b: v.status for _, b, v in advice.driver_branches(on)}
    assert branches == {"R610": "past", "R595": "ending", "R580": "supported", "R535": "past"}


def test_an_older_driver_branch_warns_with_the_pinned_default() -> None:
    """A node on R570 (ended February 2026): GPU Operator v26.7.0 supports the newer R595 (in support until March
    2027 on this day), so there is a way out that changes something."""
    (a,) = advice.advise([_judged("nvidia-driver", "570.195.03", DAY)], DAY)
    assert a.level == "warn" and a.fix.startswith("driver 595.91.07 (R595") and "upgrade --components" in a.fix


@pytest.mark.parametrize(
    ("component", "version", "level"),
    [("kubernetes", "1.34.11", "warn"), ("containerd", "2.2.7", "warn"), ("gpu-operator", "v25.10.1", "warn"),
     ("os", "ubuntu-22.04", "warn")],
)  # fmt: skip
def test_a_way_out_that_changes_something_is_a_warning(component: str, version: str, level: str) -> None:
    on = date(2027, 5, 1)
    j = (lifecycle.Judged("os", version, version, lifecycle.support.Verdict("ending", "x", 30, False, "ending"), "s")
         if component == "os" else _judged(component, version, on))  # fmt: skip
    found = [a for a in advice.advise([j], on) if not a.text.startswith("open security")]
    assert [a.level for a in found] == [level] and found[0].fix


def test_the_newest_pinned_minor_near_its_end_is_a_note() -> None:
    newest = max(pins.KUBERNETES, key=pins.version_tuple)
    on = date.fromisoformat(horizons.BY_KEY["kubernetes", newest].end) - timedelta(days=30)
    (a,) = advice.advise([_judged("kubernetes", pins.KUBERNETES[newest], on)], on)
    assert a.level == "info" and a.fix == "" and "newest minor gpustack pins" in a.text
