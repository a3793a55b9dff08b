"""The one place ``gpustack diag`` and ``gpustack health`` get their Kubernetes client: the one kubeconfig
resolution (:func:`gpustack.runners.kubeconfig.resolve_kubeconfig`: ``--kubeconfig``, ``$KUBECONFIG``,
gpustack's admin.conf, ``~/.kube/config``), or, for the scheduled evaluation inside the cluster, its own
ServiceAccount (``--in-cluster``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpustack.errors import ConfigError
from gpustack.runners.kube import REQUEST_TIMEOUT, Kube
from gpustack.runners.kubeconfig import connect as connect_target
from gpustack.runners.kubeconfig import resolve_kubeconfig


def connect(
    cluster_name: str,
    kubeconfig: Path | None = None,
    *,
    context: str | None = None,
    in_cluster: bool = False,
    request_timeout: float = REQUEST_TIMEOUT,
) -> Kube:
    """A :class:`Kube` for the cluster: in-cluster credentials, or the resolved kubeconfig."""
    if in_cluster:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config

        configuration = k8s_client.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException as exc:
            raise ConfigError(f"--in-cluster: no in-cluster credentials: {exc}",
                              hint="--in-cluster is for gpustack's own CronJob; use --kubeconfig elsewhere") from None  # fmt: skip
        return Kube(k8s_client.ApiClient(configuration), request_timeout=request_timeout)
    target = resolve_kubeconfig(kubeconfig=kubeconfig, context=context, cluster_name=cluster_name)
    return connect_target(target, request_timeout=request_timeout)


def list_all(kube: Kube, path: str, query: Mapping[str, str] | None = None, *, page: int = 500) -> list[dict[str, Any]]:
    """Every item of a LIST (``path`` such as ``/api/v1/nodes``), page by page."""
    items: list[dict[str, Any]] = []
    token = ""
    for _ in range(10_000):  # a server that keeps returning continue tokens must not loop forever
        q = {**(query or {}), "limit": str(page)}
        if token:
            q["continue"] = token
        data = kube.request("GET", path, query=q)
        items += [i for i in data.get("items") or [] if isinstance(i, dict)]
        token = str((data.get("metadata") or {}).get("continue") or "")
        if not token:
            break
    return items
