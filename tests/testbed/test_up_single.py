"""`gpustack up` on one real host (systemd, sshd, containerd, iptables, apt all real; kubeadm,
kubelet, kubectl and helm are TEST DOUBLES from the bed's signed apt repo and file server), all on
one booted host and one fresh run (a module-scoped fixture: a boot and a fresh `up` cost minutes on
the 2-core CI machine):

- scripts/bench_up.py's smoke path makes the fresh and the converged run (its ``one_host``, as
  ``bench(..., smoke=True)`` runs it) and prints its table and result line;
- the host state the fresh run left, read from the host itself, and the converged run changing nothing;
- ``up --dry-run`` on the converged host reports no change and changes nothing;
- converged re-runs skip every stage; drift (a deleted firewall jump, SystemdCgroup turned off by
  hand, a forgotten stamp) sends exactly the affected stages back to the host, which repairs it;
  ``--full`` visits everything.

The tests run in this order and each leaves the host converged; each also runs on its own (node id).
The host has a swap line in fstab and a host-level node_exporter on 9100, as on many real servers."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpustack.config import pins

from .cluster import UpRun, doubles_log, up
from .hosts import Host, Testbed
from .prepare import compose, fake_node_exporter, fstab_swap
from .services import Sources

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_up.py"
RESULT = re.compile(r"^bench_up: converged/fresh=(\d+\.\d\d) three/one=(\d+\.\d\d|- \(smoke: one host only\))$", re.M)
#: the stages of `up` after the preflight (site.yml's plays)
HOST_STAGES = ["os", "firewall", "containerd", "kubernetes", "control-plane", "workers", "network", "helm"]
#: the stages whose play has work on a single control-plane host (no workers)
VISITED = [s for s in HOST_STAGES if s != "workers"]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_up_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass
class Solo:
    bed: Testbed
    host: Host
    cfg: Path
    state: Path
    #: the bench's rows: fresh, then converged (label, wall, summary, run)
    rows: list[Any]
    report: str
    proxy_before: int

    @property
    def first(self) -> UpRun:
        return self.rows[0].run

    @property
    def second(self) -> UpRun:
        return self.rows[1].run


@pytest.fixture(scope="module")
def solo(
    rootfs: Path, testbed_network: str, sources: Sources, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Solo]:
    work = tmp_path_factory.mktemp("solo")
    script = load_script()
    with Testbed(["solo"], work / "bed", prepare=compose(fstab_swap(), fake_node_exporter()), rootfs=rootfs) as bed:
        proxy_before = sources.proxy.count()
        state = work / "state"
        rows = script.one_host(bed, state, sources)  # bench(..., smoke=True) on this host: fresh, converged
        yield Solo(bed, bed.hosts[0], state.parent / "fresh.yaml", state, rows, script.report(rows), proxy_before)


def _visited(run: UpRun, host: str) -> set[str]:
    """Stages of the host layer whose play ran tasks on ``host`` (the preflight always does)."""
    return {stage for stage, row in run.summary().items() if host in row["hosts"] and stage != "preflight"}


def test_bench_up_smoke_prints_its_result_line(solo: Solo) -> None:
    """The figures are printed, not asserted (they are the benchmark's output); what is asserted: both
    runs succeeded, the fresh one changed the host, the converged one nothing, and the result line parses."""
    out = solo.report
    print(out)
    m = RESULT.search(out)
    assert m is not None and m.group(0) == out.splitlines()[-1], out
    assert 0 < float(m.group(1)) < 1, out  # the converged re-run is faster than the fresh one
    assert re.search(r"^fresh +[\d.]+ +[1-9]\d* ", out, re.M), out  # the fresh run changed the host
    assert re.search(r"^converged +[\d.]+ +0 ", out, re.M), out  # the re-run changed nothing


def test_single_node_up_with_doubles_converges(solo: Solo, sources: Sources) -> None:
    host, state, first = solo.host, solo.state, solo.first
    before_proxy = solo.proxy_before
    assert first.rc == 0, first.output
    # preflight warned about swap and the host node_exporter, then everything ran
    assert "P06-swap" in first.stdout and "P16-node-exporter" in first.stdout
    summary = first.summary()
    assert list(summary) == ["preflight", *HOST_STAGES]
    assert all(row["status"] in {"ok", "changed"} for row in summary.values()), summary
    assert summary["control-plane"]["changed"] > 0

    # --- host state, read from the host itself
    assert host.run("cat /proc/sys/net/ipv4/ip_forward", check=True).stdout.strip() == "1"
    assert host.run("cat /proc/sys/net/bridge/bridge-nf-call-iptables", check=True).stdout.strip() == "1"
    sysctl = host.sudo("cat /etc/sysctl.d/99-gpustack-kubernetes.conf", check=True).stdout
    assert "net.ipv4.ip_forward" in sysctl and "bridge-nf-call-ip6tables" in sysctl
    assert set(host.sudo("cat /etc/modules-load.d/gpustack.conf", check=True).stdout.split()) >= {
        "overlay",
        "br_netfilter",
    }
    fstab = host.sudo("cat /etc/fstab", check=True).stdout
    assert "#/swap.img" in fstab.replace("# ", "#") and not any(
        line.split()[2:3] == ["swap"]
        for line in fstab.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    assert host.sudo("ls /etc/ | grep -c '^fstab\\..*~$'", check=False).stdout.strip() != "0", "fstab backup kept"
    containerd = host.sudo("cat /etc/containerd/config.toml", check=True).stdout
    assert "SystemdCgroup = true" in containerd
    assert host.run("systemctl is-active containerd", check=True).stdout.strip() == "active"
    assert "http-proxy.conf" in host.sudo("ls /etc/systemd/system/containerd.service.d/", check=True).stdout
    assert (
        sources.proxy.url
        in host.sudo("cat /etc/systemd/system/containerd.service.d/http-proxy.conf", check=True).stdout
    )
    # apt repository with signed-by keyring, pinned and held packages
    apt_sources = host.sudo(
        "cat /etc/apt/sources.list.d/kubernetes.list /etc/apt/sources.list.d/kubernetes.sources 2>/dev/null",
        check=False,
    ).stdout
    assert (
        "signed-by=" in apt_sources.lower().replace("signed-by: ", "signed-by=")
        and sources.k8s_repo.url(sources.http.url) in apt_sources
    )
    assert not host.sudo("apt-key list 2>/dev/null | grep -i kubernetes", check=False).stdout.strip()
    versions = host.run(
        "dpkg-query -W -f='${Package}=${Version}\\n' kubeadm kubelet kubectl", check=True
    ).stdout.split()
    patch = pins.KUBERNETES["1.36"]
    assert sorted(versions) == [f"kubeadm={patch}-1.1", f"kubectl={patch}-1.1", f"kubelet={patch}-1.1"]
    held = host.run("apt-mark showhold", check=True).stdout.split()
    assert {"kubeadm", "kubelet", "kubectl"} <= set(held)
    assert sources.proxy.count() > before_proxy, "apt and downloads went through the configured proxy"
    # kubeadm: initialised once from our config file
    calls = doubles_log(host.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
    inits = [c for c in calls if c[:1] == ["init"]]
    assert len(inits) == 1 and "--config" in inits[0]
    kubeadm_cfg = host.sudo("cat /etc/gpustack/kubeadm-config.yaml", check=True).stdout
    assert 'podSubnet: "10.244.0.0/16"' in kubeadm_cfg and "cgroupDriver: systemd" in kubeadm_cfg
    assert f'advertiseAddress: "{host.address}"' in kubeadm_cfg
    assert host.sudo("stat -c %a /etc/gpustack/kubeadm-config.yaml", check=True).stdout.strip() == "600"
    # single node: no control-plane taint
    taints = host.sudo(
        f"kubectl --kubeconfig /etc/kubernetes/admin.conf get node {host.name} -o jsonpath='{{.spec.taints}}'",
        check=True,
    )
    assert "control-plane" not in taints.stdout
    # kubeconfig for the SSH user (0600) and on this machine (0600)
    assert host.run("stat -c %a ~/.kube/config", check=True).stdout.strip() == "600"
    local_kubeconfig = state / "clusters" / "gpustack" / "admin.conf"
    assert local_kubeconfig.exists() and local_kubeconfig.stat().st_mode & 0o777 == 0o600
    # firewall: own chain, one jump
    rules = host.sudo("iptables -S", check=True).stdout
    assert "-N GPUSTACK-INPUT" in rules and rules.count("-A INPUT -j GPUSTACK-INPUT") == 1
    ours = [r for r in rules.splitlines() if r.startswith("-A GPUSTACK-INPUT")]
    assert any(
        "-s 10.244.0.0/16 -d 10.96.0.1/32 -p tcp" in r and "--dport 443" in r and r.endswith("-j ACCEPT") for r in ours
    )
    assert any(f"-s 10.244.0.0/16 -d {host.address}/32 -p tcp" in r and "--dport 6443" in r for r in ours)
    assert any("-p udp" in r and "--dport 8472" in r for r in ours)
    assert any("--dport 30090" in r for r in ours)
    assert ours[-1] == "-A GPUSTACK-INPUT -j RETURN" and not any("DROP" in r or "REJECT" in r for r in ours)
    assert host.run("systemctl is-enabled gpustack-firewall", check=True).stdout.strip() == "enabled"
    # flannel applied with the pod CIDR; helm installed (double) after a checksum-verified download
    flannel = host.sudo("cat /etc/gpustack/flannel/kube-flannel.yml", check=True).stdout
    assert "10.244.0.0/16" in flannel
    assert f"v{pins.HELM_VERSION}" in host.run("/usr/local/bin/helm version --short", check=True).stdout
    # ...and for this machine, where the cluster stage runs it (same checksummed download)
    local_helm = state / "bin" / "helm"
    assert local_helm.is_file() and local_helm.stat().st_mode & 0o111
    assert summary["helm"]["hosts"] == ["localhost", host.name]

    # --- the second run converged: nothing changes anywhere
    second = solo.second
    assert second.rc == 0, second.output
    changed = second.changed()
    assert all(v == 0 for v in changed.values()), changed
    calls = doubles_log(host.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
    assert len([c for c in calls if c[:1] == ["init"]]) == 1

    # the run directory keeps the full event log: the first run's stages; the converged run started
    # no stage playbook (nothing to do), only the preflight's
    assert (first.last_run_dir() / "ansible" / "artifacts" / "site" / "job_events").is_dir()
    run_dir = second.last_run_dir()
    assert run_dir != first.last_run_dir()
    assert (run_dir / "ansible-preflight" / "artifacts" / "preflight" / "job_events").is_dir()
    assert not (run_dir / "ansible").exists()
    facts = json.loads((run_dir / "facts" / f"{host.name}.json").read_text())
    assert facts["kubernetes"]["gpustack_marker"]


def test_dry_run_on_a_converged_host_reports_no_change(solo: Solo) -> None:
    host = solo.host
    host.sudo("touch /run/gpustack-dry-run-marker", check=True)
    # with a proxy, so the containerd and kubelet drop-ins are part of what is checked
    snapshot = (
        "iptables -S; systemctl is-active containerd gpustack-firewall; "
        "cat /var/log/gpustack-doubles/kubeadm.log; md5sum /etc/containerd/config.toml /etc/gpustack/*.* "
        "/etc/apt/sources.list.d/* /usr/local/bin/helm"
    )
    before = host.sudo(snapshot, check=True).stdout
    r = up(solo.cfg, solo.state, "--dry-run")
    assert r.rc == 0, r.output
    assert "dry run" in r.stdout
    summary = r.summary()
    # every stage has its row, and none would change anything
    assert list(summary) == ["preflight", *HOST_STAGES]
    assert all(row["status"] == "ok" for row in summary.values()), summary
    assert all(v == 0 for v in r.changed().values()), r.changed()
    assert host.sudo(snapshot, check=True).stdout == before
    newer = host.sudo("find /etc /usr/local /var/lib/kubelet -newer /run/gpustack-dry-run-marker", check=False)
    assert newer.stdout.strip() == "", newer.stdout


def test_converged_stages_are_skipped_and_drift_is_repaired(solo: Solo) -> None:
    host, cfg, state, first = solo.host, solo.cfg, solo.state, solo.first
    assert set(VISITED) <= _visited(first, host.name)
    stamps = host.sudo("ls /var/lib/gpustack/stages", check=True).stdout.split()
    assert sorted(stamps) == sorted(f"{s}.json" for s in VISITED)
    assert host.sudo("stat -c %a /var/lib/gpustack/stages/os.json", check=True).stdout.strip() == "600"
    stamp = json.loads(host.sudo("cat /var/lib/gpustack/stages/containerd.json", check=True).stdout)
    assert stamp["probes"]["services"]["containerd.service"] == "active/enabled"

    # --- nothing to do: no stage visits the host, nothing changes
    second = up(cfg, state)
    assert second.rc == 0, second.output
    assert "converged, nothing to do:" in second.stdout
    assert _visited(second, host.name) == set(), second.summary()
    assert all(v == 0 for v in second.changed().values()), second.changed()
    facts = json.loads((second.last_run_dir() / "facts" / f"{host.name}.json").read_text())
    assert all(v == {"converged": True, "reasons": []} for v in facts["stages"].values()), facts["stages"]
    summary = second.summary()
    assert summary["os"]["note"] == f"converged on {host.name}"

    # --- drift in two stages, and a stage whose stamp was forgotten (an interrupted run)
    host.sudo("iptables -D INPUT -j GPUSTACK-INPUT", check=True)
    host.sudo("sed -i 's/SystemdCgroup = true/SystemdCgroup = false/' /etc/containerd/config.toml", check=True)
    host.sudo("rm /var/lib/gpustack/stages/kubernetes.json", check=True)
    third = up(cfg, state)
    assert third.rc == 0, third.output
    facts = json.loads((third.last_run_dir() / "facts" / f"{host.name}.json").read_text())
    assert any("file /etc/containerd/config.toml" in r for r in facts["stages"]["containerd"]["reasons"])
    assert any("command chain" in r for r in facts["stages"]["firewall"]["reasons"])
    assert "no stamp" in facts["stages"]["kubernetes"]["reasons"][0]
    assert _visited(third, host.name) == {"firewall", "containerd", "kubernetes"}
    changed = third.changed()
    assert changed["firewall"] > 0 and changed["containerd"] > 0 and changed["kubernetes"] == 0, changed
    rules = host.sudo("iptables -S INPUT", check=True).stdout
    assert rules.count("-A INPUT -j GPUSTACK-INPUT") == 1
    containerd = host.sudo("cat /etc/containerd/config.toml", check=True).stdout
    assert "SystemdCgroup = true" in containerd and "SystemdCgroup = false" not in containerd
    assert host.run("systemctl is-active containerd", check=True).stdout.strip() == "active"

    # --- converged again; --full visits every stage and still changes nothing
    fourth = up(cfg, state)
    assert fourth.rc == 0 and _visited(fourth, host.name) == set(), fourth.summary()
    full = up(cfg, state, "--full")
    assert full.rc == 0, full.output
    assert set(VISITED) <= _visited(full, host.name)
    assert all(v == 0 for v in full.changed().values()), full.changed()
