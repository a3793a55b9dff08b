"""How the engine runs the stages that reach the hosts: the SSH host-key gate, one run of a shipped
playbook with the stages' tags, the host limit and the converged hosts left out (with progress and
cancellation on a signal), and the preflight (facts collected read-only, then checked)."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from gpustack.checks import preflight as pf
from gpustack.checks import sources
from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.console import Console, literal
from gpustack.engine.options import RunOptions
from gpustack.engine.plan import CommandPlan, Stage, targets
from gpustack.engine.progress import Progress
from gpustack.engine.steps import StageSummary
from gpustack.errors import Interrupted
from gpustack.paths import ensure_private_dir, kubeconfig_path, resource_dir, state_dir
from gpustack.render import converge
from gpustack.render.ansible import extravars, host_vars, inventory
from gpustack.render.encryption_keys import run_extravars
from gpustack.runners import ansible as ar
from gpustack.runners import pinned_collections, ssh


def host_key_gate(cfg: Config, opts: RunOptions, console: Console) -> None:
    """Every SSH node's host key known (or, when asked, recorded) before anything connects."""
    chosen = set(targets(cfg, opts.limit))
    hosts = [(n.address, n.port) for n in cfg.nodes if n.connection == "ssh" and n.name in chosen]
    if not hosts:
        return
    accept = opts.accept_new_host_keys or cfg.ssh.accept_new_host_keys
    results = ssh.check_host_keys(hosts, cfg.ssh.known_hosts, accept_new=accept, timeout=cfg.ssh.connect_timeout)
    for r in results:
        if r.status == "recorded":
            console.warn(f"recorded new host key for {r.host}:{r.port} {r.fingerprint} in {cfg.ssh.known_hosts}")
    ssh.raise_for_host_keys(results, cfg.ssh.known_hosts.expanduser())


def _settings(
    cfg: Config, opts: RunOptions, *, check: bool, control_dir: Path | None = None, mitogen: bool = True
) -> ar.AnsibleSettings:
    return ar.AnsibleSettings(
        known_hosts=cfg.ssh.known_hosts.expanduser(),
        connect_timeout=cfg.ssh.connect_timeout,
        verbosity=opts.verbosity,
        check=check,
        collections_path=pinned_collections.default_search_path(),
        control_dir=control_dir,
        mitogen=mitogen and cfg.ssh.mitogen,
    )


def stage_inventory(cfg: Config, ev: Mapping[str, Any]) -> dict[str, Any]:
    """The inventory with each host's per-stage input digests (see gpustack/render/converge.py)."""
    return converge.with_stage_digests(inventory(cfg), dict(ev), converge.tree_digest(resource_dir("playbooks")))


