"""`plan` and `up` announce their target; the embedded default is only for "no config file"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpustack.config.load import load
from gpustack.config.target import announcement, confirm_question

GOOD = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n  - {name: w1, address: 192.0.2.11}\n"

#: the CLI under test is this checkout (not whichever gpustack is installed)
THIS_CHECKOUT = {k: os.environ[k] for k in ("PYTHONPATH", "GPUSTACK_TODAY") if k in os.environ}


def test_no_file_is_this_machine_and_says_so(tmp_path: Path) -> None:
    loaded = load(None, environ={}, cwd=tmp_path)
    assert loaded.is_default
    node = loaded.config.nodes[0]
    text = announcement(loaded)
    assert text.startswith(f"target: THIS machine ({node.name}, {node.address}) as a single-node cluster")
    assert "no gpustack.yaml here" in text
    question = confirm_question(loaded, ["os", "firewall"])
    assert f"Turn THIS machine ({node.name}, {node.address}) into a Kubernetes node" in question


def test_file_target_names_file_and_nodes(tmp_path: Path) -> None:
    (tmp_path / "gpustack.yaml").write_text(GOOD)
    loaded = load(None, environ={}, cwd=tmp_path)
    assert not loaded.is_default
    assert announcement(loaded).startswith(f"target: 2 node(s) from {tmp_path / 'gpustack.yaml'} (cp1, w1)")
    assert confirm_question(loaded, ["os"]) == "Change 2 host(s): os. Continue?"


def test_many_nodes_are_abbreviated(tmp_path: Path) -> None:
    nodes = "".join(f"  - {{name: x{i}, address: 192.0.2.{i + 20}}}\n" for i in range(30))
    (tmp_path / "gpustack.yaml").write_text(GOOD + nodes)
    assert "(cp1, w1, x0, x1, x2, ... (32 in all))" in announcement(load(None, environ={}, cwd=tmp_path))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", **THIS_CHECKOUT, "HOME": str(cwd), "GPUSTACK_STATE_DIR": str(cwd / "state"), "COLUMNS": "200",
           "NO_COLOR": "1"}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "gpustack", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip


def test_plan_and_up_announce_the_target(tmp_path: Path) -> None:
    r = _cli("plan", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("target: THIS machine (")
    r = _cli("up", cwd=tmp_path)  # no terminal, no --yes: asks nothing, changes nothing
    assert r.returncode == 2 and "--yes" in r.stderr
    assert r.stdout.startswith("target: THIS machine (")
    assert not (tmp_path / "state").exists()


def test_paths_with_markup_characters_are_printed_literally(tmp_path: Path) -> None:
    conf = tmp_path / "a[/]b" / "gpustack.yaml"
    conf.parent.mkdir(parents=True)
    conf.write_text(GOOD)
    r = _cli("plan", "-c", str(conf), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"from {conf} (cp1, w1)" in r.stdout
    r = _cli("render", "-c", str(conf), "--out", "o[/]x", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "o[/]x/ansible/inventory.yaml  (" in r.stdout and "bytes)" in r.stdout
    r = _cli("init", str(tmp_path / "a[/]b" / "new.yaml"), cwd=tmp_path)
    assert r.returncode == 0 and "a[/]b/new.yaml" in r.stdout, r.stderr
