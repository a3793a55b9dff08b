"""First-run install of the Ansible collections: only the pinned ones, from the hash-pinned wheel,
and they are all the playbooks need (ansible-core alone + these two pass a syntax check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpustack import bootstrap
from gpustack.config import pins

ROOT = Path(__file__).resolve().parents[2]


def fake_wheel(path: Path, versions: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for fqcn, version in versions.items():
            ns, name = fqcn.split(".")
            base = f"ansible_collections/{ns}/{name}/"
            zf.writestr(base + "MANIFEST.json", json.dumps({"collection_info": {"version": version}}))
            zf.writestr(base + "plugins/modules/x.py", "# module\n")
        zf.writestr("ansible_collections/other/big/MANIFEST.json", "{}")
    return path


def test_extracts_only_the_pinned_collections(tmp_path: Path) -> None:
    root = tmp_path / "site"
    assert bootstrap.missing(root) == pins.ANSIBLE_COLLECTIONS
    wheel = fake_wheel(tmp_path / "a.whl", pins.ANSIBLE_COLLECTIONS)
    bootstrap.extract(wheel, bootstrap.missing(root), root, log=lambda _: None)
    assert bootstrap.missing(root) == {}
    assert not (root / "ansible_collections" / "other").exists()
    assert (root / "ansible_collections/community/general/plugins/modules/x.py").is_file()


def test_another_version_is_replaced_and_a_wrong_wheel_refused(tmp_path: Path) -> None:
    root = tmp_path / "site"
    old = {c: "0.0.1" for c in pins.ANSIBLE_COLLECTIONS}
    bootstrap.extract(fake_wheel(tmp_path / "old.whl", old), old, root, log=lambda _: None)
    (root / "ansible_collections/ansible/posix/stale.py").write_text("x")
    assert bootstrap.missing(root) == pins.ANSIBLE_COLLECTIONS
    bootstrap.extract(fake_wheel(tmp_path / "new.whl", pins.ANSIBLE_COLLECTIONS), pins.ANSIBLE_COLLECTIONS, root,
                      log=lambda _: None)  # fmt: skip
    assert not (root / "ansible_collections/ansible/posix/stale.py").exists()
    with pytest.raises(RuntimeError, match="not the pinned"):
        bootstrap.extract(fake_wheel(tmp_path / "bad.whl", old), pins.ANSIBLE_COLLECTIONS, tmp_path / "s2",
                          log=lambda _: None)  # fmt: skip


def test_real_wheel_collections_are_all_the_playbooks_need(tmp_path: Path) -> None:
    """Downloads the pinned wheel (hash-checked; ~2 s from a warm pip cache), unpacks the two
    collections, and syntax-checks every playbook with ansible-core seeing only them."""
    root = tmp_path / "site"
    logs: list[str] = []
    assert bootstrap.install_collections(root, log=logs.append) == sorted(pins.ANSIBLE_COLLECTIONS)
    assert any("sha256-checked" in m for m in logs)
    assert bootstrap.install_collections(root, log=logs.append) == []  # idempotent
    size = sum(p.stat().st_size for p in (root / "ansible_collections").rglob("*") if p.is_file())
    assert size < 40 * 1024 * 1024  # the whole community bundle is ~470 MB
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(root), ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False",
               ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False")  # fmt: skip
    playbook_bin = Path(sys.executable).with_name("ansible-playbook")
    exe = str(playbook_bin) if playbook_bin.exists() else shutil.which("ansible-playbook")
    assert exe
    for playbook in ("site.yml", "preflight.yml"):
        r = subprocess.run([exe, "--syntax-check", "-i", "localhost,", str(ROOT / "playbooks" / playbook)],
                           env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
