"""The support horizons gpustack ships: every date parses and names its source, every pin has a horizon, every
pinned checksum names two sources; and how a horizon is judged on a day (day, month-only, "until the next
release", ended, none)."""

from __future__ import annotations

import re
from datetime import date

import pytest

from gpustack.config import horizons, lifecycle, pins, support
from gpustack.config.support import Horizon
from gpustack.errors import UsageError

DAY = date(2026, 11, 26)


@pytest.mark.parametrize("h", horizons.HORIZONS, ids=lambda h: f"{h.component}-{h.branch}")
def test_every_horizon_parses_and_names_its_source(h: Horizon) -> None:
    assert len(h.source) > 20, "a source says where the date is written"
    if h.kind == "date":
        assert date.fromisoformat(h.end)
    elif h.kind == "month":
        assert re.fullmatch(r"\d{4}-\d{2}", h.end) and support.month_start(h.end).day == 1
    elif h.kind == "superseded":
        assert h.successor, "until what?"
        if h.successor_released:
            assert date.fromisoformat(h.successor_released)
        if h.expected:
            assert re.fullmatch(r"\d{4}-\d{2}", h.expected)
    else:
        assert not h.end
    assert support.judge(h, DAY).status in {"supported", "ending", "past", "unknown"}


def test_keys_are_unique_and_known_releases_say_why_they_are_not_pinned() -> None:
    assert len(horizons.BY_KEY) == len(horizons.HORIZONS)
    for k in horizons.KNOWN_RELEASES:
        assert k.source and k.confirmed and k.why_not_pinned, k
        assert not k.released or re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", k.released), k


def test_every_pin_has_a_horizon_with_a_source() -> None:
    judged = lifecycle.pin_support(None, DAY)
    assert {j.component for j in judged} >= {"kubernetes", "containerd", "runc", "flannel", "helm", "gpu-operator",
                                             "nvidia-driver", "kube-prometheus-stack", "dcgm-exporter"}  # fmt: skip
    for j in judged:
        assert j.source, j
        # "unknown" only where upstream publishes nothing, never because gpustack lacks the row
        assert j.status != "unknown" or j.verdict.ends == "no end of support published", j
    assert [j.version for j in judged if j.component == "kubernetes"] == list(pins.KUBERNETES.values())


def test_every_pinned_checksum_names_two_independent_sources() -> None:
    """Two public sources per pinned checksum, each one a maintainer can follow: no private index ids (issue 30)."""
    for component, table in (("containerd", pins.CONTAINERD_SHA256), ("runc", pins.RUNC_SHA256),
                             ("helm", pins.HELM_SHA256), ("cni-plugins", pins.CNI_PLUGINS_SHA256),
                             ("crictl", pins.CRICTL_SHA256)):  # fmt: skip
        for version in table:
            source = pins.CHECKSUM_SOURCES[component, version]
            assert ";" in source or "," in source, f"{component} {version}: two sources"
            assert "3P id" not in source and not re.search(r"\b\d{11}\b", source), source
            assert "https://" in source and version in source, f"{component} {version}: the upstream sha256 file"
    for component, version in (("containerd", pins.CONTAINERD_VERSION), ("runc", pins.RUNC_VERSION)):
        assert "Kubespray" in pins.CHECKSUM_SOURCES[component, version] and "kubernetes/kops" in pins.CHECKSUM_SOURCES[
            component, version]  # fmt: skip
    cni = pins.CHECKSUM_SOURCES["cni-plugins", pins.CNI_PLUGINS_VERSION]
    assert "Kubespray" in cni and "flannel-io/flannel" in cni and "containernetworking/plugins" in cni
    crictl = pins.CHECKSUM_SOURCES["crictl", pins.CRICTL_VERSION]
    assert "Kubespray" in crictl and "independent" in crictl and "kubernetes-sigs/cri-tools" in crictl
    # etcd's archive (etcdutl for `etcd restore` only): one source, Kubespray's, and the entry says so
    etcd = pins.CHECKSUM_SOURCES["etcd", pins.ETCD_VERSION]
    assert set(pins.ETCD_SHA256[pins.ETCD_VERSION]) == {"amd64", "arm64"}
    assert etcd.startswith("one source: Kubespray") and f"etcd-io/etcd/releases/download/v{pins.ETCD_VERSION}/" in etcd
    helm = pins.CHECKSUM_SOURCES["helm", pins.HELM_VERSION]  # no Kubespray entry: upstream plus independent pins
    assert "get.helm.sh" in helm and "independent" in helm
    for k in horizons.KNOWN_RELEASES:
        assert "3P id" not in k.source and not re.search(r"\b\d{11}\b", k.source + k.why_not_pinned), k


