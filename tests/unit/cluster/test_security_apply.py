"""gpustack/cluster/security_apply.py: what differs between each control plane's flags (its mirror pods) and what
gpustack.yaml's ``security:`` renders, the ClusterConfiguration gpustack uploads, and the Secret rewrite record. The
real kubeadm's manifests from both are in tests/controlplane/test_security_apply.py."""

from __future__ import annotations

import stat
from typing import Any

import pytest
import yaml

from gpustack.cluster import security_apply as sa
from gpustack.config.model import Config
from gpustack.render.kubeadm import render_init_config
from gpustack.render.security import kubeadm_security

NODES = [{"name": f"cp{i}", "address": f"192.0.2.1{i}", "role": "control-plane", "connection": "local"}
         for i in (1, 2)]  # fmt: skip


def cfg(**sec: Any) -> Config:
    return Config.model_validate({"nodes": NODES, "cluster": {"virtual_ip": "192.0.2.100"}, "security": sec})


def argv(component: str, c: Config, *, drop: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> list[str]:
    """A command line as kubeadm writes it: its own flags, then gpustack's (``drop``: left out)."""
    own = {"kube-apiserver": ["--advertise-address=192.0.2.11", "--authorization-mode=Node,RBAC"],
           "kube-controller-manager": ["--leader-elect=true"], "kube-scheduler": ["--leader-elect=true"]}  # fmt: skip
    mine = [f"--{k}={v}" for k, v in sa.wanted(c)[component].items() if k not in drop]
    return [component, *own[component], *mine, *extra]


def commands(c: Config, **per_node: dict[str, list[str] | None]) -> dict[str, dict[str, list[str] | None]]:
    base = {comp: argv(comp, c) for comp in sa.COMPONENTS}
    return {n["name"]: {**base, **per_node.get(str(n["name"]), {})} for n in NODES}


def test_managed_names_every_flag_security_can_render() -> None:
    everything = cfg(tls_cipher_suites=["TLS_AES_128_GCM_SHA256"], profiling=True)
    sec = kubeadm_security(everything)
    assert {k for k, _ in sec.api_server_args} == set(sa.MANAGED["kube-apiserver"])
    assert [k for k, _ in sec.controller_manager_args] == list(sa.MANAGED["kube-controller-manager"])
    assert [k for k, _ in sec.scheduler_args] == list(sa.MANAGED["kube-scheduler"])


def test_a_cluster_as_configured_has_nothing_to_change() -> None:
    c = cfg()
    found = sa.drift(c, ["cp1", "cp2"], commands(c))
    assert found.nodes == [] and found.unread == {} and found.encryption() is None
    assert sa.rows(found) == [["cp1", "as gpustack.yaml says", "none"], ["cp2", "as gpustack.yaml says", "none"]]


def test_each_differing_flag_is_named_per_control_plane_with_the_pods_that_restart() -> None:
    c = cfg()
    old = cfg(encryption_at_rest=False, audit={"enabled": False}, profiling=True)
    found = sa.drift(c, ["cp1", "cp2"], commands(c, cp2={
        "kube-apiserver": argv("kube-apiserver", old, extra=("--anonymous-auth=false",)),
        "kube-scheduler": argv("kube-scheduler", old)}))  # fmt: skip
    assert found.nodes == ["cp2"] and found.changes["cp1"] == []
    assert found.restarts("cp2") == ["kube-apiserver", "kube-scheduler"]  # the controller-manager stays
    changed = {(ch.component, ch.flag): ch for ch in found.changes["cp2"]}
    assert set(changed) == {("kube-apiserver", f) for f in (
        "encryption-provider-config", "audit-policy-file", "audit-log-path", "audit-log-maxage", "audit-log-maxbackup",
        "audit-log-maxsize", "profiling")} | {("kube-scheduler", "profiling")}  # fmt: skip
    assert changed[("kube-apiserver", "profiling")].describe() == "--profiling: true -> false"
    assert changed[("kube-apiserver", "encryption-provider-config")].describe() == (
        "--encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml added"
    )
    assert found.encryption() == "on"  # the Secrets are to be rewritten once every API server encrypts
    (row,) = [r for r in sa.rows(found) if r[0] == "cp2"]
    assert row[2] == "kube-apiserver, kube-scheduler" and "--audit-log-maxage=30 added" in row[1]
    # a flag gpustack does not manage (--anonymous-auth) is never compared


def test_a_flag_no_longer_rendered_is_removed_and_encryption_off_is_named() -> None:
    now = cfg(encryption_at_rest=False, tls_cipher_suites=[])
    before = cfg(tls_cipher_suites=["TLS_AES_128_GCM_SHA256"])
    found = sa.drift(now, ["cp1"], {"cp1": {comp: argv(comp, before) for comp in sa.COMPONENTS}})
    assert {ch.describe() for ch in found.changes["cp1"]} == {
        "--encryption-provider-config removed (was /etc/kubernetes/enc/encryption-config.yaml)",
        "--tls-cipher-suites removed (was TLS_AES_128_GCM_SHA256)"}  # fmt: skip
    assert found.encryption() == "off"


def test_a_control_plane_without_readable_mirror_pods_is_said_so() -> None:
    c = cfg()
    found = sa.drift(c, ["cp1", "cp2"], {"cp1": {comp: argv(comp, c) for comp in sa.COMPONENTS},
                                         "cp2": {"kube-apiserver": None}})  # fmt: skip
    assert found.unread == {"cp2": list(sa.COMPONENTS)} and found.nodes == []
    assert sa.rows(found)[1][1].startswith("not read: no mirror pod with a command line for kube-apiserver")


def test_mirror_pods_give_each_nodes_command_lines() -> None:
    pods = [
        {"metadata": {"name": "kube-apiserver-cp1", "namespace": "kube-system", "labels": {"component": "kube-apiserver"}},
         "spec": {"nodeName": "cp1", "containers": [{"name": "kube-apiserver", "command": ["kube-apiserver", "--a=1"]}]}},
        {"metadata": {"name": "etcd-cp1", "namespace": "kube-system", "labels": {"component": "etcd"}},
         "spec": {"nodeName": "cp1", "containers": [{"name": "etcd", "command": ["etcd"]}]}},
        {"metadata": {"name": "kube-scheduler-cp1", "namespace": "kube-system", "labels": {"component": "kube-scheduler"}},
         "spec": {"nodeName": "cp1", "containers": [{"name": "kube-scheduler"}]}},
    ]  # fmt: skip
    assert sa.mirror_commands(pods) == {"cp1": {"kube-apiserver": ["kube-apiserver", "--a=1"], "kube-scheduler": None}}


def cluster_configuration(c: Config) -> str:
    (doc,) = [d for d in yaml.safe_load_all(render_init_config(c)) if d and d["kind"] == "ClusterConfiguration"]
    return yaml.safe_dump(doc)


def test_the_uploaded_configuration_replaces_only_what_security_renders() -> None:
    old = yaml.safe_load(cluster_configuration(cfg(encryption_at_rest=False, audit={"enabled": False}, profiling=True)))
    old["apiServer"]["extraArgs"].insert(0, {"name": "oidc-issuer-url", "value": "https://id.example"})
    old["apiServer"]["extraVolumes"].append({"name": "site-oidc", "hostPath": "/etc/oidc", "mountPath": "/etc/oidc"})
    old["scheduler"]["extraArgs"].append({"name": "v", "value": "2"})
    merged = yaml.safe_load(sa.merged_cluster_configuration(yaml.safe_dump(old), cfg()))
    want = yaml.safe_load(cluster_configuration(cfg()))
    api = merged["apiServer"]
    assert api["extraArgs"][0] == {"name": "oidc-issuer-url", "value": "https://id.example"}  # the site's, kept
    assert api["extraArgs"][1:] == want["apiServer"]["extraArgs"]
    assert {"name": "site-oidc", "hostPath": "/etc/oidc", "mountPath": "/etc/oidc"} in api["extraVolumes"]
    assert [v for v in api["extraVolumes"] if v["name"].startswith("gpustack-")] == want["apiServer"]["extraVolumes"]
    assert merged["scheduler"]["extraArgs"] == [{"name": "v", "value": "2"}, {"name": "profiling", "value": "false"}]
    assert merged["controllerManager"]["extraArgs"] == want["controllerManager"]["extraArgs"]
    # everything else as it was; merging again changes nothing
    assert {k: v for k, v in merged.items() if k not in sa.SECTION.values()} == {
        k: v for k, v in old.items() if k not in sa.SECTION.values()}  # fmt: skip
    again = sa.merged_cluster_configuration(yaml.safe_dump(merged, sort_keys=False), cfg())
    assert again == yaml.safe_dump(merged, sort_keys=False)


def test_not_a_cluster_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="not a kubeadm ClusterConfiguration"):
        sa.merged_cluster_configuration("kind: InitConfiguration\n", cfg())
    v1beta3 = "kind: ClusterConfiguration\napiServer:\n  extraArgs:\n    profiling: 'true'\n"
    with pytest.raises(ValueError, match="kubeadm v1beta3"):
        sa.merged_cluster_configuration(v1beta3, cfg())


def test_the_rewrite_record_is_private_and_cleared(tmp_path: Any) -> None:
    c = cfg()
    assert not sa.rewrite_pending(c, tmp_path)
    path = sa.record_rewrite(c, tmp_path)
    assert sa.rewrite_pending(c, tmp_path) and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    sa.clear_rewrite(c, tmp_path)
    assert not sa.rewrite_pending(c, tmp_path) and not path.exists()
    path.write_text("not json")
    assert not sa.rewrite_pending(c, tmp_path)
