"""The rules every command keeps (docs/commands.md, "Rules every command keeps"), held by ONE test that
walks every command and group Typer registers -- a command added later is held to them with no change
here: its help at 80 columns, and its error paths (an unknown option, an option without its value, a
value that is not a number, a file flag naming nothing, a missing required value, an extra argument, an
unknown subcommand), each run in-process through ``main``, the one place errors become exit codes."""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from gpustack.cli.app import app, main
from gpustack.cli.options import input_file_callback, output_file_callback

WIDTH = 80
#: a value's name as a user reads it: FILE, DIR, NODE, STAGE,..., ADDRESS[:PORT], NODE...
METAVAR = re.compile(r"^[A-Z][A-Z0-9_]*(\[:[A-Z]+\])?(,\.\.\.|\.\.\.)?$")
#: the commands that run Ansible, where -vv reaches it (the only ones whose -v help names Ansible)
RUN_ANSIBLE = {
    ("up",),
    ("upgrade",),
    ("reset",),
    ("node", "add"),
    ("node", "remove"),
    ("node", "patch"),
    ("doctor",),
    ("etcd", "snapshot"),
    ("etcd", "restore"),
    ("certs", "renew"),
    ("secrets", "rotate-key"),
    ("security", "apply"),
}
#: Typer's internal type names, which must never reach a user
INTERNAL = re.compile(r"<(str|path|int|float|bool|list\[[^>]*\]|int range|float range|datetime|uuid)>")


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command under ``cmd`` (Typer ships its own click: duck typing, not isinstance)."""
    out = [(path, cmd)]
    for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
        out += _walk(sub, (*path, name))
    return out


COMMANDS = _walk(typer.main.get_command(app))
IDS = [" ".join(p) or "gpustack" for p, _ in COMMANDS]


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (no gpustack.yaml), an empty state, no kubeconfig, 80 columns."""
    for name in [n for n in os.environ if n.startswith("GPUSTACK_") or n in ("KUBECONFIG", "CI")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return tmp_path


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ei:
        main(argv)
    return int(ei.value.code or 0), out.getvalue(), err.getvalue()


def value_options(cmd: Any) -> Iterator[Any]:
    for p in cmd.params:
        if p.param_type_name == "option" and not p.is_flag and not p.count and not p.hidden:
            yield p


def number_type(p: Any) -> bool:
    annotation = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    names = {getattr(a, "__name__", "") for a in (annotation, *getattr(annotation, "__args__", ()))}
    return bool(names & {"int", "float"})


def error_cases(path: tuple[str, ...], cmd: Any) -> list[tuple[list[str], str]]:
    """(argv, what the message must name) for every error path the command's declaration implies."""
    cases: list[tuple[list[str], str]] = [([*path, "--no-such-option"], "--no-such-option")]
    group = bool(getattr(cmd, "commands", None))
    if group:
        cases.append(([*path, "no-such-command"], "no-such-command"))
    for p in value_options(cmd):
        flag = p.opts[0]
        cases.append(([*path, flag], flag))  # the value is missing
        if number_type(p):
            cases.append(([*path, flag, "not-a-number"], flag))
        if p.callback in (input_file_callback, output_file_callback):
            cases.append(([*path, flag, "/nonexistent-gpustack-dir/f"], flag))
    required = [p for p in cmd.params if p.required]
    if required:  # nothing given: the first required value is asked for by name
        first = required[0]
        cases.append((list(path), first.opts[0] if first.param_type_name == "option" else first.metavar))
    elif not group and not any(p.param_type_name == "argument" for p in cmd.params):
        cases.append(([*path, "unexpected-argument"], "unexpected-argument"))
    return cases


def check_help(path: tuple[str, ...], cmd: Any) -> None:
    code, out, err = run([*path, "--help"])
    where = f"gpustack {' '.join(path)} --help"
    assert code == 0 and err == "", (where, err)
    lines = out.splitlines()
    assert all(len(line) <= WIDTH for line in lines), f"{where}: a line is wider than {WIDTH}:\n{out}"
    assert "…" not in out and "╭" not in out, f"{where}: cut or boxed:\n{out}"
    assert not INTERNAL.search(out), f"{where} shows Typer's {INTERNAL.search(out)}:\n{out}"
    broken = [line for line in lines if re.search(r"[a-z]-$", line.rstrip())]
    assert not broken, f"{where}: a word broken at its hyphen: {broken}\n{out}"
    words = set(re.findall(r"-[-\w]+", out))
    assert cmd.help, f"{where}: the command says nothing"
    # issue 31: every command listed with its whole line (click cuts a long one with "..."), no `{NODE}` in the usage
    listed = out.partition("\nCommands:\n")[2].partition("\n\n")[0].splitlines()
    assert not [line for line in listed if line.rstrip().endswith("...")], f"{where}: a description is cut:\n{out}"
    assert "{" not in lines[0], f"{where}: {lines[0]}"
    assert not re.search(r"\[default: (0|\d+\.\d+)\]", out), f"{where}: a count's or a float's default shown:\n{out}"
    assert "usual lookup" not in out and "./gpustack.yaml, $GPUSTACK_CONFIG" not in " ".join(out.split()), where
    if cmd.callback is not None and (not getattr(cmd, "commands", None) or path == ("health",)):
        assert "\n  Examples:\n    gpustack " in out, f"{where}: no example:\n{out}"
    verbose = [p for p in cmd.params if "--verbose" in p.opts]
    if verbose:
        assert ("Ansible" in (verbose[0].help or "")) == (path in RUN_ANSIBLE), f"{where}: -v says {verbose[0].help}"
    for p in cmd.params:
        if p.param_type_name == "option" and not p.hidden:
            for opt in (*p.opts, *p.secondary_opts):
                assert opt in words, f"{where} does not show {opt}:\n{out}"
            assert not p.secondary_opts, f"{where}: {p.opts} {p.secondary_opts} is a --x/--no-x pair"
            assert "-o" not in p.opts or "--output" in p.opts, f"{where}: -o is {p.opts}, not --output"
        assert p.help or p.param_type_name == "argument" or p.hidden, f"{where}: {p.name} says nothing"
        takes_value = p.param_type_name == "argument" or (not p.is_flag and not p.count)
        if takes_value and not p.hidden:
            assert p.metavar and METAVAR.match(p.metavar), f"{where}: {p.name}'s metavar is {p.metavar!r}"
            assert p.metavar in out, f"{where} does not show {p.metavar}:\n{out}"


def check_error(argv: list[str], named: str) -> None:
    code, out, err = run(argv)
    where = f"gpustack {' '.join(argv)}"
    assert code == 2, (where, code, out, err)
    assert out == "", f"{where}: an error prints nothing on stdout:\n{out}"
    assert "Traceback" not in err and err.startswith("error: "), (where, err)
    lines = err.splitlines()
    assert all(len(line) <= WIDTH for line in lines), f"{where}: wider than {WIDTH}:\n{err}"
    said = [line for line in lines if not line.startswith("  ")]  # continuation lines are indented
    assert said[0].startswith("error: ") and all(s.startswith("hint: ") for s in said[1:2]) and len(said) <= 2, (
        f"{where}: one message and at most one hint:\n{err}"
    )
    assert named in " ".join(err.split()), f"{where}: the message does not name {named}:\n{err}"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_every_command_keeps_the_cli_rules(path: tuple[str, ...], cmd: Any, user: Path) -> None:
    check_help(path, cmd)
    for argv, named in error_cases(path, cmd):
        check_error(argv, named)
    assert not (user / "state").exists(), "an error path wrote state"
    assert not list((user / "work").iterdir()), "an error path wrote into the working directory"
