"""`gpustack version` and `plan`: the matrix of the chosen versions and every artifact with its checksum."""

from __future__ import annotations

import json
from pathlib import Path

from gpustack.config import pins

from .test_cli import GOOD, run


def test_version_table_lists_matrix_and_checksums(tmp_path: Path) -> None:
    r = run("version", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "compatibility matrix" in r.stdout
    for minor, line in pins.KUBERNETES_LINES.items():
        assert minor in r.stdout and f"pause:{line.pause}" in r.stdout
    assert pins.CONTAINERD_SHA256[pins.CONTAINERD_VERSION]["amd64"] in r.stdout
    assert pins.KUBERNETES_APT_KEY_FINGERPRINT in r.stdout


def test_version_json_for_a_config(tmp_path: Path) -> None:
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text(GOOD + "versions:\n  kubernetes: '1.35'\n")
    r = run("version", "-c", str(cfg), "--output", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["gpustack"] == "0.1.0"
    assert [m["kubernetes"] for m in data["matrix"]] == ["1.35"]
    assert data["matrix"][0]["cgroup v2"] == "required"
    arts = {(a["name"], a["arch"]): a for a in data["artifacts"]}
    assert arts[("runc", "amd64")]["checksum"] == "sha256:" + pins.RUNC_SHA256[pins.RUNC_VERSION]["amd64"]
    assert arts[("kubernetes apt key", "all")]["url"].endswith("/v1.35/deb/Release.key")
    assert {p["component"] for p in data["pins"]} >= {"kubernetes", "containerd", "runc", "helm", "gpu-operator"}


def test_version_bad_output(tmp_path: Path) -> None:
    r = run("version", "--output", "yaml", cwd=tmp_path)
    assert r.returncode == 2 and "use table or json" in r.stderr and "Traceback" not in r.stderr


def test_plan_prints_the_pins_and_leaves_the_matrix_and_checksums_to_version(tmp_path: Path) -> None:
    """issue 31: plan is the stages and the versions they install; the matrix, the host OS support and every
    artifact's checksum are `gpustack version`'s (plan printed 174 lines)."""
    (tmp_path / "gpustack.yaml").write_text(GOOD)
    r = run("plan", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "(end of support); matrix, checksums: `gpustack version`" in r.stdout
    assert "containerd" in r.stdout and pins.CONTAINERD_VERSION in r.stdout
    assert "compatibility matrix" not in r.stdout and "host OS support" not in r.stdout
    assert pins.CONTAINERD_SHA256[pins.CONTAINERD_VERSION]["amd64"] not in r.stdout
    assert len(r.stdout.splitlines()) < 110, len(r.stdout.splitlines())
    r = run("version", "-c", "gpustack.yaml", cwd=tmp_path)
    assert "compatibility matrix (the chosen Kubernetes minor)" in r.stdout
    assert "registry.k8s.io/pause:3.10.2" in r.stdout and ">= 2.0.0, one of" in r.stdout
    assert "2.3.0+," in r.stdout.split() and "2.2.0+" in r.stdout.split()  # wrapped between words, if at all
    assert pins.CONTAINERD_SHA256[pins.CONTAINERD_VERSION]["amd64"] in r.stdout


def test_version_shows_each_pins_end_of_support_and_flags_the_past_ones(tmp_path: Path) -> None:
    """The table puts the end of support beside each pin and says PAST / ENDING; -o json carries the date, its
    precision, the verdict, the source of the date and the checksums' two sources."""
    today = {"GPUSTACK_TODAY": "2026-11-26"}
    r = run("version", cwd=tmp_path, env_extra={**today, "COLUMNS": "400"})  # one line per row
    assert r.returncode == 0, r.stderr
    table = r.stdout.split("pins on 2026-11-26", 1)[1].split("compatibility matrix", 1)[0]
    lines = {line.split("│")[1].strip(): line for line in table.splitlines() if line.count("│") == 5}
    assert "2028-04-30" in lines["containerd"] and "supported (521 days)" in lines["containerd"]
    kube_134 = next(line for line in table.splitlines() if "1.34.12" in line)
    assert "2026-10-27" in kube_134 and "PAST END OF SUPPORT (30 days)" in kube_134
    assert "March 2027 (month only)" in lines["nvidia-driver (GPU Operator default)"]
    assert "ENDING" in lines["helm"] and "Helm 4.4.0" in lines["helm"] and "estimate" in lines["helm"]
    data = json.loads(run("version", "-o", "json", cwd=tmp_path, env_extra=today).stdout)
    assert data["today"] == "2026-11-26"
    pins_json = {(p["component"], p["version"]): p for p in data["pins"]}
    cd = pins_json["containerd", pins.CONTAINERD_VERSION]
    assert (cd["branch"], cd["ends"], cd["status"], cd["days"]) == ("2.3", "2028-04-30", "supported", 521)
    assert "containerd RELEASES.md" in cd["source"] and "Kubespray" in cd["checksums"]
    # the security releases after the pin, named with their CVEs and why they are not pinned (table and JSON)
    assert "OPEN SECURITY RELEASE 2.3.5, 2.3.6 not pinned" in lines["containerd"]
    opened = {r["version"]: r for r in cd["open_security_releases"]}
    assert set(opened) == {"2.3.5", "2.3.6"} and not any(r["pinned"] for r in opened.values())
    assert (
        opened["2.3.6"]["fixes"] == ["CVE-2026-53493 (GHSA-pg57-6jwg-q645)"]
        and opened["2.3.6"]["released"] == "2026-09-24"
    )
    assert "CVE-2026-53495 (GHSA-7jxh-36q5-gcqv)" in opened["2.3.5"]["fixes"]
    assert "one public source" in opened["2.3.6"]["why_not_pinned"]
    assert "https://github.com/containerd/containerd/releases/tag/v2.3.6" in opened["2.3.6"]["sources"]
    # the CNI plugins and crictl: pinned with their version, support and two checksum sources; downloaded per arch
    cni, crictl = pins_json["cni-plugins", pins.CNI_PLUGINS_VERSION], pins_json["crictl", pins.CRICTL_VERSION]
    assert cni["status"] == "supported" and "containernetworking/plugins" in cni["source"]
    assert "Kubespray" in cni["checksums"] and "flannel-io/flannel" in cni["checksums"]
    assert crictl["status"] == "unknown" and "cri-tools" in crictl["source"] and "Kubespray" in crictl["checksums"]
    arts = {(a["name"], a["arch"]): a for a in data["artifacts"]}
    for name, table, version in (("cni-plugins", pins.CNI_PLUGINS_SHA256, pins.CNI_PLUGINS_VERSION),
                                 ("crictl", pins.CRICTL_SHA256, pins.CRICTL_VERSION)):  # fmt: skip
        for arch in ("amd64", "arm64"):
            assert arts[name, arch]["checksum"] == "sha256:" + table[version][arch]
            assert arts[name, arch]["version"] == version
    assert "cni-plugins" in lines and "crictl" in lines and "no date published" in lines["crictl"]
    assert pins_json["kubernetes", "1.34.12"]["status"] == "past"
    assert "schedule.yaml" in pins_json["kubernetes", "1.34.12"]["source"]
    for p in data["pins"]:
        assert p["source"] and p["ends"] and p["status"] in {"supported", "ending", "past", "unknown"}, p
    assert {o["branch"] for o in data["os"]} == {"ubuntu-22.04", "ubuntu-24.04", "debian-12", "debian-13"}
    # another day, another verdict: in March 2027 the driver branch R595 is past its end
    march = json.loads(run("version", "-o", "json", cwd=tmp_path, env_extra={"GPUSTACK_TODAY": "2027-03-15"}).stdout)
    assert {p["component"]: p["status"] for p in march["pins"]}["nvidia-driver (GPU Operator default)"] == "past"


def test_a_bad_today_is_a_usage_error(tmp_path: Path) -> None:
    r = run("version", cwd=tmp_path, env_extra={"GPUSTACK_TODAY": "soon"})
    assert r.returncode == 2 and "GPUSTACK_TODAY='soon' is not a date" in r.stderr and "Traceback" not in r.stderr
