"""``gpustack etcd restore``'s host procedure (playbooks/module_utils/gpustack_etcd_restore.py, the code the
``gpustack_etcd_restore`` module runs on each control plane) against the real etcd 3.6.8, etcdutl 3.6.8 and
kube-apiserver 1.36.5, with the etcd.yaml the real kubeadm wrote (issue 27).

A ConfigMap and a Node written through the real API server, a snapshot taken by the hosts' own code, a second
ConfigMap written after it; then the restore's phases: the snapshot checked, the member read from kubeadm's manifest,
the manifests of etcd and the API server parked (a kubelet stand-in stops their processes as the kubelet does when a
static pod's manifest goes), the data directory moved aside and kept, the real ``etcdutl snapshot restore`` with the
argv the module builds, 0700, the manifests back (the stand-in starts their commands again), and through gpustack's
Kubernetes client: the Node readable, the ConfigMap from before the snapshot back, the one from after it gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.controlplane import kubeadm_phases as kp
from tests.controlplane.cluster import STOP_GRACE, ControlPlane, kubectl, running
from tests.realbin.gobuild import binary
from tests.unit.playbooks.conftest import PLAYBOOKS, load_path

NAMESPACE = "etcd-restore-procedure"
#: the static pods the restore stops, by their manifest's file name
PODS = {"etcd": "etcd.yaml", "kube-apiserver": "kube-apiserver.yaml"}


def modules() -> ModuleType:
    load_path("ansible.module_utils.gpustack_etcd", PLAYBOOKS / "module_utils" / "gpustack_etcd.py")
    return load_path(
        "ansible.module_utils.gpustack_etcd_restore", PLAYBOOKS / "module_utils" / "gpustack_etcd_restore.py"
    )


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=300, check=False)
    return p.returncode, p.stdout, p.stderr


class Kubelet:
    """The kubelet and crictl for the two static pods, over the fixture's processes: a pod whose manifest left the
    manifest directory is stopped (SIGTERM to its process group, SIGKILL after the grace period, as the kubelet
    does); ``crictl ps --quiet --state Running --label io.kubernetes.container.name=NAME`` lists a container while
    its process runs; :meth:`sync` starts a pod whose manifest is back, from the manifest's command."""

    def __init__(self, cp: ControlPlane, manifests: Path) -> None:
        self.cp, self.manifests = cp, manifests

    def crictl(self, argv: Sequence[str]) -> tuple[int, str, str]:
        assert argv[3:5] == ["ps", "--quiet"] and argv[-2] == "--label", argv
        name = argv[-1].split("=", 1)[1]
        proc = self.cp.processes.get(name)
        if proc is None or proc.poll() is not None:
            return 0, "", ""
        if not (self.manifests / PODS[name]).exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_GRACE)
            return 0, f"{name}-running-until-now\n", ""
        return 0, f"{name}-id\n", ""

    def sync(self) -> None:
        for name, file in PODS.items():
            proc = self.cp.processes.get(name)
            if (self.manifests / file).exists() and (proc is None or proc.poll() is not None):
                command = kp.command_of(yaml.safe_load((self.manifests / file).read_text()))
                self.cp.spawn(name, [str(binary(name)), *command[1:]])


def static_pod(cp: ControlPlane, name: str) -> str:
    """kubeadm's manifest for ``name`` with the command the fixture runs (kubeadm's, on loopback and free ports)."""
    manifest = yaml.safe_load((cp.pki / PODS[name]).read_text())
    manifest["spec"]["containers"][0]["command"] = [name, *list(cp.processes[name].args)[1:]]  # type: ignore[index]
    return yaml.safe_dump(manifest)


@pytest.fixture(scope="module")
def cp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running(tmp_path_factory.mktemp("etcd-restore") / "cp") as plane:
        yield plane


def configmaps(cp: ControlPlane) -> list[str]:
    out = json.loads(kubectl(cp, "get", "configmaps", f"--namespace={NAMESPACE}", "-o", "json"))
    return sorted(i["metadata"]["name"] for i in out["items"] if i["metadata"]["name"] != "kube-root-ca.crt")


