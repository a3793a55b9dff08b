"""Host (H..) and runtime (C..) checks over gpustack_facts output, and the hosts collector."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.diagnose import checks_host, collect_hosts, registry
from gpustack.diagnose.collect import CollectContext
from gpustack.diagnose.snapshot import Snapshot
from gpustack.runners import ansible as ar
from gpustack.runners import ssh

HEALTHY: dict[str, Any] = {
    "hostname": "solo",
    "kernel": "6.8.0-45-generic",
    "swap_active": [],
    "fstab_swap_lines": [],
    "listening": [
        {"proto": "tcp", "address": "0.0.0.0", "port": 22, "process": "sshd"},
        {"proto": "tcp", "address": "::", "port": 6443, "process": "kube-apiserver"},
        {"proto": "tcp", "address": "::", "port": 9400, "process": "dcgm-exporter"},
    ],
    "nvidia_pci_devices": [{"slot": "0000:01:00.0", "device_id": "0x2330", "class": "0x030200"}],
    "nvidia_driver_version": "595.91.07",
    "nvidia_smi": False,
    "nouveau_loaded": False,
    "secure_boot": "enabled",
    "kernel_headers": True,
    "br_netfilter": True,
    "ip_forward": "1",
    "bridge_nf_call_iptables": "1",
    "kubelet_cgroup_driver": "systemd",
    "cri_socket": True,
    "containerd_active": True,
    "containerd": {"path": "/usr/bin/containerd", "systemd_cgroup": True},
    "firewall": {
        "gpustack_chain": True,
        "jump": True,
        "input_policy": "ACCEPT",
        "drops_before_jump": False,
        "drop_rules": [],
        "pod_api_rule": True,
    },
    "nvidia_dev_char_symlinks": True,
    "node_exporter_on_9100": False,
    "cgroup_v2": True,
    "kubelet_version": "1.36.4",
    "nvidia_nvswitches": 0,
    "fabricmanager": None,
    "kernels": [{"release": "6.8.0-45-generic", "headers": True, "image": True}],
    "unattended_upgrades": None,
    "gpu_packages": [],
}
HEALTHY["containerd"] = {"path": "/usr/local/bin/containerd", "systemd_cgroup": True, "version": "2.2.7",
                         "config_version": 3, "imports": [], "drop_ins": []}  # fmt: skip
UNATTENDED_ON = {"installed": True, "enabled": True, "blacklist": [], "automatic_reboot": False,
                 "origins": ["${distro_id}:${distro_codename}-security"]}  # fmt: skip
TOOLKIT_DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"


def facts(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(HEALTHY)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def host_specs(command: str = "doctor") -> list[registry.CheckSpec]:
    """This module's checks only (other layers' modules are not needed here)."""
    mine = [s for s in registry.REGISTRY.values() if s.fn.__module__ == checks_host.__name__]
    return sorted((s for s in mine if command in s.commands), key=lambda s: (registry.LAYERS.index(s.layer), s.id))


def run(snap: Snapshot, command: str = "doctor") -> list[Finding]:
    return registry.run(host_specs(command), snap)


def collect(ctx: CollectContext) -> Snapshot:
    snap = Snapshot()
    collect_hosts.collect_hosts(ctx, snap)
    return snap


def failing(findings: list[Finding]) -> dict[str, Finding]:
    return {f.id: f for f in findings if f.status == "fail"}


def test_healthy_host_has_no_failure_or_warning() -> None:
    findings = run(Snapshot(hosts={"solo": facts(), "w1": facts(hostname="w1")}))
    assert not [f for f in findings if f.status in ("fail", "warn")], findings
    assert {f.id for f in findings} >= {"H01-swap", "H04-firewall", "C01-cgroup-driver", "C02-cri"}
    assert all(f.host in ("solo", "w1") for f in findings)


BREAKAGES: list[tuple[str, dict[str, Any], str, str]] = [
    # (expected id, fact changes, text in the evidence, text in the fix)
    ("H01-swap", {"swap_active": [{"device": "/swap.img", "size_bytes": 1 << 30}]}, "/swap.img", "swapoff -a"),
    ("H01-swap", {"fstab_swap_lines": ["/swap.img none swap sw 0 0"]}, "/etc/fstab", "swapoff -a"),
    ("H02-bridge-netfilter", {"bridge_nf_call_iptables": "0"}, "= 0", "bridge-nf-call-iptables=1"),
    ("H02-bridge-netfilter", {"bridge_nf_call_iptables": None, "br_netfilter": False}, "does not exist",
     "modprobe br_netfilter"),
    ("H03-ip-forward", {"ip_forward": "0"}, "ip_forward = 0", "net.ipv4.ip_forward=1"),
    ("H04-firewall", {"firewall": {"drops_before_jump": True, "drop_rules": ["-A INPUT -s 10.244.0.0/16 -j DROP"]}},
     "-A INPUT -s 10.244.0.0/16 -j DROP", "gpustack up --only firewall"),
    ("H04-firewall", {"firewall": {"input_policy": "DROP", "jump": False}}, "jump missing",
     "gpustack up --only firewall"),
    ("H04-firewall", {"firewall": {"input_policy": "DROP", "pod_api_rule": False}}, "6443 rule missing",
     "gpustack up --only firewall"),
    ("H06-port-9400", {"listening": [{"proto": "tcp", "address": "0.0.0.0", "port": 9400, "process": "python3"}]},
     "python3", "9400"),
    ("H07-port-6443", {"listening": [{"proto": "tcp", "address": "0.0.0.0", "port": 6443, "process": "nginx"}]},
     "nginx", "6443"),
    ("H08-nouveau", {"nouveau_loaded": True}, "nouveau", "blacklist nouveau"),
    ("H09-secure-boot", {"nvidia_driver_version": None}, "secure_boot=enabled", "Secure Boot"),
    ("H10-kernel-headers", {"kernel_headers": False, "nvidia_driver_version": None, "secure_boot": "disabled"},
     "/lib/modules/6.8.0-45-generic/build", "linux-headers-6.8.0-45-generic"),
    ("H11-dev-char-symlinks", {"nvidia_dev_char_symlinks": False}, "/dev/char",
     "nvidia-ctk system create-dev-char-symlinks --create-all"),
    ("C01-cgroup-driver", {"containerd": {"systemd_cgroup": False}}, "SystemdCgroup = false",
     "gpustack up --only containerd"),
    ("C01-cgroup-driver", {"kubelet_cgroup_driver": "cgroupfs"}, "cgroupDriver: cgroupfs",
     "gpustack up --only containerd"),
    ("C02-cri", {"containerd_active": False}, "not active", "systemctl restart containerd"),
    ("C02-cri", {"cri_socket": False}, "containerd.sock is missing", "systemctl restart containerd"),
    ("C02-cri", {"containerd": {"path": None}}, "no containerd", "gpustack up --only containerd"),
    ("C03-cgroup-v2", {"cgroup_v2": False}, "cgroup v1); kubelet 1.36.4", "systemd.unified_cgroup_hierarchy=1"),
    ("C04-containerd-version", {"containerd": {"version": "1.7.24", "config_version": 2}}, "containerd --version: 1.7.24",
     "gpustack up --only containerd"),
    ("C05-containerd-config-version", {"containerd": {"config_version": 4}}, "version = 4; containerd 2.2.7 writes version 3",
     "containerd config migrate"),
    ("C06-containerd-drop-ins", {"containerd": {"imports": None, "drop_ins": [{"path": TOOLKIT_DROP_IN, "imported": False}]}},
     "no imports key", "sudo sed -i '1i imports = [\"/etc/containerd/conf.d/*.toml\"]' /etc/containerd/config.toml"),
    ("C06-containerd-drop-ins", {"containerd": {"drop_ins": [{"path": TOOLKIT_DROP_IN, "imported": False}]}},
     "imports: []", 's#^imports *= *\\[#imports = ["/etc/containerd/conf.d/*.toml", #'),  # containerd's default
    ("C06-containerd-drop-ins", {"containerd": {"imports": ["/etc/containerd/extra.toml"],
                                                "drop_ins": [{"path": TOOLKIT_DROP_IN, "imported": False}]}},
     "imports: ['/etc/containerd/extra.toml']", 's#^imports *= *\\[#imports = ["/etc/containerd/conf.d/*.toml", #'),
    ("H12-fabric-manager", {"nvidia_nvswitches": 4, "nvidia_smi": True, "fabricmanager": {"installed": True, "active": False}},
     "4 NVSwitches", "systemctl enable --now nvidia-fabricmanager"),
    ("H12-fabric-manager", {"nvidia_nvswitches": 4, "nvidia_smi": True, "fabricmanager": {"installed": False, "active": False}},
     "not installed", "apt-get install -y nvidia-fabricmanager-595"),
    ("H14-next-kernel-headers", {"kernels": [{"release": "6.8.0-45-generic", "headers": True, "image": True},
                                             {"release": "6.8.0-48-generic", "headers": False, "image": True}]},
     "6.8.0-48-generic", "apt-get install -y linux-headers-6.8.0-48-generic"),
]  # fmt: skip


@pytest.mark.parametrize(("check_id", "changes", "evidence", "fix"), BREAKAGES)
def test_each_breakage_fails_with_evidence_and_fix(
    check_id: str, changes: dict[str, Any], evidence: str, fix: str
) -> None:
    findings = run(Snapshot(hosts={"solo": facts(**changes), "ok": facts()}))
    fails = [f for f in findings if f.status == "fail"]
    assert [f.id for f in fails] == [check_id], fails
    assert fails[0].host == "solo"
    assert evidence in fails[0].evidence and fix in fails[0].fix


def test_host_node_exporter_warns_and_fails_when_the_cluster_wants_9100() -> None:
    host = facts(node_exporter_on_9100=True,
                 listening=[{"proto": "tcp", "address": "0.0.0.0", "port": 9100, "process": "node_exporter"}])  # fmt: skip
    warn = [f for f in run(Snapshot(hosts={"solo": host})) if f.id == "H05-node-exporter-port"]
    assert warn[0].status == "warn" and "node_exporter" in warn[0].evidence and "--only cluster" in warn[0].fix
    ds = {
        "metadata": {"name": "kube-prometheus-stack-prometheus-node-exporter", "namespace": "monitoring"},
        "spec": {"template": {"spec": {"containers": [{"name": "ne", "ports": [{"containerPort": 9100,
                                                                                   "hostPort": 9100}]}]}}},
    }  # fmt: skip
    fail = failing(run(Snapshot(hosts={"solo": host}, kube={"DaemonSet": [ds]})))
    assert "H05-node-exporter-port" in fail and "DaemonSet" in fail["H05-node-exporter-port"].evidence


def test_firewall_drift_with_accept_policy_is_a_warning_and_unreadable_is_skipped() -> None:
    findings = run(
        Snapshot(hosts={"a": facts(firewall={"gpustack_chain": False, "jump": False}), "b": facts(firewall=None)})
    )
    fw = {f.host: f for f in findings if f.id == "H04-firewall"}
    assert fw["a"].status == "warn" and fw["a"].fix == "gpustack up --only firewall"
    assert fw["b"].status == "skip"


def test_operator_driver_checks_follow_cluster_policy_and_host_driver() -> None:
    broken = facts(nvidia_driver_version=None, kernel_headers=False)
    # host has its own driver (nvidia-smi): the operator builds nothing
    assert not failing(run(Snapshot(hosts={"h": {**broken, "nvidia_smi": True}})))
    # ClusterPolicy says driver.enabled=false: likewise
    policy = {"metadata": {"name": "cluster-policy"}, "spec": {"driver": {"enabled": False}}}
    assert not failing(run(Snapshot(hosts={"h": broken}, kube={"ClusterPolicy": [policy]})))
    # no GPU: nothing to build
    assert not failing(run(Snapshot(hosts={"h": {**broken, "nvidia_pci_devices": []}})))
    assert set(failing(run(Snapshot(hosts={"h": broken})))) == {"H09-secure-boot", "H10-kernel-headers"}


def test_unknown_port_owner_warns_and_cgroup_skip_before_kubelet() -> None:
    host = facts(listening=[{"proto": "tcp", "address": "0.0.0.0", "port": 6443, "process": None}],
                 kubelet_cgroup_driver=None)  # fmt: skip
    by_id = {f.id: f for f in run(Snapshot(hosts={"h": host}))}
    assert by_id["H07-port-6443"].status == "warn"
    assert by_id["C01-cgroup-driver"].status == "skip"


def test_no_facts_skips_and_errors_become_h00() -> None:
    findings = run(Snapshot(errors={"hosts:w2": "unknown SSH host key SHA256:x"}))
    h00 = [f for f in findings if f.id == "H00-host-facts"]
    assert h00[0].status == "fail" and h00[0].host == "w2" and "SHA256:x" in h00[0].evidence
    assert all(f.status == "skip" for f in findings if f.id != "H00-host-facts")
    assert [f.status for f in run(Snapshot()) if f.id == "H00-host-facts"] == ["skip"]


@pytest.mark.parametrize("junk", [None, 7, "x", [], {"listening": "nope", "firewall": [], "containerd": None},
                                  {"swap_active": [None, 3], "listening": [None, {"port": "x"}]}])  # fmt: skip
def test_malformed_facts_never_crash(junk: Any) -> None:
    findings = run(Snapshot(hosts={"h": junk}))
    assert not [f for f in findings if "could not evaluate" in f.summary], findings


def test_verify_runs_only_the_basic_host_checks() -> None:
    ids = {s.id for s in host_specs("verify")}
    assert ids == {"H00-host-facts", "H01-swap", "H02-bridge-netfilter", "H03-ip-forward", "C02-cri"}
    assert registry.REGISTRY["H04-firewall"].fixable and registry.REGISTRY["H05-node-exporter-port"].fixable


# ------------------------------------------------------------------------------------- collector

CFG = Config.model_validate(
    {
        "nodes": [
            {"name": "cp1", "address": "192.0.2.11", "role": "control-plane"},
            {"name": "w1", "address": "192.0.2.12"},
            {"name": "w2", "address": "192.0.2.13"},
        ]
    }
)


def test_collect_uses_the_seam_and_records_node_errors() -> None:
    ctx = CollectContext(cfg=CFG, command="doctor", kubeconfig=None, layers=("host",),
                         extra={"host_facts": {"cp1": facts(), "w1": "unreachable"}})  # fmt: skip
    snap = collect(ctx)
    assert set(snap.hosts) == {"cp1"} and snap.errors == {"hosts:w1": "unreachable"}


def test_host_keys_are_never_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_check(hosts: Any, known_hosts: Path, *, accept_new: bool, timeout: float) -> list[ssh.HostKeyResult]:
        seen["accept_new"] = accept_new
        return [
            ssh.HostKeyResult("192.0.2.11", 22, "known", "SHA256:a"),
            ssh.HostKeyResult("192.0.2.12", 22, "unknown", "SHA256:b"),
            ssh.HostKeyResult("192.0.2.13", 22, "changed", "SHA256:c"),
        ]

    monkeypatch.setattr(ssh, "check_host_keys", fake_check)
    cfg = CFG.model_copy(update={"ssh": CFG.ssh.model_copy(update={"accept_new_host_keys": True})})
    errors = collect_hosts.host_key_errors(cfg)
    assert seen["accept_new"] is False
    assert set(errors) == {"w1", "w2"}
    assert "unknown SSH host key SHA256:b" in errors["w1"] and "CHANGED" in errors["w2"]


def test_playbook_run_is_limited_to_trusted_nodes_and_reports_failures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(collect_hosts, "host_key_errors", lambda cfg: {"w2": "unknown SSH host key"})
    calls: list[dict[str, Any]] = []

    def fake_run(kwargs: dict[str, Any], tracker: ar.StageTracker) -> ar.PlaybookResult:
        calls.append(kwargs)
        assert Path(kwargs["envvars"]["ANSIBLE_SSH_CONTROL_PATH_DIR"]).is_dir(), "its own SSH control directory"
        failure = ar.TaskFailure("preflight", "w1", "Collect facts as root", "sudo: a password is required")
        return ar.PlaybookResult(2, "failed", {}, [failure], tmp_path, host_facts={"cp1": facts()})

    monkeypatch.setattr(ar, "run_playbook", fake_run)
    ctx = CollectContext(cfg=CFG, command="doctor", kubeconfig=None, timeout=20)
    snap = collect(ctx)
    assert calls[0]["limit"] == "cp1,w1" and calls[0]["playbook"] == "preflight.yml"
    assert calls[0]["envvars"]["ANSIBLE_SSH_ARGS"].count("StrictHostKeyChecking=yes") == 1
    assert 0 < calls[0]["settings"]["job_timeout"] < 20
    assert set(snap.hosts) == {"cp1"}
    assert snap.errors["hosts:w1"].endswith("sudo: a password is required")
    assert snap.errors["hosts:w2"] == "unknown SSH host key"
    assert not Path(calls[0]["private_data_dir"]).exists(), "the private temp dir is removed"
    assert not Path(calls[0]["envvars"]["ANSIBLE_SSH_CONTROL_PATH_DIR"]).exists(), "and its SSH control directory"


@pytest.mark.parametrize("junk", [[], "x", {"metadata": [], "spec": {"template": []}}, {"spec": {"driver": 3}}])
def test_malformed_cluster_objects_never_crash(junk: Any) -> None:
    host = facts(nvidia_driver_version=None, node_exporter_on_9100=True)
    snap = Snapshot(hosts={"h": host}, kube={"DaemonSet": [junk], "ClusterPolicy": [junk]})
    assert not [f for f in run(snap) if "could not evaluate" in f.summary]


NEW_RULES = ("C03-cgroup-v2", "C04-containerd-version", "C05-containerd-config-version", "C06-containerd-drop-ins",
             "H12-fabric-manager", "H13-unattended-upgrades", "H14-next-kernel-headers")  # fmt: skip


@pytest.mark.parametrize(
    "changes",
    [{},  # every new rule passes on the healthy host
     {"nvidia_nvswitches": 4, "fabricmanager": None},  # the operator's driver container runs Fabric Manager
     {"nvidia_nvswitches": 4, "nvidia_smi": True, "fabricmanager": {"installed": True, "active": True}},
     {"containerd": {"imports": ["/etc/containerd/conf.d/*.toml"],
                     "drop_ins": [{"path": TOOLKIT_DROP_IN, "imported": True}]}},
     {"containerd": {"version": "1.7.28", "config_version": 2}, "kubelet_version": "1.35.9"},
     {"cgroup_v2": False, "kubelet_version": None},  # no kubelet yet: C03 cannot judge (skip, not fail)
     {"unattended_upgrades": UNATTENDED_ON, "gpu_packages": [
         {"name": "linux-image-generic", "version": "6.8.0.48.48", "held": False},
         {"name": "linux-headers-generic", "version": "6.8.0.48.48", "held": False}]},  # headers come along
     {"unattended_upgrades": {**UNATTENDED_ON, "blacklist": ["linux-", "nvidia-"]}, "nvidia_smi": True,
      "gpu_packages": [{"name": "linux-image-generic", "version": "1", "held": False},
                       {"name": "nvidia-driver-595-server", "version": "595.91.07-0ubuntu1", "held": False}]},
     {"unattended_upgrades": {**UNATTENDED_ON, "enabled": False},
      "gpu_packages": [{"name": "linux-image-generic", "version": "1", "held": False}]},
     {"kernels": [{"release": "6.8.0-40-generic", "headers": False, "image": True},  # older: never boots first
                  {"release": "6.8.0-45-generic", "headers": True, "image": True}]}],
)  # fmt: skip
def test_new_rules_pass(changes: dict[str, Any]) -> None:
    findings = [f for f in run(Snapshot(hosts={"solo": facts(**changes)})) if f.id in NEW_RULES]
    assert {f.id for f in findings} == set(NEW_RULES)
    assert {f.status for f in findings} <= {"pass", "skip"}, [f for f in findings if f.status not in ("pass", "skip")]


def test_unattended_upgrades_warn_names_the_packages_and_holds_them() -> None:
    host = facts(unattended_upgrades={**UNATTENDED_ON, "automatic_reboot": True}, nvidia_smi=True, gpu_packages=[
        {"name": "linux-image-generic", "version": "6.8.0.48.48", "held": False},
        {"name": "nvidia-driver-595-server", "version": "595.91.07-0ubuntu1", "held": False},
        {"name": "libnvidia-compute-595-server", "version": "595.91.07-0ubuntu1", "held": True},
        {"name": "nvidia-dkms-595-server", "version": "595.91.07-0ubuntu1", "held": False}])  # fmt: skip
    [f] = [f for f in run(Snapshot(hosts={"solo": host})) if f.id == "H13-unattended-upgrades"]
    assert f.status == "warn" and "new kernels without headers" in f.summary and "new NVIDIA driver" in f.summary
    assert "linux-headers-generic not installed" in f.summary, "DKMS builds the host driver: headers matter"
    assert "Automatic-Reboot" in f.evidence and "-security" in f.evidence
    assert f.fix.startswith("sudo apt-mark hold linux-image-generic nvidia-dkms-595-server nvidia-driver-595-server")
    assert "libnvidia-compute-595-server" not in f.fix.split(";")[0], "already held"
    assert "sudo apt-get install -y linux-headers-generic" in f.fix


def test_config_version_older_than_containerd_writes_is_a_warning() -> None:
    [f] = [f for f in run(Snapshot(hosts={"solo": facts(containerd={"config_version": 2})}))
           if f.id == "C05-containerd-config-version"]  # fmt: skip
    assert f.status == "warn" and "migrates it to version 3 at every start" in f.summary


def test_kubelet_1_34_on_cgroup_v1_is_a_warning() -> None:
    [f] = [f for f in run(Snapshot(hosts={"solo": facts(cgroup_v2=False, kubelet_version="1.34.11")}))
           if f.id == "C03-cgroup-v2"]  # fmt: skip
    assert f.status == "warn" and "deprecated" in f.summary


def test_c04_below_containerds_floor_fails_and_an_unlisted_branch_warns() -> None:
    """containerd 1.7.24 with the kubelet 1.35: below 1.7.28, the floor RELEASES.md lists on its 1.7 branch for 1.35,
    which is gpustack's minimum since issue 30: a failure with the way out. 2.1.9 with the kubelet 1.36 (a branch
    RELEASES.md does not list for 1.36, older than the listed ones): a warning."""
    host = facts(
        containerd={**HEALTHY["containerd"], "version": "1.7.24", "config_version": 2}, kubelet_version="1.35.9"
    )
    (f,) = [f for f in run(Snapshot(hosts={"h": host})) if f.id == "C04-containerd-version"]
    assert (
        f.status == "fail" and "containerd 1.7.24 is too old for Kubernetes 1.35 (needs 1.7.28 or newer)" in f.summary
    )
    assert "gpustack up --only containerd" in f.fix
    host = facts(containerd={**HEALTHY["containerd"], "version": "2.1.9"}, kubelet_version="1.36.5")
    (f,) = [f for f in run(Snapshot(hosts={"h": host})) if f.id == "C04-containerd-version"]
    assert f.status == "warn" and "containerd 2.1 is not among containerd's recommendations" in f.summary


def test_without_host_facts_a_check_says_it_did_not_run() -> None:
    """issue 31: 'swap is off: no host facts collected' read like a result; every host check without facts
    says the same 'not checked: ...' (so the report gives them one row)."""
    from gpustack.diagnose import checks_host
    from gpustack.diagnose.snapshot import Snapshot

    found = checks_host._each(Snapshot(), "H01-swap", "host", lambda name, facts: None, what="swap is off")
    assert [(f.status, f.summary) for f in found] == [
        ("skip", "not checked: no host facts collected (see H00-host-facts)")
    ]