def stage_hosts(
    cfg: Config, opts: RunOptions, stage_ids: list[str], facts: Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Which hosts each stage visits: all of them with --full or without preflight facts; else
    only those where the preflight did not find the stage converged. The control-plane stage
    always runs while this machine has no copy of the cluster's kubeconfig (it delivers one)."""
    only = {s: list(n) for s, n in opts.stage_nodes.items()} or None
    if (opts.full or not facts) and only is None:
        return {}, {}
    must = [] if kubeconfig_path(cfg.cluster.name).exists() else ["control-plane"]
    known = {} if opts.full else dict(facts)
    return converge.stage_hosts(stage_ids, inventory(cfg), known, must_run=must, only=only)


#: the playbooks that write the control planes' EncryptionConfiguration (the control_plane role): they make the
#: cluster's key on its first run; every other playbook gets the keys there are, if any
KEYED_PLAYBOOKS = frozenset({"site.yml", "node-add.yml", "security-apply.yml"})


def run_playbook(
    plan: CommandPlan,
    cfg: Config,
    opts: RunOptions,
    *,
    playbook: str,
    tags: Sequence[str],
    private_dir: Path,
    ident: str,
    check: bool,
    console: Console,
    stage_patterns: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
    control_dir: Path | None = None,
    mitogen: bool = True,
) -> ar.PlaybookResult:
    """One run of a shipped playbook with the stages' tags and the run's host limit, with progress
    (``mitogen``: through Mitogen where the config's ``ssh.mitogen`` allows it)."""
    kubeconfig = kubeconfig_path(cfg.cluster.name)
    ev = extravars(cfg, kubeconfig_dest=kubeconfig)
    # the stage digests cover the config's inputs, not a command's own variables: a node that
    # `node add` prepared is converged for the next `up`
    inv = stage_inventory(cfg, ev)
    undeclared = sorted(set(opts.extravars) - set(ev) - set(plan.extravars))
    if undeclared:  # a command's variables are its plan's contract with the playbooks
        raise ValueError(f"{plan.command}: playbook variables its plan does not declare: {', '.join(undeclared)}")
    ev.update(opts.extravars)
    ev.update(extra or {})  # this run's own (the preflight's sources to probe)
    # the cluster's encryption key, made once by a run that builds control planes and kept (never in the stage digests)
    ev.update(run_extravars(cfg, make=playbook in KEYED_PLAYBOOKS))
    if stage_patterns:
        ev["gpustack_stage_hosts"] = dict(stage_patterns)
    kwargs = ar.build_runner_kwargs(
        private_data_dir=private_dir,
        project_dir=resource_dir("playbooks"),
        playbook=playbook,
        inventory=inv,
        extravars=ev,
        tags=tags,
        settings=_settings(cfg, opts, check=check, control_dir=control_dir, mitogen=mitogen),
        ident=ident,
    )
    if opts.limit:
        kwargs["limit"] = ",".join(targets(cfg, opts.limit))
    with Progress(console) as progress, _cancel_on_signal(console) as cancelled:
        return ar.run_playbook(kwargs, ar.StageTracker(progress, on_end=progress.end), cancel=cancelled)


@contextmanager
def _cancel_on_signal(console: Console) -> Iterator[Callable[[], bool]]:
    """While a playbook runs, SIGINT/SIGTERM only ask ansible-runner to cancel it (it then kills
    the playbook's process group and reports "canceled"); raising from a signal handler inside
    ansible-runner's loop would leave ansible-playbook running."""
    flag = {"set": False}

    def ask(signum: int, frame: FrameType | None) -> None:
        if not flag["set"]:
            console.warn("interrupting: stopping the playbook run (the summary follows)")
        flag["set"] = True

    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    old = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield lambda: flag["set"]
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def run_preflight(
    plan: CommandPlan,
    cfg: Config,
    opts: RunOptions,
    run_dir: Path,
    console: Console,
    *,
    control_dir: Path | None = None,
) -> tuple[dict[str, Any], list[Finding]]:
    """Collect every host's facts (read-only) and check them; returns (facts by node, findings)."""
    facts_dir = ensure_private_dir(run_dir / "facts")
    # what the selected stages will download, tried from every host (P24, P25)
    probes = sources.probe_list(cfg, [s.id for s in opts.stages], full=opts.full, run_vars=opts.extravars)
    # the hosts' SSH logins while ansible-playbook starts (runners/sshmux.py)
    settings = _settings(cfg, opts, check=False, control_dir=control_dir)
    with ar.early_masters(settings, host_vars(cfg, targets(cfg, opts.limit))):
        result = run_playbook(
            plan, cfg, opts, playbook="preflight.yml", tags=(), private_dir=run_dir / "ansible-preflight",
            ident="preflight", check=False, console=console,
            extra={"gpustack_preflight_sources": probes}, control_dir=control_dir,
            # one task per host: starting Mitogen on each host (~2 s on the test bed) costs more than it saves
            mitogen=False,
        )  # fmt: skip
    result.write_facts(facts_dir)  # the run record
    facts = {name: result.host_facts[name] for name in targets(cfg, opts.limit) if name in result.host_facts}
    if result.status == "canceled":
        raise Interrupted("interrupted during the preflight; nothing was changed")
    if result.failures and not facts:
        result.raise_for_failures()
    findings = pf.run_checks(cfg, facts, nodes=targets(cfg, opts.limit))
    for f in result.failures:
        findings.append(
            Finding(
                "P00-facts",
                "host",
                "fail",
                f"could not collect facts: {f.message}",
                host=f.host,
                fix="check SSH access and sudo on that host",
            )
        )
    return facts, pf.apply_ignores(findings, list(opts.ignore_preflight) + list(cfg.preflight.ignore))


def ansible_stages(
    plan: CommandPlan,
    stages: list[Stage],
    cfg: Config,
    opts: RunOptions,
    run_dir: Path,
    console: Console,
    facts: Mapping[str, Any],
    *,
    control_dir: Path | None = None,
) -> tuple[list[StageSummary], ar.PlaybookResult]:
    ensure_private_dir(kubeconfig_path(cfg.cluster.name).parent)
    ensure_private_dir(state_dir() / "bin")  # the helm stage installs this machine's Helm here
    ids = [s.id for s in stages]
    patterns, converged = stage_hosts(cfg, opts, ids, facts) if plan.converges else ({}, {})
    done = sorted(s for s, p in patterns.items() if p == converge.NO_HOSTS)
    if done:
        console.print(f"converged, nothing to do: {literal(', '.join(done))} [dim](--full visits them anyway)[/dim]")
    if _nothing_to_do(cfg, opts, ids, patterns):
        # every stage converged on every host (and this machine's Helm is the pinned one): no playbook run
        rows = [StageSummary(sid, "ok", 0.0, note=_note(converged.get(sid))) for sid in ids]
        return rows, ar.PlaybookResult(0, "successful", {}, [], run_dir / "ansible")
    first = not (run_dir / "ansible").exists()
    result = run_playbook(
        plan, cfg, opts, playbook=plan.playbook, tags=ids, private_dir=run_dir / ("ansible" if first else f"ansible-{ids[0]}"),
        ident=plan.playbook.removesuffix(".yml"), check=opts.dry_run, console=console, stage_patterns=patterns,
        control_dir=control_dir,
    )  # fmt: skip
    rows = []
    for sid in ids:
        st = result.stages.get(sid)
        note = _note(converged.get(sid))
        if st is None:
            # a play that never started ran nothing, whatever the reason
            rows.append(StageSummary(sid, "not run", 0.0, note=note))
            continue
        status = st.status
        if result.status == "canceled" and not st.failures and (st.ended is None or st is result.last_stage):
            status = "interrupted"
        rows.append(StageSummary(sid, status, st.elapsed, st.changed_total, sorted(st.hosts), note, dict(st.changed)))
    return rows, result


def _note(hosts: Sequence[str] | None) -> str:
    return f"converged on {', '.join(hosts)}" if hosts else ""


def _nothing_to_do(cfg: Config, opts: RunOptions, ids: Sequence[str], patterns: Mapping[str, str]) -> bool:
    """True when the playbook run would visit no host: every stage's play is left with no host
    (:func:`stage_hosts`) and, when the helm stage is selected, its play for this machine would find
    the pinned Helm installed (the check that play makes first; it changes nothing then)."""
    if not ids or any(patterns.get(sid) != converge.NO_HOSTS for sid in ids):
        return False
    if "helm" not in ids:
        return True
    ev = {**extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name)), **opts.extravars}
    return (
        controller_helm_version(Path(ev["gpustack_controller_bin_dir"]) / "helm") == f"v{ev['gpustack_helm_version']}"
    )


def controller_helm_version(helm: Path) -> str | None:
    """What ``helm version --template {{ .Version }}`` prints for this machine's Helm (as the helm
    role reads it, playbooks/roles/helm/tasks/main.yml); None when it is missing or does not answer."""
    if not helm.is_file():
        return None
    try:
        proc = subprocess.run(
            [str(helm), "version", "--template", "{{ .Version }}"],
            capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None
