"""etcdutl from etcd's release archive (roles/etcd_restore/tasks/etcdutl.yml), for a control plane whose etcd image
lacks it: the real ansible-playbook, get_url and unarchive inside a private mount namespace whose overlays over /etc,
/var, /usr keep every change there (sandbox.OVERLAY_ROOT). The archive is laid out as etcd's release
(``etcd-v3.6.8-linux-<arch>/etcdutl``) with the **real etcdutl 3.6.8** inside (tests/realbin, the etcd tools module)
and served on loopback over HTTP; its sha256 is the test's (the pinned ones are of the published archives, which
cannot be downloaded here).

- a wrong checksum fails naming the archive, and no etcdutl is unpacked;
- with no etcdutl on the PATH and an etcd image without one (test_etcd_restore_module.py's ctr double answers as ctr
  does for a missing binary), the archive is downloaded (0600, in a 0700 directory of gpustack's own), only etcdutl unpacked, and the
  module's probe runs it: version 3.6.8, the path the stop and restore phases are then given;
- a converged re-run changes nothing; a host with an etcdutl on its PATH downloads nothing.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpustack.config import pins
from tests.realbin.gobuild import binary
from tests.unit.playbooks.conftest import ROLE_ENV
from tests.unit.playbooks.sandbox import OVERLAY_ROOT, available
from tests.unit.playbooks.test_etcd_restore_host import MANIFEST
from tests.unit.playbooks.test_etcd_restore_module import CTR  # ctr of containerd 2.x: an image without etcdutl

ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
RELEASE = f"etcd-v{pins.ETCD_VERSION}-linux-{ARCH}"
DIR = "/var/lib/gpustack/etcd-release"

SCRIPT = (
    OVERLAY_ROOT
    + r"""
mkdir -p /etc/kubernetes/manifests /usr/local/bin
cp "$GS_MANIFEST" /etc/kubernetes/manifests/etcd.yaml
install -m 0755 "$GS_CTR" /usr/local/bin/ctr
run() { ansible-playbook -i localhost, -c local "$GS_PLAYBOOK" -e "@$1" && echo "FOUND $(cat /var/tmp/etcdutl-found.json)"; }
echo "=== WRONG"; run "$GS_WRONG" || echo "rc=$?"; test ! -e "$GS_DIR/$GS_RELEASE/etcdutl" && echo "nothing unpacked"
echo "=== FIRST"; run "$GS_VARS"
stat -c '%n %a' "$GS_DIR" "$GS_DIR/$GS_RELEASE" "$GS_DIR/$GS_RELEASE.tar.gz" "$GS_DIR/$GS_RELEASE/etcdutl"
ls "$GS_DIR/$GS_RELEASE"
echo "=== AGAIN"; run "$GS_VARS"
echo "=== PATH"; install -m 0755 "$GS_ETCDUTL" /usr/local/bin/etcdutl; run "$GS_VARS"
"""
)
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Find an etcdutl, or take one from etcd's release archive
      ansible.builtin.import_role:
        name: etcd_restore
        tasks_from: etcdutl.yml
    - name: Record which etcdutl the restore would run
      ansible.builtin.copy:
        content: >-
          {{ {'etcdutl': etcd_restore_etcdutl_found, 'probe': etcd_restore_probe,
              'release': etcd_restore_probe_release | default({})} | to_json }}
        dest: /var/tmp/etcdutl-found.json
        mode: "0600"
"""


def _archive(path: Path, etcdutl: Path) -> str:
    """etcd's release layout: every binary under ``etcd-v<v>-linux-<arch>/`` (etcd, etcdctl, etcdutl, README...);
    a README beside the real etcdutl stands for what the role must not unpack."""
    with tarfile.open(path, "w:gz") as tar:
        tar.add(etcdutl, arcname=f"{RELEASE}/etcdutl")
        readme = b"etcd release stand-in\n"
        info = tarfile.TarInfo(f"{RELEASE}/README.md")
        info.size = len(readme)
        tar.addfile(info, io.BytesIO(readme))
    return hashlib.sha256(path.read_bytes()).hexdigest()


GETS: list[str] = []


class _Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        GETS.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "www"
    root.mkdir()
    GETS.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _section(out: str, name: str, following: str | None) -> str:
    part = out.split(f"=== {name}", 1)[1]
    return part.split(f"=== {following}", 1)[0] if following else part