def test_the_restore_procedure_brings_back_the_snapshot_and_keeps_the_old_data(
    cp: ControlPlane, tmp_path: Path
) -> None:
    from gpustack.runners.kubeconfig import kube_from_file

    restore = modules()
    snapshots = __import__("ansible.module_utils.gpustack_etcd", fromlist=["take_snapshot"])
    kubectl(cp, "create", "namespace", NAMESPACE)
    kubectl(cp, "create", "configmap", "before", f"--namespace={NAMESPACE}", "--from-literal=k=v")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "restored-node"}}
    kubectl(cp, "create", "-f", "-", stdin=json.dumps(node))
    etcd_tls = cp.pki / "etcd"
    tls = {"endpoint": f"https://{kp.LOOPBACK}:{cp.ports.etcd_client}", "cacert": str(etcd_tls / "ca.crt"),
           "cert": str(etcd_tls / "healthcheck-client.crt"), "key": str(etcd_tls / "healthcheck-client.key")}  # fmt: skip
    (tmp_path / "staging").mkdir()
    snap = snapshots.take_snapshot(run, [str(binary("etcdctl"))], node="cp-0", data_dir=str(tmp_path / "staging"),
                                   dest_dir=str(tmp_path / "snapshots"), keep=1, tls=tls)  # fmt: skip
    kubectl(cp, "create", "configmap", "after", f"--namespace={NAMESPACE}", "--from-literal=k=v")
    assert configmaps(cp) == ["after", "before"]

    # the host: kubeadm's manifests in the kubelet's directory, the restore's own directory beside it
    manifests, parked, record = tmp_path / "manifests", tmp_path / "parked", str(tmp_path / "state.json")
    manifests.mkdir()
    for name, file in PODS.items():
        (manifests / file).write_text(static_pod(cp, name))
    kubelet = Kubelet(cp, manifests)
    rid = "20261129T080000Z"

    # stop
    assert restore.own_record(record, rid) == {}
    restore.check_snapshot(snap["path"], snap["sha256"])
    member = restore.manifest_member(restore.read_manifest(str(manifests), str(parked)))
    assert member["name"] == "cp-0" and member["peer_url"] == f"https://{kp.LOOPBACK}:{cp.ports.etcd_peer}"
    data_dir = Path(member["data_dir"])
    rec = {"id": rid, "phase": "stopping", "snapshot": snap["path"], "sha256": snap["sha256"],
           "token": f"gpustack-restore-{rid}", "member": member}  # fmt: skip
    restore.write_record(rec, record)
    assert restore.park(str(manifests), str(parked)) == ["etcd.yaml", "kube-apiserver.yaml"]
    restore.wait_gone(kubelet.crictl, 60)
    assert all(cp.processes[n].poll() is not None for n in PODS), "etcd and the API server stopped"
    old_files = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*"))
    old_db = (data_dir / "member" / "snap" / "db").read_bytes()
    rec = {**rec, "phase": "stopped"}
    restore.write_record(rec, record)

    # restore, with the real etcdutl and the argv the module builds
    cluster = restore.initial_cluster([member])
    rec = restore.restore_data(run, [str(binary("etcdutl"))], snapshot=snap["path"], member=member, cluster=cluster,
                               token=rec["token"], restore_id=rid, record=rec, record_path=record)  # fmt: skip
    aside = Path(f"{data_dir}.before-restore-{rid}")
    assert rec["phase"] == "restored" and rec["aside"] == str(aside)
    assert sorted(str(p.relative_to(aside)) for p in aside.rglob("*")) == old_files, "the old data kept whole"
    assert (aside / "member" / "snap" / "db").read_bytes() == old_db
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700 and (data_dir / "member" / "snap" / "db").is_file()

    # start
    assert restore.unpark(str(manifests), str(parked)) == ["etcd.yaml", "kube-apiserver.yaml"]
    kubelet.sync()
    cp.wait_healthy("etcd", f"https://{kp.LOOPBACK}:{cp.ports.etcd_client}/health",
                    cp._tls(etcd_tls / "ca.crt", etcd_tls / "healthcheck-client.crt", etcd_tls / "healthcheck-client.key"))  # fmt: skip
    cp.wait_healthy("kube-apiserver", f"{cp.url}/readyz", cp.admin_tls())
    rec = restore.finish({**rec, "phase": "started"}, record)
    assert json.loads(Path(record).read_text())["phase"] == "done"

    # confirm through the API, as the command's confirm step does
    kube = kube_from_file(cp.admin_kubeconfig)
    assert "restored-node" in [n["metadata"]["name"] for n in kube.list_all("/api/v1/nodes")]
    assert configmaps(cp) == ["before"], "written after the snapshot: gone; before it: back"
    rc, out, err = run(
        snapshots.etcdctl_argv([str(binary("etcdctl"))], "endpoint", "status", "--write-out=json", **tls)
    )
    assert rc == 0, err
    assert json.loads(out)[0]["Status"]["header"]["revision"] > int(snapshots.BUMP_REVISION)


def member_manifest(base: str, name: str, client: int, peer: int, metrics: int, data: Path, cluster: str) -> str:
    """kubeadm's etcd.yaml as a joined control plane's: its own name, addresses and data directory, and the
    ``--initial-cluster`` of the members that existed when it joined."""
    manifest = yaml.safe_load(base)
    url, purl = f"https://{kp.LOOPBACK}:{client}", f"https://{kp.LOOPBACK}:{peer}"
    values = {"name": name, "data-dir": str(data), "listen-client-urls": url, "advertise-client-urls": url,
              "listen-peer-urls": purl, "initial-advertise-peer-urls": purl, "initial-cluster": cluster,
              "listen-metrics-urls": f"http://{kp.LOOPBACK}:{metrics}"}  # fmt: skip
    command = [a for a in manifest["spec"]["containers"][0]["command"] if a.split("=", 1)[0][2:] not in values]
    manifest["spec"]["containers"][0]["command"] = command + [f"--{k}={v}" for k, v in values.items()]
    return yaml.safe_dump(manifest)


