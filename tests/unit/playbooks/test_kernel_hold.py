"""hosts.hold_kernel: which packages are held (playbooks/module_utils/gpustack_kernel_hold.py), the simulation
``gpustack node patch`` runs as if gpustack's kernel holds were released (gpustack_patch.unheld_status), and the
kubernetes_packages role's kernel_hold.yml for real: ansible-playbook with Ansible's dpkg_selections on real dpkg,
inside a private mount namespace whose overlays over /etc, /var, /usr keep every change there (as
test_node_patch_role.py): held, a converged re-run changes nothing, turned off only gpustack's holds are released."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.fakes.apt_archive import Pkg, build_deb
from tests.unit.playbooks.conftest import PLAYBOOKS, ROLE_ENV, load_path
from tests.unit.playbooks.sandbox import OVERLAY_ROOT, available


@pytest.fixture(scope="module")
def hold(host_parsers: ModuleType) -> ModuleType:
    return load_path(
        "ansible.module_utils.gpustack_kernel_hold", PLAYBOOKS / "module_utils" / "gpustack_kernel_hold.py"
    )


@pytest.fixture(scope="module")
def patch_utils() -> ModuleType:
    return load_path("ansible.module_utils.gpustack_patch", PLAYBOOKS / "module_utils" / "gpustack_patch.py")


DEBIAN = ["linux-image-amd64", "linux-image-6.1.0-28-amd64", "linux-image-6.1.0-28-amd64-unsigned",
          "linux-image-6.1.0-27-amd64", "linux-headers-amd64", "linux-headers-6.1.0-28-amd64",
          "nvidia-driver", "libnvidia-ml1", "nvidia-kernel-dkms", "cuda-drivers-550"]  # fmt: skip
UBUNTU = ["linux-image-generic-hwe-24.04", "linux-image-6.8.0-45-generic", "linux-image-unsigned-6.8.0-40-generic",
          "linux-modules-6.8.0-45-generic", "linux-generic-hwe-24.04"]  # fmt: skip


def test_the_kernel_meta_packages_the_running_image_and_the_driver(hold: ModuleType) -> None:
    assert hold.wanted(DEBIAN, "6.1.0-28-amd64") == {
        # the meta package that brings new kernels, the running one's image (and its unsigned twin); not the older
        # kernel, not the headers (the image held, no new headers are needed)
        "kernel": ["linux-image-6.1.0-28-amd64", "linux-image-6.1.0-28-amd64-unsigned", "linux-image-amd64"],
        "driver": ["cuda-drivers-550", "libnvidia-ml1", "nvidia-driver", "nvidia-kernel-dkms"],
    }
    # Ubuntu: the HWE meta package (its 24.04 is no kernel release); an unsigned kernel of its own is no meta package
    assert hold.wanted(UBUNTU, "6.8.0-45-generic")["kernel"] == [
        "linux-image-6.8.0-45-generic", "linux-image-generic-hwe-24.04"
    ]  # fmt: skip


def test_only_gpustacks_own_holds_are_recorded_and_released(hold: ModuleType) -> None:
    pkgs = [{"name": "linux-image-amd64", "held": False}, {"name": "nvidia-driver", "held": True},
            {"name": "linux-image-6.1.0-28-amd64", "held": False}]  # fmt: skip
    on = hold.plan(pkgs, "6.1.0-28-amd64", [], True)
    assert on["hold"] == ["linux-image-6.1.0-28-amd64", "linux-image-amd64", "nvidia-driver"]
    assert on["record"] == ["linux-image-6.1.0-28-amd64", "linux-image-amd64"]  # nvidia-driver was someone's hold
    assert on["release"] == []
    # converged: everything held now, the record stays what gpustack made
    again = [{**p, "held": True} for p in pkgs]
    assert hold.plan(again, "6.1.0-28-amd64", on["record"], True)["record"] == on["record"]
    # after a reboot into 6.1.0-29: the old image's hold released, the new one held; a purged kernel is forgotten
    moved = [*again, {"name": "linux-image-6.1.0-29-amd64", "held": False}]
    after = hold.plan(moved, "6.1.0-29-amd64", [*on["record"], "linux-image-6.1.0-9-amd64"], True)
    assert after["release"] == ["linux-image-6.1.0-28-amd64"] and "linux-image-6.1.0-29-amd64" in after["record"]
    # off: gpustack's holds released, the site's own hold kept, nothing recorded
    off = hold.plan(again, "6.1.0-28-amd64", on["record"], False)
    assert off == {"hold": [], "release": on["record"], "record": [], "kernel": [], "driver": []}


def test_the_simulation_reads_gpustacks_kernel_holds_as_released(patch_utils: ModuleType) -> None:
    status = ("Package: linux-image-amd64\nStatus: hold ok installed\nVersion: 6.1.115-1\n\n"
              "Package: kubelet\nStatus: hold ok installed\nVersion: 1.36.5-1.1\n")  # fmt: skip
    out = patch_utils.unheld_status(status, ["linux-image-amd64"])
    assert "Package: linux-image-amd64\nStatus: install ok installed\n" in out
    assert "Package: kubelet\nStatus: hold ok installed\n" in out  # gpustack's Kubernetes holds stay


SCRIPT = (
    OVERLAY_ROOT
    + r"""
