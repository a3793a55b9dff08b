"""`gpustack render --out DIR`: sizes of what it wrote; files an earlier render wrote and this one
no longer generates are removed; files it did not write are never touched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from gpustack.config.model import Config
from gpustack.errors import UsageError
from gpustack.render.files import MANIFEST, render_to
from tests.unit.unprivileged import run_cli, run_unprivileged, shared_dir

BASE = {
    "nodes": [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane"}],
    "monitoring": {"prometheus_storage": {"ephemeral": False}},
}


def cfg(**gpu: str) -> Config:
    return Config.model_validate({**BASE, "gpu": gpu})


def test_sizes_and_manifest(tmp_path: Path) -> None:
    result = render_to(cfg(), tmp_path / "out")
    assert result.removed == []
    for path, size in result.written:
        assert path.stat().st_size == size > 0
    listed = json.loads((tmp_path / "out" / MANIFEST).read_text())["files"]
    assert sorted(str(p.relative_to(tmp_path / "out")) for p, _ in result.written) == sorted(listed)
    assert not list((tmp_path / "out").rglob(".*.tmp"))


def test_switching_exporter_removes_the_stale_values_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(cfg(exporter="standalone"), out)
    assert (out / "values/dcgm-exporter.yaml").is_file()
    mine = out / "values" / "my-notes.yaml"
    mine.write_text("keep me")
    result = render_to(cfg(exporter="operator"), out)
    assert result.removed == [out / "values/dcgm-exporter.yaml"]
    assert not (out / "values/dcgm-exporter.yaml").exists()
    assert mine.read_text() == "keep me"  # not ours: untouched


def test_without_a_manifest_nothing_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(cfg(exporter="standalone"), out)
    (out / MANIFEST).unlink()
    # without the list, the files are not known to be gpustack's: refused (issue 31), --force overwrites them
    with pytest.raises(UsageError, match="would overwrite"):
        render_to(cfg(exporter="operator"), out)
    result = render_to(cfg(exporter="operator"), out, force=True)
    assert result.removed == [] and (out / "values/dcgm-exporter.yaml").is_file()


# --- safety (issue #18): nothing outside --out, nothing gpustack did not write, is ever deleted ------


def manifest_naming(out: Path, files: dict[str, str | None]) -> None:
    """A crafted (or stale) manifest: the earlier render "wrote" these files, with these checksums."""
    (out / MANIFEST).write_text(json.dumps({"format": 2, "files": files}))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_manifest_records_a_sha256_per_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = render_to(cfg(), out)
    listed = json.loads((out / MANIFEST).read_text())["files"]
    assert listed == {str(p.relative_to(out)): sha(p.read_bytes()) for p, _ in result.written}


@pytest.mark.parametrize("how", ["absolute", "dotdot"])
def test_a_manifest_naming_a_file_outside_out_never_deletes_it(tmp_path: Path, how: str) -> None:
    out = tmp_path / "out"
    render_to(cfg(), out)
    victim = tmp_path / "precious.txt"
    victim.write_bytes(b"mine")
    name = str(victim) if how == "absolute" else "../precious.txt"
    manifest_naming(out, {name: sha(b"mine")})  # even with the right checksum
    result = render_to(cfg(), out)
    assert victim.read_bytes() == b"mine" and result.removed == []
    assert [why for _, why in result.kept] == ["not a plain path inside --out"]


def test_a_symlink_pointing_out_is_never_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(cfg(), out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.yaml").write_bytes(b"theirs")
    (out / "link.yaml").symlink_to(elsewhere / "x.yaml")  # a file link
    (out / "linkdir").symlink_to(elsewhere)  # a directory link on the way
    manifest_naming(out, {"link.yaml": sha(b"theirs"), "linkdir/x.yaml": sha(b"theirs")})
    result = render_to(cfg(), out)
    assert (elsewhere / "x.yaml").read_bytes() == b"theirs" and (out / "link.yaml").is_symlink()
    assert result.removed == []
    assert sorted(why for _, why in result.kept) == ["a symbolic link: not followed"] * 2


def test_a_file_the_user_changed_is_kept_and_reported(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(cfg(exporter="standalone"), out)
    stale = out / "values/dcgm-exporter.yaml"
    stale.write_text(stale.read_text() + "# my change\n")
    result = render_to(cfg(exporter="operator"), out)
    assert stale.is_file() and result.removed == []
    assert result.kept == [(stale, "changed since gpustack wrote it")]
    # no longer gpustack's: the next render does not report it again
    assert render_to(cfg(exporter="operator"), out).kept == []


def test_an_older_list_without_checksums_removes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(cfg(exporter="standalone"), out)
    listed = sorted(json.loads((out / MANIFEST).read_text())["files"])
    (out / MANIFEST).write_text(json.dumps({"files": listed}))  # gpustack <= 0.1's form: its files, no checksums
    result = render_to(cfg(exporter="operator"), out)
    assert (out / "values/dcgm-exporter.yaml").is_file() and result.removed == []
    assert "no checksum recorded" in result.kept[0][1]


def test_a_directory_link_inside_out_is_not_written_through(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "values").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="values is a symbolic link"):
        render_to(cfg(), out)
    assert list(elsewhere.iterdir()) == []


def test_the_cli_says_what_it_kept() -> None:
    """`gpustack render` as an ordinary user who could delete the file (it is theirs): a crafted
    manifest naming a file of another directory leaves it, and the warning names it."""
    with shared_dir() as root:
        victim = root / "precious.txt"

        def as_user() -> tuple[int, str, str]:
            (root / "gpustack.yaml").write_text(yaml.safe_dump(BASE))
            victim.write_text("mine")
            (root / "out").mkdir()
            manifest_naming(root / "out", {str(victim): sha(b"mine")})
            return run_cli(["render", "--out", "out"])

        code, out, err = run_unprivileged(as_user, cwd=root)
        assert code == 0, err
        assert victim.read_text() == "mine"
        flat = " ".join(out.split())
        assert f"kept {victim}: an earlier render listed it, but not a plain path inside --out" in flat, out


def test_out_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        render_to(cfg(), tmp_path / "f")
    assert (tmp_path / "f").read_text() == "x"


# --- issue 31: a file in --out that gpustack's last render there did not write is not silently replaced -------


def test_a_hand_edited_file_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "mixed"
    render_to(cfg(), out)
    edited = out / "values" / "gpu-operator.yaml"
    edited.write_text(edited.read_text() + "# my change\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(UsageError, match=r"would overwrite 1 file\(s\).*values/gpu-operator.yaml") as exc:
        render_to(cfg(exporter="operator"), out)
    assert "--force" in (exc.value.hint or "")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing written, nothing removed


def test_a_file_there_before_any_render_is_not_replaced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "values").mkdir(parents=True)
    (out / "values" / "gpu-operator.yaml").write_text("mine: true\n")
    (out / "notes.txt").write_text("unrelated")
    with pytest.raises(UsageError, match=r"would overwrite 1 file\(s\).*values/gpu-operator\.yaml"):
        render_to(cfg(), out)
    assert (out / "values" / "gpu-operator.yaml").read_text() == "mine: true\n"
    assert not (out / MANIFEST).exists()


def test_force_overwrites_and_says_which(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(cfg(), out)
    edited = out / "values" / "gpu-operator.yaml"
    edited.write_text("edited\n")
    result = render_to(cfg(), out, force=True)
    assert result.replaced == [(edited, "changed since gpustack wrote it")]
    assert edited.read_text() != "edited\n"
    assert render_to(cfg(), out).replaced == []  # gpustack's again: the next render needs no --force


def test_a_file_already_holding_what_render_writes_is_not_in_the_way(tmp_path: Path) -> None:
    first = tmp_path / "first"
    render_to(cfg(), first)
    out = tmp_path / "out"
    (out / "values").mkdir(parents=True)
    same = (first / "values" / "gpu-operator.yaml").read_bytes()
    (out / "values" / "gpu-operator.yaml").write_bytes(same)  # a copy, no manifest: nothing would change
    assert render_to(cfg(), out).replaced == []


def test_the_cli_refuses_then_force_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    import io

    from gpustack.cli.app import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("GPUSTACK_CONFIG", raising=False)
    (tmp_path / "gpustack.yaml").write_text(yaml.safe_dump(BASE))

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as ei:
            main(["render", "--out", "mixed", *argv])
        return int(ei.value.code or 0), out.getvalue(), err.getvalue()

    assert run()[0] == 0
    edited = tmp_path / "mixed" / "values" / "gpu-operator.yaml"
    edited.write_text("edited\n")
    code, out, err = run()
    assert code == 2 and out == "" and edited.read_text() == "edited\n"
    assert "values/gpu-operator.yaml" in err and "--force" in err
    code, out, err = run("--force")
    assert code == 0, err
    assert "overwrote mixed/values/gpu-operator.yaml (--force): changed since gpustack wrote it" in " ".join(
        out.split()
    )
