"""`gpustack render --out DIR`: sizes of what it wrote; files an earlier render wrote and this one
no longer generates are removed; files it did not write are never touched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpustack.config.model import Config
from gpustack.errors import UsageError
from gpustack.render.files import MANIFEST, render_to

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
    assert sorted(str(p.relative_to(tmp_path / "out")) for p, _ in result.written) == listed
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


def test_a_render_from_before_the_manifest_is_cleaned_too(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render_to(cfg(exporter="standalone"), out)
    (out / MANIFEST).unlink()
    assert render_to(cfg(exporter="operator"), out).removed == [out / "values/dcgm-exporter.yaml"]


def test_out_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="exists and is not a directory"):
        render_to(cfg(), tmp_path / "f")
    assert (tmp_path / "f").read_text() == "x"
