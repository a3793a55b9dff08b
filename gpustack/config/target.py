"""What `plan` and `up` say about the target they chose: the config file's nodes, or -- when no
config file exists -- this machine as a single-node cluster (the embedded default)."""

from __future__ import annotations

from collections.abc import Sequence

from gpustack.config.load import DEFAULT_FILES, Loaded


def announcement(loaded: Loaded) -> str:
    """One line naming the target and where it came from (printed by `plan` and `up`)."""
    cfg = loaded.config
    k8s = f"Kubernetes {cfg.versions.kubernetes}"
    if loaded.is_default:
        node = cfg.nodes[0]
        return (
            f"target: THIS machine ({node.name}, {node.address}) as a single-node cluster; {k8s} "
            f"(no {DEFAULT_FILES[0]} here, no --config, no $GPUSTACK_CONFIG)"
        )
    names = ", ".join(n.name for n in cfg.nodes[:5]) + (
        f", ... ({len(cfg.nodes)} in all)" if len(cfg.nodes) > 5 else ""
    )
    return f"target: {len(cfg.nodes)} node(s) from {loaded.source} ({names}); {k8s}"


def confirm_question(loaded: Loaded, stage_ids: Sequence[str]) -> str:
    """What `up` asks before it changes hosts (skipped with --yes)."""
    stages = ", ".join(stage_ids)
    if loaded.is_default:
        node = loaded.config.nodes[0]
        return (
            f"Turn THIS machine ({node.name}, {node.address}) into a Kubernetes node "
            f"(installs packages, changes kernel settings, swap and the firewall; stages: {stages}). Continue?"
        )
    return f"Change {len(loaded.config.nodes)} host(s): {stages}. Continue?"
