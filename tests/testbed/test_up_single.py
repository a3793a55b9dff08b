"""`gpustack up` on one real host (systemd, sshd, containerd, iptables, apt all real; kubeadm,
kubelet, kubectl and helm are TEST DOUBLES from the bed's signed apt repo and file server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpustack.config import pins

from .cluster import doubles_log, up, write_config
from .hosts import Testbed
from .prepare import compose, fake_node_exporter, fstab_swap
from .pytest_plugin import TestbedFactory
from .services import Sources


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Testbed:
    # a swap line in fstab and a host-level node_exporter on 9100, as on many real servers
    return testbed_factory(["solo"], prepare=compose(fstab_swap(), fake_node_exporter()))


def test_single_node_up_with_doubles_converges(
    bed: Testbed,
    tmp_path: Path,
    sources: Sources,
) -> None:
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    state = tmp_path / "state"
    host = bed.hosts[0]
    before_proxy = sources.proxy.count()

    first = up(cfg, state)
    assert first.rc == 0, first.output
    # preflight warned about swap and the host node_exporter, then everything ran
    assert "P06-swap" in first.stdout and "P16-node-exporter" in first.stdout
    summary = first.summary()
    assert list(summary) == [
        "preflight",
        "os",
        "firewall",
        "containerd",
        "kubernetes",
        "control-plane",
        "workers",
        "network",
        "helm",
    ]
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
    assert sorted(versions) == ["kubeadm=1.36.4-1.1", "kubectl=1.36.4-1.1", "kubelet=1.36.4-1.1"]
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

    # --- a second run converges: nothing changes anywhere
    second = up(cfg, state)
    assert second.rc == 0, second.output
    changed = second.changed()
    assert all(v == 0 for v in changed.values()), changed
    calls = doubles_log(host.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
    assert len([c for c in calls if c[:1] == ["init"]]) == 1

    # the run directory keeps the full event log: the first run's stages; the converged run started
    # no stage playbook (nothing to do), only the preflight's
    first_dir, run_dir = sorted((state / "runs").iterdir())[-2:]
    assert (first_dir / "ansible" / "artifacts" / "site" / "job_events").is_dir()
    assert run_dir == second.last_run_dir()
    assert (run_dir / "ansible-preflight" / "artifacts" / "preflight" / "job_events").is_dir()
    assert not (run_dir / "ansible").exists()
    facts = json.loads((run_dir / "facts" / f"{host.name}.json").read_text())
    assert facts["kubernetes"]["gpustack_marker"]
