"""`gpustack up --dry-run` (Ansible check mode) reports what it would do and changes nothing: on a
fresh real host it finishes and reports changes; on a converged host it reports none."""

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


def test_dry_run_on_a_converged_host_reports_no_change(
    testbed_factory: TestbedFactory,
    tmp_path: Path,
    sources: Sources,
) -> None:
    bed = testbed_factory(["conv"])
    host = bed.hosts[0]
    # with a proxy, so the containerd and kubelet drop-ins are part of what is checked
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    state = tmp_path / "state"
    first = up(cfg, state)  # (the bed's `up` runs the host layer only, see cluster.HOST_LAYER_ONLY)
    assert first.rc == 0, first.output

    host.sudo("touch /run/gpustack-dry-run-marker", check=True)
    snapshot = (
        "iptables -S; systemctl is-active containerd gpustack-firewall; "
        "cat /var/log/gpustack-doubles/kubeadm.log; md5sum /etc/containerd/config.toml /etc/gpustack/*.* "
        "/etc/apt/sources.list.d/* /usr/local/bin/helm"
    )
    before = host.sudo(snapshot, check=True).stdout
    r = up(cfg, state, "--dry-run")
    assert r.rc == 0, r.output
    assert "dry run" in r.stdout
    summary = r.summary()
    # every stage ran, and none would change anything
    assert list(summary) == ["preflight", *HOST_STAGES]
    assert all(row["status"] == "ok" for row in summary.values()), summary
    assert all(v == 0 for v in r.changed().values()), r.changed()
    assert host.sudo(snapshot, check=True).stdout == before
    newer = host.sudo("find /etc /usr/local /var/lib/kubelet -newer /run/gpustack-dry-run-marker", check=False)
    assert newer.stdout.strip() == "", newer.stdout
