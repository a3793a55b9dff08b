"""Services that run on the outer machine for the test hosts, in threads of the test process.

* :class:`HttpServer` serves a directory over HTTP on the bridge address (default port 8081): the signed Kubernetes
  APT repository, the Helm tarball, any file.
* :func:`build_k8s_repo` builds a signed flat APT repository laid out like pkgs.k8s.io (``deb [signed-by=KEYRING]
  http://10.213.0.1:8081/k8s/v1.36/deb/ /``) whose packages install executable test doubles as ``/usr/bin/kubeadm``.
* :func:`publish_helm` puts ``helm-v<version>-linux-amd64.tar.gz`` on the server.
* :class:`ForwardProxy`, an HTTP forward proxy (GET & co. and CONNECT), forwards only to loopback and the test bed
  subnet, refuses the rest with 403, and records every request so a test can assert that traffic went through it.

Only the Python standard library, ``dpkg-deb``, ``apt-ftparchive`` and ``gpg`` are used.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import ipaddress
import select
import shutil
import socket
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseRequestHandler
from typing import TYPE_CHECKING, Any

from tests.fakes.apt_archive import gpg_home

from ._proc import TestbedError, run
from .network import BRIDGE_ADDRESS, SUBNET, TestbedNetwork

if TYPE_CHECKING:
    from .runtime import RuntimeArchives

K8S_PACKAGES = ("kubeadm", "kubelet", "kubectl")
DOUBLE_NAMES = (*K8S_PACKAGES, "helm")
PACKAGE_REVISION = "1.1"


# --- HTTP file server --------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request seen by a server: who asked for what, and the answer's status."""

    client: str
    method: str
    target: str
    status: int
    when: float = field(default_factory=time.time)


class _Recorder:
    """Thread-safe request log, mirrored to a text file."""

    def __init__(self, log_path: Path | None) -> None:
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._log_path = log_path

    def add(self, request: Request, note: str = "") -> None:
        with self._lock:
            self.requests.append(request)
            if self._log_path is not None:
                with self._log_path.open("a") as fh:
                    fh.write(
                        f"{time.strftime('%H:%M:%S')} {request.client} {request.method} "
                        f"{request.target} {request.status}{' ' + note if note else ''}\n"
                    )

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)


