"""The CLI's shape: one module per command, registered in app.py, no module importing app back."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

import gpustack.cli
from gpustack import __version__
from gpustack.cli.app import ORDER, app
from gpustack.cli.options import CheckArgs
from gpustack.commands.up import PLAN as UP
from gpustack.diagnose.registry import LAYERS

CLI = Path(gpustack.cli.__file__).parent
SHARED = {"__init__", "app", "options", "diagnose"}  # not commands


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_module_imports_app_back() -> None:
    for path in CLI.glob("*.py"):
        if path.stem != "app":
            assert "gpustack.cli.app" not in _imports(path), path.name


def test_every_command_module_is_registered_and_every_command_has_a_module() -> None:
    registered = {c.callback.__module__.rsplit(".", 1)[1] for c in app.registered_commands if c.callback}
    # command groups (`gpustack bundle list`): one module holds the group's Typer
    for group in app.registered_groups:
        assert group.typer_instance is not None
        callbacks = [c.callback for c in group.typer_instance.registered_commands if c.callback]
        registered |= {cb.__module__.rsplit(".", 1)[1] for cb in callbacks}
    modules = {p.stem for p in CLI.glob("*.py")} - SHARED
    assert registered == modules


def _options(name: str) -> set[str]:
    command = typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]
    return {p.name for p in command.params}


def test_verify_and_doctor_share_one_definition_of_their_options() -> None:
    shared = set(CheckArgs.__dataclass_fields__)
    assert shared <= _options("verify") and shared <= _options("doctor")
    assert _options("verify") - shared == {"load", "no_workload"}
    assert _options("doctor") - shared == {"fix", "yes", "bundle"}


# --- CLI-wide rules: the one test that walks every command is tests/unit/cli/test_cli_rules.py ---------


def test_stage_and_layer_options_list_their_choices() -> None:
    out = CliRunner().invoke(app, ["up", "--help"], env={"COLUMNS": "80"}, terminal_width=80).output
    flat = " ".join(out.split())
    assert ", ".join(UP.stage_ids) in flat, out
    for command in ("verify", "doctor"):
        out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"}, terminal_width=80).output
        assert ", ".join(LAYERS) in " ".join(out.split()), out


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_flag(flag: str) -> None:
    r = CliRunner().invoke(app, [flag])
    assert r.exit_code == 0 and r.output == f"gpustack {__version__}\n"


def test_shell_completion_offers_commands_and_stage_names() -> None:
    env = {"_GPUSTACK_COMPLETE": "complete_bash", "COMP_WORDS": "gpustack up --only os,con", "COMP_CWORD": "3"}
    r = subprocess.run([sys.executable, "-m", "gpustack"], env={**os.environ, **env}, capture_output=True, text=True)
    assert r.stdout.split() == ["os,containerd", "os,control-plane"], r.stdout + r.stderr
    # `gpustack plan <TAB>`: the commands that have a plan (the registry in gpustack/commands/)
    env = {"_GPUSTACK_COMPLETE": "complete_bash", "COMP_WORDS": "gpustack plan node", "COMP_CWORD": "2"}
    r = subprocess.run([sys.executable, "-m", "gpustack"], env={**os.environ, **env}, capture_output=True, text=True)
    assert r.stdout.split() == ["node-add", "node-patch", "node-remove"], r.stdout + r.stderr
    # typer finds the shell among the process's parents (shellingham), as when a user types it in bash; the
    # second command (`exit $?`) keeps bash from exec-ing python, so bash stays the parent even when pytest runs detached
    shown = subprocess.run(
        ["bash", "-c", '"$0" -m gpustack --show-completion; exit $?', sys.executable], capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    script = shown.stdout
    assert (
        "_GPUSTACK_COMPLETE=complete_bash" in script
        and "complete -o default -F _gpustack_completion gpustack" in script
    )


#: what `gpustack --help` must not import: each command imports what it needs in its body
HEAVY = ("pydantic", "yaml", "jinja2", "kubernetes", "ansible_runner", "paramiko", "pyhelm3", "gpustack.config.model")


def test_the_cli_module_imports_no_heavy_module() -> None:
    code = "import sys, gpustack.cli.app; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert not {m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY}, "heavy imports at `gpustack --help`"


# --- issue 31: the order of the commands, completion for a shell named, examples that are real -------------


def test_commands_are_listed_in_the_order_a_user_needs_them() -> None:
    out = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}, terminal_width=80).output
    listed = [line.split()[0] for line in out.partition("Commands:\n")[2].splitlines() if line.strip()]
    assert listed[:5] == ["init", "plan", "up", "verify", "doctor"], listed
    # every command in ORDER, once (one not in ORDER would sort after grafana-password)
    assert listed[-1] == "grafana-password" and len(listed) == len(set(listed)) == len(ORDER) == 20, listed


@pytest.mark.parametrize(("shell", "marker"), [("zsh", "#compdef gpustack"), ("fish", "complete --command gpustack"),
                                               ("bash", "complete -o default -F _gpustack_completion gpustack")])  # fmt: skip
def test_show_completion_for_the_shell_named(shell: str, marker: str) -> None:
    r = subprocess.run([sys.executable, "-m", "gpustack", "--show-completion", shell], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert marker in r.stdout and f"complete_{shell}" in r.stdout
    assert (shell == "bash") == ("complete_bash" in r.stdout)


def test_show_completion_for_an_unknown_shell_is_refused() -> None:
    r = subprocess.run([sys.executable, "-m", "gpustack", "--show-completion", "tcsh"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert "--show-completion tcsh" in r.stderr and "bash, zsh, fish" in r.stderr


def _example_lines(cmd: typer.core.TyperCommand) -> list[str]:
    epilog = cmd.epilog or ""
    return [line.strip().split("#")[0].split("|")[0].split(">")[0] for line in epilog.splitlines()[2:]]


def test_every_example_uses_options_its_command_has() -> None:
    import shlex

    root = typer.main.get_command(app)
    seen = 0

    def walk(cmd: typer.core.TyperCommand, path: tuple[str, ...]) -> None:
        nonlocal seen
        for line in _example_lines(cmd):
            words = shlex.split(line)
            assert words[0] == "gpustack", line
            target, rest = root, words[1:]
            while rest and getattr(target, "commands", None) and rest[0] in target.commands:  # type: ignore[attr-defined]
                target, rest = target.commands[rest[0]], rest[1:]  # type: ignore[attr-defined]
            known = {o for p in target.params for o in p.opts}
            assert [w for w in rest if w.startswith("-") and w not in known] == [], line
            seen += 1
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            walk(sub, (*path, name))

    walk(root, ())
    assert seen >= 30
