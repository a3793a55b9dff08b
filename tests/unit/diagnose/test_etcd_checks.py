"""H17-H20: etcd alarms, database size, fragmentation and the newest snapshot, judged from host facts as the facts
module records them (``collect_etcd``/``parse_status`` fed the real etcd 3.6.8's JSON)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gpustack.diagnose import checks_etcd as ce
from gpustack.diagnose.snapshot import Snapshot

MIB = 1024 * 1024
#: `etcdctl endpoint status -w json` of the real etcd 3.6.8 (started with --quota-backend-bytes=104857600)
STATUS = ('[{"Endpoint":"http://127.0.0.1:23790","Status":{"header":{"cluster_id":324952591200643719,'
          '"member_id":3319814642761637952,"revision":1,"raft_term":2},"version":"3.6.8","dbSize":20480,'
          '"leader":3319814642761637952,"raftIndex":4,"raftTerm":2,"raftAppliedIndex":4,"dbSizeInUse":16384,'
          '"storageVersion":"3.6.0","dbSizeQuota":104857600,"downgradeInfo":{}}}]')  # fmt: skip
#: `etcdctl alarm list -w json` of the same etcd, no alarm; with one (etcdserverpb AlarmType NOSPACE = 1)
NO_ALARM = '{"header":{"cluster_id":324952591200643719,"member_id":3319814642761637952,"revision":1,"raft_term":2}}'
NOSPACE = '{"header":{},"alarms":[{"memberID":3319814642761637952,"alarm":1}]}'


def etcd_utils() -> ModuleType:
    path = Path(__file__).parents[3] / "playbooks" / "module_utils" / "gpustack_etcd.py"
    spec = importlib.util.spec_from_file_location("gpustack_etcd", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def snap(hosts: dict[str, Any], interval: int = 43200) -> Snapshot:
    return Snapshot(hosts=hosts, collected_at="2026-11-29T12:00:00+00:00",
                    settings={"etcd": {"snapshot_interval_seconds": interval}})  # fmt: skip


def member(size: int = 20 * MIB, in_use: int = 18 * MIB, quota: int = 2048 * MIB, alarms: tuple = (),
           newest: str | None = "2026-11-29T06:00:00Z") -> dict[str, Any]:  # fmt: skip
    snapshot = {"path": "/var/lib/gpustack/etcd-snapshots/etcd-cp1-x.db", "time": newest} if newest else None
    return {"etcd": {"db_size": size, "db_size_in_use": in_use, "quota": quota, "alarms": list(alarms),
                     "newest_snapshot": snapshot}}  # fmt: skip


def test_the_real_status_json_becomes_facts() -> None:
    etcd = etcd_utils()
    assert etcd.parse_status(STATUS, NO_ALARM) == {"db_size": 20480, "db_size_in_use": 16384, "quota": 104857600,
                                                   "version": "3.6.8", "alarms": []}  # fmt: skip
    assert etcd.parse_status(STATUS, NOSPACE)["alarms"] == ["NOSPACE"]
    assert etcd.parse_status("garbage", "garbage") == {"alarms": []}


def test_collect_on_a_control_plane_only_and_says_when_etcd_cannot_be_asked() -> None:
    etcd = etcd_utils()
    assert etcd.collect_etcd(lambda argv: (0, "", ""), lambda path: False) is None
    got = etcd.collect_etcd(lambda argv: (1, "", "connect: connection refused"), lambda path: True)
    assert "no running etcd container" in got["error"]

    def run(argv: list[str]) -> tuple[int, str, str]:
        if argv[1] == "ps":
            return 0, "abc\n", ""
        return 0, STATUS if "status" in argv else NOSPACE, ""

    got = etcd.collect_etcd(run, lambda path: True)
    assert got["alarms"] == ["NOSPACE"] and got["db_size"] == 20480 and "error" not in got


def test_no_control_plane_facts_skip() -> None:
    for check in (ce.etcd_alarms, ce.etcd_db_size, ce.etcd_fragmentation, ce.etcd_snapshot_age):
        assert [f.status for f in check(snap({}))] == ["skip"]
        assert [f.status for f in check(snap({"w1": {"etcd": None}}))] == ["skip"]


def test_alarms() -> None:
    assert [f.status for f in ce.etcd_alarms(snap({"cp1": member()}))] == ["pass"]
    (f,) = ce.etcd_alarms(snap({"cp1": member(alarms=("NOSPACE",))}))
    assert f.status == "fail" and "NOSPACE" in f.summary and "alarm disarm" in f.fix and "defrag" in f.fix
    (f,) = ce.etcd_alarms(snap({"cp1": member(alarms=("CORRUPT",))}))
    assert f.status == "fail" and "restore the newest snapshot" in f.fix
    (f,) = ce.etcd_alarms(snap({"cp1": {"etcd": {"error": "no running etcd container"}}}))
    assert f.status == "warn" and f.evidence == "no running etcd container"


@pytest.mark.parametrize(("size", "status"), [(1000 * MIB, "pass"), (1700 * MIB, "warn"), (1980 * MIB, "fail")])
def test_database_size_against_the_quota(size: int, status: str) -> None:
    (f,) = ce.etcd_db_size(snap({"cp1": member(size=size, in_use=size)}))
    assert f.status == status and "of its 2048 MiB quota" in f.summary
    assert bool(f.fix) == (status != "pass")


@pytest.mark.parametrize(
    ("size", "in_use", "status"),
    [(400 * MIB, 150 * MIB, "warn"), (400 * MIB, 300 * MIB, "pass"), (150 * MIB, 50 * MIB, "pass")],
)
def test_fragmentation(size: int, in_use: int, status: str) -> None:
    (f,) = ce.etcd_fragmentation(snap({"cp1": member(size=size, in_use=in_use)}))
    assert f.status == status
    assert ("etcdctl" in f.fix and f.fix.endswith(" defrag")) == (status == "warn")


@pytest.mark.parametrize(
    ("newest", "status"),
    [
        ("2026-11-29T06:00:00Z", "pass"),
        ("2026-11-28T06:00:00Z", "warn"),
        ("2026-11-26T12:00:00Z", "fail"),
        (None, "warn"),
    ],
)
def test_snapshot_age_against_the_interval(newest: str | None, status: str) -> None:
    (f,) = ce.etcd_snapshot_age(snap({"cp1": member(newest=newest)}))
    assert f.status == status
    assert ("gpustack etcd snapshot" in f.fix) == (status != "pass")
    (f,) = ce.etcd_snapshot_age(snap({"cp1": member(newest="2026-11-29T06:00:00Z")}, interval=3600))
    assert f.status == "fail", "six hours old with an hourly timer"