def test_the_pins_are_on_supported_branches_today() -> None:
    """The issue's done-criterion, on the day it was written: containerd on the 2.3 LTS, Flannel >= 0.28.9,
    Helm on its newest minor; Kubernetes 1.34 is kept (clusters on it still add nodes) but flagged past."""
    status = {(j.component, j.branch): j.status for j in lifecycle.pin_support(None, DAY)}
    assert status["containerd", "2.3"] == "supported" and pins.CONTAINERD_VERSION.startswith("2.3.")
    assert pins.version_tuple(pins.FLANNEL_VERSION) >= (0, 28, 9)
    assert status["helm", "4.3"] == "ending"  # supported until 4.4.0, due ~2027-01: within 90 days (an estimate)
    assert status["kubernetes", "1.34"] == "past"
    assert status["kubernetes", "1.35"] == "supported" and status["kubernetes", "1.36"] == "supported"


def test_a_day_date() -> None:
    h = Horizon("containerd", "2.2", "date", "src", end="2026-11-06")
    assert support.judge(h, date(2026, 8, 1)).status == "supported"
    v = support.judge(h, date(2026, 8, 9))
    assert (v.status, v.days) == ("ending", 89)
    assert support.judge(h, date(2026, 11, 6)).status == "ending"  # the last day is still a day of support
    v = support.judge(h, DAY)
    assert (v.status, v.days, v.ends) == ("past", -20, "2026-11-06") and "20 days ago" in v.text


def test_a_month_only_date_is_judged_from_the_first_of_the_month() -> None:
    h = Horizon("nvidia-driver", "R595", "month", "src", end="2027-03")
    v = support.judge(h, DAY)
    assert (v.status, v.days, v.ends) == ("supported", 95, "March 2027 (month only)")
    assert support.judge(h, date(2026, 12, 1)).status == "ending"
    assert support.judge(h, date(2027, 3, 2)).status == "past"


def test_until_the_next_release() -> None:
    released = Horizon("helm", "4.2", "superseded", "src", successor="Helm 4.3.0", successor_released="2026-09-09")
    v = support.judge(released, DAY)
    assert v.status == "past" and "superseded by Helm 4.3.0 (released 2026-09-09)" in v.text and not v.estimated
    due = Horizon("helm", "4.3", "superseded", "src", successor="Helm 4.4.0", expected="2027-01")
    v = support.judge(due, DAY)
    assert (v.status, v.estimated, v.days) == ("ending", True, 36) and "an estimate" in v.ends
    assert support.judge(due, date(2026, 6, 1)).status == "supported"
    overdue = support.judge(due, date(2027, 2, 1))
    assert overdue.status == "ending" and "not confirmed released" in overdue.text  # never "past" on a guess
    open_ended = support.judge(Horizon("flannel", "0.28", "superseded", "src", successor="a newer Flannel"), DAY)
    assert (open_ended.status, open_ended.days) == ("supported", None)


def test_a_deprecated_branch_is_ending_without_a_date_and_says_why() -> None:
    """GPU Operator 26.3: deprecated upstream since v26.7.0 (life-cycle-policy.rst: the previous major gets critical
    bug and CVE fixes only) is not "supported"; it ends with the next major, whose date nobody published."""
    v = support.judge(horizons.BY_KEY["gpu-operator", "26.3"], DAY)
    assert (v.status, v.days, v.estimated) == ("ending", None, False)
    assert v.text == ("deprecated upstream since 2026-08-20: critical bug and CVE fixes only, until the GPU Operator "
                      "major after 26.7 (no date)")  # fmt: skip
    from gpustack.config import advice, compat

    running = lifecycle.judge("gpu-operator", "v26.3.1", DAY, ["release gpu-operator"])
    (a,) = advice.advise([running], DAY)
    assert a.level == "warn" and "installs GPU Operator v26.7.0" in a.fix  # a way out that changes something
    assert compat._status_cell(running).startswith("DEPRECATED (deprecated since 2026-08-20")


def test_ended_and_none() -> None:
    assert support.judge(Horizon("nvidia-driver", "R550", "ended", "src"), DAY).status == "past"
    assert support.judge(Horizon("dcgm-exporter", "4.8", "none", "src"), DAY).status == "unknown"


