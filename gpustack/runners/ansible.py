"""Ansible through ansible-runner.

``build_runner_kwargs`` is pure (unit-tested as a dict); ``StageTracker`` turns runner events into
per-stage progress and results (pure, fed recorded events in tests); ``run_playbook`` is the thin
I/O shell around ``ansible_runner.run``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpustack.errors import StageError
from gpustack.paths import make_tree_private
from gpustack.runners import sshmux

SSH_ARGS = "-o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=15"


@dataclass(frozen=True)
class AnsibleSettings:
    known_hosts: Path
    connect_timeout: int = 10
    forks: int = 50
    verbosity: int = 0
    check: bool = False
    #: collection roots ansible-playbook searches, in order (gpustack.runners.pinned_collections);
    #: empty: ansible-core's own defaults
    collections_path: tuple[Path, ...] = ()
    #: this run's own SSH control directory (gpustack.runners.sshmux); None: Ansible's default
    control_dir: Path | None = None
    #: run the tasks through Mitogen for Ansible's ``mitogen_linear`` strategy (config ``ssh.mitogen``)
    mitogen: bool = False


def mitogen_strategy_dir() -> Path | None:
    """Where the installed Mitogen for Ansible keeps its strategy plugins (found without importing it);
    None when it is not installed."""
    spec = importlib.util.find_spec("ansible_mitogen")
    for root in (spec.submodule_search_locations or []) if spec else []:
        plugins = Path(root) / "plugins" / "strategy"
        if (plugins / "mitogen_linear.py").is_file():
            return plugins
    return None


def strategy_env(*, mitogen: bool) -> dict[str, str]:
    """The variables that choose Ansible's strategy: Mitogen's ``mitogen_linear`` where asked for and installed
    (one Python per host and connection kept for the whole run, modules imported once: the same tasks and
    results as the linear strategy at about half the wall time, docs/decisions.md "Mitogen"); else none, and
    Ansible runs its own linear strategy."""
    strategy = mitogen_strategy_dir() if mitogen else None
    if strategy is None:
        return {}
    return {"ANSIBLE_STRATEGY_PLUGINS": str(strategy), "ANSIBLE_STRATEGY": "mitogen_linear"}


def ssh_args(settings: AnsibleSettings) -> str:
    """The options of every ssh Ansible runs (``ANSIBLE_SSH_ARGS``), and of the run's early masters
    (:func:`gpustack.runners.sshmux.open_masters`)."""
    return (
        f"{SSH_ARGS} -o UserKnownHostsFile={settings.known_hosts} -o StrictHostKeyChecking=yes"
        f" -o ConnectTimeout={settings.connect_timeout}"
    )


@contextlib.contextmanager
def early_masters(settings: AnsibleSettings, hosts: Sequence[Mapping[str, Any]]) -> Iterator[None]:
    """While the block runs: each SSH host's ControlMaster started at its beginning in the settings' control
    directory, with Ansible's ssh options (:func:`gpustack.runners.sshmux.open_masters`: the login happens while
    ansible-playbook starts), and their clients reaped at its end (the masters stay, for the directory's close).
    Nothing without a control directory."""
    started = (
        []
        if settings.control_dir is None
        else sshmux.open_masters(settings.control_dir, hosts, shlex.split(ssh_args(settings)))
    )
    try:
        yield
    finally:
        sshmux.reap(started)


def ansible_env(settings: AnsibleSettings) -> dict[str, str]:
    """Environment for ansible-playbook. Host keys are always verified against known_hosts:
    gpustack has already checked (or, when asked, recorded) every key before Ansible runs."""
    env = {
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_SSH_ARGS": ssh_args(settings),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_FORKS": str(settings.forks),
        "ANSIBLE_TIMEOUT": str(settings.connect_timeout),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PYTHON_INTERPRETER": "auto_silent",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
    }
    if settings.control_dir is not None:
        # the run's ControlMaster sockets where the run (and the guard) can end them: see runners/sshmux.py
        env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(settings.control_dir)
    env.update(strategy_env(mitogen=settings.mitogen))
    if settings.collections_path:
        # exactly the roots the engine checked the pinned collections in; no ansible.cfg or sys.path adds others
        env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(str(p) for p in settings.collections_path)
        env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "False"
    return env


def build_runner_kwargs(
    *,
    private_data_dir: Path,
    project_dir: Path,
    playbook: str,
    inventory: Mapping[str, Any],
    extravars: Mapping[str, Any],
    tags: Sequence[str],
    settings: AnsibleSettings,
    ident: str,
) -> dict[str, Any]:
    """The keyword arguments for ``ansible_runner.run``; no I/O."""
    cmdline = ["--check", "--diff"] if settings.check else []
    kwargs: dict[str, Any] = {
        "private_data_dir": str(private_data_dir),
        "project_dir": str(project_dir),
        "playbook": playbook,
        "inventory": dict(inventory),
        "extravars": dict(extravars),
        "envvars": ansible_env(settings),
        "ident": ident,
        "quiet": True,
        "verbosity": settings.verbosity,
        # pexpect_timeout: how often ansible-runner polls for a cancel (Ctrl-C) while nothing is printed
        "settings": {"suppress_ansible_output": True, "job_timeout": 0, "pexpect_timeout": 1},
    }
    if tags:
        kwargs["tags"] = ",".join(tags)
    if cmdline:
        kwargs["cmdline"] = " ".join(cmdline)
    return kwargs


# ---------------------------------------------------------------- events -> stage results
@dataclass
class TaskFailure:
    stage: str
    host: str
    task: str
    message: str
    unreachable: bool = False


@dataclass
class StageResult:
    stage: str
    started: float | None = None
    ended: float | None = None
    hosts: set[str] = field(default_factory=set)
    changed: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    failures: list[TaskFailure] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        if self.started is None or self.ended is None:
            return 0.0
        return max(0.0, self.ended - self.started)

    @property
    def changed_total(self) -> int:
        return sum(self.changed.values())

    @property
    def status(self) -> str:
        if self.failures:
            return "failed"
        return "changed" if self.changed_total else "ok"


def _ts(event: Mapping[str, Any]) -> float:
    created = event.get("created")
    if isinstance(created, str):
        try:
            return datetime.fromisoformat(created).timestamp()
        except ValueError:
            pass
    return time.time()


def _message(res: Mapping[str, Any]) -> str:
    msg, stderr = res.get("msg"), res.get("stderr")
    if msg == "non-zero return code" and isinstance(stderr, str) and stderr.strip():
        # a command's failure: its own last words say why (ansible-core's command module, plugins/modules/command.py)
        return f"{msg}: {stderr.strip().splitlines()[-1]}"
    for key in ("msg", "stderr", "module_stderr", "stdout"):
        val = res.get(key)
        if isinstance(val, str) and val.strip():
            return val.strip().splitlines()[-1] if key != "msg" else val.strip()
    return "task failed (no message; see the run log)"


Listener = Callable[[str, str | None, str | None], None]  # (stage, host, task)

#: the preflight's facts module (playbooks/library/gpustack_facts.py), by the names Ansible reports it
FACTS_MODULES = frozenset({"gpustack_facts", "ansible.legacy.gpustack_facts"})


class StageTracker:
    """Consumes ansible-runner events; one StageResult per play (play name == stage id)."""

    def __init__(self, listener: Listener | None = None, on_end: Callable[[StageResult], None] | None = None) -> None:
        self.stages: dict[str, StageResult] = {}
        self.current: StageResult | None = None
        self.task: str | None = None
        self.listener = listener
        #: called once per stage when its play ends (the next play starts, or the run's stats arrive)
        self.on_end = on_end
        self.stats: dict[str, Any] = {}
        #: what each host's gpustack_facts task returned (the preflight runs it once per host: as root where
        #: sudo allows, else as the login user; playbooks/preflight.yml)
        self.facts: dict[str, dict[str, Any]] = {}

    def _close_current(self, ts: float) -> None:
        if self.current is not None and self.current.ended is None:
            self.current.ended = ts
            if self.on_end is not None:
                self.on_end(self.current)

    def handle(self, event: Mapping[str, Any]) -> bool:
        kind = event.get("event")
        data: Mapping[str, Any] = event.get("event_data") or {}
        ts = _ts(event)
        if kind == "playbook_on_play_start":
            self._close_current(ts)
            name = str(data.get("play") or data.get("name") or "unnamed")
            self.current = self.stages.setdefault(name, StageResult(name))
            self.current.started = self.current.started or ts
            self.current.ended = None
            self.task = None
            self._notify(None)
        elif kind == "playbook_on_task_start":
            self.task = str(data.get("task") or data.get("name") or "")
            self._notify(None)
        elif kind in {"runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped"}:
            stage = self.current or self.stages.setdefault("unknown", StageResult("unknown"))
            host = str(data.get("host") or "?")
            stage.hosts.add(host)
            res: Mapping[str, Any] = data.get("res") or {}
            if kind == "runner_on_ok":
                stage.ok[host] = stage.ok.get(host, 0) + 1
                if res.get("changed"):
                    stage.changed[host] = stage.changed.get(host, 0) + 1
                if data.get("task_action") in FACTS_MODULES and isinstance(res.get("facts"), dict):
                    self.facts[host] = dict(res["facts"])
            elif kind == "runner_on_failed" and not data.get("ignore_errors"):
                stage.failures.append(TaskFailure(stage.stage, host, str(data.get("task") or self.task), _message(res)))
            elif kind == "runner_on_unreachable":
                stage.failures.append(
                    TaskFailure(stage.stage, host, str(data.get("task") or self.task), _message(res), unreachable=True)
                )
            self._notify(host)
        elif kind == "playbook_on_stats":
            self._close_current(ts)
            self.stats = dict(data)
        return True  # keep the event in the artifacts (returning None would drop it)

    def _notify(self, host: str | None) -> None:
        if self.listener and self.current:
            self.listener(self.current.stage, host, self.task)

    @property
    def failures(self) -> list[TaskFailure]:
        return [f for s in self.stages.values() for f in s.failures]

    def host_facts(self) -> dict[str, dict[str, Any]]:
        """The preflight's facts of every host that failed nowhere (a host whose root pass failed while sudo
        works, or that failed later, has none)."""
        failed = (
            {f.host for f in self.failures} | set(self.stats.get("failures") or {}) | set(self.stats.get("dark") or {})
        )
        return {host: facts for host, facts in self.facts.items() if host not in failed}


@dataclass
class PlaybookResult:
    rc: int
    status: str
    stages: dict[str, StageResult]
    failures: list[TaskFailure]
    artifact_dir: Path
    #: ansible-runner's final stats (ok/changed/failures/dark/... per host): the authority on which
    #: hosts failed, in case an event was lost
    stats: dict[str, Any] = field(default_factory=dict)
    #: the preflight's facts per host (:meth:`StageTracker.host_facts`)
    host_facts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def write_facts(self, facts_dir: Path) -> None:
        """One ``<host>.json`` (0600) per host with facts in ``facts_dir`` (0700), as the run record
        keeps them and the checks read them."""
        ensure_dir(facts_dir)
        for host, facts in self.host_facts.items():
            path = facts_dir / f"{host}.json"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(facts, out, indent=2, sort_keys=True)

    @property
    def last_stage(self) -> StageResult | None:
        """The stage whose play started last (the one running when a run was cancelled)."""
        started = [s for s in self.stages.values() if s.started is not None]
        return max(started, key=lambda s: s.started or 0.0) if started else None

    def failed_hosts(self) -> list[str]:
        bad = set(self.stats.get("failures") or {}) | set(self.stats.get("dark") or {})
        return sorted(bad | {f.host for f in self.failures})

    def changed_hosts(self) -> dict[str, int]:
        return {h: int(n) for h, n in (self.stats.get("changed") or {}).items() if n}

    def raise_for_failures(self) -> None:
        if not self.failures and self.rc == 0 and not self.failed_hosts():
            return
        if not self.failures:
            bad = self.failed_hosts()
            if bad:
                raise StageError(
                    f"ansible-playbook reports failed or unreachable host(s): {', '.join(bad)}",
                    stage="?",
                    hosts=tuple(bad),
                    hint=f"full log: {self.artifact_dir / 'stdout'}",
                )
            raise StageError(
                f"ansible-playbook ended with status {self.status} (rc={self.rc})",
                stage="?",
                hint=f"full log: {self.artifact_dir / 'stdout'}",
            )
        first = self.failures[0]
        hosts = tuple(dict.fromkeys(f.host for f in self.failures if f.stage == first.stage))
        what = "unreachable" if first.unreachable else f"task '{first.task}' failed"
        lines = [f"stage '{first.stage}' failed on {', '.join(hosts)}: {what}: {first.message}"]
        lines += [f"  also {f.host}: {f.task}: {f.message}" for f in self.failures[1:6]]
        raise StageError(
            "\n".join(lines),
            stage=first.stage,
            hosts=hosts,
            hint=f"fix the cause and run `gpustack up` again (it resumes safely); full log: {self.artifact_dir / 'stdout'}",
        )


def ensure_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def run_playbook(
    kwargs: dict[str, Any], tracker: StageTracker, *, cancel: Callable[[], bool] | None = None
) -> PlaybookResult:
    """Run one playbook. ``ansible-playbook`` runs under the guard (gpustack/runners/guard.py), so
    it never outlives gpustack; ``cancel`` is polled while it runs (True: kill it, status
    "canceled")."""
    import ansible_runner  # heavy import, only when a playbook really runs

    from gpustack.runners.guard import GRACE_SECONDS, guard_pid, write_guard

    # ansible-runner silently reuses env/extravars of an existing directory: always a fresh one.
    private = Path(kwargs["private_data_dir"])
    private.mkdir(parents=True, exist_ok=False, mode=0o700)
    # the guard is named ansible-playbook and found first on the PATH ansible-runner runs with
    # (its `binary` option would switch it to a raw mode that drops the playbook argument)
    guard_dir = ensure_dir(private / "guard")
    write_guard(guard_dir)
    envvars = dict(kwargs.get("envvars") or {})
    envvars["PATH"] = f"{guard_dir}{os.pathsep}{envvars.get('PATH', os.environ.get('PATH', os.defpath))}"
    kwargs = {**kwargs, "envvars": envvars}
    asked: dict[str, float] = {}

    def poll() -> bool:
        """Cancelling: SIGTERM the guard (it ends every process of the run), and only if it has
        not ended after its grace period let ansible-runner SIGKILL the process group."""
        if cancel is None or not cancel():
            return False
        if "at" not in asked:
            asked["at"] = time.monotonic()
            pid = guard_pid(guard_dir)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            return False
        return time.monotonic() - asked["at"] > GRACE_SECONDS + 5

    kwargs["cancel_callback"] = poll
    try:
        runner = ansible_runner.run(**kwargs, event_handler=tracker.handle)
    finally:
        # ansible-runner writes its artifacts (stdout, events, the playbook's output) with the
        # caller's umask: private, whatever it was (the umask itself is left alone, as Ansible
        # passes it to the tasks it runs on a local-connection node)
        make_tree_private(private)
    artifact_dir = Path(kwargs["private_data_dir"]) / "artifacts" / kwargs["ident"]
    return PlaybookResult(
        rc=int(runner.rc if runner.rc is not None else 1),
        status="canceled" if asked else str(runner.status),
        stages=tracker.stages,
        failures=tracker.failures,
        artifact_dir=artifact_dir,
        stats=dict(runner.stats or {}),
        host_facts=tracker.host_facts(),
    )
