"""``gpustack render --out DIR``: every generated file, from the same functions ``up`` uses."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpustack.config.model import Config
from gpustack.paths import kubeconfig_path
from gpustack.render.ansible import extravars, inventory
from gpustack.render.kubeadm import render_init_config


def generated_files(cfg: Config, *, state_root: Path | None = None) -> dict[str, str]:
    """Relative path -> content."""
    ev = extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name, state_root))
    ev_shown = {k: v for k, v in ev.items() if k != "gpustack_kubeadm_config"}
    return {
        "ansible/inventory.yaml": yaml.safe_dump(inventory(cfg), sort_keys=False),
        "ansible/extravars.yaml": "# gpustack_kubeadm_config is kubeadm/kubeadm-config.yaml\n"
        + yaml.safe_dump(ev_shown, sort_keys=True),
        "kubeadm/kubeadm-config.yaml": render_init_config(cfg),
        "config/effective-config.json": json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n",
    }


def write_all(cfg: Config, out: Path, *, state_root: Path | None = None) -> list[Path]:
    written = []
    for rel, content in generated_files(cfg, state_root=state_root).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written
