"""node-patch.yml's etcd-before and etcd-after plays, for real with ansible-playbook on this machine, against a
TEST DOUBLE of crictl (its ``exec <id> etcdctl`` answers ``member list`` and ``endpoint health --cluster`` from a
file the test writes, as etcd 3.6 prints them): etcd's member health judged as node remove judges it, read only."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.unit.playbooks.conftest import PLAYBOOKS

CRICTL = """#!/usr/bin/env python3
# TEST DOUBLE of crictl: the etcd container's id, and its etcdctl's member list / endpoint health from $ETCD_STATE
import json, os, sys
args = sys.argv[1:]
state = json.load(open(os.environ["ETCD_STATE"]))
if args[0] == "ps":
    print("etcd0123")
elif args[:3] == ["exec", "etcd0123", "etcdctl"] and "member" in args:
    print(json.dumps({"members": [{"ID": i + 1, "name": m, "clientURLs": [f"https://10.0.0.{i + 1}:2379"],
                                   "peerURLs": [f"https://10.0.0.{i + 1}:2380"]} for i, m in enumerate(state)]}))
elif args[:3] == ["exec", "etcd0123", "etcdctl"] and "health" in args:
    print(json.dumps([{"endpoint": f"https://10.0.0.{i + 1}:2379", "health": ok} for i, ok in enumerate(state.values())]))
else:
    sys.exit(f"crictl double: unexpected {args}")
"""


def play(tmp_path: Path, tag: str, members: dict[str, bool]) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "crictl").write_text(CRICTL)
    (bin_dir / "crictl").chmod(0o755)
    (tmp_path / "etcd.json").write_text(json.dumps(members))
    extra = {"gpustack_node_name": "cp1", "gpustack_node_address": "10.0.0.1", "node_patch_etcd_retries": 1,
             "node_patch_etcd_delay": 0, "ansible_become": False, "ansible_python_interpreter": "/usr/bin/python3"}  # fmt: skip
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", ETCD_STATE=str(tmp_path / "etcd.json"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_RETRY_FILES_ENABLED="0")  # fmt: skip
    return subprocess.run(
        ["ansible-playbook", "-i", str(_inventory(tmp_path)), "-c",
         "local", str(PLAYBOOKS / "node-patch.yml"), "--tags", tag, "-e", json.dumps(extra)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  children:\n    control_plane:\n      hosts:\n        localhost:\n")
    return inv


def test_etcd_healthy_passes_and_changes_nothing(tmp_path: Path) -> None:
    for tag in ("etcd-before", "etcd-after"):
        proc = play(tmp_path, tag, {"cp1": True, "cp2": True, "cp3": True})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "cp1, cp2, cp3 healthy" in proc.stdout
        assert "changed=0" in proc.stdout.split("PLAY RECAP", 1)[1]


def test_an_unhealthy_member_stops_the_patch_before_the_node_goes_down(tmp_path: Path) -> None:
    proc = play(tmp_path, "etcd-before", {"cp1": True, "cp2": False, "cp3": True})
    assert proc.returncode != 0
    assert "would leave 1 healthy of 2 etcd members" in proc.stdout, proc.stdout[-3000:]


def test_after_the_reboot_every_member_must_be_healthy_again(tmp_path: Path) -> None:
    proc = play(tmp_path, "etcd-after", {"cp1": False, "cp2": True, "cp3": True})
    assert proc.returncode != 0
    assert "FAILED - RETRYING" in proc.stdout and "Check etcd's member health" in proc.stdout
