"""playbooks/module_utils/gpustack_etcd.py without etcd: names, the integrity check, retention, the command lines,
the etcd container lookup (the real etcdctl and etcdutl: tests/controlplane/test_etcd_snapshot.py)."""

from __future__ import annotations

import datetime
import hashlib
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.playbooks.conftest import PLAYBOOKS, load_path

UTC = datetime.timezone.utc


@pytest.fixture(scope="module")
def etcd() -> ModuleType:
    return load_path("ansible.module_utils.gpustack_etcd", PLAYBOOKS / "module_utils" / "gpustack_etcd.py")


def snapshot_bytes(body: bytes = b"x" * 1024) -> bytes:
    """What etcd streams: the database (pages: a multiple of 512 here) and its sha256."""
    assert len(body) % 512 == 0
    return body + hashlib.sha256(body).digest()


def fake_etcdctl(data: bytes, rc: int = 0) -> tuple[list[list[str]], object]:
    calls: list[list[str]] = []

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        calls.append(list(argv))
        if rc == 0:
            Path(argv[argv.index("save") + 1]).write_bytes(data)
        return rc, "", "context deadline exceeded" if rc else ""

    return calls, run


def test_names_sort_by_time_and_parse_back(etcd: ModuleType) -> None:
    when = datetime.datetime(2026, 11, 29, 4, 5, 6, tzinfo=UTC)
    name = etcd.snapshot_name("cp-1", when)
    assert name == "etcd-cp-1-20261129T040506Z.db"
    assert etcd.snapshot_time(name) == when
    assert etcd.snapshot_time("etcd-cp-1-latest.db") is None and etcd.snapshot_time("notes.txt") is None


def test_a_whole_snapshot_verifies(etcd: ModuleType, tmp_path: Path) -> None:
    data = snapshot_bytes()
    (tmp_path / "s.db").write_bytes(data)
    assert etcd.verify_snapshot(str(tmp_path / "s.db")) == {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda d: d[:-1], "not a whole etcd snapshot"),
        (lambda d: d[:512], "not a whole etcd snapshot"),
        (lambda d: b"y" + d[1:], "does not match"),
        (lambda d: b"", "not a whole etcd snapshot"),
    ],
)
def test_a_truncated_or_changed_snapshot_is_refused(etcd: ModuleType, tmp_path: Path, mangle, message: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "s.db").write_bytes(mangle(snapshot_bytes()))
    with pytest.raises(etcd.SnapshotError, match=message):
        etcd.verify_snapshot(str(tmp_path / "s.db"))


def test_take_snapshot_keeps_it_private_prunes_and_copies(etcd: ModuleType, tmp_path: Path) -> None:
    os.umask(0o022)
    data_dir, dest, share = tmp_path / "etcd", tmp_path / "keep", tmp_path / "share"
    data_dir.mkdir()
    dest.mkdir(mode=0o755)
    for day in (1, 2, 3):
        (dest / f"etcd-cp-1-202611{day:02d}T000000Z.db").write_bytes(b"old")
    (dest / "unrelated.txt").write_text("stays")
    calls, run = fake_etcdctl(snapshot_bytes())
    when = datetime.datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    got = etcd.take_snapshot(run, ["crictl", "exec", "abc", "etcdctl"], node="cp-1", data_dir=str(data_dir),
                             dest_dir=str(dest), keep=2, copy_to=str(share), now=when)  # fmt: skip
    assert calls == [["crictl", "exec", "abc", "etcdctl", "--endpoints=https://127.0.0.1:2379",
                      "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
                      "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt",
                      "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
                      "snapshot", "save", str(data_dir / "gpustack-snapshot.db")]]  # fmt: skip
    assert got["path"] == str(dest / "etcd-cp-1-20261129T120000Z.db")
    assert sorted(p.name for p in dest.iterdir()) == [
        "etcd-cp-1-20261103T000000Z.db", "etcd-cp-1-20261129T120000Z.db", "unrelated.txt"]  # fmt: skip
    assert len(got["removed"]) == 2
    assert stat.S_IMODE(os.stat(got["path"]).st_mode) == 0o600 and stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert Path(got["copy"]).read_bytes() == Path(got["path"]).read_bytes()
    assert stat.S_IMODE(share.stat().st_mode) == 0o700 and stat.S_IMODE(os.stat(got["copy"]).st_mode) == 0o600
    assert list(data_dir.iterdir()) == [], "nothing is left in etcd's data directory"
    assert etcd.newest(str(dest)) == {"path": got["path"], "time": "2026-11-29T12:00:00Z"}


def test_a_failed_save_or_a_corrupt_file_keeps_nothing(etcd: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "etcd").mkdir()
    _, run = fake_etcdctl(b"", rc=1)
    with pytest.raises(etcd.SnapshotError, match=r"etcdctl snapshot save failed \(1\): context deadline exceeded"):
        etcd.take_snapshot(run, ["etcdctl"], node="n", data_dir=str(tmp_path / "etcd"), dest_dir=str(tmp_path / "k"))
    _, run = fake_etcdctl(snapshot_bytes()[:-3])
    with pytest.raises(etcd.SnapshotError, match="not a whole"):
        etcd.take_snapshot(run, ["etcdctl"], node="n", data_dir=str(tmp_path / "etcd"), dest_dir=str(tmp_path / "k"))
    assert not (tmp_path / "k").exists() and list((tmp_path / "etcd").iterdir()) == []


