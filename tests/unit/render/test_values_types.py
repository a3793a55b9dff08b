"""Type survival of every generated values file through the real helm (issue #12).

The pinned charts cannot be downloaded here, so ``tests/charts/<release>`` holds a test double of each
one: small charts that write every key gpustack sets into the same object kind and field, with the same
rendering pattern (bare ``{{ . }}``, ``- {{ . }}`` list items, ``toYaml``, ``quote``, ``tpl``, a literal
block, an ``if``/Chart.yaml condition) as the template values/README.md names for the pinned version.
Each generated values file is rendered through them with the real helm (``real_bins.helm``, v4.2) and:

- every rendered object validates: core kinds against the Kubernetes 1.36 schemas (kubernetes-validate,
  strict), the CRD kinds against :data:`CRD_SCHEMAS` (the fields gpustack sets, typed as the pinned CRDs
  declare them);
- every ``consumes KEY as RENDERING at PATH`` line of a test chart finds at PATH exactly the value (type
  included) the values file holds, and every ``gates PATH`` line finds PATH present exactly when the value
  is ``True``. A value that changes type on the way through fails here (``-c 15000`` did).

The ``consumes`` lines and the table in values/README.md must agree key for key and rendering for
rendering, every key the values set must be in the table, and the table's type column must match the
rendered values, so the list and the proof cannot drift apart. Runtime: 8-12 s on the shared 2-core machine
(28 helm renders of about 0.2 s: 17 distinct variant values, 3 chart defaults, 8 negative cases).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpustack.config.model import Config
from gpustack.constants import NAMESPACES
from gpustack.paths import resource_file
from gpustack.render.values import FactsSummary, render_values
from tests.realbin import RealBins
from tests.unit.render.test_values import ALERTING, VARIANTS

CHARTS = Path(__file__).resolve().parents[2] / "charts"
README = resource_file("values", "README.md")
K8S_VERSION = "1.36.0"
RELEASES = ("gpu-operator", "kube-prometheus-stack", "dcgm-exporter")

# The variants of test_values.py (default, operator exporter, preinstalled driver, ...) plus: the config-free
# default (gpustack's local volume and its toleration), everything preinstalled, and NodePorts, retention,
# scrape interval, receivers and the grafana.com download all changed.
TYPE_VARIANTS: dict[str, tuple[dict[str, Any], FactsSummary]] = {
    **VARIANTS,
    "no-config": ({}, FactsSummary(gpu_nodes=("gpu1",))),
    "preinstalled": (
        {},
        FactsSummary(driver_preinstalled=True, toolkit_preinstalled=True, nfd_running=True, gpu_nodes=("gpu1",)),
    ),
    # every etcd mirror pod listens for metrics beyond loopback: the chart scrapes etcd
    "etcd-scrape": ({}, FactsSummary(etcd_metrics_exposed=True, gpu_nodes=("gpu1",))),
    "changed": (
        {
            "monitoring": {
                "prometheus_nodeport": 31090,
                "grafana_nodeport": 31300,
                "alertmanager_nodeport": 31903,
                "prometheus_retention": "90d",
                "scrape_interval": "30s",
                "dashboard_gnet_download": True,
                "prometheus_storage": {"storage_class": "fast-ssd", "size": "200Gi"},
            },
            "alerting": ALERTING,
        },
        FactsSummary(host_node_exporter=True, gpu_nodes=("gpu1", "gpu2")),
    ),
}

# --- the CRD kinds: the fields gpustack sets, typed as the pinned CRDs declare them -----------------
# ClusterPolicy: gpu-operator v26.7.0 deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml (spec
# requires daemonsets, dcgm, dcgmExporter, devicePlugin, driver, gfd, nodeStatusExporter, operator,
# toolkit; env items require name). Prometheus/Alertmanager: kube-prometheus-stack 88.5.3
# charts/crds/crds/crd-prometheuses.yaml and crd-alertmanagers.yaml (durations carry the pattern below,
# storage requests are int-or-string quantities, selectors' matchLabels map strings to strings).
DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?([KMGTPE]i?|[numk])?$"}]}
STRING = {"type": "string"}
BOOL = {"type": "boolean"}


def obj(required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
    """A closed object schema: an unknown (or misspelt) field fails."""
    return {"type": "object", "additionalProperties": False, "properties": props, "required": list(required)}


def resource(spec: dict[str, Any]) -> dict[str, Any]:
    return obj(
        ("apiVersion", "kind", "metadata", "spec"),
        apiVersion=STRING,
        kind=STRING,
        metadata={"type": "object"},
        spec=spec,
    )


SELECTOR = obj(matchLabels={"type": "object", "additionalProperties": STRING})
TOLERATION = obj(key=STRING, operator=STRING, effect=STRING, value=STRING, tolerationSeconds={"type": "integer"})
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "ClusterPolicy": resource(
        obj(
            (
                "daemonsets",
                "dcgm",
                "dcgmExporter",
                "devicePlugin",
                "driver",
                "gfd",
                "nodeStatusExporter",
                "operator",
                "toolkit",
            ),
            operator=obj(runtimeClass=STRING),
            cdi=obj(enabled=BOOL),
            driver=obj(enabled=BOOL),
            toolkit=obj(enabled=BOOL),
            daemonsets={"type": "object"},
            dcgm={"type": "object"},
            devicePlugin=obj(enabled=BOOL, config=obj(name=STRING, default=STRING)),
            mig=obj(strategy={"type": "string", "enum": ["none", "single", "mixed"]}),
            migManager=obj(
                enabled=BOOL,
                env={"type": "array", "items": obj(("name",), name=STRING, value=STRING)},
                config=obj(name=STRING, default={"type": "string", "enum": ["all-disabled", ""]}),
            ),
            gfd={"type": "object"},
            nodeStatusExporter={"type": "object"},
            dcgmExporter=obj(
                enabled=BOOL,
                env={"type": "array", "items": obj(("name",), name=STRING, value=STRING)},
                config=obj(name=STRING),
                serviceMonitor=obj(enabled=BOOL, interval=STRING, honorLabels=BOOL),
                hostPID=BOOL,
            ),
        )
    ),
    "Prometheus": resource(
        obj(
            scrapeInterval=DURATION,
            evaluationInterval=DURATION,
            retention=DURATION,
            image=STRING,
            version=STRING,
            serviceMonitorSelector=SELECTOR,
            podMonitorSelector=SELECTOR,
            ruleSelector=SELECTOR,
            probeSelector=SELECTOR,
            scrapeConfigSelector=SELECTOR,
            storage=obj(
                emptyDir=obj(medium=STRING, sizeLimit=QUANTITY),
                volumeClaimTemplate=obj(
                    spec=obj(
                        storageClassName=STRING,
                        accessModes={"type": "array", "items": STRING},
                        resources=obj(requests={"type": "object", "additionalProperties": QUANTITY}),
                    )
                ),
            ),
            tolerations={"type": "array", "items": TOLERATION},
        )
    ),
    "Alertmanager": resource(
        obj(replicas={"type": "integer"}, secrets={"type": "array", "items": STRING}),
    ),
    # kube-prometheus-stack 88.5.3 charts/crds/crds/crd-servicemonitors.yaml (scheme: an enum)
    "ServiceMonitor": resource(
        obj(
            ("endpoints", "selector"),
            jobLabel=STRING,
            selector=SELECTOR,
            namespaceSelector=obj(matchNames={"type": "array", "items": STRING}),
            endpoints={
                "type": "array",
                "items": obj(
                    port=STRING,
                    bearerTokenFile=STRING,
                    scheme={"type": "string", "enum": ["http", "https", "HTTP", "HTTPS"]},
                    tlsConfig={"type": "object"},
                ),
            },
        )
    ),
}

# --- the consumes lines of the test charts and the table of values/README.md -------------------------
_USE = re.compile(r"^#? ?consumes (?P<key>\S+) as (?P<how>\S+)(?: (?P<mode>at|gates) (?P<where>\S+))?$", re.M)
_SECTION = re.compile(r"^## (?P<release>\S+) ")
_ROW = re.compile(r"^\| `(?P<key>[^`]+)` \|(?P<rest>.*)\|$")
TYPES = ("string", "bool", "int", "mapping", "list of strings", "list of mappings")


@dataclass(frozen=True)
class Use:
    """One ``consumes`` line of a test chart."""

    release: str
    key: str
    how: frozenset[str]
    mode: str | None
    where: str | None
    file: str


@dataclass(frozen=True)
class Row:
    """One row of a key table in values/README.md."""

    release: str
    key: str
    template: str
    how: frozenset[str]
    type: str


@cache
def chart_uses() -> tuple[Use, ...]:
    out = []
    for release in RELEASES:
        for path in sorted((CHARTS / release).rglob("*")):
            if not path.is_file():
                continue
            for m in _USE.finditer(path.read_text(encoding="utf-8")):
                how = frozenset(m["how"].split("+"))
                out.append(Use(release, m["key"], how, m["mode"], m["where"], str(path.relative_to(CHARTS))))
    return tuple(out)


@cache
def readme_rows() -> tuple[Row, ...]:
    rows, release = [], None
    for line in README.read_text(encoding="utf-8").splitlines():
        if section := _SECTION.match(line):
            release = section["release"] if section["release"] in RELEASES else None
        elif (row := _ROW.match(line)) and release:
            cells = [c.strip() for c in row["rest"].split(" | ")]
            assert len(cells) == 4, f"README row {row['key']}: want value | template | rendering | type: {line}"
            _value, template, how, typ = cells
            rows.append(Row(release, row["key"], template, frozenset(h.strip() for h in how.split(",")), typ))
    return tuple(rows)


MISSING: Any = object()


def lookup(values: Any, key: str) -> Any:
    """The value at a dotted key path; a key that itself holds a dot (``dashboardproviders.yaml``) works."""
    if key == "":
        return values
    if not isinstance(values, Mapping):
        return MISSING
    for k, v in values.items():
        if key == k:
            return v
        if key.startswith(f"{k}."):
            found = lookup(v, key[len(k) + 1 :])
            if found is not MISSING:
                return found
    return MISSING


def leaf_paths(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for k, v in values.items():
        if isinstance(v, Mapping) and v:
            yield from leaf_paths(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}"


def type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "list of strings"
    if isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
        return "list of mappings"
    return type(value).__name__


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``True == 1`` and ``15000 == 15000.0`` do not count)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def resolve(objects: list[dict[str, Any]], where: str) -> Any:
    """``Kind:name/seg/...`` in rendered objects. Segments: a key, a list index, ``N:`` (items from N on),
    ``name=X`` (the list item named X), ``@yaml`` / ``@b64yaml`` (parse an embedded document), ``@keys``."""
    target, *segments = where.split("/")
    kind, name = target.split(":", 1)
    found = [o for o in objects if o.get("kind") == kind and o.get("metadata", {}).get("name") == name]
    if not found:
        return MISSING
    node: Any = found[0]
    for seg in segments:
        if seg == "@yaml":
            node = yaml.safe_load(node)
        elif seg == "@b64yaml":
            node = yaml.safe_load(base64.b64decode(node))
        elif seg == "@keys":
            node = sorted(node)
        elif isinstance(node, list) and seg.endswith(":") and seg[:-1].isdigit():
            node = node[int(seg[:-1]) :]
        elif isinstance(node, list) and seg.isdigit():
            node = node[int(seg)] if int(seg) < len(node) else MISSING
        elif isinstance(node, list) and "=" in seg:
            field, _, want = seg.partition("=")
            node = next((item for item in node if isinstance(item, Mapping) and item.get(field) == want), MISSING)
        elif isinstance(node, Mapping):
            node = node.get(seg, MISSING)
        else:
            return MISSING
        if node is MISSING:
            return MISSING
    return node


# --- rendering through the real helm and checking -------------------------------------------------------


def render_variant(variant: str) -> dict[str, dict[str, Any]]:
    raw, facts = TYPE_VARIANTS[variant]
    return render_values(Config.model_validate(raw), facts)


_RENDERS: dict[tuple[str, str], list[dict[str, Any]]] = {}


def helm_template(helm: Path, release: str, values: Mapping[str, Any] | None, tmp: Path) -> list[dict[str, Any]]:
    """``helm template`` of the release's test chart with these values (None: the chart's defaults); the
    objects it renders. The values go in as ``up`` hands them to helm (pyhelm3: JSON on stdin, ``--values -``).
    Renders are kept per values text, so the survival and coverage tests share them."""
    text = json.dumps(values if values is not None else {}, sort_keys=True)
    if (release, text) in _RENDERS:
        return _RENDERS[release, text]
    env = {**os.environ, **{f"HELM_{d}_HOME": str(tmp / f"helm-{d.lower()}") for d in ("CACHE", "CONFIG", "DATA")}}
    args = [str(helm), "template", release, str(CHARTS / release), "--namespace", NAMESPACES[release]]
    proc = subprocess.run(
        [*args, "--include-crds", "--values", "-"], input=text, capture_output=True, text=True, env=env, timeout=60
    )
    if proc.returncode != 0:
        raise HelmFailed(proc.stderr.strip())
    _RENDERS[release, text] = [o for o in yaml.safe_load_all(proc.stdout) if o]
    return _RENDERS[release, text]


class HelmFailed(Exception):
    """helm could not render the chart with these values (e.g. ``tpl`` given a number)."""


def schema_problems(o: dict[str, Any]) -> list[str]:
    label = f"{o.get('kind')}/{o.get('metadata', {}).get('name')}"
    if o.get("kind") in CRD_SCHEMAS:
        validator = jsonschema.Draft202012Validator(CRD_SCHEMAS[o["kind"]])
        errors = list(validator.iter_errors(o))
    elif "." in o.get("apiVersion", "").split("/")[0] and o["apiVersion"].split("/")[0] != "apiextensions.k8s.io":
        return [f"{label}: custom resource without a schema here ({o['apiVersion']})"]
    else:
        try:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
            errors = []
        except jsonschema.ValidationError as exc:
            errors = [exc]
    return [f"{label}: {'.'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in errors]


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def problems(helm: Path, release: str, values: Mapping[str, Any], tmp: Path) -> list[str]:
    """Everything wrong with these values on their way through the release's test chart (empty: fine)."""
    try:
        objects = helm_template(helm, release, values, tmp)
    except HelmFailed as exc:
        return [f"helm template {release}: {exc}"]
    out = [p for o in objects for p in schema_problems(o)]
    for use in chart_uses():
        value = lookup(values, use.key) if use.release == release else MISSING
        if value is MISSING:
            continue
        if use.where is None:
            # written inside a larger string: a scalar must appear there as written (a number helm
            # printed as 1.2239e+04 would not), a joined list as its items joined with commas
            if isinstance(value, (int, str)) and not any(str(value) in t for t in _strings(objects)):
                out.append(f"{use.key}={value!r}: not found in any rendered string ({use.file})")
            if isinstance(value, list) and "join" in use.how and value:
                joined = ",".join(str(v) for v in value)
                if not any(joined in t for t in _strings(objects)):
                    out.append(f"{use.key}={value!r}: {joined!r} not found in any rendered string ({use.file})")
            continue
        got = resolve(objects, use.where)
        if use.mode == "gates":
            # a gate opens on True, or on a non-empty mapping/list; a string (even "false") is a broken bool
            want = bool(value) if isinstance(value, (Mapping, list)) else value is True
            if (got is not MISSING) != want:
                state = "present" if got is not MISSING else "absent"
                out.append(f"{use.key}={value!r}: {use.where} is {state} ({use.file})")
        elif got is MISSING:
            if value not in ([], {}, "", None):
                out.append(f"{use.key}={value!r}: nothing rendered at {use.where} ({use.file})")
        elif not same(got, value):
            out.append(f"{use.key}={value!r}: {use.where} is {got!r} ({use.file})")
    return out


