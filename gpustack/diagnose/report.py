"""Findings -> a rich table grouped by layer with a verdict, JSON (the documented contract) or JUnit XML."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any
from xml.etree import ElementTree as ET

from rich.markup import escape

from gpustack.checks.model import Finding
from gpustack.console import Console
from gpustack.diagnose.registry import LAYERS

STATUSES = ("pass", "warn", "fail", "skip")


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


def verdict(findings: Sequence[Finding]) -> str:
    s = summary(findings)
    if s["fail"]:
        order = layers_of(findings)
        layers = sorted({f.layer for f in findings if f.status == "fail"}, key=order.index)
        return f"FAIL: {s['fail']} problem(s) in {', '.join(layers)}; {s['pass']} passed, {s['warn']} warning(s)"
    if s["warn"]:
        return f"OK with {s['warn']} warning(s): {s['pass']} passed"
    return f"OK: all {s['pass']} checks passed" + (f" ({s['skip']} skipped)" if s["skip"] else "")


def print_table(
    command: str, findings: Sequence[Finding], console: Console, *, target: Mapping[str, Any] | None = None
) -> None:
    style = {"pass": "ok", "warn": "warn", "fail": "fail", "skip": "skip"}
    if target is not None:  # verify/doctor pass {} when they found no cluster: that is said too
        console.print(f"cluster: {escape(cluster_line(target))}", soft_wrap=False, overflow="fold")
    for layer in layers_of(findings):
        rows = []
        for f in findings:
            if f.layer != layer or (f.status == "pass" and console.verbosity == 0 and command == "doctor"):
                continue
            what = f.summary + (f" [dim]({f.host})[/dim]" if f.host else "")
            if f.evidence and f.status != "pass":
                what += f"\n[dim]{f.evidence}[/dim]"
            rows.append(
                [f.id, f"[{style[f.status]}]{f.status}[/]", what, f.fix if f.status in {"fail", "warn"} else ""]
            )
        if rows:
            console.table(f"{layer}", ["check", "status", "finding", "fix"], rows)
    console.print(("[fail]" if any(f.status == "fail" for f in findings) else "[ok]") + verdict(findings) + "[/]")
