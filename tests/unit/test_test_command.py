"""The README's test command installs into a virtual environment of its own, never into the system Python
(PEP 668: Debian 12's and Ubuntu 24.04's refuse `pip install`), and everything after runs from it
(scripts/test.sh, scripts/test-venv.sh; docs/testing.md#the-test-commands-virtual-environment).

scripts/test-venv.sh runs here against a double of `python3` (whose `-m venv` lays out a venv of doubles that
log their calls), so the test sees which interpreter every pip install goes to; about 0.2 s."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_SH = ROOT / "scripts" / "test.sh"

# the venv's python: logs each call; answers the "which Python" question with the base it was made from
VENV_PYTHON = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../calls.log"
case "$1" in -c) echo "{base}" ;; esac
exit 0
"""
# python3: `-m venv DIR` lays out a venv of doubles; `-m pip` would be the system Python's pip (refused: logged)
SYSTEM_PYTHON = """#!/bin/sh
echo "$*" >> "{log}"
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin" && sed "s|{{base}}|$FAKE_BASE|" "{proto}" > "$3/bin/python" && chmod 755 "$3/bin/python"; exit $? ;;
  "-m pip") echo "error: externally-managed-environment" >&2; exit 1 ;;
esac
case "$2" in *ensurepip*) [ -z "$FAKE_NO_VENV" ]; exit $? ;; esac
echo "$FAKE_BASE"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    co = tmp_path / "checkout"
    (co / "scripts").mkdir(parents=True)
    (co / "tests" / "realbin").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "test-venv.sh", co / "scripts" / "test-venv.sh")
    (co / "pyproject.toml").write_text('[project]\nname = "gpustack"\n')
    (co / "tests" / "realbin" / "requirements.txt").write_text("x==1 --hash=sha256:00\n")
    return co


def run(tmp_path: Path, checkout: Path, base: str = "/usr 3.11.2", **env: str) -> subprocess.CompletedProcess[str]:
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir(exist_ok=True)
    proto = tmp_path / "venv-python"
    proto.write_text(VENV_PYTHON)
    (fakebin / "python3").write_text(SYSTEM_PYTHON.format(log=tmp_path / "system.log", proto=proto))
    (fakebin / "python3").chmod(0o755)
    full = {k: v for k, v in os.environ.items() if k != "GPUSTACK_TEST_VENV"}
    full.update(PATH=f"{fakebin}:{os.environ['PATH']}", FAKE_BASE=base, **env)
    return subprocess.run(["bash", str(checkout / "scripts" / "test-venv.sh")], env=full, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def calls(venv: Path) -> list[str]:
    log = venv / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if not line.startswith("-c ")]


def test_installs_into_its_own_venv_and_reuses_it(tmp_path: Path, checkout: Path) -> None:
    venv = checkout / ".venv"
    first = run(tmp_path, checkout)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"{venv}\n"  # the path alone on stdout: test.sh reads it
    assert "creating the virtual environment" in first.stderr
    assert calls(venv) == [
        f"-m pip install -q --disable-pip-version-check -e {checkout}[test]",
        "-m pip install -q --disable-pip-version-check --no-deps --require-hashes -r "
        f"{checkout}/tests/realbin/requirements.txt",
        "-m gpustack.bootstrap collections",
    ]
    system = (tmp_path / "system.log").read_text()
    assert f"-m venv {venv}" in system and "-m pip" not in system  # nothing installed into the system Python

    (venv / "calls.log").unlink()
    again = run(tmp_path, checkout)
    assert again.returncode == 0, again.stderr
    assert "creating" not in again.stderr
    assert calls(venv) == ["-m gpustack.bootstrap collections"]  # reused, nothing to install

    (venv / "calls.log").unlink()
    (checkout / "pyproject.toml").write_text('[project]\nname = "gpustack"\ndependencies = ["x"]\n')
    changed = run(tmp_path, checkout)
    assert changed.returncode == 0, changed.stderr
    assert "creating" not in changed.stderr
    assert [c.split()[2] for c in calls(venv)[:2]] == ["install", "install"]  # the dependencies changed


def test_a_venv_of_another_python_is_made_again(tmp_path: Path, checkout: Path) -> None:
    venv = checkout / ".venv"
    assert run(tmp_path, checkout, base="/usr 3.11.2").returncode == 0
    r = run(tmp_path, checkout, base="/opt/python 3.12.1")
    assert r.returncode == 0, r.stderr
    assert "made by another Python" in r.stderr and "creating the virtual environment" in r.stderr
    assert calls(venv)[0].startswith("-m pip install")  # the log restarted with the new venv


def test_the_venv_path_can_be_chosen(tmp_path: Path, checkout: Path) -> None:
    venv = tmp_path / "elsewhere" / "venv"
    r = run(tmp_path, checkout, GPUSTACK_TEST_VENV=str(venv))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{venv}\n" and (venv / "bin" / "python").is_file()
    assert not (checkout / ".venv").exists()


def test_without_venv_support_it_names_the_package(tmp_path: Path, checkout: Path) -> None:
    r = run(tmp_path, checkout, FAKE_NO_VENV="1")
    assert r.returncode == 1
    assert "apt-get install python3-venv" in r.stderr
    assert not (checkout / ".venv").exists()


def test_test_sh_runs_everything_from_the_venv() -> None:
    """No pip install and no Python run by test.sh outside the venv; python3-venv is installed where missing;
    the README says what test.sh installs with apt and that it stops a running prometheus service."""
    text = TEST_SH.read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    assert "pip install" not in code
    assert re.findall(r"\bpython3(?![\w-])", code) == ["python3"]  # only: can python3 make a venv?
    assert "APT_PACKAGES+=(python3-venv)" in code
    assert 'venv="$(bash scripts/test-venv.sh)"' in code and 'PATH="$venv/bin:$PATH"' in code
    assert re.findall(r'"\$PY" -m pytest', code) and not re.findall(r"(?<![\"Y]) -m pytest", code)
    readme = (ROOT / "README.md").read_text()
    apt = re.search(r"APT_PACKAGES=\(([^)]*)\)", code)
    assert apt is not None
    for package in [*apt.group(1).split(), "python3-venv"]:
        assert f"`{package}`" in readme, package
    assert "stops a running `prometheus` service" in readme
