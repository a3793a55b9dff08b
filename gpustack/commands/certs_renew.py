"""``gpustack certs renew``: every control plane's kubeadm certificates renewed, one node at a time
(playbooks/certs-renew.yml, role certs_renew), then the admin kubeconfig fetched again: the `certs-renew` sequence
run by the one engine.

    reach (this machine, before the engine contacts any host): every control plane's SSH port answers, else exit 2
    -> preflight (read-only; each control plane's ``kubeadm certs check-expiration``): a control plane whose facts
       could not be read refuses the run (exit 2) before anything changes
    -> <state>/clusters/<cluster>/certs-renew.json written "running" with the renewal's start
    -> renew: one control plane at a time (kubeadm certs renew all, the static pods and kube-vip restarted, the
       API server serving the certificate in its file) -> kubeconfig: the admin kubeconfig fetched again
    -> record: "done"

Resumable: a run interrupted (or failed) is continued by the next ``gpustack certs renew``, which keeps the
interrupted run's start; a control plane renewed since that start (gpustack/cluster/renewal.py) is not renewed again; the role still
restarts its pods when its API server does not serve the certificate in its file. A run after a finished one
renews every control plane again (``kubeadm certs renew`` is unconditional by design). See docs/lifecycle.md,
"Day 365", and docs/decisions.md.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.cluster.renewal import (
    control_plane_names,
    finish_record,
    iso,
    kubeadm_facts,
    new_record,
    nodes_to_renew,
    read_record,
    record_path,
    renewal_start,
    unreachable,
)
from gpustack.engine.options import LateVars, RunFlags
from gpustack.engine.plan import PREFLIGHT, CommandPlan, Stage
from gpustack.engine.steps import StageSummary, StepContext
from gpustack.errors import ConfigError, StageError
from gpustack.paths import ensure_private_dir, write_json

if TYPE_CHECKING:
    from gpustack.config.model import Config
    from gpustack.console import Console

STAGES: tuple[Stage, ...] = (
    PREFLIGHT,
    Stage(
        "renew",
        "Renew the certificates",
        "ansible",
        "control-plane",
        "one node at a time: kubeadm certs renew all with gpustack's kubeadm configuration (certificates.validity; "
        "/etc/gpustack/kubeadm-certs.yaml, 0600); the containers of kube-apiserver, kube-controller-manager, "
        "kube-scheduler, etcd and kube-vip stopped (the kubelet starts them again); wait until the API server serves "
        "the certificate in its file and /readyz answers. A node this renewal already renewed is not renewed again",
    ),
    Stage(
        "kubeconfig",
        "Admin kubeconfig",
        "ansible",
        "control-plane",
        "the renewed /etc/kubernetes/admin.conf: the login user's ~/.kube/config on each control plane, and this "
        "machine's <state>/clusters/<cluster>/admin.conf (0600) from the first",
    ),
    Stage(
        "record",
        "This machine's record of the renewal",
        "python",
        "local",
        "<state>/clusters/<cluster>/certs-renew.json: done (written running, with the renewal's start, before the "
        "first change; failed with the reason when a stage fails)",
    ),
)

PLAN = CommandPlan(
    "certs-renew",
    "renew every control plane's kubeadm certificates one node at a time, then fetch the admin kubeconfig again; "
    "refused (exit 2, nothing changed) when a control plane does not answer on SSH or its facts cannot be read",
    "certs-renew.yml",
    STAGES,
    extravars=("gpustack_certs_renew_nodes",),
    host_notes={"control-plane": "every control-plane node"},
)


class RenewRefused(ConfigError):
    """A renewal gpustack will not start (a control plane unreachable): nothing changed, exit 2."""


@dataclass(frozen=True)
class RenewOptions(RunFlags):
    pass


@dataclass
class RenewResult:
    run_dir: Path
    summaries: list[StageSummary]
    renewed: list[str]
    record: dict[str, Any]


def refuse_unreachable(names: Sequence[str], detail: str = "") -> RenewRefused:
    return RenewRefused(
        f"control plane(s) {', '.join(names)} unreachable{': ' + detail if detail else ''}: no certificate renewed",
        hint="every control plane is renewed in one run (their certificates and the admin kubeconfig must agree): "
        "make each reachable over SSH with sudo, then run `gpustack certs renew` again",
    )


def check_reach(cfg: Config) -> None:
    """Every SSH control plane's port answers (before any host is contacted by Ansible), else RenewRefused."""
    from gpustack.runners.ssh import unreachable_ports

    hosts = {n.name: (n.address, n.port) for n in cfg.control_planes if n.connection == "ssh"}
    down = unreachable_ports(list(hosts.values()), timeout=cfg.ssh.connect_timeout)
    names = [name for name, target in hosts.items() if target in down]
    if names:
        raise refuse_unreachable(names, "; ".join(f"{a}:{p} {down[(a, p)]}" for a, p in (hosts[n] for n in names)))