@pytest.mark.parametrize(
    ("component", "version", "branch", "status"),
    [
        ("containerd", "2.3.4", "2.3", "supported"),
        ("containerd", "1.7.24~ds1", "1.7", "past"),  # September 2026
        ("containerd", "1.5.9", "1.5", "past"),  # unlisted, older than the newest listed: upstream left it
        ("containerd", "3.0.0", "3.0", "unknown"),  # newer than gpustack's data
        ("kubernetes", "1.32.9", "1.32", "past"),
        ("kubernetes", "1.36.5", "1.36", "supported"),
        ("nvidia-driver", "595.91.07", "R595", "supported"),
        ("nvidia-driver", "570.195.03", "R570", "past"),
        ("nvidia-driver", "560.35.03", "R560", "past"),
        ("gpu-operator", "v25.3.4", "25.3", "past"),
        ("gpu-operator", "v26.3.1", "26.3", "ending"),  # deprecated since v26.7.0: critical fixes only, no date
        ("gpu-operator", "v26.7.0", "26.7", "supported"),
        ("cni-plugins", "1.9.1", "1.9", "supported"),  # fixes in the newest release only: until a newer one
        ("crictl", "1.36.0", "1.36", "unknown"),  # cri-tools publishes no end of support
        ("prometheus", "3.13.2", "3.13", "supported"),
        ("prometheus", "3.9.1", "3.9", "past"),
        ("helm", "3.18.4", "3.18", "past"),  # no fixes since the final Helm 3 minor (2026-09-09)
        ("helm", "3.22.0", "3", "ending"),  # security fixes until 2027-02-10, for the final Helm 3 minor only
        ("prometheus", "3.14.0", "3.14", "past"),  # not an LTS: 2026-08-17 + 6 weeks
        ("containerd", "", "", "unknown"),
    ],
)
def test_running_versions_find_their_branch(component: str, version: str, branch: str, status: str) -> None:
    j = lifecycle.judge(component, version, DAY)
    assert (j.branch, j.status) == (branch, status), j


def test_node_versions_read_every_field_gpustack_judges() -> None:
    node = {
        "metadata": {"name": "g1", "labels": {"nvidia.com/cuda.driver.major": "580", "nvidia.com/cuda.driver.minor": "95",
                                              "nvidia.com/cuda.driver.rev": "05"}},
        "status": {"nodeInfo": {"kubeletVersion": "v1.35.9", "containerRuntimeVersion": "containerd://1.7.28",
                                "osImage": "Ubuntu 22.04.5 LTS"}},
    }  # fmt: skip
    assert lifecycle.node_versions([node]) == {
        "kubernetes": {"1.35.9": ["g1"]}, "containerd": {"1.7.28": ["g1"]}, "os": {"ubuntu-22.04": ["g1"]},
        "nvidia-driver": {"580.95.05": ["g1"]},
    }  # fmt: skip
    # odd objects are skipped, never a crash; a CRI-O node names no containerd
    assert (
        lifecycle.node_versions(
            [{"metadata": "x"}, {"status": {"nodeInfo": {"containerRuntimeVersion": "cri-o://1.33"}}}]
        )
        == {}
    )


def test_upgrade_paths_name_the_commands_gpustack_offers() -> None:
    j = lifecycle.judge("kubernetes", "1.34.12", DAY)
    assert lifecycle.upgrade_path(j) == "`gpustack upgrade --to 1.35` (one minor at a time, then 1.36, 1.37)"
    assert "upgrade --components" in lifecycle.upgrade_path(lifecycle.judge("gpu-operator", "v25.10.1", DAY))
    assert "up --only containerd" in lifecycle.upgrade_path(lifecycle.judge("containerd", "2.2.7", DAY))
    assert "R580 LTSB" in lifecycle.upgrade_path(lifecycle.judge("nvidia-driver", "570.1.2", DAY))


def test_today_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_TODAY", "2027-01-02")
    assert support.today() == date(2027, 1, 2)
    monkeypatch.setenv("GPUSTACK_TODAY", "2027-13-01")
    with pytest.raises(UsageError, match="not a date"):
        support.today()
    monkeypatch.delenv("GPUSTACK_TODAY")
    assert support.today() == date.today()


def test_os_images() -> None:
    assert horizons.os_from_image("Ubuntu 24.04.1 LTS") == "ubuntu-24.04"
    assert horizons.os_from_image("Debian GNU/Linux 13 (trixie)") == "debian-13"
    assert horizons.os_from_image("Rocky Linux 9.4 (Blue Onyx)") == ""
    assert horizons.os_from_image("") == ""
