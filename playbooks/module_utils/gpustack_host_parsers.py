"""Pure parsers of what gpustack_facts reads on a host: /etc/os-release, /proc (memory, swap, sockets,
modules), PCI devices, systemctl/timedatectl/sysctl output, apt's configuration and dpkg's status.

Each takes text or bytes and returns data; unit-tested (tests/unit/playbooks/test_gpustack_facts.py).
Standard library only (the target's python3, 3.8 or newer); Ansible ships it with the modules that
import it (``from ansible.module_utils.gpustack_host_parsers import ...``).
"""

from __future__ import annotations

import os
import re
import socket
import struct
import sys

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


NVIDIA_VENDOR = "0x10de"


KUBE_CGROUP_MARKERS = ("kubepods", "kubelet.slice/kubelet-kubepods")


TCP_LISTEN = "0A"


UDP_UNCONNECTED = "07"


SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _unquote_shell(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] == '"':
            inner = re.sub(r'\\([\\$"`])', r"\1", inner)
        return inner
    return value


def parse_os_release(text: str) -> dict[str, str]:
    """KEY=value pairs of os-release(5), quotes removed."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            out[key] = _unquote_shell(value)
    return out


def parse_meminfo_total(text: str) -> int | None:
    """MemTotal of /proc/meminfo in bytes."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                factor = 1024 if len(parts) < 3 or parts[2].lower() == "kb" else 1
                return int(parts[1]) * factor
    return None


