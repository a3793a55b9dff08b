"""etcd snapshot and restore with the real etcd 3.6.8, etcdctl, etcdutl and kube-apiserver 1.36.5 (issue 27, "day
365"): objects written through the real API server, a snapshot taken by the code the hosts run
(playbooks/module_utils/gpustack_etcd.py ``take_snapshot``, with the real etcdctl and kubeadm's healthcheck-client
certificate), the objects deleted, the API server and etcd stopped, the snapshot restored with the real etcdutl
(``restore_argv``: a new data directory, a new cluster token, the revision bumped) -- once into one member, once
into three -- etcd and the API server started on it, and every object back.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import stat
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import pytest

from tests.controlplane import kubeadm_phases as kp
from tests.controlplane.cluster import STOP_GRACE, ControlPlane, free_port, kubectl, running
from tests.realbin.gobuild import binary

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "etcd-restore"
CONFIGMAPS = [f"cm-{i}" for i in range(5)]


def gpustack_etcd() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpustack_etcd", REPO / "playbooks/module_utils/gpustack_etcd.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)
    return p.returncode, p.stdout, p.stderr


def tls(cp: ControlPlane, port: int | None = None) -> dict[str, str]:
    etcd = cp.pki / "etcd"
    return {"endpoint": f"https://{kp.LOOPBACK}:{port or cp.ports.etcd_client}", "cacert": str(etcd / "ca.crt"),
            "cert": str(etcd / "healthcheck-client.crt"), "key": str(etcd / "healthcheck-client.key")}  # fmt: skip


def flag(args: Sequence[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))


def with_flags(args: Sequence[str], **values: str) -> list[str]:
    """``args`` with each ``--name=`` flag set to its new value (underscores in the keyword are dashes)."""
    wanted = {k.replace("_", "-"): v for k, v in values.items()}
    out = [a for a in args if a.split("=", 1)[0].removeprefix("--") not in wanted]
    return out + [f"--{k}={v}" for k, v in wanted.items()]


def stop(cp: ControlPlane, name: str) -> None:
    """One component stopped, as moving its static pod manifest away makes the kubelet stop it."""
    proc = cp.processes[name]
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:  # the API server drains its requests first: the kubelet kills it so too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_GRACE)


def write_objects(cp: ControlPlane) -> None:
    kubectl(cp, "create", "namespace", NAMESPACE)
    for name in CONFIGMAPS:
        kubectl(cp, "create", "configmap", name, f"--namespace={NAMESPACE}", f"--from-literal=key={name}-value")
    kubectl(cp, "create", "secret", "generic", "s-1", f"--namespace={NAMESPACE}", "--from-literal=token=t0p")


def objects(cp: ControlPlane) -> dict[str, str]:
    """name -> value of the test's ConfigMaps and Secret (empty when gone)."""
    out = json.loads(kubectl(cp, "get", "configmaps,secrets", f"--namespace={NAMESPACE}", "-o", "json"))
    found = {}
    for item in out["items"]:
        if item["kind"] == "ConfigMap" and item["metadata"]["name"] in CONFIGMAPS:
            found[item["metadata"]["name"]] = item["data"]["key"]
        elif item["kind"] == "Secret" and item["metadata"]["name"] == "s-1":
            found["s-1"] = item["data"]["token"]
    return found


def delete_objects(cp: ControlPlane) -> None:
    kubectl(cp, "delete", "configmaps", *CONFIGMAPS, f"--namespace={NAMESPACE}")
    kubectl(cp, "delete", "secret", "s-1", f"--namespace={NAMESPACE}")
    assert objects(cp) == {}


@pytest.fixture(scope="module")
def snapshotted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ControlPlane, dict, dict[str, str]]]:
    """A control plane of its own with the test's objects, a snapshot of it, then the objects deleted."""
    work = tmp_path_factory.mktemp("etcd-snapshot")
    with running(work / "cp") as cp:
        write_objects(cp)
        before = objects(cp)
        etcd = gpustack_etcd()
        old = work / "snapshots" / "etcd-cp-0-20000101T000000Z.db"  # an older snapshot: pruned by keep=1
        old.parent.mkdir(mode=0o700)
        old.write_bytes(b"old")
        (work / "staging").mkdir()  # etcd's data directory, there on a control plane
        snap = etcd.take_snapshot(run, [str(binary("etcdctl"))], node="cp-0", data_dir=str(work / "staging"),
                                  dest_dir=str(work / "snapshots"), keep=1, copy_to=str(work / "share"),
                                  tls=tls(cp))  # fmt: skip
        delete_objects(cp)
        yield cp, snap, before


