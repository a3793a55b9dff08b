"""Pure parsing functions of the gpustack_facts preflight module, and one real collection."""

from __future__ import annotations

import json
from types import ModuleType

import pytest
from conftest import FIXTURES

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 \
21455 1 0000000000000000 100 0 0 10 0
   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 \
18334 1 0000000000000000 100 0 0 10 0
   2: 0202000A:0016 0101000A:D3A4 01 00000000:00000000 02:0009B2DE 00000000     0        0 \
35001 4 0000000000000000 20 4 31 10 -1
   3: 00000000:238C 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 \
40000 1 0000000000000000 100 0 0 10 0
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue \
rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A \
00000000:00000000 00:00000000 00000000     0        0 18336 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:0CEA 00000000000000000000000000000000:0000 0A \
00000000:00000000 00:00000000 00000000     0        0 18337 1 0000000000000000 100 0 0 10 0
"""
UDP = """\
   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout \
inode ref pointer drops
  123: 3500007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   102        0 \
17897 2 0000000000000000 0
 4567: 00000000:2118 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 \
17900 2 0000000000000000 0
 4568: 0202000A:9C40 08080808:0035 01 00000000:00000000 00:00000000 00000000  1000        0 \
17901 2 0000000000000000 0
"""

SCHEMA_KEYS = {
    "hostname",
    "os_id",
    "os_version_id",
    "os_pretty",
    "arch",
    "kernel",
    "cpus",
    "mem_total_bytes",
    "disk_free_bytes",
    "swap_active",
    "fstab_swap_lines",
    "listening",
    "certificates",
    "etcd",
    "cis_files",
    "nvidia_pci_devices",
    "nvidia_driver_version",
    "nvidia_smi",
    "nvidia_container_toolkit",
    "nouveau_loaded",
    "secure_boot",
    "kernel_headers",
    "br_netfilter",
    "overlay",
    "ip_forward",
    "cgroup_v2",
    "kubernetes",
    "containerd",
    "sudo_nopasswd",
    "is_root",
    "time_synced",
    "peers",
    "node_exporter_on_9100",
    "python",
    "bridge_nf_call_iptables",
    "kubelet_cgroup_driver",
    "cri_socket",
    "containerd_active",
    "firewall",
    "nvidia_dev_char_symlinks",
    "nvidia_nvswitches",
    "fabricmanager",
    "kubelet_version",
    "kernels",
    "unattended_upgrades",
    "gpu_packages",
}


def test_os_release_ubuntu(host_parsers: ModuleType) -> None:
    text = (
        'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
        'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nID=ubuntu\nID_LIKE=debian\n# comment\n\n'
    )
    out = host_parsers.parse_os_release(text)
    assert (out["ID"], out["VERSION_ID"], out["PRETTY_NAME"]) == (
        "ubuntu",
        "22.04",
        "Ubuntu 22.04.4 LTS",
    )


def test_os_release_debian(host_parsers: ModuleType) -> None:
    text = (
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
        'VERSION_ID="12"\nID=debian\nHOME_URL="https://www.debian.org/"\nQUOTED=\'single\'\n'
        'ESCAPED="a \\"b\\""\n'
    )
    out = host_parsers.parse_os_release(text)
    assert (out["ID"], out["VERSION_ID"]) == ("debian", "12")
    assert out["QUOTED"] == "single"
    assert out["ESCAPED"] == 'a "b"'


@pytest.mark.parametrize(
    ("value", "byteorder", "expected"),
    [
        ("0100007F:0CEA", "little", ("127.0.0.1", 3306)),
        ("00000000:0016", "little", ("0.0.0.0", 22)),
        ("7F000001:0050", "big", ("127.0.0.1", 80)),
        ("00000000000000000000000001000000:0CEA", "little", ("::1", 3306)),
        ("00000000000000000000000000000000:1A0A", "little", ("::", 6666)),
        ("0000000000000000FFFF00000202000A:01BB", "little", ("::ffff:10.0.2.2", 443)),
    ],
)
def test_decode_proc_net_address(
    host_parsers: ModuleType, value: str, byteorder: str, expected: tuple[str, int]
) -> None:
    assert host_parsers.decode_proc_net_address(value, byteorder) == expected


def test_proc_net_tcp_listeners_only(host_parsers: ModuleType) -> None:
    out = host_parsers.parse_proc_net(TCP, "tcp", "little")
    assert [(e["address"], e["port"], e["inode"]) for e in out] == [
        ("127.0.0.1", 3306, 21455),
        ("0.0.0.0", 22, 18334),
        ("0.0.0.0", 9100, 40000),
    ]
    out6 = host_parsers.parse_proc_net(TCP6, "tcp", "little")
    assert [(e["address"], e["port"]) for e in out6] == [("::", 22), ("::1", 3306)]


def test_proc_net_udp_bound_unconnected(host_parsers: ModuleType) -> None:
    out = host_parsers.parse_proc_net(UDP, "udp", "little")
    assert [(e["proto"], e["address"], e["port"]) for e in out] == [
        ("udp", "127.0.0.53", 53),
        ("udp", "0.0.0.0", 8472),
    ]


def test_proc_net_ignores_garbage(host_parsers: ModuleType) -> None:
    assert host_parsers.parse_proc_net("header\nnot a socket line\n", "tcp") == []


def test_socket_inode(host_parsers: ModuleType) -> None:
    assert host_parsers.socket_inode("socket:[12345]") == 12345
    assert host_parsers.socket_inode("pipe:[12345]") is None
    assert host_parsers.socket_inode("/dev/null") is None


def test_merge_listening_and_node_exporter(host_parsers: ModuleType) -> None:
    sockets = host_parsers.parse_proc_net(TCP, "tcp", "little") + host_parsers.parse_proc_net(TCP6, "tcp", "little")
    host_owner = {
        40000: {
            "pid": 10,
            "name": "node_exporter",
            "cgroup": "0::/system.slice/node_exporter.service\n",
        }
    }
    merged = host_parsers.merge_listening(sockets, host_owner)
    assert [(e["address"], e["port"]) for e in merged] == [
        ("0.0.0.0", 22),
        ("::", 22),
        ("127.0.0.1", 3306),
        ("::1", 3306),
        ("0.0.0.0", 9100),
    ]
    assert merged[-1]["process"] == "node_exporter"
    assert host_parsers.derive_node_exporter_on_9100(merged) is True

    pod_owner = {
        40000: {
            "pid": 11,
            "name": "node_exporter",
            "cgroup": "0::/kubepods.slice/kubepods-burstable.slice/cri-containerd-1.scope\n",
        }
    }
    assert host_parsers.derive_node_exporter_on_9100(host_parsers.merge_listening(sockets, pod_owner)) is False
    # owner unknown (no root): counted as a host listener
    assert host_parsers.derive_node_exporter_on_9100(host_parsers.merge_listening(sockets, {})) is True
    assert host_parsers.derive_node_exporter_on_9100(host_parsers.merge_listening(sockets[:2], {})) is False


def test_merge_listening_dedupes(host_parsers: ModuleType) -> None:
    dup = [
        {"proto": "tcp", "address": "0.0.0.0", "port": 80, "inode": 1},
        {"proto": "tcp", "address": "0.0.0.0", "port": 80, "inode": 2},
    ]
    merged = host_parsers.merge_listening(dup, {2: {"pid": 5, "name": "nginx", "cgroup": ""}})
    assert len(merged) == 1
    assert merged[0]["process"] == "nginx"


def test_proc_swaps(host_parsers: ModuleType) -> None:
    text = (
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
        "/dev/sda2                               partition\t2097148\t\t0\t\t-2\n"
        "/swap\\040file                           file\t\t1048572\t\t512\t\t-3\n"
    )
    assert host_parsers.parse_proc_swaps(text) == [
        {"device": "/dev/sda2", "size_bytes": 2097148 * 1024},
        {"device": "/swap file", "size_bytes": 1048572 * 1024},
    ]
    assert host_parsers.parse_proc_swaps("Filename\tType\tSize\tUsed\tPriority\n") == []


def test_fstab_swap(host_parsers: ModuleType) -> None:
    text = (
        "# /etc/fstab: static file system information.\n"
        "UUID=1111 /               ext4    errors=remount-ro 0       1\n"
        "UUID=2222 none            swap    sw              0       0\n"
        "#/swapfile none swap sw 0 0\n"
        "  /swap.img\tnone\tswap\tsw\t0\t0\n"
        "tmpfs /tmp tmpfs defaults,swapfoo 0 0\n"
    )
    assert host_parsers.parse_fstab_swap(text) == [
        "UUID=2222 none            swap    sw              0       0",
        "/swap.img\tnone\tswap\tsw\t0\t0",
    ]


def test_filesystems(host_parsers: ModuleType) -> None:
    text = "nodev\tsysfs\nnodev\ttmpfs\n\text4\nnodev\toverlay\n"
    assert {"overlay", "ext4", "sysfs"} <= host_parsers.parse_filesystems(text)
    assert "overlay" not in host_parsers.parse_filesystems("nodev\toverlayfs\n")


def test_meminfo(host_parsers: ModuleType) -> None:
    assert host_parsers.parse_meminfo_total("MemTotal:       16318480 kB\nMemFree: 1 kB\n") == 16318480 * 1024
    assert host_parsers.parse_meminfo_total("nothing\n") is None


@pytest.mark.parametrize(
    ("efi", "data", "expected"),
    [
        (False, None, "not-efi"),
        (True, b"\x06\x00\x00\x00\x01", "enabled"),
        (True, b"\x06\x00\x00\x00\x00", "disabled"),
        (True, None, "unknown"),
        (True, b"\x06\x00", "unknown"),
        (True, b"\x06\x00\x00\x00\x07", "unknown"),
    ],
)
def test_secure_boot(host_parsers: ModuleType, efi: bool, data: bytes | None, expected: str) -> None:
    assert host_parsers.parse_secure_boot(efi, data) == expected


def test_nvidia_version(host_parsers: ModuleType) -> None:
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
    )
    assert host_parsers.parse_nvidia_version(text) == "550.54.14"
    open_text = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n"
    assert host_parsers.parse_nvidia_version(open_text) == "570.86.15"
    assert host_parsers.parse_nvidia_version("garbage") is None


def test_pci_devices(host_parsers: ModuleType) -> None:
    devices = [
        {"slot": "0000:3b:00.0", "vendor": "0x10de\n", "device": "0x20b0\n", "class": "0x030200\n"},
        {
            "slot": "0000:3b:00.1",
            "vendor": "0x10de",
            "device": "0x1aeb",
            "class": "0x040300",
        },  # audio
        {"slot": "0000:00:02.0", "vendor": "0x8086", "device": "0x3e92", "class": "0x030000"},
        {"slot": "0000:1a:00.0", "vendor": "0x10DE", "device": "0x2330", "class": "0x030200"},
    ]
    assert host_parsers.parse_pci_devices(devices) == [
        {"slot": "0000:1a:00.0", "device_id": "0x2330", "class": "0x030200"},
        {"slot": "0000:3b:00.0", "device_id": "0x20b0", "class": "0x030200"},
    ]


def test_nouveau(host_parsers: ModuleType) -> None:
    assert host_parsers.parse_modules_nouveau("nouveau 2400000 0 - Live 0x0\nvideo 1 1 nouveau\n")
    assert not host_parsers.parse_modules_nouveau("video 1 1 nouveau, Live\n")


def test_containerd_config(runtime_parsers: ModuleType) -> None:
    v2 = (FIXTURES / "containerd-config-v2.toml").read_text()
    v3 = (FIXTURES / "containerd-config-v3.toml").read_text()
    assert runtime_parsers.parse_containerd_systemd_cgroup(v2) is False
    assert (
        runtime_parsers.parse_containerd_systemd_cgroup(v2.replace("SystemdCgroup = false", "SystemdCgroup = true"))
        is True
    )
    assert runtime_parsers.parse_containerd_systemd_cgroup(v3) is False
    assert runtime_parsers.parse_containerd_systemd_cgroup("") is None
    assert (
        runtime_parsers.parse_containerd_systemd_cgroup("root = '/x'\n[plugins.cri]\n  SystemdCgroup = true\n") is None
    )


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("containerd github.com/containerd/containerd/v2 v2.2.7 b8ef8fd2d3c6\n", "2.2.7"),
        ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1\n", "1.6.20"),
        ("containerd github.com/containerd/containerd/v2 2.1.9+unknown \n", "2.1.9"),
        ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", "1.7.27"),
        ("bash: containerd: command not found\n", None),
    ],
)
def test_containerd_version(runtime_parsers: ModuleType, out: str, expected: str | None) -> None:
    assert runtime_parsers.parse_containerd_version(0, out) == expected
    assert runtime_parsers.parse_containerd_version(1, out) is None


def test_containerd_config_version(runtime_parsers: ModuleType) -> None:
    assert runtime_parsers.parse_containerd_config_version((FIXTURES / "containerd-config-v3.toml").read_text()) == 3
    assert runtime_parsers.parse_containerd_config_version((FIXTURES / "containerd-config-v2.toml").read_text()) == 2
    assert runtime_parsers.parse_containerd_config_version("[plugins.cri]\nversion = 2\n") is None
    assert runtime_parsers.parse_containerd_config_version(None) is None


def test_systemctl_and_timedatectl(host_parsers: ModuleType) -> None:
    assert host_parsers.parse_systemctl_is_active(0, "active\n") is True
    assert host_parsers.parse_systemctl_is_active(3, "inactive\n") is False
    assert host_parsers.parse_systemctl_is_active(1, "System has not been booted with systemd\n") is None
    assert host_parsers.parse_timedatectl(0, "yes\n") is True
    assert host_parsers.parse_timedatectl(0, "no\n") is False
    assert host_parsers.parse_timedatectl(1, "") is None


def test_nearest_existing(host_parsers: ModuleType) -> None:
    existing = {"/", "/var"}
    assert host_parsers.nearest_existing("/var/lib/containerd", existing.__contains__) == "/var"
    assert host_parsers.nearest_existing("/nope", existing.__contains__) == "/"


@pytest.mark.parametrize(
    ("euid", "environ", "uid"),
    [
        (0, {"SUDO_UID": "1000", "SUDO_USER": "gpustack"}, 1000),  # the login user, through sudo (become)
        (0, {"SUDO_UID": "0"}, 0),  # root, through sudo
        (0, {}, 0),  # a root login (Ansible needs no sudo for it)
        (1000, {"SUDO_UID": "0"}, 1000),  # not root: its own uid, whatever the environment says
        (0, {"SUDO_UID": "x"}, 0),
    ],
)
def test_login_uid_is_the_login_users_own(
    facts_module: ModuleType, euid: int, environ: dict[str, str], uid: int
) -> None:
    assert facts_module.login_uid(euid, environ) == uid


def test_collect_on_this_machine(facts_module: ModuleType) -> None:
    facts = facts_module.collect(probe_sudo=False, peers=["127.0.0.1", "192.0.2.254"], peer_port=9, peer_timeout=0.5)
    assert set(facts) == SCHEMA_KEYS
    json.dumps(facts)  # serialisable
    assert set(facts["disk_free_bytes"]) == {"/", "/var/lib"}
    assert set(facts["certificates"]) == {"kubeadm", "kubelet_serving"}
    assert set(facts["cis_files"]) == {"files", "pki", "kubelet"}
    assert set(facts["cis_files"]["kubelet"]) == {"source", "argv", "config_path", "config"}
    assert set(facts["kubernetes"]) == {
        "admin_conf",
        "kubelet_conf",
        "gpustack_marker",
        "kubeadm_path",
        "kubelet_active",
    }
    assert set(facts["containerd"]) == {"path", "version", "config_version", "systemd_cgroup", "imports", "drop_ins"}
    assert set(facts["peers"]) == {"127.0.0.1", "192.0.2.254"}
    assert all(isinstance(v, bool) for v in facts["peers"].values())
    assert all(set(e) == {"proto", "address", "port", "process"} for e in facts["listening"])
    assert isinstance(facts["cpus"], int) and facts["cpus"] > 0


def test_toolkit_preinstalled_needs_nvidia_ctk_and_nvidia_default_runtime(runtime_parsers: ModuleType) -> None:
    v2 = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n'
    v3 = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\n  default_runtime_name = 'runc'\n"
    assert runtime_parsers.parse_containerd_default_runtime(v2) == "nvidia"
    assert runtime_parsers.parse_containerd_default_runtime(v3) == "runc"
    assert runtime_parsers.parse_containerd_default_runtime("version = 2\n") is None
    assert runtime_parsers.toolkit_preinstalled("/usr/bin/nvidia-ctk", v2) is True
    assert runtime_parsers.toolkit_preinstalled(None, v2) is False
    assert runtime_parsers.toolkit_preinstalled("/usr/bin/nvidia-ctk", v3) is False
    assert runtime_parsers.toolkit_preinstalled("/usr/bin/nvidia-ctk", None) is False


IPTABLES_OK = """\
-P INPUT ACCEPT
-P FORWARD DROP
-P OUTPUT ACCEPT
-N GPUSTACK-INPUT
-A INPUT -j GPUSTACK-INPUT
-A INPUT -s 10.244.0.0/16 -j DROP
-A GPUSTACK-INPUT -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment gpustack:established -j ACCEPT
-A GPUSTACK-INPUT -s 10.244.0.0/16 -d 10.213.0.11/32 -p tcp -m tcp --dport 6443 \
-m comment --comment gpustack:pods-to-apiserver -j ACCEPT
-A GPUSTACK-INPUT -s 10.213.0.11/32 -p tcp -m tcp --dport 6443 -m comment --comment gpustack:nodes -j ACCEPT
-A GPUSTACK-INPUT -j RETURN
"""


def test_iptables_firewall_healthy(runtime_parsers: ModuleType) -> None:
    fw = runtime_parsers.parse_iptables_firewall(IPTABLES_OK)
    assert fw == {
        "gpustack_chain": True,
        "jump": True,
        "input_policy": "ACCEPT",
        "drops_before_jump": False,
        "drop_rules": [],
        "pod_api_rule": True,
    }


def test_iptables_firewall_drop_before_jump(runtime_parsers: ModuleType) -> None:
    text = IPTABLES_OK.replace(
        "-A INPUT -j GPUSTACK-INPUT\n",
        "-A INPUT -s 10.244.0.0/16 -j DROP\n-A INPUT -s 192.0.2.7/32 -j DROP\n-A INPUT -p udp -j REJECT\n"
        "-A INPUT -p tcp -m tcp --dport 22 -j DROP\n-A INPUT -p tcp -m tcp --dport 6000:7000 -j REJECT\n"
        "-A INPUT -j GPUSTACK-INPUT\n",
    )
    fw = runtime_parsers.parse_iptables_firewall(text)
    assert fw["drops_before_jump"] is True
    # one host, UDP only and unrelated ports do not block pods -> API
    assert fw["drop_rules"] == [
        "-A INPUT -s 10.244.0.0/16 -j DROP",
        "-A INPUT -p tcp -m tcp --dport 6000:7000 -j REJECT",
    ]


def test_iptables_firewall_no_chain_policy_drop(runtime_parsers: ModuleType) -> None:
    fw = runtime_parsers.parse_iptables_firewall("-P INPUT DROP\n-A INPUT -i lo -j ACCEPT\n-A INPUT -j REJECT\n")
    assert fw["gpustack_chain"] is False and fw["jump"] is False and fw["pod_api_rule"] is False
    assert fw["input_policy"] == "DROP"
    assert fw["drops_before_jump"] is True  # no jump: every blocking INPUT rule counts
    assert runtime_parsers.parse_iptables_firewall("") is None
    assert runtime_parsers.parse_iptables_firewall(None) is None


def test_kubelet_cgroup_driver_and_sysctl(host_parsers: ModuleType, runtime_parsers: ModuleType) -> None:
    conf = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
    assert runtime_parsers.parse_kubelet_cgroup_driver(conf) == "systemd"
    assert runtime_parsers.parse_kubelet_cgroup_driver('cgroupDriver: "cgroupfs"  # old\n') == "cgroupfs"
    assert runtime_parsers.parse_kubelet_cgroup_driver("kind: KubeletConfiguration\n") is None
    assert runtime_parsers.parse_kubelet_cgroup_driver(None) is None
    assert host_parsers.parse_sysctl_value("1\n") == "1"
    assert host_parsers.parse_sysctl_value(None) is None


def test_dev_char_symlinks(host_parsers: ModuleType) -> None:
    assert host_parsers.derive_dev_char_symlinks(False, {}) is None
    assert host_parsers.derive_dev_char_symlinks(True, {"195:0": "../nvidia0", "1:3": "../null"}) is True
    assert host_parsers.derive_dev_char_symlinks(True, {"1:3": "../null"}) is False


def test_collect_new_fact_types(facts_module: ModuleType) -> None:
    facts = facts_module.collect(probe_sudo=False, peers=[], peer_port=9, peer_timeout=0.5)
    assert facts["bridge_nf_call_iptables"] in (None, "0", "1")
    assert isinstance(facts["cri_socket"], bool)
    assert facts["containerd_active"] in (None, True, False)
    assert facts["firewall"] is None or set(facts["firewall"]) == {
        "gpustack_chain", "jump", "input_policy", "drops_before_jump", "drop_rules", "pod_api_rule",
    }  # fmt: skip
    json.dumps(facts)


def test_kubelet_version(host_parsers: ModuleType) -> None:
    assert host_parsers.parse_kubelet_version(0, "Kubernetes v1.36.4\n") == "1.36.4"
    assert host_parsers.parse_kubelet_version(1, "Kubernetes v1.36.4\n") is None
    assert host_parsers.parse_kubelet_version(0, "garbage") is None


def test_containerd_imports_and_drop_ins(runtime_parsers: ModuleType) -> None:
    one_line = 'imports = ["/etc/containerd/conf.d/*.toml"]\nversion = 3\n[plugins]\n'
    several = (
        "version = 2\nimports = [\n  '/etc/containerd/conf.d/*.toml',  # toolkit\n  \"extra.toml\",\n]\n[plugins]\n"
    )
    in_a_table = 'version = 3\n[plugins."x"]\nimports = ["/nope/*.toml"]\n'
    assert runtime_parsers.parse_containerd_imports(one_line) == ["/etc/containerd/conf.d/*.toml"]
    assert runtime_parsers.parse_containerd_imports(several) == ["/etc/containerd/conf.d/*.toml", "extra.toml"]
    assert runtime_parsers.parse_containerd_imports(in_a_table) is None, "not a top-level key: no imports"
    assert runtime_parsers.parse_containerd_imports(None) is None
    default_2x = "disabled_plugins = []\nimports = []\noom_score = 0\nversion = 3\n[plugins]\n"
    assert runtime_parsers.parse_containerd_imports(default_2x) == [], "present and empty (containerd config default)"
    files = ["/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/conf.d/10-mirror.toml"]
    assert runtime_parsers.derive_drop_ins(files, ["/etc/containerd/conf.d/*.toml"], "/etc/containerd") == [
        {"path": "/etc/containerd/conf.d/10-mirror.toml", "imported": True},
        {"path": "/etc/containerd/conf.d/99-nvidia.toml", "imported": True},
    ]
    relative = runtime_parsers.derive_drop_ins(files, ["conf.d/99-*.toml"], "/etc/containerd")
    assert [d["imported"] for d in relative] == [False, True], "relative to the config's directory"
    assert not any(d["imported"] for d in runtime_parsers.derive_drop_ins(files, [], "/etc/containerd"))
    assert not any(d["imported"] for d in runtime_parsers.derive_drop_ins(files, None, "/etc/containerd"))


def test_nvswitches(host_parsers: ModuleType) -> None:
    devices = [
        {"slot": "0000:05:00.0", "vendor": "0x10de", "device": "0x22a3", "class": "0x068000"},  # NVSwitch (HGX H100)
        {"slot": "0000:06:00.0", "vendor": "0x10de", "device": "0x22a3", "class": "0x068000"},
        {"slot": "0000:18:00.0", "vendor": "0x10de", "device": "0x2330", "class": "0x030200"},  # H100
        {"slot": "0000:00:1f.0", "vendor": "0x8086", "device": "0x1234", "class": "0x068000"},  # not NVIDIA
    ]
    assert host_parsers.parse_nvswitches(devices) == 2
    assert host_parsers.parse_nvswitches([]) == 0


APT_DUMP = """\
APT "";
APT::Periodic "";
APT::Periodic::Update-Package-Lists "1";
APT::Periodic::Unattended-Upgrade "1";
Unattended-Upgrade "";
Unattended-Upgrade::Origins-Pattern "";
Unattended-Upgrade::Origins-Pattern:: "origin=Debian,codename=${distro_codename},label=Debian-Security";
Unattended-Upgrade::Origins-Pattern:: "origin=Debian,codename=${distro_codename}-security,label=Debian-Security";
Unattended-Upgrade::Package-Blacklist "";
Unattended-Upgrade::Package-Blacklist:: "nvidia-";
"""


def test_apt_config(host_parsers: ModuleType) -> None:
    got = host_parsers.parse_apt_config(APT_DUMP)
    assert got == {"enabled": True, "blacklist": ["nvidia-"], "automatic_reboot": False, "origins": [
        "origin=Debian,codename=${distro_codename},label=Debian-Security",
        "origin=Debian,codename=${distro_codename}-security,label=Debian-Security"]}  # fmt: skip
    off = APT_DUMP.replace('Unattended-Upgrade "1"', 'Unattended-Upgrade "0"')
    assert host_parsers.parse_apt_config(off)["enabled"] is False
    assert host_parsers.parse_apt_config("")["enabled"] is False


DPKG_STATUS = """\
Package: linux-image-amd64
Status: install ok installed
Version: 6.1.158-1

Package: linux-image-6.1.0-41-amd64
Status: install ok installed
Version: 6.1.158-1

Package: nvidia-driver
Status: hold ok installed
Version: 535.247.01-1~deb12u1

Package: linux-headers-6.1.0-40-amd64
Status: deinstall ok config-files
Version: 6.1.153-1

Package: bash
Status: install ok installed
Version: 5.2.15-2+b8
"""


def test_dpkg_status(host_parsers: ModuleType) -> None:
    assert host_parsers.parse_dpkg_status(DPKG_STATUS) == [
        {"name": "linux-image-6.1.0-41-amd64", "version": "6.1.158-1", "held": False},
        {"name": "linux-image-amd64", "version": "6.1.158-1", "held": False},
        {"name": "nvidia-driver", "version": "535.247.01-1~deb12u1", "held": True},
    ]
