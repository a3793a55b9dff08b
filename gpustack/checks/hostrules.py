"""Host rules both the preflight (P.. checks, before ``gpustack up`` changes anything) and ``gpustack doctor``
(H../C.. checks, on a running cluster) judge: pure functions of one host's facts (the ``gpustack_facts``
module's output, playbooks/README.md) and, where it matters, the Kubernetes minor.

Each returns a :class:`Verdict`; the callers add the check id, the layer and the host. The preflight judges the
minor gpustack.yaml asks for; doctor the minor of the kubelet that runs on the host.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpustack.checks.model import Status
from gpustack.config import pins

Facts = Mapping[str, Any]

TOOLKIT_DROP_IN_DIR = "/etc/containerd/conf.d"  # where the NVIDIA container toolkit writes 99-nvidia.toml
TOOLKIT_IMPORT = f"{TOOLKIT_DROP_IN_DIR}/*.toml"  # the `imports` entry the toolkit adds to config.toml
CGROUP_V2_FIX = (
    "boot with the unified hierarchy: sudo sed -i 's/^GRUB_CMDLINE_LINUX=\"/&systemd.unified_cgroup_hierarchy=1 /' "
    "/etc/default/grub && sudo update-grub && sudo reboot   (and remove systemd.unified_cgroup_hierarchy=0 if set)"
)
#: NVIDIA's udev rule (the container toolkit's "Failed to initialize NVML: Unknown Error" notice): recreates the
#: /dev/char links whenever the driver binds, so they survive reboots and driver reloads
DEV_CHAR_UDEV_RULE = (
    'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
    'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"'
)
DEV_CHAR_FIX = (
    "sudo nvidia-ctk system create-dev-char-symlinks --create-all && echo "
    f"{shlex.quote(DEV_CHAR_UDEV_RULE)} | sudo tee /lib/udev/rules.d/71-nvidia-dev-char.rules   "
    "(then delete the GPU pods that lost their devices: they get them back when recreated)"
)


@dataclass(frozen=True)
class Verdict:
    status: Status
    summary: str
    evidence: str = ""
    fix: str = ""


def _mapping(facts: Facts, key: str) -> Mapping[str, Any]:
    value = facts.get(key)
    return value if isinstance(value, Mapping) else {}


def minor_of(version: str | None) -> str | None:
    """ "1.36.4" -> "1.36"."""
    parts = pins.version_tuple(version or "")
    return f"{parts[0]}.{parts[1]}" if len(parts) >= 2 else None


# --- cgroup v2 (the kubelet refuses cgroup v1 from 1.35) ----------------------------------------------


def cgroup_v2(facts: Facts, minor: str) -> Verdict:
    line = pins.kubernetes_line(minor)
    if facts.get("cgroup_v2"):
        return Verdict("pass", "cgroup v2 (unified hierarchy)")
    evidence = "/sys/fs/cgroup/cgroup.controllers is missing (cgroup v1)"
    if line.cgroup_v2_required:
        return Verdict("fail", f"cgroup v1: the kubelet of Kubernetes {minor} refuses to start on it (failCgroupV1)",
                       evidence, CGROUP_V2_FIX)  # fmt: skip
    return Verdict("warn", f"cgroup v1 is deprecated (Kubernetes {minor} still runs)", evidence, CGROUP_V2_FIX)


# --- containerd -----------------------------------------------------------------------------------------


def containerd_for_kubelet(containerd: str, minor: str) -> Verdict:
    """The installed containerd against what the kubelet's minor needs (2.0 from 1.36: fail below it) and what
    containerd recommends for it (containerd RELEASES.md, one floor per branch: warn outside it)."""
    need = pins.kubernetes_line(minor).containerd_min
    fix = (f"gpustack up --only containerd   (installs containerd {pins.CONTAINERD_VERSION} from the release archive, "
           "sha256-verified; versions.containerd_source: release)")  # fmt: skip
    evidence = f"containerd --version: {containerd}; kubelet {minor}"
    if not pins.at_least(containerd, need):
        return Verdict("fail", f"containerd {containerd} is too old for Kubernetes {minor} (needs {need} or newer)",
                       evidence, fix)  # fmt: skip
    advice = pins.containerd_recommendation(containerd, minor)
    if advice:
        return Verdict("warn", f"containerd {containerd} runs Kubernetes {minor}, but {advice}", evidence, fix)
    return Verdict("pass", f"containerd {containerd} satisfies Kubernetes {minor}")


def containerd_config(containerd: str, config_version: int | None) -> Verdict:
    """config.toml's version against the one this containerd writes: older ones are migrated in memory at every
    start (and the version-N tables gpustack and the NVIDIA toolkit edit are not the ones read), newer ones refused."""
    want = pins.containerd_config_version(containerd)
    if want is None or config_version is None:
        return Verdict("pass", "no versioned config.toml (containerd's defaults)")
    evidence = f"/etc/containerd/config.toml version = {config_version}; containerd {containerd} writes version {want}"
    regenerate = ("gpustack up --only containerd   (regenerates config.toml for this containerd, with a backup; or by "
                  "hand: containerd config migrate > /tmp/config.toml, review, install it as /etc/containerd/config.toml, "
                  "sudo systemctl restart containerd)")  # fmt: skip
    if config_version == want:
        return Verdict("pass", f"containerd config version {want} (containerd {containerd})")
    if config_version > want:
        return Verdict("fail", f"containerd {containerd} cannot read config version {config_version}", evidence,
                       regenerate)  # fmt: skip
    return Verdict("warn", f"config.toml is version {config_version}: containerd {containerd} migrates it to version "
                   f"{want} at every start", evidence, regenerate)  # fmt: skip


def _drop_in_fix(imports: Sequence[str] | None) -> str:
    """Add the toolkit's directory to config.toml's ``imports``: into the existing key (``containerd config
    default`` writes ``imports = []``; a second key would be a TOML error and containerd would not start), or as
    a new top-level key."""
    conf = "/etc/containerd/config.toml"
    if imports is not None:
        add = f"sudo sed -i 's#^imports *= *\\[#imports = [\"{TOOLKIT_IMPORT}\", #' {conf}"
    else:
        add = f"sudo sed -i '1i imports = [\"{TOOLKIT_IMPORT}\"]' {conf}"
    return f"{add} && sudo systemctl restart containerd   (the GPU Operator's toolkit pod adds the line itself when it restarts)"


def containerd_drop_ins(facts: Facts) -> Verdict:
    """Drop-in files in the directory the NVIDIA container toolkit writes to must be imported by config.toml, or
    the nvidia runtime they configure does not exist for containerd."""
    containerd = _mapping(facts, "containerd")
    drop_ins = [d for d in containerd.get("drop_ins") or [] if isinstance(d, Mapping)]
    lost = [str(d.get("path")) for d in drop_ins if not d.get("imported")]
    if not drop_ins:
        return Verdict("pass", f"no drop-in configuration in {TOOLKIT_DROP_IN_DIR}")
    if not lost:
        return Verdict("pass", f"config.toml imports the drop-ins in {TOOLKIT_DROP_IN_DIR}")
    raw = containerd.get("imports")
    imports = [str(i) for i in raw] if isinstance(raw, list) else None
    return Verdict(
        "fail", f"containerd does not read {', '.join(lost)}: the nvidia runtime the NVIDIA container toolkit "
                "configured there does not exist for it (\"no runtime for \\\"nvidia\\\" is configured\")",
        f"config.toml imports: {imports if imports is not None else 'no imports key'}; drop-ins: "
        f"{', '.join(str(d.get('path')) for d in drop_ins)}",
        _drop_in_fix(imports),
    )  # fmt: skip


# --- the NVIDIA driver on the host ---------------------------------------------------------------------


def dev_char_symlinks(facts: Facts) -> Verdict:
    if facts.get("nvidia_dev_char_symlinks") is not False:
        return Verdict("pass", "/dev/char links present or no driver loaded")
    return Verdict("fail", "/dev/char has no links to the NVIDIA devices: GPU pods lose their GPUs with "
                   "'Failed to initialize NVML: Unknown Error' after `systemctl daemon-reload`",
                   "NVIDIA driver loaded; no /dev/char/<major>:<minor> -> nvidia* link", DEV_CHAR_FIX)  # fmt: skip


def fabric_manager(facts: Facts, driver_in_container: bool) -> Verdict:
    """NVSwitch systems (HGX) need Fabric Manager running before CUDA can use the GPUs. The GPU Operator's driver
    container runs it itself; a driver installed on the host needs the host's nvidia-fabricmanager service."""
    switches = int(facts.get("nvidia_nvswitches") or 0)
    if not switches:
        return Verdict("pass", "no NVSwitch")
    if driver_in_container:
        return Verdict("pass", f"{switches} NVSwitches: the GPU Operator's driver container runs Fabric Manager")
    fm = _mapping(facts, "fabricmanager")
    if fm.get("active"):
        return Verdict("pass", f"{switches} NVSwitches, nvidia-fabricmanager running")
    driver = str(facts.get("nvidia_driver_version") or "")
    branch = driver.split(".", 1)[0] if driver else "<driver branch>"
    evidence = (f"{switches} NVSwitches on the PCI bus; host driver {driver or 'not loaded'}; nvidia-fabricmanager "
                f"{'installed, not active' if fm.get('installed') else 'not installed'}")  # fmt: skip
    summary = ("Fabric Manager is not running on an NVSwitch system: CUDA fails to initialise (error 802, "
               "'system not yet initialized') and the GPUs cannot use NVLink")  # fmt: skip
    if fm.get("installed"):
        return Verdict("fail", summary, evidence, "sudo systemctl enable --now nvidia-fabricmanager && "
                       "systemctl status nvidia-fabricmanager --no-pager")  # fmt: skip
    return Verdict("fail", summary, evidence,
                   f"sudo apt-get install -y nvidia-fabricmanager-{branch}   (the same version as the driver, "
                   f"{driver or '?'}) && sudo systemctl enable --now nvidia-fabricmanager")  # fmt: skip


