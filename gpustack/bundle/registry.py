"""Container images as OCI archives that ``ctr -n k8s.io images import`` reads, fetched with a
small OCI distribution client (the distribution spec's pull API: manifests and blobs over HTTP,
anonymous bearer-token auth).

For one image and one architecture:
1. ``GET /v2/<repo>/manifests/<tag>`` (Accept: OCI and Docker index and manifest types). On 401
   the ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` challenge is answered with an
   anonymous token from the realm, and the request repeated. The body's sha256 is the image's
   digest: it must equal the digest asked for, the registry's ``Docker-Content-Digest`` and the
   pinned digest, when there is one.
2. An index (manifest list) is kept as it is (so the image keeps the digest that names it, the
   one a pod may pull by) and the manifest for ``linux/<arch>`` fetched by digest and checked.
3. The config and layer blobs are streamed into the archive, each hashed and sized as it arrives
   against its descriptor.

The archive is an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``) with
the image's name in ``io.containerd.image.name`` (the full reference) and
``org.opencontainers.image.ref.name`` (the tag), as containerd's own exporter writes it; an index
whose other platforms' manifests are absent is what ``ctr images export`` writes for one platform
too, and imports the same way. Entries are written in a fixed order with fixed metadata, so the
same image gives the same archive bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import requests

from gpustack.bundle.fetch import TIMEOUT, FetchError, atomic_writer
from gpustack.bundle.want import ImageRef, parse_ref

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((*INDEX_TYPES, *MANIFEST_TYPES))
ANNOTATION_IMAGE_NAME = "io.containerd.image.name"
ANNOTATION_REF_NAME = "org.opencontainers.image.ref.name"
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Pulled:
    """An image written as an OCI archive: its digest (what its name points at), the platform
    manifest's digest, and the archive file's sha256 and size."""

    ref: str
    digest: str
    manifest_digest: str
    sha256: str
    size: int


class Registry:
    """Pull-only client; ``mirrors`` maps a registry host to the URL of a mirror serving the same
    repositories (``sources.registry_mirrors``)."""

    def __init__(self, http: requests.Session, mirrors: Mapping[str, str] | None = None) -> None:
        self.http = http
        self.mirrors = dict(mirrors or {})
        self._tokens: dict[tuple[str, str], str] = {}

    def base_url(self, registry: str) -> str:
        if registry in self.mirrors:
            return self.mirrors[registry].rstrip("/")
        return "https://" + ("registry-1.docker.io" if registry == "docker.io" else registry)

    # -- HTTP with bearer tokens -------------------------------------------------------------------

    def _get(
        self, ref: ImageRef, path: str, *, accept: str | None = None, stream: bool = False, encoding: str | None = None
    ) -> requests.Response:
        base = self.base_url(ref.registry)
        url = f"{base}/v2/{ref.repository}/{path}"
        for attempt in (1, 2):
            headers = {"Accept": accept} if accept else {}
            if encoding:
                headers["Accept-Encoding"] = encoding
            token = self._tokens.get((base, ref.repository))
            if token:
                headers["Authorization"] = f"Bearer {token}"
            try:
                resp = self.http.get(url, headers=headers, stream=stream, timeout=TIMEOUT)
            except requests.RequestException as exc:
                raise FetchError(f"image {ref.tagged}: {url} could not be fetched: {exc}") from None
            if resp.status_code == 401 and attempt == 1:
                challenge = resp.headers.get("WWW-Authenticate", "")
                resp.close()
                self._tokens[(base, ref.repository)] = self._token(ref, challenge)
                continue
            if resp.status_code != 200:
                resp.close()
                raise FetchError(
                    f"image {ref.tagged}: {url} answered HTTP {resp.status_code}",
                    hint="a private image needs a mirror gpustack can read anonymously (sources.registry_mirrors)"
                    if resp.status_code in (401, 403)
                    else "check the image name and tag, and sources.registry_mirrors",
                )
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    def _token(self, ref: ImageRef, challenge: str) -> str:
        scheme, _, params_text = challenge.partition(" ")
        if scheme.lower() != "bearer":
            raise FetchError(
                f"image {ref.tagged}: the registry asks for {scheme or 'unknown'} authentication; "
                "gpustack fetches anonymously",
                hint="mirror the image where it can be read anonymously (sources.registry_mirrors)",
            )
        params = dict(_CHALLENGE.findall(params_text))
        realm = params.pop("realm", "")
        if not realm:
            raise FetchError(f"image {ref.tagged}: bearer challenge without a realm: {challenge!r}")
        params.setdefault("scope", f"repository:{ref.repository}:pull")
        try:
            resp = self.http.get(realm, params=params, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise FetchError(f"image {ref.tagged}: token from {realm} could not be fetched: {exc}") from None
        if resp.status_code != 200:
            raise FetchError(f"image {ref.tagged}: the token service {realm} answered HTTP {resp.status_code}")
        data = resp.json()
        token = data.get("token") or data.get("access_token")
        if not isinstance(token, str) or not token:
            raise FetchError(f"image {ref.tagged}: the token service {realm} returned no token")
        return token

    # -- manifests ---------------------------------------------------------------------------------

    def manifest(self, ref: ImageRef, reference: str, *, expect: str | None = None) -> tuple[bytes, str, str]:
        """(body, media type, digest) of a manifest or index, its digest checked against the
        registry's header and ``expect``."""
        resp = self._get(ref, f"manifests/{reference}", accept=ACCEPT)
        body = resp.content
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        header = resp.headers.get("Docker-Content-Digest")
        media = resp.headers.get("Content-Type", "").split(";")[0].strip()
        try:
            media = json.loads(body).get("mediaType") or media
        except (ValueError, AttributeError):
            raise FetchError(f"image {ref.tagged}: the manifest is not JSON") from None
        wanted = [d for d in (expect, reference if reference.startswith("sha256:") else None, header) if d]
        for d in wanted:
            if d != digest:
                raise FetchError(
                    f"image {ref.tagged}: manifest digest {digest} does not match {d}",
                    hint="a pinned digest (versions.image_digests or the pin table) and the registry disagree",
                )
        if media not in (*INDEX_TYPES, *MANIFEST_TYPES):
            raise FetchError(f"image {ref.tagged}: unsupported manifest type {media!r}")
        return body, media, digest

    @staticmethod
    def pick_platform(index: Mapping[str, Any], arch: str) -> Mapping[str, Any] | None:
        """The descriptor for linux/<arch> in an index (arm64: variant v8 or none)."""
        best = None
        for desc in index.get("manifests", []):
            plat = desc.get("platform") or {}
            if plat.get("os") != "linux" or plat.get("architecture") != arch:
                continue
            variant = plat.get("variant")
            if arch == "arm64" and variant not in (None, "", "v8"):
                continue
            if best is None or not variant:
                best = desc
        return best

    # -- the archive -------------------------------------------------------------------------------

    def pull(self, ref_text: str, arch: str, dest: Path, *, digest: str | None = None) -> Pulled:
        """Write the image ``ref_text`` for linux/``arch`` to ``dest`` as an OCI archive."""
        ref = parse_ref(ref_text)
        top_body, top_media, top_digest = self.manifest(ref, ref.digest or ref.tag or "latest", expect=digest)
        blobs: list[tuple[str, bytes]] = [(top_digest, top_body)]
        manifest_body, manifest_digest = top_body, top_digest
        if top_media in INDEX_TYPES:
            chosen = self.pick_platform(json.loads(top_body), arch)
            if chosen is None:
                raise FetchError(f"image {ref.tagged}: no linux/{arch} image in its index")
            manifest_body, media, manifest_digest = self.manifest(ref, chosen["digest"], expect=chosen["digest"])
            if media not in MANIFEST_TYPES:
                raise FetchError(f"image {ref.tagged}: linux/{arch} entry is a {media}, not an image manifest")
            blobs.append((manifest_digest, manifest_body))
        manifest = json.loads(manifest_body)
        config_desc, layers = manifest["config"], manifest.get("layers", [])
        config_body = self._small_blob(ref, config_desc)
        config = json.loads(config_body)
        if config.get("architecture") not in (None, arch):
            raise FetchError(f"image {ref.tagged}: it is built for {config.get('architecture')}, not {arch}")
        blobs.append((str(config_desc["digest"]), config_body))
        index = {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": top_media,
                    "digest": top_digest,
                    "size": len(top_body),
                    "annotations": {ANNOTATION_IMAGE_NAME: ref.tagged, ANNOTATION_REF_NAME: ref.tag or "latest"},
                }
            ],
        }
        written: set[str] = set()
        hasher = _HashingWriter()
        with atomic_writer(dest) as raw:
            hasher.target = raw
            with tarfile.open(fileobj=hasher, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
                _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
                _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
                for d, body in blobs:
                    if d not in written:
                        _add_bytes(tar, _blob_path(d), body)
                        written.add(d)
                for desc in layers:
                    if desc["digest"] not in written:
                        self._add_blob(tar, ref, desc)
                        written.add(desc["digest"])
        return Pulled(ref.tagged, top_digest, manifest_digest, hasher.digest.hexdigest(), hasher.size)

    def _blob(self, ref: ImageRef, desc: Mapping[str, Any]) -> tuple[requests.Response, _CheckedReader]:
        digest, size = str(desc["digest"]), int(desc["size"])
        if not digest.startswith("sha256:"):
            raise FetchError(f"image {ref.tagged}: blob {digest} is not a sha256 digest")
        resp = self._get(ref, f"blobs/{digest}", stream=True, encoding="identity")
        resp.raw.decode_content = True  # the blob is the entity, whatever transfer coding carried it
        return resp, _CheckedReader(resp.raw, digest, size, f"image {ref.tagged}: blob {digest}")

    def _small_blob(self, ref: ImageRef, desc: Mapping[str, Any]) -> bytes:
        resp, reader = self._blob(ref, desc)
        with resp:
            chunks = []
            while True:
                chunk = reader.read(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
            reader.finish()
        return b"".join(chunks)

    def _add_blob(self, tar: tarfile.TarFile, ref: ImageRef, desc: Mapping[str, Any]) -> None:
        resp, reader = self._blob(ref, desc)
        with resp:
            tar.addfile(_info(_blob_path(reader.digest), reader.size), reader)
            reader.finish()


def _blob_path(digest: str) -> str:
    algo, _, hexdigest = digest.partition(":")
    return f"blobs/{algo}/{hexdigest}"


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = size, 0o644, 0, 0, 0, "", ""
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, len(data)), io.BytesIO(data))


