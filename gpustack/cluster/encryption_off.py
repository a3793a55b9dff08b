"""Encryption at rest turned off on a running cluster that encrypts: refused (exit 2) by ``gpustack up`` and
``gpustack security apply`` before anything changes, with the way back and the way through.

Why refused (docs/decisions.md, "Applying changed `security:` settings"): the API server reads Secrets written with
the key only while its EncryptionConfiguration names the key; `up` with encryption off would stop writing the file,
and a control plane joined afterwards would start its API server from the kubeadm-config ConfigMap's flag with no
file. Decrypting is upstream's procedure (kubernetes/website
``content/en/docs/tasks/administer-cluster/decrypt-data.md``): ``identity`` first on every API server, each
restarted; every Secret rewritten; only then the flag removed. gpustack does not automate it (three phases for a
change that makes a cluster less secure); :data:`HOW` says it.

What "the cluster encrypts" means here: an API server's mirror pod runs with ``--encryption-provider-config`` (the
same judgement as ``security apply``: :meth:`gpustack.cluster.security_apply.Drift.encryption`). When the API cannot
be read, the hosts decide: a control plane with a cluster on it (``/etc/kubernetes/admin.conf``, the facts'
``kubernetes.admin_conf``) and this machine's key store holding the cluster's key (made by the `up` that built it
with encryption on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpustack.config.model import Config
from gpustack.errors import ConfigError, GpustackError
from gpustack.runners.kube import Kube

SUMMARY = (
    "security.encryption_at_rest is off but the API servers encrypt Secrets: {command} does not turn encryption off "
    "(every Secret must first be rewritten in clear with the key still readable); nothing was changed"
)
HOW = (
    "keep it on: set security.encryption_at_rest: true again (the default). To decrypt anyway, upstream's steps "
    "(kubernetes.io, tasks/administer-cluster/decrypt-data; docs/lifecycle.md, 'Turning encryption at rest off'): "
    "on every control plane put `- identity: {}` first in /etc/kubernetes/enc/encryption-config.yaml (the key after "
    "it) and restart its API server; rewrite every Secret (kubectl get secrets -A -o json | kubectl replace -f -); "
    "then remove --encryption-provider-config from the kubeadm-config ConfigMap and the manifests; only then set "
    "security.encryption_at_rest: false"
)


def refusal(command: str) -> ConfigError:
    return ConfigError(SUMMARY.format(command=command), hint=HOW)


def api_encrypts(cfg: Config, kube: Kube) -> bool:
    """An API server's mirror pod runs with the EncryptionConfiguration flag that ``cfg`` would remove."""
    from gpustack.cluster import security_apply as sa

    pods = kube.list_all("/api/v1/namespaces/kube-system/pods", {"labelSelector": "tier=control-plane"})
    found = sa.drift(cfg, [n.name for n in cfg.control_planes], sa.mirror_commands(pods))
    return found.encryption() == "off"


def built(cfg: Config, facts: Mapping[str, Any]) -> bool:
    """A control plane holds a cluster (its facts: ``/etc/kubernetes/admin.conf`` exists)."""
    for node in cfg.control_planes:
        host = facts.get(node.name)
        kubernetes = host.get("kubernetes") if isinstance(host, Mapping) else None
        if isinstance(kubernetes, Mapping) and kubernetes.get("admin_conf") is True:
            return True
    return False


def hosts_encrypt(cfg: Config, facts: Mapping[str, Any], root: Path | None = None) -> bool:
    """A control plane holds a cluster and this machine's key store holds the cluster's key."""
    from gpustack.render.encryption_keys import load_keys

    return built(cfg, facts) and bool(load_keys(cfg, root))


def refuse_at_up(
    cfg: Config,
    facts: Mapping[str, Any],
    *,
    kube: Callable[[Config], Kube] | None = None,
    root: Path | None = None,
) -> None:
    """`up`'s guard after the preflight: exit 2 when ``cfg`` turns encryption off on a cluster that encrypts."""
    if cfg.security.encryption_at_rest:
        return
    if not built(cfg, facts):
        return  # no cluster yet: nothing is encrypted
    from gpustack.cluster.security_apply import admin_kube

    client = kube or admin_kube
    try:
        encrypts = api_encrypts(cfg, client(cfg))
    except GpustackError:
        encrypts = hosts_encrypt(cfg, facts, root)
    if encrypts:
        raise refusal("`gpustack up`")
