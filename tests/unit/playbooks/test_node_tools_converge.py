"""The kubernetes stage's CNI plugins and crictl (roles/kubernetes_packages/tasks/tools.yml) converge for real in a
sandbox (sandbox.py), twice: each archive verified against its sha256 before it is unpacked, the plugins in
/opt/cni/bin, crictl in /usr/local/bin, the second run changed=0; an archive whose sha256 is not the pin fails,
naming it, and leaves nothing unpacked.

The archives are small stand-ins laid out like the releases (the real ones' checksums are in the pin table and
cannot be fetched here); only the tasks tagged ``node-tools`` run (the rest of the stage needs apt and systemd:
the nspawn test bed).
"""

from __future__ import annotations

import hashlib
import io
import stat
import tarfile
from pathlib import Path

import pytest
from sandbox import Sandbox, available

from gpustack.config import pins
from gpustack.config.model import Config, Node

reason = available()
pytestmark = pytest.mark.skipif(reason is not None, reason=f"sandbox unavailable: {reason}")

PLUGINS = ("bridge", "host-local", "loopback", "portmap")


def _tarball(path: Path, members: dict[str, bytes]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _downloads(tmp: Path) -> dict[str, object]:
    cni = tmp / f"cni-plugins-linux-amd64-v{pins.CNI_PLUGINS_VERSION}.tgz"
    crictl = tmp / f"crictl-v{pins.CRICTL_VERSION}-linux-amd64.tar.gz"
    cni_sha = _tarball(cni, {f"./{p}": f"#!/bin/sh\necho {p}\n".encode() for p in PLUGINS})
    crictl_sha = _tarball(crictl, {"crictl": b"#!/bin/sh\necho crictl stand-in\n"})
    return {
        "gpustack_cni_plugins_downloads": {"amd64": {"url": cni.as_uri(), "sha256": cni_sha}},
        "gpustack_crictl_downloads": {"amd64": {"url": crictl.as_uri(), "sha256": crictl_sha}},
    }


def test_cni_plugins_and_crictl_verified_unpacked_and_idempotent(tmp_path: Path) -> None:
    cfg = Config(nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")])
    box = Sandbox(tmp_path / "sb", cfg)
    extra = _downloads(tmp_path)
    first = box.converge("node-tools", extra=extra)
    assert first.rc == 0, first.output
    assert first.recap()["cp1"]["changed"] >= 4, first.output  # directories, two downloads, two unpacks
    for plugin in PLUGINS:
        path = box.cp_file(f"/opt/cni/bin/{plugin}")
        assert path.read_text() == f"#!/bin/sh\necho {plugin}\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o755
    crictl = box.cp_file("/usr/local/bin/crictl")
    assert crictl.read_text() == "#!/bin/sh\necho crictl stand-in\n" and stat.S_IMODE(crictl.stat().st_mode) == 0o755
    # the download names say what was verified
    assert f"Download and verify cni-plugins-linux-amd64-v{pins.CNI_PLUGINS_VERSION}.tgz" in first.output

    second = box.converge("node-tools", extra=extra)
    assert second.rc == 0, second.output
    assert second.recap()["cp1"]["changed"] == 0, f"not idempotent:\n{second.output}"


def test_a_crictl_archive_that_is_not_the_pinned_one_is_refused(tmp_path: Path) -> None:
    cfg = Config(nodes=[Node(name="cp1", address="10.10.0.2", role="control-plane")])
    box = Sandbox(tmp_path / "sb", cfg)
    extra = _downloads(tmp_path)
    extra["gpustack_crictl_downloads"]["amd64"]["sha256"] = "0" * 64  # type: ignore[index]
    run = box.converge("node-tools", extra=extra)
    assert run.rc != 0
    assert f"Download and verify crictl-v{pins.CRICTL_VERSION}-linux-amd64.tar.gz" in run.output
    assert "checksum" in run.output.lower(), run.output
    assert not box.cp_file("/usr/local/bin/crictl").exists()
