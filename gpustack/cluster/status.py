"""``gpustack status``: what the cluster runs and what gpustack last did to it. Read-only.

    this machine: the last run of a host-changing command (``<state>/runs/*/run.json``) and an
      upgrade's record (``<state>/clusters/<name>/upgrade.json``) -- always shown
    the cluster (through gpustack.runners.kube): each node's kubelet version against the API
      server's, Ready and schedulable, against the config's node list; each Helm release's chart
      version (from Helm's own release records) against gpustack's pins; what the nodes run (kubelet,
      containerd, OS, the NVIDIA driver) and the charts, against the end of their upstream support
      (gpustack/config/lifecycle.py: past it, or within 90 days, with the way out gpustack offers)

When the API server does not answer, or the kubeconfig's server is not a Kubernetes API server, the local part
is still shown and the exit code is 3, as for ``verify``. Everything here but the reads is a pure function of
what was read.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpustack.cluster import skew
from gpustack.cluster.status_certs import gather_certificates, print_certificates
from gpustack.cluster.upgrade_record import progress_path, read_progress
from gpustack.config.model import Config
from gpustack.console import Console, literal
from gpustack.constants import CONTROL_PLANE_LABEL, NAMESPACES, RELEASE_ORDER
from gpustack.engine.lock import holder, lock_path
from gpustack.errors import ClusterUnreachableError, GpustackError
from gpustack.paths import state_dir
from gpustack.runners.kube import Kube, Obj
from gpustack.runners.kube_proof import NOT_KUBERNETES


@dataclass
class NodeStatus:
    name: str
    roles: list[str]
    ready: bool
    schedulable: bool
    kubelet: str
    in_config: bool
    note: str = ""


@dataclass
class ReleaseStatus:
    name: str
    namespace: str
    chart_version: str  # "" when not installed
    pinned: str
    status: str  # Helm's: deployed, failed, pending-upgrade, ...; "not installed"
    revision: int = 0
    note: str = ""


@dataclass
class Status:
    cluster: str
    reachable: bool
    error: str | None = None
    api_server: str = ""  # the API server's version
    nodes: list[NodeStatus] = field(default_factory=list)
    #: config nodes the cluster does not list
    not_joined: list[str] = field(default_factory=list)
    releases: list[ReleaseStatus] = field(default_factory=list)
    #: components past their end of upstream support or within 90 days of it (lifecycle.Judged.to_json + "fix")
    support: list[dict[str, Any]] = field(default_factory=list)
    today: str = ""
    last_run: dict[str, Any] | None = None
    upgrade: dict[str, Any] | None = None
    #: certificates read without SSH (gpustack/cluster/status_certs.py): what, expires, status, text
    certificates: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"command": "status", **asdict(self)}


# -- nodes --------------------------------------------------------------------------------------------


def skew_note(kubelet: str, api_server: str) -> str:
    """How a kubelet's version stands against the API server's (pure; "" when they match)."""
    try:
        k, a = skew.minor_of(kubelet), skew.minor_of(api_server)
    except ValueError:
        return "kubelet version unknown" if api_server else ""
    if k > a:
        return f"kubelet newer than the API server {api_server}: not allowed by the version-skew policy"
    if k < a:
        behind = a[1] - k[1] if k[0] == a[0] else 99
        return f"{behind} minor(s) behind the API server {api_server}" + (
            ": beyond the 3 the version-skew policy allows" if behind > 3 else " (an upgrade in progress?)"
        )
    if kubelet.lstrip("v") != api_server.lstrip("v"):
        return f"patch differs from the API server {api_server}"
    return ""


def node_status(objs: Sequence[Obj], cfg: Config, api_server: str) -> tuple[list[NodeStatus], list[str]]:
    """The cluster's nodes against the config's (pure): rows, and config nodes the cluster lacks."""
    configured = {n.name for n in cfg.nodes}
    rows = []
    for obj in sorted(objs, key=lambda o: str((o.get("metadata") or {}).get("name"))):
        meta, spec, st = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        name = str(meta.get("name") or "")
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
        kubelet = str((st.get("nodeInfo") or {}).get("kubeletVersion") or "")
        notes = [x for x in (skew_note(kubelet, api_server),) if x]
        if name not in configured:
            notes.append("not in gpustack.yaml")
        rows.append(
            NodeStatus(
                name=name,
                roles=["control-plane"] if CONTROL_PLANE_LABEL in (meta.get("labels") or {}) else ["worker"],
                ready=ready,
                schedulable=not spec.get("unschedulable"),
                kubelet=kubelet,
                in_config=name in configured,
                note="; ".join(notes),
            )
        )
    listed = {r.name for r in rows}
    return rows, [n.name for n in cfg.nodes if n.name not in listed]


# -- Helm releases ------------------------------------------------------------------------------------


def decode_release(secret: Obj) -> dict[str, Any] | None:
    """Helm's release record in a ``sh.helm.release.v1.*`` Secret: the Secret's base64, then Helm's
    base64 of the gzipped JSON (pure). None when it cannot be read."""
    raw = (secret.get("data") or {}).get("release")
    if not isinstance(raw, str):
        return None
    try:
        blob = base64.b64decode(base64.b64decode(raw))
        if blob[:2] == b"\x1f\x8b":
            blob = gzip.decompress(blob)
        data = json.loads(blob)
    except (ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None


def pinned_charts(cfg: Config) -> dict[str, str]:
    v = cfg.versions
    return {
        "kube-prometheus-stack": v.kube_prometheus_stack,
        "gpu-operator": v.gpu_operator,
        "dcgm-exporter": v.dcgm_exporter,
    }


def release_status(name: str, namespace: str, pinned: str, secrets: Sequence[Obj]) -> ReleaseStatus:
    """A release from its Helm records (pure): the deployed revision, else the newest one."""

    def revision(s: Obj) -> int:
        try:
            return int(((s.get("metadata") or {}).get("labels") or {}).get("version") or 0)
        except ValueError:
            return 0

    def status(s: Obj) -> str:
        return str(((s.get("metadata") or {}).get("labels") or {}).get("status") or "")

    if not secrets:
        return ReleaseStatus(name, namespace, "", pinned, "not installed", note="`gpustack up` installs it")
    deployed = [s for s in secrets if status(s) == "deployed"]
    current = max(deployed or secrets, key=revision)
    record = decode_release(current) or {}
    chart = str(((record.get("chart") or {}).get("metadata") or {}).get("version") or "")
    note = ""
    if not chart:
        note = "release record unreadable"
    elif chart.lstrip("v") != pinned.lstrip("v"):
        note = f"gpustack pins {pinned}: `gpustack upgrade --components`"
    if status(current) != "deployed":
        note = "; ".join(x for x in (f"Helm status {status(current) or '?'}", note) if x)
    return ReleaseStatus(name, namespace, chart, pinned, status(current) or "?", revision(current), note)


def releases(kube: Kube, cfg: Config) -> list[ReleaseStatus]:
    pins = pinned_charts(cfg)
    out = []
    for name in RELEASE_ORDER:
        ns = NAMESPACES[name]
        secrets = kube.list_objects("v1", "Secret", ns, label_selector=f"owner=helm,name={name}")
        out.append(release_status(name, ns, pins[name], secrets))
    return out


# -- support horizons ---------------------------------------------------------------------------------


#: seconds status waits for Prometheus' buildinfo through the API server's proxy
BUILDINFO_TIMEOUT = 10.0


def running_prometheus(kube: Kube) -> tuple[str, str]:
    """(the version of the Prometheus that runs, where it was read): its ``/api/v1/status/buildinfo`` through the API
    server's service proxy (the path doctor's ``prometheus`` source takes), else its ``Prometheus`` resource; ("", "")
    when neither answers: status goes on without judging it."""
    from gpustack.config import lifecycle
    from gpustack.constants import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
    from gpustack.diagnose.collect_prometheus import api_data
    from gpustack.runners.http import HttpError, KubeProxyEndpoint

    ep = KubeProxyEndpoint(kube, MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)
    try:
        info = api_data(ep, "status/buildinfo", None, BUILDINFO_TIMEOUT)
        version = str(info.get("version") or "") if isinstance(info, dict) else ""
    except HttpError:  # not installed, not ready, or no proxy: the resource says what it was told to run
        version = ""
    if version:
        return lifecycle.running_prometheus(version)
    try:
        return lifecycle.running_prometheus("", kube.list_objects("monitoring.coreos.com/v1", "Prometheus",
                                                                  MONITORING_NAMESPACE))  # fmt: skip
    except GpustackError:  # no such kind (no kube-prometheus-stack CRDs) or not allowed
        return "", ""


def support_warnings(
    nodes: Sequence[Obj], rels: Sequence[ReleaseStatus], cfg: Config, prometheus: tuple[str, str] = ("", "")
) -> tuple[str, list[dict[str, Any]]]:
    """(the day judged, the components past or near their end of support, or with an open security release) from
    what the cluster runs: the nodes' kubelet, containerd, OS and driver, the GPU Operator chart Helm's records
    name, and Prometheus by its own version (``prometheus``: :func:`running_prometheus`) (pure but for the day).
    Each carries ``level``: ``warn`` with its ``fix``, or ``info`` where no way out changes anything yet
    (gpustack/config/advice.py)."""
    from gpustack.config import advice, lifecycle, support

    on = support.today()
    charts = {r.name: r.chart_version for r in rels if r.chart_version}
    judged = lifecycle.running_support(list(nodes), charts, on, prometheus)
    return on.isoformat(), [a.to_json() for a in advice.advise(judged, on, cfg)]


def _support_cell(w: dict[str, Any]) -> str:
    if w.get("level") == "info":
        return f"note: {literal(str(w['advice']))}"
    if w.get("open_security_releases") and str(w.get("advice", "")).startswith("open security"):
        return f"[fail]security[/fail]: {literal(str(w['advice']))}"
    return ("[fail]past[/fail]" if w["status"] == "past" else "[warn]ending[/warn]") + f": {literal(str(w['advice']))}"


# -- this machine's records ---------------------------------------------------------------------------


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (OSError, TypeError, ValueError):
        return False
    return True


def last_run(cluster: str, root: Path | None = None) -> dict[str, Any] | None:
    """The newest run of a host-changing command on ``cluster`` from this machine: its run.json (or,
    for runs older than run.json, what config.json and summary.json tell)."""
    runs = (root or state_dir()) / "runs"
    if not runs.is_dir():
        return None
    for run in sorted((p for p in runs.iterdir() if p.is_dir()), reverse=True):
        record = _load(run / "run.json")
        if not isinstance(record, dict):
            cfg = _load(run / "config.json")
            if not isinstance(cfg, dict) or (cfg.get("cluster") or {}).get("name", "gpustack") != cluster:
                continue
            rows = _load(run / "summary.json") or []
            states = {str(r.get("status")) for r in rows if isinstance(r, dict)}
            result = "failed" if "failed" in states else "interrupted" if "interrupted" in states else "ok"
            record = {"command": "?", "cluster": cluster, "result": result, "started": run.name}
        elif record.get("cluster") != cluster:
            continue
        out = dict(record)
        out["run_dir"] = str(run)
        rows = _load(run / "summary.json")
        if isinstance(rows, list):
            out["stages"] = {str(r.get("stage")): str(r.get("status")) for r in rows if isinstance(r, dict)}
        if out.get("result") == "running":
            who = holder(lock_path(cluster, root))
            if not (who.get("command") == out.get("command") and _alive(who.get("pid"))):
                out["result"] = "ended without a result (killed?)"
        return out
    return None


def kubelets_at(nodes: Sequence[NodeStatus], version: str) -> list[str]:
    """The nodes whose kubelet runs ``version`` (pure): what the cluster says, whatever a record says."""
    return [n.name for n in nodes if n.kubelet.lstrip("v") == version.lstrip("v")]


def upgrade_line(upgrade: dict[str, Any]) -> str:
    """One line for an upgrade record (pure): its state, the nodes its record counts done and, when
    the API answered, the nodes whose kubelet runs the target (a run interrupted between a node's
    upgrade and its record counts it only there)."""
    turns: dict[str, Any] = upgrade.get("nodes") or {}
    done = sum(1 for v in turns.values() if isinstance(v, dict) and v.get("status") == "done")
    state = str(upgrade.get("status"))
    line = f"upgrade {upgrade.get('from')} -> {upgrade.get('to')}: {state}, {done}/{len(turns)} node(s) done"
    running = upgrade.get("kubelet_at_target")
    if isinstance(running, list) and len(running) != done:
        line += f" ({len(running)}/{len(turns)} run kubelet {upgrade.get('to')})"
    if state != "done":
        line += f"; `gpustack upgrade --to {upgrade.get('to')}` continues it"
    return line + (f" ({upgrade['error']})" if upgrade.get("error") else "")


def upgrade_record(cfg: Config, root: Path | None = None) -> dict[str, Any] | None:
    """This machine's upgrade.json; a ``running`` one whose run is gone reads ``interrupted``."""
    record = read_progress(progress_path(cfg))
    if record and record.get("status") == "running":
        who = holder(lock_path(cfg.cluster.name, root))
        if not (who.get("command") == "upgrade" and _alive(who.get("pid"))):
            record["status"] = "interrupted"
    return record


