"""scripts/pins_report.py --online (scripts/pins_online.py) against recorded upstream answers
(tests/fixtures/pins-online, named in docs/testing.md): newer stable releases found from the release lists (drafts,
pre-releases and non-version tags left out), the newest patch of a pinned branch with its release's own sha256 as
one source, Kubernetes' stable-<minor>.txt, and an unreachable answer reported, not fatal."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpustack.config import pins

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "fixtures" / "pins-online"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pins_online", ROOT / "scripts" / "pins_online.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_discovery_from_recorded_answers() -> None:
    online = _module()
    rows = {r["component"]: r for r in online.discover(online.recorded(str(RECORDED)))}
    cd = rows["containerd"]
    assert cd["pinned"] == pins.CONTAINERD_VERSION
    assert [n["version"] for n in cd["newer"]] == ["2.4.1", "2.4.0", "2.3.6", "2.3.5"]  # no rc, no api/ tag
    assert cd["branch_newest"] == "2.3.6" and cd["newer"][2]["published"] == "2026-09-24"
    assert cd["sha256"] == {"amd64": "df806bb9b86653ebc94822a7076642ff3c3614324dbc1b511bdf75ac1669b762",
                            "arm64": "6b3d383cc051f0bd7b2303f9034fdc9029f04c237cadb23b5e890a5b68534e05"}  # fmt: skip
    assert "one source" in cd["sha256_note"]
    assert [n["version"] for n in rows["runc"]["newer"]] == ["1.5.1"] and "sha256" not in rows["runc"]  # a new branch
    assert rows["helm"]["newer"] == []
    # the pin is the 3.13 LTS patch 3.13.5 (the recording lists 3.13.0 only): the newer non-LTS minors are not taken, by choice
    prom = rows["prometheus"]
    assert (prom["pinned"], prom["branch_newest"]) == (pins.PROMETHEUS_VERSION, "3.13.5")
    assert [n["version"] for n in prom["newer"]] == ["3.16.0", "3.15.0", "3.14.0"]
    # the CNI plugins and crictl, pinned at the newest tags: nothing newer, so no sha256 asked for
    for component, version in (("cni-plugins", pins.CNI_PLUGINS_VERSION), ("crictl", pins.CRICTL_VERSION)):
        assert (rows[component]["pinned"], rows[component]["newer"]) == (version, []) and "sha256" not in rows[
            component
        ]
    assert online.CHECKSUM_FILES["crictl"].format(version="1.37.0", arch="arm64") == (
        "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.37.0/crictl-v1.37.0-linux-arm64.tar.gz.sha256"
    )
    assert rows["kubernetes 1.36"]["upstream"] == pins.KUBERNETES["1.36"]
    assert rows["kubernetes 1.37"]["upstream"] == pins.KUBERNETES["1.37"]
    assert "not recorded" in rows["kubernetes 1.38"]["error"] and rows["kubernetes 1.38"]["pinned"] == "-"
    text = online.render(list(rows.values()))
    assert "containerd 2.3.4: newer upstream: 2.4.1 (2026-09-24)" in text
    assert "kubernetes 1.38: could not read upstream" in text


def test_an_unreadable_release_list_is_reported_per_component() -> None:
    online = _module()

    def down(url: str) -> str:
        raise OSError("network unreachable")

    rows = online.discover(down)
    assert rows and all("network unreachable" in r["error"] for r in rows)


@pytest.mark.parametrize(
    ("raw", "name", "expected"),
    [("abc  x.tar.gz\n" + "f" * 64 + "  runc.arm64\n", "runc.arm64", "f" * 64), ("e" * 64 + "\n", "any", "e" * 64),
     ("garbage", "x", "")],
)  # fmt: skip
def test_sha256_files(raw: str, name: str, expected: str) -> None:
    assert _module().sha256_of(raw, name) == expected


def test_the_report_cli_online_from_recorded_answers() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "pins_report.py"), "--today", "2026-11-26",
                           "--online", "--recorded", str(RECORDED), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {r["component"] for r in data["upstream"]} >= {"containerd", "runc", "kubernetes 1.37"}
    text = subprocess.run([sys.executable, str(ROOT / "scripts" / "pins_report.py"), "--today", "2026-11-26",
                           "--online", "--recorded", str(RECORDED)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False).stdout  # fmt: skip
    assert "Upstream now (read-only" in text and "2.3.6 sha256 from its release: amd64 df806bb9" in text
