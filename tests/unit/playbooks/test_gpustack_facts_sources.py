"""gpustack_facts' package-source probes: the proxy rules, apt sources parsing, and real requests
to a local server, direct and through a forward proxy that refuses the outside (the test bed's)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.testbed.services import ForwardProxy

PROXY = {"HTTP_PROXY": "http://proxy:3128", "HTTPS_PROXY": "http://sproxy:3128"}


def test_proxy_for_follows_the_scheme_and_no_proxy(sources_utils: ModuleType) -> None:
    proxy_for = sources_utils.proxy_for
    no = {**PROXY, "NO_PROXY": "localhost,127.0.0.1,10.244.0.0/16,.svc,mirror.example.com,10.0.0.5"}
    assert proxy_for("https://pkgs.k8s.io/x", no) == "http://sproxy:3128"
    assert proxy_for("http://deb.debian.org/debian/dists/x", no) == "http://proxy:3128"
    assert proxy_for("http://mirror.example.com/x", no) is None
    assert proxy_for("http://apt.mirror.example.com/x", no) is None, "a domain entry covers its subdomains"
    assert proxy_for("http://notmirror.example.com/x", no) == "http://proxy:3128", "only whole labels match"
    assert proxy_for("http://10.244.3.4:8080/x", no) is None, "CIDR entries"
    assert proxy_for("http://10.0.0.5/x", no) is None
    assert proxy_for("http://kube-dns.svc/x", no) is None
    assert proxy_for("https://pkgs.k8s.io/x", {"HTTP_PROXY": "http://proxy:3128"}) is None, "no https proxy: direct"
    assert proxy_for("https://x.io/", {**PROXY, "NO_PROXY": "*"}) is None
    assert proxy_for("https://x.io/", {}) is None


def test_apt_sources_both_formats(sources_utils: ModuleType) -> None:
    one_line = """\
# deb http://commented.example.com/debian bookworm main
deb http://deb.debian.org/debian bookworm main contrib
deb-src http://deb.debian.org/debian bookworm main
deb [signed-by=/etc/apt/keyrings/kubernetes.gpg arch=amd64] https://pkgs.k8s.io/core:/stable:/v1.36/deb/ /
deb cdrom:[Debian 12]/ bookworm main
deb file:/srv/repo ./
"""
    assert sources_utils.parse_apt_sources(one_line) == [
        ("http://deb.debian.org/debian", "bookworm"),
        ("http://deb.debian.org/debian", "bookworm"),
        ("https://pkgs.k8s.io/core:/stable:/v1.36/deb/", "/"),
    ]
    deb822 = """\
Types: deb
URIs: http://archive.ubuntu.com/ubuntu/
Suites: noble noble-updates
Components: main restricted
Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg

Types: deb
URIs: http://disabled.example.com/ubuntu/
Suites: noble
Enabled: no

Types: deb
URIs: http://security.ubuntu.com/ubuntu/
  http://mirror.example.com/ubuntu/