# --- the proof -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(TYPE_VARIANTS))
def test_values_survive_the_charts(variant: str, real_bins: RealBins, tmp_path: Path) -> None:
    rendered = render_variant(variant)
    assert rendered
    for release, values in rendered.items():
        assert problems(real_bins.helm, release, values, tmp_path) == [], release


BAD: dict[str, tuple[str, str, Any, str]] = {
    # issue #12: the old two-token form; the chart writes 15000 bare, YAML reads an int
    "dash-c-15000": (
        "dcgm-exporter",
        "arguments",
        ["-f", "/etc/dcgm-exporter/gpustack-counters.csv", "-c", "15000"],
        "DaemonSet/dcgm-exporter: spec.template.spec.containers.0.args.3: 15000 is not of type 'string'",
    ),
    "interval-as-int": (
        "gpu-operator",
        "dcgmExporter.env",
        [{"name": "DCGM_EXPORTER_INTERVAL", "value": 15000}],
        "ClusterPolicy/cluster-policy: spec.dcgmExporter.env.0.value: 15000 is not of type 'string'",
    ),
    "nfd-string-false": (
        "gpu-operator",
        "nfd.enabled",
        "false",
        "nfd.enabled='false': DaemonSet:node-feature-discovery-worker is present",
    ),
    "selector-string-false": (
        "kube-prometheus-stack",
        "prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues",
        "false",
        "/spec/serviceMonitorSelector/matchLabels is present",
    ),
    "nodeport-string": (
        "kube-prometheus-stack",
        "prometheus.service.nodePort",
        "30090",
        "spec/ports/0/nodePort is 30090",
    ),
    # helm reads numbers in values as float64 and prints 1000000 and up in exponent form (1.2345678e+07)
    "gnet-id-exponent": (
        "kube-prometheus-stack",
        "grafana.dashboards.grafana-com.nvidia-dcgm-exporter.gnetId",
        12345678,
        "gnetId=12345678: not found in any rendered string",
    ),
    # kube-state-metrics joins the allowlist's items with commas: an item that is not a string is printed
    # in Go's list syntax and the argument no longer names the label
    "allowlist-nested-list": (
        "kube-prometheus-stack",
        "kube-state-metrics.metricLabelsAllowlist",
        [["namespaces=[team]"]],
        "not found in any rendered string",
    ),
    # the CRD's enum: a strategy the operator does not know would be refused by the API server
    "mig-strategy-unknown": (
        "gpu-operator",
        "mig.strategy",
        "Mixed",
        "ClusterPolicy/cluster-policy: spec.mig.strategy: 'Mixed' is not one of ['none', 'single', 'mixed']",
    ),
    "label-value-int": (
        "kube-prometheus-stack",
        "grafana.sidecar.dashboards.labelValue",
        1,
        "helm template kube-prometheus-stack: ",
    ),
}


