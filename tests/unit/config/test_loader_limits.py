"""The loader's bounds: file size, alias expansion, nesting, encodings, keys. Each bad file is a
ConfigError (exit 2) naming the file, found fast and in little memory (asserted)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from gpustack.config import load as load_mod
from gpustack.config.load import MAX_ERRORS_SHOWN, load
from gpustack.errors import ConfigError

#: the YAML parsers gpustack may run on: libyaml's (when PyYAML was built with it) and PyYAML's own
BACKENDS = [b for b in ("CSafeLoader", "SafeLoader") if hasattr(yaml, b)]
GOOD = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n"

# 9 levels of 9 aliases: ~387 million values once expanded (the "billion laughs" shape).
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def _error(tmp_path: Path, content: str | bytes, name: str = "gpustack.yaml") -> tuple[str, float, int]:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError) as ei:
            load(path, environ={}, cwd=tmp_path)
        elapsed = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ei.value.exit_code == 2
    assert str(path) in ei.value.message
    return ei.value.message, elapsed, peak


def test_alias_bomb_fails_fast_in_little_memory(tmp_path: Path) -> None:
    assert 300 < len(ALIAS_BOMB.encode()) < 400  # the 330-byte class of file from issue #10
    msg, elapsed, peak = _error(tmp_path, ALIAS_BOMB)
    assert "gpustack.yaml:5: e: YAML aliases expand to more than 10,000 values" in msg
    # Was 25 s and 2.4 GB before the bound; now about 0.2 s and 2 MB here.
    assert elapsed < 5, elapsed
    assert peak < 64 * 1024 * 1024, peak


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD + "x: &x [1, *x]\n", ":3: x[1]: recursive YAML alias"),
        (GOOD + "x: &x {a: *x}\n", ":3: x.a: recursive YAML alias"),
        ("x: " + "[" * 5000 + "]" * 5000 + "\n", ":1: invalid YAML: nested more than 64 levels deep"),
        ("- " * 5000 + "x\n", ":1: invalid YAML: nested more than 64 levels deep"),
        ("x: " + "{a: " * 3000 + "\n", ":1: invalid YAML: nested more than 64 levels deep"),
    ],
    ids=["recursive-list", "recursive-map", "deep-flow", "deep-block", "deep-unclosed"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_recursion_and_depth_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, needle: str, backend: str
) -> None:
    """gpustack's own bound and message, with libyaml and with PyYAML's pure-Python parser alike: the outcome
    does not depend on which one (or which libyaml version, with its own depth limit) the machine has."""
    monkeypatch.setattr(load_mod, "_LOADER", getattr(yaml, backend))
    msg, elapsed, _ = _error(tmp_path, text)
    assert needle in msg
    # the pure-Python scanner is quadratic over its 1,024-character simple-key window (and ~10x slower under
    # tracemalloc): bounded, but not fast
    assert elapsed < (2 if backend == "CSafeLoader" else 30), elapsed


def test_a_yaml_library_depth_error_is_said_as_gpustack_says_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A libyaml with a depth limit of its own (0.2.6: "exceeded max depth of 1000") gives the same message."""

    def limited(*_: object, **__: object) -> object:
        mark = yaml.Mark("x", 0, 6, 2, None, None)
        raise yaml.parser.ParserError(None, None, "exceeded max depth of 1000", mark)

    monkeypatch.setattr(load_mod.yaml, "compose", limited)
    msg, _, _ = _error(tmp_path, GOOD)
    assert msg.endswith("gpustack.yaml:7: invalid YAML: nested more than 64 levels deep"), msg


def test_file_size_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load_mod, "MAX_FILE_BYTES", 1024)
    msg, _, _ = _error(tmp_path, GOOD + "# padding\n" * 200)
    assert "larger than" in msg and "right file" in msg


def test_default_size_cap_holds_a_large_cluster() -> None:
    node = "  - {name: gpu-node-0001, address: 192.0.2.10, role: worker, user: ubuntu, port: 22}\n"
    assert len(node) * 5000 < load_mod.MAX_FILE_BYTES


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", ":1: not a text file (NUL byte)"),
        (GOOD.encode("utf-16"), "UTF-16-encoded; save it as UTF-8"),
        (GOOD.encode("utf-16-be").join([b"\xfe\xff", b""]), "UTF-16-encoded"),
        (GOOD.encode("utf-32"), "UTF-32-encoded"),
        (b"nodes:\n  - {name: caf\xe9}\n", ":2: not valid UTF-8 (byte 0xe9"),
        (b"nodes: \x07\n", "invalid YAML"),
    ],
    ids=["elf", "utf16-le", "utf16-be", "utf32", "latin1", "control-char"],
)
def test_binary_and_wrong_encodings(tmp_path: Path, content: bytes, needle: str) -> None:
    msg, _, _ = _error(tmp_path, content)
    assert needle in msg


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "gpustack.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert load(path, environ={}, cwd=tmp_path).config.nodes[0].name == "cp1"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (GOOD + "? [a, b]\n: 1\n", ":3: (top level): a mapping key must be a plain name, not a list"),
        (GOOD + "cluster:\n  ? {a: 1}\n  : 2\n", ":4: cluster: a mapping key must be a plain name, not a mapping"),
    ],
)
def test_non_scalar_keys(tmp_path: Path, text: str, needle: str) -> None:
    msg, _, _ = _error(tmp_path, text)
    assert needle in msg


def test_directory_and_device_are_not_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file: a directory"):
        load(tmp_path, environ={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="cannot read config file: not a regular file"):
        load(Path("/dev/zero"), environ={}, cwd=tmp_path)


def test_merge_keys_work(tmp_path: Path) -> None:
    text = (
        "nodes:\n  - &w {name: cp1, address: 192.0.2.10, role: control-plane, port: 2222}\n"
        "  - {<<: *w, name: w1, address: 192.0.2.11, role: worker}\n"
    )
    (tmp_path / "gpustack.yaml").write_text(text)
    cfg = load(tmp_path / "gpustack.yaml", environ={}, cwd=tmp_path).config
    assert [(n.name, n.port, n.role) for n in cfg.nodes] == [("cp1", 2222, "control-plane"), ("w1", 2222, "worker")]


def test_errors_shown_are_capped(tmp_path: Path) -> None:
    nodes = "".join(f"  - {{name: n{i}, address: 10.1.{i // 250}.{i % 250 + 1}, role: wrker}}\n" for i in range(2000))
    msg, _, _ = _error(tmp_path, "nodes:\n" + nodes)
    lines = msg.splitlines()
    assert lines[0] == "invalid configuration (2000 problems):"
    assert len(lines) == 1 + MAX_ERRORS_SHOWN + 1
    assert lines[-1].strip() == f"... and {2000 - MAX_ERRORS_SHOWN} more problem(s) (fix these first)"
    assert "gpustack.yaml:2: nodes[0].role:" in lines[1]
