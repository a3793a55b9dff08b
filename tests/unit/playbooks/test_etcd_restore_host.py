"""playbooks/module_utils/gpustack_etcd_restore.py without etcd: kubeadm's etcd manifest read, the initial
cluster of every member, the manifests parked and put back, the wait for the kubelet to stop the containers (a
crictl double), the data directory moved aside and never deleted, the restore into it (an etcdutl double), the
record of each phase and an interrupted restore finished by the next run, the etcdutl of the etcd image through
ctr. The real etcdutl, etcd and API server: tests/controlplane/test_etcd_restore.py."""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.playbooks.conftest import PLAYBOOKS, load_path

#: kubeadm 1.36's etcd.yaml as `kubeadm init phase etcd local` writes it (cmd/kubeadm/app/phases/etcd/local.go),
#: the parts the restore reads; tests/controlplane/test_etcd_restore.py reads the real one
MANIFEST = """apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
spec:
  containers:
  - command:
    - etcd
    - --advertise-client-urls=https://192.0.2.11:2379
    - --cert-file=/etc/kubernetes/pki/etcd/server.crt
    - --data-dir=/var/lib/etcd
    - --initial-advertise-peer-urls=https://192.0.2.11:2380
    - --initial-cluster=cp1=https://192.0.2.11:2380
    - --name=cp1
    image: registry.k8s.io/etcd:3.6.8-0
    name: etcd
"""


@pytest.fixture(scope="module")
def restore() -> ModuleType:
    load_path("ansible.module_utils.gpustack_etcd", PLAYBOOKS / "module_utils" / "gpustack_etcd.py")
    return load_path(
        "ansible.module_utils.gpustack_etcd_restore", PLAYBOOKS / "module_utils" / "gpustack_etcd_restore.py"
    )


def snapshot(path: Path) -> str:
    body = b"d" * 4096
    path.write_bytes(body + hashlib.sha256(body).digest())
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_member_is_read_from_kubeadms_manifest(restore: ModuleType) -> None:
    assert restore.manifest_member(MANIFEST) == {
        "name": "cp1", "peer_url": "https://192.0.2.11:2380", "data_dir": "/var/lib/etcd",
        "image": "registry.k8s.io/etcd:3.6.8-0", "initial_cluster": "cp1=https://192.0.2.11:2380",
    }  # fmt: skip
    with pytest.raises(restore.RestoreError, match="names no name"):
        restore.manifest_member(MANIFEST.replace("    - --name=cp1\n", ""))
    with pytest.raises(restore.RestoreError, match="not one a restore can move aside"):
        restore.manifest_member(MANIFEST.replace("--data-dir=/var/lib/etcd", "--data-dir=/var/lib"))


def test_every_member_is_in_the_initial_cluster(restore: ModuleType) -> None:
    """A joined member's manifest lists only the members at its join: the cluster comes from every control plane."""
    members = [{"name": "cp3", "peer_url": "https://192.0.2.13:2380"}, {"name": "cp1", "peer_url": "https://192.0.2.11:2380"},
               {"name": "cp2", "peer_url": "https://192.0.2.12:2380"}]  # fmt: skip
    assert restore.initial_cluster(members) == (
        "cp1=https://192.0.2.11:2380,cp2=https://192.0.2.12:2380,cp3=https://192.0.2.13:2380"
    )
    with pytest.raises(restore.RestoreError, match="two control planes call their etcd member 'cp1'"):
        restore.initial_cluster([*members, {"name": "cp1", "peer_url": "https://192.0.2.99:2380"}])


class Crictl:
    """crictl of cri-tools 1.36: ``ps --quiet --state Running --label io.kubernetes.container.name=NAME`` prints the
    running containers' IDs, one a line; here the kubelet stops a container ``lag`` polls after its manifest went."""

    def __init__(self, manifests: Path, lag: int = 1) -> None:
        self.manifests, self.lag, self.calls = manifests, lag, []  # type: ignore[var-annotated]
        self.polls: dict[str, int] = {}

    def __call__(self, argv: Sequence[str]) -> tuple[int, str, str]:
        self.calls.append(list(argv))
        assert argv[1:5] == ["--runtime-endpoint", "unix:///run/containerd/containerd.sock", "ps", "--quiet"]
        name = argv[-1].split("=", 1)[1]
        if (self.manifests / f"{name}.yaml").exists():
            return 0, f"{name}-id\n", ""
        self.polls[name] = self.polls.get(name, 0) + 1
        return 0, (f"{name}-id\n" if self.polls[name] <= self.lag else ""), ""