Suites: noble-security
"""
    assert sources_utils.parse_apt_sources(deb822, deb822=True) == [
        ("http://archive.ubuntu.com/ubuntu/", "noble"),
        ("http://archive.ubuntu.com/ubuntu/", "noble-updates"),
        ("http://security.ubuntu.com/ubuntu/", "noble-security"),
        ("http://mirror.example.com/ubuntu/", "noble-security"),
    ]
    url = sources_utils.apt_release_url
    assert url("http://deb.debian.org/debian", "bookworm") == "http://deb.debian.org/debian/dists/bookworm/InRelease"
    assert (
        url("https://pkgs.k8s.io/core:/stable:/v1.36/deb/", "/")
        == "https://pkgs.k8s.io/core:/stable:/v1.36/deb/InRelease"
    )
    assert url("http://m/repo", "stable/") == "http://m/repo/stable/InRelease"
    assert sources_utils.registry_url("nvcr.io") == "https://nvcr.io/v2/"
    assert sources_utils.registry_url("docker.io") == "https://registry-1.docker.io/v2/"
    assert sources_utils.registry_url("http://10.0.0.1:5000/") == "http://10.0.0.1:5000/v2/"


def test_the_hosts_apt_sources_leave_out_gpustacks_own_files(
    sources_utils: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kubernetes.list is rewritten from the config by the kubernetes stage (and probed as
    configured): an old one, e.g. from a run with a wrong URL, must not fail the preflight."""
    (tmp_path / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (tmp_path / "kubernetes.list").write_text(
        "# Managed by gpustack (role kubernetes_packages)\ndeb [signed-by=/k.asc] http://old.mirror/nowhere/ /\n"
    )
    monkeypatch.setattr(sources_utils, "APT_SOURCE_DIRS", (str(tmp_path / "*.list"),))
    assert sources_utils.host_apt_sources() == [("http://deb.debian.org/debian", "bookworm")]


def test_expand_sources_filters_arch_and_converged_stages(sources_utils: ModuleType) -> None:
    specs = [
        {"name": "helm", "url": "http://m/helm-amd64", "kind": "file", "stage": "helm", "arch": "amd64"},
        {"name": "helm", "url": "http://m/helm-arm64", "kind": "file", "stage": "helm", "arch": "arm64"},
        {"name": "key", "url": "http://m/Release.key", "kind": "file", "stage": "kubernetes"},
        {"name": "reg", "url": "nvcr.io", "kind": "registry", "stage": ""},
    ]
    probe, skipped = sources_utils.expand_sources(specs, "amd64", {"kubernetes": True, "helm": False})
    assert [p["url"] for p in probe] == ["http://m/helm-amd64", "nvcr.io"]
    assert [s["url"] for s in skipped] == ["http://m/Release.key"]
    assert skipped[0]["skipped"] == "stage kubernetes converged on this host"


# --- real requests --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Handler(BaseHTTPRequestHandler):
    """A package mirror and a registry in one: InRelease and files 200/206, /v2/ 401, else 404."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        if self.path == "/slow":
            time.sleep(3)
        if self.path.endswith(("InRelease", ".tar.gz", "/slow")):
            status, body = 206, b"x"
        elif self.path == "/v2/":
            status, body = 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}'
        else:
            status, body = 404, b"not found"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def mirror() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", _free_port()), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def proxy() -> Iterator[ForwardProxy]:
    """The test bed's proxy, on loopback: forwards to 127.0.0.0/8 only, 403 for anything else."""
    p = ForwardProxy(host="127.0.0.1", port=_free_port(), allowed=("127.0.0.0/8",))
    yield p
    p.close()


def test_probe_direct(sources_utils: ModuleType, mirror: str) -> None:
    probe = sources_utils.probe_url
    assert probe(f"{mirror}/deb/InRelease", None, 5) == {"ok": True, "status": 206, "error": None}
    assert probe(f"{mirror}/v2/", None, 5, "registry")["ok"], "401 is a registry's normal answer"
    missing = probe(f"{mirror}/v2/", None, 5, "file")
    assert not missing["ok"] and missing["error"] == "HTTP 401 Unauthorized"
    gone = probe(f"{mirror}/deb/Release.key", None, 5)
    assert gone == {"ok": False, "status": 404, "error": "HTTP 404 Not Found"}
    refused = probe(f"http://127.0.0.1:{_free_port()}/x", None, 5)
    assert not refused["ok"] and "refused" in refused["error"].lower()
    t0 = time.monotonic()
    slow = probe(f"{mirror}/slow", None, 0.5)
    assert not slow["ok"] and "timed out" in slow["error"] and time.monotonic() - t0 < 2.5


def test_probe_through_the_proxy(sources_utils: ModuleType, mirror: str, proxy: ForwardProxy) -> None:
    env = {"HTTP_PROXY": proxy.url, "HTTPS_PROXY": proxy.url, "NO_PROXY": "localhost"}
    specs = [
        {"name": "Kubernetes apt repository", "url": f"{mirror}/deb/InRelease", "kind": "apt", "stage": "kubernetes"},
        {"name": "image registry mirror", "url": mirror, "kind": "registry", "stage": ""},
        {"name": "Helm download", "url": "http://192.0.2.7/helm.tar.gz", "kind": "file", "stage": "helm"},
        {"name": "apt key", "url": "https://pkgs.k8s.io/core:/stable:/v1.36/deb/Release.key", "kind": "file",
         "stage": "kubernetes"},
    ]  # fmt: skip
    before = len(proxy.requests)
    got = {r["name"]: r for r in sources_utils.collect_sources(specs, env, 5, {})}
    assert got["Kubernetes apt repository"]["ok"] and got["Kubernetes apt repository"]["via"] == proxy.url.removeprefix(
        "http://"
    )
    assert got["image registry mirror"]["ok"] and got["image registry mirror"]["url"] == f"{mirror}/v2/"
    denied = got["Helm download"]
    assert (
        not denied["ok"]
        and denied["error"] == "HTTP 403 Forbidden"
        and denied["via"] == proxy.url.removeprefix("http://")
    )
    tunnel = got["apt key"]
    assert not tunnel["ok"] and "403" in tunnel["error"], "CONNECT refused by the proxy"
    assert len(proxy.requests) - before == 4, "every probe went through the proxy"

    direct = sources_utils.collect_sources(specs[:1], {**env, "NO_PROXY": "127.0.0.1"}, 5, {})
    assert direct[0]["ok"] and direct[0]["via"] == "direct", "NO_PROXY sends a local mirror direct"
    assert len(proxy.requests) - before == 4
