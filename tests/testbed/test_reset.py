"""`gpustack reset` on a real host after `up`: Kubernetes' and gpustack's traces are removed, the
host's own firewall rules, chain policy and SSH stay exactly as they were; `--restore` puts back
the fstab up changed; this machine's state of the cluster is archived.

kubeadm/kubelet/kubectl/helm on the host are the test bed's doubles (the kubeadm double records
`reset`); kube-proxy and Flannel do not run here, so the test creates chains and links named as
they name theirs before resetting."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cluster import doubles_log, run_gpustack, up, write_config
from .hosts import Host, Testbed
from .prepare import fstab_swap
from .pytest_plugin import TestbedFactory
from .services import Sources

#: What kube-proxy, the kubelet and Flannel leave in iptables (names as they make them).
KUBE_TRACES = [
    "iptables -w -N KUBE-FIREWALL",
    "iptables -w -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -j DROP",
    "iptables -w -A INPUT -j KUBE-FIREWALL",
    "iptables -w -N KUBE-SERVICES",
    "iptables -w -A OUTPUT -m conntrack --ctstate NEW -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
    "iptables -w -N FLANNEL-FWD",
    "iptables -w -A FORWARD -m comment --comment 'flanneld forward' -j FLANNEL-FWD",
    "iptables -w -t nat -N KUBE-POSTROUTING",
    "iptables -w -t nat -A POSTROUTING -m comment --comment 'kubernetes postrouting rules' -j KUBE-POSTROUTING",
    "iptables -w -t nat -N CNI-HOSTPORT-DNAT",
    "iptables -w -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
    "ip6tables -w -N KUBE-FIREWALL",
    "ip6tables -w -A INPUT -j KUBE-FIREWALL",
    "ip link add cni0 type bridge",
    "ip link add flannel.1 type vxlan id 1 dstport 8472 nolearning",  # as Flannel makes it
    "mkdir -p /etc/cni/net.d /var/lib/kubelet/pods /var/lib/etcd",
    "echo '{}' > /etc/cni/net.d/10-flannel.conflist",
]
#: The site's own firewall: a chain, a rule in it, and a DROP policy on INPUT with SSH allowed.
SITE_FIREWALL = [
    "iptables -w -N SITE-RULES",
    "iptables -w -A SITE-RULES -p tcp --dport 7777 -j ACCEPT",
    "iptables -w -A INPUT -j SITE-RULES",
    "iptables -w -A INPUT -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
    "iptables -w -A INPUT -p tcp --dport 22 -j ACCEPT",
    "iptables -w -A INPUT -i lo -j ACCEPT",
    "iptables -w -P INPUT DROP",
]


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Testbed:
    return testbed_factory(["rst"], prepare=fstab_swap())


def test_reset_removes_kubernetes_and_keeps_the_hosts_own_firewall(
    bed: Testbed, tmp_path: Path, sources: Sources
) -> None:
    host = bed.hosts[0]
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    state = tmp_path / "state"
    for cmd in SITE_FIREWALL:
        host.sudo(cmd, check=True)
    before_up = _netfilter(host)
    assert up(cfg, state).rc == 0
    assert "#/swap.img" in host.sudo("cat /etc/fstab", check=True).stdout.replace("# ", "#")
    for cmd in KUBE_TRACES:
        host.sudo(cmd, check=True)
    before = host.sudo("iptables -S", check=True).stdout
    site_rules = [r for r in before.splitlines() if "SITE-RULES" in r or "--dport 22" in r or "-P " in r]

    # a dry run describes and changes nothing
    dry = run_gpustack(cfg, state, "reset", "--dry-run")
    assert dry.rc == 0, dry.output
    assert "No table is flushed" in dry.stdout and "archived under" in dry.stdout
    assert host.sudo("test -d /etc/kubernetes", check=False).returncode == 0
    assert host.sudo("iptables -S", check=True).stdout == before

    # without a terminal and without --yes: refused, nothing touched
    refused = run_gpustack(cfg, state, "reset")
    assert refused.rc == 2 and "--yes" in refused.stderr

    # a site's own containerd drop-in in the directory gpustack made: never gpustack's to delete
    assert host.sudo("test -f /etc/gpustack/containerd-drop-in-dir.created", check=False).returncode == 0
    host.sudo("echo '# the site' > /etc/containerd/conf.d/50-site.toml", check=True)

    done = run_gpustack(cfg, state, "reset", "--yes", "--restore")
    assert done.rc == 0, done.output
    rules = host.sudo("iptables -S", check=True).stdout
    assert not any(name in rules for name in ("KUBE-", "FLANNEL", "GPUSTACK-INPUT")), rules
    # every table, both families: exactly what the host had before `up`
    assert _netfilter(host) == before_up
    assert [r for r in rules.splitlines() if "SITE-RULES" in r or "--dport 22" in r or "-P " in r] == site_rules
    assert "-P INPUT DROP" in rules
    nat = host.sudo("iptables -t nat -S", check=True).stdout
    assert "KUBE-" not in nat and "CNI-" not in nat
    assert "KUBE-" not in host.sudo("ip6tables -S", check=True).stdout
    assert host.run("true").returncode == 0, "SSH still works"
    for path in ("/etc/kubernetes", "/var/lib/kubelet", "/var/lib/etcd", "/etc/gpustack"):
        assert host.sudo(f"test -e {path}", check=False).returncode == 1, path
    # containerd's CRI plugin makes its CNI config directory again when --restore restarts it:
    # the directory may come back, Flannel's configuration may not
    assert host.sudo("find /etc/cni/net.d -type f", check=False).stdout.strip() == ""
    assert host.sudo("test -e /var/lib/gpustack/stages", check=False).returncode == 1
    links = host.run("ip -o link show", check=True).stdout
    assert "cni0" not in links and "flannel.1" not in links
    assert host.run("systemctl is-enabled gpustack-firewall", check=False).stdout.strip() != "enabled"
    assert host.run("systemctl is-enabled kubelet", check=False).stdout.strip() == "disabled"
    calls = doubles_log(host.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
    assert ["reset", "--force", "--cri-socket", "unix:///run/containerd/containerd.sock"] in calls
    # packages kept (no --purge) but no longer held
    assert not {"kubeadm", "kubelet", "kubectl"} & set(host.run("apt-mark showhold", check=True).stdout.split())
    assert "kubeadm" in host.run("dpkg-query -W kubeadm", check=True).stdout
    # --restore: the fstab as it was before up
    fstab = host.sudo("cat /etc/fstab", check=True).stdout
    assert any(line.split()[:3] == ["/swap.img", "none", "swap"] for line in fstab.splitlines())
    # this machine: the cluster's state archived, not lost
    assert not (state / "clusters" / "gpustack").exists()
    (archived,) = (state / "archive").iterdir()
    assert (archived / "admin.conf").is_file() and archived.stat().st_mode & 0o777 == 0o700

    # the site's drop-in stays, and so its directory
    assert host.sudo("cat /etc/containerd/conf.d/50-site.toml", check=True).stdout == "# the site\n"

    # a second reset finds nothing to do: nothing changes, nothing is created (here or on the host)
    again = run_gpustack(cfg, state, "reset", "--yes")
    assert again.rc == 0, again.output
    assert all(v == 0 for v in again.changed().values()), again.changed()
    assert [p.name for p in (state / "archive").iterdir()] == [archived.name], "no second (empty) archive"
    assert not (state / "clusters" / "gpustack").exists()

    # --purge on a reset host
    purged = run_gpustack(cfg, state, "reset", "--yes", "--purge")
    assert purged.rc == 0, purged.output
    status = host.run("dpkg-query -W -f='${Status}' kubeadm", check=False)
    assert status.returncode != 0 or "not-installed" in status.stdout, status.stdout
    assert host.sudo("test -e /etc/apt/sources.list.d/kubernetes.list", check=False).returncode == 1
    assert [r for r in host.sudo("iptables -S", check=True).stdout.splitlines() if "SITE-RULES" in r] == [
        r for r in site_rules if "SITE-RULES" in r
    ]

    # a later `up` builds the node again, and the run after it changes nothing
    again_up = up(cfg, state)
    assert again_up.rc == 0, again_up.output
    converged = up(cfg, state)
    assert converged.rc == 0, converged.output
    assert all(v == 0 for v in converged.changed().values()), converged.changed()


def _netfilter(host: Host) -> dict[str, str]:
    """`-S` of every table of both families (the rules and policies, without counters)."""
    return {
        f"{tool} -t {table}": host.sudo(f"{tool} -w -t {table} -S", check=True).stdout
        for tool in ("iptables", "ip6tables")
        for table in ("filter", "nat", "mangle", "raw")
    }
