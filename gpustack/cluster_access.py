"""The Kubernetes client of the commands that read or change the running cluster from this machine
(``node remove``, ``status``), through the one kubeconfig resolution
(:func:`gpustack.runners.kubeconfig.resolve_kubeconfig`): ``status`` reads any cluster the way kubectl
would (``--kubeconfig``, ``$KUBECONFIG``, gpustack's admin.conf, ``~/.kube/config``); ``node remove`` changes
the cluster in gpustack.yaml and uses its admin.conf only (``own_only``).
"""

from __future__ import annotations

from pathlib import Path

from gpustack.config.model import Config
from gpustack.runners.kube import Kube
from gpustack.runners.kubeconfig import connect, resolve_kubeconfig

#: a status or a removal check should say "unreachable" quickly, not after the 30 s default
REQUEST_TIMEOUT = 10.0


def client(
    cfg: Config, override: Path | None = None, *, context: str | None = None, own_only: bool = False,
    request_timeout: float = REQUEST_TIMEOUT,
) -> Kube:  # fmt: skip
    """A client for the cluster: UsageError (exit 2) for a ``--kubeconfig`` that does not exist or cannot be
    used, ClusterUnreachableError (exit 3) when there is no kubeconfig at all."""
    target = resolve_kubeconfig(kubeconfig=override, context=context, cluster_name=cfg.cluster.name, own_only=own_only)
    return connect(target, request_timeout=request_timeout)
