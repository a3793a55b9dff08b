"""Issue 31: what comes from the user or a remote system (a config key, a value, a path, a host or node name, an API
server's answer) is printed as written, in every output path of the console and every command that styles its
lines: ``[bold red]evil[/bold red]`` is never read as console markup (which would print ``evil``, naming something
the file does not have, or raise rich's MarkupError on ``[/x]``)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpustack.checks.model import Finding
from gpustack.cluster.status import NodeStatus, ReleaseStatus, Status, print_status
from gpustack.console import Console, literal
from gpustack.engine.progress import Progress, print_summary, report_preflight
from gpustack.engine.steps import StageSummary
from gpustack.errors import PreflightError
from tests.said import said

EVIL = "[bold red]evil[/bold red]"
CLOSING = "[/oops]"  # a closing tag with no opening: rich raises MarkupError on it
REPO = Path(__file__).resolve().parents[2]


def console(color: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    c = Console(stream=out, color=color, verbosity=1)
    c.out.width = 200
    c.err = c.out  # one stream to read
    return c, out


def plain(text: str) -> str:
    """``text`` without ANSI colour codes (the markup that was meant, applied)."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.mark.parametrize("color", [False, True])
def test_every_console_path_prints_user_text_as_written(color: bool) -> None:
    c, out = console(color)
    c.info(f"info {EVIL} {CLOSING}")
    c.debug(f"debug {EVIL} {CLOSING}")
    c.say(f"say {EVIL} {CLOSING}")
    c.warn(f"warn {EVIL} {CLOSING}")
    c.error(f"error {EVIL} {CLOSING}", hint=f"hint {EVIL}")
    c.print(f"[ok]print[/ok] {literal(EVIL)} {literal(CLOSING)}")
    c.table(f"title {EVIL}", ["node", "note"], [[literal(EVIL), literal(f"a {CLOSING} b")]])
    text = plain(out.getvalue())
    for what in ("info", "debug", "say", "warn", "error", "hint", "print"):
        assert f"{what} {EVIL}" in said(text), (what, text)
    assert f"title {EVIL}" in text and f"│ {EVIL} │" in text and CLOSING in text, text


def test_literal_keeps_text_and_backslashes() -> None:
    c, out = console(False)
    for value in (EVIL, CLOSING, "C:\\path\\", "[", "a[b]c", r"\[x]"):
        out.truncate(0), out.seek(0)
        c.print(f"[ok]{literal(value)}[/ok]")
        assert out.getvalue() == value + "\n", (value, out.getvalue())


@pytest.mark.parametrize("color", [False, True])
def test_status_prints_the_api_answers_as_written(color: bool) -> None:
    c, out = console(color)
    s = Status(
        cluster="gpustack",
        reachable=True,
        api_server=f"v1.36.0-{EVIL}",
        nodes=[NodeStatus(EVIL, ["worker"], True, True, f"v1.36.0{CLOSING}", True, note=EVIL)],
        not_joined=["[b]w9[/b]"],
        releases=[ReleaseStatus("gpu-operator", EVIL, "v25.3.0", "v25.3.0", f"deployed{CLOSING}", note=EVIL)],
    )
    print_status(s, c)
    text = plain(out.getvalue())
    assert f"API server v1.36.0-{EVIL}" in text and text.count(EVIL) >= 5 and CLOSING in text and "[b]w9[/b]" in text


def test_status_of_an_unreachable_cluster_prints_the_error_as_written() -> None:
    c, out = console(False)
    print_status(Status(cluster="gpustack", reachable=False, error=f"GET /version: {EVIL} {CLOSING}"), c)
    assert f"unreachable: GET /version: {EVIL} {CLOSING}" in out.getvalue()


def test_progress_preflight_and_summary_print_host_output_as_written() -> None:
    c, out = console(False)
    Progress(c)("os", EVIL, f"TASK [{EVIL}] {CLOSING}")
    with pytest.raises(PreflightError):
        report_preflight([Finding("P01-x", "host", "fail", f"found {EVIL}", host=EVIL, evidence=CLOSING, fix=EVIL)], c)
    print_summary([StageSummary("os", "changed", 1.0, 1, hosts=[EVIL], note=CLOSING)], c, dry_run=False)
    text = out.getvalue()
    assert f"{EVIL} TASK [{EVIL}] {CLOSING}" in text and f"found {EVIL}" in text and f"({CLOSING})" in text, text


def run(args: list[str], cwd: Path, *, color: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSTACK_") and k not in ("NO_COLOR", "CI")}
    env.update(HOME=str(cwd), GPUSTACK_STATE_DIR=str(cwd / "state"), COLUMNS="200", PYTHONPATH=str(REPO))
    if color:
        env["FORCE_COLOR"] = "1"
    else:
        env["NO_COLOR"] = "1"
    return subprocess.run([sys.executable, "-m", "gpustack", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)  # fmt: skip


@pytest.mark.parametrize("color", [False, True])
def test_a_config_key_written_with_brackets_is_named_as_written(tmp_path: Path, color: bool) -> None:
    """The report of issue 31: ``"[bold red]evil[/bold red]": 1`` under ``cluster:``, in every command that reads
    the config and every output format."""
    (tmp_path / "gpustack.yaml").write_text(
        "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n"
        f'cluster:\n  "{EVIL}": 1\n  "{CLOSING}": 2\n'
    )
    for args in (["plan"], ["render", "--out", "r"], ["version", "-c", "gpustack.yaml", "-o", "json"], ["verify", "-o", "json"],
                 ["doctor", "-o", "junit"], ["status", "-o", "json"], ["up", "--yes"]):  # fmt: skip
        r = run(args, tmp_path, color=color)
        err = plain(r.stderr)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert f"gpustack.yaml:4: cluster.{EVIL}: unknown key" in said(err), (args, err)
        assert f"gpustack.yaml:5: cluster.{CLOSING}: unknown key" in said(err), (args, err)
        assert "Traceback" not in err and r.stdout == "", (args, r.stdout)


def test_a_path_written_with_brackets_is_printed_as_written(tmp_path: Path) -> None:
    name = "[bold red]evil[red]"  # a directory name cannot hold the "/" of a closing tag
    where = tmp_path / name
    where.mkdir()
    (where / "gpustack.yaml").write_text("nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n")
    r = run(["plan"], where, color=True)
    assert r.returncode == 0 and f"{name}/gpustack.yaml" in plain(r.stdout), r.stdout + r.stderr
    r = run(["render", "--out", str(where / "r")], where, color=True)
    assert r.returncode == 0 and f"{name}/r/" in plain(r.stdout), r.stdout + r.stderr
