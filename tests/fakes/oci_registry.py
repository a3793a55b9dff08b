"""TEST DOUBLE: a tiny OCI registry on loopback for the bundle tests: the distribution spec's pull API
(``/v2/<repo>/manifests/<tag|digest>``, ``/v2/<repo>/blobs/<digest>``) behind anonymous
bearer-token auth (401 with a ``WWW-Authenticate: Bearer realm=...`` challenge, a ``/token``
endpoint), blobs answered with a redirect to a second path as registry.k8s.io does. Images are
real: :func:`build_image` makes a gzip layer tarball, an OCI config with the layer's diff_id, one
manifest per architecture and an index over them; containerd can import and unpack what a client
fetches from here.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Image:
    """One image: its index (the digest a pod pulls by) and, per architecture, a manifest."""

    index: bytes
    manifests: dict[str, bytes]  # arch -> manifest JSON
    blobs: dict[str, bytes]  # digest -> bytes (configs and layers)

    @property
    def digest(self) -> str:
        return digest_of(self.index)


def _layer(files: Mapping[str, bytes]) -> tuple[bytes, bytes]:
    """(uncompressed tar, gzip of it) holding ``files``, with fixed metadata."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    tar_bytes = raw.getvalue()
    return tar_bytes, gzip.compress(tar_bytes, mtime=0)


def build_image(name: str, arches: Sequence[str] = ("amd64", "arm64")) -> Image:
    """A real multi-architecture image: one layer per architecture (``/gpustack-test/<name>`` and
    ``/gpustack-test/arch``), its config and manifest, and an index over them."""
    blobs: dict[str, bytes] = {}
    manifests: dict[str, bytes] = {}
    descriptors = []
    for arch in arches:
        tar_bytes, layer = _layer(
            {"gpustack-test/" + name.replace("/", "_"): name.encode() + b"\n", "gpustack-test/arch": arch.encode()}
        )
        config = json.dumps(
            {
                "architecture": arch,
                "os": "linux",
                "config": {"Cmd": ["/bin/true"]},
                "rootfs": {"type": "layers", "diff_ids": [digest_of(tar_bytes)]},
            },
            sort_keys=True,
        ).encode()
        blobs[digest_of(layer)], blobs[digest_of(config)] = layer, config
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": digest_of(config), "size": len(config)},
                "layers": [{"mediaType": OCI_LAYER, "digest": digest_of(layer), "size": len(layer)}],
            },
            sort_keys=True,
        ).encode()
        manifests[arch] = manifest
        descriptors.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": digest_of(manifest),
                "size": len(manifest),
                "platform": {"architecture": arch, "os": "linux"},
            }
        )
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descriptors}, sort_keys=True).encode()
    return Image(index, manifests, blobs)


@dataclass
class Registry:
    """The served content: ``repos[repository][tag] = Image``; :attr:`requests` records (method, path, auth)."""

    repos: dict[str, dict[str, Image]] = field(default_factory=dict)
    requests: list[tuple[str, str, bool]] = field(default_factory=list)
    token: str = "gpustack-test-token"
    #: repository -> forced HTTP status for its manifests (e.g. 404, 403)
    broken: dict[str, int] = field(default_factory=dict)
    #: blob digest -> replacement bytes (a registry serving corrupt data)
    corrupt: dict[str, bytes] = field(default_factory=dict)

    def add(self, repository: str, tag: str, image: Image) -> None:
        self.repos.setdefault(repository, {})[tag] = image

    def _manifest(self, repository: str, reference: str) -> bytes | None:
        for tag, image in self.repos.get(repository, {}).items():
            if reference in (tag, image.digest):
                return image.index
            for body in image.manifests.values():
                if reference == digest_of(body):
                    return body
        return None

    def _blob(self, repository: str, digest: str) -> bytes | None:
        for image in self.repos.get(repository, {}).values():
            if digest in image.blobs:
                return self.corrupt.get(digest, image.blobs[digest])
        return None


class RegistryServer:
    """Serve a :class:`Registry` on ``127.0.0.1:<port>`` in a thread."""

    def __init__(self, registry: Registry, host: str = "127.0.0.1") -> None:
        self.registry = registry
        handler = _handler(registry, self)
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: Registry, server: RegistryServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _error(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
            """An error as the distribution spec answers it: ``{"errors": [{"code", "message", "detail"}]}``."""
            body = json.dumps({"errors": [{"code": code, "message": message, "detail": None}]}).encode()
            self._send(status, body, {"Content-Type": "application/json", **(headers or {})})

        def _send(self, status: int, body: bytes = b"", headers: Mapping[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            authed = self.headers.get("Authorization") == f"Bearer {registry.token}"
            registry.requests.append((self.command, url.path, authed))
            if url.path == "/token":
                query = parse_qs(url.query)
                if not query.get("scope", [""])[0].startswith("repository:"):
                    self._send(400)
                    return
                self._send(200, json.dumps({"token": registry.token}).encode(), {"Content-Type": "application/json"})
                return
            if url.path.startswith("/blobdata/"):  # where blob requests are redirected: no auth needed
                _, _, repository, digest = url.path.split("/", 3)
                blob = registry._blob(repository.replace("+", "/"), digest)
                self._send(200 if blob is not None else 404, blob or b"", {"Content-Type": "application/octet-stream"})
                return
            if not url.path.startswith("/v2/"):
                self._send(404)
                return
            rest = url.path[len("/v2/") :]
            if not authed:
                realm = f"{server.url}/token"
                name = rest.split("/manifests/")[0].split("/blobs/")[0]
                scope = f',scope="repository:{name}:pull"' if name else ""
                challenge = f'Bearer realm="{realm}",service="gpustack-test"{scope}'
                self._error(401, "UNAUTHORIZED", "authentication required", {"WWW-Authenticate": challenge})
                return
            if rest == "":  # end-1: the registry implements the spec
                self._send(200, b"{}", {"Content-Type": "application/json"})
                return
            if "/manifests/" in rest:
                repository, reference = rest.rsplit("/manifests/", 1)
                if repository in registry.broken:
                    self._send(registry.broken[repository])
                    return
                body = registry._manifest(repository, reference)
                if body is None:
                    self._error(404, "MANIFEST_UNKNOWN", "manifest unknown to registry")
                    return
                media = json.loads(body)["mediaType"]
                self._send(200, body, {"Content-Type": media, "Docker-Content-Digest": digest_of(body)})
                return
            if "/blobs/" in rest:
                repository, digest = rest.rsplit("/blobs/", 1)
                if registry._blob(repository, digest) is None:
                    self._error(404, "BLOB_UNKNOWN", "blob unknown to registry")
                    return
                self._send(307, b"", {"Location": f"{server.url}/blobdata/{repository.replace('/', '+')}/{digest}"})
                return
            self._send(404)

        do_HEAD = do_GET

    return Handler
