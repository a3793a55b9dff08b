"""``gpustack render --out DIR``: every generated file, from the same functions ``up`` uses."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpustack.config.model import Config
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
    ev_shown = {k: v for k, v in ev.items() if k != "gpustack_kubeadm_config"}
    return {
        "ansible/inventory.yaml": yaml.safe_dump(inventory(cfg), sort_keys=False),
        "ansible/extravars.yaml": "# gpustack_kubeadm_config is kubeadm/kubeadm-config.yaml\n"
        + yaml.safe_dump(ev_shown, sort_keys=True),
        "kubeadm/kubeadm-config.yaml": render_init_config(cfg),
        "config/effective-config.json": json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n",
        **{
            f"values/{release}.yaml": yaml.safe_dump(values, sort_keys=False)
            for release, values in render_values(cfg, facts).items()
        },
        **{f"manifests/{name}": _yaml_docs(objs) for name, objs in render_manifests(cfg, facts).items()},
    }


def write_all(
    cfg: Config, out: Path, *, state_root: Path | None = None, facts: FactsSummary | None = None
) -> list[Path]:
    written = []
    for rel, content in generated_files(cfg, state_root=state_root, facts=facts).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written
