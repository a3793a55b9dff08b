"""``gpustack plan``: the ordered stages a command would run and what each changes; touches nothing."""

from __future__ import annotations

from gpustack.cli.options import ConfigOpt, FromOpt, StagesOpt, console_for, load_config, split_csv


def plan(
    config: ConfigOpt = None,
    only: StagesOpt = None,
    from_: FromOpt = None,
    skip: StagesOpt = None,
) -> None:
    """Print the ordered stages `up` would run and what each changes; touches nothing."""
    from gpustack import plan as stages_plan

    console = console_for()
    stages = stages_plan.select(only=split_csv(only), from_=from_, skip=split_csv(skip))
    cfg = load_config(config).config
    cp = cfg.control_plane.name
    workers = ", ".join(n.name for n in cfg.workers) or "(none)"
    where = {"all": ", ".join(n.name for n in cfg.nodes), "control-plane": cp, "workers": workers}
    rows = [[str(i), s.id, where[s.hosts], s.changes] for i, s in enumerate(stages, 1)]
    console.table("gpustack up would run", ["#", "stage", "hosts", "changes"], rows)
