"""Host (H..) and container runtime (C..) checks: pure functions over ``snap.hosts`` (the
``gpustack_facts`` output of every node, see playbooks/README.md) and ``snap.errors``.

Each check yields one finding per node; a failing finding names the evidence it saw and the exact
commands that fix it. A node whose facts could not be read is reported once, by H00.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpustack.checks import hostrules
from gpustack.checks.model import Finding, Status
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Obj, Snapshot

Facts = Mapping[str, Any]
BOTH = ("doctor", "verify")

FIREWALL_FIX = "gpustack up --only firewall"
NODE_EXPORTER_FIX = "gpustack up --only cluster  (moves the cluster's node-exporter off 9100: the host one is known)"
SWAP_FIX = "sudo swapoff -a && sudo sed -ri.bak '/^[^#].*\\sswap\\s/ s/^/#/' /etc/fstab   (or: gpustack up --only os)"
BRIDGE_FIX = (
    "sudo modprobe br_netfilter && sudo sysctl -w net.bridge.bridge-nf-call-iptables=1 "
    "net.bridge.bridge-nf-call-ip6tables=1   (persisted by: gpustack up --only os)"
)
FORWARD_FIX = "sudo sysctl -w net.ipv4.ip_forward=1   (persisted by: gpustack up --only os)"
KUBE_PROCESSES_6443 = ("kube-apiserver",)
DCGM_PROCESSES = ("dcgm-exporter", "nv-hostengine", "dcgm_exporter")


def _f(id_: str, layer: str, status: Status, summary: str, host: str, evidence: str = "", fix: str = "") -> Finding:
    return Finding(id_, layer, status, summary, host=host, evidence=evidence, fix=fix)


def _each(
    snap: Snapshot, id_: str, layer: str, fn: Callable[[str, Facts], Finding | None], *, what: str
) -> list[Finding]:
    """Run ``fn`` per node (sorted); ``None`` means pass. No facts at all -> one skip."""
    hosts = {k: v for k, v in snap.hosts.items() if isinstance(v, Mapping)}
    if not hosts:
        # said as what it is, not as the check's result ("swap is off: no host facts" read like a pass); the
        # same words for every such check, so the report says them once (diagnose/report.py)
        return [Finding(id_, layer, "skip", "not checked: no host facts collected (see H00-host-facts)")]
    out = []
    for name in sorted(hosts):
        found = fn(name, hosts[name])
        out.append(found if found is not None else _f(id_, layer, "pass", what, name))
    return out


def _rule(
    snap: Snapshot, id_: str, layer: str, verdict: Callable[[str, Facts], hostrules.Verdict], *, what: str
) -> list[Finding]:
    """A :mod:`gpustack.checks.hostrules` rule per node (the preflight judges the same rule before ``up``)."""

    def one(name: str, facts: Facts) -> Finding | None:
        v = verdict(name, facts)
        return None if v.status == "pass" else _f(id_, layer, v.status, v.summary, name, v.evidence, v.fix)

    return _each(snap, id_, layer, one, what=what)


def _listeners(facts: Facts, port: int, proto: str = "tcp") -> list[Mapping[str, Any]]:
    out = []
    for entry in facts.get("listening") or []:
        if not isinstance(entry, Mapping):
            continue
        try:
            p = int(entry.get("port", -1))
        except (TypeError, ValueError):
            continue
        if p == port and entry.get("proto") == proto:
            out.append(entry)
    return out


def _who(entries: Iterable[Mapping[str, Any]]) -> str:
    return ", ".join(f"{e.get('address')}:{e.get('port')} by {e.get('process') or 'unknown process'}" for e in entries)


def _has_gpu(facts: Facts) -> bool:
    return bool(facts.get("nvidia_pci_devices"))


def _dig(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]... or None when any step is missing or not a mapping (malformed objects)."""
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _driver_enabled(snap: Snapshot) -> bool | None:
    """ClusterPolicy spec.driver.enabled when the snapshot has one (None: unknown)."""
    for cp in snap.items("ClusterPolicy"):
        driver = _dig(cp, "spec", "driver")
        if isinstance(driver, Mapping) and "enabled" in driver:
            return bool(driver["enabled"])
    return None


