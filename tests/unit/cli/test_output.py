"""Output at 80 columns, as users see it in a default terminal: tables fit, the names a user copies
into a flag (check ids, stage ids, hosts) are never cut mid-word, and a report says one cause once
with a verdict that agrees with the exit code."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from gpustack.checks.model import Finding
from gpustack.cli.app import main
from gpustack.commands.up import PLAN as UP
from gpustack.console import Console
from gpustack.diagnose import registry
from gpustack.engine.progress import print_summary, report_preflight
from gpustack.engine.steps import StageSummary
from gpustack.errors import PreflightError
from tests.unit.cli.user_env import user_env

GOOD = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n  - {name: w1, address: 192.0.2.11}\n"
CLUSTER_LAYERS = "kubernetes,gpu-operator,monitoring,grafana"


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a config, an empty state directory, an 80-column terminal."""
    return user_env(tmp_path, monkeypatch, GOOD)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ei:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(ei.value.code or 0), out, err


def whole(name: str, text: str) -> bool:
    """``name`` appears unbroken, as a word of its own, on some line."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def fits(text: str, width: int = 80) -> bool:
    """Every table line fits (prose lines are soft-wrapped by the terminal, so that a long
    message or command stays one greppable line)."""
    return all(len(line) <= width for line in text.splitlines() if re.search("[┃│┏┗┡└]", line))


def test_verify_without_a_kubeconfig_says_one_cause_and_exits_3(user: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It used to print ~230 lines restating the cause in every row, mark downstream checks `fail`
    and end with "FAIL: 6 problem(s)" while exiting 3."""
    code, out, err = run(capsys, "verify", "--layer", CLUSTER_LAYERS)
    assert code == 3, out + err
    assert fits(out), out
    last = out.strip().splitlines()[-1]
    assert last.startswith("UNREACHABLE: the Kubernetes API cannot be read (no kubeconfig for cluster 'gpustack'"), last
    assert "FAIL" not in out
    specs = registry.select("verify", layers=CLUSTER_LAYERS.split(","))
    for spec in specs:
        assert whole(spec.id, out), f"{spec.id} cut or missing:\n{out}"
    # the consequence is said once, with every check it left out (issue 31: not once per layer table)
    assert out.count("not checked:") == 1, out
    assert len(out.splitlines()) < 40, f"{len(out.splitlines())} lines:\n{out}"
    # one layout for the whole report: boxed tables, or blocks, not both
    assert not ("┏" in out and "\n- check " in out), out

    code, out, _ = run(capsys, "verify", "--layer", CLUSTER_LAYERS, "-o", "json")
    report = json.loads(out)
    assert code == 3
    failed = [c["id"] for c in report["checks"] if c["status"] == "fail"]
    assert failed == ["K00-api-unreachable"], "downstream checks are skips, not failures"
    assert report["summary"] == {"pass": 0, "warn": 0, "fail": 1, "skip": len(specs) - 1}


def test_list_honours_the_output_format_and_the_selection(user: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "verify", "--list", "--check", "K00,G10", "-o", "json")
    assert code == 0
    listed = json.loads(out)
    assert listed["command"] == "verify"
    assert [c["id"] for c in listed["checks"]] == ["K00-api-unreachable", "G10-cuda-test-pod"]
    assert set(listed["checks"][0]) == {"id", "layer", "title", "reads", "fixable"}

    code, out, _ = run(capsys, "doctor", "--list", "--layer", "grafana", "--ignore", "R04")
    assert code == 0 and fits(out), out
    ids = [s.id for s in registry.select("doctor", layers=["grafana"], ignore=["R04"])]
    assert ids and all(whole(i, out) for i in ids), out
    assert "R04-panels-have-data" not in out and "K00" not in out


def test_plan_at_80_columns_keeps_stage_ids_whole(user: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "plan")
    assert code == 0 and fits(out), out
    assert all(whole(s, out) for s in UP.stage_ids), out


def test_preflight_report_and_summary_at_80_columns() -> None:
    out = io.StringIO()
    console = Console(stream=out, color=False)
    console.out.width = 80
    long_host = "gpu-node-with-a-long-name-17"
    findings = [
        Finding("P11-existing-kubernetes", "host", "fail", "a kubelet from another installation runs " * 3,
                host=long_host, evidence="/etc/kubernetes/kubelet.conf exists", fix="kubeadm reset -f " * 4),
        Finding("P19-gpu-operator", "host", "warn", "the GPU Operator has no driver container for this OS " * 2,
                host=long_host),
    ]  # fmt: skip
    with pytest.raises(PreflightError):
        report_preflight(findings, console)
    rows = [
        StageSummary("cluster:kube-prometheus-stack", "changed", 41.5, 1, note="upgraded 1 -> 2 " * 5),
        StageSummary("control-plane", "interrupted", 3.0, 0, hosts=[long_host, "gpu-node-2"]),
    ]
    print_summary(rows, console, dry_run=False)
    text = out.getvalue()
    assert fits(text), text
    for name in ("P11-existing-kubernetes", "P19-gpu-operator", long_host, "cluster:kube-prometheus-stack"):
        assert whole(name, text), f"{name} cut:\n{text}"


# --- sha256 sums, URLs and headers whole at 80 columns (issue #18) -----------------------------------


def tokens_whole(text: str) -> list[str]:
    """What must be copyable: every sha256 sum and URL, each found unbroken on one line."""
    flat = re.findall(r"(?:sha256:[0-9a-f]{64}|https?://\S+)", text)
    return flat


@pytest.mark.parametrize("argv", [["plan"], ["version"], ["bundle", "list"], ["plan", "upgrade", "--to", "1.36"]])
def test_sums_urls_and_headers_are_never_broken_at_80_columns(
    user: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from gpustack.config import compat
    from gpustack.config.model import Config

    if argv[:2] == ["plan", "upgrade"]:
        (user / "gpustack.yaml").write_text(GOOD + "versions: {kubernetes: '1.35'}\n", encoding="utf-8")
    code, out, _ = run(capsys, *argv)
    assert code == 0, out
    lines = out.splitlines()
    laid_out = [line for line in lines if re.search("[┃│┏┗┡└]", line) or line.startswith(("- ", "  "))]
    assert laid_out, out
    for line in laid_out:  # tables and blocks (a one-statement prose line, `target: ...`, the terminal folds)
        assert len(line) <= 80 or len(line.split()) == 1, f"wider than 80 and not one token: {line!r}"
    expected = [a.checksum for a in compat.artifacts(Config(nodes=[]))] + [
        a.url for a in compat.artifacts(Config(nodes=[]))
    ]
    found = tokens_whole(out)
    if argv[0] != "plan":  # plan leaves the checksums to version (issue 31)
        assert {t for t in expected if t.startswith(("sha256:", "https://"))} & set(found), out
    for token in expected:
        if token in " ".join(out.split()):
            assert any(token in line for line in lines), f"{token} broken across lines:\n{out}"
    if argv == ["version"]:
        # the matrix: its headers whole ("kubernete/s" before), the OS column not one word per line
        assert whole("kubernetes", out) and "kubernete\n" not in out
        assert any("Ubuntu 22.04 LTS" in line for line in lines), out
