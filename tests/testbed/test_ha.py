"""A three-control-plane bring-up with a virtual IP on real hosts: kube-vip's static pod (pinned
image) on each control plane before kubeadm runs (the first's with super-admin.conf, switched to admin.conf once init
is done), `kubeadm init --upload-certs` on the first,
`kubeadm join --control-plane --certificate-key` on the others (the kubeadm double refuses a key
that was not uploaded), the API endpoint at the virtual IP, etcd's ports open only between the
control planes; a second `up` joins nobody again.

kubeadm/kubelet/kubectl are the test bed's doubles; a directory bind-mounted into every host is
their shared cluster (tests/testbed/doubles). ~3 min."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpustack.config import pins

from .cluster import up, write_config
from .pytest_plugin import TestbedFactory
from .services import Sources

NAMES = ["ha1", "ha2", "ha3"]
VIP = "10.213.0.100"


def events(shared: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (shared / "events.log").read_text().splitlines() if line.strip()]


def kubeadm_calls(evs: list[dict[str, Any]], host: str, first: str) -> list[list[str]]:
    return [e["argv"] for e in evs if e["host"] == host and e["tool"] == "kubeadm" and e["argv"][:1] == [first]]


def test_three_control_planes_with_a_virtual_ip(
    testbed_factory: TestbedFactory, tmp_path: Path, sources: Sources
) -> None:
    shared = tmp_path / "cluster"
    shared.mkdir()
    bed = testbed_factory(NAMES, nspawn_args={n: [f"--bind={shared}:/var/lib/gpustack-doubles-cluster"] for n in NAMES})
    cfg = write_config(
        bed,
        tmp_path / "gpustack.yaml",
        sources,
        roles=dict.fromkeys(NAMES, "control-plane"),
        extra={"cluster": {"virtual_ip": VIP}},
    )
    state = tmp_path / "state"
    first = up(cfg, state)
    assert first.rc == 0, first.output

    evs = events(shared)
    (init,) = kubeadm_calls(evs, "ha1", "init")[:1]
    assert "--upload-certs" in init
    uploads = [a for a in kubeadm_calls(evs, "ha1", "init") if a[1:3] == ["phase", "upload-certs"]]
    assert len(uploads) == 1  # one key for both joins
    for name in ("ha2", "ha3"):
        (join,) = kubeadm_calls(evs, name, "join")
        assert "--control-plane" in join and len(join[join.index("--certificate-key") + 1]) == 64
        assert join[join.index("--apiserver-advertise-address") + 1] == bed.host(name).address
        assert json.loads((shared / "nodes" / f"{name}.json").read_text())["roles"] == ["control-plane"]
    assert not kubeadm_calls(evs, "ha2", "init") and not kubeadm_calls(evs, "ha3", "init")

    addresses = [h.address for h in bed.hosts]
    for h in bed.hosts:
        manifest = h.sudo("cat /etc/kubernetes/manifests/kube-vip.yaml", check=True).stdout
        assert f'value: "{VIP}"' in manifest and pins.KUBE_VIP_IMAGE in manifest
        # ha1's kube-vip ran with super-admin.conf during kubeadm init, and with admin.conf once init was done
        assert 'path: "/etc/kubernetes/admin.conf"' in manifest and "super-admin.conf" not in manifest, h.name
        rules = h.sudo("iptables -S GPUSTACK-INPUT", check=True).stdout
        etcd = [r for r in rules.splitlines() if "gpustack:etcd-peers" in r]
        assert sorted(r.split()[r.split().index("-s") + 1].removesuffix("/32") for r in etcd) == sorted(addresses)
        assert not any("2379" in r and "gpustack:nodes" in r for r in rules.splitlines())
    mirror = [e for e in evs if e["tool"] == "kubectl" and e["argv"][-5:-2] == ["get", "pod", "kube-vip-ha1"]]
    assert mirror and {e["host"] for e in mirror} == {"ha1"}, "ha1 waited for the kubelet to run kube-vip again"
    kubeadm_config = bed.host("ha1").sudo("cat /etc/gpustack/kubeadm-config.yaml", check=True).stdout
    assert f'controlPlaneEndpoint: "{VIP}:6443"' in kubeadm_config

    # converged: nobody joins or initialises again
    again = up(cfg, state)
    assert again.rc == 0, again.output
    later = events(shared)
    for name in NAMES:
        assert kubeadm_calls(later, name, "join") == kubeadm_calls(evs, name, "join")
    assert len(kubeadm_calls(later, "ha1", "init")) == len(kubeadm_calls(evs, "ha1", "init"))
    # the manifest already names admin.conf: at most read again, never rewritten
    for h in bed.hosts:
        assert "super-admin.conf" not in h.sudo("cat /etc/kubernetes/manifests/kube-vip.yaml", check=True).stdout
