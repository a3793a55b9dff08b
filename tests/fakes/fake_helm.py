"""TEST DOUBLE for the ``helm`` executable (used through ``tests/fakes/helm``). Not Helm.

It answers the subcommands pyhelm3 0.5 runs (``version``, ``status``, ``get values``,
``get all --template``, ``history``, ``list``, ``show chart``, ``upgrade --install``, ``rollback``,
``uninstall``) with the JSON/YAML shapes pyhelm3 parses, keeping release state in a directory.

Environment:
- ``FAKE_HELM_STATE``: directory for release state (required);
- ``FAKE_HELM_LOG``: JSON-lines file; one record per invocation: argv, stdin (values), start/end times;
- ``FAKE_HELM_FAIL``: comma-separated release names whose install/upgrade fails (helm-style stderr);
- ``FAKE_HELM_FAIL_MESSAGE``: override of that stderr;
- ``FAKE_HELM_DELAY``: seconds a mutating call takes (to observe concurrency);
- ``FAKE_HELM_RENDEZVOUS``: ``DIR:NAME,NAME…``: an install/upgrade of each named release marks itself in DIR
  and waits (up to 30 s) until every named one has; the log record says whether they all met (``met``), which
  proves they ran at the same time whatever the machine's load;
- ``FAKE_HELM_API``: base URL of a (fake) Kubernetes API: installing kube-prometheus-stack creates
  the monitoring.coreos.com CRDs there, as the real chart does; installing or upgrading gpu-operator
  applies the ClusterPolicy ``cluster-policy`` from the values, as the chart's template does (every
  values key but the chart-level ones; ``FAKE_HELM_CLUSTERPOLICY_DROP``: comma-separated keys the
  template "forgets", to test drift detection);
- ``pull CHART --repo R --version V --destination D --untar`` unpacks a chart skeleton with the CRD
  files the real chart ships (top-level ``crds/`` and its subcharts' ``charts/*/crds/``), each CRD
  annotated ``gpustack.test/chart-version: V``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: the Helm release this double imitates (tests/contract/test_pins.py: its major.minor is the pinned Helm's)
VERSION = "v4.3.0"
MUTATING = {"upgrade", "install", "rollback", "uninstall"}
GLOBAL_FLAGS_WITH_VALUE = {"--kubeconfig", "--kube-context", "--kube-apiserver", "--kube-token"}
DEFAULT_FAIL = (
    "Error: {verb} FAILED: release {name} failed, and has been {undone} due to rollback-on-failure being set: "
    "1 error occurred:\n"
    '\t* DaemonSet.apps "nvidia-driver-daemonset" is invalid: spec.template.spec.runtimeClassName: '
    'Invalid value: "nvidia": RuntimeClass "nvidia" not found\n'
)
CRDS = {
    "ServiceMonitor": "servicemonitors",
    "PodMonitor": "podmonitors",
    "PrometheusRule": "prometheusrules",
    "Prometheus": "prometheuses",
    "Alertmanager": "alertmanagers",
    "AlertmanagerConfig": "alertmanagerconfigs",
}


class Fail(Exception):
    def __init__(self, stderr: str, code: int = 1) -> None:
        super().__init__(stderr)
        self.stderr = stderr
        self.code = code


def _now() -> str:
    """RFC 3339 in UTC, as Go marshals a time.Time (``2026-01-01T00:00:00.123456Z``)."""
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _go_time(iso: str) -> str:
    """Go's time.Time.String() of an RFC 3339 time (``helm list``'s ``updated``): ``2026-01-01 00:00:00 +0000 UTC``."""
    when = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(timezone.utc)
    frac = f".{when.microsecond:06d}".rstrip("0") if when.microsecond else ""
    return when.strftime("%Y-%m-%d %H:%M:%S") + frac + " +0000 UTC"


def parse(argv: list[str]) -> tuple[list[str], dict[str, str | bool]]:
    """Positional args and ``--flag value`` / ``--flag`` options (helm's own flag set, as pyhelm3 uses it)."""
    with_value = {
        "--output",
        "--namespace",
        "--revision",
        "--max",
        "--timeout",
        "--values",
        "--history-max",
        "--repo",
        "--version",
        "--template",
        "--description",
        "--destination",
        "--untardir",
        *GLOBAL_FLAGS_WITH_VALUE,
    }
    pos: list[str] = []
    opts: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                opts[k] = v
            elif a in with_value:
                opts[a] = argv[i + 1]
                i += 1
            else:
                opts[a] = True
        else:
            pos.append(a)
        i += 1
    return pos, opts


class State:
    """Release history per ``namespace/name`` in JSON files, one lock per file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, ns: str, name: str) -> Path:
        return self.root / ns / f"{name}.json"

    def load(self, ns: str, name: str) -> list[dict[str, Any]]:
        p = self.path(ns, name)
        return json.loads(p.read_text()) if p.exists() else []

    def save(self, ns: str, name: str, revs: list[dict[str, Any]]) -> None:
        p = self.path(ns, name)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(revs, indent=1))
        tmp.replace(p)

    def delete(self, ns: str, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(ns, name).unlink()

    def all(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        return [(p.parent.name, p.stem, json.loads(p.read_text())) for p in sorted(self.root.glob("*/*.json"))]


def seed(
    state_dir: Path,
    name: str,
    namespace: str,
    chart: str,
    version: str,
    values: dict[str, Any],
    statuses: list[str],
) -> None:
    """Write a release history directly (test set-up: e.g. ``["deployed", "pending-upgrade"]``)."""
    revs = [
        {
            "revision": i + 1,
            "status": st,
            "chart": {"name": chart, "version": version},
            "values": values,
            "updated": _now(),
            "description": f"seeded {st}",
        }
        for i, st in enumerate(statuses)
    ]
    State(state_dir).save(namespace, name, revs)


def release_json(name: str, ns: str, rev: dict[str, Any], *, chart: bool = True) -> dict[str, Any]:
    """The shape of ``helm upgrade -o json`` (Helm 4 pkg/release/v1 Release: empty fields omitted); ``helm
    status -o json`` strips the chart (``chart=False``, Helm 4 pkg/cmd/status.go)."""
    out: dict[str, Any] = {
        "name": name,
        "info": {
            "first_deployed": rev["updated"],
            "last_deployed": rev["updated"],
            "description": rev["description"],
            "status": rev["status"],
        },
    }
    if chart:
        out["chart"] = {
            "metadata": {"name": rev["chart"]["name"], "version": rev["chart"]["version"], "apiVersion": "v2"},
            "lock": None,
            "templates": None,
            "values": None,
            "schema": None,
            "files": None,
        }
    if rev["values"]:
        out["config"] = rev["values"]
    out.update({"manifest": "---\n", "version": rev["revision"], "namespace": ns})
    return out


def _find(revs: list[dict[str, Any]], opts: dict[str, str | bool], name: str) -> dict[str, Any]:
    if not revs:
        raise Fail("Error: release: not found\n")
    if "--revision" in opts:
        for r in revs:
            if r["revision"] == int(str(opts["--revision"])):
                return r
        raise Fail(f"Error: release: not found\n(revision {opts['--revision']} of {name})\n")
    return revs[-1]


def _create_crds(api: str) -> None:
    for kind, plural in CRDS.items():
        body = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {
                "group": "monitoring.coreos.com",
                "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1alpha1" if kind == "AlertmanagerConfig" else "v1",
                        "served": True,
                        "storage": True,
                    }
                ],
            },
        }
        req = urllib.request.Request(
            f"{api}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with contextlib.suppress(urllib.error.HTTPError):
            urllib.request.urlopen(req, timeout=5).read()


#: the CRD files of each chart, as the real charts lay them out: (path in the chart, group, kind, plural, scope)
CHART_CRDS: dict[str, list[tuple[str, str, str, str, str]]] = {
    "gpu-operator": [
        ("crds/nvidia.com_clusterpolicies.yaml", "nvidia.com", "ClusterPolicy", "clusterpolicies", "Cluster"),
        ("crds/nvidia.com_nvidiadrivers.yaml", "nvidia.com", "NVIDIADriver", "nvidiadrivers", "Cluster"),
        (
            "charts/node-feature-discovery/crds/nfd-api-crds.yaml",
            "nfd.k8s-sigs.io",
            "NodeFeatureRule",
            "nodefeaturerules",
            "Cluster",
        ),
    ],
    "kube-prometheus-stack": [
        (f"charts/crds/crds/crd-{plural}.yaml", "monitoring.coreos.com", kind, plural, "Namespaced")
        for kind, plural in CRDS.items()
    ],
    "dcgm-exporter": [],
}
#: gpu-operator values that configure the chart, not the ClusterPolicy
CHART_ONLY_KEYS = {"nfd", "node-feature-discovery", "nameOverride", "fullnameOverride"}


def cmd_pull(pos: list[str], opts: dict[str, str | bool]) -> str:
    chart = pos[1].rsplit("/", 1)[-1]
    version = str(opts.get("--version", "0.0.0"))
    dest = Path(str(opts.get("--destination") or opts.get("--untardir") or ".")) / chart
    if chart not in CHART_CRDS:
        raise Fail(f'Error: chart "{chart}" not found in {opts.get("--repo", "")} repository\n')
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "Chart.yaml").write_text(f"apiVersion: v2\nname: {chart}\nversion: {version}\n")
    for rel, group, kind, plural, scope in CHART_CRDS[chart]:
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        sub = path.parent.parent / "Chart.yaml"
        if not sub.exists():
            sub.write_text(f"apiVersion: v2\nname: {path.parent.parent.name}\nversion: {version}\n")
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}", "annotations": {"gpustack.test/chart-version": version}},
            "spec": {
                "group": group,
                "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                "scope": scope,
                "versions": [
                    {"name": "v1alpha1" if kind == "AlertmanagerConfig" else "v1", "served": True, "storage": True}
                ],
            },
        }
        # YAML is a superset of JSON: one document per file, with a comment line as real files have
        path.write_text("---\n# fake CRD (test double)\n" + json.dumps(crd, indent=2) + "\n")
    return ""


def _apply_clusterpolicy(api: str, values: dict[str, Any]) -> None:
    drop = {k for k in os.environ.get("FAKE_HELM_CLUSTERPOLICY_DROP", "").split(",") if k}
    spec = {k: v for k, v in values.items() if k not in CHART_ONLY_KEYS | drop}
    body = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": spec,
    }
    req = urllib.request.Request(
        f"{api}/apis/nvidia.com/v1/clusterpolicies/cluster-policy?fieldManager=helm&force=true",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
        method="PATCH",
    )
    with contextlib.suppress(urllib.error.HTTPError, urllib.error.URLError):
        urllib.request.urlopen(req, timeout=5).read()


MET: list[bool] = []


def _rendezvous(name: str) -> None:
    where, _, names = os.environ.get("FAKE_HELM_RENDEZVOUS", "").rpartition(":")
    party = {n for n in names.split(",") if n}
    if not where or name not in party:
        return
    Path(where).mkdir(parents=True, exist_ok=True)
    (Path(where) / name).touch()
    deadline = time.monotonic() + 30
    while not (met := all((Path(where) / n).exists() for n in party)) and time.monotonic() < deadline:
        time.sleep(0.05)
    MET.append(met)


def cmd_upgrade(state: State, pos: list[str], opts: dict[str, str | bool], stdin: bytes) -> str:
    name, chart = pos[1], pos[2]
    ns = str(opts.get("--namespace", "default"))
    values = json.loads(stdin or b"{}") or {}
    revs = state.load(ns, name)
    if revs and revs[-1]["status"].startswith("pending-"):
        raise Fail("Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress\n")
    delay = float(os.environ.get("FAKE_HELM_DELAY", "0") or 0)
    if delay:
        time.sleep(delay)
    _rendezvous(name)
    failing = {f for f in os.environ.get("FAKE_HELM_FAIL", "").split(",") if f}
    if name in failing:
        verb, undone = ("UPGRADE", "rolled back") if revs else ("INSTALLATION", "uninstalled")
        msg = os.environ.get("FAKE_HELM_FAIL_MESSAGE") or DEFAULT_FAIL.format(verb=verb, name=name, undone=undone)
        # Helm 4 spells --atomic --rollback-on-failure (pyhelm3 >= 0.5 passes the new name)
        if revs and (opts.get("--rollback-on-failure") or opts.get("--atomic")):
            revs.append({**revs[-1], "revision": revs[-1]["revision"] + 1, "status": "failed", "updated": _now()})
            state.save(ns, name, revs)
        raise Fail(msg)
    for r in revs:
        if r["status"] == "deployed":
            r["status"] = "superseded"
    rev = {
        "revision": (revs[-1]["revision"] + 1) if revs else 1,
        "status": "deployed",
        "chart": {"name": chart.rsplit("/", 1)[-1], "version": str(opts.get("--version", "0.0.0"))},
        "values": values,
        "updated": _now(),
        "description": "Upgrade complete" if revs else "Install complete",
    }
    revs.append(rev)
    state.save(ns, name, revs)
    if chart.endswith("kube-prometheus-stack") and os.environ.get("FAKE_HELM_API"):
        _create_crds(os.environ["FAKE_HELM_API"])
    if chart.endswith("gpu-operator") and os.environ.get("FAKE_HELM_API"):
        _apply_clusterpolicy(os.environ["FAKE_HELM_API"], values)
    return json.dumps(release_json(name, ns, rev))


def cmd_rollback(state: State, pos: list[str], opts: dict[str, str | bool]) -> str:
    name = pos[1]
    ns = str(opts.get("--namespace", "default"))
    revs = state.load(ns, name)
    if not revs:
        raise Fail("Error: release: not found\n")
    target_no = int(pos[2]) if len(pos) > 2 else None
    candidates = [r for r in revs[:-1] if target_no is None or r["revision"] == target_no]
    if not candidates:
        raise Fail(f"Error: release has no {target_no or 'previous'} version\n")
    target = candidates[-1]
    for r in revs:
        if r["status"] in ("deployed", "pending-upgrade", "pending-rollback"):
            r["status"] = "superseded" if r["status"] == "deployed" else "failed"
    revs.append(
        {
            **target,
            "revision": revs[-1]["revision"] + 1,
            "status": "deployed",
            "updated": _now(),
            "description": f"Rollback to {target['revision']}",
        }
    )
    state.save(ns, name, revs)
    return "Rollback was a success! Happy Helming!\n"


def run(argv: list[str], stdin: bytes) -> str:
    state = State(Path(os.environ["FAKE_HELM_STATE"]))
    pos, opts = parse(argv)
    if not pos:
        raise Fail("Error: no command\n")
    cmd = pos[0]
    if cmd == "version":
        return VERSION
    if cmd == "status":
        ns = str(opts.get("--namespace", "default"))
        return json.dumps(release_json(pos[1], ns, _find(state.load(ns, pos[1]), opts, pos[1]), chart=False))
    if cmd == "get" and pos[1] == "values":
        ns = str(opts.get("--namespace", "default"))
        rev = _find(state.load(ns, pos[2]), opts, pos[2])
        return json.dumps(rev["values"] or None)
    if cmd == "get" and pos[1] == "all":
        ns = str(opts.get("--namespace", "default"))
        rev = _find(state.load(ns, pos[2]), opts, pos[2])
        return f'apiVersion: v2\nname: "{rev["chart"]["name"]}"\nversion: "{rev["chart"]["version"]}"\n'
    if cmd == "history":
        ns = str(opts.get("--namespace", "default"))
        revs = state.load(ns, pos[1])
        if not revs:
            raise Fail("Error: release: not found\n")
        return json.dumps(
            [
                {
                    "revision": r["revision"],
                    "updated": r["updated"],
                    "status": r["status"],
                    "chart": f"{r['chart']['name']}-{r['chart']['version']}",
                    "app_version": "",
                    "description": r["description"],
                }
                for r in revs
            ]
        )
    if cmd == "list":
        ns = opts.get("--namespace")
        rows = [
            {"name": n, "namespace": rns, "revision": str(revs[-1]["revision"]), "updated": _go_time(revs[-1]["updated"]),
             "status": revs[-1]["status"], "chart": f"{revs[-1]['chart']['name']}-{revs[-1]['chart']['version']}",
             "app_version": ""}
            for rns, n, revs in state.all()
            if revs and (opts.get("--all-namespaces") or ns in (None, rns))
        ]  # fmt: skip
        return json.dumps(rows)
    if cmd == "show" and pos[1] == "chart":
        return f'apiVersion: v2\nname: {pos[2].rsplit("/", 1)[-1]}\nversion: "{opts.get("--version", "0.0.0")}"\n'
    if cmd in ("upgrade", "install"):
        return cmd_upgrade(state, pos, opts, stdin)
    if cmd == "pull":
        return cmd_pull(pos, opts)
    if cmd == "rollback":
        return cmd_rollback(state, pos, opts)
    if cmd == "uninstall":
        ns = str(opts.get("--namespace", "default"))
        if not state.load(ns, pos[1]):
            raise Fail(f"Error: uninstall: Release not loaded: {pos[1]}: release: not found\n")
        state.delete(ns, pos[1])
        return f'release "{pos[1]}" uninstalled\n'
    raise Fail(f'Error: unknown command "{cmd}" for "helm" (fake)\n')


def _log(record: dict[str, Any]) -> None:
    path = os.environ.get("FAKE_HELM_LOG")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.write(json.dumps(record) + "\n")
        fcntl.flock(fh, fcntl.LOCK_UN)


def main() -> int:
    argv = sys.argv[1:]
    stdin = b""
    if "-" in argv and not sys.stdin.isatty():
        stdin = sys.stdin.buffer.read()
    start = time.time()
    code, out, err = 0, "", ""
    try:
        out = run(argv, stdin)
    except Fail as exc:
        code, err = exc.code, exc.stderr
    pos, _ = parse(argv)
    _log(
        {
            "argv": argv,
            "values": json.loads(stdin) if stdin else None,
            "mutating": bool(pos) and pos[0] in MUTATING,
            "start": start,
            "end": time.time(),
            "rc": code,
            "met": MET[0] if MET else None,
        }
    )
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main())
