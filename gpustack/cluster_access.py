"""The Kubernetes client of the commands that read or change the running cluster from this machine
(``node remove``, ``status``), picked the way verify and doctor pick theirs: ``--kubeconfig``, else
the admin kubeconfig ``gpustack up`` fetched for the config's cluster (never ``$KUBECONFIG``).

One place on purpose: when one kubeconfig resolution serves every command (issue #11), only
:func:`kubeconfig_for` changes.
"""

from __future__ import annotations

from pathlib import Path

from gpustack.config.model import Config
from gpustack.errors import ClusterUnreachableError, UsageError
from gpustack.paths import kubeconfig_path
from gpustack.runners.kube import Kube

#: a status or a removal check should say "unreachable" quickly, not after the 30 s default
REQUEST_TIMEOUT = 10.0


def kubeconfig_for(cfg: Config, override: Path | None = None) -> Path:
    """The kubeconfig to use; UsageError for a ``--kubeconfig`` that does not exist."""
    if override is not None:
        if not override.is_file():
            raise UsageError(f"--kubeconfig {override}: no such file")
        return override
    return kubeconfig_path(cfg.cluster.name)


def client(cfg: Config, override: Path | None = None, *, request_timeout: float = REQUEST_TIMEOUT) -> Kube:
    """A client for the cluster; ClusterUnreachableError (exit 3) when there is no usable kubeconfig."""
    path = kubeconfig_for(cfg, override)
    if not path.is_file():
        raise ClusterUnreachableError(
            f"no kubeconfig for cluster {cfg.cluster.name!r} at {path}",
            hint="`gpustack up` fetches it from the control plane; --kubeconfig FILE points at another",
        )
    try:
        return Kube.from_kubeconfig(path, request_timeout=request_timeout)
    except Exception as exc:  # the kubernetes package raises its own ConfigException, or ValueError
        raise ClusterUnreachableError(f"cannot use the kubeconfig {path}: {exc}") from None
