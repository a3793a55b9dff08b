"""The kernel parameters the kubelet checks with protectKernelDefaults, set on the test bed's own machine.

gpustack's default ``security.protect_kernel_defaults: true`` makes the os_prep role set the six kernel parameters
the kubelet checks (kubelet v1.36.5 ``pkg/kubelet/cm/container_manager_linux.go`` ``setupKernelTunables``; values
from k8s.io/component-helpers v0.36.5 ``node/util/sysctl``; the role's ``os_prep_kubelet_sysctl``, read from its
defaults here so the two never differ). A test-bed host is a systemd-nspawn container: its ``vm.*`` and ``kernel.*``
are the machine's own kernel's, read-only inside. So the bed sets them once on the machine, as a real host's operator
would (the tests own the CI machine), before any host boots; the role then finds every value right and writes
nothing but its file (roles/os_prep: ``sysctl -w`` only where a value differs, no ``sysctl -p``). What this can
change on the machine: ``vm.overcommit_memory=1`` (allocations are not refused up front), ``kernel.panic=10`` (a panic
reboots after 10 s) and ``kernel.panic_on_oops=1`` (an oops panics: the project's machine had 0 and 1 for the last
two); the keyring limits are the kernel's defaults. docs/testing.md names it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "playbooks/roles/os_prep/defaults/main.yml"


def wanted() -> dict[str, str]:
    """The role's ``os_prep_kubelet_sysctl``: parameter -> value."""
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    return {str(k): str(v) for k, v in defaults["os_prep_kubelet_sysctl"].items()}


def _proc(key: str, root: Path) -> Path:
    return root.joinpath(*key.split("."))


def ensure(root: Path = Path("/proc/sys")) -> dict[str, tuple[str, str]]:
    """Set every parameter that differs (``root``: /proc/sys, or a directory standing for it); what changed, as
    parameter -> (before, after)."""
    changed = {}
    for key, value in wanted().items():
        path = _proc(key, root)
        before = path.read_text().strip()
        if before != value:
            path.write_text(value + "\n")
            changed[key] = (before, value)
    return changed
