"""etcd as Prometheus sees it (M12): leader elections.

Every etcd member counts the leader changes it sees (``etcd_server_leader_changes_seen_total``); frequent elections
mean a member cannot hear its leader in time -- a slow disk (fsync), a starved CPU or a lossy network -- and each one
stalls writes to the API server. The thresholds are the chart's own alert: kube-prometheus-stack 88.5.3's etcd rules
(from etcd-mixin) fire ``etcdHighNumberOfLeaderChanges`` at ``increase(...[15m:1m]) >= 4``; etcd's monitoring guide
names the counter ("Leadership change counter",
https://etcd.io/docs/latest/op-guide/monitoring/). One election in a while is normal (an etcd restarted by
``gpustack certs renew`` or ``upgrade``): four in the last hour warns, four in fifteen minutes fails.

No series: Prometheus does not scrape etcd. gpustack turns the chart's ``kubeEtcd`` scrape on only when every etcd
serves its metrics beyond loopback, which kubeadm sets at ``init`` from gpustack's ``listen-metrics-urls`` (with
``firewall.enabled``); a cluster made before that, or without gpustack's firewall, keeps kubeadm's 127.0.0.1:2381
(docs/decisions.md, "etcd metrics scraped"). Pure functions of the snapshot."""

from __future__ import annotations

from gpustack.checks.model import Finding
from gpustack.diagnose.collect_prometheus import QUERIES
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot

#: the chart's etcdHighNumberOfLeaderChanges threshold (elections in 15 minutes); the same count in an hour warns
ELECTIONS = 4
FIX = (
    "find why members lose their leader: on each control plane, etcd's log (sudo crictl logs $(sudo crictl ps -q "
    "--name etcd) 2>&1 | grep -iE 'elected|slow fdatasync|took too long' | tail) and the disk's fsync latency "
    "(etcd_disk_wal_fsync_duration_seconds: its p99 should stay under 10 ms); then gpustack doctor --check H17,H18,H19"
)

#: a skip's way out: where etcd's metrics listener is set, and what turns the scrape on
NOT_SCRAPED = (
    "gpustack scrapes etcd when every etcd mirror pod has --listen-metrics-urls beyond 127.0.0.1 (set at kubeadm init "
    "with firewall.enabled): kubectl -n kube-system get pods -l component=etcd -o yaml | grep listen-metrics-urls; an "
    "existing cluster's etcd keeps kubeadm's loopback default (docs/monitoring.md, \"etcd metrics\")"
)


def _value(snap: Snapshot, name: str) -> float | None:
    rows = snap.prometheus.queries.get(name) or []
    try:
        return float(rows[0]["value"][1]) if rows else None
    except (KeyError, IndexError, TypeError, ValueError):
        return None


@register("M12-etcd-leader-changes", "monitoring", title="etcd does not keep changing leaders",
          reads="Prometheus queries: increase(etcd_server_leader_changes_seen_total) over 15 minutes and 1 hour",
          commands=("doctor",), needs=("prometheus",))  # fmt: skip
def etcd_leader_changes(snap: Snapshot) -> list[Finding]:
    keys = ("etcd_leader_changes_15m", "etcd_leader_changes_1h")
    errors = [snap.prometheus.query_errors[k] for k in keys if k in snap.prometheus.query_errors]
    if errors:
        return [Finding("", "", "skip", "etcd leader changes not queried", evidence="; ".join(errors))]
    recent, hour = (_value(snap, k) for k in keys)
    if recent is None and hour is None:
        return [Finding("", "", "skip", "no etcd metrics in Prometheus (etcd is not scraped)",
                        evidence=f"{QUERIES['etcd_leader_changes_1h']} returned no series",
                        fix=NOT_SCRAPED)]  # fmt: skip
    recent, hour = recent or 0.0, hour or 0.0
    evidence = f"{int(recent)} in the last 15 minutes, {int(hour)} in the last hour (the most any member saw)"
    if recent >= ELECTIONS:
        return [Finding("", "", "fail", f"etcd elected a leader {int(recent)} times in 15 minutes", evidence=evidence,
                        fix=FIX)]  # fmt: skip
    if hour >= ELECTIONS:
        return [Finding("", "", "warn", f"etcd elected a leader {int(hour)} times in the last hour", evidence=evidence,
                        fix=FIX)]  # fmt: skip
    return [Finding("", "", "pass", f"etcd leader changes: {int(hour)} in the last hour", evidence=evidence)]
