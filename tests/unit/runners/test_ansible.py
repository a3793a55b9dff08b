"""ansible-runner kwargs (pure) and the event tracker, fed events shaped like ansible-runner's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpustack.errors import StageError
from gpustack.runners import ansible as ar
from gpustack.runners.ansible import AnsibleSettings, StageTracker, build_runner_kwargs, run_playbook

SETTINGS = ar.AnsibleSettings(known_hosts=Path("/k/known_hosts"), connect_timeout=7)


def kwargs(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "private_data_dir": Path("/run/x/ansible"),
        "project_dir": Path("/src/playbooks"),
        "playbook": "site.yml",
        "inventory": {"all": {"hosts": {"a": {}}}},
        "extravars": {"gpustack_pod_cidr": "10.244.0.0/16", "gpustack_single_node": True},
        "tags": ["os", "firewall"],
        "settings": SETTINGS,
        "ident": "site",
    }
    base.update(over)
    return ar.build_runner_kwargs(**base)


def test_kwargs_shape() -> None:
    kw = kwargs()
    assert kw["private_data_dir"] == "/run/x/ansible"
    assert kw["playbook"] == "site.yml"
    assert kw["tags"] == "os,firewall"
    assert kw["extravars"]["gpustack_single_node"] is True  # typed, not "key=value" strings
    assert "cmdline" not in kw
    assert kw["quiet"] is True


def test_kwargs_check_mode() -> None:
    kw = kwargs(settings=ar.AnsibleSettings(known_hosts=Path("/k"), check=True))
    assert kw["cmdline"] == "--check --diff"


def test_host_keys_always_verified() -> None:
    env = kwargs()["envvars"]
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert "StrictHostKeyChecking=yes" in env["ANSIBLE_SSH_ARGS"]
    assert "UserKnownHostsFile=/k/known_hosts" in env["ANSIBLE_SSH_ARGS"]
    assert "ConnectTimeout=7" in env["ANSIBLE_SSH_ARGS"]


def test_mitogen_strategy_from_the_installed_package_or_ansibles_own() -> None:
    env = ar.ansible_env(ar.AnsibleSettings(known_hosts=Path("/k"), mitogen=True))
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    # the plugin directory of the Mitogen that pyproject.toml installs, not a copy of it
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()
    assert "site-packages" in env["ANSIBLE_STRATEGY_PLUGINS"] or "ansible_mitogen" in env["ANSIBLE_STRATEGY_PLUGINS"]
    assert ar.strategy_env(mitogen=True).items() <= env.items() and ar.strategy_env(mitogen=False) == {}
    off = ar.ansible_env(ar.AnsibleSettings(known_hosts=Path("/k"), mitogen=False))
    assert "ANSIBLE_STRATEGY" not in off and "ANSIBLE_STRATEGY_PLUGINS" not in off
    # host keys are verified the same way with either strategy (Mitogen's ssh reads ANSIBLE_SSH_ARGS)
    assert env["ANSIBLE_SSH_ARGS"] == off["ANSIBLE_SSH_ARGS"]


def test_without_mitogen_installed_the_run_falls_back_to_the_linear_strategy(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ansible_mitogen" else real(name, *a)
    )
    assert ar.mitogen_strategy_dir() is None
    env = ar.ansible_env(ar.AnsibleSettings(known_hosts=Path("/k"), mitogen=True))
    assert "ANSIBLE_STRATEGY" not in env


def ev(kind: str, t: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "created": f"2026-11-21T10:00:{t}", "event_data": data}


EVENTS = [
    ev("playbook_on_start", "00.000"),
    ev("playbook_on_play_start", "00.000", play="os"),
    ev("playbook_on_task_start", "01.000", task="sysctl"),
    ev("runner_on_ok", "02.000", host="cp1", task="sysctl", res={"changed": True}),
    ev("runner_on_ok", "02.500", host="w1", task="sysctl", res={"changed": False}),
    ev("runner_on_skipped", "02.600", host="w1", task="swap"),
    ev("playbook_on_play_start", "05.000", play="firewall"),
    ev("runner_on_failed", "06.000", host="w1", task="apply chain", res={"msg": "iptables: Permission denied"}),
    ev("runner_on_failed", "06.100", host="cp1", task="probe", ignore_errors=True, res={"msg": "ignored"}),
    ev(
        "runner_on_unreachable",
        "06.200",
        host="w2",
        task="apply chain",
        res={"msg": "ssh: connect to host w2 port 22: Connection refused"},
    ),
    ev("playbook_on_stats", "07.000", changed={"cp1": 1}),
]


def test_tracker_per_stage_results() -> None:
    seen: list[tuple[str, str | None, str | None]] = []
    t = ar.StageTracker(lambda s, h, task: seen.append((s, h, task)))
    assert all(t.handle(e) is True for e in EVENTS)  # True keeps events in the artifacts
    os_, fw = t.stages["os"], t.stages["firewall"]
    assert os_.changed == {"cp1": 1} and os_.hosts == {"cp1", "w1"}
    assert os_.elapsed == pytest.approx(5.0)
    assert os_.status == "changed"
    assert fw.status == "failed" and fw.elapsed == pytest.approx(2.0)
    assert [(f.host, f.unreachable) for f in t.failures] == [("w1", False), ("w2", True)]
    assert ("os", "cp1", "sysctl") in seen


def test_failures_become_stage_error_naming_host_and_stage(tmp_path: Path) -> None:
    t = ar.StageTracker()
    for e in EVENTS:
        t.handle(e)
    result = ar.PlaybookResult(2, "failed", t.stages, t.failures, tmp_path)
    with pytest.raises(StageError) as ei:
        result.raise_for_failures()
    err = ei.value
    assert err.stage == "firewall" and err.hosts == ("w1", "w2")
    assert "stage 'firewall' failed on w1, w2" in err.message
    assert "Permission denied" in err.message
    assert err.hint and str(tmp_path / "stdout") in err.hint


def test_nonzero_rc_without_failures_still_raises(tmp_path: Path) -> None:
    with pytest.raises(StageError):
        ar.PlaybookResult(4, "failed", {}, [], tmp_path).raise_for_failures()


def test_success_does_not_raise(tmp_path: Path) -> None:
    ar.PlaybookResult(0, "successful", {}, [], tmp_path).raise_for_failures()


def test_stats_catch_a_failed_host_without_event(tmp_path: Path) -> None:
    result = ar.PlaybookResult(
        0, "successful", {}, [], tmp_path, stats={"dark": {"w2": 1}, "changed": {"cp": 2, "w1": 0}}
    )
    assert result.failed_hosts() == ["w2"] and result.changed_hosts() == {"cp": 2}
    with pytest.raises(StageError) as ei:
        result.raise_for_failures()
    assert ei.value.hosts == ("w2",)


CANCEL_PLAYBOOK = """
- name: a
  hosts: localhost
  connection: local
  gather_facts: false
  tags: [a]
  tasks:
    - name: Quick
      ansible.builtin.command: "true"
      changed_when: false
