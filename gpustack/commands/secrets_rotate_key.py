"""``gpustack secrets rotate-key``: the cluster's Secret encryption key replaced on a running cluster
(playbooks/secrets-rotate-key.yml, role ``encryption_key``; the steps on this machine in
gpustack/cluster/key_rotation.py), run by the one engine.

    preflight (the control planes, read-only)
    -> new-key: a new key recorded second in <state>/clusters/<cluster>/encryption-keys.json (0600)
    -> add: every control plane gets it, one at a time, its API server restarted and waited for (/readyz)
    -> promote: the new key recorded first -> write-new: applied the same way (Secrets are written with it)
    -> rewrite: every Secret rewritten through the API; the old key removed from the record
    -> drop-old: applied the same way (no API server can read the old key any more) -> done: the rotation over

Resumable: the key file records the phase before any control plane gets its keys; every Ansible stage applies what
the file holds, every Python step acts only from the phase before its own. A run cut off anywhere is finished by
the next ``gpustack secrets rotate-key`` (it makes no second new key). docs/lifecycle.md, "Rotating the Secret
encryption key".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpustack.engine.options import RunFlags
from gpustack.engine.plan import PREFLIGHT, CommandPlan, Stage
from gpustack.engine.steps import StageSummary, StepContext, StepFn

if TYPE_CHECKING:
    from gpustack.cluster.key_rotation import StepResult
    from gpustack.config.model import Config
    from gpustack.console import Console
    from gpustack.runners.kube import Kube

_APPLY = (
    "one control plane at a time: /etc/kubernetes/enc/encryption-config.yaml (0600) written with the keys the key "
    "file holds, a restart marked before it (/var/lib/gpustack/encryption-config.pending); the kube-apiserver "
    "container stopped (the kubelet starts it again) and /readyz awaited before the next node"
)

STAGES: tuple[Stage, ...] = (
    PREFLIGHT,
    Stage("new-key", "Make the new key", "python", "local",
          "<state>/clusters/<cluster>/encryption-keys.json: a new 32-byte key, second (read, not written), phase "
          "added; nothing when a rotation is under way (it is resumed)"),
    Stage("add", "Add the new key", "ansible", "control-plane", _APPLY + " (the new key read)"),
    Stage("promote", "Promote the new key", "python", "local", "the key file: the new key first, phase promoted"),
    Stage("write-new", "Write with the new key", "ansible", "control-plane", _APPLY + " (Secrets written with it)"),
    Stage("rewrite", "Rewrite every Secret", "python", "local",
          "every Secret replaced unchanged through the API (written with the new key); then the key file without "
          "the old key, phase removed. A failure keeps the old key"),
    Stage("drop-old", "Drop the old key", "ansible", "control-plane", _APPLY + " (the old key gone)"),
    Stage("done", "Finish the rotation", "python", "local", "the key file: no rotation under way"),
)  # fmt: skip

PLAN = CommandPlan(
    "secrets-rotate-key",
    "replace the cluster's Secret encryption key: new key added, promoted, every Secret rewritten, old key removed, "
    "each API server restarted one at a time at each step; resumable",
    "secrets-rotate-key.yml",
    STAGES,
    host_notes={"control-plane": "every control-plane node, one at a time"},
)


@dataclass(frozen=True)
class RotateOptions(RunFlags):
    pass


@dataclass
class RotateResult:
    run_dir: Path
    summaries: list[StageSummary]


def _step(stage: str, act: Callable[[StepContext], StepResult]) -> StepFn:
    def step(ctx: StepContext) -> list[StageSummary]:
        if ctx.opts.dry_run:
            return [StageSummary(stage, "not run", 0.0, note="dry run")]
        t0 = time.monotonic()
        ctx.console.print(f"[stage]▶ {stage}[/stage]")
        got = act(ctx)
        return [StageSummary(stage, "changed" if got.changed else "ok", time.monotonic() - t0, int(got.changed),
                             note=got.note)]  # fmt: skip

    return step


def steps(cfg: Config, kube: Callable[[], Kube], root: Path | None = None) -> dict[str, StepFn]:
    """The Python stages (``root``: the state directory, for tests; ``kube``: the admin client, made when needed)."""
    from gpustack.cluster import key_rotation as kr

    return {
        "new-key": _step("new-key", lambda ctx: kr.begin(cfg, root)),
        "promote": _step("promote", lambda ctx: kr.promote(cfg, root)),
        "rewrite": _step("rewrite", lambda ctx: kr.rewrite(cfg, kube(), root)),
        "done": _step("done", lambda ctx: kr.finish(cfg, root)),
    }


def admin_kube(cfg: Config) -> Kube:
    from gpustack.errors import StageError
    from gpustack.paths import kubeconfig_path
    from gpustack.runners.kubeconfig import kube_from_file

    path = kubeconfig_path(cfg.cluster.name)
    if not path.is_file():
        raise StageError(f"no admin kubeconfig at {path}: the Secrets cannot be rewritten", stage="rewrite",
                         hint="fetch it again (gpustack up --only control-plane), then run the rotation again")  # fmt: skip
    return kube_from_file(path, request_timeout=60)


def rotate(cfg: Config, opts: RotateOptions, console: Console) -> RotateResult:
    """Check, then run the `secrets-rotate-key` sequence with the one engine."""
    from gpustack.cluster.key_rotation import refuse_without_encryption
    from gpustack.engine.run import run

    refuse_without_encryption(cfg)
    run_opts = opts.run_options(PLAN.stages, limit=[n.name for n in cfg.control_planes])
    result = run(PLAN, cfg, run_opts, console, steps=steps(cfg, lambda: admin_kube(cfg)))
    return RotateResult(result.run_dir, result.summaries)
