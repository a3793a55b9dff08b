"""Contract: the test bed's kubectl double (tests/testbed/doubles/kubectl) answers the playbooks' kubectl command
lines as the real kubectl 1.36 does.

The command lines are read from the playbooks themselves (every ``argv`` that starts with ``kubectl``). The real
kubectl (tests/realbin) runs each one that needs only the API against the fake API server, seeded with the same
node the double's state holds; the double runs beside it; their outputs are compared in the form the playbook
reads them (JSON, a jsonpath value, the status line). The rest (``rollout status`` needs a watch, ``exec`` a
stream, ``drain`` protobuf evictions) are checked for flags the real kubectl accepts and against upstream strings
(tests/contract/upstream/kubectl.yaml)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.contract.upstream import facts
from tests.fakes.kube_api import FakeKubeAPI
from tests.realbin import real_bins

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests" / "testbed" / "doubles" / "kubectl"
F = facts("kubectl")
TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
#: kubeadm's kube-proxy image at the pinned 1.36 patch (cmd/kubeadm/app/images/images.go GetKubernetesImage)
KUBE_PROXY = "registry.k8s.io/kube-proxy:v1.36.4"
#: kube-vip's static pod as the control_plane role writes it (templates/kube-vip.yaml.j2: the kubeconfig volume)
KUBE_VIP_KUBECONFIG = "/etc/kubernetes/admin.conf"
KUBE_VIP_MANIFEST = f"""apiVersion: v1
kind: Pod
metadata:
  name: kube-vip
  namespace: kube-system
spec:
  containers:
    - name: kube-vip
      volumeMounts:
        - name: kubeconfig
          mountPath: /etc/kubernetes/admin.conf
  volumes:
    - name: kubeconfig
      hostPath:
        path: "{KUBE_VIP_KUBECONFIG}"
        type: File
