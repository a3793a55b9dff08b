"""Which packages ``hosts.hold_kernel`` holds on a host, and which of gpustack's earlier holds it releases.
Standard library only (the target's python3, 3.8 or newer); used by the ``gpustack_kernel_hold`` module. Every
function but :func:`read` is pure (tests/unit/playbooks/test_kernel_hold.py).

What is held (docs/decisions.md, "Kernel holds at up"):

- the kernel meta packages installed (``linux-image-amd64`` on Debian, ``linux-image-generic`` and its HWE variants
  on Ubuntu: a package of that name without a release number, whose upgrade brings each new kernel as a new
  ``linux-image-<release>`` package), and the running kernel's own image package (``linux-image-<uname -r>``, with
  Debian's ``-unsigned`` twin when installed);
- the NVIDIA driver packages installed (``nvidia-*``, ``libnvidia-*``, ``cuda-drivers*``: the names preflight P21
  reads from dpkg's status, gpustack/checks/hostrules.py ``unattended_upgrades``).

A package someone else already held is held still but not recorded: only the holds gpustack itself made are ever
released (when ``hold_kernel`` is turned off, when a recorded kernel is no longer the running one, and by
``gpustack node patch`` for its upgrade), as gpustack's firewalld rules are recorded.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING

# at module level: mitogen ships only the module_utils a module imports at its top (a function's import is not
# scanned: the test bed's `up` failed with "No module named ansible.module_utils.gpustack_host_parsers")
from ansible.module_utils.gpustack_host_parsers import parse_dpkg_status  # type: ignore[import-not-found]

if TYPE_CHECKING:  # annotations only: the target may run Python 3.8
    from collections.abc import Iterable, Mapping, Sequence

#: a kernel meta package: no kernel release (``6.8.0-45``) in its name; Ubuntu's ``linux-image-unsigned-<release>``
#: is a kernel of its own, not a meta package
KERNEL_META = re.compile(r"^linux-image-(?!unsigned-)[a-z]")
RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+-[0-9]+")
DRIVER = re.compile(r"^(nvidia-|libnvidia-|cuda-drivers)")
DPKG_STATUS = "/var/lib/dpkg/status"
RECORD = "/etc/gpustack/held-packages.json"


def wanted(installed: Iterable[str], running: str) -> dict:
    """The kernel and driver packages to hold among the installed ones (pure)."""
    names = set(installed)
    image = {"linux-image-" + running, "linux-image-" + running + "-unsigned"}
    metas = {n for n in names if KERNEL_META.match(n) and not RELEASE.search(n)}
    kernel = sorted(metas | (names & image))
    driver = sorted(n for n in names if DRIVER.match(n))
    return {"kernel": kernel, "driver": driver}


def plan(packages: Sequence[Mapping], running: str, recorded: Sequence[str], enabled: bool) -> dict:
    """What to hold, which of gpustack's recorded holds to release, and the new record (pure). ``packages``: dpkg's
    installed kernel and NVIDIA packages (name, held), as gpustack_host_parsers.parse_dpkg_status gives them."""
    installed = {str(p["name"]) for p in packages}
    held = {str(p["name"]) for p in packages if p.get("held")}
    want = wanted(installed, running) if enabled else {"kernel": [], "driver": []}
    hold = sorted(want["kernel"] + want["driver"])
    ours = [n for n in recorded if n in installed]  # a purged kernel has no selection left to release
    release = sorted(set(ours) - set(hold))
    record = sorted((set(ours) & set(hold)) | {n for n in hold if n not in held})
    return {"hold": hold, "release": release, "record": record, **want}


def read(record: str = RECORD, status: str = DPKG_STATUS) -> dict:
    """The plan for this host: dpkg's status, the running kernel, gpustack's record (absent or unreadable: [])."""
    with open(status, encoding="utf-8", errors="replace") as f:
        packages = parse_dpkg_status(f.read())
    try:
        with open(record, encoding="utf-8") as f:
            recorded = [str(n) for n in json.load(f)]
    except (OSError, ValueError, TypeError):
        recorded = []
    return {"packages": packages, "running": os.uname().release, "recorded": recorded}
