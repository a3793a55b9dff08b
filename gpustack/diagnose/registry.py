"""The check registry: every check has a stable id, a layer, the commands that run it, what it
reads, and is a pure function Snapshot -> list[Finding].

    @register("K02-control-plane-taint", "kubernetes", reads="nodes", commands=("doctor", "verify"), needs=("Node",))
    def control_plane_taint(snap: Snapshot) -> list[Finding]: ...

``reference_table()`` generates docs/checks.md, the check reference, from this registry.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from gpustack.checks.model import Finding
from gpustack.diagnose.snapshot import Snapshot

LAYERS = ("host", "runtime", "kubernetes", "security", "gpu-operator", "monitoring", "grafana")
CheckFn = Callable[[Snapshot], list[Finding]]


@dataclass(frozen=True)
class CheckSpec:
    id: str
    layer: str
    title: str
    reads: str
    commands: tuple[str, ...]
    fn: CheckFn
    fixable: bool = False  # `doctor --fix` can apply its fix
    needs: tuple[str, ...] = ()  # data it reads (Snapshot.missing): without it the check is a `skip`


REGISTRY: dict[str, CheckSpec] = {}


def register(
    id: str, layer: str, *, title: str, reads: str, commands: Sequence[str] = ("doctor",), fixable: bool = False,
    needs: Sequence[str] = (),
) -> Callable[[CheckFn], CheckFn]:  # fmt: skip
    if layer not in LAYERS:
        raise ValueError(f"unknown layer {layer!r}")

    def deco(fn: CheckFn) -> CheckFn:
        if id in REGISTRY:
            raise ValueError(f"duplicate check id {id}")
        REGISTRY[id] = CheckSpec(id, layer, title, reads, tuple(commands), fn, fixable, tuple(needs))
        return fn

    return deco


def load_all() -> dict[str, CheckSpec]:
    """Import every checks_* module so they register (idempotent)."""
    from gpustack.diagnose import import_all

    import_all("checks_")
    return REGISTRY


def select(
    command: str, *, layers: Iterable[str] = (), checks: Iterable[str] = (), ignore: Iterable[str] = ()
) -> list[CheckSpec]:
    load_all()
    layers, checks, ignore = set(layers), set(checks), set(ignore)
    out = []
    for spec in REGISTRY.values():
        if command not in spec.commands:
            continue
        if layers and spec.layer not in layers:
            continue
        if checks and spec.id not in checks and spec.id.split("-", 1)[0] not in checks:
            continue
        if spec.id in ignore or spec.id.split("-", 1)[0] in ignore:
            continue
        out.append(spec)
    return sorted(out, key=lambda s: (LAYERS.index(s.layer), s.id))


def run(specs: Sequence[CheckSpec], snap: Snapshot) -> list[Finding]:
    """Run checks; a check that raises on odd data becomes a `fail` finding, never a crash."""
    findings: list[Finding] = []
    for spec in specs:
        gap = snap.missing(spec.needs)
        if gap is not None:  # the data it reads was not collected: the source's own check says why
            findings.append(Finding(spec.id, spec.layer, "skip", gap[0], evidence=gap[1]))
            continue
        try:
            out = spec.fn(snap)
        except Exception as exc:  # a bug or malformed data must not lose the whole report
            where = traceback.extract_tb(exc.__traceback__)[-1]
            out = [
                Finding(spec.id, spec.layer, "fail", f"check could not evaluate the data: {type(exc).__name__}: {exc}",
                        evidence=f"{where.filename}:{where.lineno}", fix="report this with `gpustack doctor --bundle`")
            ]  # fmt: skip
        if not out:
            out = [Finding(spec.id, spec.layer, "pass", spec.title)]
        findings += [f if f.id == spec.id and f.layer == spec.layer else replace(f, id=spec.id, layer=spec.layer)
                     for f in out]  # fmt: skip
    return findings


def reference_table() -> str:
    """Markdown table of every check (id, layer, commands, what it reads, fix mode)."""
    load_all()
    rows = ["| id | layer | command | checks | reads | `--fix` |", "|---|---|---|---|---|---|"]
    for spec in sorted(REGISTRY.values(), key=lambda s: (LAYERS.index(s.layer), s.id)):
        rows.append(
            f"| `{spec.id}` | {spec.layer} | {', '.join(spec.commands)} | {spec.title} | {spec.reads} | "
            f"{'yes' if spec.fixable else 'prints the fix'} |"
        )
    return "\n".join(rows) + "\n"
