"""The security layer's CIS file checks (gpustack/diagnose/checks_security_files.py) over host facts, and the facts
collector they read (playbooks/module_utils/gpustack_cis_files.py) on a directory tree standing for a host's /."""

from __future__ import annotations

import grp
import importlib.util
import os
import pwd
from pathlib import Path
from typing import Any

from gpustack.diagnose import checks_security_files as files
from gpustack.diagnose import registry
from gpustack.diagnose.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location(
    "gpustack_cis_files", REPO / "playbooks/module_utils/gpustack_cis_files.py"
)
assert spec is not None and spec.loader is not None
collector = importlib.util.module_from_spec(spec)
spec.loader.exec_module(collector)

ROOT = {"owner": "root", "group": "root", "dir": False}


def entry(mode: str, *, owner: str = "root", group: str = "root", is_dir: bool = False) -> dict[str, Any]:
    return {"mode": mode, "owner": owner, "group": group, "dir": is_dir}


def control_plane(**overrides: dict[str, Any]) -> dict[str, Any]:
    """A kubeadm control plane's files as gpustack leaves them (kubeadm's modes, the kubelet's files 0600)."""
    m = "/etc/kubernetes/manifests"
    found = {f"{m}/{c}.yaml": entry("0600") for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                                      "etcd")}  # fmt: skip
    found.update({
        "/var/lib/etcd": entry("0700", is_dir=True),
        **{f"/etc/kubernetes/{n}": entry("0600") for n in ("admin.conf", "super-admin.conf", "scheduler.conf",
                                                             "controller-manager.conf", "kubelet.conf")},
        "/lib/systemd/system/kubelet.service": entry("0600"),
        "/etc/kubernetes/pki/ca.crt": entry("0644"),
        "/var/lib/kubelet/config.yaml": entry("0600"),
    })  # fmt: skip
    pki = {"/etc/kubernetes/pki": entry("0755", is_dir=True), "/etc/kubernetes/pki/ca.crt": entry("0644"),
           "/etc/kubernetes/pki/ca.key": entry("0600"), "/etc/kubernetes/pki/etcd": entry("0755", is_dir=True),
           "/etc/kubernetes/pki/etcd/server.key": entry("0600")}  # fmt: skip
    found.update(overrides)
    return {"cis_files": {"files": found, "pki": pki}}


def worker() -> dict[str, Any]:
    keep = ("/etc/kubernetes/kubelet.conf", "/lib/systemd/system/kubelet.service", "/etc/kubernetes/pki/ca.crt",
            "/var/lib/kubelet/config.yaml")  # fmt: skip
    cp = control_plane()["cis_files"]["files"]
    return {"cis_files": {"files": {k: cp[k] for k in keep},
                          "pki": {"/etc/kubernetes/pki/ca.crt": entry("0644")}}}  # fmt: skip