def test_the_snapshot_is_verified_private_and_kept_with_its_retention(snapshotted: tuple) -> None:
    _, snap, _ = snapshotted
    path = Path(snap["path"])
    assert path.name.startswith("etcd-cp-0-") and path.suffix == ".db"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name], "keep=1 pruned the older snapshot"
    assert snap["removed"] == [str(path.parent / "etcd-cp-0-20000101T000000Z.db")]
    assert Path(snap["copy"]).read_bytes() == path.read_bytes()
    assert not (path.parent.parent / "staging" / "gpustack-snapshot.db").exists()
    # the real etcdutl agrees the file is a whole snapshot with the cluster's keys in it
    rc, out, err = run([str(binary("etcdutl")), "snapshot", "status", str(path), "--write-out=json"])
    assert rc == 0, err
    status = json.loads(out)
    assert status["totalKey"] > len(CONFIGMAPS) and status["revision"] > 0
    assert gpustack_etcd().verify_snapshot(str(path))["size"] == snap["size"] == path.stat().st_size


def test_a_corrupt_snapshot_is_refused(snapshotted: tuple, tmp_path: Path) -> None:
    _, snap, _ = snapshotted
    bad = tmp_path / "bad.db"
    data = bytearray(Path(snap["path"]).read_bytes())
    data[4096] ^= 0xFF
    bad.write_bytes(bytes(data))
    etcd = gpustack_etcd()
    with pytest.raises(etcd.SnapshotError, match="does not match"):
        etcd.verify_snapshot(str(bad))
    bad.write_bytes(bytes(data[:-100]))
    with pytest.raises(etcd.SnapshotError, match="not a whole etcd snapshot"):
        etcd.verify_snapshot(str(bad))
    # etcdutl refuses the same file (the check verify_snapshot repeats)
    rc, _, _ = run([str(binary("etcdutl")), "snapshot", "restore", str(tmp_path / "bad.db"),
                    f"--data-dir={tmp_path / 'never'}"])  # fmt: skip
    assert rc != 0


def wait_etcd(cp: ControlPlane, name: str, port: int, timeout: float = 120) -> None:
    ctx = cp._tls(
        cp.pki / "etcd/ca.crt", cp.pki / "etcd/healthcheck-client.crt", cp.pki / "etcd/healthcheck-client.key"
    )
    cp.wait_healthy(name, f"https://{kp.LOOPBACK}:{port}/health", ctx, timeout=timeout)


def start_apiserver(cp: ControlPlane, args: Sequence[str], etcd_servers: str) -> None:
    cp.spawn("kube-apiserver", with_flags(args, etcd_servers=etcd_servers))
    cp.wait_healthy("kube-apiserver", f"{cp.url}/readyz", cp.admin_tls())


def test_restore_into_one_member_brings_every_object_back(snapshotted: tuple, tmp_path: Path) -> None:
    cp, snap, before = snapshotted
    etcd = gpustack_etcd()
    etcd_args, api_args = list(cp.processes["etcd"].args), list(cp.processes["kube-apiserver"].args)  # type: ignore[arg-type]
    stop(cp, "kube-apiserver")
    stop(cp, "etcd")
    name, peer = flag(etcd_args, "name"), flag(etcd_args, "initial-advertise-peer-urls")
    data = tmp_path / "etcd-restored"
    rc, _, err = run(etcd.restore_argv([str(binary("etcdutl"))], snap["path"], name=name, data_dir=str(data),
                                       peer_url=peer, initial_cluster=f"{name}={peer}", token="gpustack-restore-1"))  # fmt: skip
    assert rc == 0, err
    cp.spawn("etcd", with_flags(etcd_args, data_dir=str(data)))
    wait_etcd(cp, "etcd", cp.ports.etcd_client)
    start_apiserver(cp, api_args, flag(api_args, "etcd-servers"))
    assert objects(cp) == before
    rc, out, err = run(etcd.etcdctl_argv([str(binary("etcdctl"))], "endpoint", "status", "--write-out=json", **tls(cp)))
    assert rc == 0, err
    assert json.loads(out)[0]["Status"]["header"]["revision"] > int(etcd.BUMP_REVISION)


