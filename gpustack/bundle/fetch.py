"""HTTP downloads for ``bundle create``: hashed as they arrive, written under a temporary name in
the target directory and renamed into place only when complete and verified, so an interrupted
or failed download never leaves half a file under its final name.

requests (already a dependency of the Kubernetes client) does the HTTP: redirects (dropping the
Authorization header when they leave the host), the machine's proxy variables, TLS verification.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import requests

from gpustack.errors import GpustackError

TIMEOUT = (15, 120)  # connect, read (seconds)
_CHUNK = 1 << 16
USER_AGENT = "gpustack-bundle/1"


class FetchError(GpustackError):
    """A download failed or did not match its checksum (names the artifact and the URL)."""

    exit_code = 1


@dataclass(frozen=True)
class Fetched:
    sha256: str
    size: int


def session() -> requests.Session:
    s = requests.Session()
    s.headers["User-Agent"] = USER_AGENT
    return s


@contextmanager
def atomic_writer(final: Path) -> Iterator[IO[bytes]]:
    """A file that appears as ``final`` only if the block completes (fsync, then rename)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.partial")
    fh = tmp.open("wb")
    try:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        os.replace(tmp, final)
    except BaseException:
        fh.close()
        tmp.unlink(missing_ok=True)
        raise


def download(
    http: requests.Session,
    url: str,
    dest: Path,
    *,
    what: str,
    sha256: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Fetched:
    """GET ``url`` into ``dest``; with ``sha256`` the bytes must hash to it (else nothing is kept)."""
    digest = hashlib.sha256()
    size = 0
    try:
        with http.get(url, stream=True, timeout=TIMEOUT, headers=dict(headers or {})) as resp:
            if resp.status_code != 200:
                raise FetchError(f"{what}: {url} answered HTTP {resp.status_code}", hint=_hint(resp.status_code))
            with atomic_writer(dest) as fh:
                for chunk in resp.iter_content(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
                    fh.write(chunk)
                if sha256 is not None and digest.hexdigest() != sha256:
                    raise FetchError(
                        f"{what}: the download from {url} has sha256 {digest.hexdigest()}, the pin is {sha256}; "
                        "nothing was kept",
                        hint="a mirror serving another file, or a pin to correct in gpustack.yaml (versions:)",
                    )
    except requests.RequestException as exc:
        raise FetchError(
            f"{what}: {url} could not be fetched: {exc}", hint="check the connection and sources:"
        ) from None
    return Fetched(digest.hexdigest(), size)


def get_bytes(http: requests.Session, url: str, *, what: str, **kw: Any) -> bytes:
    try:
        resp = http.get(url, timeout=TIMEOUT, **kw)
    except requests.RequestException as exc:
        raise FetchError(f"{what}: {url} could not be fetched: {exc}") from None
    if resp.status_code != 200:
        raise FetchError(f"{what}: {url} answered HTTP {resp.status_code}", hint=_hint(resp.status_code))
    return resp.content


def _hint(status: int) -> str:
    if status in (401, 403):
        return "the source wants credentials gpustack does not have; mirror it (sources:) where it can be read"
    if status == 404:
        return "no such file at that source: check the version and the sources: URL templates"
    return "check the source (sources: in gpustack.yaml) and try again: bundle create resumes"
