"""library/gpustack_etcd_restore.py, the Ansible module the etcd_restore role runs, phase by phase through Ansible's
own argument handling (AnsibleModule, run_command, exit_json/fail_json), on a host laid out in a temporary directory:
crictl, etcdutl and ctr are doubles on the PATH (named in docs/testing.md). A run cut off by a failing etcdutl is
finished by the next; a finished phase reports changed=false; no etcdutl anywhere refuses before anything moves."""

from __future__ import annotations

import hashlib
import json
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.playbooks.conftest import PLAYBOOKS, load_path
from tests.unit.playbooks.test_etcd_restore_host import MANIFEST

#: crictl of cri-tools 1.36: `ps --quiet ... --label io.kubernetes.container.name=NAME` lists the container while its
#: static pod's manifest is in $GS_MANIFESTS (the kubelet stops it when the manifest goes)
CRICTL = """#!{python}
import os, sys
name = sys.argv[-1].split("=", 1)[1]
if os.path.exists(os.path.join(os.environ["GS_MANIFESTS"], name + ".yaml")):
    print(name + "-id")
"""
#: etcdutl 3.6.8: `version`; `snapshot restore FILE --data-dir=DIR ...` makes DIR/member/{snap/db,wal}, or fails
#: when $GS_ETCDUTL_FAIL names a file that exists (the failure then removes it: the next call succeeds)
ETCDUTL = """#!{python}
import os, sys
if sys.argv[1:] == ["version"]:
    print("etcdutl version: 3.6.8"); sys.exit(0)
fail = os.environ.get("GS_ETCDUTL_FAIL", "")
data = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--data-dir=")][0]
os.makedirs(os.path.join(data, "member", "snap"))
if fail and os.path.exists(fail):
    os.unlink(fail)
    print("killed", file=sys.stderr); sys.exit(137)
os.makedirs(os.path.join(data, "member", "wal"))
open(os.path.join(data, "member", "snap", "db"), "w").write(" ".join(sys.argv[1:]))
"""
#: ctr of containerd 2.x: `run` of an image whose etcdutl is missing fails as ctr does ("exec: etcdutl: not found")
CTR = """#!{python}
import sys
print("ctr: failed to create shim task: exec: \\"etcdutl\\": executable file not found in $PATH", file=sys.stderr)
sys.exit(1)
"""


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    from ansible.module_utils import basic

    for name in ("_ANSIBLE_ARGS", "_ANSIBLE_PROFILE"):  # set by phase(), put back after the test
        monkeypatch.setattr(basic, name, getattr(basic, name, None), raising=False)
    load_path("ansible.module_utils.gpustack_etcd", PLAYBOOKS / "module_utils" / "gpustack_etcd.py")
    utils = load_path(
        "ansible.module_utils.gpustack_etcd_restore", PLAYBOOKS / "module_utils" / "gpustack_etcd_restore.py"
    )
    module = load_path("gpustack_etcd_restore_module", PLAYBOOKS / "library" / "gpustack_etcd_restore.py")
    root = tmp_path / "host"
    paths = {"manifests": root / "etc/kubernetes/manifests", "restore": root / "var/lib/gpustack/etcd-restore",
             "data": root / "var/lib/etcd", "bin": tmp_path / "bin"}  # fmt: skip
    paths["manifests"].mkdir(parents=True)
    (paths["manifests"] / "etcd.yaml").write_text(MANIFEST.replace("/var/lib/etcd", str(paths["data"])))
    (paths["manifests"] / "kube-apiserver.yaml").write_text("kind: Pod\n")
    (paths["data"] / "member").mkdir(parents=True)
    (paths["data"] / "member" / "old").write_text("old")
    paths["bin"].mkdir()
    for name, text in (("crictl", CRICTL), ("etcdutl", ETCDUTL), ("ctr", CTR)):
        (paths["bin"] / name).write_text(text.format(python=sys.executable))
        (paths["bin"] / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{paths['bin']}:/usr/bin:/bin")
    monkeypatch.setenv("GS_MANIFESTS", str(paths["manifests"]))
    restore = paths["restore"]
    for target in (module, utils):
        monkeypatch.setattr(target, "RESTORE_DIR", str(restore))
    monkeypatch.setattr(module, "MANIFESTS", str(paths["manifests"]))
    monkeypatch.setattr(module, "PARKED", str(restore / "manifests"))
    monkeypatch.setattr(module, "RECORD", str(restore / "state.json"))
    restore.mkdir(parents=True)
    body = b"s" * 4096
    (restore / "snap.db").write_bytes(body + hashlib.sha256(body).digest())
    return {"module": module, "sha": hashlib.sha256((restore / "snap.db").read_bytes()).hexdigest(), **paths}


def phase(host: dict[str, Any], capsys: pytest.CaptureFixture[str], name: str, **args: Any) -> tuple[int, dict]:
    from ansible.module_utils import basic

    base = {"phase": name, "restore_id": "X", "snapshot": str(host["restore"] / "snap.db"), "sha256": host["sha"],
            "token": "gpustack-restore-X", "_ansible_check_mode": False}  # fmt: skip
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": {**base, **args}}).encode()  # type: ignore[attr-defined]
    basic._ANSIBLE_PROFILE = "legacy"  # type: ignore[attr-defined]  # what the controller sends (ansible-core 2.19)
    with pytest.raises(SystemExit) as ei:
        host["module"].main()
    out = capsys.readouterr().out
    return int(ei.value.code or 0), json.loads(out.strip().splitlines()[-1])


def test_the_phases_restore_keep_the_old_data_and_skip_what_is_done(
    host: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = phase(host, capsys, "stop")
    assert rc == 0 and out["changed"] and out["member"]["name"] == "cp1" and out["record"]["phase"] == "stopped"
    assert sorted(p.name for p in host["manifests"].iterdir()) == []
    assert phase(host, capsys, "stop")[1]["changed"] is False, "a finished phase is not run again"
    member = {"name": "cp2", "peer_url": "https://192.0.2.12:2380"}
    rc, out = phase(host, capsys, "restore", members=[out["member"], member], etcdutl=str(host["bin"] / "etcdutl"))
    assert rc == 0 and out["changed"] and out["record"]["phase"] == "restored"
    argv = (host["data"] / "member" / "snap" / "db").read_text()
    assert "--initial-cluster=cp1=https://192.0.2.11:2380,cp2=https://192.0.2.12:2380" in argv
    assert "--initial-cluster-token=gpustack-restore-X" in argv and "--name=cp1" in argv
    assert (Path(f"{host['data']}.before-restore-X") / "member" / "old").read_text() == "old"
    assert stat.S_IMODE(host["data"].stat().st_mode) == 0o700
    rc, out = phase(host, capsys, "start")
    assert rc == 0 and out["moved"] == ["etcd.yaml", "kube-apiserver.yaml"] and out["record"]["phase"] == "started"
    rc, out = phase(host, capsys, "done")
    assert rc == 0 and out["record"]["phase"] == "done" and not (host["restore"] / "snap.db").exists()
    assert phase(host, capsys, "done")[1]["changed"] is False, "a converged re-run changes nothing"
    (host["restore"] / "snap.db").write_bytes(b"copied again by a resumed run")
    rc, out = phase(host, capsys, "done")
    assert out["changed"] is True and not (host["restore"] / "snap.db").exists()
    assert stat.S_IMODE((host["restore"] / "state.json").stat().st_mode) == 0o600


def test_a_restore_cut_off_is_finished_by_the_next_run(
    host: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "fail-once").write_text("")
    monkeypatch.setenv("GS_ETCDUTL_FAIL", str(tmp_path / "fail-once"))
    assert phase(host, capsys, "stop")[0] == 0
    rc, out = phase(host, capsys, "restore")
    assert rc == 1 and "etcdutl snapshot restore failed (137)" in out["msg"]
    assert not host["data"].exists() and Path(f"{host['data']}.restoring", "member").exists()
    # another restore is refused while this one is unfinished; the same one goes on
    rc, out = phase(host, capsys, "stop", restore_id="Y")
    assert rc == 1 and "another etcd restore (X" in out["msg"]
    assert phase(host, capsys, "stop")[1]["changed"] is False
    rc, out = phase(host, capsys, "restore")
    assert rc == 0 and out["record"]["phase"] == "restored" and (host["data"] / "member" / "wal").is_dir()
    assert (Path(f"{host['data']}.before-restore-X") / "member" / "old").read_text() == "old"


def test_no_etcdutl_refuses_before_any_manifest_moves(host: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    (host["bin"] / "etcdutl").unlink()
    rc, out = phase(host, capsys, "stop")
    assert rc == 1 and "no etcdutl on this host, and the etcd image registry.k8s.io/etcd:3.6.8-0" in out["msg"]
    assert "executable file not found" in out["msg"]
    assert sorted(p.name for p in host["manifests"].iterdir()) == ["etcd.yaml", "kube-apiserver.yaml"]
    assert not (host["restore"] / "state.json").exists()


def test_a_snapshot_that_is_not_the_chosen_one_refuses(
    host: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = phase(host, capsys, "stop", sha256="0" * 64)
    assert rc == 1 and "is not the snapshot's" in out["msg"]
    assert sorted(p.name for p in host["manifests"].iterdir()) == ["etcd.yaml", "kube-apiserver.yaml"]


def test_phases_out_of_order_refuse(host: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = phase(host, capsys, "start")
    assert rc == 1 and "phase start before stop" in out["msg"]
    assert isinstance(host["module"], ModuleType)


def test_a_dry_run_changes_nothing_and_says_each_phase_would_run(
    host: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    (host["restore"] / "snap.db").unlink()  # check mode copies nothing to the host
    rc, out = phase(host, capsys, "stop", _ansible_check_mode=True)
    assert rc == 0 and out["changed"] is False and out["member"]["name"] == "cp1"
    for name in ("restore", "start", "done"):
        rc, out = phase(host, capsys, name, _ansible_check_mode=True)
        assert rc == 0 and out["changed"] is True, name
    assert sorted(p.name for p in host["manifests"].iterdir()) == ["etcd.yaml", "kube-apiserver.yaml"]
    assert not (host["restore"] / "state.json").exists() and (host["data"] / "member" / "old").exists()


def test_the_probe_says_which_etcdutl_runs_and_changes_nothing(
    host: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """The role downloads etcd's release archive only where the probe finds no etcdutl (tasks/etcdutl.yml; the
    download for real: test_etcdutl_release.py)."""
    rc, out = phase(host, capsys, "probe")
    assert rc == 0 and out["changed"] is False and out["found"] is True and out["version"] == "3.6.8"
    assert out["etcdutl"] == [str(host["bin"] / "etcdutl")]  # the PATH's
    (host["bin"] / "etcdutl").unlink()
    rc, out = phase(host, capsys, "probe")
    assert rc == 0 and out["found"] is False and out["etcdutl"] == []
    assert "registry.k8s.io/etcd:3.6.8-0 did not run one" in out["reason"]  # the image's ctr run failed too
    rc, out = phase(host, capsys, "probe", etcdutl=str(host["bin"] / "missing"))  # a configured one must run
    assert rc == 1 and out["msg"].endswith(f"etcdutl {host['bin'] / 'missing'}: not an executable file")
    assert sorted(p.name for p in host["manifests"].iterdir()) == ["etcd.yaml", "kube-apiserver.yaml"]
    assert not (host["restore"] / "state.json").exists()