# -- gather and show ----------------------------------------------------------------------------------


def gather(cfg: Config, kube: Kube | None, error: str | None = None) -> Status:
    """Everything status shows; ``kube`` None (no usable kubeconfig): the local part only."""
    out = Status(
        cfg.cluster.name, reachable=False, error=error, last_run=last_run(cfg.cluster.name), upgrade=upgrade_record(cfg)
    )
    out.certificates = gather_certificates(cfg, kube.target if kube is not None else None)
    if kube is None:
        out.not_joined = [n.name for n in cfg.nodes]
        return out
    try:
        out.api_server = kube.server_version()
        out.reachable = True
        node_objs = kube.list_objects("v1", "Node")
        out.nodes, out.not_joined = node_status(node_objs, cfg, out.api_server)
        if out.upgrade and out.upgrade.get("to"):
            out.upgrade["kubelet_at_target"] = kubelets_at(out.nodes, str(out.upgrade["to"]))
        out.releases = releases(kube, cfg)
        prometheus = running_prometheus(kube) if any(r.chart_version for r in out.releases
                                                     if r.name == "kube-prometheus-stack") else ("", "")  # fmt: skip
        out.today, out.support = support_warnings(node_objs, out.releases, cfg, prometheus)
    except ClusterUnreachableError as exc:
        out.reachable, out.error = False, exc.message
    except GpustackError as exc:  # an answer, but not the one needed (e.g. 403): say so, keep what was read
        out.error = exc.message
    return out