def _set(values: dict[str, Any], key: str, value: Any) -> None:
    head, _, tail = key.rpartition(".")
    parent = lookup(values, head)
    assert isinstance(parent, dict), key
    parent[tail] = value


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_value_that_changes_type_fails(case: str, real_bins: RealBins, tmp_path: Path) -> None:
    release, key, bad, expected = BAD[case]
    # the unchanged values pass (test_values_survive_the_charts): only the one value differs
    base = "operator-exporter" if key.startswith("dcgmExporter") else "changed" if ".dashboards." in key else "default"
    base = "gpu-sharing" if key.startswith(("mig", "devicePlugin")) else base
    base = "nodeports" if key.endswith("service.nodePort") else base  # the default exposes nothing
    values = copy.deepcopy(render_variant(base)[release])
    _set(values, key, bad)
    found = problems(real_bins.helm, release, values, tmp_path)
    assert any(expected in p for p in found), found


def test_readme_table_and_test_charts_agree() -> None:
    rows = {(r.release, r.key): r.how for r in readme_rows()}
    uses: dict[tuple[str, str], frozenset[str]] = {}
    for use in chart_uses():
        uses[use.release, use.key] = uses.get((use.release, use.key), frozenset()) | use.how
    assert len(rows) == len(readme_rows()), "a key is listed twice in values/README.md"
    assert sorted(set(rows) - set(uses)) == [], "in values/README.md but no test chart consumes it"
    assert sorted(set(uses) - set(rows)) == [], "consumed by a test chart but not in values/README.md"
    assert {k: v for k, v in rows.items() if uses[k] != v} == {}, "rendering differs (README vs test chart)"
    for use in chart_uses():
        assert use.where or use.how & {"interpolated", "condition", "if"}, f"{use.key}: nothing checked ({use.file})"