- name: b
  hosts: localhost
  connection: local
  gather_facts: false
  tags: [b]
  tasks:
    - name: Slow
      ansible.builtin.command: sleep {marker}
      changed_when: false
- name: c
  hosts: localhost
  connection: local
  gather_facts: false
  tags: [c]
  tasks:
    - name: Never
      ansible.builtin.command: "true"
      changed_when: false
"""


def test_a_cancelled_run_stops_the_playbook_and_leaves_no_process(tmp_path: Path) -> None:
    """A real ansible-playbook (local connection) under the guard, cancelled while play b runs."""
    import subprocess
    import time

    marker = "61.0317"  # a sleep no one else runs: how the test finds the task's process
    project = tmp_path / "project"
    project.mkdir()
    (project / "site.yml").write_text(CANCEL_PLAYBOOK.format(marker=marker))
    wanted = {"cancel": False}

    def listener(stage: str, host: str | None, task: str | None) -> None:
        if stage == "b" and task == "Slow":
            wanted["cancel"] = True

    kwargs = build_runner_kwargs(
        private_data_dir=tmp_path / "run",
        project_dir=project,
        playbook="site.yml",
        inventory={"all": {"hosts": {"localhost": {"ansible_python_interpreter": sys.executable}}}},
        extravars={},
        tags=(),
        settings=AnsibleSettings(known_hosts=tmp_path / "known_hosts"),
        ident="cancel",
    )
    t0 = time.monotonic()
    result = run_playbook(kwargs, StageTracker(listener), cancel=lambda: wanted["cancel"])
    assert result.status == "canceled"
    assert time.monotonic() - t0 < 50, "the run waited for the slow task instead of being cancelled"
    assert result.stages["a"].ended is not None
    assert result.last_stage is not None and result.last_stage.stage == "b"
    assert "c" not in result.stages
    assert "gpustack.runners.guard" in (tmp_path / "run" / "guard" / "ansible-playbook").read_text()
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "", f"the task's process outlived the cancelled run: {left.stdout}"


# ---------------------------------------------------------------- the preflight's facts, from events
def _facts_event(host: str, facts: dict[str, Any], task: str = "Collect facts as root") -> dict[str, Any]:
    """A runner_on_ok event of a gpustack_facts task, as ansible-runner reports it."""
    res = {"changed": False, "facts": facts}
    data = {"host": host, "task": task, "task_action": "gpustack_facts", "res": res}
    return {"event": "runner_on_ok", "event_data": data}


ROOT = {"is_root": False, "sudo_nopasswd": True, "peers": {}, "firewall": {"jump": True}, "kernel": "6.1"}
LOGIN = {"is_root": False, "sudo_nopasswd": False, "peers": {"10.0.0.2": True}, "sources": [], "firewall": None}


def test_a_host_has_the_facts_of_its_one_pass_unless_it_failed(tmp_path: Path) -> None:
    """playbooks/preflight.yml: root's pass (sudo allowed it), or the login user's after root's failed and was
    ignored (sudo refused); a host that failed anywhere, the pass's own re-raised failure included, has none."""
    t = StageTracker()
    t.handle({"event": "playbook_on_play_start", "event_data": {"play": "preflight"}})
    t.handle(_facts_event("done", ROOT))
    refused = {"host": "nosudo", "task": "Collect facts as root", "ignore_errors": True,
               "res": {"msg": "Missing sudo password"}}  # fmt: skip
    t.handle({"event": "runner_on_failed", "event_data": refused})
    t.handle(_facts_event("nosudo", LOGIN, task="Collect facts as the login user"))
    t.handle(_facts_event("failed", {**LOGIN, "sudo_nopasswd": True}, task="Collect facts as the login user"))
    failed = {"host": "failed", "task": "Report why the root pass failed where sudo works", "res": {"msg": "boom"}}
    t.handle({"event": "runner_on_failed", "event_data": failed})
    t.handle({"event": "runner_on_ok", "event_data": {"host": "done", "task_action": "command", "res": {"facts": {}}}})
    facts = t.host_facts()
    assert sorted(facts) == ["done", "nosudo"]
    assert facts["done"] == ROOT and facts["nosudo"] == LOGIN
    assert [(f.host, f.message) for f in t.failures] == [("failed", "boom")], "the ignored root pass is no failure"
    result = ar.PlaybookResult(0, "successful", t.stages, t.failures, tmp_path, host_facts=facts)
    result.write_facts(tmp_path / "facts")
    assert sorted(p.name for p in (tmp_path / "facts").iterdir()) == ["done.json", "nosudo.json"]
    assert oct((tmp_path / "facts" / "done.json").stat().st_mode & 0o777) == "0o600"
    assert json.loads((tmp_path / "facts" / "done.json").read_text()) == facts["done"]


def test_a_failed_command_is_reported_with_its_own_last_stderr_line() -> None:
    """ansible-core's command module fails with msg "non-zero return code" and the program's stderr beside it."""
    res = {"msg": "non-zero return code", "rc": 4, "stderr": "applying\niptables-restore: line 3 failed", "stdout": ""}
    assert ar._message(res) == "non-zero return code: iptables-restore: line 3 failed"
    assert ar._message({"msg": "non-zero return code", "stderr": ""}) == "non-zero return code"
    assert ar._message({"msg": "Unable to restart service x", "stderr": "ignored"}) == "Unable to restart service x"