# --- kernels and unattended upgrades -------------------------------------------------------------------


def driver_is_built(facts: Facts, operator_builds: bool) -> bool:
    """The NVIDIA kernel module is compiled on this host against the kernel: by the GPU Operator's driver
    container, or by DKMS (an nvidia-dkms-* / nvidia-kernel-dkms package)."""
    packages = [str(p.get("name")) for p in facts.get("gpu_packages") or [] if isinstance(p, Mapping)]
    return operator_builds or any("dkms" in name for name in packages)


def _release_key(release: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\-+~]", release))


def next_kernel_headers(facts: Facts, driver_is_built: bool) -> Verdict:
    """A kernel installed beside the running one (it boots next) without headers: after the reboot the driver
    cannot be built for it (the GPU Operator's driver container, or DKMS)."""
    running = str(facts.get("kernel") or "")
    kernels = [k for k in facts.get("kernels") or [] if isinstance(k, Mapping) and k.get("image")]
    newer = [k for k in kernels if running and _release_key(str(k.get("release"))) > _release_key(running)]
    missing = [str(k.get("release")) for k in newer if not k.get("headers")]
    if not missing or not driver_is_built:
        return Verdict("pass", "every installed kernel newer than the running one has its headers"
                       if driver_is_built else "the NVIDIA driver is not built on this host")  # fmt: skip
    return Verdict(
        "fail", f"kernel {missing[-1]} is installed and boots next, without headers: after the reboot the NVIDIA "
                "driver cannot be built for it (the GPU Operator's driver pod crash-loops, DKMS skips it)",
        f"running {running}; installed without /lib/modules/<release>/build: {', '.join(missing)}",
        "sudo apt-get install -y " + " ".join(f"linux-headers-{r}" for r in missing),
    )  # fmt: skip


