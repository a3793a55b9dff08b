"""Contract: the doubles of what ``gpustack bundle create`` downloads answer as the real sources do.

- tests/fakes/oci_registry.py answers the OCI distribution spec's pull path and the token auth flow
  (tests/contract/upstream/oci_registry.yaml, each fact with its source);
- tests/fakes/apt_archive.py is read by the real apt of this machine (Debian's apt, as on the test hosts):
  ``apt-get update`` with a private configuration verifies its signed InRelease and sees its packages;
- tests/fakes/bundle_sources.py's charts name the images the pinned charts deploy
  (tests/contract/upstream/versions.yaml) and are packaged, indexed and pulled by the real helm."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.config import pins
from tests.contract.upstream import facts
from tests.fakes import bundle_sources
from tests.fakes.apt_archive import Pkg, build_archive
from tests.fakes.oci_registry import Registry, RegistryServer, build_image, digest_of
from tests.realbin import real_bins

OCI = facts("oci_registry")
V = facts("versions")


@pytest.fixture(scope="module")
def registry() -> Iterator[tuple[Registry, RegistryServer]]:
    reg = Registry()
    image = build_image("demo", arches=("amd64",))
    reg.add("library/demo", "1.0", image)
    server = RegistryServer(reg)
    yield reg, server
    server.close()


def _get(url: str, token: str = "", method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers, method=method), timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def test_token_auth_flow(registry: tuple[Registry, RegistryServer]) -> None:
    _, server = registry
    status, _, headers = _get(f"{server.url}/v2/library/demo/manifests/1.0")
    assert status == 401
    scheme, _, params = headers["WWW-Authenticate"].partition(" ")
    fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
    assert scheme == "Bearer" and sorted(fields) == sorted(OCI["token_auth"]["challenge_params"])
    assert fields["scope"] == OCI["token_auth"]["scope"].format(name="library/demo")
    status, body, _ = _get(f"{fields['realm']}?service={fields['service']}&scope={fields['scope']}")
    assert status == 200 and set(OCI["token_auth"]["token_keys"]) <= set(json.loads(body))


def test_pull_endpoints_and_errors(registry: tuple[Registry, RegistryServer]) -> None:
    reg, server = registry
    dist = OCI["distribution"]
    assert _get(f"{server.url}/v2/")[0] in dist["base"]["status"]
    assert _get(f"{server.url}/v2/", reg.token)[0] == 200
    image = reg.repos["library/demo"]["1.0"]
    for method in ("GET", "HEAD"):
        status, body, headers = _get(f"{server.url}/v2/library/demo/manifests/1.0", reg.token, method)
        assert status == 200 and headers["Docker-Content-Digest"] == image.digest
        assert headers["Content-Type"] == json.loads(image.index)["mediaType"]
        if method == "GET":
            assert digest_of(body) == image.digest
    for path, case in (("manifests/9.9", "manifest_unknown"), (f"blobs/sha256:{'0' * 64}", "blob_unknown")):
        status, body, _ = _get(f"{server.url}/v2/library/demo/{path}", reg.token)
        assert status == dist[case]["status"] and json.loads(body)["errors"][0]["code"] == dist[case]["code"]
    blob = next(iter(image.blobs))
    assert _get(f"{server.url}/v2/library/demo/blobs/{blob}", reg.token)[0] in dist["blob_ok_status"]


def test_the_real_apt_reads_the_archive(tmp_path: Path) -> None:
    archive = build_archive(tmp_path / "www" / "debian", "bookworm", [Pkg("gpustack-probe", "libc6"), Pkg("libc6")],
                            gnupg=tmp_path / "gnupg")  # fmt: skip
    state = tmp_path / "apt"
    for d in ("lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/preferences.d"):
        (state / d).mkdir(parents=True)
    (state / "etc/sources.list").write_text(
        f"deb [signed-by={archive.keyring}] file://{archive.root}/ {archive.suite} main\n"
    )
    opts = [f"-oDir::State={state}", f"-oDir::State::Lists={state}/lists", f"-oDir::Cache={state}/cache",
            f"-oDir::Etc::SourceList={state}/etc/sources.list", f"-oDir::Etc::SourceParts={state}/etc/sources.list.d",
            f"-oDir::Etc::Preferences={state}/etc/preferences", f"-oDir::Etc::PreferencesParts={state}/etc/preferences.d",
            "-oAPT::Architecture=amd64", "-oDebug::NoLocking=1"]  # fmt: skip
    update = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, timeout=60)
    assert update.returncode == 0 and "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr, (
        update.stderr
    )
    show = subprocess.run(["apt-cache", *opts, "show", "gpustack-probe"], capture_output=True, text=True, timeout=30)
    assert "Version: 0.0.1+gpustack.test" in show.stdout and "Depends: libc6" in show.stdout


def test_the_test_charts_name_the_pinned_charts_images() -> None:
    kps = V["kube-prometheus-stack"][pins.CHARTS["kube-prometheus-stack"].version]
    gpu = V["gpu-operator"][pins.CHARTS["gpu-operator"].version]
    dcgm = V["dcgm-exporter"][pins.CHARTS["dcgm-exporter"].version]
    text = json.dumps(bundle_sources.CHARTS)
    assert f"prometheus-operator:{kps['prometheus_operator']}" in text
    # the chart's own default tag, which gpustack's values replace with the 3.13 LTS (pins.PROMETHEUS_IMAGE_TAG)
    assert (
        f'prometheus/prometheus:{{{{ .Values.prometheus.prometheusSpec.image.tag | default \\"{kps["prometheus_image_tag"]}\\" }}}}'
        in text
    )
    assert (
        f"quay.io/prometheus/prometheus:{pins.PROMETHEUS_IMAGE_TAG[pins.CHARTS['kube-prometheus-stack'].version]}"
        in set(bundle_sources.IMAGES)
    )
    assert f'version: \\"{gpu["driver"]}\\"' in text and f"version: {gpu['toolkit']}" in text
    assert f"gpu-operator:{pins.CHARTS['gpu-operator'].version}" in text
    # the chart's own default tag, which gpustack's values replace with GPU Operator v26.7.0's exporter
    assert f'dcgm-exporter:{{{{ .Values.image.tag | default \\"{dcgm["image_tag"]}\\" }}}}' in text
    refs = set(bundle_sources.IMAGES)
    assert f"nvcr.io/nvidia/k8s/dcgm-exporter:{gpu['dcgm_exporter']}" in refs
    assert pins.DCGM_EXPORTER_IMAGE_TAG[pins.CHARTS["dcgm-exporter"].version] == gpu["dcgm_exporter"]
    assert f"nvcr.io/nvidia/driver:{gpu['driver']}-ubuntu24.04" in refs


def test_the_real_helm_packages_and_pulls_the_test_charts(tmp_path: Path) -> None:
    repo = tmp_path / "www" / "charts"
    server = bundle_sources.FileServer(tmp_path / "www")
    try:
        bundle_sources.build_charts(real_bins().helm, tmp_path / "src", repo, f"{server.url}/charts")
        (tmp_path / "pulled").mkdir()
        for name, chart in pins.CHARTS.items():
            pulled = subprocess.run([str(real_bins().helm), "pull", name, "--repo", f"{server.url}/charts", "--version",
                                     chart.version, "--destination", str(tmp_path / "pulled")],
                                    capture_output=True, text=True, timeout=60, env={"HOME": str(tmp_path)})  # fmt: skip
            assert pulled.returncode == 0, pulled.stderr
    finally:
        server.close()
    assert len(list((tmp_path / "pulled").glob("*.tgz"))) == len(pins.CHARTS)