def test_every_key_gpustack_sets_is_in_the_table() -> None:
    keys = {(r.release, r.key) for r in readme_rows()}
    for variant in TYPE_VARIANTS:
        for release, values in render_variant(variant).items():
            for path in leaf_paths(values):
                covering = [k for rel, k in keys if rel == release and (path == k or path.startswith(f"{k}."))]
                assert covering, f"{variant}: {release}:{path} is not in values/README.md"


def test_table_keys_are_set_and_typed_as_listed() -> None:
    seen: set[tuple[str, str]] = set()
    for variant in TYPE_VARIANTS:
        for release, values in render_variant(variant).items():
            for row in (r for r in readme_rows() if r.release == release):
                value = lookup(values, row.key)
                if value is MISSING:
                    continue
                seen.add((release, row.key))
                assert row.type in TYPES, row
                assert type_name(value) == row.type, (
                    f"{variant}: {release}:{row.key} is {value!r}, README says {row.type}"
                )
    assert sorted({(r.release, r.key) for r in readme_rows()} - seen) == [], "listed but never set"


def test_every_check_can_fail(real_bins: RealBins, tmp_path: Path) -> None:
    """Each ``at``/``gates`` path is found in some render (a variant, or the test chart's defaults, which
    open the gates gpustack closes): a path that never resolves would make its check vacuous."""
    renders = [helm_template(real_bins.helm, release, None, tmp_path) for release in RELEASES]
    renders += [
        helm_template(real_bins.helm, release, values, tmp_path)
        for variant in TYPE_VARIANTS
        for release, values in render_variant(variant).items()
    ]
    never = {
        f"{u.file}: {u.where}" for u in chart_uses() if u.where and all(resolve(r, u.where) is MISSING for r in renders)
    }
    assert sorted(never) == []


def test_helpers_catch_what_they_should() -> None:
    assert not same(["15000"], [15000]) and not same({"a": True}, {"a": 1}) and same({"a": ["x"]}, {"a": ["x"]})
    assert lookup({"d": {"a.yaml": {"b": 1}}}, "d.a.yaml.b") == 1 and lookup({"a": 1}, "a.b") is MISSING
    objs = [{"kind": "X", "metadata": {"name": "n"}, "l": [{"name": "a", "v": 1}, {"name": "b"}]}]
    assert resolve(objs, "X:n/l/name=a/v") == 1 and resolve(objs, "X:n/l/1:") == [{"name": "b"}]
    assert resolve(objs, "X:n/l/name=c") is MISSING and resolve(objs, "Y:n") is MISSING
    bad = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {}, "spec": {"cdi": {"enabld": True}}}
    found = schema_problems(bad)
    assert any("Additional properties" in p for p in found) and any("required" in p for p in found)
