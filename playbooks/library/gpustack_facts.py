#!/usr/bin/python
"""gpustack_facts: read-only host facts for the gpustack preflight (see DOCUMENTATION).

Pure parsing functions (``parse_*``, ``decode_*``, ``derive_*``) take text or bytes and return
data; they are unit-tested. The ``collect_*`` functions do the I/O. Standard library only, so
it runs with whatever python3 the target has (3.8 or newer); the TOML key splitter comes from
``module_utils/gpustack_toml.py`` (shared with the containerd filter), which Ansible ships with it.
"""

from __future__ import annotations

import concurrent.futures
import fnmatch
import glob
import ipaddress
import json
import os
import platform
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

from ansible.module_utils.gpustack_stage import check_stages
from ansible.module_utils.gpustack_toml import split_key

DOCUMENTATION = r"""
---
module: gpustack_facts
short_description: Collect the host facts gpustack's preflight checks need, changing nothing
description:
  - Reads /proc, /sys and a few configuration files, runs a handful of read-only commands
    (C(sudo -n true) when asked, C(timedatectl show), C(systemctl is-active kubelet)) and
    optionally tries TCP connections to peer nodes.
  - Returns C(changed=false) and the facts under C(facts). Nothing is changed on the host.
  - Run it without become to learn whether passwordless sudo works, and with become for the
    facts only root can read (socket owners, EFI variables).
options:
  probe_sudo:
    description: Run C(sudo -n true) to find out whether passwordless sudo works.
    type: bool
    default: false
  peers:
    description: Addresses of the other nodes to try a TCP connection to.
    type: list
    elements: str
    default: []
  peer_port:
    description: TCP port for the peer connection test.
    type: int
    default: 22
  peer_timeout:
    description: Seconds to wait for each peer connection.
    type: float
    default: 3
  stage_digests:
    description:
      - Stage id -> the stage's input digest for this host. For each, the stage's stamp
        (module_utils/gpustack_stage.py) is compared with its probes (O(stage_probes)) read now;
        the verdicts are returned under C(facts.stages). Read-only, like everything else here.
    type: dict
    default: {}
  stage_probes:
    description: Stage id -> probe spec (files, services, sysctl, packages, commands).
    type: dict
    default: {}
  sources:
    description:
      - Package sources to try from this host before any stage needs them (GET of a few bytes,
        through the proxy of O(proxy_env)). Each is a dict with C(name), C(url), C(kind)
        (C(file), C(apt) - the URL is a repository's InRelease -, C(registry) - an image registry,
        whose C(/v2/) answering 401 is fine -, or C(host-apt) - every repository of this host's own
        apt sources, C(url) unused), optional C(arch) (only probed on hosts of that architecture)
        and C(stage) (not probed when that stage is converged here, see O(stage_digests)).
      - The results are returned under C(facts.sources); nothing is downloaded or written.
    type: list
    elements: dict
    default: []
  proxy_env:
    description: HTTP_PROXY, HTTPS_PROXY and NO_PROXY as the stages use them (gpustack_proxy_env).
    type: dict
    default: {}
  source_timeout:
    description: Seconds to wait for each source.
    type: float
    default: 5
author: gpustack
"""

EXAMPLES = r"""
- name: Collect facts
  gpustack_facts:
    probe_sudo: true
    peers: [10.0.0.2, 10.0.0.3]
  register: preflight
"""

RETURN = r"""
facts:
  description: The host facts (schema in playbooks/README.md).
  returned: always
  type: dict
"""

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
NVIDIA_VENDOR = "0x10de"
KUBE_CGROUP_MARKERS = ("kubepods", "kubelet.slice/kubelet-kubepods")
TCP_LISTEN = "0A"
UDP_UNCONNECTED = "07"
SEARCH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

CONTAINERD_RUNC_OPTIONS = {
    2: ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "runc", "options"),
    3: ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options"),
}


# --------------------------------------------------------------------------- pure parsing


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


def parse_containerd_version(rc: int | None, out: str) -> str | None:
    """The version in ``containerd --version`` output, without a leading v or distro suffix.

    Upstream: ``containerd github.com/containerd/containerd/v2 v2.2.7 <commit>``; Debian:
    ``containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1``; Docker's
    containerd.io: ``containerd containerd.io 1.7.27 <commit>``.
    """
    if rc != 0:
        return None
    words = out.split()
    if len(words) < 3 or words[0] != "containerd":
        return None
    m = re.match(r"^v?(\d+\.\d+(?:\.\d+)?)", words[2])
    return m.group(1) if m else None


