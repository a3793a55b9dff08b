"""The real kubeadm in every test-bed host, beside its double.

The test bed's kubeadm is a double (tests/testbed/doubles/kubeadm): no control plane runs on its hosts. What kubeadm
does with files alone is the real one's there: the certificates and kubeconfigs of ``init`` and of a control plane's
``join`` (its ``init phase certs all`` / ``init phase kubeconfig``), ``certs check-expiration`` and ``certs renew``.
The real kubeadm is the one the control-plane tests run (tests/realbin: kubeadm **1.36.5**, built from its Go module,
a static binary), bound read-only into each host at :data:`INSIDE`, where the double looks for it (its
``REAL_KUBEADM``). A bind, not a copy: 65 MB, no time spent, and no package of the bed's apt repository changes (the
bundle's and the sandbox's doubles stay as they were).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.realbin.gobuild import MODULES, build

#: where the kubeadm double runs it (tests/testbed/doubles/kubeadm REAL_KUBEADM)
INSIDE = "/usr/lib/gpustack-doubles/kubeadm"


def source() -> Path:
    """The cached real kubeadm (built once by tests/realbin/gobuild.py's ``kubeadm``, the control plane's kubeadm
    alone; CI builds it in the background beside the tests, before the rest of the control plane)."""
    return build(MODULES["kubeadm"]) / "kubeadm"


def with_real_kubeadm(
    names: Sequence[str], nspawn_args: Mapping[str, Sequence[str]] | None = None
) -> dict[str, list[str]]:
    """``nspawn_args`` for a Testbed of ``names`` with the real kubeadm bound read-only into every host."""
    bind = f"--bind-ro={source()}:{INSIDE}"
    given = dict(nspawn_args or {})
    return {name: [*given.get(name, ()), bind] for name in names} | {
        k: list(v) for k, v in given.items() if k not in names
    }
