"""Findings -> a rich table grouped by layer with a verdict, JSON (the documented contract) or JUnit XML."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import groupby
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from rich.markup import escape

from gpustack.checks.model import Finding
from gpustack.console import Console
from gpustack.diagnose.registry import LAYERS
from gpustack.paths import write_output
from gpustack.runners.kube_proof import NOT_KUBERNETES

STATUSES = ("pass", "warn", "fail", "skip")
#: the check that says the Kubernetes API server cannot be read
API_CHECK = "K00-api-unreachable"
#: layers whose data is read through the API server (Prometheus and Grafana through its service proxy)
API_LAYERS = ("kubernetes", "security", "gpu-operator", "monitoring", "grafana")
NOT_CHECKED = f"not checked: the Kubernetes API cannot be read (see {API_CHECK})"


def attribute_to_api(findings: Sequence[Finding]) -> list[Finding]:
    """The report of a run whose API server could not be read: every finding of a layer read
    through it, other than K00's own, is a consequence of that one cause, so it is a ``skip``
    saying so (a check that reported "Prometheus could not be reached" or "the CUDA test pod could
    not be run" was not a second problem). Host-layer findings (read over SSH) stay as they are."""
    out = []
    for f in findings:
        if f.layer in API_LAYERS and f.id != API_CHECK and f.status in ("fail", "skip"):
            evidence = f.summary + (f"\n{f.evidence}" if f.evidence else "")
            f = replace(f, status="skip", summary=NOT_CHECKED, evidence=evidence, fix="")
        out.append(f)
    return out


def layers_of(findings: Sequence[Finding]) -> list[str]:
    """verify/doctor's layers in their order, then any other layer the findings carry (diag, quarantine)."""
    return [*LAYERS, *(layer for layer in dict.fromkeys(f.layer for f in findings) if layer not in LAYERS)]


def summary(findings: Sequence[Finding]) -> dict[str, int]:
    counts: Counter[str] = Counter(f.status for f in findings)
    return {s: counts[s] for s in STATUSES}


def exit_code(findings: Sequence[Finding], *, cluster_unreachable: bool = False) -> int:
    """0 all pass (warnings allowed), 1 a failure, 3 the cluster API could not be reached."""
    if cluster_unreachable:
        return 3
    return 1 if any(f.status == "fail" for f in findings) else 0


def cluster_line(target: Mapping[str, Any] | None) -> str:
    """The cluster a report is about: ``server (context C, kubeconfig from SOURCE: FILES)``."""
    if not target:
        return "no cluster (no kubeconfig found, or only host facts were collected)"
    files = ":".join(str(f) for f in target.get("kubeconfig") or [])
    own = ", gpustack's cluster" if target.get("gpustack_cluster") else ""
    return f"{target.get('server')} (context {target.get('context')}{own}; kubeconfig from {target.get('source')}: {files})"


def to_json(command: str, findings: Sequence[Finding], target: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "command": command,
        "cluster": dict(target) if target else None,
        "checks": [
            {"id": f.id, "layer": f.layer, "status": f.status, "summary": f.summary, "evidence": f.evidence,
             "fix": f.fix, **({"host": f.host} if f.host else {})}
            for f in findings
        ],
        "summary": summary(findings),
    }  # fmt: skip


def to_junit(command: str, findings: Sequence[Finding], target: Mapping[str, Any] | None = None) -> str:
    s = summary(findings)
    suites = ET.Element("testsuites", name=f"gpustack {command}", tests=str(len(findings)), failures=str(s["fail"]))
    if target:
        props = ET.SubElement(suites, "properties")
        for key in ("server", "context", "source"):
            ET.SubElement(props, "property", name=f"cluster.{key}", value=str(target.get(key) or ""))
    for layer in layers_of(findings):
        layer_findings = [f for f in findings if f.layer == layer]
        if not layer_findings:
            continue
        ls = summary(layer_findings)
        suite = ET.SubElement(
            suites, "testsuite", name=layer, tests=str(len(layer_findings)), failures=str(ls["fail"]),
            skipped=str(ls["skip"]),
        )  # fmt: skip
        for f in layer_findings:
            case = ET.SubElement(
                suite, "testcase", classname=f"{command}.{layer}", name=f.id + (f"[{f.host}]" if f.host else "")
            )
            if f.status == "fail":
                el = ET.SubElement(case, "failure", message=f.summary)
                el.text = "\n".join(x for x in (f.evidence, f"fix: {f.fix}" if f.fix else "") if x)
            elif f.status == "skip":
                ET.SubElement(case, "skipped", message=f.summary)
            elif f.status == "warn":
                out = ET.SubElement(case, "system-out")
                out.text = f"warning: {f.summary}\n{f.evidence}"
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def render(command: str, findings: Sequence[Finding], fmt: str, *, target: Mapping[str, Any] | None = None) -> str:
    if fmt == "json":
        return json.dumps(to_json(command, findings, target), indent=2) + "\n"
    if fmt == "junit":
        return to_junit(command, findings, target)
    raise ValueError(fmt)


def verdict(findings: Sequence[Finding], *, cluster_unreachable: bool = False) -> str:
    """The last line of the table, consistent with the exit code (:func:`exit_code`)."""
    s = summary(findings)
    if cluster_unreachable:
        cause = next((f for f in findings if f.id == API_CHECK), None)
        why = cause.evidence.splitlines()[0] if cause is not None and cause.evidence else ""
        others = [f for f in findings if f.status == "fail" and f.id != API_CHECK]
        more = f"; {len(others)} other problem(s) in {_layers(others)}" if others else ""
        not_run = sum(f.summary == NOT_CHECKED for f in findings)
        if not why.startswith(NOT_KUBERNETES):  # "not a Kubernetes API server at URL: ..." says it all
            why = "the Kubernetes API cannot be read" + (f" ({why})" if why else "")
        return f"UNREACHABLE: {why}; {not_run} check(s) not run{more}"
    if s["fail"]:
        failed = [f for f in findings if f.status == "fail"]
        return f"FAIL: {s['fail']} problem(s) in {_layers(failed)}; {s['pass']} passed, {s['warn']} warning(s)"
    if s["warn"]:
        return f"OK with {s['warn']} warning(s): {s['pass']} passed"
    return f"OK: all {s['pass']} checks passed" + (f" ({s['skip']} skipped)" if s["skip"] else "")


def show(
    command: str,
    findings: Sequence[Finding],
    console: Console,
    output: str,
    *,
    target: Mapping[str, Any] | None = None,
    cluster_unreachable: bool = False,
) -> None:
    """The report on stdout in the chosen format: the table (with the cluster line and the verdict), or
    json/junit alone (nothing else on stdout), for every command that reports findings."""
    if output == "table":
        print_table(command, findings, console, target=target, cluster_unreachable=cluster_unreachable)
    else:
        console.out.print(render(command, findings, output, target=target), markup=False, end="")


def save(path: Path, command: str, findings: Sequence[Finding], *, target: Mapping[str, Any] | None = None) -> None:
    """``--save FILE``: junit for a ``.xml`` file, json otherwise."""
    fmt = "junit" if path.suffix == ".xml" else "json"
    write_output(path, render(command, findings, fmt, target=target), flag="--save")


def _layers(findings: Sequence[Finding]) -> str:
    order = layers_of(findings)
    return ", ".join(sorted({f.layer for f in findings}, key=order.index))


def print_table(
    command: str,
    findings: Sequence[Finding],
    console: Console,
    *,
    target: Mapping[str, Any] | None = None,
    cluster_unreachable: bool = False,
) -> None:
    """The cluster checked, one table per layer, then the verdict. Skipped checks that share their
    reason share one row (their ids, one per line): a cause is said once, not restated in every row; the checks
    the unreadable API left unchecked are named once, after the tables, whatever their layer. Every layer's
    table has the same layout (boxed, or one block per check when one of them does not fit)."""
    style = {"pass": "ok", "warn": "warn", "fail": "fail", "skip": "skip"}
    if target is not None:  # verify/doctor pass {} when they found no cluster: that is said too
        console.say(f"cluster: {cluster_line(target)}")
    columns = ["check", "status", "finding", "fix"]
    shown = [f for f in findings if not (f.status == "pass" and console.verbosity == 0 and command == "doctor")]
    unchecked = [f for f in shown if f.status == "skip" and f.summary == NOT_CHECKED]
    tables: list[tuple[str, list[list[str]]]] = []
    for layer in layers_of(findings):
        rows = []
        mine = [f for f in shown if f.layer == layer and f not in unchecked]
        for (status, reason), group in groupby(mine, key=lambda f: (f.status, _skip_reason(f))):
            same = list(group)
            if status == "skip" and reason is not None and len(same) > 1:
                rows.append(["\n".join(f.id for f in same), "[skip]skip[/]", escape(reason), ""])
                continue
            for f in same:
                said = (
                    f.summary
                    if f.status != "skip" or f.summary.startswith("not checked")
                    else f"not checked: {f.summary}"
                )
                what = escape(said) + (f" [dim]({escape(f.host)})[/dim]" if f.host else "")
                if f.evidence and f.status != "pass" and f.summary != NOT_CHECKED:
                    what += f"\n[dim]{escape(f.evidence)}[/dim]"
                fix = escape(f.fix) if f.status in {"fail", "warn"} else ""
                rows.append([f.id, f"[{style[f.status]}]{f.status}[/]", what, fix])
        if rows:
            tables.append((layer, rows))
    blocks = not all(console.fits(columns, rows) for _, rows in tables)
    for layer, rows in tables:
        console.table(layer, columns, rows, blocks=blocks)
    if unchecked:
        console.say(f"{NOT_CHECKED}: {', '.join(f.id for f in unchecked)}")
    failed = cluster_unreachable or any(f.status == "fail" for f in findings)
    line = verdict(findings, cluster_unreachable=cluster_unreachable)
    console.print(("[fail]" if failed else "[ok]") + escape(line) + "[/]")


def _skip_reason(f: Finding) -> str | None:
    """What a skipped finding says when it says nothing of its own check (its data was not
    collected: the summary is the reason), else None."""
    if f.status != "skip" or f.host:
        return None
    return f.summary if f.summary == NOT_CHECKED or not f.evidence else None
