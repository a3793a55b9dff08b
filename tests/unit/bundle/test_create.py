"""`gpustack bundle create` against sources the test builds and serves on loopback
(tests/fakes/bundle_sources.py): a registry with real images, a chart repository packaged by the
real helm, a signed OS archive and the Kubernetes repository, files with known sha256."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

import gpustack
from gpustack.bundle import manifest as mf
from gpustack.bundle import want
from gpustack.config import pins
from gpustack.config.model import Config
from tests.fakes import bundle_sources
from tests.realbin import RealBins
from tests.unit.bundle.conftest import make_config, run_create
from tests.unit.cli.test_cli import run


def test_create_fetches_everything_verified_and_resumes(
    sources: bundle_sources.BundleSources, real_bins: RealBins, made_bundle: Path, bundle_copy: Path, tmp_path: Path
) -> None:
    out = made_bundle  # made by the conftest fixture: run_create(make_config(sources), ...)
    cfg = make_config(sources)
    manifest = mf.load(out)
    # every artifact listed with its sha256, and intact
    assert mf.check_files(out, manifest) == []
    assert mf.check_config(cfg, manifest) == []
    kinds = {a.kind for a in manifest.artifacts}
    assert kinds == {"file", "chart", "image", "deb", "apt-index", "apt-key"}
    # files: verified against the pins the config gives
    containerd = manifest.find("file", "containerd", arch="amd64")
    assert containerd is not None and containerd.sha256 == sources.file_sha256["containerd"]
    # images: every one the config names, resolved from kubeadm's list and the charts, Flannel's pinned
    images = {a.name for a in manifest.artifacts if a.kind == "image"}
    expected = {want.parse_ref(r).tagged for r in bundle_sources.IMAGES} - {
        "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04"  # Debian: no driver container
    }
    assert images == expected
    assert "nvcr.io/nvidia/private/vgpu-manager:1.0" not in images  # enabled: false
    assert "registry.k8s.io/etcd:3.6.6-0" in manifest.resolved_images["kubeadm"]
    assert (
        "quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1"
        in manifest.resolved_images["chart kube-prometheus-stack"]
    )
    pause = manifest.find("image", "registry.k8s.io/pause:3.10.2")
    assert pause is not None and pause.digest == sources.images["registry.k8s.io/pause:3.10.2"].digest
    assert manifest.find("image", "registry.k8s.io/etcd:3.6.6-0").nodes == "control-plane"  # type: ignore[union-attr]
    with tarfile.open(out / pause.path) as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == "registry.k8s.io/pause:3.10.2"
    # charts pulled at their pins
    chart = manifest.find("chart", "gpu-operator")
    assert chart is not None and chart.version == "v26.7.0" and (out / chart.path).is_file()
    # apt: the whole dependency closure, split into the OS and the Kubernetes repository
    os_debs = mf.repo_packages(manifest, "debian-12")
    assert {"curl", "libcurl4", "libc6", "gpg", "python3", "util-linux", "mount", "apt-transport-https"} <= os_debs
    assert "base-files" not in os_debs and "unrelated-package" not in os_debs and "gnupg2" not in os_debs
    assert mf.repo_packages(manifest, "kubernetes-v1.36") == {
        "kubeadm",
        "kubelet",
        "kubectl",
        "kubernetes-cni",
    }
    kubeadm = manifest.find("deb", "kubeadm", repo="kubernetes-v1.36")
    assert (
        kubeadm is not None and kubeadm.version == f"{pins.KUBERNETES['1.36']}-1.1"
    )  # the pin, not the newer patch in the repo
    # the repositories are signed with a key the bundle ships; apt on a bare system can use them
    key = manifest.find("apt-key", "Release.key", repo="debian-12")
    assert key is not None and len(key.fingerprint) == 40
    verify = subprocess.run(
        ["gpgv", "--keyring", str(_dearmor(out / key.path, tmp_path)), str(out / "apt/debian-12/InRelease")],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stderr
    packages = (out / "apt/debian-12/Packages").read_text()
    assert "Filename: curl_0.0.1+gpustack.test_amd64.deb" in packages and "SHA256: " in packages

    # a re-run fetches nothing and changes nothing (on a copy without apt's cache: the bundle has the debs)
    out = bundle_copy
    before = (out / "bundle.json").read_text()
    sources.registry.requests.clear()
    second = run_create(cfg, out, real_bins)
    assert second.fetched == [], second.fetched
    assert not any("/blobs/" in path for _, path, _ in sources.registry.requests)
    assert _without_created(before) == _without_created((out / "bundle.json").read_text())

    # a damaged artifact is fetched again; a leftover temporary file is removed
    (out / pause.path).write_bytes(b"damaged")
    (out / "images" / "amd64" / ".x.tar.partial").write_bytes(b"half")
    third = run_create(cfg, out, real_bins)
    assert third.fetched == ["image registry.k8s.io/pause:3.10.2 (amd64)"]
    assert not (out / "images" / "amd64" / ".x.tar.partial").exists()
    assert mf.check_files(out, mf.load(out)) == []


def _dearmor(key: Path, tmp: Path) -> Path:
    out = tmp / "key.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(out), str(key)], check=True)
    return out


def _without_created(text: str) -> dict[str, object]:
    data = json.loads(text)
    data.pop("created")
    return data


def test_a_pin_mismatch_stops_and_keeps_nothing(
    sources: bundle_sources.BundleSources, real_bins: RealBins, tmp_path: Path
) -> None:
    from gpustack.bundle.fetch import FetchError

    cfg = make_config(sources)
    data = cfg.model_dump(mode="json")
    data["versions"]["runc_sha256"] = {"amd64": "0" * 64}
    bad = Config.model_validate(data)
    out = tmp_path / "bundle"
    with pytest.raises(
        FetchError,
        match=rf"runc {re.escape(pins.RUNC_VERSION)} \(amd64\): the download from .* has sha256 [0-9a-f]+, the pin is 0{{64}}",
    ):
        run_create(bad, out, real_bins)
    assert not list(out.glob("files/runc/**/runc.amd64"))
    assert not list(out.rglob("*.partial"))
    # what was fetched before the failure is recorded and kept for the next run
    assert mf.load(out).find("file", "containerd") is not None
    assert yaml.safe_load((out / "bundle.json").read_text())["format"] == 1


def test_the_cli_resumes_a_bundle(
    sources: bundle_sources.BundleSources, real_bins: RealBins, bundle_copy: Path, tmp_path: Path
) -> None:
    """`gpustack bundle create` as users run it: on a complete bundle it fetches nothing."""
    config = tmp_path / "gpustack.yaml"
    config.write_text(json.dumps(make_config(sources).model_dump(mode="json", exclude_defaults=True)))
    here = {"PYTHONPATH": str(Path(gpustack.__file__).resolve().parents[1])}  # this checkout's gpustack
    args = ("bundle", "create", "--out", str(bundle_copy), "-c", str(config), "--os", "debian-12")
    result = run(*args, "--helm", str(real_bins.helm), cwd=tmp_path, env_extra={**here, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 fetched" in result.stdout and "gpustack up --bundle" in result.stdout
    assert "image(s) are pinned by tag only" in result.stdout, result.stdout
