"""The pinned Ansible collections are checked where ansible-playbook looks for them, before a run touches a host.

Fake collection roots (``ansible_collections/<ns>/<name>/MANIFEST.json``, the layout ansible-galaxy and
``python -m gpustack.bootstrap collections`` write) stand for site-packages, ~/.ansible/collections and
ANSIBLE_COLLECTIONS_PATH; the search order is ansible-core 2.19's (see gpustack/runners/pinned_collections.py).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine import stages as engine_stages
from gpustack.engine.options import RunOptions
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.run import run
from gpustack.errors import ConfigError
from gpustack.runners import ansible as ar
from gpustack.runners import pinned_collections as pc


def install(root: Path, versions: dict[str, str]) -> Path:
    for fqcn, version in versions.items():
        ns, name = fqcn.split(".")
        d = root / "ansible_collections" / ns / name
        d.mkdir(parents=True)
        (d / "MANIFEST.json").write_text(json.dumps({"collection_info": {"namespace": ns, "name": name,
                                                                         "version": version}}))  # fmt: skip
    return root


def test_search_order_is_site_then_configured_then_sys_path() -> None:
    site = Path("/venv/lib/python3.11/site-packages")
    got = pc.search_path({}, site=site, sys_path=["/venv/bin", str(site), ""], home="/home/u", cwd="/work")
    assert got == (
        site,
        Path("/home/u/.ansible/collections"),
        Path("/usr/share/ansible/collections"),
        Path("/venv/bin"),
    )
    env = {"ANSIBLE_COLLECTIONS_PATH": "~/c:rel/x:$OPT/ansible_collections:${OPT}/y", "OPT": "/opt"}
    got = pc.search_path(env, site=site, sys_path=[], home="/home/u", cwd="/work")
    # a path ending in ansible_collections counts as its parent; relative paths are relative to the working directory
    assert got == (site, Path("/home/u/c"), Path("/work/rel/x"), Path("/opt"), Path("/opt/y"))
    got = pc.search_path({"ANSIBLE_HOME": "/etc/a"}, site=site, sys_path=[], home="/h", cwd="/")
    assert got[1] == Path("/etc/a/collections")


def test_the_first_root_holding_a_collection_decides(tmp_path: Path) -> None:
    site = install(tmp_path / "site", pins.ANSIBLE_COLLECTIONS)
    user = install(tmp_path / "user", {c: "1.0.0" for c in pins.ANSIBLE_COLLECTIONS})
    assert all(found.ok for found in pc.survey([site, user]))
    # another version found first shadows the pinned one
    bad = pc.survey([user, site])
    assert [(f.fqcn, f.version, f.root) for f in bad] == [(c, "1.0.0", user) for c in pins.ANSIBLE_COLLECTIONS]
    assert not any(f.ok for f in bad)
    # pinned copies in a configured root (ansible-galaxy into ~/.ansible/collections) are fine too
    assert all(f.ok for f in pc.survey([tmp_path / "empty", user.parent / "nothing", site]))


def test_missing_or_other_version_stops_with_exit_2_and_the_command(tmp_path: Path) -> None:
    general, posix = "community.general", "ansible.posix"
    root = install(tmp_path / "site", {posix: "0.9.0"})
    (root / "ansible_collections/community/general").mkdir(parents=True)  # a copy without MANIFEST.json
    with pytest.raises(ConfigError) as exc:
        pc.require_pinned([root], python="/opt/my venv/bin/python")
    assert exc.value.exit_code == 2
    msg = exc.value.message
    assert f"{posix} {pins.ANSIBLE_COLLECTIONS[posix]}: version 0.9.0 in {root / 'ansible_collections'}" in msg
    assert f"{general} {pins.ANSIBLE_COLLECTIONS[general]}: a copy without a version" in msg
    assert "Nothing was changed on any host" in msg
    assert (
        exc.value.hint is not None and "'/opt/my venv/bin/python' -m gpustack.bootstrap collections" in exc.value.hint
    )
    with pytest.raises(ConfigError, match=f"{general} [0-9.]+: not installed"):
        pc.require_pinned([tmp_path / "nowhere"])
    good = install(tmp_path / "good", pins.ANSIBLE_COLLECTIONS)
    assert pc.require_pinned([good, root]) == (good, root)


def test_ansible_playbook_gets_the_checked_path_and_no_other() -> None:
    roots = (Path("/a"), Path("/b"))
    env = ar.ansible_env(ar.AnsibleSettings(known_hosts=Path("/k"), collections_path=roots))
    assert env["ANSIBLE_COLLECTIONS_PATH"] == "/a:/b"
    assert env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] == "False"
    assert "ANSIBLE_COLLECTIONS_PATH" not in ar.ansible_env(ar.AnsibleSettings(known_hosts=Path("/k")))


def isolate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's search path without the test machine's own collections: bootstrap's site directory
    is tmp_path/site, ANSIBLE_COLLECTIONS_PATH an empty directory, sys.path one without collections."""
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(pc.bootstrap, "site_dir", lambda: tmp_path / "site")
    real = pc.search_path
    monkeypatch.setattr(pc, "search_path", lambda env, **kw: real(env, **{**kw, "sys_path": [str(tmp_path / "lib")]}))


