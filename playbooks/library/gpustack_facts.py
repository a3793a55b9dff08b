#!/usr/bin/python
"""gpustack_facts: read-only host facts for the gpustack preflight (see DOCUMENTATION).

The ``collect_*`` functions here do the I/O; what they read is parsed by pure functions in
``module_utils/``: ``gpustack_host_parsers.py`` (/proc, os-release, PCI, systemd, apt, dpkg),
``gpustack_runtime_parsers.py`` (containerd's config, the kubelet's cgroup driver, iptables rules) and
``gpustack_sources.py`` (the package sources and registries the preflight tries), which Ansible
ships with the module. Standard library only, so it runs with whatever python3 the target has
(3.8 or newer).
"""

from __future__ import annotations

import concurrent.futures
import glob
import json
import os
import platform
import shutil
import socket
import stat
import subprocess
from collections.abc import Mapping, Sequence

from ansible.module_utils.gpustack_certs import collect_certificates
from ansible.module_utils.gpustack_cis_files import collect_cis_files
from ansible.module_utils.gpustack_etcd import collect_etcd
from ansible.module_utils.gpustack_host_parsers import (
    SEARCH_PATH,
    SECURE_BOOT_VAR,
    derive_dev_char_symlinks,
    derive_node_exporter_on_9100,
    merge_listening,
    nearest_existing,
    parse_apt_config,
    parse_dpkg_status,
    parse_filesystems,
    parse_fstab_swap,
    parse_kubelet_version,
    parse_meminfo_total,
    parse_modules_nouveau,
    parse_nvidia_version,
    parse_nvswitches,
    parse_os_release,
    parse_pci_devices,
    parse_proc_net,
    parse_proc_swaps,
    parse_secure_boot,
    parse_sysctl_value,
    parse_systemctl_is_active,
    parse_timedatectl,
    socket_inode,
)
from ansible.module_utils.gpustack_runtime_parsers import (
    derive_drop_ins,
    parse_containerd_config_version,
    parse_containerd_imports,
    parse_containerd_systemd_cgroup,
    parse_containerd_version,
    parse_iptables_firewall,
    parse_kubelet_cgroup_driver,
    toolkit_preinstalled,
)
from ansible.module_utils.gpustack_sources import (
    collect_sources,
)
from ansible.module_utils.gpustack_stage import check_stages

DOCUMENTATION = r"""
---
module: gpustack_facts
short_description: Collect the host facts gpustack's preflight checks need, changing nothing
description:
  - Reads /proc, /sys and a few configuration files, runs a handful of read-only commands
    (C(sudo -n true) when asked, C(timedatectl show), C(systemctl is-active kubelet)) and
    optionally tries TCP connections to peer nodes.
  - Returns C(changed=false) and the facts under C(facts). Nothing is changed on the host.
  - Run it with become where sudo allows (one pass sees everything, socket owners and EFI variables
    included; C(is_root) and C(sudo_nopasswd) then describe the login user, from sudo's C(SUDO_UID)),
    and without become, with O(probe_sudo), where sudo refuses.
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
    return _run_full(argv, timeout)[:2]


def _run_full(argv: Sequence[str], timeout: float = 30) -> tuple[int | None, str, str]:
    env = dict(os.environ, LC_ALL="C", LANG="C", PATH=SEARCH_PATH + ":" + os.environ.get("PATH", ""))
    try:
        proc = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, env=env, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None, "", ""
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


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


def login_uid(euid: int, environ: Mapping[str, str]) -> int:
    """The login user's uid: sudo's ``SUDO_UID`` when running as root through sudo (become), else ``euid``."""
    if euid == 0:
        try:
            return int(environ.get("SUDO_UID", "0"))
        except ValueError:
            return 0
    return euid


# --------------------------------------------------------------------------- package sources


def collect(probe_sudo: bool, peers: list[str], peer_port: int, peer_timeout: float) -> dict:
    uname = os.uname()
    os_release = parse_os_release(_read_text("/etc/os-release") or _read_text("/usr/lib/os-release") or "")
    euid = os.geteuid()
    is_root = login_uid(euid, os.environ) == 0
    if euid == 0:  # root, or the login user through sudo without a password (Ansible's become: sudo -n)
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
        "certificates": collect_certificates(_run_full, _which, os.path.exists),
        "etcd": collect_etcd(_run_full, os.path.exists, _which("crictl") or "crictl"),
        "cis_files": collect_cis_files(),
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
            # no_log: Ansible logs a module's arguments to the host's journal (and masks these in its results)
            "proxy_env": {"type": "dict", "default": {}, "no_log": True},
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
    converged = {k: bool(v.get("converged")) for k, v in (facts.get("stages") or {}).items()}
    facts["sources"] = (
        collect_sources(p["sources"], p["proxy_env"], p["source_timeout"], converged) if p["sources"] else []
    )
    module.exit_json(changed=False, facts=facts)


if __name__ == "__main__":
    main()