def etcdutl(calls: list[list[str]], rc: int = 0) -> object:
    """etcdutl 3.6.8 ``snapshot restore FILE --data-dir=DIR ...``: DIR made with ``member/snap`` and ``member/wal``
    (etcdutl/snapshot/v3_snapshot.go), refused when DIR exists; or fails with an exit code."""

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        calls.append(list(argv))
        data = Path(next(a.split("=", 1)[1] for a in argv if a.startswith("--data-dir=")))
        if rc or data.exists():
            return rc or 1, "", "data-dir exists" if data.exists() else "restore failed"
        (data / "member" / "snap").mkdir(parents=True)
        (data / "member" / "wal").mkdir()
        (data / "member" / "snap" / "db").write_bytes(b"restored")
        return 0, "", ""

    return run


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    manifests, data = tmp_path / "manifests", tmp_path / "var" / "etcd"
    manifests.mkdir()
    (manifests / "etcd.yaml").write_text(MANIFEST.replace("/var/lib/etcd", str(data)))
    (manifests / "kube-apiserver.yaml").write_text("kind: Pod\n")
    (manifests / "kube-scheduler.yaml").write_text("kind: Pod\n")
    (data / "member").mkdir(parents=True)
    (data / "member" / "old").write_text("the old data")
    return {"manifests": manifests, "parked": tmp_path / "parked", "data": data, "record": tmp_path / "state.json"}


def test_stop_parks_only_etcd_and_the_api_server_and_waits_for_the_kubelet(
    restore: ModuleType, host: dict[str, Path]
) -> None:
    crictl = Crictl(host["manifests"], lag=2)
    assert restore.park(str(host["manifests"]), str(host["parked"])) == ["etcd.yaml", "kube-apiserver.yaml"]
    assert sorted(p.name for p in host["manifests"].iterdir()) == ["kube-scheduler.yaml"]
    assert stat.S_IMODE(host["parked"].stat().st_mode) == 0o700
    assert restore.park(str(host["manifests"]), str(host["parked"])) == [], "a second run moves nothing"
    sleeps: list[float] = []
    restore.wait_gone(crictl, 60, sleep=sleeps.append, clock=lambda: 0.0)
    assert len(sleeps) == 2 and crictl.polls == {"etcd": 3, "kube-apiserver": 3}
    assert restore.unpark(str(host["manifests"]), str(host["parked"])) == ["etcd.yaml", "kube-apiserver.yaml"]
    assert restore.unpark(str(host["manifests"]), str(host["parked"])) == []


def test_containers_that_do_not_stop_fail_the_wait(restore: ModuleType, host: dict[str, Path]) -> None:
    crictl = Crictl(host["manifests"], lag=10**6)
    ticks = iter(range(0, 1000, 30))
    with pytest.raises(restore.RestoreError, match="still run 60 s after their manifests were moved"):
        restore.wait_gone(crictl, 60, sleep=lambda _: None, clock=lambda: float(next(ticks)))


def test_the_data_directory_is_moved_aside_and_restored_private(restore: ModuleType, host: dict[str, Path]) -> None:
    calls: list[list[str]] = []
    member = restore.manifest_member((host["manifests"] / "etcd.yaml").read_text())
    rec = restore.restore_data(etcdutl(calls), ["etcdutl"], snapshot="/snap.db", member=member,
                               cluster="cp1=https://192.0.2.11:2380", token="gpustack-restore-X", restore_id="X",
                               record={"id": "X", "phase": "stopped"}, record_path=str(host["record"]))  # fmt: skip
    aside = Path(f"{host['data']}.before-restore-X")
    assert (aside / "member" / "old").read_text() == "the old data", "the old data is kept, never deleted"
    assert (host["data"] / "member" / "snap" / "db").read_bytes() == b"restored"
    assert stat.S_IMODE(host["data"].stat().st_mode) == 0o700
    assert not Path(f"{host['data']}.restoring").exists()
    assert calls == [["etcdutl", "snapshot", "restore", "/snap.db", "--name=cp1", f"--data-dir={host['data']}.restoring",
                      "--initial-cluster=cp1=https://192.0.2.11:2380",
                      "--initial-advertise-peer-urls=https://192.0.2.11:2380",
                      "--initial-cluster-token=gpustack-restore-X", "--bump-revision=1000000000",
                      "--mark-compacted"]]  # fmt: skip
    assert rec["phase"] == "restored" and rec["aside"] == str(aside)
    assert json.loads(host["record"].read_text()) == rec
    assert stat.S_IMODE(host["record"].stat().st_mode) == 0o600
    # run again (the record lost its last write): nothing restored twice, the kept data untouched
    again = restore.restore_data(etcdutl(calls), ["etcdutl"], snapshot="/snap.db", member=member, cluster="c",
                                 token="t", restore_id="X", record={"id": "X", "phase": "stopped", "aside": str(aside)},
                                 record_path=str(host["record"]))  # fmt: skip
    assert len(calls) == 1 and again["phase"] == "restored"
    assert (aside / "member" / "old").read_text() == "the old data"


