"""The OCI registry client against a tiny registry on loopback (tests/fakes/oci_registry.py):
token auth, index kept with only the node's platform, blobs verified, nothing half-written."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack.bundle import fetch
from gpustack.bundle.fetch import FetchError
from gpustack.bundle.registry import ANNOTATION_IMAGE_NAME, ANNOTATION_REF_NAME, Registry
from tests.fakes.oci_registry import Registry as FakeRegistry
from tests.fakes.oci_registry import RegistryServer, build_image, digest_of


@pytest.fixture
def served() -> Iterator[tuple[FakeRegistry, RegistryServer]]:
    fake = FakeRegistry()
    fake.add("pause", "3.10.2", build_image("pause"))
    fake.add("e2e/agnhost", "2.53", build_image("agnhost"))
    server = RegistryServer(fake)
    try:
        yield fake, server
    finally:
        server.close()


def client(server: RegistryServer) -> Registry:
    return Registry(fetch.session(), {"registry.k8s.io": server.url})


def read_layout(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_pull_writes_an_oci_layout_with_the_index_and_one_platform(
    served: tuple[FakeRegistry, RegistryServer], tmp_path: Path
) -> None:
    fake, server = served
    image = fake.repos["pause"]["3.10.2"]
    dest = tmp_path / "pause.tar"
    pulled = client(server).pull("registry.k8s.io/pause:3.10.2", "amd64", dest, digest=image.digest)
    assert pulled.digest == image.digest  # the index's digest: what a pod pinned by digest asks for
    assert pulled.manifest_digest == digest_of(image.manifests["amd64"])
    assert pulled.sha256 == hashlib.sha256(dest.read_bytes()).hexdigest() and pulled.size == dest.stat().st_size
    files = read_layout(dest)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["digest"] == image.digest and entry["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert entry["annotations"] == {
        ANNOTATION_IMAGE_NAME: "registry.k8s.io/pause:3.10.2",
        ANNOTATION_REF_NAME: "3.10.2",
    }
    # every blob is stored under its own digest; the arm64 manifest and its blobs are absent
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert name.endswith(hashlib.sha256(data).hexdigest())
    arm64 = json.loads(image.manifests["arm64"])
    assert f"blobs/sha256/{digest_of(image.manifests['arm64'])[7:]}" not in files
    assert f"blobs/sha256/{arm64['layers'][0]['digest'][7:]}" not in files
    amd64 = json.loads(image.manifests["amd64"])
    for desc in (amd64["config"], *amd64["layers"]):
        assert f"blobs/sha256/{desc['digest'][7:]}" in files
    # the token dance: an anonymous 401, a token, then every request authorised (blobs via a redirect)
    v2 = [r for r in fake.requests if r[1].startswith("/v2/")]
    assert not v2[0][2] and all(authed for _, _, authed in v2[1:])
    assert any(r[1] == "/token" for r in fake.requests) and any(r[1].startswith("/blobdata/") for r in fake.requests)
    # the same image gives the same bytes
    again = client(server).pull("registry.k8s.io/pause:3.10.2", "amd64", tmp_path / "again.tar")
    assert again.sha256 == pulled.sha256


def test_pinned_digest_mismatch_and_corrupt_blob_keep_nothing(
    served: tuple[FakeRegistry, RegistryServer], tmp_path: Path
) -> None:
    fake, server = served
    dest = tmp_path / "pause.tar"
    with pytest.raises(FetchError, match=r"manifest digest sha256:[0-9a-f]+ does not match sha256:0000"):
        client(server).pull("registry.k8s.io/pause:3.10.2", "amd64", dest, digest="sha256:" + "0" * 64)
    layer = json.loads(fake.repos["pause"]["3.10.2"].manifests["amd64"])["layers"][0]["digest"]
    fake.corrupt[layer] = b"not the layer"
    with pytest.raises(FetchError, match=f"blob {layer}"):
        client(server).pull("registry.k8s.io/pause:3.10.2", "amd64", dest)
    assert not dest.exists() and list(tmp_path.iterdir()) == []  # no half file, no temporary left


def test_missing_image_platform_and_forbidden(served: tuple[FakeRegistry, RegistryServer], tmp_path: Path) -> None:
    fake, server = served
    with pytest.raises(FetchError, match="answered HTTP 404"):
        client(server).pull("registry.k8s.io/pause:9.9", "amd64", tmp_path / "x.tar")
    with pytest.raises(FetchError, match="no linux/s390x image"):
        client(server).pull("registry.k8s.io/pause:3.10.2", "s390x", tmp_path / "x.tar")
    fake.broken["pause"] = 403
    with pytest.raises(FetchError, match="HTTP 403") as exc:
        client(server).pull("registry.k8s.io/pause:3.10.2", "amd64", tmp_path / "x.tar")
    assert "registry_mirrors" in (exc.value.hint or "")
    assert list(tmp_path.iterdir()) == []