def renew(cfg: Config, opts: RenewOptions, console: Console) -> RenewResult:
    """Check, then run the `certs-renew` sequence with the one engine."""
    from gpustack.engine.run import run

    path = record_path(cfg)
    validity = cfg.certificates.validity
    started = renewal_start(read_record(path), validity, datetime.now(timezone.utc))
    late = LateVars({"gpustack_certs_renew_nodes": []})
    state: dict[str, Any] = {}

    def guard(_cfg: Config, facts: Mapping[str, Any]) -> None:
        state["guarded"] = True
        missing = unreachable(cfg, facts)
        if missing:
            raise refuse_unreachable(missing, "the preflight could not read them")
        due = nodes_to_renew(cfg, facts, started)
        late.update({"gpustack_certs_renew_nodes": due})
        for name in control_plane_names(cfg):
            what = (
                "renew"
                if name in due
                else "no kubeadm certificates (no /etc/kubernetes/pki/apiserver.crt): nothing to renew"
                if kubeadm_facts(facts, name) is None
                else f"already renewed by the renewal started {iso(started)}"
            )
            console.print(f"  - {name}: {what}", markup=False)
        state["renew"] = due
        if not opts.dry_run:
            state["record"] = new_record(started, validity, due)
            ensure_private_dir(path.parent)
            write_json(path, state["record"])

    def record(ctx: StepContext) -> list[StageSummary]:
        t0 = time.monotonic()
        if ctx.opts.dry_run or "record" not in state:
            return [StageSummary("record", "not run", 0.0, note="dry run")]
        state["record"] = finish_record(state["record"], "done", datetime.now(timezone.utc))
        write_json(path, state["record"])
        return [StageSummary("record", "changed", time.monotonic() - t0, 1, note=str(path))]

    run_opts = opts.run_options(
        PLAN.stages,
        limit=control_plane_names(cfg),
        extravars=late,
        # an unreadable control plane is judged by the guard (exit 2), not as a preflight failure
        ignore_preflight=(*opts.ignore_preflight, "P00-facts"),
    )
    check_reach(cfg)  # before the engine's host-key gate, which would call an unreachable host an SSH failure
    try:
        result = run(PLAN, cfg, run_opts, console, steps={"record": record}, after_preflight=guard)
    except StageError as exc:
        if not state.get("guarded") and "unreachable" in exc.message:  # the preflight read no host: nothing changed
            raise refuse_unreachable(control_plane_names(cfg), exc.message.splitlines()[0]) from None
        if "record" in state:
            write_json(path, finish_record(state["record"], "failed", datetime.now(timezone.utc), exc.message))
            exc.hint = (
                "fix the cause, then run `gpustack certs renew` again: control planes already renewed are not "
                f"renewed again; {exc.hint or ''}"
            ).rstrip("; ")
        raise
    return RenewResult(result.run_dir, result.summaries, list(state.get("renew", [])), dict(state.get("record", {})))