dpkg -i "$GS_DEBS"/*.deb >/dev/null
echo "libnvidia-gpustack-site hold" | dpkg --set-selections
run() { ansible-playbook -i localhost, -c local "$GS_PLAYBOOK" -e "gpustack_hold_kernel=$1"; }
sel() { dpkg --get-selections linux-image-gpustack-test nvidia-gpustack-test libnvidia-gpustack-site; }
echo "=== ON"; run true; sel; cat /etc/gpustack/held-packages.json; stat -c '%a' /etc/gpustack/held-packages.json
echo "=== AGAIN"; run true
echo "=== OFF"; run false; sel; test ! -e /etc/gpustack/held-packages.json && echo "no record"
"""
)
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: Hold the kernel and the NVIDIA driver
      ansible.builtin.include_role:
        name: kubernetes_packages
        tasks_from: kernel_hold.yml
"""


def test_kernel_hold_tasks_hold_converge_and_release_only_their_own(tmp_path: Path) -> None:
    why = available()
    if why:
        pytest.skip(f"sandbox unavailable: {why}")  # under scripts/test.sh's PYTEST_NO_SKIPS a skip fails CI
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()
    debs = tmp_path / "debs"
    debs.mkdir()
    for name in ("linux-image-gpustack-test", "nvidia-gpustack-test", "libnvidia-gpustack-site"):
        build_deb(Pkg(name, version="1.0"), arch, debs)
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, GS_SANDBOX=str(tmp_path / "sb"), GS_DEBS=str(debs), GS_PLAYBOOK=str(tmp_path / "play.yml"),
               **ROLE_ENV)  # fmt: skip
    proc = subprocess.run(["unshare", "--mount", "sh", "-c", SCRIPT], env=env, capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    on, rest = out.split("=== ON", 1)[1].split("=== AGAIN", 1)
    again, off = rest.split("=== OFF", 1)
    selections = dict(line.split() for line in on.splitlines() if line.endswith(("\thold", "\tinstall", " hold")))
    assert selections == {"linux-image-gpustack-test": "hold", "nvidia-gpustack-test": "hold",
                          "libnvidia-gpustack-site": "hold"}, on  # fmt: skip
    record = json.loads(next(line for line in on.splitlines() if line.startswith("[")))
    assert {"linux-image-gpustack-test", "nvidia-gpustack-test"} <= set(record)
    assert "libnvidia-gpustack-site" not in record  # the site's own hold is not gpustack's to release
    assert "\n600\n" in on
    assert "changed=0" in again.split("PLAY RECAP", 1)[1], again[-3000:]
    released = dict(line.split() for line in off.splitlines() if line.endswith(("\thold", "\tinstall")))
    assert released == {"linux-image-gpustack-test": "install", "nvidia-gpustack-test": "install",
                        "libnvidia-gpustack-site": "hold"}, off  # fmt: skip
    assert "no record" in off