def parse_containerd_config_version(text: str | None) -> int | None:
    """The top-level ``version = N`` of a containerd config.toml (None: absent, i.e. version 1)."""
    for raw in (text or "").splitlines():
        line = raw.strip()
        if line.startswith("["):
            return None
        m = re.match(r"^version\s*=\s*(\d+)", line)
        if m:
            return int(m.group(1))
    return None


def parse_containerd_systemd_cgroup(text: str) -> bool | None:
    """SystemdCgroup of runc's options in a containerd config.toml (version 2 or 3).

    None when the file has no version 2/3 header (version 1 or a stub: gpustack regenerates
    it); False when the key or the table is absent (containerd's default).
    """
    version = None
    section: tuple[str, ...] | None = ()
    value = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[["):
            section = None
            continue
        m = re.match(r"^\[([^\]]*)\]\s*(?:#.*)?$", line)
        if m:
            section = split_key(m.group(1))
            continue
        if section == ():
            vm = re.match(r"^version\s*=\s*(\d+)", line)
            if vm:
                version = int(vm.group(1))
            continue
        km = re.match(r"^SystemdCgroup\s*=\s*(\w+)", line)
        if km and version in CONTAINERD_RUNC_OPTIONS and section == CONTAINERD_RUNC_OPTIONS[version]:
            value = km.group(1) == "true"
    if version not in CONTAINERD_RUNC_OPTIONS:
        return None
    return bool(value)


def parse_containerd_default_runtime(text: str) -> str | None:
    """``default_runtime_name`` of containerd's CRI plugin (e.g. "nvidia" when the NVIDIA container
    toolkit made itself the default), or None when not set."""
    for raw in text.splitlines():
        m = re.match(r"""^\s*default_runtime_name\s*=\s*["']([^"']*)["']""", raw)
        if m:
            return m.group(1) or None
    return None


def toolkit_preinstalled(nvidia_ctk: str | None, containerd_conf: str | None) -> bool:
    """The NVIDIA container toolkit is installed and nvidia is containerd's default runtime: the
    GPU Operator must then leave the toolkit alone (toolkit.enabled=false)."""
    return bool(nvidia_ctk) and parse_containerd_default_runtime(containerd_conf or "") == "nvidia"


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


def parse_kubelet_cgroup_driver(text: str | None) -> str | None:
    """``cgroupDriver`` of a kubelet config (/var/lib/kubelet/config.yaml): "systemd", "cgroupfs"
    or None when the file is missing or does not set it (kubelet's default is then cgroupfs)."""
    for raw in (text or "").splitlines():
        m = re.match(r"""^cgroupDriver:\s*["']?([A-Za-z0-9_-]+)["']?\s*(?:#.*)?$""", raw)
        if m:
            return m.group(1)
    return None


FIREWALL_CHAIN = "GPUSTACK-INPUT"
BLOCKING_TARGETS = ("DROP", "REJECT")
# ports pods reach on the node or the API service; a DROP limited to other ports does not matter
POD_API_PORTS = ("6443", "443", "10250")


def _rule_opt(words: list[str], *names: str) -> str | None:
    for i, w in enumerate(words[:-1]):
        if w in names:
            return words[i + 1]
    return None


def _blocks_pod_api(words: list[str]) -> bool:
    """A DROP/REJECT rule that can match pod -> API traffic (not limited to one host, loopback,
    UDP or an unrelated port)."""
    if _rule_opt(words, "-j") not in BLOCKING_TARGETS:
        return False
    if "!" in words:
        return True  # negations: assume the worst
    src = _rule_opt(words, "-s", "--source")
    if src is not None and src.endswith("/32"):
        return False
    if _rule_opt(words, "-i", "--in-interface") == "lo":
        return False
    if _rule_opt(words, "-p", "--protocol") not in (None, "tcp", "all"):
        return False
    dport = _rule_opt(words, "--dport", "--destination-port")
    if dport is not None:
        lo_hi = dport.split(":", 1)
        try:
            lo, hi = int(lo_hi[0] or 0), int(lo_hi[-1] or 65535)
        except ValueError:
            return True
        return any(lo <= int(p) <= hi for p in POD_API_PORTS)
    return True


def parse_iptables_firewall(text: str | None, chain: str = FIREWALL_CHAIN) -> dict[str, object] | None:
    """What gpustack's firewall needs to know from ``iptables -S`` (filter table); None without output.

    gpustack_chain: the chain exists; jump: INPUT jumps to it; input_policy: INPUT's policy;
    drops_before_jump: a DROP/REJECT rule that can match pod -> API traffic comes before the jump
    (every such INPUT rule when there is no jump); drop_rules: those rules (first 5);
    pod_api_rule: the chain accepts a network (not one host) on TCP 6443.
    """
    if not text or not text.strip():
        return None
    policy = None
    chain_exists = False
    jump_seen = False
    drops: list[str] = []
    pod_api = False
    for raw in text.splitlines():
        line = raw.strip()
        words = line.split()
        if len(words) >= 3 and words[0] == "-P" and words[1] == "INPUT":
            policy = words[2]
        elif len(words) >= 2 and words[0] == "-N" and words[1] == chain:
            chain_exists = True
        elif len(words) >= 2 and words[0] == "-A" and words[1] == "INPUT":
            if _rule_opt(words, "-j", "-g") == chain:
                jump_seen = True
            elif not jump_seen and _blocks_pod_api(words):
                drops.append(line)
        elif len(words) >= 2 and words[0] == "-A" and words[1] == chain:
            src = _rule_opt(words, "-s", "--source")
            if (
                _rule_opt(words, "-j") == "ACCEPT"
                and _rule_opt(words, "--dport", "--destination-port") == "6443"
                and src is not None
                and not src.endswith("/32")
            ):
                pod_api = True
    return {
        "gpustack_chain": chain_exists,
        "jump": jump_seen,
        "input_policy": policy,
        "drops_before_jump": bool(drops),
        "drop_rules": drops[:5],
        "pod_api_rule": pod_api,
    }


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


def parse_containerd_imports(text: str | None) -> list[str] | None:
    """The top-level ``imports = [...]`` of a containerd config.toml (one line or several); None when the key is
    absent (``containerd config default`` of 2.x writes ``imports = []``: present, empty)."""
    lines: list[str] = []
    collecting = False
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip() if not collecting else raw.strip()
        if not collecting:
            if line.startswith("["):
                break
            if re.match(r"^imports\s*=", line):
                collecting = True
                line = line.split("=", 1)[1]
        if collecting:
            lines.append(line)
            if "]" in line:
                break
    return re.findall(r"""["']([^"']+)["']""", " ".join(lines)) if collecting else None


def derive_drop_ins(files: list[str], imports: list[str] | None, config_dir: str) -> list[dict[str, object]]:
    """Each drop-in file and whether an ``imports`` entry of config.toml (a glob; relative entries are relative
    to the config's directory, as containerd resolves them) names it."""
    patterns = [i if os.path.isabs(i) else os.path.join(config_dir, i) for i in imports or []]
    return [{"path": f, "imported": any(fnmatch.fnmatchcase(f, p) for p in patterns)} for f in sorted(files)]


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


# --------------------------------------------------------------------------- I/O


def _read(path: str, mode: str = "r") -> str | bytes | None:
    try:
        with open(path, mode) as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _read_text(path: str) -> str | None:
    data = _read(path)
    return data if isinstance(data, str) else None


def _run(argv: list[str], timeout: float = 10) -> tuple[int | None, str]:
    env = dict(os.environ, LC_ALL="C", LANG="C", PATH=SEARCH_PATH + ":" + os.environ.get("PATH", ""))
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None, ""
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":" + SEARCH_PATH)


def collect_dev_char_links(base: str = "/dev/char") -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        try:
            out[name] = os.readlink(f"{base}/{name}")
        except OSError:
            continue
    return out


def collect_firewall() -> dict[str, object] | None:
    iptables = _which("iptables")
    if not iptables:
        return None
    rc, out = _run([iptables, "-w", "5", "-S"], timeout=15)
    if rc != 0:
        return None  # no permission (login-user pass) or no working iptables
    return parse_iptables_firewall(out)


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def collect_socket_owners() -> dict[int, dict[str, object]]:
    """socket inode -> {pid, name, cgroup} for every process whose fds we may read."""
    owners: dict[int, dict[str, object]] = {}
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return owners
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        inodes = []
        for fd in fds:
            try:
                inode = socket_inode(os.readlink(f"{fd_dir}/{fd}"))
            except OSError:
                continue
            if inode is not None:
                inodes.append(inode)
        if not inodes:
            continue
        name = (_read_text(f"/proc/{pid}/comm") or "").strip() or None
        cgroup = _read_text(f"/proc/{pid}/cgroup")
        for inode in inodes:
            owners.setdefault(inode, {"pid": int(pid), "name": name, "cgroup": cgroup})
    return owners


def collect_listening() -> list[dict[str, object]]:
    sockets: list[dict[str, object]] = []
    for name, proto in (("tcp", "tcp"), ("tcp6", "tcp"), ("udp", "udp"), ("udp6", "udp")):
        text = _read_text(f"/proc/net/{name}")
        if text:
            sockets.extend(parse_proc_net(text, proto))
    return merge_listening(sockets, collect_socket_owners())


def collect_pci_raw() -> list[dict[str, str]]:
    base = "/sys/bus/pci/devices"
    devices = []
    try:
        slots = sorted(os.listdir(base))
    except OSError:
        return []
    for slot in slots:
        dev = {"slot": slot}
        for attr in ("vendor", "device", "class"):
            dev[attr] = (_read_text(f"{base}/{slot}/{attr}") or "").strip()
        devices.append(dev)
    return devices


def collect_pci() -> list[dict[str, str]]:
    return parse_pci_devices(collect_pci_raw())


def collect_kernels() -> list[dict[str, object]]:
    """Every installed kernel (/lib/modules/<release>): headers (its build link) and an image in /boot."""
    out: list[dict[str, object]] = []
    try:
        releases = sorted(os.listdir("/lib/modules"))
    except OSError:
        return out
    for release in releases:
        if os.path.isdir(f"/lib/modules/{release}/kernel") or os.path.exists(f"/boot/vmlinuz-{release}"):
            out.append({"release": release, "headers": os.path.exists(f"/lib/modules/{release}/build"),
                        "image": os.path.exists(f"/boot/vmlinuz-{release}")})  # fmt: skip
    return out


def collect_unattended_upgrades() -> dict[str, object] | None:
    """None when unattended-upgrades is not installed."""
    if not os.path.exists("/usr/bin/unattended-upgrade"):
        return None
    apt_config = _which("apt-config")
    rc, out = _run([apt_config, "dump"]) if apt_config else (None, "")
    facts = (
        parse_apt_config(out)
        if rc == 0
        else {"enabled": None, "origins": [], "blacklist": [], "automatic_reboot": False}
    )
    return {"installed": True, **facts}


def collect_fabricmanager(systemctl: str | None) -> dict[str, object]:
    binary = _which("nv-fabricmanager")
    active = parse_systemctl_is_active(*_run([systemctl, "is-active", "nvidia-fabricmanager"])) if systemctl else None
    return {"installed": binary is not None, "active": active}


def collect_disk_free(paths: list[str]) -> dict[str, int]:
    out = {}
    for path in paths:
        try:
            st = os.statvfs(nearest_existing(path))
            out[path] = st.f_bavail * st.f_frsize
        except OSError:
            out[path] = 0
    return out


def probe_peer(address: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def collect_peers(peers: list[str], port: int, timeout: float) -> dict[str, bool]:
    if not peers:
        return {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(peers))) as pool:
        results = pool.map(lambda a: (a, probe_peer(a, port, timeout)), peers)
        return dict(results)


# --------------------------------------------------------------------------- package sources

APT_SOURCE_DIRS = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources")
ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}
#: an image registry's API endpoint when the name is not the host that serves it
REGISTRY_HOSTS = {"docker.io": "registry-1.docker.io"}


