"""`gpustack up --dry-run` (Ansible check mode) reports what it would do and changes nothing: on a
fresh real host it finishes and reports changes. (On a converged host it reports none:
tests/testbed/test_up_single.py, on that module's converged host.)"""

from __future__ import annotations

from pathlib import Path

from .cluster import up, write_config
from .pytest_plugin import TestbedFactory
from .services import Sources

# The Ansible stages (site.yml plays): what --dry-run runs in check mode.
HOST_STAGES = ["os", "firewall", "containerd", "kubernetes", "control-plane", "workers", "network", "helm"]


def test_dry_run_changes_nothing(
    testbed_factory: TestbedFactory,
    tmp_path: Path,
    sources: Sources,
) -> None:
    bed = testbed_factory(["dry"])
    host = bed.hosts[0]
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources, via_proxy=False)
    before = host.sudo(
        "iptables -S; ls /etc/modules-load.d /etc/sysctl.d /etc/apt/sources.list.d; cat /etc/fstab", check=True
    ).stdout
    host.sudo("touch /run/gpustack-dry-run-marker", check=True)
    r = up(cfg, tmp_path / "state", "--dry-run")
    assert r.rc == 0, r.output
    assert "dry run" in r.stdout
    summary = r.summary()
    # every host stage ran to the end
    assert {stage: summary[stage]["status"] for stage in HOST_STAGES} == {
        stage: "changed" if summary[stage]["changed"] else "ok" for stage in HOST_STAGES
    }, summary
    assert summary["os"]["changed"] > 0  # it would change things...
    after = host.sudo(
        "iptables -S; ls /etc/modules-load.d /etc/sysctl.d /etc/apt/sources.list.d; cat /etc/fstab", check=True
    ).stdout
    assert after == before  # ...but changed nothing
    assert host.run("dpkg -s kubeadm", check=False).returncode != 0
    assert host.sudo("test -e /etc/kubernetes/admin.conf", check=False).returncode == 1
    newer = host.sudo(
        "find /etc /usr/local /var/lib/kubelet /var/cache/gpustack -newer /run/gpustack-dry-run-marker", check=False
    )
    assert newer.stdout.strip() == "", newer.stdout
