"""Contract: the fake clusters (tests/fakes/scenarios.py: healthy clusters and every failure mutation;
tests/unit/nodes_cluster.py: the node add/remove cluster) are
Kubernetes objects a real 1.36 API server would hold. Every built-in object is validated against the Kubernetes
v1.36 OpenAPI schemas (the kubernetes-validate package ships them, converted from kubernetes/kubernetes
api/openapi-spec; strict: no unknown fields, required fields present). Custom resources (ServiceMonitor,
PrometheusRule, Prometheus, ClusterPolicy) have no schema there: their fields are checked against the pinned charts'
CRDs by tests/unit/render/test_values_types.py."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import jsonschema
import pytest
from kubernetes_validate import utils as kv
from referencing import Registry, Resource

from tests.fakes import kube_semantics
from tests.fakes import scenarios as sc
from tests.unit import nodes_cluster

SCHEMAS = f"kubernetes-json-schema/v{kube_semantics.IMITATES}.0-local-strict"


@cache
def _validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator | None:
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = kv.schema_contents(f"{SCHEMAS}/{kind.lower()}-{group}.json", kube_semantics.IMITATES + ".0")
    except FileNotFoundError:
        return None
    defs = kv.schema_contents(f"{SCHEMAS}/_definitions.json", kube_semantics.IMITATES + ".0")
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())  # type: ignore[var-annotated]
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _errors(objs: list[dict[str, Any]]) -> list[str]:
    out = []
    for o in objs:
        validator = _validator(o["apiVersion"], o["kind"])
        if validator is None:
            assert o["kind"] in ("ServiceMonitor", "PrometheusRule", "Prometheus", "ClusterPolicy", "PodMonitor"), o[
                "kind"
            ]
            continue
        out += [f"{o['kind']} {o['metadata'].get('name')}: {'.'.join(map(str, e.absolute_path))}: {e.message}"
                for e in validator.iter_errors(o)]  # fmt: skip
    return out


@pytest.mark.parametrize("nodes", [1, 3])
def test_healthy_clusters_are_valid_objects(nodes: int) -> None:
    assert _errors(sc.healthy(nodes).objects) == []


def test_every_failure_mutation_leaves_valid_objects() -> None:
    changed: dict[str, dict[str, Any]] = {}
    for nodes, mutate in sc.FAILURES.values():
        base = {json.dumps(o, sort_keys=True) for o in sc.healthy(nodes).objects}
        scenario = sc.healthy(nodes)
        mutate(scenario)
        changed.update({k: o for o in scenario.objects if (k := json.dumps(o, sort_keys=True)) not in base})
    assert changed and _errors(list(changed.values())) == []


@pytest.mark.parametrize("allowed", [0, 1])
def test_the_node_lifecycle_cluster_is_valid_objects(allowed: int) -> None:
    assert _errors(nodes_cluster.cluster(allowed=allowed)) == []