def _host_in_no_proxy(host: str, entries: list[str]) -> bool:
    """curl's NO_PROXY rules: ``*``; a host or domain (``example.com`` and ``.example.com`` match
    the domain and its subdomains); an IP address; a CIDR (which curl 7.86+ and Go accept)."""
    host = host.lower().strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for entry in entries:
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if ip is not None and "/" in entry:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = entry.split(":")[0] if entry.count(":") == 1 else entry
        domain = name.lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def proxy_for(url: str, proxy_env: dict) -> str | None:
    """The proxy a download of ``url`` goes through with gpustack's proxy settings (None: direct).
    https:// URLs use HTTPS_PROXY, http:// URLs HTTP_PROXY, unless NO_PROXY names the host."""
    parts = urllib.parse.urlsplit(url)
    key = "HTTPS_PROXY" if parts.scheme == "https" else "HTTP_PROXY"
    proxy = proxy_env.get(key) or proxy_env.get(key.lower())
    if not proxy:
        return None
    no_proxy = str(proxy_env.get("NO_PROXY") or proxy_env.get("no_proxy") or "").split(",")
    return None if _host_in_no_proxy(parts.hostname or "", no_proxy) else str(proxy)


def parse_apt_sources(text: str, deb822: bool = False) -> list[tuple[str, str]]:
    """(uri, suite) of every enabled repository in a sources.list (one-line format) or, with
    ``deb822``, a .sources file. Only http(s) repositories: cdrom:, file: and others need no network."""
    out: list[tuple[str, str]] = []
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            key = ""
            for line in stanza.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if line[0] in " \t" and key:
                    fields[key] += " " + line.strip()
                    continue
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
            if fields.get("enabled", "yes").lower() == "no" or "uris" not in fields:
                continue
            for uri in fields["uris"].split():
                for suite in fields.get("suites", "").split():
                    out.append((uri, suite))
    else:
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line.startswith(("deb ", "deb-src ", "deb\t", "deb-src\t")):
                continue
            line = re.sub(r"\[[^\]]*\]", " ", line)  # [signed-by=... arch=...]
            words = line.split()
            if len(words) >= 3:
                out.append((words[1], words[2]))
    return [(u, s) for u, s in out if u.startswith(("http://", "https://"))]


