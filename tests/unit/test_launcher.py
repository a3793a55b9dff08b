"""scripts/gpustack, the first-run launcher: what makes it reinstall. The virtualenv here is a TEST
DOUBLE at the process boundary (bin/python and bin/gpustack are shell scripts that record their
arguments), so the launcher's own logic runs for real without a network install."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$(dirname "$0")/../calls.log"
case "$*" in
  *"pip install"*--progress-bar*) echo "Collecting typer"; echo "Collecting ansible-core"; echo "noise";;
esac
exit 0
"""
FAKE_GPUSTACK = """#!/bin/sh
echo "gpustack $*" >> "$(dirname "$(readlink -f "$0")")/../calls.log"
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the checkout's installed inputs, without .git (like a tarball)."""
    dest = tmp_path / "src"
    for name in ("gpustack", "playbooks", "values", "dashboards", "scripts"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    v = tmp_path / "venv"
    (v / "bin").mkdir(parents=True)
    for name, text in (("python", FAKE_PYTHON), ("gpustack", FAKE_GPUSTACK)):
        (v / "bin" / name).write_text(text)
        (v / "bin" / name).chmod(0o755)
    return v


def launch(checkout: Path, venv: Path, *args: str) -> tuple[str, list[str]]:
    log = venv / "calls.log"
    log.unlink(missing_ok=True)
    home = venv.parent / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "XDG_BIN_HOME"}
    env.update(GPUSTACK_VENV=str(venv), HOME=str(home))
    r = subprocess.run([str(checkout / "scripts" / "gpustack"), *args], cwd=checkout, env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stderr, log.read_text().splitlines()


def installs(calls: list[str]) -> bool:
    return any("pip install" in c and "--progress-bar" in c for c in calls)


def test_reinstalls_exactly_when_installed_contents_change(checkout: Path, venv: Path) -> None:
    err, calls = launch(checkout, venv, "version")
    assert installs(calls) and "python -m gpustack.bootstrap collections" in calls
    assert calls[-1] == "gpustack version"
    assert "[2/3] installing gpustack" in err and "collecting ansible-core" in err and "noise" not in err
    assert "[3/3] Ansible collections" in err

    _, calls = launch(checkout, venv, "version")
    assert not installs(calls) and calls == ["gpustack version"]

    # `gpustack init` / `render` write into the checkout: not an installed input, no reinstall
    (checkout / "gpustack.yaml").write_text("nodes: []\n")
    (checkout / "out").mkdir()
    (checkout / "out" / "x.yaml").write_text("x")
    assert not installs(launch(checkout, venv, "plan")[1])

    # an edit of a tracked file, then a second edit of the same file: each reinstalls
    pins = checkout / "gpustack" / "config" / "pins.py"
    pins.write_text(pins.read_text() + "\n# edit 1\n")
    assert installs(launch(checkout, venv, "version")[1])
    pins.write_text(pins.read_text() + "# edit 2\n")
    assert installs(launch(checkout, venv, "version")[1])
    assert not installs(launch(checkout, venv, "version")[1])
    (checkout / "playbooks" / "new.yml").write_text("- hosts: all\n")
    assert installs(launch(checkout, venv, "version")[1])


def test_stamp_ignores_bytecode_and_is_content_based(checkout: Path) -> None:
    def stamp() -> str:
        return subprocess.run([str(checkout / "scripts" / "gpustack"), "--source-stamp"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip

    first = stamp()
    (checkout / "gpustack" / "__pycache__").mkdir(exist_ok=True)
    (checkout / "gpustack" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert stamp() == first
    f = checkout / "values" / "README.md"
    f.write_text(f.read_text() + "x")
    assert stamp() != first


def test_new_venv_and_its_parents_are_private(tmp_path: Path, checkout: Path) -> None:
    """Under umask 000 the launcher still creates the venv and its parent directories 0700."""
    home = tmp_path / "home"
    home.mkdir()
    proto = tmp_path / "venv-proto"
    proto.mkdir()
    for name, text in (("python", FAKE_PYTHON), ("gpustack", FAKE_GPUSTACK)):
        (proto / name).write_text(text)
    # `python3 -m venv DIR` is a double that lays out the fake venv; anything else is the real python3
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        '#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = "venv" ]; then\n'
        f'  mkdir -p "$3/bin" && cp {proto}/python {proto}/gpustack "$3/bin/" && chmod 755 "$3"/bin/*; exit $?\nfi\n'
        f'exec {shutil.which("python3")} "$@"\n'
    )
    (bin_dir / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "GPUSTACK_VENV"}
    env.update(HOME=str(home), PATH=f"{bin_dir}:{os.environ['PATH']}")
    r = subprocess.run(["bash", "-c", f"umask 000; exec {checkout / 'scripts' / 'gpustack'} version"], env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "[1/3] creating the virtualenv" in r.stderr
    venv = home / ".local" / "share" / "gpustack" / "venv"
    for d in (home / ".local", home / ".local/share", home / ".local/share/gpustack", venv):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert (venv / "calls.log").read_text().splitlines()[-1] == "gpustack version"


# --- the first ten minutes: `gpustack` on the PATH after the install (issue #18) -------------------


def run_launcher(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(checkout / "scripts" / "gpustack"), *args], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_the_install_links_gpustack_into_local_bin_and_says_how_to_reach_it(
    tmp_path: Path, checkout: Path, venv: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XDG_BIN_HOME"}
    env.update(HOME=str(home), GPUSTACK_VENV=str(venv), PATH="/usr/bin:/bin")
    r = run_launcher(checkout, env, "version")
    assert r.returncode == 0, r.stderr
    link = home / ".local" / "bin" / "gpustack"
    assert link.is_symlink() and os.readlink(link) == str(venv / "bin" / "gpustack")
    flat = " ".join(r.stderr.split())
    assert f"linked {link} -> {venv / 'bin' / 'gpustack'}" in flat, r.stderr
    assert f"{home / '.local' / 'bin'} is not on your PATH" in flat and "export PATH=" in flat, r.stderr
    # the link works on its own: what the docs' next step (`gpustack init`) runs
    assert subprocess.run([str(link), "init"], capture_output=True, text=True).returncode == 0
    assert (venv / "calls.log").read_text().splitlines()[-1] == "gpustack init"
    # on the PATH: the next steps are said plainly; a second run says nothing more
    link.unlink()
    env["PATH"] = f"{home / '.local' / 'bin'}:/usr/bin:/bin"
    r = run_launcher(checkout, env, "version")
    assert "from now on: gpustack init" in r.stderr and "not on your PATH" not in r.stderr, r.stderr
    assert "linked" not in run_launcher(checkout, env, "version").stderr


def test_xdg_bin_home_is_respected_and_a_foreign_file_is_never_overwritten(
    tmp_path: Path, checkout: Path, venv: Path
) -> None:
    home, bin_dir = tmp_path / "home", tmp_path / "my-bin"
    home.mkdir()
    env = dict(os.environ, HOME=str(home), GPUSTACK_VENV=str(venv), XDG_BIN_HOME=str(bin_dir))
    assert run_launcher(checkout, env, "version").returncode == 0
    assert (bin_dir / "gpustack").is_symlink() and not (home / ".local" / "bin").exists()

    (bin_dir / "gpustack").unlink()
    (bin_dir / "gpustack").write_text("#!/bin/sh\necho mine\n")
    r = run_launcher(checkout, env, "version")
    assert r.returncode == 0 and (bin_dir / "gpustack").read_text() == "#!/bin/sh\necho mine\n"
    assert "left" in r.stderr and "alone" in r.stderr, r.stderr


def test_the_launcher_works_with_home_unset(tmp_path: Path, checkout: Path, venv: Path) -> None:
    """`HOME: unbound variable` (line 10) before: the home directory now comes from the passwd entry."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_BIN_HOME")}
    env.update(GPUSTACK_VENV=str(venv), XDG_BIN_HOME=str(tmp_path / "bin"))
    r = run_launcher(checkout, env, "version")
    assert r.returncode == 0 and "unbound variable" not in r.stderr, r.stderr
    assert (venv / "calls.log").read_text().splitlines()[-1] == "gpustack version"


def test_home_unset_and_no_passwd_home_is_a_clear_error(tmp_path: Path, checkout: Path, venv: Path) -> None:
    """A uid without a passwd entry (an arbitrary uid in a container): `getent passwd` finds nothing."""
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "getent").write_text("#!/bin/sh\nexit 2\n")  # getent's exit code for "not found"
    (fakebin / "getent").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_BIN_HOME")}
    env.update(GPUSTACK_VENV=str(venv), PATH=f"{fakebin}:{os.environ['PATH']}")
    r = run_launcher(checkout, env, "version")
    assert r.returncode == 2 and "HOME is not set" in r.stderr and "set HOME" in r.stderr, r.stderr
    assert "unbound variable" not in r.stderr and not (venv / "calls.log").exists()