def test_three_members_restored_from_their_own_manifests(cp: ControlPlane, tmp_path: Path) -> None:
    """HA: three members, each manifest listing only the members before it (as kubeadm joins them); the restore's
    initial cluster joins all three, every member restored from the one snapshot, the API server on all three."""
    from tests.controlplane.cluster import free_port

    restore = modules()
    snapshots = __import__("ansible.module_utils.gpustack_etcd", fromlist=["take_snapshot"])
    kubectl(cp, "create", "configmap", "ha-before", f"--namespace={NAMESPACE}", "--from-literal=k=v")
    etcd_tls = cp.pki / "etcd"
    tls = {"endpoint": f"https://{kp.LOOPBACK}:{cp.ports.etcd_client}", "cacert": str(etcd_tls / "ca.crt"),
           "cert": str(etcd_tls / "healthcheck-client.crt"), "key": str(etcd_tls / "healthcheck-client.key")}  # fmt: skip
    (tmp_path / "staging").mkdir()
    snap = snapshots.take_snapshot(run, [str(binary("etcdctl"))], node="cp-0", data_dir=str(tmp_path / "staging"),
                                   dest_dir=str(tmp_path / "snapshots"), keep=1, tls=tls)  # fmt: skip
    kubectl(cp, "create", "configmap", "ha-after", f"--namespace={NAMESPACE}", "--from-literal=k=v")

    # stop the running etcd and API server as the stop phase does
    manifests, parked = tmp_path / "manifests", tmp_path / "parked"
    manifests.mkdir()
    for name, file in PODS.items():
        (manifests / file).write_text(static_pod(cp, name))
    api_args = list(cp.processes["kube-apiserver"].args)  # type: ignore[arg-type]
    restore.park(str(manifests), str(parked))
    restore.wait_gone(Kubelet(cp, manifests).crictl, 60)

    ports: list[int] = []
    while len(ports) < 9:
        port = free_port()
        if port not in ports and port not in vars(cp.ports).values():
            ports.append(port)
    base = static_pod(cp, "etcd")
    hosts, joined = [], []
    for i in range(3):
        name, client, peer, metrics = f"m{i}", *ports[3 * i : 3 * i + 3]
        joined.append(f"{name}=https://{kp.LOOPBACK}:{peer}")
        host = tmp_path / name
        (host / "manifests").mkdir(parents=True)
        (host / "data" / "member").mkdir(parents=True)
        (host / "data" / "member" / "old").write_text(f"{name}'s old data")
        text = member_manifest(base, name, client, peer, metrics, host / "data", ",".join(joined))
        (host / "manifests" / "etcd.yaml").write_text(text)
        hosts.append((host, client))
    members = [restore.manifest_member((h / "manifests" / "etcd.yaml").read_text()) for h, _ in hosts]
    assert [m["initial_cluster"].count("=") for m in members] == [1, 2, 3], "kubeadm's partial lists"
    cluster = restore.initial_cluster(members)
    assert cluster == ",".join(joined)
    for (host, _), member in zip(hosts, members, strict=True):
        rec = restore.restore_data(run, [str(binary("etcdutl"))], snapshot=snap["path"], member=member,
                                   cluster=cluster, token="gpustack-restore-HA", restore_id="HA",
                                   record={"id": "HA", "phase": "stopped"},
                                   record_path=str(host / "state.json"))  # fmt: skip
        assert rec["phase"] == "restored"
        assert (Path(f"{member['data_dir']}.before-restore-HA") / "member" / "old").read_text().endswith("old data")
    for (host, _), member in zip(hosts, members, strict=True):
        command = kp.command_of(yaml.safe_load((host / "manifests" / "etcd.yaml").read_text()))
        cp.spawn(f"etcd-{member['name']}", [str(binary("etcd")), *command[1:]])
    ctx = cp._tls(etcd_tls / "ca.crt", etcd_tls / "healthcheck-client.crt", etcd_tls / "healthcheck-client.key")
    for (_, client), member in zip(hosts, members, strict=True):
        cp.wait_healthy(f"etcd-{member['name']}", f"https://{kp.LOOPBACK}:{client}/health", ctx)
    servers = ",".join(f"https://{kp.LOOPBACK}:{c}" for _, c in hosts)
    api = [a for a in api_args if not a.startswith("--etcd-servers=")] + [f"--etcd-servers={servers}"]
    cp.spawn("kube-apiserver", api)
    cp.wait_healthy("kube-apiserver", f"{cp.url}/readyz", cp.admin_tls())
    assert configmaps(cp) == ["before", "ha-before"], "the snapshot's objects back, the later one gone"
    rc, out, err = run(snapshots.etcdctl_argv([str(binary("etcdctl"))], "endpoint", "health", "--cluster",
                                              "--write-out=json", **{**tls, "endpoint": f"https://{kp.LOOPBACK}:{hosts[0][1]}"}))  # fmt: skip
    assert rc == 0, err
    health = snapshots.parse_endpoint_health(out)
    assert len(health) == 3 and all(h["health"] for h in health)