def _unescape_octal(value: str) -> str:
    """/proc and fstab escape spaces and tabs as \\040 and \\011."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), value)


def parse_proc_swaps(text: str) -> list[dict[str, object]]:
    """Active swap areas from /proc/swaps (sizes there are KiB)."""
    out: list[dict[str, object]] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[2].isdigit():
            out.append({"device": _unescape_octal(parts[0]), "size_bytes": int(parts[2]) * 1024})
    return out


def parse_fstab_swap(text: str) -> list[str]:
    """Uncommented fstab lines whose filesystem type (third field) is swap."""
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
        if len(fields) >= 3 and fields[2] == "swap":
            out.append(stripped)
    return out


def parse_filesystems(text: str) -> set[str]:
    """Filesystem names of /proc/filesystems ("nodev\\toverlay" -> "overlay")."""
    return {line.split()[-1] for line in text.splitlines() if line.split()}


def decode_proc_net_address(value: str, byteorder: str = sys.byteorder) -> tuple[str, int]:
    """ "0100007F:0035" -> ("127.0.0.1", 53); IPv6 too (32 hex digits).

    The kernel prints each 32-bit word of the address as a host-order integer, so on a
    little-endian machine the bytes of every word appear reversed.
    """
    addr_hex, _, port_hex = value.partition(":")
    fmt = "<I" if byteorder == "little" else ">I"
    words = [addr_hex[i : i + 8] for i in range(0, len(addr_hex), 8)]
    packed = b"".join(struct.pack(fmt, int(w, 16)) for w in words)
    family = socket.AF_INET if len(packed) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, packed), int(port_hex, 16)


def parse_proc_net(text: str, proto: str, byteorder: str = sys.byteorder) -> list[dict[str, object]]:
    """Listening sockets of one /proc/net/{tcp,tcp6,udp,udp6} file.

    TCP: state 0A (LISTEN). UDP: bound, unconnected sockets (state 07, remote port 0).
    Each entry: proto, address, port, inode.
    """
    out: list[dict[str, object]] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        local, remote, state, inode = parts[1], parts[2], parts[3].upper(), parts[9]
        if proto == "tcp" and state != TCP_LISTEN:
            continue
        if proto == "udp" and (state != UDP_UNCONNECTED or not remote.endswith(":0000")):
            continue
        try:
            address, port = decode_proc_net_address(local, byteorder)
        except (ValueError, struct.error, OSError):
            continue
        if port == 0:
            continue
        out.append(
            {
                "proto": proto,
                "address": address,
                "port": port,
                "inode": int(inode) if inode.isdigit() else 0,
            }
        )
    return out


def socket_inode(link: str) -> int | None:
    """ "socket:[12345]" (an /proc/PID/fd link) -> 12345."""
    m = re.match(r"^socket:\[(\d+)\]$", link)
    return int(m.group(1)) if m else None


def merge_listening(sockets: list[dict[str, object]], owners: dict[int, dict[str, object]]) -> list[dict[str, object]]:
    """Attach process names, drop duplicates, sort; keeps pid/cgroup for derive_*()."""
    seen: dict[tuple[object, object, object], dict[str, object]] = {}
    for s in sockets:
        key = (s["proto"], s["address"], s["port"])
        owner = owners.get(int(s["inode"])) if s.get("inode") else None  # type: ignore[arg-type]
        entry = {
            "proto": s["proto"],
            "address": s["address"],
            "port": s["port"],
            "process": owner["name"] if owner else None,
            "_cgroup": owner.get("cgroup") if owner else None,
        }
        if key not in seen or (seen[key]["process"] is None and entry["process"] is not None):
            seen[key] = entry
    return sorted(seen.values(), key=lambda e: (e["proto"], e["port"], e["address"]))  # type: ignore[return-value,arg-type]


def is_kubernetes_cgroup(cgroup: str | None) -> bool:
    return bool(cgroup) and any(m in cgroup for m in KUBE_CGROUP_MARKERS)  # type: ignore[operator]


def derive_node_exporter_on_9100(listening: list[dict[str, object]]) -> bool:
    """Something outside Kubernetes listens on TCP 9100 (where node-exporter must bind).

    A listener whose owner cannot be read (no root) counts as not Kubernetes': better a
    warning too many than a node-exporter pod crash-looping on "address already in use".
    """
    return any(
        entry["proto"] == "tcp" and entry["port"] == 9100 and not is_kubernetes_cgroup(entry.get("_cgroup"))  # type: ignore[arg-type]
        for entry in listening
    )


def parse_pci_devices(devices: list[dict[str, str]]) -> list[dict[str, str]]:
    """NVIDIA display controllers (class 0x03xxxx) among PCI devices (slot/vendor/device/class)."""
    out = []
    for dev in devices:
        vendor = dev.get("vendor", "").strip().lower()
        cls = dev.get("class", "").strip().lower()
        if vendor == NVIDIA_VENDOR and cls.startswith("0x03"):
            out.append(
                {
                    "slot": dev["slot"],
                    "device_id": dev.get("device", "").strip().lower(),
                    "class": cls,
                }
            )
    return sorted(out, key=lambda d: d["slot"])


def parse_nvidia_version(text: str) -> str | None:
    """Driver version from /proc/driver/nvidia/version."""
    m = re.search(r"Kernel Module(?: for [^\s]+)?\s+([0-9][0-9.]*)", text)
    if m:
        return m.group(1)
    m = re.search(r"NVRM version:.*?\s([0-9]+\.[0-9]+(?:\.[0-9]+)?)\s", text)
    return m.group(1) if m else None


def parse_secure_boot(efi: bool, data: bytes | None) -> str:
    """Secure Boot state: efivars hold 4 attribute bytes, then the value (1 = enabled)."""
    if not efi:
        return "not-efi"
    if not data or len(data) < 5:
        return "unknown"
    value = data[-1]
    if value == 1:
        return "enabled"
    if value == 0:
        return "disabled"
    return "unknown"


def parse_modules_nouveau(text: str) -> bool:
    return any(line.startswith("nouveau ") for line in text.splitlines())


def parse_systemctl_is_active(rc: int | None, out: str) -> bool | None:
    state = out.strip()
    if state in ("active", "activating", "reloading", "refreshing"):
        return True
    if state in ("inactive", "failed", "deactivating", "unknown", "maintenance"):
        return False
    return None


def parse_timedatectl(rc: int | None, out: str) -> bool | None:
    value = out.strip().lower()
    if rc == 0 and value in ("yes", "no"):
        return value == "yes"
    return None


def parse_sysctl_value(text: str | None) -> str | None:
    """A /proc/sys value, stripped ("1\\n" -> "1"); None when the file could not be read."""
    if text is None:
        return None
    return text.strip() or None


def derive_dev_char_symlinks(driver_loaded: bool, links: dict[str, str]) -> bool | None:
    """/dev/char has links to NVIDIA device nodes (``195:0 -> ../nvidia0``); None without a loaded
    driver. Missing links make long-running GPU pods lose their devices under systemd cgroups
    ("Failed to initialize NVML: Unknown Error")."""
    if not driver_loaded:
        return None
    return any("nvidia" in os.path.basename(target) for target in links.values())


def parse_kubelet_version(rc: int | None, out: str) -> str | None:
    """``kubelet --version`` ("Kubernetes v1.36.4") -> "1.36.4"."""
    m = re.search(r"\bv?(\d+\.\d+\.\d+)", out) if rc == 0 else None
    return m.group(1) if m else None


def parse_nvswitches(devices: list[dict[str, str]]) -> int:
    """NVSwitch chips among PCI devices: NVIDIA bridges (class 0x0680xx, "Bridge: other"), e.g. 0x22a3 on HGX H100."""
    return sum(
        1
        for dev in devices
        if dev.get("vendor", "").strip().lower() == NVIDIA_VENDOR
        and dev.get("class", "").strip().lower().startswith("0x0680")
    )


def parse_apt_config(text: str) -> dict[str, object]:
    """What unattended-upgrades will do, from ``apt-config dump``: enabled (APT::Periodic::Unattended-Upgrade),
    the origins it upgrades from, its package blacklist, and whether it reboots on its own."""
    values: dict[str, list[str]] = {}
    for raw in text.splitlines():
        m = re.match(r'^([A-Za-z0-9:_-]+?)(::)?\s+"(.*)";\s*$', raw.strip())
        if m:
            values.setdefault(m.group(1), []).append(m.group(3))
    periodic = values.get("APT::Periodic::Unattended-Upgrade")
    return {
        "enabled": bool(periodic) and periodic[-1] not in ("0", "") if periodic is not None else False,
        "origins": [v for k in ("Unattended-Upgrade::Allowed-Origins", "Unattended-Upgrade::Origins-Pattern")
                    for v in values.get(k, []) if v],
        "blacklist": [v for v in values.get("Unattended-Upgrade::Package-Blacklist", []) if v],
        "automatic_reboot": (values.get("Unattended-Upgrade::Automatic-Reboot") or ["false"])[-1] == "true",
    }  # fmt: skip


GPU_STACK_PACKAGES = re.compile(r"^(linux-(image|headers|modules)(-.*)?|nvidia-.*|libnvidia-.*|cuda-drivers.*)$")


def parse_dpkg_status(text: str) -> list[dict[str, object]]:
    """Installed kernel and NVIDIA driver packages from /var/lib/dpkg/status: name, version, held."""
    out: list[dict[str, object]] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        name, status = fields.get("Package", ""), fields.get("Status", "").split()
        if GPU_STACK_PACKAGES.match(name) and status[-1:] == ["installed"]:
            out.append({"name": name, "version": fields.get("Version", ""), "held": status[0] == "hold"})
    return sorted(out, key=lambda p: str(p["name"]))


def nearest_existing(path: str, exists=os.path.exists) -> str:
    """The path itself or its closest existing parent."""
    path = os.path.abspath(path)
    while not exists(path) and path != "/":
        path = os.path.dirname(path)
    return path