class _HashingWriter(io.RawIOBase):
    """Passes writes to ``target`` and hashes them (the archive's sha256 without re-reading it)."""

    def __init__(self) -> None:
        self.target: IO[bytes] | None = None
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        assert self.target is not None
        view = bytes(data)
        self.digest.update(view)
        self.size += len(view)
        self.target.write(view)
        return len(view)


class _CheckedReader:
    """Reads a blob stream, hashing it; :meth:`finish` fails unless size and digest match."""

    def __init__(self, raw: Any, digest: str, size: int, what: str) -> None:
        self.raw, self.digest, self.size, self.what = raw, digest, size, what
        self.hash = hashlib.sha256()
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes; fewer only at the end of the blob (tarfile copies in exact blocks)."""
        want = self.size - self.read_bytes + 1 if n < 0 else n
        parts: list[bytes] = []
        got = 0
        try:
            while got < want:
                chunk: bytes = self.raw.read(want - got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
        except Exception as exc:  # urllib3 protocol/timeout errors
            raise FetchError(f"{self.what}: download failed: {exc}") from None
        data = b"".join(parts)
        self.hash.update(data)
        self.read_bytes += len(data)
        if self.read_bytes > self.size:
            raise FetchError(f"{self.what}: more than the {self.size} bytes its descriptor names")
        if len(data) < want and self.read_bytes < self.size:
            raise FetchError(f"{self.what}: ended after {self.read_bytes} of {self.size} bytes")
        return data

    def finish(self) -> None:
        actual = "sha256:" + self.hash.hexdigest()
        if self.read_bytes != self.size or actual != self.digest:
            raise FetchError(f"{self.what}: received {self.read_bytes} bytes with digest {actual}; nothing was kept")
