"""The package sources and image registries the preflight tries from a host (gpustack_facts'
``sources``): which to probe on this host (its architecture, the stages converged here, the host's own
apt repositories), through which proxy (the no_proxy rules curl and apt follow), and the probe itself.

Standard library only; the probe list comes from gpustack/checks/sources.py.
"""

from __future__ import annotations

import concurrent.futures
import glob
import ipaddress
import os
import re
import urllib.error
import urllib.parse
import urllib.request


def _read_text(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


APT_SOURCE_DIRS = ("/etc/apt/sources.list", "/etc/apt/sources.list.d/*.list", "/etc/apt/sources.list.d/*.sources")


ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}


#: an image registry's API endpoint when the name is not the host that serves it
REGISTRY_HOSTS = {"docker.io": "registry-1.docker.io"}


def _host_in_no_proxy(host: str, entries: list[str]) -> bool:
    """curl's NO_PROXY rules: ``*``; a host or domain (``example.com`` and ``.example.com`` match
    the domain and its subdomains); an IP address; a CIDR (which curl 7.86+ and Go accept)."""
    host = host.lower().strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for entry in entries:
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if ip is not None and "/" in entry:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = entry.split(":")[0] if entry.count(":") == 1 else entry
        domain = name.lstrip(".")
        if host == domain or host.endswith("." + domain):
            return True
    return False


def shown_proxy(proxy: str) -> str:
    """How a result names its proxy: ``[user@]host:port``, never its password nor the URL as configured (the
    module's ``proxy_env`` argument is no_log, and Ansible masks every occurrence of those URLs in its results)."""
    parts = urllib.parse.urlsplit(proxy)
    host = parts.hostname or proxy
    if ":" in host:
        host = f"[{host}]"
    user = f"{urllib.parse.unquote(parts.username)}@" if parts.username else ""
    return f"{user}{host}:{parts.port}" if parts.port else f"{user}{host}"


def proxy_for(url: str, proxy_env: dict) -> str | None:
    """The proxy a download of ``url`` goes through with gpustack's proxy settings (None: direct).
    https:// URLs use HTTPS_PROXY, http:// URLs HTTP_PROXY, unless NO_PROXY names the host."""
    parts = urllib.parse.urlsplit(url)
    key = "HTTPS_PROXY" if parts.scheme == "https" else "HTTP_PROXY"
    proxy = proxy_env.get(key) or proxy_env.get(key.lower())
    if not proxy:
        return None
    no_proxy = str(proxy_env.get("NO_PROXY") or proxy_env.get("no_proxy") or "").split(",")
    return None if _host_in_no_proxy(parts.hostname or "", no_proxy) else str(proxy)


def parse_apt_sources(text: str, deb822: bool = False) -> list[tuple[str, str]]:
    """(uri, suite) of every enabled repository in a sources.list (one-line format) or, with
    ``deb822``, a .sources file. Only http(s) repositories: cdrom:, file: and others need no network."""
    out: list[tuple[str, str]] = []
    if deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            key = ""
            for line in stanza.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if line[0] in " \t" and key:
                    fields[key] += " " + line.strip()
                    continue
                key, _, value = line.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
            if fields.get("enabled", "yes").lower() == "no" or "uris" not in fields:
                continue
            for uri in fields["uris"].split():
                for suite in fields.get("suites", "").split():
                    out.append((uri, suite))
    else:
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line.startswith(("deb ", "deb-src ", "deb\t", "deb-src\t")):
                continue
            line = re.sub(r"\[[^\]]*\]", " ", line)  # [signed-by=... arch=...]
            words = line.split()
            if len(words) >= 3:
                out.append((words[1], words[2]))
    return [(u, s) for u, s in out if u.startswith(("http://", "https://"))]


def apt_release_url(uri: str, suite: str) -> str:
    """The InRelease file apt fetches first for a repository: flat (``suite`` ends with /) or not."""
    if suite.endswith("/"):
        return uri.rstrip("/") + "/" + suite.strip("/") + ("/" if suite.strip("/") else "") + "InRelease"
    return uri.rstrip("/") + "/dists/" + suite + "/InRelease"