PLAN = CommandPlan("demo", "preflight and a play", "site.yml",
                   (Stage("preflight", "Preflight", "preflight", "all", "nothing"),
                    Stage("os", "OS", "ansible", "all", "packages")))  # fmt: skip
CFG = Config.model_validate({"nodes": [{"name": "cp", "address": "192.0.2.10", "role": "control-plane"}]})


@pytest.mark.parametrize("stages", [("preflight", "os"), ("os",)])
def test_the_engine_refuses_before_any_host_is_contacted(
    stages: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command that runs playbooks (up, reset, node add/remove, upgrade, doctor --fix) runs them
    through the engine (gpustack.engine.run): with the collections missing it stops there, exit 2, no run started."""
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    isolate(tmp_path, monkeypatch)
    touched: list[str] = []
    monkeypatch.setattr(engine_run, "host_key_gate", lambda *a: touched.append("ssh"))
    monkeypatch.setattr(engine_stages, "run_playbook", lambda *a, **k: touched.append("ansible"))
    buf = io.StringIO()
    with pytest.raises(ConfigError, match=r"community\.general .*: not installed") as exc:
        run(PLAN, CFG, RunOptions(stages=PLAN.select(only=list(stages))), Console(stream=buf))
    assert exc.value.exit_code == 2
    assert touched == []
    assert not (tmp_path / "state" / "runs").exists()
    # a run of Python steps only needs no collections
    py = CommandPlan("demo", "python", "site.yml", (Stage("p", "P", "python", "all", "nothing"),))
    run(py, CFG, RunOptions(stages=py.select()), Console(stream=buf), steps={"p": lambda c: []})
    # installed where bootstrap puts them: the run goes on to the host-key gate
    install(tmp_path / "site", pins.ANSIBLE_COLLECTIONS)
    monkeypatch.setattr(engine_run, "host_key_gate", lambda *a: (_ for _ in ()).throw(ConfigError("reached the gate")))
    with pytest.raises(ConfigError, match="reached the gate"):
        run(PLAN, CFG, RunOptions(stages=PLAN.select()), Console(stream=buf))


def test_up_from_a_venv_without_the_collections_exits_2_saying_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reported failure: `gpustack up` from a plain `pip install -e .` venv."""
    from gpustack.cli.app import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    isolate(tmp_path, monkeypatch)
    monkeypatch.setattr(engine_run, "host_key_gate", lambda *a: pytest.fail("a host was contacted"))
    (tmp_path / "gpustack.yaml").write_text("nodes:\n  - {name: cp, address: 192.0.2.10, role: control-plane}\n")
    with pytest.raises(SystemExit) as exc:
        main(["up", "--yes"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert "community.general" in err and "not installed" in err
    assert "-m gpustack.bootstrap collections" in err