def _operator_builds_driver(snap: Snapshot, facts: Facts) -> bool:
    """GPU present, no host-installed driver (nvidia-smi on the host), and the GPU Operator's driver
    container is (or will be) in charge."""
    if not _has_gpu(facts) or facts.get("nvidia_smi"):
        return False
    return _driver_enabled(snap) is not False


# ---------------------------------------------------------------------------------------- host


@register("H00-host-facts", "host", title="host facts collected from every node", reads="SSH (preflight.yml)",
          commands=BOTH)  # fmt: skip
def host_facts(snap: Snapshot) -> list[Finding]:
    out = []
    for key in sorted(snap.errors):
        if key == "hosts" or key.startswith("hosts:"):
            node = key.partition(":")[2] or None
            out.append(
                Finding("H00-host-facts", "host", "fail", "could not read host facts", host=node,
                        evidence=snap.errors[key],
                        fix="check SSH (address, key, known_hosts) and passwordless sudo for that node; "
                            "`gpustack up --only preflight` shows the same collection")
            )  # fmt: skip
    for name in sorted(snap.hosts):
        out.append(Finding("H00-host-facts", "host", "pass", "host facts collected", host=name))
    return out or [Finding("H00-host-facts", "host", "skip", "host facts were not collected")]


@register("H01-swap", "host", title="swap is off", reads="host facts: swap_active, fstab_swap_lines", commands=BOTH)
def swap(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        active = [s for s in facts.get("swap_active") or [] if isinstance(s, Mapping)]
        lines = [str(x) for x in facts.get("fstab_swap_lines") or []]
        if not active and not lines:
            return None
        ev = "; ".join([f"active: {s.get('device')} ({s.get('size_bytes')} B)" for s in active]
                       + [f"/etc/fstab: {ln}" for ln in lines])  # fmt: skip
        summary = "swap is on: kubelet refuses to run" if active else "swap is in /etc/fstab: on after the next boot"
        return _f("H01-swap", "host", "fail", summary, name, ev, SWAP_FIX)

    return _each(snap, "H01-swap", "host", one, what="swap is off")


@register("H02-bridge-netfilter", "host", title="br_netfilter loaded, bridge-nf-call-iptables = 1",
          reads="host facts: bridge_nf_call_iptables, br_netfilter", commands=BOTH)  # fmt: skip
def bridge_netfilter(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        value = facts.get("bridge_nf_call_iptables")
        if value == "1":
            return None
        if value is None and not facts.get("br_netfilter"):
            return _f("H02-bridge-netfilter", "host", "fail",
                      "br_netfilter is not loaded: Flannel pod traffic bypasses iptables (Services break)", name,
                      "/proc/sys/net/bridge/bridge-nf-call-iptables does not exist", BRIDGE_FIX)  # fmt: skip
        return _f("H02-bridge-netfilter", "host", "fail",
                  "net.bridge.bridge-nf-call-iptables is not 1: bridged pod traffic skips kube-proxy's rules", name,
                  f"net.bridge.bridge-nf-call-iptables = {value}", BRIDGE_FIX)  # fmt: skip

    return _each(snap, "H02-bridge-netfilter", "host", one, what="bridge-nf-call-iptables = 1")


@register("H03-ip-forward", "host", title="net.ipv4.ip_forward = 1", reads="host facts: ip_forward", commands=BOTH)
def ip_forward(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        value = facts.get("ip_forward")
        if value == "1":
            return None
        return _f("H03-ip-forward", "host", "fail",
                  "IP forwarding is off: pods cannot leave the node (kubeadm refuses to init/join)", name,
                  f"net.ipv4.ip_forward = {value}", FORWARD_FIX)  # fmt: skip

    return _each(snap, "H03-ip-forward", "host", one, what="net.ipv4.ip_forward = 1")


@register("H04-firewall", "host", title="host firewall lets pods reach the API server (10.96.0.1:443, :6443)",
          reads="host facts: firewall (iptables -S)", fixable=True)  # fmt: skip
def firewall(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        fw = facts.get("firewall")
        if not isinstance(fw, Mapping):
            return _f("H04-firewall", "host", "skip", "iptables rules unreadable (no root or no iptables)", name)
        policy = str(fw.get("input_policy") or "?")
        chain, jump, pod_rule = bool(fw.get("gpustack_chain")), bool(fw.get("jump")), bool(fw.get("pod_api_rule"))
        state = f"INPUT policy {policy}; chain GPUSTACK-INPUT {'present' if chain else 'missing'}; " + (
            f"jump {'present' if jump else 'missing'}; pod CIDR -> 6443 rule {'present' if pod_rule else 'missing'}"
        )
        if fw.get("drops_before_jump"):
            rules = "; ".join(str(r) for r in fw.get("drop_rules") or []) or "a DROP/REJECT rule"
            return _f("H04-firewall", "host", "fail",
                      "the firewall drops pod -> API traffic before gpustack's rules (pods time out on "
                      "10.96.0.1:443, CoreDNS not ready)", name, f"{rules} comes before -j GPUSTACK-INPUT; {state}",
                      FIREWALL_FIX + "   (puts the jump to GPUSTACK-INPUT back on top of INPUT)")  # fmt: skip
        complete = chain and jump and pod_rule
        if policy in ("DROP", "REJECT") and not complete:
            return _f("H04-firewall", "host", "fail",
                      "INPUT drops by default and gpustack's accept rules are missing: pods time out on 10.96.0.1:443",
                      name, state, FIREWALL_FIX)  # fmt: skip
        if not complete:
            return _f("H04-firewall", "host", "warn",
                      "gpustack's firewall chain is missing or incomplete (harmless only while INPUT accepts "
                      "everything)", name, state, FIREWALL_FIX)  # fmt: skip
        return None

    return _each(snap, "H04-firewall", "host", one, what="firewall accepts pod -> API traffic")


def _node_exporter_port_in_cluster(snap: Snapshot) -> int | None:
    """The port the cluster's node-exporter DaemonSet binds (hostNetwork), when collected."""
    for ds in snap.items("DaemonSet"):
        if "node-exporter" not in str(_dig(ds, "metadata", "name") or ""):
            continue
        containers = _dig(ds, "spec", "template", "spec", "containers")
        for c in containers if isinstance(containers, list) else []:
            ports = _dig(c, "ports")
            for p in ports if isinstance(ports, list) else []:
                port = _dig(p, "hostPort") or _dig(p, "containerPort")
                if isinstance(port, int):
                    return port
    return None


@register("H05-node-exporter-port", "host", title="no host node_exporter on 9100 (or the cluster's moved away)",
          reads="host facts: listening, node_exporter_on_9100; DaemonSets", fixable=True)  # fmt: skip
def node_exporter_port(snap: Snapshot) -> list[Finding]:
    cluster_port = _node_exporter_port_in_cluster(snap)

    def one(name: str, facts: Facts) -> Finding | None:
        if not facts.get("node_exporter_on_9100"):
            return None
        ev = f"9100/tcp: {_who(_listeners(facts, 9100)) or 'in use'}"
        if cluster_port == 9100:
            return _f("H05-node-exporter-port", "host", "fail",
                      "a host node_exporter holds 9100 and the cluster's node-exporter wants it too "
                      "(bind: address already in use / Pending: didn't have free ports)", name,
                      f"{ev}; DaemonSet node-exporter binds 9100", NODE_EXPORTER_FIX)  # fmt: skip
        where = f"the cluster's node-exporter uses {cluster_port}" if cluster_port else "keep it off 9100"
        return _f("H05-node-exporter-port", "host", "warn",
                  f"a host node_exporter listens on 9100 ({where})", name, ev, NODE_EXPORTER_FIX)  # fmt: skip

    return _each(snap, "H05-node-exporter-port", "host", one, what="9100 free for node-exporter")


def _foreign_port(snap: Snapshot, id_: str, port: int, owners: tuple[str, ...], role: str, fix: str) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        entries = _listeners(facts, port)
        if not entries:
            return None
        procs = {str(e.get("process")) for e in entries if e.get("process")}
        if procs and all(p in owners for p in procs):
            return None
        if not procs:
            return _f(id_, "host", "warn", f"{port}/tcp is in use by a process whose owner could not be read", name,
                      _who(entries), f"sudo ss -ltnp 'sport = :{port}'   (it must be {role})")  # fmt: skip
        return _f(id_, "host", "fail", f"{port}/tcp is taken by {', '.join(sorted(procs))}, not {role}", name,
                  _who(entries), fix)  # fmt: skip

    return _each(snap, id_, "host", one, what=f"{port}/tcp free or used by {role}")


@register("H06-port-9400", "host", title="9400 free or used by dcgm-exporter", reads="host facts: listening")
def port_9400(snap: Snapshot) -> list[Finding]:
    return _foreign_port(snap, "H06-port-9400", 9400, DCGM_PROCESSES, "dcgm-exporter",
                         "stop the service holding 9400 (sudo ss -ltnp 'sport = :9400'; sudo systemctl disable --now "
                         "<unit>): a host dcgm-exporter beside the operator's is two DCGM host engines on one GPU")  # fmt: skip


@register("H07-port-6443", "host", title="6443 free or used by kube-apiserver", reads="host facts: listening")
def port_6443(snap: Snapshot) -> list[Finding]:
    return _foreign_port(snap, "H07-port-6443", 6443, KUBE_PROCESSES_6443, "kube-apiserver",
                         "stop the service holding 6443 (sudo ss -ltnp 'sport = :6443'; sudo systemctl disable "
                         "--now <unit>), then gpustack up")  # fmt: skip


@register("H08-nouveau", "host", title="nouveau not loaded", reads="host facts: nouveau_loaded")
def nouveau(snap: Snapshot) -> list[Finding]:
    fix = (
        "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf"
        " && sudo update-initramfs -u && sudo reboot"
    )

    def one(name: str, facts: Facts) -> Finding | None:
        if not facts.get("nouveau_loaded"):
            return None
        return _f("H08-nouveau", "host", "fail", "nouveau is loaded: the NVIDIA driver cannot bind the GPUs", name,
                  "/proc/modules lists nouveau", fix)  # fmt: skip

    return _each(snap, "H08-nouveau", "host", one, what="nouveau not loaded")


@register("H09-secure-boot", "host", title="Secure Boot does not block the operator-built driver",
          reads="host facts: secure_boot, nvidia_*; ClusterPolicy")  # fmt: skip
def secure_boot(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        if facts.get("secure_boot") != "enabled" or not _operator_builds_driver(snap, facts):
            return None
        if facts.get("nvidia_driver_version"):
            return None  # the driver loaded anyway (signed)
        return _f("H09-secure-boot", "host", "fail",
                  "Secure Boot is on and the GPU Operator builds an unsigned driver: the kernel refuses to load it",
                  name, "secure_boot=enabled, no host driver (nvidia-smi absent), no nvidia module loaded",
                  "disable Secure Boot in the firmware, or install a signed driver on the host "
                  "(sudo apt-get install nvidia-driver-<version>-server; gpustack then sets driver.enabled=false: "
                  "gpustack up --only cluster)")  # fmt: skip

    return _each(snap, "H09-secure-boot", "host", one, what="Secure Boot not in the way")


@register("H10-kernel-headers", "host", title="kernel headers present where the operator builds the driver",
          reads="host facts: kernel_headers, kernel, nvidia_*; ClusterPolicy")  # fmt: skip
def kernel_headers(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        if facts.get("kernel_headers") or not _operator_builds_driver(snap, facts):
            return None
        if facts.get("nvidia_driver_version"):
            return None  # built and loaded already
        kernel = facts.get("kernel") or "$(uname -r)"
        return _f("H10-kernel-headers", "host", "fail",
                  "kernel headers are missing: the GPU Operator's driver container cannot build the module", name,
                  f"/lib/modules/{kernel}/build does not exist",
                  f"sudo apt-get install -y linux-headers-{kernel}")  # fmt: skip

    return _each(snap, "H10-kernel-headers", "host", one, what="kernel headers present or not needed")


@register("H11-dev-char-symlinks", "host", title="/dev/char links to the NVIDIA devices (NVML Unknown Error)",
          reads="host facts: nvidia_dev_char_symlinks")  # fmt: skip
def dev_char_symlinks(snap: Snapshot) -> list[Finding]:
    return _rule(snap, "H11-dev-char-symlinks", "host", lambda _name, facts: hostrules.dev_char_symlinks(facts),
                 what="/dev/char links present or no driver loaded")  # fmt: skip


@register("H12-fabric-manager", "host", title="Fabric Manager runs on NVSwitch systems (host driver)",
          reads="host facts: nvidia_nvswitches, fabricmanager, nvidia_smi; ClusterPolicy")  # fmt: skip
def fabric_manager(snap: Snapshot) -> list[Finding]:
    return _rule(snap, "H12-fabric-manager", "host",
                 lambda _name, facts: hostrules.fabric_manager(facts, _operator_builds_driver(snap, facts)),
                 what="Fabric Manager running or not needed")  # fmt: skip


def _built(snap: Snapshot, facts: Facts) -> bool:
    return hostrules.driver_is_built(facts, _operator_builds_driver(snap, facts))


@register("H13-unattended-upgrades", "host",
          title="unattended-upgrades cannot install a kernel without headers or a driver under the loaded one",
          reads="host facts: unattended_upgrades (apt-config dump), gpu_packages (dpkg status); ClusterPolicy")  # fmt: skip
def unattended(snap: Snapshot) -> list[Finding]:
    return _rule(snap, "H13-unattended-upgrades", "host",
                 lambda _name, facts: hostrules.unattended_upgrades(facts, _built(snap, facts)),
                 what="unattended-upgrades off or harmless")  # fmt: skip


@register("H14-next-kernel-headers", "host", title="a kernel installed to boot next has its headers",
          reads="host facts: kernels, kernel, gpu_packages; ClusterPolicy")  # fmt: skip
def next_kernel_headers(snap: Snapshot) -> list[Finding]:
    return _rule(snap, "H14-next-kernel-headers", "host",
                 lambda _name, facts: hostrules.next_kernel_headers(facts, _built(snap, facts)),
                 what="installed kernels have headers")  # fmt: skip


# ------------------------------------------------------------------------------------- runtime


@register("C01-cgroup-driver", "runtime", title="containerd SystemdCgroup matches kubelet's cgroupDriver",
          reads="host facts: containerd.systemd_cgroup, kubelet_cgroup_driver")  # fmt: skip
def cgroup_driver(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        containerd: Obj = dict(facts.get("containerd") or {})
        systemd_cgroup = containerd.get("systemd_cgroup")
        kubelet = facts.get("kubelet_cgroup_driver")
        if systemd_cgroup is None or kubelet is None:
            return _f("C01-cgroup-driver", "runtime", "skip",
                      "containerd config or kubelet config not there yet", name,
                      f"containerd SystemdCgroup={systemd_cgroup}; kubelet cgroupDriver={kubelet}")  # fmt: skip
        containerd_driver = "systemd" if systemd_cgroup else "cgroupfs"
        if containerd_driver == kubelet:
            return None
        return _f("C01-cgroup-driver", "runtime", "fail",
                  f"cgroup driver mismatch: containerd uses {containerd_driver}, kubelet {kubelet} "
                  "(control-plane pods restart in a loop)", name,
                  f"/etc/containerd/config.toml SystemdCgroup = {str(systemd_cgroup).lower()}; "
                  f"/var/lib/kubelet/config.yaml cgroupDriver: {kubelet}",
                  "gpustack up --only containerd   (sets SystemdCgroup = true and restarts containerd; "
                  "kubelet uses systemd)")  # fmt: skip

    return _each(snap, "C01-cgroup-driver", "runtime", one, what="cgroup drivers agree")


@register("C02-cri", "runtime", title="containerd running, CRI socket present",
          reads="host facts: containerd_active, cri_socket, containerd.path", commands=BOTH)  # fmt: skip
def cri(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> Finding | None:
        containerd: Obj = dict(facts.get("containerd") or {})
        if not containerd.get("path"):
            return _f("C02-cri", "runtime", "fail", "containerd is not installed", name,
                      "no containerd executable on PATH", "gpustack up --only containerd")  # fmt: skip
        active, sock = facts.get("containerd_active"), facts.get("cri_socket")
        if active is not False and sock is not False:
            return None
        problems = []
        if active is False:
            problems.append("containerd.service is not active")
        if sock is False:
            problems.append("/run/containerd/containerd.sock is missing")
        return _f("C02-cri", "runtime", "fail", "the container runtime is down: kubelet cannot start any pod", name,
                  "; ".join(problems),
                  "sudo systemctl restart containerd && systemctl is-active containerd   "
                  "(if it fails: sudo journalctl -u containerd -n 50)")  # fmt: skip

    return _each(snap, "C02-cri", "runtime", one, what="CRI up")


def _kubelet_minor(facts: Facts) -> str | None:
    return hostrules.minor_of(facts.get("kubelet_version"))


@register("C03-cgroup-v2", "runtime", title="cgroup v2 where the kubelet requires it (Kubernetes 1.35+)",
          reads="host facts: cgroup_v2, kubelet_version")  # fmt: skip
def cgroup_v2(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> hostrules.Verdict:
        minor = _kubelet_minor(facts)
        if minor is None:
            return hostrules.Verdict("skip", "no kubelet on this host")
        v = hostrules.cgroup_v2(facts, minor)
        return v if v.status == "pass" else replace(v, evidence=f"{v.evidence}; kubelet {facts.get('kubelet_version')}")

    return _rule(snap, "C03-cgroup-v2", "runtime", one, what="cgroup v2")


@register("C04-containerd-version", "runtime", title="containerd new enough for the kubelet (2.0 from Kubernetes 1.36)",
          reads="host facts: containerd.version, kubelet_version")  # fmt: skip
def containerd_version(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> hostrules.Verdict:
        minor, found = _kubelet_minor(facts), (facts.get("containerd") or {}).get("version")
        if minor is None or not found:
            return hostrules.Verdict("skip", "no kubelet or no containerd on this host (see C02-cri)")
        return hostrules.containerd_for_kubelet(str(found), minor)

    return _rule(snap, "C04-containerd-version", "runtime", one, what="containerd version")


@register("C05-containerd-config-version", "runtime", title="containerd's config.toml version is the one it writes",
          reads="host facts: containerd.version, containerd.config_version")  # fmt: skip
def containerd_config_version(snap: Snapshot) -> list[Finding]:
    def one(name: str, facts: Facts) -> hostrules.Verdict:
        containerd: Obj = dict(facts.get("containerd") or {})
        if not containerd.get("version"):
            return hostrules.Verdict("skip", "no containerd on this host (see C02-cri)")
        return hostrules.containerd_config(str(containerd["version"]), containerd.get("config_version"))

    return _rule(snap, "C05-containerd-config-version", "runtime", one, what="containerd config version")


@register("C06-containerd-drop-ins", "runtime",
          title="config.toml imports the drop-in directory the NVIDIA toolkit writes to (/etc/containerd/conf.d)",
          reads="host facts: containerd.imports, containerd.drop_ins")  # fmt: skip
def containerd_drop_ins(snap: Snapshot) -> list[Finding]:
    return _rule(snap, "C06-containerd-drop-ins", "runtime", lambda _name, facts: hostrules.containerd_drop_ins(facts),
                 what="drop-ins imported")  # fmt: skip