def test_restore_into_three_members_brings_every_object_back(snapshotted: tuple, tmp_path: Path) -> None:
    """HA: every member's data directory restored from the one snapshot with the same new token and member list,
    the three started, the API server on all three."""
    cp, snap, before = snapshotted
    etcd = gpustack_etcd()
    etcd_args, api_args = list(cp.processes["etcd"].args), list(cp.processes["kube-apiserver"].args)  # type: ignore[arg-type]
    stop(cp, "kube-apiserver")
    stop(cp, "etcd")
    ports: list[int] = []
    while len(ports) < 9:  # nine distinct ports (free_port may hand out one twice)
        port = free_port()
        if port not in ports and port not in vars(cp.ports).values():
            ports.append(port)
    members = [(f"m{i}", *ports[3 * i : 3 * i + 3]) for i in range(3)]  # name, client, peer, metrics
    cluster = ",".join(f"{n}=https://{kp.LOOPBACK}:{peer}" for n, _, peer, _ in members)
    for n, _, peer, _ in members:
        rc, _, err = run(etcd.restore_argv([str(binary("etcdutl"))], snap["path"], name=n,
                                           data_dir=str(tmp_path / n), peer_url=f"https://{kp.LOOPBACK}:{peer}",
                                           initial_cluster=cluster, token="gpustack-restore-ha"))  # fmt: skip
        assert rc == 0, err
    for n, client, peer, metrics in members:
        url, purl = f"https://{kp.LOOPBACK}:{client}", f"https://{kp.LOOPBACK}:{peer}"
        # each member in cp.processes: the fixture's stop() ends them
        cp.spawn(f"etcd-{n}", with_flags(etcd_args, name=n, data_dir=str(tmp_path / n), listen_client_urls=url,
                                         advertise_client_urls=url, listen_peer_urls=purl,
                                         initial_advertise_peer_urls=purl, initial_cluster=cluster,
                                         listen_metrics_urls=f"http://{kp.LOOPBACK}:{metrics}"))  # fmt: skip
    for n, client, _, _ in members:
        wait_etcd(cp, f"etcd-{n}", client)
    servers = ",".join(f"https://{kp.LOOPBACK}:{c}" for _, c, _, _ in members)
    start_apiserver(cp, api_args, servers)
    assert objects(cp) == before
    rc, out, err = run(etcd.etcdctl_argv([str(binary("etcdctl"))], "endpoint", "health", "--cluster",
                                         "--write-out=json", **tls(cp, members[0][1])))  # fmt: skip
    assert rc == 0, err
    health = etcd.parse_endpoint_health(out)
    assert len(health) == 3 and all(h["health"] for h in health)
    # node remove's quorum rule on etcd's own answers: with one member down, removing another healthy one is refused
    first = [str(binary("etcdctl"))]
    stop(cp, "etcd-m2")
    rc, listed, err = run(etcd.etcdctl_argv(first, "member", "list", "--write-out=json", **tls(cp, members[0][1])))
    assert rc == 0, err
    _, out, _ = run(etcd.etcdctl_argv(first, "endpoint", "health", "--cluster", "--write-out=json",
                                      **tls(cp, members[0][1])))  # fmt: skip
    state = etcd.member_health(listed, out)
    assert {m["name"]: m["healthy"] for m in state} == {"m0": True, "m1": True, "m2": False}
    assert etcd.quorum_problems(state, [{"name": "m2", "address": "192.0.2.99"}]) == []
    refused = etcd.quorum_problems(state, [{"name": "m1", "address": "192.0.2.99"}])
    assert refused and "would leave 1 healthy of 2 etcd members" in refused[0]
