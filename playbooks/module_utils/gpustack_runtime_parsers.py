"""Pure parsers of the container runtime's and the firewall's state for gpustack_facts: containerd's
version, config.toml (version, SystemdCgroup, default runtime, imports and drop-ins), the NVIDIA
toolkit's marks in it, the kubelet's cgroup driver, and iptables-save's rules (gpustack's chain and
what blocks pods from the API server).

Standard library only; the TOML key splitter comes from ``module_utils/gpustack_toml.py``.
"""

from __future__ import annotations

import fnmatch
import os
import re

from ansible.module_utils.gpustack_toml import split_key

CONTAINERD_RUNC_OPTIONS = {
    2: ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "runc", "options"),
    3: ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options"),
}


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
