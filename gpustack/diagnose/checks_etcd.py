"""etcd on each control plane (H17-H20), read on the host over SSH through the etcd static pod's etcdctl (host facts
``etcd``: playbooks/module_utils/gpustack_etcd.py ``collect_etcd``), so they answer without the API server:

- H17: etcd's alarms (``etcdctl alarm list``): NOSPACE makes etcd refuse every write, CORRUPT stops the member.
- H18: the database against its quota (``endpoint status``: ``dbSize``, ``dbSizeQuota``; etcd raises NOSPACE at
  the quota): warn from 80 %, fail from 95 % (the etcd mixin's ``etcdBackendQuotaLowSpace`` fires at 95 %).
- H19: fragmentation: less than half the file in use and more than 100 MiB in use, the etcd mixin's
  ``etcdDatabaseHighFragmentationRatio``; fixed by ``etcdctl defrag``, one member at a time.
- H20: the newest snapshot in /var/lib/gpustack/etcd-snapshots against ``etcd.snapshots.interval``: warn when
  there is none or it is older than two intervals, fail past four.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from gpustack.checks.certs import parse_iso
from gpustack.checks.model import Finding, Status
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot

MIB = 1024 * 1024
QUOTA_WARN, QUOTA_FAIL = 0.80, 0.95
FRAGMENTED_IN_USE_RATIO, FRAGMENTED_MIN_IN_USE = 0.5, 100 * MIB
DEFAULT_INTERVAL = 12 * 3600
ETCDCTL = (
    "sudo crictl exec $(sudo crictl ps -q --label io.kubernetes.container.name=etcd) etcdctl "
    "--endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
    "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt --key=/etc/kubernetes/pki/etcd/healthcheck-client.key"
)
DEFRAG_FIX = f"on each control plane, one at a time (a member blocks while it defragments): {ETCDCTL} defrag"
NOSPACE_FIX = (
    f"free space, then disarm: on a control plane: {ETCDCTL} endpoint status -w json   # the revision; then "
    f"{ETCDCTL} compaction <revision>; {ETCDCTL} defrag   # on each control plane; then {ETCDCTL} alarm disarm"
)
CORRUPT_FIX = (
    "a member's data is corrupt: remove and re-add that member, or restore the newest snapshot "
    "(docs/lifecycle.md, etcd snapshots)"
)


def _members(snap: Snapshot) -> dict[str, Mapping[str, Any]]:
    """Control plane -> its etcd facts (hosts without kubeadm's etcd manifest have none)."""
    return {
        name: facts["etcd"]
        for name, facts in sorted(snap.hosts.items())
        if isinstance(facts, Mapping) and isinstance(facts.get("etcd"), Mapping)
    }


def _none(check: str, snap: Snapshot) -> list[Finding]:
    if not snap.hosts:
        return [Finding(check, "host", "skip", "etcd: no host facts collected (see H00-host-facts)")]
    return [Finding(check, "host", "skip", "no control plane with kubeadm's etcd among the nodes read")]


def _unread(check: str, name: str, facts: Mapping[str, Any]) -> Finding | None:
    if facts.get("error"):
        return Finding(check, "host", "warn", "etcd not read", host=name, evidence=str(facts["error"]),
                       fix="on the node: sudo crictl ps --name etcd; sudo crictl logs $(sudo crictl ps -q --name etcd)")  # fmt: skip
    return None


@register("H17-etcd-alarms", "host", title="no etcd alarm (NOSPACE, CORRUPT)",
          reads="host facts: etcd.alarms (etcdctl alarm list, on each control plane)")  # fmt: skip
def etcd_alarms(snap: Snapshot) -> list[Finding]:
    members = _members(snap)
    out = []
    for name, facts in members.items():
        unread = _unread("H17-etcd-alarms", name, facts)
        if unread:
            out.append(unread)
            continue
        alarms = [str(a) for a in facts.get("alarms") or []]
        if not alarms:
            out.append(Finding("H17-etcd-alarms", "host", "pass", "no etcd alarm", host=name))
            continue
        fix = "\n".join(([NOSPACE_FIX] if "NOSPACE" in alarms else []) + ([CORRUPT_FIX] if "CORRUPT" in alarms else []))
        out.append(Finding("H17-etcd-alarms", "host", "fail", f"etcd alarm raised: {', '.join(alarms)}", host=name,
                           evidence="NOSPACE: etcd refuses every write until the alarm is disarmed" if "NOSPACE" in alarms
                           else "", fix=fix or CORRUPT_FIX))  # fmt: skip
    return out or _none("H17-etcd-alarms", snap)


def _size(n: float) -> str:
    return f"{n / MIB:.0f} MiB"


@register("H18-etcd-db-size", "host", title="the etcd database well under its quota",
          reads="host facts: etcd.db_size, etcd.quota (etcdctl endpoint status)")  # fmt: skip
def etcd_db_size(snap: Snapshot) -> list[Finding]:
    out = []
    for name, facts in _members(snap).items():
        unread = _unread("H18-etcd-db-size", name, facts)
        if unread:
            out.append(unread)
            continue
        size, quota = facts.get("db_size"), facts.get("quota")
        if not isinstance(size, int) or not isinstance(quota, int) or quota <= 0:
            out.append(Finding("H18-etcd-db-size", "host", "warn", "etcd database size not reported", host=name))
            continue
        ratio = size / quota
        status: Status = "fail" if ratio >= QUOTA_FAIL else "warn" if ratio >= QUOTA_WARN else "pass"
        fix = "" if status == "pass" else DEFRAG_FIX + (
            "; if the space is in use, raise etcd's --quota-backend-bytes (kubeadm etcd.local.extraArgs) or delete "
            "what fills it")  # fmt: skip
        out.append(Finding("H18-etcd-db-size", "host", status,
                           f"etcd database {_size(size)} of its {_size(quota)} quota ({ratio:.0%})", host=name,
                           evidence=f"in use {_size(facts.get('db_size_in_use') or 0)}", fix=fix))  # fmt: skip
    return out or _none("H18-etcd-db-size", snap)


@register("H19-etcd-fragmentation", "host", title="the etcd database not fragmented",
          reads="host facts: etcd.db_size, etcd.db_size_in_use (etcdctl endpoint status)")  # fmt: skip
def etcd_fragmentation(snap: Snapshot) -> list[Finding]:
    out = []
    for name, facts in _members(snap).items():
        unread = _unread("H19-etcd-fragmentation", name, facts)
        if unread:
            out.append(unread)
            continue
        size, in_use = facts.get("db_size"), facts.get("db_size_in_use")
        if not isinstance(size, int) or not isinstance(in_use, int) or size <= 0:
            out.append(Finding("H19-etcd-fragmentation", "host", "warn", "etcd database use not reported", host=name))
            continue
        fragmented = in_use / size < FRAGMENTED_IN_USE_RATIO and in_use > FRAGMENTED_MIN_IN_USE
        out.append(Finding("H19-etcd-fragmentation", "host", "warn" if fragmented else "pass",
                           f"etcd database {_size(in_use)} in use of {_size(size)} ({in_use / size:.0%})", host=name,
                           fix=DEFRAG_FIX if fragmented else ""))  # fmt: skip
    return out or _none("H19-etcd-fragmentation", snap)


def _interval(snap: Snapshot) -> int:
    etcd = snap.settings.get("etcd") if isinstance(snap.settings, Mapping) else None
    value = etcd.get("snapshot_interval_seconds") if isinstance(etcd, Mapping) else None
    return int(value) if isinstance(value, int) and value > 0 else DEFAULT_INTERVAL


@register("H20-etcd-snapshot-age", "host", title="a recent etcd snapshot on each control plane",
          reads="host facts: etcd.newest_snapshot (/var/lib/gpustack/etcd-snapshots)")  # fmt: skip
def etcd_snapshot_age(snap: Snapshot) -> list[Finding]:
    now = parse_iso(snap.collected_at) or datetime.now(timezone.utc)
    interval = _interval(snap)
    take = "gpustack etcd snapshot   # now; and check the timer: systemctl status gpustack-etcd-snapshot.timer"
    out = []
    for name, facts in _members(snap).items():
        newest = facts.get("newest_snapshot")
        when = parse_iso(newest.get("time")) if isinstance(newest, Mapping) else None
        if when is None or not isinstance(newest, Mapping):
            out.append(Finding("H20-etcd-snapshot-age", "host", "warn", "no etcd snapshot on this control plane",
                               host=name, evidence="/var/lib/gpustack/etcd-snapshots is empty", fix=take))  # fmt: skip
            continue
        age = (now - when).total_seconds()
        status: Status = "fail" if age > 4 * interval else "warn" if age > 2 * interval else "pass"
        hours = age / 3600
        out.append(Finding("H20-etcd-snapshot-age", "host", status,
                           f"newest etcd snapshot {hours:.1f} h old (every {interval / 3600:g} h)", host=name,
                           evidence=str(newest.get("path") or ""), fix="" if status == "pass" else take))  # fmt: skip
    return out or _none("H20-etcd-snapshot-age", snap)