def run(hosts: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    snap = Snapshot(hosts=hosts)
    out: dict[str, list[tuple[str, str]]] = {}
    for rule in files.RULES:
        out[rule.check_id] = [(f.status, f.host or "") for f in files.judge(rule, snap)]
    return out


def test_every_rule_is_a_security_check_with_kube_benchs_id() -> None:
    specs = registry.load_all()
    for rule in files.RULES:
        spec = specs[rule.check_id]
        assert spec.layer == "security" and spec.title == f"CIS {rule.cis}: {rule.text.rsplit(' (', 1)[0]}"
        assert rule.text.endswith(("(Automated)", "(Manual)"))
    assert len({r.check_id for r in files.RULES}) == len(files.RULES) == 29


def test_a_default_cluster_passes_all_but_the_documented_exception() -> None:
    got = run({"cp1": control_plane(), "w1": worker()})
    not_passed = {k: v for k, v in got.items() if v != [("pass", "")]}
    assert not_passed == {"S1.1.12-etcd-data-dir-owner": [("warn", "cp1")]}


def test_kubeadms_kubelet_config_mode_fails_on_each_node_with_the_fix() -> None:
    loose = entry("0644")
    hosts = {"cp1": control_plane(**{"/var/lib/kubelet/config.yaml": loose}), "w1": worker()}
    hosts["w1"]["cis_files"]["files"]["/var/lib/kubelet/config.yaml"] = loose
    findings = files.judge(next(r for r in files.RULES if r.cis == "4.1.9"), Snapshot(hosts=hosts))
    assert [(f.status, f.host) for f in findings] == [("fail", "cp1"), ("fail", "w1")]
    assert findings[0].evidence == "/var/lib/kubelet/config.yaml: permissions=644"
    assert findings[0].fix.startswith("on cp1: chmod 600 /var/lib/kubelet/config.yaml")


def test_bitmask_and_ownership_as_kube_bench_tests_them() -> None:
    mode = next(r for r in files.RULES if r.cis == "1.1.20")  # 644 or more restrictive
    assert files.meets(mode, entry("0600")) == (True, "permissions=600")
    assert files.meets(mode, entry("0444"))[0] and not files.meets(mode, entry("0664"))[0]
    assert not files.meets(mode, entry("0646"))[0]  # a bit beyond 644, though numerically smaller than 0664
    owner = next(r for r in files.RULES if r.cis == "1.1.19")
    assert files.meets(owner, entry("0600", group="kube")) == (False, "root:kube")


def test_the_kubelet_unit_is_the_first_of_kube_benchs_candidates_and_pki_files_by_suffix() -> None:
    host = control_plane(**{"/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": entry("0644")})
    found = run({"cp1": host})
    assert found["S4.1.1-kubelet-unit-mode"] == [("fail", "cp1")]  # the drop-in, not the 0600 unit
    host["cis_files"]["pki"]["/etc/kubernetes/pki/apiserver.key"] = entry("0640")
    host["cis_files"]["pki"]["/etc/kubernetes/pki/sa.pub"] = entry("0666")  # neither .crt nor .key
    findings = files.judge(next(r for r in files.RULES if r.cis == "1.1.21"), Snapshot(hosts={"cp1": host}))
    assert [(f.status, f.evidence) for f in findings] == [
        ("fail", "/etc/kubernetes/pki/apiserver.key: permissions=640")
    ]


def test_without_facts_or_files_the_check_says_so() -> None:
    rule = files.RULES[0]
    assert [(f.status, f.summary) for f in files.judge(rule, Snapshot())] == [("skip", files.NO_FACTS)]
    (only,) = files.judge(rule, Snapshot(hosts={"w1": worker()}))
    assert only.status == "skip" and "is on no node whose facts were read" in only.summary


def test_the_collector_reads_modes_and_owners_under_a_root(tmp_path: Path) -> None:
    me, mine = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    for rel, mode in (("etc/kubernetes/admin.conf", 0o600), ("var/lib/kubelet/config.yaml", 0o644),
                      ("etc/kubernetes/pki/ca.crt", 0o644), ("etc/kubernetes/pki/etcd/ca.key", 0o600)):  # fmt: skip
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        path.chmod(mode)
    got = collector.collect_cis_files(str(tmp_path))
    assert got["files"] == {
        "/etc/kubernetes/admin.conf": {"mode": "0600", "owner": me, "group": mine, "dir": False},
        "/var/lib/kubelet/config.yaml": {"mode": "0644", "owner": me, "group": mine, "dir": False},
        "/etc/kubernetes/pki/ca.crt": {"mode": "0644", "owner": me, "group": mine, "dir": False},
    }
    assert set(got["pki"]) == {"/etc/kubernetes/pki", "/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/etcd",
                               "/etc/kubernetes/pki/etcd/ca.key"}  # fmt: skip
    assert got["pki"]["/etc/kubernetes/pki/etcd"]["dir"] is True
    no_kubelet = {"source": None, "argv": [], "config_path": "/var/lib/kubelet/config.yaml", "config": None}
    assert collector.collect_cis_files(str(tmp_path / "none")) == {"files": {}, "pki": {}, "kubelet": no_kubelet}
