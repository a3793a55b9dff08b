"""``gpustack render --out DIR``: every generated file, from the same functions ``up`` uses."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpustack.config.model import Config
from gpustack.errors import UsageError
from gpustack.paths import kubeconfig_path
from gpustack.render.ansible import extravars, inventory
from gpustack.render.kubeadm import render_init_config
from gpustack.render.manifests import render_manifests
from gpustack.render.values import FactsSummary, render_values, summarize_facts


def load_facts(facts_dir: Path | None) -> FactsSummary:
    """Host facts from a run directory's facts/ (``gpustack render --facts``), else none known."""
    if facts_dir is None:
        return FactsSummary()
    by_node = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(facts_dir.glob("*.json"))}
    return summarize_facts(by_node)


def _yaml_docs(objects: list[dict[str, object]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


def generated_files(
    cfg: Config, *, state_root: Path | None = None, facts: FactsSummary | None = None
) -> dict[str, str]:
    """Relative path -> content: what `up` would apply, from the same functions (secrets excluded:
    the Grafana password and receiver credentials are created in the cluster, never written here)."""
    facts = facts or FactsSummary()
    ev = extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name, state_root))
    ev_shown = {k: v for k, v in ev.items() if k not in ("gpustack_kubeadm_config", "gpustack_flannel_manifest")}
    return {
        "ansible/inventory.yaml": yaml.safe_dump(inventory(cfg), sort_keys=False),
        "ansible/extravars.yaml": "# gpustack_kubeadm_config is kubeadm/kubeadm-config.yaml\n"
        "# gpustack_flannel_manifest is manifests/kube-flannel.yaml\n" + yaml.safe_dump(ev_shown, sort_keys=True),
        "kubeadm/kubeadm-config.yaml": render_init_config(cfg),
        "config/effective-config.json": json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n",
        **{
            f"values/{release}.yaml": yaml.safe_dump(values, sort_keys=False)
            for release, values in render_values(cfg, facts).items()
        },
        **{f"manifests/{name}": _yaml_docs(objs) for name, objs in render_manifests(cfg, facts).items()},
        "manifests/kube-flannel.yaml": ev["gpustack_flannel_manifest"],
    }


# The list of files a render wrote, kept in DIR: the next render removes the ones it no longer
# generates (switching to the operator's exporter must not leave values/dcgm-exporter.yaml behind)
# and never touches a file it did not write.
MANIFEST = ".gpustack-render.json"
# Written by renders before the manifest existed (their only conditional files).
_LEGACY_OPTIONAL = ("values/dcgm-exporter.yaml", "manifests/storage.yaml")


@dataclass(frozen=True)
class RenderResult:
    written: list[tuple[Path, int]]  # path, size in bytes
    removed: list[Path]


def _check_out_dir(out: Path) -> None:
    """Refuse before writing anything: DIR is a file, or DIR (or its nearest existing parent) is not writable."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory", hint="name a directory (created if missing)")
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"--out {out}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {probe} is not writable", hint="choose a directory you can write to")


def _owned(out: Path) -> set[str]:
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            return {str(p) for p in data.get("files", []) if isinstance(p, str) and ".." not in Path(p).parts}
        except (OSError, ValueError, AttributeError):
            return set()
    if (out / "config" / "effective-config.json").is_file():  # an earlier gpustack's render
        return set(_LEGACY_OPTIONAL)
    return set()


def render_to(
    cfg: Config, out: Path, *, state_root: Path | None = None, facts: FactsSummary | None = None
) -> RenderResult:
    """Write every generated file under ``out``; remove the files an earlier render wrote that are no
    longer generated. A path problem is a UsageError (exit 2) raised before anything is written."""
    files = generated_files(cfg, state_root=state_root, facts=facts)
    _check_out_dir(out)
    stale = sorted(_owned(out) - set(files))
    written: list[tuple[Path, int]] = []
    try:
        for rel, content in files.items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode("utf-8")
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
            written.append((path, len(data)))
        removed: list[Path] = []
        for rel in stale:
            path = out / rel
            if path.is_file():
                path.unlink()
                removed.append(path)
                parent = path.parent
                while parent != out and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()
                    parent = parent.parent
        (out / MANIFEST).write_text(json.dumps({"files": sorted(files)}, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write {exc.filename or out}: {exc.strerror}") from None
    return RenderResult(written, removed)