def test_the_etcd_container_is_found_by_its_kubelet_label(etcd: ModuleType) -> None:
    seen: list[list[str]] = []

    def run(argv: Sequence[str]) -> tuple[int, str, str]:
        seen.append(list(argv))
        return 0, "3f2a9c\n", ""

    assert etcd.crictl_etcdctl(run) == ["crictl", "exec", "3f2a9c", "etcdctl"]
    assert seen == [["crictl", "ps", "--state", "Running", "--label", "io.kubernetes.container.name=etcd", "--quiet"]]
    with pytest.raises(etcd.SnapshotError, match="no running etcd container"):
        etcd.crictl_etcdctl(lambda argv: (0, "", ""))


def test_restore_command_line(etcd: ModuleType) -> None:
    argv = etcd.restore_argv(["etcdutl"], "/s.db", name="cp-1", data_dir="/var/lib/etcd-restore",
                             peer_url="https://10.0.0.1:2380", initial_cluster="cp-1=https://10.0.0.1:2380",
                             token="gpustack-restore-1")  # fmt: skip
    assert argv == ["etcdutl", "snapshot", "restore", "/s.db", "--name=cp-1", "--data-dir=/var/lib/etcd-restore",
                    "--initial-cluster=cp-1=https://10.0.0.1:2380",
                    "--initial-advertise-peer-urls=https://10.0.0.1:2380", "--initial-cluster-token=gpustack-restore-1",
                    "--bump-revision=1000000000", "--mark-compacted"]  # fmt: skip


def test_endpoint_health_parses_healthy_and_not(etcd: ModuleType) -> None:
    out = ('[{"endpoint":"https://10.0.0.1:2379","health":true,"took":"2ms"},'
           '{"endpoint":"https://10.0.0.2:2379","health":false,"error":"context deadline exceeded"}]')  # fmt: skip
    assert etcd.parse_endpoint_health(out) == [
        {"endpoint": "https://10.0.0.1:2379", "health": True, "error": ""},
        {"endpoint": "https://10.0.0.2:2379", "health": False, "error": "context deadline exceeded"},
    ]
    assert etcd.parse_endpoint_health("not json") == []


def test_the_timer_script_reports_a_failure_with_exit_1(etcd: ModuleType, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc = etcd.main(["--node", "n", "--dir", str(tmp_path / "k"), "--etcdctl", str(tmp_path / "no-such-etcdctl")])
    assert rc == 1
    assert "etcd snapshot failed" in capsys.readouterr().err


MEMBERS = (
    '{"members":['
    '{"ID":12345678901234567890,"name":"cp1","peerURLs":["https://10.0.0.1:2380"],"clientURLs":["https://10.0.0.1:2379"]},'
    '{"ID":2,"name":"cp2","peerURLs":["https://10.0.0.2:2380"],"clientURLs":["https://10.0.0.2:2379"]},'
    '{"ID":3,"name":"cp3","peerURLs":["https://10.0.0.3:2380"],"clientURLs":["https://10.0.0.3:2379"]}]}'
)


def health(*down: str) -> str:
    return "[" + ",".join(
        f'{{"endpoint":"https://10.0.0.{i}:2379","health":{"false" if f"cp{i}" in down else "true"}}}' for i in (1, 2, 3)
    ) + "]"  # fmt: skip


def test_member_health_joins_members_and_endpoints(etcd: ModuleType) -> None:
    members = etcd.member_health(MEMBERS, health("cp3"))
    assert members[0] == {"id": "ab54a98ceb1f0ad2", "name": "cp1", "hosts": ["10.0.0.1"], "healthy": True}
    assert [m["healthy"] for m in members] == [True, True, False]
    with pytest.raises(etcd.SnapshotError, match="did not print JSON"):
        etcd.member_health("Error: context deadline exceeded", "")


@pytest.mark.parametrize(
    ("down", "removing", "problem"),
    [
        ((), [{"name": "cp3", "address": "10.0.0.3"}], None),
        (("cp3",), [{"name": "cp3", "address": "10.0.0.3"}], None),  # the dead one goes: 2 of 2 healthy
        (("cp3",), [{"name": "cp2", "address": "10.0.0.2"}], "would leave 1 healthy of 2 etcd members"),
        (("cp2", "cp3"), [{"name": "cp3", "address": "10.0.0.3"}], "etcd has no quorum: 1 of 3 members"),
        ((), [{"name": "renamed", "address": "10.0.0.1"}], None),  # matched by address
    ],
)
def test_quorum_is_judged_from_etcds_own_health(
    etcd: ModuleType, down: tuple, removing: list, problem: str | None
) -> None:
    problems = etcd.quorum_problems(etcd.member_health(MEMBERS, health(*down)), removing)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0]


@pytest.mark.parametrize("damage", ["none", "flipped", "truncated"])
def test_this_machines_check_and_the_hosts_give_one_answer(etcd: ModuleType, tmp_path: Path, damage: str) -> None:
    """gpustack/cluster/etcd_restore.py ``verify`` (before a restore, on this machine) and the hosts'
    ``verify_snapshot`` are twins across the host boundary: the same sizes and hashes, the same refusals."""
    from gpustack.cluster.etcd_restore import SnapshotRefused, verify

    data = bytearray(snapshot_bytes(os.urandom(2048)))
    if damage == "flipped":
        data[10] ^= 0xFF
    elif damage == "truncated":
        del data[-100:]
    path = tmp_path / "s.db"
    path.write_bytes(bytes(data))
    if damage == "none":
        assert verify(path) == etcd.verify_snapshot(str(path))
        return
    with pytest.raises(SnapshotRefused) as mine:
        verify(path)
    with pytest.raises(etcd.SnapshotError) as hosts:
        etcd.verify_snapshot(str(path))
    assert str(mine.value) == str(hosts.value)