def test_a_restore_cut_off_inside_etcdutl_is_finished_by_the_next_run(
    restore: ModuleType, host: dict[str, Path]
) -> None:
    member = restore.manifest_member((host["manifests"] / "etcd.yaml").read_text())
    calls: list[list[str]] = []
    with pytest.raises(restore.RestoreError, match="etcdutl snapshot restore failed"):
        restore.restore_data(etcdutl(calls, rc=2), ["etcdutl"], snapshot="/s.db", member=member, cluster="c",
                             token="t", restore_id="X", record={"id": "X", "phase": "stopped"},
                             record_path=str(host["record"]))  # fmt: skip
    saved = json.loads(host["record"].read_text())
    assert saved["phase"] == "stopped" and saved["aside"].endswith(".before-restore-X"), "the move aside recorded first"
    assert not host["data"].exists()
    Path(f"{host['data']}.restoring", "member").mkdir(parents=True)  # a partial restore of gpustack's own
    rec = restore.restore_data(etcdutl(calls), ["etcdutl"], snapshot="/s.db", member=member, cluster="c", token="t",
                               restore_id="X", record=saved, record_path=str(host["record"]))  # fmt: skip
    assert rec["phase"] == "restored" and (host["data"] / "member" / "snap" / "db").exists()
    assert (Path(saved["aside"]) / "member" / "old").read_text() == "the old data"


def test_another_unfinished_restore_refuses_and_a_finished_one_is_ignored(
    restore: ModuleType, host: dict[str, Path]
) -> None:
    restore.write_record({"id": "A", "phase": "restored", "snapshot": "/s.db"}, str(host["record"]))
    with pytest.raises(restore.RestoreError, match=r"another etcd restore \(A, snapshot /s.db\) is unfinished"):
        restore.own_record(str(host["record"]), "B")
    assert restore.own_record(str(host["record"]), "A")["phase"] == "restored"
    restore.write_record({"id": "A", "phase": "done"}, str(host["record"]))
    assert restore.own_record(str(host["record"]), "B") == {}
    assert restore.reached({"phase": "started"}, "restored") and not restore.reached({"phase": "stopped"}, "restored")


def test_the_snapshot_copy_must_be_the_one_this_machine_chose(restore: ModuleType, tmp_path: Path) -> None:
    sha = snapshot(tmp_path / "s.db")
    assert restore.check_snapshot(str(tmp_path / "s.db"), sha)["sha256"] == sha
    with pytest.raises(restore.RestoreError, match="is not the snapshot's"):
        restore.check_snapshot(str(tmp_path / "s.db"), "0" * 64)
    (tmp_path / "s.db").write_bytes((tmp_path / "s.db").read_bytes()[:-1] + b"\0")
    with pytest.raises(restore.RestoreError, match="does not verify"):
        restore.check_snapshot(str(tmp_path / "s.db"), sha)


def test_finish_removes_only_the_hosts_copy(
    restore: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(restore, "RESTORE_DIR", str(tmp_path))
    (tmp_path / "s.db").write_bytes(b"x")
    outside = tmp_path.parent / "keep.db"
    outside.write_bytes(b"x")
    rec = restore.finish({"id": "X", "phase": "started", "snapshot": str(tmp_path / "s.db")}, str(tmp_path / "r.json"))
    assert rec["phase"] == "done" and not (tmp_path / "s.db").exists()
    restore.finish({"id": "Y", "phase": "started", "snapshot": str(outside)}, str(tmp_path / "r.json"))
    assert outside.exists()


def test_the_etcd_images_etcdutl_runs_through_ctr_with_the_data_bound(restore: ModuleType) -> None:
    argv = restore.ctr_etcdutl("registry.k8s.io/etcd:3.6.8-0", "gpustack-etcdutl-X-1", ["/var/lib", "/var/lib"])
    assert argv == ["ctr", "-n", "k8s.io", "run", "--rm", "--mount",
                    "type=bind,src=/var/lib,dst=/var/lib,options=rbind:rw",
                    "registry.k8s.io/etcd:3.6.8-0", "gpustack-etcdutl-X-1", "etcdutl"]  # fmt: skip