def print_status(s: Status, console: Console) -> None:
    upgrade = s.upgrade or {}
    if s.reachable:
        console.print(f"[stage]cluster[/stage] {literal(s.cluster)}: API server {literal(s.api_server)}", markup=True)
    elif (s.error or "").startswith(NOT_KUBERNETES):  # it answers, as something else: not "unreachable"
        console.print(f"[fail]cluster {literal(s.cluster)}: {literal(s.error or '')}[/fail]", markup=True)
    else:
        console.print(f"[fail]cluster {literal(s.cluster)}: unreachable[/fail]: {literal(s.error)}", markup=True)
    if s.error and s.reachable:
        console.warn(s.error)
    if s.nodes:
        rows = [
            [
                literal(n.name),
                literal(",".join(n.roles)),
                ("[ok]Ready[/ok]" if n.ready else "[fail]NotReady[/fail]") + ("" if n.schedulable else " (cordoned)"),
                literal(n.kubelet),
                literal(n.note),
            ]
            for n in s.nodes
        ]
        rows += [
            [literal(name), "", "[skip]not in the cluster[/skip]", "", "in gpustack.yaml: `gpustack node add`"]
            for name in s.not_joined
        ]
        console.table("Nodes", ["node", "roles", "status", "kubelet", "note"], rows)
    if s.releases:
        rows = [[literal(c) for c in (r.name, r.namespace, r.chart_version or "-", r.pinned, r.status, r.note)]
                for r in s.releases]  # fmt: skip
        console.table("Helm releases", ["release", "namespace", "chart", "pinned", "status", "note"], rows)
    if s.support:
        rows = [
            [literal(f"{w['component']} {w['version']}"), literal(", ".join(w.get("where") or [])),
             _support_cell(w), literal(w["fix"] or "nothing to do yet")]
            for w in s.support
        ]  # fmt: skip
        console.table(f"Support (as of {s.today}: past, or within 90 days of, the end of upstream support; open "
                      "security releases)",
                      ["component", "where", "support", "way out"], rows)  # fmt: skip
    elif s.reachable and s.nodes:
        console.print(f"support: every component read is within upstream support for 90+ days (as of {s.today})",
                      markup=False)  # fmt: skip
    print_certificates(s.certificates, console)
    run = s.last_run
    if run:
        when = run.get("finished") or run.get("started")
        which = f" ({', '.join(run['nodes'])})" if run.get("nodes") else ""
        err = f": {run['error']}" if run.get("error") else ""
        console.print(f"last run: gpustack {run.get('command')}{which}, {run.get('result')}{err}, {when}", markup=False)
        console.print(f"  {run['run_dir']}", markup=False)
    else:
        console.print("last run: none from this machine", markup=False)
    if upgrade:
        console.print(upgrade_line(upgrade), markup=False)


def exit_code(s: Status) -> int:
    """0 when the cluster answered, 3 when it did not (as verify)."""
    return 0 if s.reachable else ClusterUnreachableError.exit_code


def status_json(s: Status) -> str:
    return json.dumps(s.to_json(), indent=2, default=str) + "\n"
