"""What ``gpustack node patch`` reads on a host before and after patching it. Standard library only (the target's
python3, 3.8 or newer); used by the ``gpustack_patch_state`` module. Every function but :func:`collect` is pure.

Facts it follows (upstream):

- ``apt-get -s upgrade --with-new-pkgs`` (apt-get(8): ``-s`` "No action; perform a simulation of events that would
  occur"; ``--with-new-pkgs`` "Allow installing new packages when used in conjunction with upgrade", which is what
  ``ansible.builtin.apt upgrade=safe`` runs without aptitude) prints one ``Inst NAME [OLD] (NEW ...)`` line per
  package it would install or upgrade; held packages are "kept back" and get no ``Inst`` line.
- A Debian or Ubuntu kernel package installs ``/boot/vmlinuz-<release>`` and ``/lib/modules/<release>``; its headers
  package (``linux-headers-<release>``) adds the ``/lib/modules/<release>/build`` link, which DKMS and the GPU
  Operator's driver container build against (gpustack preflight P22).
- Packages that need a reboot (a kernel, libc, ...) create ``/var/run/reboot-required`` (update-notifier-common's
  ``/usr/share/update-notifier/notify-reboot-required``, called from their postinst).
- ``/proc/sys/kernel/random/boot_id`` is the id the kubelet reports as the Node's ``status.nodeInfo.bootID``
  (kubernetes ``pkg/kubelet/nodestatus/setters.go`` MachineInfo, cadvisor's ``BootID``): when they match, the
  kubelet has reported since the host's last boot.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the target may run Python 3.8
    from collections.abc import Callable, Sequence

INST = re.compile(r"^Inst (?P<name>\S+)(?: \[(?P<old>[^\]]+)\])? \((?P<new>\S+)")
REBOOT_REQUIRED = "/var/run/reboot-required"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: the PCI vendor id of NVIDIA
NVIDIA_VENDOR = "0x10de"


def parse_simulation(out: str) -> list:
    """``apt-get -s upgrade --with-new-pkgs`` -> ``[{"name", "from", "to"}]`` (``from`` empty for a new package)."""
    found = []
    for line in (out or "").splitlines():
        m = INST.match(line.strip())
        if m:
            found.append({"name": m.group("name"), "from": m.group("old") or "", "to": m.group("new")})
    return found


def parse_kept_back(out: str) -> list:
    """The packages ``apt-get -s upgrade`` keeps back (held ones among them), from its "kept back" list."""
    names: list = []
    inside = False
    for line in (out or "").splitlines():
        if line.startswith("The following packages have been kept back"):
            inside = True
        elif inside and line.startswith(" "):
            names += line.split()
        else:
            inside = False
    return names


def unheld_status(status: str, names: Sequence[str]) -> str:
    """dpkg's status file with the selection of ``names`` turned from ``hold`` to ``install`` (pure): the status a
    simulation reads for what an upgrade does once ``gpustack node patch`` has released gpustack's kernel holds
    (hosts.hold_kernel), without releasing them (apt reads holds from dpkg's status, ``Dir::State::status``)."""
    wanted = set(names)
    out = []
    for stanza in status.split("\n\n"):
        lines = stanza.split("\n")
        package = next((ln.partition(":")[2].strip() for ln in lines if ln.startswith("Package:")), "")
        if package in wanted:
            lines = ["Status: install" + ln[len("Status: hold") :] if ln.startswith("Status: hold ") else ln
                     for ln in lines]  # fmt: skip
        out.append("\n".join(lines))
    return "\n\n".join(out)


def release_key(release: str) -> tuple:
    """Order kernel releases (6.1.0-9-amd64 < 6.1.0-28-amd64): numbers as numbers, the rest as text."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-+~]", release))


def kernels(releases: Sequence[str], has_image: Callable[[str], bool], has_headers: Callable[[str], bool]) -> list:
    """The installed kernels (an image in /boot), oldest first: ``[{"release", "headers"}]``."""
    out = [{"release": r, "headers": has_headers(r)} for r in releases if has_image(r)]
    return sorted(out, key=lambda k: release_key(k["release"]))


def state(*, running: str, installed: Sequence[dict], pending: Sequence[dict], reboot_required: bool,
          nvidia: bool, boot_id: str, held: Sequence[str], kept_back: Sequence[str] = ()) -> dict:  # fmt: skip
    """The host's patch state (pure). ``newest``: the kernel that boots next; ``headers_missing``: its headers
    package when the host builds kernel modules (it has NVIDIA GPUs, or the running kernel has its headers) and
    they are not installed; ``needed``: anything to do (packages to upgrade, headers, a reboot)."""
    newest = installed[-1]["release"] if installed else running
    builds = nvidia or any(k["headers"] for k in installed if k["release"] == running)
    missing = [k["release"] for k in installed if k["release"] == newest and not k["headers"]]
    headers = ["linux-headers-" + r for r in missing] if builds else []
    held_pending = sorted({p["name"] for p in pending if p["name"] in held} | {k for k in kept_back if k in held})
    return {
        "running_kernel": running, "newest_kernel": newest, "builds_modules": builds,
        "pending": [p for p in pending if p["name"] not in held], "held_pending": held_pending,
        "headers_missing": headers, "reboot_required": reboot_required, "boot_id": boot_id,
        "needed": bool([p for p in pending if p["name"] not in held] or headers or reboot_required),
    }  # fmt: skip


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def nvidia_present(pci_root: str = "/sys/bus/pci/devices") -> bool:
    try:
        devices = os.listdir(pci_root)
    except OSError:
        return False
    return any(_read(os.path.join(pci_root, d, "vendor")) == NVIDIA_VENDOR for d in devices)


def collect(simulation: str, held: Sequence[str], *, root: str = "/", reboot_required: str = REBOOT_REQUIRED) -> dict:
    """The host's patch state, read from this host (``root``: a test's tree instead of /)."""

    def at(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    try:
        releases = sorted(os.listdir(at("/lib/modules")))
    except OSError:
        releases = []
    installed = kernels(releases, lambda r: os.path.exists(at("/boot/vmlinuz-" + r)),
                        lambda r: os.path.exists(at("/lib/modules/" + r + "/build")))  # fmt: skip
    return state(running=os.uname().release, installed=installed, pending=parse_simulation(simulation),
                 reboot_required=os.path.exists(at(reboot_required)), nvidia=nvidia_present(at("/sys/bus/pci/devices")),
                 boot_id=_read(at(BOOT_ID)), held=held, kept_back=parse_kept_back(simulation))  # fmt: skip
