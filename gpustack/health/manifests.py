"""The scheduled evaluation (``remediation.enabled``): a CronJob running ``gpustack health --apply
--in-cluster`` with its own ServiceAccount and least-privilege RBAC. Pure: ``up``'s cluster layer applies
these objects (and deletes the CronJob again when remediation is disabled); ``render --out`` writes them."""

from __future__ import annotations

from typing import Any, cast

import yaml

from gpustack.config.model import Config
from gpustack.config.monitoring import Remediation
from gpustack.constants import (
    BREAKER_CONFIGMAP,
    HEALTH_CRONJOB,
    HEALTH_SERVICE_ACCOUNT,
    MONITORING_NAMESPACE,
    PROMETHEUS_PORT,
    PROMETHEUS_SERVICE,
    SYSTEM_NAMESPACE,
)
from gpustack.render.templating import render_template

Obj = dict[str, Any]
FILE = "gpustack-health.yaml"


def evaluation_args(rem: Remediation) -> list[str]:
    """The CronJob's command line: the config's limits and windows as flags (no gpustack.yaml in the pod)."""
    return [
        "gpustack", "health", "--apply", "--in-cluster",
        "--max-nodes", str(rem.max_nodes_per_window),
        "--max-percent", f"{rem.max_percent_per_window:g}",
        "--window", rem.window,
        "--xid-lookback", rem.xid_lookback,
        "--rows-growth-window", rem.rows_growth_window,
        "--allocatable-hold", rem.allocatable_hold,
    ]  # fmt: skip


def health_manifests(cfg: Config) -> list[Obj]:
    """Namespace, ServiceAccount, RBAC and the CronJob; empty when remediation is disabled."""
    rem = cfg.remediation
    if not rem.enabled or not rem.image:
        return []
    text = render_template(
        "manifests/gpustack-health.yaml.j2",
        namespace=SYSTEM_NAMESPACE,
        account=HEALTH_SERVICE_ACCOUNT,
        cronjob=HEALTH_CRONJOB,
        ledger=BREAKER_CONFIGMAP,
        prometheus_namespace=MONITORING_NAMESPACE,
        prometheus_proxy_name=f"{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}",
        schedule=rem.schedule,
        image=rem.image,
        args=evaluation_args(rem),
    )
    return [cast(Obj, d) for d in yaml.safe_load_all(text) if d]


def rbac_rules(objects: list[Obj]) -> tuple[list[Obj], dict[str, list[Obj]]]:
    """(ClusterRole rules, Role rules by namespace) of the rendered objects (tests enforce them)."""
    cluster = [r for o in objects if o["kind"] == "ClusterRole" for r in o["rules"]]
    roles: dict[str, list[Obj]] = {}
    for o in objects:
        if o["kind"] == "Role":
            roles.setdefault(o["metadata"]["namespace"], []).extend(o["rules"])
    return cluster, roles


def remove_when_disabled(kube: Any) -> bool:
    """With remediation disabled, delete gpustack's CronJob if an earlier ``up`` created it (its RBAC stays
    harmless without it). True when something was deleted. A converged cluster costs one GET."""
    if kube.get("batch/v1", "CronJob", HEALTH_CRONJOB, SYSTEM_NAMESPACE) is None:
        return False
    return bool(kube.delete("batch/v1", "CronJob", HEALTH_CRONJOB, SYSTEM_NAMESPACE))
