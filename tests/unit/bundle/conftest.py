"""Shared by the bundle tests: the sources bundle create fetches from (built and served on
loopback once per session: tests/fakes/bundle_sources.py), a config pointing at them, and one
bundle made from them (tests that change it work on a copy)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.bundle import want
from gpustack.bundle.create import CreateOptions, CreateResult, create
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.paths import resource_dir
from tests.fakes import bundle_sources
from tests.realbin import RealBins


@pytest.fixture(scope="session")
def sources(tmp_path_factory: pytest.TempPathFactory, real_bins: RealBins) -> Iterator[bundle_sources.BundleSources]:
    with bundle_sources.serve(tmp_path_factory.mktemp("bundle-sources"), real_bins.helm) as served:
        yield served


def make_config(sources: bundle_sources.BundleSources, **extra: object) -> Config:
    data = {"nodes": [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane"}], **sources.config()}
    data.update(extra)
    return Config.model_validate(data)


def run_create(cfg: Config, out: Path, real_bins: RealBins, *, os_: str = "debian-12") -> CreateResult:
    opts = CreateOptions(out=out, releases=(want.parse_release(os_),), helm=str(real_bins.helm))
    return create(cfg, opts, Console(), playbooks=resource_dir("playbooks"))


@pytest.fixture(scope="session")
def made_bundle(
    sources: bundle_sources.BundleSources, real_bins: RealBins, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A bundle for debian-12 made from :func:`sources` (read-only: copy it to change it)."""
    out = tmp_path_factory.mktemp("made") / "bundle"
    run_create(make_config(sources), out, real_bins)
    return out


@pytest.fixture
def bundle_copy(made_bundle: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(made_bundle, copy, ignore=shutil.ignore_patterns(".work"))
    return copy
