"""Host facts for doctor/verify: the read-only ``playbooks/preflight.yml`` (module
``gpustack_facts``), run over SSH through ansible-runner exactly as ``gpustack up`` runs it.

Host keys are checked first against the configured known_hosts and never recorded here: a node
whose key is unknown, changed or unreachable gets an error (``snap.errors["hosts:<node>"]``) and
is left out of the run; the others are collected. Nothing on the hosts changes.

Test seam: ``ctx.extra["host_facts"]`` (node -> facts dict, or node -> error string) replaces
the SSH collection.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpustack.config.model import Config
from gpustack.diagnose.collect import CollectContext, source
from gpustack.diagnose.snapshot import Snapshot
from gpustack.paths import ensure_private_dir, kubeconfig_path, resource_dir
from gpustack.render.ansible import extravars, host_vars, inventory
from gpustack.runners import ansible as ar
from gpustack.runners import ssh, sshmux

SEAM = "host_facts"
MAX_MESSAGE = 500


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def host_key_errors(cfg: Config) -> dict[str, str]:
    """node name -> why its SSH host key cannot be trusted (unknown, changed, unreachable).

    Same check as ``gpustack up`` but never records a key: doctor runs unattended and must not
    trust a host it has not seen."""
    ssh_nodes = [n for n in cfg.nodes if n.connection == "ssh"]
    if not ssh_nodes:
        return {}
    known_hosts = cfg.ssh.known_hosts.expanduser()
    results = ssh.check_host_keys(
        [(n.address, n.port) for n in ssh_nodes], known_hosts, accept_new=False, timeout=cfg.ssh.connect_timeout
    )
    by_target = {(r.host, r.port): r for r in results}
    errors: dict[str, str] = {}
    for node in ssh_nodes:
        r = by_target.get((node.address, node.port))
        if r is None or r.status == "known":
            continue
        if r.status == "unreachable":
            errors[node.name] = f"SSH to {node.address}:{node.port} failed: {r.detail}"
        elif r.status == "changed":
            errors[node.name] = (
                f"SSH host key of {node.address}:{node.port} CHANGED (now {r.fingerprint}); not connecting. "
                f"If the host was reinstalled: ssh-keygen -f {known_hosts} -R '{ssh.known_hosts_name(r.host, r.port)}'"
            )
        else:
            errors[node.name] = (
                f"unknown SSH host key {r.fingerprint} for {node.address}:{node.port} (not in {known_hosts}); "
                "verify it out of band, then run `gpustack up --only preflight --accept-new-host-keys`"
            )
    return errors


def run_facts_playbook(
    cfg: Config, nodes: list[str], work_dir: Path, *, timeout: float
) -> tuple[dict[str, Any], dict[str, str]]:
    """Run preflight.yml on ``nodes``; returns (facts by node, error by node)."""
    facts_dir = ensure_private_dir(work_dir / "facts")
    with sshmux.control_dir() as control:  # its SSH masters end with it (runners/sshmux.py)
        settings = ar.AnsibleSettings(
            known_hosts=cfg.ssh.known_hosts.expanduser(), connect_timeout=cfg.ssh.connect_timeout, control_dir=control
        )
        kwargs = ar.build_runner_kwargs(
            private_data_dir=work_dir / "ansible-doctor",
            project_dir=resource_dir("playbooks"),
            playbook="preflight.yml",
            inventory=inventory(cfg),
            extravars=extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name)),
            tags=(),
            settings=settings,
            ident="doctor-facts",
        )
        kwargs["limit"] = ",".join(nodes)
        # stop before the collector's own deadline so the nodes that answered are still reported
        kwargs["settings"] = {**kwargs["settings"], "job_timeout": max(5, int(timeout) - 3)}
        with ar.early_masters(settings, host_vars(cfg, nodes)):  # the logins while ansible-playbook starts
            result = ar.run_playbook(kwargs, ar.StageTracker())
    result.write_facts(facts_dir)
    facts: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for failure in result.failures:
        errors.setdefault(failure.host, _short(f"{failure.task}: {failure.message}"))
    for name in nodes:
        path = facts_dir / f"{name}.json"
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as exc:
                errors[name] = f"facts file unreadable: {exc}"
                continue
            if isinstance(data, dict):
                facts[name] = data
                errors.pop(name, None)
                continue
        errors.setdefault(
            name, f"no facts collected (ansible-runner status {result.status}, rc {result.rc}); check SSH and sudo"
        )
    return facts, errors


def gather_host_facts(ctx: CollectContext) -> tuple[dict[str, Any], dict[str, str]]:
    """(facts by node, error by node), from the test seam or over SSH."""
    seam = ctx.extra.get(SEAM)
    if isinstance(seam, Mapping):
        given = {str(k): dict(v) for k, v in seam.items() if isinstance(v, Mapping)}
        return given, {str(k): str(v) for k, v in seam.items() if not isinstance(v, Mapping)}
    errors = host_key_errors(ctx.cfg)
    reachable = [n.name for n in ctx.cfg.nodes if n.name not in errors]
    facts: dict[str, Any] = {}
    if reachable:
        with tempfile.TemporaryDirectory(prefix="gpustack-doctor-") as tmp:
            work = ensure_private_dir(Path(tmp) / "run")
            got, failed = run_facts_playbook(ctx.cfg, reachable, work, timeout=ctx.timeout)
        facts.update(got)
        errors.update(failed)
    return facts, errors


@source("hosts", layers=("host", "runtime"))
def collect_hosts(ctx: CollectContext, snap: Snapshot) -> None:
    """Fill ``snap.hosts`` (node -> gpustack_facts output); a node that fails -> ``errors["hosts:<node>"]``."""
    facts, errors = gather_host_facts(ctx)
    snap.hosts.update(facts)
    for node, message in errors.items():
        snap.errors[f"hosts:{node}"] = message
