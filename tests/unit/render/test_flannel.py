"""Flannel's manifest as gpustack renders it: valid Kubernetes 1.36 objects, the pinned images, the
config's pod CIDR and interface, the same bytes every time."""

from __future__ import annotations

import hashlib
import ipaddress
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpustack.bundle import want
from gpustack.config import compat, pins
from gpustack.config.model import Config
from gpustack.render import flannel
from gpustack.render.ansible import extravars
from gpustack.render.files import generated_files

K8S_VERSION = (
    "1.36.0" if "1.36.0" in kubernetes_validate.utils.all_versions() else kubernetes_validate.utils.latest_version()
)
CP = {"name": "cp1", "address": "192.0.2.10", "role": "control-plane"}
DEFAULT = Config.model_validate({"nodes": [CP]})
CUSTOM = Config.model_validate({"nodes": [CP], "cluster": {"pod_cidr": "172.20.0.0/14", "flannel_iface": "bond0.100"}})
FLANNEL_IMAGE = f"ghcr.io/flannel-io/flannel:v{pins.FLANNEL_VERSION}"
CNI_PLUGIN_IMAGE = f"ghcr.io/flannel-io/flannel-cni-plugin:{pins.FLANNEL_CNI_PLUGIN[pins.FLANNEL_VERSION]}"


def docs(cfg: Config) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(flannel.flannel_manifest(cfg)) if d is not None]


def find(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind]
    return obj


