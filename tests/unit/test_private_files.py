"""Every file gpustack writes under its state is private whatever the umask (issue #18: under umask 000
`runs/<ts>/run.json` and `config.json` were 0666). Run as an ordinary user under umask 000 (as root,
``nobody``: see tests/unit/unprivileged.py), through the real writers: the CLI (a run of the engine,
verify's saved snapshot and report), the library calls that write the Grafana password, the upgrade
record and known_hosts and archive the cluster's state (reset), and a real ansible-runner + ansible-playbook run whose artifacts land in a run
directory. Then every file's and directory's mode is checked."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import paramiko

from tests.unit.runners.test_ssh import _gen_key, ssh_server
from tests.unit.unprivileged import run_cli, run_unprivileged, shared_dir

CONFIG = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n  - {name: w1, address: 192.0.2.11}\n"
PLAYBOOK = """\
- name: A play
  hosts: all
  gather_facts: false
  tasks:
    - name: Say something (ansible-runner keeps its output, events and the job's env)
      ansible.builtin.debug:
        msg: hello
"""


def _write_everything(root: Path, port: int) -> dict[str, Any]:
    """In the unprivileged child (umask 000): every writer gpustack has for its state."""
    from gpustack.cluster.layer import grafana_password
    from gpustack.cluster.upgrade_record import write_progress
    from gpustack.commands.reset import archive_state
    from gpustack.config.load import load
    from gpustack.paths import new_run_dir, state_dir
    from gpustack.runners import ansible as ar
    from gpustack.runners.ssh import check_host_keys

    work, state = root / "work", root / "state"
    work.mkdir()
    (root / "home").mkdir()
    os.environ.update(GPUSTACK_STATE_DIR=str(state), HOME=str(root / "home"), NO_COLOR="1", COLUMNS="80")
    os.environ.pop("KUBECONFIG", None)
    os.chdir(work)
    (work / "gpustack.yaml").write_text(CONFIG)
    cfg = load(None).config
    grafana_password(cfg)
    write_progress(state / "clusters" / "gpustack" / "upgrade.json", {"to": "1.36.4", "done": []})
    check_host_keys([("127.0.0.1", port)], state / "known_hosts", accept_new=True, timeout=10)
    project = root / "project"
    project.mkdir()
    (project / "site.yml").write_text(PLAYBOOK)
    run = new_run_dir(state_dir())
    kwargs = ar.build_runner_kwargs(
        private_data_dir=run / "ansible", project_dir=project, playbook="site.yml",
        inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                   "ansible_python_interpreter": sys.executable}}}},
        extravars={"gpustack_x": 1}, tags=(), settings=ar.AnsibleSettings(known_hosts=state / "known_hosts"),
        ident="umask",
    )  # fmt: skip
    playbook_rc = ar.run_playbook(kwargs, ar.StageTracker()).rc
    verify = run_cli(["verify", "--layer", "kubernetes", "--save-snapshot", "snap.json", "--save", "report.json"])
    # a run of the engine (no host contacted: the cluster stage stops at the missing admin.conf)
    up = run_cli(["up", "--only", "cluster", "--skip", "preflight", "--yes", "--no-verify"])
    archive_state(cfg, forget=False)  # reset's local-state stage
    return {"playbook_rc": playbook_rc, "verify": verify, "up": up}


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def test_every_file_under_the_state_is_private_under_umask_000() -> None:
    key = paramiko.Ed25519Key.from_private_key_file(str(_gen_key()))
    with shared_dir() as root, ssh_server(key) as port:
        got = run_unprivileged(lambda: _write_everything(root, port), umask=0o000)
        assert got["playbook_rc"] == 0, got
        assert got["verify"][0] == 3, got["verify"]  # no cluster: unreachable, but both files are written
        assert got["up"][0] == 1 and "no admin kubeconfig" in got["up"][2], got["up"]
        state = _modes(root / "state")
        work = _modes(root / "work")
    files = {p: m for p, m in state.items() if not (root / "state" / p).is_dir()}
    # what each writer left: the engine's run records, Ansible's artifacts, the archived cluster state
    names = {Path(p).name for p in files}
    assert {"run.json", "config.json", "summary.json", "stdout", "grafana-admin-password", "known_hosts",
            "upgrade.json"} <= names, sorted(names)  # fmt: skip
    assert any("/archive/" in f"/{p}" for p in files), "reset archived the cluster's state"
    assert any("job_events" in p for p in files), "ansible-runner's events are there"
    loose = {p: oct(m) for p, m in state.items() if m & 0o077}
    assert not loose, f"readable or writable by others under umask 000: {loose}"
    assert state["."] == 0o700 and all(m == 0o700 for p, m in state.items() if (root / "state" / p).is_dir())
    assert all(m in (0o600, 0o700, 0o400) for m in files.values()), {p: oct(m) for p, m in files.items()}
    # files the user named: a snapshot (cluster details) is private; a report follows the umask
    assert work["snap.json"] == 0o600 and work["report.json"] == 0o666