def registry_url(name: str) -> str:
    """``nvcr.io`` -> ``https://nvcr.io/v2/``; ``http://mirror:5000`` -> ``http://mirror:5000/v2/``."""
    if "://" not in name:
        host = name.strip("/")
        name = "https://" + REGISTRY_HOSTS.get(host, host)
    return name.rstrip("/") + "/v2/"


def probe_url(url: str, proxy: str | None, timeout: float, kind: str = "file") -> dict:
    """GET the first byte of ``url`` through ``proxy`` (None: direct, whatever the environment says).
    Any answer but an error status is reachable; for a registry, 401 is its normal answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {}))
    request = urllib.request.Request(url, headers={"Range": "bytes=0-0", "User-Agent": "gpustack-preflight"})
    try:
        with opener.open(request, timeout=timeout) as response:
            return {"ok": True, "status": response.status, "error": None}
    except urllib.error.HTTPError as exc:
        ok = exc.code == 416 or (kind == "registry" and exc.code == 401)
        return {"ok": ok, "status": exc.code, "error": None if ok else f"HTTP {exc.code} {exc.reason}"}
    except urllib.error.URLError as exc:
        return {"ok": False, "status": None, "error": str(exc.reason)}
    except Exception as exc:  # socket timeouts, bad status lines, TLS errors: all "cannot reach"
        return {"ok": False, "status": None, "error": f"{type(exc).__name__}: {exc}"}


#: the first line of the apt source files gpustack's roles write: those are rewritten from the
#: config by their stage (and their source is probed as configured), so an old one is not probed
MANAGED_MARKER = "# Managed by gpustack"


def host_apt_sources() -> list[tuple[str, str]]:
    """The host's own repositories, not those in files gpustack manages."""
    found: list[tuple[str, str]] = []
    for pattern in APT_SOURCE_DIRS:
        for path in sorted(glob.glob(pattern)):
            text = _read_text(path)
            if text and not text.startswith(MANAGED_MARKER):
                found += parse_apt_sources(text, deb822=path.endswith(".sources"))
    return list(dict.fromkeys(found))


def expand_sources(specs: list, arch: str, converged: dict) -> tuple[list[dict], list[dict]]:
    """(to probe, skipped) from the specs: other architectures dropped, stages converged on this
    host skipped, ``host-apt`` expanded into this host's own repositories."""
    probe: list[dict] = []
    skipped: list[dict] = []
    for spec in specs:
        if not isinstance(spec, dict):
            continue
        if spec.get("arch") and spec.get("arch") != arch:
            continue
        if spec.get("stage") and converged.get(spec["stage"]):
            skipped.append(dict(spec, skipped=f"stage {spec['stage']} converged on this host"))
            continue
        if spec.get("kind") == "host-apt":
            for uri, suite in host_apt_sources():
                probe.append(
                    dict(spec, kind="apt", name=f"apt repository {uri} {suite}", url=apt_release_url(uri, suite))
                )
        else:
            probe.append(dict(spec))
    return probe, skipped


def collect_sources(specs: list, proxy_env: dict, timeout: float, converged: dict) -> list[dict]:
    arch = ARCHES.get(os.uname().machine, os.uname().machine)
    probe, skipped = expand_sources(specs, arch, converged)
    probe = list({s["url"]: s for s in probe if s.get("url")}.values())

    def one(spec: dict) -> dict:
        url = registry_url(spec["url"]) if spec.get("kind") == "registry" else spec["url"]
        proxy = proxy_for(url, proxy_env)
        result = probe_url(url, proxy, timeout, spec.get("kind", "file"))
        return dict(spec, url=url, via=shown_proxy(proxy) if proxy else "direct", **result)

    if not probe:
        return skipped
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(probe))) as pool:
        return list(pool.map(one, probe)) + skipped