def apt_release_url(uri: str, suite: str) -> str:
    """The InRelease file apt fetches first for a repository: flat (``suite`` ends with /) or not."""
    if suite.endswith("/"):
        return uri.rstrip("/") + "/" + suite.strip("/") + ("/" if suite.strip("/") else "") + "InRelease"
    return uri.rstrip("/") + "/dists/" + suite + "/InRelease"


def registry_url(name: str) -> str:
    """``nvcr.io`` -> ``https://nvcr.io/v2/``; ``http://mirror:5000`` -> ``http://mirror:5000/v2/``."""
    if "://" not in name:
        host = name.strip("/")
        name = "https://" + REGISTRY_HOSTS.get(host, host)
    return name.rstrip("/") + "/v2/"


def probe_url(url: str, proxy: str | None, timeout: float, kind: str = "file") -> dict:
    """GET the first byte of ``url`` through ``proxy`` (None: direct, whatever the environment says).
    Any answer but an error status is reachable; for a registry, 401 is its normal answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}))
    request = urllib.request.Request(url, headers={"Range": "bytes=0-0", "User-Agent": "gpustack-preflight"})
    try:
        with opener.open(request, timeout=timeout) as response:
            return {"ok": True, "status": response.status, "error": None}
    except urllib.error.HTTPError as exc:
        ok = exc.code == 416 or (kind == "registry" and exc.code == 401)
        return {"ok": ok, "status": exc.code, "error": None if ok else f"HTTP {exc.code} {exc.reason}"}
    except urllib.error.URLError as exc:
        return {"ok": False, "status": None, "error": str(exc.reason)}
    except Exception as exc:  # socket timeouts, bad status lines, TLS errors: all "cannot reach"
        return {"ok": False, "status": None, "error": f"{type(exc).__name__}: {exc}"}


#: the first line of the apt source files gpustack's roles write: those are rewritten from the
#: config by their stage (and their source is probed as configured), so an old one is not probed
MANAGED_MARKER = "# Managed by gpustack"


def host_apt_sources() -> list[tuple[str, str]]:
    """The host's own repositories, not those in files gpustack manages."""
    found: list[tuple[str, str]] = []
    for pattern in APT_SOURCE_DIRS:
        for path in sorted(glob.glob(pattern)):
            text = _read_text(path)
            if text and not text.startswith(MANAGED_MARKER):
                found += parse_apt_sources(text, deb822=path.endswith(".sources"))
    return list(dict.fromkeys(found))