def flanneld(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = find(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("cfg", [DEFAULT, CUSTOM], ids=["default", "custom-cidr-iface"])
def test_every_object_is_valid_for_kubernetes_1_36(cfg: Config) -> None:
    objs = docs(cfg)
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [
        ("Namespace", "kube-flannel"),
        ("ServiceAccount", "flannel"),
        ("ClusterRole", "flannel"),
        ("ClusterRoleBinding", "flannel"),
        ("ConfigMap", "kube-flannel-cfg"),
        ("DaemonSet", "kube-flannel-ds"),
    ], "the names doctor's K04 and the rollout wait look for"
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_objects_run_the_pinned_images_with_what_flanneld_needs() -> None:
    objs = docs(DEFAULT)
    pod = find(objs, "DaemonSet")["spec"]["template"]["spec"]
    assert [(c["name"], c["image"]) for c in pod["initContainers"]] == [
        ("install-cni-plugin", CNI_PLUGIN_IMAGE),
        ("install-cni", FLANNEL_IMAGE),
    ]
    assert flanneld(objs)["image"] == FLANNEL_IMAGE
    assert flanneld(objs)["args"] == ["--ip-masq", "--kube-subnet-mgr", "--healthz-port=8081"], (
        "no --iface: the default route's NIC"
    )
    assert flanneld(objs)["securityContext"]["capabilities"]["add"] == ["NET_ADMIN", "NET_RAW"]
    assert pod["hostNetwork"] is True and pod["priorityClassName"] == "system-node-critical"
    assert pod["tolerations"] == [{"operator": "Exists", "effect": "NoSchedule"}], "tainted GPU nodes too"
    assert pod["serviceAccountName"] == "flannel"
    # privileged pods (hostNetwork, hostPath) in a namespace that admits them
    assert find(objs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    rules = {r["resources"][0]: r["verbs"] for r in find(objs, "ClusterRole")["rules"]}
    assert rules == {"pods": ["get"], "nodes": ["get", "list", "watch"], "nodes/status": ["patch"]}
    cni = json.loads(find(objs, "ConfigMap")["data"]["cni-conf.json"])
    assert [p["type"] for p in cni["plugins"]] == ["flannel", "portmap"]


def test_net_conf_has_the_pod_cidr_and_the_interface_is_flanneld_s() -> None:
    for cfg in (DEFAULT, CUSTOM):
        net = json.loads(find(docs(cfg), "ConfigMap")["data"]["net-conf.json"])
        assert ipaddress.ip_network(net["Network"]) == cfg.cluster.pod_cidr
        assert net["Backend"] == {"Type": "vxlan"}
    assert json.loads(find(docs(CUSTOM), "ConfigMap")["data"]["net-conf.json"])["Network"] == "172.20.0.0/14"
    assert flanneld(docs(CUSTOM))["args"] == [
        "--ip-masq",
        "--kube-subnet-mgr",
        "--healthz-port=8081",
        "--iface=bond0.100",
    ]


def test_a_pinned_digest_goes_into_the_image_references() -> None:
    digest = "sha256:" + "a" * 64
    cfg = Config.model_validate({"nodes": [CP], "versions": {"image_digests": {FLANNEL_IMAGE: digest}}})
    assert flannel.images(cfg) == (f"{FLANNEL_IMAGE}@{digest}", CNI_PLUGIN_IMAGE)
    assert flanneld(docs(cfg))["image"] == f"{FLANNEL_IMAGE}@{digest}"


def test_byte_identical_across_renders_and_the_same_everywhere_it_is_used() -> None:
    text = flannel.flannel_manifest(CUSTOM)
    assert text == flannel.flannel_manifest(Config.model_validate(CUSTOM.model_dump(mode="json")))
    assert text != flannel.flannel_manifest(DEFAULT)
    # what the network stage writes on the host, and what `gpustack render` writes for GitOps
    assert extravars(CUSTOM, kubeconfig_dest=Path("/k"))["gpustack_flannel_manifest"] == text
    assert generated_files(CUSTOM, state_root=Path("/nonexistent"))["manifests/kube-flannel.yaml"] == text
    # handed to Ansible as an extra var: nothing in it may look like a Jinja2 expression
    assert not any(mark in text for mark in ("{{", "{%", "{#"))
    assert flannel.manifest_sha256(CUSTOM) != flannel.manifest_sha256(DEFAULT)


def test_version_and_bundle_name_the_rendering_and_its_images_not_a_download() -> None:
    (row,) = compat.rendered(CUSTOM)
    assert row.checksum == "sha256:" + hashlib.sha256(flannel.flannel_manifest(CUSTOM).encode()).hexdigest()
    assert FLANNEL_IMAGE in row.url and CNI_PLUGIN_IMAGE in row.url
    assert "kube-flannel.yml" not in {a.name for a in compat.artifacts(CUSTOM)}, "nothing is downloaded"
    pinned = {w.ref for w in want.pinned_images(CUSTOM)}
    assert {FLANNEL_IMAGE, CNI_PLUGIN_IMAGE} <= pinned, "the bundle carries both images"


def test_the_daemonset_has_every_v0_28_9_difference_in_upstream_order() -> None:
    """flannel-io/flannel Documentation/kube-flannel.yml v0.28.4 -> v0.28.9 changes only the DaemonSet: the
    cni-plugin tag (flannel3), install-cni runs /opt/bin/install-conf without -f (0.28.6, 6c58d115), flanneld gets
    --healthz-port=8081, a healthz port and liveness/readiness probes on it (0.28.9, 07c20946)."""
    pod = find(docs(DEFAULT), "DaemonSet")["spec"]["template"]["spec"]
    plugin, conf = pod["initContainers"]
    assert plugin["image"].endswith(":v1.9.1-flannel3") and plugin["command"] == ["cp"]
    assert plugin["args"] == ["-f", "/flannel", "/opt/cni/bin/flannel"]
    assert conf["command"] == ["/opt/bin/install-conf"]
    assert conf["args"] == ["/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"]
    c = flanneld(docs(DEFAULT))
    assert list(c) == ["name", "image", "command", "args", "ports", "livenessProbe", "readinessProbe", "resources",
                       "securityContext", "env", "volumeMounts"]  # fmt: skip
    assert c["ports"] == [{"name": "healthz", "containerPort": 8081, "protocol": "TCP"}]
    assert c["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "healthz"}, "initialDelaySeconds": 10,
                                  "periodSeconds": 30}  # fmt: skip
    assert c["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "healthz"}, "initialDelaySeconds": 5,
                                   "periodSeconds": 10}  # fmt: skip
    assert flannel.HEADER.format(version="0.28.9") in flannel.flannel_manifest(DEFAULT)


def test_the_health_port_is_one_the_preflight_keeps_free() -> None:
    from gpustack.checks.preflight import CLUSTER_PORTS

    assert (pins.FLANNEL_HEALTHZ_PORT, "tcp") in {(port, proto) for port, proto, _ in CLUSTER_PORTS}


def test_a_flannel_release_the_renderer_does_not_write_is_refused() -> None:
    with pytest.raises(ValueError, match=r"renders Flannel's manifest for 0\.28\.9 only"):
        Config.model_validate({"nodes": [CP], "versions": {"flannel": "0.28.4"}})