def _found(section: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(next(x for x in section.splitlines() if x.startswith("FOUND "))[6:])
    return found


def _task(section: str, name: str) -> str:
    """What Ansible printed first for the task ``name`` (ok, changed, skipping, fatal)."""
    after = section.split(f"TASK [etcd_restore : {name}]", 1)[1].split("\nTASK [", 1)[0]
    return next(
        w for line in after.splitlines() if (w := line.split(":", 1)[0]) in ("ok", "changed", "skipping", "fatal")
    )


def test_etcdutl_downloaded_verified_unpacked_and_run_only_where_none_is_found(tmp_path: Path, served: str) -> None:
    why = available()
    if why:
        pytest.skip(f"sandbox unavailable: {why}")  # under scripts/test.sh's PYTEST_NO_SKIPS a skip fails CI
    etcdutl = binary("etcdutl")  # the real etcdutl 3.6.8 (built once into the realbin cache)
    sha = _archive(tmp_path / "www" / f"{RELEASE}.tar.gz", etcdutl)
    common = {"gpustack_etcd_restore_id": "20261129T080000Z", "gpustack_etcd_version": pins.ETCD_VERSION}
    url = f"{served}/{RELEASE}.tar.gz"
    (tmp_path / "vars.json").write_text(
        json.dumps({**common, "gpustack_etcd_downloads": {ARCH: {"url": url, "sha256": sha}}})
    )
    (tmp_path / "wrong.json").write_text(
        json.dumps({**common, "gpustack_etcd_downloads": {ARCH: {"url": url, "sha256": "0" * 64}}})
    )
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "etcd.yaml").write_text(MANIFEST)
    (tmp_path / "ctr").write_text(CTR.format(python=sys.executable))
    env = dict(os.environ, GS_SANDBOX=str(tmp_path / "sb"), GS_PLAYBOOK=str(tmp_path / "play.yml"),
               GS_VARS=str(tmp_path / "vars.json"), GS_WRONG=str(tmp_path / "wrong.json"),
               GS_MANIFEST=str(tmp_path / "etcd.yaml"), GS_CTR=str(tmp_path / "ctr"), GS_ETCDUTL=str(etcdutl),
               GS_DIR=DIR, GS_RELEASE=RELEASE, PATH="/usr/local/bin:" + os.environ["PATH"], **ROLE_ENV)  # fmt: skip
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]

    download = f"Download and verify {RELEASE}.tar.gz"
    wrong = _section(out, "WRONG", "FIRST")
    assert _task(wrong, download) == "fatal" and "rc=2" in wrong, wrong[-3000:]
    assert f"did not match {'0' * 64}" in wrong and "nothing unpacked" in wrong, wrong[-3000:]

    first = _section(out, "FIRST", "AGAIN")
    assert "failed=0" in first.split("PLAY RECAP", 1)[1], first[-3000:]
    found = _found(first)
    assert found["probe"]["found"] is False  # nothing on the PATH, the image's ctr run failed: hence the download
    assert "executable file not found" in found["probe"]["reason"]
    assert _task(first, download) == "changed"
    # the unpacked file is the real etcdutl: the module's probe ran it and read etcd's version from it
    assert found["release"]["found"] is True and found["release"]["version"] == pins.ETCD_VERSION
    assert found["release"]["etcdutl"] == [f"{DIR}/{RELEASE}/etcdutl"] == [found["etcdutl"]]  # stop/restore get it
    modes = dict(line.rsplit(" ", 1) for line in first.splitlines() if line.startswith(DIR))
    assert modes[DIR] == "700" and modes[f"{DIR}/{RELEASE}"] == "700", modes
    assert modes[f"{DIR}/{RELEASE}.tar.gz"] == "600", modes
    assert modes[f"{DIR}/{RELEASE}/etcdutl"] == "755", modes  # the release's own mode
    listed = first.split(f"{DIR}/{RELEASE}/etcdutl 755\n", 1)[1].split("=== ", 1)[0].split()
    assert listed == ["etcdutl"]  # only etcdutl unpacked, not the rest of the release

    again = _section(out, "AGAIN", "PATH")
    recap = again.split("PLAY RECAP", 1)[1]
    assert "changed=0 " in recap and "failed=0" in recap, again[-3000:]  # converged: not even downloaded again
    assert _task(again, download) == "ok" and _task(again, f"Unpack etcdutl from {RELEASE}.tar.gz") == "ok"
    # the wrong checksum's download and the first run's; none since
    assert len(GETS) == 2 and set(GETS) == {f"/{RELEASE}.tar.gz"}

    on_path = _section(out, "PATH", None)
    found = _found(on_path)
    assert found["probe"]["found"] is True and found["probe"]["version"] == pins.ETCD_VERSION
    assert found["probe"]["etcdutl"] == ["/usr/local/bin/etcdutl"] and found["etcdutl"] == ""  # the module's own
    assert _task(on_path, "Gather the architecture") == "skipping" and download not in on_path.split("TASK [")[-1]