def expand_sources(specs: list, arch: str, converged: dict) -> tuple[list[dict], list[dict]]:
    """(to probe, skipped) from the specs: other architectures dropped, stages converged on this
    host skipped, ``host-apt`` expanded into this host's own repositories."""
    probe: list[dict] = []
    skipped: list[dict] = []
    for spec in specs:
        if not isinstance(spec, dict):
            continue
        if spec.get("arch") and spec.get("arch") != arch:
            continue
        if spec.get("stage") and converged.get(spec["stage"]):
            skipped.append(dict(spec, skipped=f"stage {spec['stage']} converged on this host"))
            continue
        if spec.get("kind") == "host-apt":
            for uri, suite in host_apt_sources():
                probe.append(
                    dict(spec, kind="apt", name=f"apt repository {uri} {suite}", url=apt_release_url(uri, suite))
                )
        else:
            probe.append(dict(spec))
    return probe, skipped


def collect_sources(specs: list, proxy_env: dict, timeout: float, converged: dict) -> list[dict]:
    arch = ARCHES.get(os.uname().machine, os.uname().machine)
    probe, skipped = expand_sources(specs, arch, converged)
    probe = list({s["url"]: s for s in probe if s.get("url")}.values())

    def one(spec: dict) -> dict:
        url = registry_url(spec["url"]) if spec.get("kind") == "registry" else spec["url"]
        proxy = proxy_for(url, proxy_env)
        result = probe_url(url, proxy, timeout, spec.get("kind", "file"))
        return dict(spec, url=url, via=proxy or "direct", **result)

    if not probe:
        return skipped
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(probe))) as pool:
        return list(pool.map(one, probe)) + skipped


