"""The one place ``gpustack diag`` and ``gpustack health`` get their Kubernetes client.

Today exactly as verify/doctor resolve theirs: ``--kubeconfig FILE``, else the admin.conf ``gpustack up``
fetched for the configured cluster (never ``$KUBECONFIG``; docs/decisions.md "verify/doctor: collect
once"). The scheduled evaluation runs inside the cluster with its own ServiceAccount
(``--in-cluster``). When the shared kubeconfig resolution (``--kubeconfig``, ``$KUBECONFIG``,
``--context``) lands, only :func:`connect` changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpustack.errors import ClusterUnreachableError, ConfigError, UsageError
from gpustack.paths import kubeconfig_path
from gpustack.runners.kube import REQUEST_TIMEOUT, Kube


def connect(
    cluster_name: str,
    kubeconfig: Path | None = None,
    *,
    in_cluster: bool = False,
    request_timeout: float = REQUEST_TIMEOUT,
) -> Kube:
    """A :class:`Kube` for the cluster: in-cluster credentials, ``kubeconfig``, or gpustack's admin.conf."""
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
    if kubeconfig is not None and not kubeconfig.is_file():
        raise UsageError(f"--kubeconfig {kubeconfig}: no such file")
    path = kubeconfig or kubeconfig_path(cluster_name)
    if not path.is_file():
        raise ClusterUnreachableError(
            f"no kubeconfig for cluster {cluster_name!r} ({path})",
            hint="run `gpustack up` first, or pass --kubeconfig FILE for another cluster",
        )
    try:
        return Kube.from_kubeconfig(path, request_timeout=request_timeout)
    except Exception as exc:  # a malformed kubeconfig: the kubernetes client raises many kinds
        raise ConfigError(f"cannot load the kubeconfig {path}: {exc}") from None


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