"""
#: values for the playbooks' template variables, by the end of the variable's name
VALUES = {"node_name": "n1", "taint_key": TAINT["key"], "namespace": "gpu-operator", "selector": "app=validator",
          "timeout": "5s", "manifest": "MANIFEST", "admin_conf": "KUBECONFIG", "kubeconfig": "KUBECONFIG"}  # fmt: skip


def _render(arg: str) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1).strip()
        return next((v for k, v in VALUES.items() if name.endswith(k)), "x")

    # the variable's name decides; a filter after it (`| default(inventory_hostname)`) does not
    return re.sub(r"\{\{\s*([\w.]+)[^}]*\}\}", value, arg)


def playbook_command_lines() -> list[list[str]]:
    """Every kubectl argv (a YAML list) in the playbooks, rendered with :data:`VALUES`."""
    found: list[list[str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            argv = node.get("argv")
            if isinstance(argv, list) and argv and argv[0] == "kubectl":
                found.append([_render(str(a)) for a in argv[1:]])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for path in sorted((ROOT / "playbooks").rglob("*.yml")):
        walk(yaml.safe_load(path.read_text()))
    return [list(a) for a in dict.fromkeys(tuple(a) for a in found)]  # each command line once


COMMANDS = playbook_command_lines()


class Pair:
    """The real kubectl on the fake API server, and the double on its own state, holding the same node."""

    def __init__(self, tmp: Path, api: FakeKubeAPI) -> None:
        self.tmp, self.api = tmp, api
        self.kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        self.manifest = tmp / "manifest.yaml"
        self.manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  namespace: kube-flannel\n"
                                 "data:\n  a: b\n")  # fmt: skip
        self.root = tmp / "root"
        cluster = self.root / "var/lib/gpustack-doubles-cluster"
        (cluster / "nodes").mkdir(parents=True)
        (self.root / "var/lib/gpustack-doubles/nodes").mkdir(parents=True)
        (self.root / "usr/share/gpustack-doubles").mkdir(parents=True)
        (self.root / "usr/share/gpustack-doubles/version").write_text("1.36.4\n")
        node = {"name": "n1", "roles": ["control-plane"], "taints": [TAINT]}
        (self.root / "var/lib/gpustack-doubles/nodes/n1.json").write_text(json.dumps(node))
        (cluster / "nodes/n1.json").write_text(
            json.dumps({"kubelet": "v1.36.4", "ready": True, "roles": ["control-plane"]})
        )
        # the API server's version and kubeadm's kube-proxy, as the kubeadm double records them
        (cluster / "api.json").write_text(json.dumps({"version": api.version, "kube_proxy_image": KUBE_PROXY}))
        # kube-vip's static pod on n1 (the control_plane role's template's volume) and its mirror pod in the API
        (self.root / "etc/kubernetes/manifests").mkdir(parents=True)
        (self.root / "etc/kubernetes/manifests/kube-vip.yaml").write_text(KUBE_VIP_MANIFEST)
        api.seed([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-flannel"}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}},
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
             "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
                      "template": {"metadata": {"labels": {"k8s-app": "kube-proxy"}},
                                   "spec": {"containers": [{"name": "kube-proxy", "image": KUBE_PROXY}]}}}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kube-vip-n1", "namespace": "kube-system"},
             "spec": {"nodeName": "n1", "containers": [{"name": "kube-vip", "image": "kube-vip"}],
                      "volumes": [{"name": "kubeconfig", "hostPath": {"path": KUBE_VIP_KUBECONFIG, "type": "File"}}]},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {TAINT["key"]: ""}},
             "spec": {"taints": [TAINT]}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
                                                      "nodeInfo": {"kubeletVersion": "v1.36.4"}}},
        ])  # fmt: skip

    def argv(self, args: list[str]) -> list[str]:
        # a kubeconfig the playbooks name by its path on a node (kubeadm's /etc/kubernetes/kubelet.conf) is this one
        def kc(a: str) -> bool:
            return a == "KUBECONFIG" or (a.startswith("/etc/kubernetes/") and a.endswith(".conf"))

        return [str(self.kubeconfig) if kc(a) else str(self.manifest) if a == "MANIFEST" else a
                for a in args]  # fmt: skip

    def real(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(real_bins().kubectl), *self.argv(args)], capture_output=True, text=True,
                              env={**os.environ, "HOME": str(self.tmp)}, timeout=60)  # fmt: skip

    def double(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GPUSTACK_DOUBLES_ROOT": str(self.root), "GPUSTACK_DOUBLES_HOST": "n1"}
        return subprocess.run([sys.executable, str(DOUBLE), *self.argv(args)], capture_output=True, text=True, env=env,
                              timeout=60)  # fmt: skip


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    with FakeKubeAPI.running() as api:
        yield Pair(tmp_path, api)


def _sub(args: list[str]) -> str:
    """The subcommand of an argv (``get``, ``taint``, ...), global flags skipped."""
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a in ("--kubeconfig", "-n", "--namespace"):
            skip = True
        elif not a.startswith("-"):
            return a
    return ""


def test_the_playbooks_kubectl_command_lines_were_found() -> None:
    subs = {_sub(a) for a in COMMANDS}
    assert {"get", "taint", "apply", "rollout", "uncordon", "drain", "version"} <= subs, subs


@pytest.mark.parametrize("args", [a for a in COMMANDS if _sub(a) == "get"], ids=" ".join)
def test_get_answers_alike(pair: Pair, args: list[str]) -> None:
    real, double = pair.real(args), pair.double(args)
    assert (real.returncode, double.returncode) == (0, 0), (real.stderr, double.stderr)
    if args[-1].startswith("jsonpath="):
        if args[-1].endswith(".image}"):  # a string, printed as it is
            assert double.stdout == real.stdout == KUBE_PROXY
            return
        if "hostPath" in args[-1]:  # a static pod's mirror: strings, printed as they are
            assert double.stdout == real.stdout == f"{KUBE_VIP_KUBECONFIG} True"
            return
        if ".status.conditions" in args[-1]:  # a condition's status: a string, printed as it is
            assert double.stdout == real.stdout == "True", (real.stdout, double.stdout)
            return
        assert json.loads(double.stdout) == json.loads(real.stdout)
        return
    got, want = json.loads(double.stdout), json.loads(real.stdout)
    assert got["kind"] == want["kind"] and got["apiVersion"] == want["apiVersion"]
    if want["kind"] == "Node":  # what the playbooks read of it
        ready = [lambda o: [c["status"] for c in o["status"]["conditions"] if c["type"] == "Ready"]]
        assert ready[0](got) == ready[0](want) and got["spec"]["taints"] == want["spec"]["taints"]
    else:
        assert got["items"] == want["items"] == [] and want["kind"] == "List"


@pytest.mark.parametrize("args", [a for a in COMMANDS if _sub(a) in ("taint", "uncordon")], ids=" ".join)
def test_node_changes_answer_alike(pair: Pair, args: list[str]) -> None:
    for _ in range(2):  # again: the second answer differs (already untainted / already uncordoned)
        real, double = pair.real(args), pair.double(args)
        assert (double.returncode, double.stdout) == (real.returncode, real.stdout), (real.stderr, double.stderr)
        assert bool(double.stderr) == bool(real.stderr)


@pytest.mark.parametrize("args", [a for a in COMMANDS if _sub(a) == "apply"], ids=" ".join)
def test_apply_reports_each_object_alike(pair: Pair, args: list[str]) -> None:
    answers = []
    for data in ("a: b", "a: b", "a: c"):  # created, unchanged, configured
        pair.manifest.write_text(f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n  namespace: kube-flannel\n"
                                 f"data:\n  {data}\n")  # fmt: skip
        real, double = pair.real([*args, "--validate=false"]), pair.double(args)
        assert (real.returncode, double.returncode) == (0, 0), real.stderr
        answers.append((double.stdout, real.stdout))
    assert [d for d, _ in answers] == [r for _, r in answers]


def _real_flags(sub: list[str]) -> set[str]:
    out = subprocess.run([str(real_bins().kubectl), *sub, "--help"], capture_output=True, text=True, timeout=30).stdout
    out += subprocess.run([str(real_bins().kubectl), "options"], capture_output=True, text=True, timeout=30).stdout
    return set(re.findall(r"(--[\w-]+)[=\s]", out)) | set(re.findall(r"\s(-\w), --", out))


@pytest.mark.parametrize("args", [a for a in COMMANDS if _sub(a) in ("rollout", "drain")], ids=" ".join)
def test_commands_the_fake_cannot_serve_use_real_flags(args: list[str]) -> None:
    words = [
        a
        for a in args
        if not a.startswith("-") and a not in ("KUBECONFIG", "kube-flannel", "kube-system", "gpu-operator")
    ]
    sub = words[:2] if words[0] == "rollout" else words[:1]
    real = _real_flags(sub)
    for a in args:
        if a.startswith("-"):
            assert a.split("=", 1)[0] in real, (sub, a)


def test_rollout_status_lines_are_upstreams(pair: Pair) -> None:
    for target, fmt in (("ds/kube-flannel-ds", "daemonset"), ("deploy/coredns", "deployment")):
        out = pair.double(
            ["--kubeconfig", "KUBECONFIG", "-n", "kube-system", "rollout", "status", target]
        ).stdout.strip()
        assert out == F["rollout_status"][fmt].format(name=target.split("/")[1])


def test_etcdctl_member_remove_line_is_upstreams(tmp_path: Path) -> None:
    (tmp_path / "etc/kubernetes/manifests").mkdir(parents=True)
    (tmp_path / "etc/kubernetes/manifests/etcd.yaml").write_text("kind: Pod\n")
    (tmp_path / "kc").write_text("")
    state = tmp_path / "var/lib/gpustack-doubles"
    state.mkdir(parents=True)
    (state / "etcd.json").write_text(json.dumps({"members": [{"ID": 0x8E9E05C52164694D, "name": "cp2"}]}))
    env = {**os.environ, "GPUSTACK_DOUBLES_ROOT": str(tmp_path)}
    out = subprocess.run([sys.executable, str(DOUBLE), "--kubeconfig", str(tmp_path / "kc"), "-n", "kube-system", "exec",
                          "etcd-cp1", "--", "etcdctl", "member", "remove", "8e9e05c52164694d"],
                         capture_output=True, text=True, env=env, timeout=30).stdout.strip()  # fmt: skip
    assert out == F["etcdctl_member_remove"]["format"].format(id=0x8E9E05C52164694D, cluster=1)


def test_get_nodes_table_has_the_servers_columns(pair: Pair) -> None:
    header = pair.double(["--kubeconfig", "KUBECONFIG", "get", "nodes"]).stdout.splitlines()[0]
    assert header.split() == F["get_nodes_columns"]["columns"]


@pytest.mark.parametrize("args", [a for a in COMMANDS if _sub(a) == "version"], ids=" ".join)
def test_version_json_answers_alike(pair: Pair, args: list[str]) -> None:
    """`kubectl version -o json` (the upgrade asks the API server's version): the same keys, the
    server's gitVersion from the cluster."""
    real, double = pair.real(args), pair.double(args)
    assert (real.returncode, double.returncode) == (0, 0), (real.stderr, double.stderr)
    got, want = json.loads(double.stdout), json.loads(real.stdout)
    assert set(got) == set(want) == {"clientVersion", "kustomizeVersion", "serverVersion"}
    assert got["serverVersion"]["gitVersion"] == want["serverVersion"]["gitVersion"] == pair.api.version
    assert set(want["clientVersion"]) >= set(got["clientVersion"]) >= {"major", "minor", "gitVersion"}
    assert got["clientVersion"]["minor"] == want["clientVersion"]["minor"]


def test_version_lines(pair: Pair) -> None:
    real = pair.real(["version", "--client"]).stdout.splitlines()
    double = pair.double(["version", "--client"]).stdout.splitlines()
    assert [line.split(":")[0] for line in double] == [line.split(":")[0] for line in real]
    assert re.fullmatch(r"Client Version: v1\.36\.\d+", double[0]) and re.fullmatch(
        r"Client Version: v1\.36\.\d+", real[0]
    )