def collect(probe_sudo: bool, peers: list[str], peer_port: int, peer_timeout: float) -> dict:
    uname = os.uname()
    os_release = parse_os_release(_read_text("/etc/os-release") or _read_text("/usr/lib/os-release") or "")
    is_root = os.geteuid() == 0
    if is_root:
        sudo_nopasswd = True
    elif probe_sudo and _which("sudo"):
        sudo_nopasswd = _run(["sudo", "-n", "true"], timeout=15)[0] == 0
    else:
        sudo_nopasswd = False

    listening = collect_listening()
    efi = os.path.isdir("/sys/firmware/efi")
    secure_boot_data = _read(f"/sys/firmware/efi/efivars/{SECURE_BOOT_VAR}", "rb") if efi else None
    nvidia_version_text = _read_text("/proc/driver/nvidia/version")
    modules_text = _read_text("/proc/modules") or ""

    containerd_conf = _read_text("/etc/containerd/config.toml")
    marker_text = _read_text("/etc/gpustack/installed.json")
    try:
        marker = json.loads(marker_text) if marker_text else None
    except ValueError:
        marker = None
    if marker is not None and not isinstance(marker, dict):
        marker = None

    systemctl = _which("systemctl")
    kubelet_active = parse_systemctl_is_active(*_run([systemctl, "is-active", "kubelet"])) if systemctl else None
    timedatectl = _which("timedatectl")
    time_synced = (
        parse_timedatectl(*_run([timedatectl, "show", "-p", "NTPSynchronized", "--value"])) if timedatectl else None
    )
    ip_forward = _read_text("/proc/sys/net/ipv4/ip_forward")
    containerd_active = parse_systemctl_is_active(*_run([systemctl, "is-active", "containerd"])) if systemctl else None
    driver_loaded = nvidia_version_text is not None or os.path.isdir("/sys/module/nvidia")
    containerd_bin = _which("containerd")
    containerd_version = parse_containerd_version(*_run([containerd_bin, "--version"])) if containerd_bin else None
    kubelet_bin = _which("kubelet")
    containerd_dir = "/etc/containerd"
    drop_in_files = sorted(glob.glob(f"{containerd_dir}/conf.d/*.toml"))
    pci_raw = collect_pci_raw()
    nvswitches = parse_nvswitches(pci_raw)

    facts = {
        "hostname": socket.gethostname(),
        "os_id": os_release.get("ID", ""),
        "os_version_id": os_release.get("VERSION_ID", ""),
        "os_pretty": os_release.get("PRETTY_NAME", ""),
        "arch": uname.machine,
        "kernel": uname.release,
        "cpus": os.cpu_count() or 0,
        "mem_total_bytes": parse_meminfo_total(_read_text("/proc/meminfo") or "") or 0,
        "disk_free_bytes": collect_disk_free(["/", "/var/lib"]),
        "swap_active": parse_proc_swaps(_read_text("/proc/swaps") or ""),
        "fstab_swap_lines": parse_fstab_swap(_read_text("/etc/fstab") or ""),
        "listening": [{k: v for k, v in e.items() if not k.startswith("_")} for e in listening],
        "nvidia_pci_devices": parse_pci_devices(pci_raw),
        "nvidia_nvswitches": nvswitches,
        "fabricmanager": collect_fabricmanager(systemctl) if nvswitches else None,
        "nvidia_driver_version": parse_nvidia_version(nvidia_version_text)
        if nvidia_version_text
        else (_read_text("/sys/module/nvidia/version") or "").strip() or None,
        "nvidia_smi": _which("nvidia-smi") is not None,
        "nvidia_container_toolkit": toolkit_preinstalled(_which("nvidia-ctk"), containerd_conf),
        "nouveau_loaded": parse_modules_nouveau(modules_text) or os.path.isdir("/sys/module/nouveau"),
        "secure_boot": parse_secure_boot(efi, secure_boot_data),  # type: ignore[arg-type]
        "kernel_headers": os.path.exists(f"/lib/modules/{uname.release}/build"),
        "br_netfilter": os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables"),
        "overlay": "overlay" in parse_filesystems(_read_text("/proc/filesystems") or ""),
        "ip_forward": ip_forward.strip() if ip_forward is not None else None,
        "cgroup_v2": os.path.exists("/sys/fs/cgroup/cgroup.controllers"),
        "kubernetes": {
            "admin_conf": os.path.exists("/etc/kubernetes/admin.conf"),
            "kubelet_conf": os.path.exists("/etc/kubernetes/kubelet.conf"),
            "gpustack_marker": marker,
            "kubeadm_path": _which("kubeadm"),
            "kubelet_active": kubelet_active,
        },
        "containerd": {
            "path": containerd_bin,
            "version": containerd_version,
            "config_version": parse_containerd_config_version(containerd_conf),
            "systemd_cgroup": parse_containerd_systemd_cgroup(containerd_conf) if containerd_conf is not None else None,
            "imports": parse_containerd_imports(containerd_conf),
            "drop_ins": derive_drop_ins(drop_in_files, parse_containerd_imports(containerd_conf), containerd_dir),
        },
        "kubelet_version": parse_kubelet_version(*_run([kubelet_bin, "--version"])) if kubelet_bin else None,
        "kernels": collect_kernels(),
        "unattended_upgrades": collect_unattended_upgrades(),
        "gpu_packages": parse_dpkg_status(_read_text("/var/lib/dpkg/status") or ""),
        "sudo_nopasswd": sudo_nopasswd,
        "is_root": is_root,
        "time_synced": time_synced,
        "peers": collect_peers(peers, peer_port, peer_timeout),
        "node_exporter_on_9100": derive_node_exporter_on_9100(listening),
        "python": platform.python_version(),
        "bridge_nf_call_iptables": parse_sysctl_value(_read_text("/proc/sys/net/bridge/bridge-nf-call-iptables")),
        "kubelet_cgroup_driver": parse_kubelet_cgroup_driver(_read_text("/var/lib/kubelet/config.yaml")),
        "cri_socket": _is_socket("/run/containerd/containerd.sock"),
        "containerd_active": containerd_active,
        "firewall": collect_firewall(),
        "nvidia_dev_char_symlinks": derive_dev_char_symlinks(
            driver_loaded, collect_dev_char_links() if driver_loaded else {}
        ),
    }
    return facts


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "probe_sudo": {"type": "bool", "default": False},
            "peers": {"type": "list", "elements": "str", "default": []},
            "peer_port": {"type": "int", "default": 22},
            "stage_digests": {"type": "dict", "default": {}},
            "stage_probes": {"type": "dict", "default": {}},
            "peer_timeout": {"type": "float", "default": 3.0},
            "sources": {"type": "list", "elements": "dict", "default": []},
            "proxy_env": {"type": "dict", "default": {}},
            "source_timeout": {"type": "float", "default": 5.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    facts = collect(p["probe_sudo"], p["peers"], p["peer_port"], p["peer_timeout"])
    if p["stage_digests"]:
        stages = {
            stage: {"digest": digest, "probes": p["stage_probes"].get(stage) or {}}
            for stage, digest in p["stage_digests"].items()
        }
        facts["stages"] = check_stages(stages)
    if p["sources"]:
        converged = {k: bool(v.get("converged")) for k, v in (facts.get("stages") or {}).items()}
        facts["sources"] = collect_sources(p["sources"], p["proxy_env"], p["source_timeout"], converged)
    module.exit_json(changed=False, facts=facts)


if __name__ == "__main__":
    main()