class _ThreadedServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hangs up mid-answer (the preflight reads the first byte of a large file
        # and closes; this server ignores Range) is not an error worth a traceback
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class _ServerThread:
    """Runs a ThreadingHTTPServer in a daemon thread; ``close()`` stops it."""

    def __init__(self, server: ThreadingHTTPServer, name: str) -> None:
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class HttpServer:
    """Serve ``root`` over HTTP on ``host:port`` (the bridge address by default).

    Everything is logged to ``log_path`` and kept in :attr:`requests`.
    """

    def __init__(
        self, root: Path, *, host: str = BRIDGE_ADDRESS, port: int = 8081, log_path: Path | None = None
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.host, self.port = host, port
        self._recorder = _Recorder(log_path)
        recorder, directory = self._recorder, str(self.root)

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=directory, **kwargs)

            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                status = int(code) if str(code).isdigit() else 0
                recorder.add(Request(self.client_address[0], self.command, self.path, status))

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._thread = _ServerThread(_ThreadedServer((host, port), Handler), f"http-{port}")

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://10.213.0.1:8081``."""
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[Request]:
        """Every request served so far."""
        return self._recorder.snapshot()

    def add_file(self, url_path: str, content: bytes | str | Path) -> str:
        """Publish ``content`` (bytes, text, or a file to copy) at ``url_path``; return its URL."""
        target = self.root / url_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_bytes(content.encode() if isinstance(content, str) else content)
        return f"{self.url}/{url_path.lstrip('/')}"

    def close(self) -> None:
        """Stop serving."""
        self._thread.close()


# --- test doubles ------------------------------------------------------------------------


def write_placeholder_doubles(directory: Path) -> Path:
    """Write trivial stand-ins for kubeadm, kubelet, kubectl and helm (used until real
    doubles exist in ``tests/testbed/doubles``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in DOUBLE_NAMES:
        script = directory / name
        body = "exec sleep infinity" if name == "kubelet" else f'echo "{name} placeholder $*"'
        script.write_text(f"#!/bin/sh\n# gpustack test bed placeholder for {name}\n{body}\n")
        script.chmod(0o755)
    return directory


def doubles_with_fallback(preferred: Path, scratch: Path) -> Path:
    """A directory holding every double: ``preferred``'s files where present, else
    placeholders (written under ``scratch``)."""
    missing = [n for n in DOUBLE_NAMES if not (preferred / n).is_file()]
    if not missing:
        return preferred
    write_placeholder_doubles(scratch)
    for name in DOUBLE_NAMES:
        if (preferred / name).is_file():
            shutil.copy2(preferred / name, scratch / name)
    return scratch


# --- signed APT repository in the layout of pkgs.k8s.io ------------------------------------


@dataclass(frozen=True)
class K8sRepo:
    """A built repository. ``url_path`` is relative to the served root (``/k8s/v1.36/deb/``)."""

    directory: Path
    url_path: str
    key_file: Path
    keyring: Path
    fingerprint: str
    versions: tuple[str, ...]

    def url(self, base: str) -> str:
        """Repository URL on a server whose base URL is ``base``."""
        return base.rstrip("/") + self.url_path

    def key_url(self, base: str) -> str:
        """URL of the ASCII-armoured ``Release.key``."""
        return self.url(base) + "Release.key"

    def sources_line(self, base: str, keyring: str = "/etc/apt/keyrings/k8s-testbed.gpg") -> str:
        """The one-line APT source for this repository."""
        return f"deb [signed-by={keyring}] {self.url(base)} /"


def build_k8s_repo(
    doubles_dir: Path,
    version: str,
    out_dir: Path,
    minor: str,
    *,
    extra_versions: Sequence[str] = (),
    gnupg_home: Path | None = None,
) -> K8sRepo:
    """Build a signed flat APT repository at ``out_dir/k8s/v<minor>/deb/``.

    Packages ``kubeadm``, ``kubelet``, ``kubectl`` at ``<version>-1.1`` (and at each of
    ``extra_versions``) install ``/usr/bin/<name>`` from ``doubles_dir``, ``cri-tools`` its crictl double, and
    ``kubernetes-cni`` is empty (the kubelet depends on it; kubeadm on neither since 1.32). The key: a throwaway one in a
    temporary GNUPGHOME, or the one in ``gnupg_home`` (made there on first use): one key for several minors.
    """
    minor = minor if minor.startswith("v") else f"v{minor}"
    url_path = f"/k8s/{minor}/deb/"
    repo = Path(out_dir) / url_path.strip("/")
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    arch = run(["dpkg", "--print-architecture"], timeout=10).stdout.strip()
    versions = (version, *extra_versions)
    with tempfile.TemporaryDirectory(prefix="gs-k8srepo-") as tmp:
        staging = Path(tmp)
        for ver in versions:
            for name in K8S_PACKAGES:
                _build_k8s_deb(staging, repo, doubles_dir, name, ver, arch)
        for name, ver in (("cri-tools", f"{minor[1:]}.0"), ("kubernetes-cni", "1.7.1")):
            crictl = {"usr/bin/crictl": Path(doubles_dir) / "crictl"} if name == "cri-tools" else {}  # the double
            _build_deb(staging, repo, name, f"{ver}-{PACKAGE_REVISION}", arch, crictl, {})
        gnupg = gnupg_home or staging / "gnupg"
        fingerprint = _signing_key(gnupg)
        _write_indexes(repo)
        _sign_release(repo, gnupg)
        key_file, keyring = repo / "Release.key", Path(out_dir) / f"k8s-{minor}-keyring.gpg"
        key_file.write_text(_gpg(gnupg, "--armor", "--export", fingerprint))
        run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(keyring), str(key_file)], timeout=30)
    return K8sRepo(repo, url_path, key_file, keyring, fingerprint, tuple(f"{v}-{PACKAGE_REVISION}" for v in versions))


KUBELET_SERVICE = textwrap.dedent(
    """\
    [Unit]
    Description=kubelet: The Kubernetes Node Agent (gpustack test double)
    Wants=network-online.target
    After=network-online.target

    [Service]
    ExecStart=/usr/bin/kubelet
    Restart=always
    StartLimitInterval=0
    RestartSec=10

    [Install]
    WantedBy=multi-user.target
    """
)

KUBEADM_DROP_IN = textwrap.dedent(
    """\
    [Service]
    Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
    Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
    EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
    EnvironmentFile=-/etc/default/kubelet
    ExecStart=
    ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
    """
)

_DEPENDS = {  # as pkgs.k8s.io's (kubernetes/release cmd/krel/templates/latest/metadata.yaml): kubeadm 1.32+ has none
    "kubelet": "iptables (>= 1.4.21), kubernetes-cni (>= 1.1.1), iproute2, socat, util-linux, "
    "mount, ebtables, ethtool, conntrack",
}


def _build_k8s_deb(staging: Path, repo: Path, doubles_dir: Path, name: str, version: str, arch: str) -> None:
    """One of kubeadm/kubelet/kubectl with the double as /usr/bin/<name>."""
    double = Path(doubles_dir) / name
    if not double.is_file():
        raise TestbedError(f"test double {double} is missing")
    files: dict[str, bytes | Path] = {f"usr/bin/{name}": double}
    if name == "kubelet":
        files["usr/lib/systemd/system/kubelet.service"] = KUBELET_SERVICE.encode()
    if name == "kubeadm":
        files["usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"] = KUBEADM_DROP_IN.encode()
    deps = {"Depends": _DEPENDS[name]} if name in _DEPENDS else {}
    _build_deb(staging, repo, name, f"{version}-{PACKAGE_REVISION}", arch, files, deps)


def _build_deb(
    staging: Path,
    repo: Path,
    name: str,
    version: str,
    arch: str,
    files: Mapping[str, bytes | Path],
    fields: Mapping[str, str],
) -> None:
    """``dpkg-deb --build`` a package holding ``files`` (in-package path -> content)."""
    tree = staging / f"{name}_{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    for inside, content in files.items():
        target = tree / inside
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
            target.chmod(0o755)
        else:
            target.write_bytes(content)
            target.chmod(0o644)
    control = {
        "Package": name,
        "Version": version,
        "Architecture": arch,
        "Maintainer": "gpustack test bed <testbed@invalid>",
        "Section": "misc",
        "Priority": "optional",
        **fields,
        "Description": f"{name} test double for the gpustack test bed",
    }
    (tree / "DEBIAN/control").write_text("".join(f"{k}: {v}\n" for k, v in control.items()))
    deb = repo / f"{name}_{version}_{arch}.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)], timeout=60)


def _gpg(home: Path, *args: str) -> str:
    """Run gpg in the throwaway keyring (a short stand-in for a long path: gpg_home) and return its stdout."""
    cmd = ["gpg", "--homedir", str(gpg_home(home)), "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase"]
    return run([*cmd, "", *args], timeout=120).stdout


def _make_signing_key(home: Path) -> str:
    """Generate a throwaway signing key; return its fingerprint."""
    home.mkdir(mode=0o700)
    _gpg(home, "--quick-gen-key", "gpustack test bed repo <testbed@invalid>", "rsa3072", "sign", "never")
    listing = _gpg(home, "--with-colons", "--list-secret-keys")
    for line in listing.splitlines():
        if line.startswith("fpr:"):
            return line.split(":")[9]
    raise TestbedError("gpg produced no key fingerprint")


def _signing_key(home: Path) -> str:
    """The fingerprint of the key in ``home``, made there when it has none."""
    if home.is_dir():
        for line in _gpg(home, "--with-colons", "--list-secret-keys").splitlines():
            if line.startswith("fpr:"):
                return line.split(":")[9]
        home.rmdir()
    return _make_signing_key(home)


def _write_indexes(repo: Path) -> None:
    """Packages, Packages.gz and Release of a flat repository."""
    packages = run(["apt-ftparchive", "packages", "."], timeout=120, cwd=repo).stdout
    # "Filename: ./x.deb" works but reads oddly in logs; make it "Filename: x.deb".
    (repo / "Packages").write_text(packages.replace("Filename: ./", "Filename: "))
    run(["gzip", "-9kf", str(repo / "Packages")], timeout=30)
    release = run(
        [
            "apt-ftparchive",
            "-o",
            "APT::FTPArchive::Release::Origin=gpustack-testbed",
            "-o",
            "APT::FTPArchive::Release::Label=gpustack-testbed",
            "release",
            ".",
        ],
        timeout=60,
        cwd=repo,
    ).stdout
    (repo / "Release").write_text(release)


def _sign_release(repo: Path, home: Path) -> None:
    """InRelease (clear-signed) and Release.gpg (detached) next to Release."""
    release = str(repo / "Release")
    _gpg(home, "--digest-algo", "SHA512", "--clearsign", "-o", str(repo / "InRelease"), release)
    _gpg(home, "--digest-algo", "SHA512", "-abs", "-o", str(repo / "Release.gpg"), release)


# --- Helm tarball ------------------------------------------------------------------------


@dataclass(frozen=True)
class HelmTarball:
    """A published Helm archive: its file, URL path and sha256."""

    path: Path
    url_path: str
    sha256: str


def build_helm_tarball(helm_binary: Path, out_dir: Path, version: str = "4.3.0", arch: str = "amd64") -> HelmTarball:
    """Write ``out_dir/helm/helm-v<version>-linux-<arch>.tar.gz`` holding
    ``linux-<arch>/helm`` (the double), like get.helm.sh."""
    url_path = f"/helm/helm-v{version}-linux-{arch}.tar.gz"
    target = Path(out_dir) / url_path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w:gz") as tar:
        for inside, source in ((f"linux-{arch}/helm", helm_binary),):
            info = tar.gettarinfo(str(source), arcname=inside)
            info.mode, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, "root", "root"
            with source.open("rb") as fh:
                tar.addfile(info, fh)
    return HelmTarball(target, url_path, sha256_of(target))


def local_sources(base: str) -> dict[str, str]:
    """URL templates for gpustack.yaml ``sources:`` that point at the test bed's HTTP server
    (same placeholders as the product: {minor}, {version}, {arch})."""
    base = base.rstrip("/")
    return {
        "kubernetes_apt_url": f"{base}/k8s/v{{minor}}/deb/",
        "kubernetes_apt_key_url": f"{base}/k8s/v{{minor}}/deb/Release.key",
        "helm_url": f"{base}/helm/helm-v{{version}}-linux-{{arch}}.tar.gz",
        "containerd_url": base
        + "/containerd/containerd/releases/download/v{version}/containerd-{version}-linux-{arch}.tar.gz",
        "runc_url": base + "/opencontainers/runc/releases/download/v{version}/runc.{arch}",
    }


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- forward proxy -----------------------------------------------------------------------

_HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailers", "transfer-encoding", "upgrade",
}  # fmt: skip


class ForwardProxy:
    """HTTP forward proxy on ``host:port`` that forwards only to ``allowed`` networks.

    Host names are never resolved through DNS: only ``localhost``, IP literals, the names of
    live test hosts and names in ``names`` are accepted, so nothing can leak to the outside. Refused
    requests get 403 and are recorded like the others (see :attr:`requests`, ``log_path``).
    """

    def __init__(
        self,
        *,
        host: str = BRIDGE_ADDRESS,
        port: int = 3128,
        allowed: Iterable[str] = ("127.0.0.0/8", str(SUBNET)),
        names: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.host, self.port = host, port
        self.allowed = [ipaddress.ip_network(n) for n in allowed]
        self.names: dict[str, str] = {"localhost": "127.0.0.1", **(names or {})}
        self.timeout = timeout
        self._recorder = _Recorder(log_path)
        self._thread = _ServerThread(_ThreadedServer((host, port), self._handler()), f"proxy-{port}")

    @property
    def url(self) -> str:
        """Proxy URL for clients, e.g. ``http://10.213.0.1:3128``."""
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[Request]:
        """Every request seen, forwarded or refused (status 403)."""
        return self._recorder.snapshot()

    def count(self, contains: str = "", status: int | None = None) -> int:
        """How many requests had ``contains`` in their target (and ``status``, if given)."""
        return sum(1 for r in self.requests if contains in r.target and (status is None or r.status == status))

    def resolve(self, hostname: str) -> str | None:
        """The address to connect to for ``hostname``, or None when it is not allowed."""
        names = {**TestbedNetwork.host_names(), **self.names}
        address = names.get(hostname.lower(), hostname)
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return None
        return str(ip) if any(ip in net for net in self.allowed) else None

    def close(self) -> None:
        """Stop the proxy."""
        self._thread.close()

    def _handler(self) -> type[BaseRequestHandler]:
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        return Handler


class _ProxyHandler(BaseHTTPRequestHandler):
    """Request handler of :class:`ForwardProxy` (absolute-URI requests and CONNECT)."""

    owner: ForwardProxy
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _record(self, status: int, note: str = "") -> None:
        self.owner._recorder.add(Request(self.client_address[0], self.command, self.path, status), note)

    def _refuse(self, status: int, why: str) -> None:
        self._record(status, why)
        body = f"gpustack test bed proxy: {why}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_CONNECT(self) -> None:
        host, _, port_text = self.path.rpartition(":")
        address = self.owner.resolve(host)
        if address is None or not port_text.isdigit():
            self._refuse(403, f"CONNECT to {self.path} is not allowed")
            return
        try:
            upstream = socket.create_connection((address, int(port_text)), timeout=10)
        except OSError as exc:
            self._refuse(502, f"cannot reach {self.path}: {exc}")
            return
        self._record(200, "tunnel")
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        with upstream:
            _pump(self.connection, upstream, self.owner.timeout)
        self.close_connection = True

    def _forward(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            self._refuse(400, f"not an absolute http:// URL: {self.path}")
            return
        address = self.owner.resolve(url.hostname)
        if address is None:
            self._refuse(403, f"{url.hostname} is not an allowed destination")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Connection"] = "close"
        target = url.path or "/"
        if url.query:
            target += "?" + url.query
        conn = http.client.HTTPConnection(address, url.port or 80, timeout=self.owner.timeout)
        try:
            conn.request(self.command, target, body=body, headers=headers)
            response = conn.getresponse()
        except OSError as exc:
            conn.close()
            self._refuse(502, f"upstream error: {exc}")
            return
        with contextlib.closing(conn):
            self._relay(response)

    def _relay(self, response: http.client.HTTPResponse) -> None:
        """Copy an upstream response to the client."""
        self._record(response.status)
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP_BY_HOP:
                self.send_header(key, value)
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            for chunk in iter(lambda: response.read(1 << 16), b""):
                self.wfile.write(chunk)
        self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_PATCH = _forward


def _pump(a: socket.socket, b: socket.socket, idle_timeout: float) -> None:
    """Copy bytes both ways until either side closes or nothing moves for ``idle_timeout``."""
    sockets = [a, b]
    while True:
        readable, _, broken = select.select(sockets, [], sockets, idle_timeout)
        if broken or not readable:
            return
        for src in readable:
            dst = b if src is a else a
            try:
                data = src.recv(1 << 16)
                if not data:
                    return
                dst.sendall(data)
            except OSError:
                return


@dataclass(frozen=True)
class Sources:
    """What `gpustack up` downloads, served on the bed's network: the file server with the signed
    Kubernetes apt repo and the Helm tarball; and the forward proxy (Flannel's manifest is rendered
    by gpustack: nothing to serve), and containerd 2 / runc as release downloads.

    Every field is required: preflight (P24) tries every download `up` will make, so a source left
    out fails the run (scripts/bench_up.py once built one without the runtime archives)."""

    http: HttpServer
    k8s_repo: K8sRepo
    helm: HelmTarball
    proxy: ForwardProxy
    #: containerd 2 / runc release downloads (tests/testbed/runtime.py publish_runtime)
    runtime: RuntimeArchives