def _blacklisted(name: str, blacklist: Sequence[str]) -> bool:
    """unattended-upgrades matches Package-Blacklist entries as regular expressions from the name's start."""
    for entry in blacklist:
        try:
            if re.match(entry, name):
                return True
        except re.error:
            if name.startswith(entry):
                return True
    return False


def unattended_upgrades(facts: Facts, driver_is_built: bool) -> Verdict:
    """unattended-upgrades that may install a kernel without its headers (where the driver is built against the
    kernel) or a new NVIDIA driver under the loaded module ("Driver/library version mismatch" until a reboot)."""
    uu = _mapping(facts, "unattended_upgrades")
    if not uu:
        return Verdict("pass", "unattended-upgrades is not installed")
    if not uu.get("enabled"):
        return Verdict("pass", 'unattended-upgrades is installed but off (APT::Periodic::Unattended-Upgrade "0")')
    packages = [p for p in facts.get("gpu_packages") or [] if isinstance(p, Mapping)]
    blacklist = [str(b) for b in uu.get("blacklist") or []]
    names = {str(p.get("name")) for p in packages}
    free = [
        str(p.get("name")) for p in packages if not p.get("held") and not _blacklisted(str(p.get("name")), blacklist)
    ]
    # kernel meta packages (linux-image-amd64, linux-image-generic...) pull new kernels; headers come along only
    # when the matching headers meta package is installed too
    kernels = [n for n in free if n.startswith("linux-image-") and not n[len("linux-image-") :][:1].isdigit()]
    headless = [n for n in kernels if n.replace("linux-image-", "linux-headers-", 1) not in names]
    drivers = [n for n in free if n.startswith(("nvidia-", "libnvidia-", "cuda-drivers"))]
    risks = []
    if driver_is_built and headless:
        risks.append(f"new kernels without headers ({', '.join(headless)} upgrades; "
                     f"{', '.join(n.replace('linux-image-', 'linux-headers-', 1) for n in headless)} not installed)")  # fmt: skip
    if drivers:
        risks.append(f"a new NVIDIA driver under the loaded module ({', '.join(drivers[:6])})")
    if not risks:
        return Verdict("pass", "unattended-upgrades leaves the kernel headers and the NVIDIA driver consistent")
    hold = sorted(set((headless if driver_is_built else []) + drivers))
    reboot = "; it reboots on its own (Automatic-Reboot)" if uu.get("automatic_reboot") else ""
    fix = f"sudo apt-mark hold {' '.join(hold)}   (upgrade them deliberately: drain the node, upgrade, reboot)"
    if driver_is_built and headless:
        metas = " ".join(n.replace("linux-image-", "linux-headers-", 1) for n in headless)
        fix += f"; or keep every new kernel's headers coming with it: sudo apt-get install -y {metas}"
    origins = ", ".join(map(str, uu.get("origins") or [])) or "default"
    return Verdict("warn", "unattended-upgrades may install " + " and ".join(risks),
                   f"APT::Periodic::Unattended-Upgrade on; origins: {origins}; blacklist: {', '.join(blacklist) or 'none'}"
                   f"{reboot}", fix)  # fmt: skip
