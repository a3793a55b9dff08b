"""Converged-stage stamps: playbooks/module_utils/gpustack_stage.py (verdicts, probes, stamp
files) and playbooks/group_vars/all/stage_probes.yml (every file a role writes is probed)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from conftest import PLAYBOOKS

PROBES = yaml.safe_load((PLAYBOOKS / "group_vars" / "all" / "stage_probes.yml").read_text())["gpustack_stage_probes"]
SITE = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())
#: File-writing modules and the parameter naming the file they write.
WRITERS = {
    "ansible.builtin.template": "dest",
    "ansible.builtin.copy": "dest",
    "ansible.builtin.get_url": "dest",
    "ansible.builtin.replace": "path",
    "ansible.builtin.lineinfile": "path",
    "ansible.builtin.file": "path",
    "ansible.posix.sysctl": "sysctl_file",
}
#: Written files deliberately not probed, with the reason.
NOT_PROBED = {
    # the Helm download cache and its temporary unpack directory: the installed binary is probed
    "/var/cache/gpustack",
    # written on the controller (delegate_to: localhost), not on the host
    "control_plane_kubeconfig_dest",
    # written once, when gpustack creates containerd's drop-in directory (for reset): a missing one
    # is never written again (the directory exists), so probing it would keep the stage from converging
    "/etc/gpustack/containerd-drop-in-dir.created",
}


def _stage_roles() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for play in SITE:
        if play.get("hosts") == "localhost":
            continue
        out.setdefault(play["name"], []).extend(r["role"] for r in play.get("roles", []))
    return out


def _tasks(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, list):
        for item in node:
            found += _tasks(item)
    elif isinstance(node, dict):
        found.append(node)
        for key in ("block", "always", "rescue"):
            found += _tasks(node.get(key))
    return found


def _resolve(value: str, defaults: dict[str, Any]) -> str | None:
    for _ in range(5):
        m = re.search(r"\{\{\s*(\w+)\s*(\|\s*dirname\s*)?\}\}", value)
        if not m:
            return value
        var = defaults.get(m.group(1))
        if not isinstance(var, str):
            return None
        if m.group(2):
            var = os.path.dirname(var)
        value = value[: m.start()] + var + value[m.end() :]
    return None


def _written_files(role: str) -> set[str]:
    role_dir = PLAYBOOKS / "roles" / role
    defaults = yaml.safe_load((role_dir / "defaults" / "main.yml").read_text()) or {}
    written: set[str] = set()
    for path in sorted((role_dir / "tasks").glob("*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text())):
            for module, param in WRITERS.items():
                args = task.get(module)
                if not isinstance(args, dict) or param not in args:
                    continue
                if args.get("state") in {"directory", "absent"} or task.get("delegate_to") == "localhost":
                    continue
                raw = str(args[param])
                resolved = _resolve(raw, defaults)
                written.add(resolved if resolved is not None else raw)
    return written


@pytest.mark.parametrize("stage", sorted(_stage_roles()))
def test_every_file_a_stage_writes_is_probed(stage: str) -> None:
    probed = set(PROBES[stage].get("files") or [])
    for role in _stage_roles()[stage]:
        for path in _written_files(role):
            if any(path.startswith(skip) or skip in path for skip in NOT_PROBED):
                continue
            if "{{" in path:
                # templated from play variables: the probe list must carry the same expression
                assert any(path.split("{{")[0] in p for p in probed), (stage, role, path)
                continue
            assert path in probed, f"{role} writes {path}: list it under {stage} in stage_probes.yml"


def test_every_stage_play_records_and_forgets_its_stamp() -> None:
    """Every stage play of site.yml starts with tasks/stage_start.yml and ends with tasks/stage_done.yml,
    which gather the facts, forget and record the stamp of the stage the play is named after."""
    for play in SITE:
        if play.get("hosts") == "localhost":
            continue
        stage = play["name"]
        assert stage in PROBES
        assert f"gpustack_stage_hosts['{stage}']" in play["hosts"]
        assert play["gather_facts"] is False
        assert [t["ansible.builtin.import_tasks"] for t in play["pre_tasks"]] == ["tasks/stage_start.yml"]
        assert [t["ansible.builtin.import_tasks"] for t in play["post_tasks"]] == ["tasks/stage_done.yml"]
    gather, forget = yaml.safe_load((PLAYBOOKS / "tasks" / "stage_start.yml").read_text())
    assert gather["ansible.builtin.setup"] == {"gather_subset": ["min"]}
    assert forget["gpustack_stage_stamp"] == {"stage": "{{ ansible_play_name }}", "state": "absent"}
    (record,) = yaml.safe_load((PLAYBOOKS / "tasks" / "stage_done.yml").read_text())
    assert record["gpustack_stage_stamp"]["stage"] == "{{ ansible_play_name }}"
    assert "gpustack_stage_probes[ansible_play_name]" in record["gpustack_stage_stamp"]["probes"]


def test_os_packages_are_probed() -> None:
    defaults = yaml.safe_load((PLAYBOOKS / "roles" / "os_prep" / "defaults" / "main.yml").read_text())
    assert set(defaults["os_prep_base_packages"]) <= set(PROBES["os"]["packages"])


# --- module_utils/gpustack_stage.py -------------------------------------------------------------


def _probes(files: dict[str, str | None] | None = None, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"files": files or {}, "services": {}, "sysctl": {}, "packages": {}, "commands": {}}
    base.update(kw)
    return base


def test_verdict(stage_utils: ModuleType) -> None:
    current = _probes({"/etc/a": "1" * 64}, services={"kubelet.service": "active/enabled"})
    stamp = {"schema": stage_utils.STAMP_SCHEMA, "digest": "d1", "probes": json.loads(json.dumps(current))}
    assert stage_utils.verdict(stamp, "d1", current) == (True, [])
    ok, why = stage_utils.verdict(None, "d1", current)
    assert not ok and "no stamp" in why[0]
    ok, why = stage_utils.verdict(stamp, "d2", current)
    assert not ok and "inputs changed" in why[0]
    ok, why = stage_utils.verdict({**stamp, "schema": 0}, "d1", current)
    assert not ok and "schema" in why[0]
    drift = _probes({"/etc/a": "2" * 64}, services={"kubelet.service": "inactive/enabled"})
    ok, why = stage_utils.verdict(stamp, "d1", drift)
    assert not ok and len(why) == 2
    assert "file /etc/a: recorded 111111111111, now 222222222222" in why
    assert 'service kubelet.service: recorded "active/enabled", now "inactive/enabled"' in why
    # a probe that exists only now (a new file in the spec) is a difference too
    ok, _ = stage_utils.verdict(
        stamp, "d1", _probes({"/etc/a": "1" * 64, "/etc/b": None}, services=current["services"])
    )
    assert not ok
    unreadable = _probes({"/etc/a": "unreadable: Permission denied"})
    stamp_u = {**stamp, "probes": unreadable}
    ok, why = stage_utils.verdict(stamp_u, "d1", unreadable)
    assert not ok and "unreadable" in why[0], "what cannot be read is never taken as converged"


def test_parsers(stage_utils: ModuleType) -> None:
    show = "ActiveState=active\nUnitFileState=enabled\n\nActiveState=inactive\nUnitFileState=\n"
    assert stage_utils.parse_systemctl_show(show, ["a.service", "b.service"]) == {
        "a.service": "active/enabled",
        "b.service": "inactive/-",
    }
    assert stage_utils.parse_systemctl_show("", ["a.service"]) == {"a.service": "unknown"}
    dpkg = "kubelet\t1.36.4-1.1\thold ok installed\nkubeadm\t1.36.4-1.1\tinstall ok installed\n"
    assert stage_utils.parse_dpkg_query(dpkg, ["kubelet", "kubeadm", "kubectl"]) == {
        "kubelet": "1.36.4-1.1 hold ok installed",
        "kubeadm": "1.36.4-1.1 install ok installed",
        "kubectl": None,
    }


def test_probe_and_stamp_round_trip(stage_utils: ModuleType, tmp_path: Path) -> None:
    managed = tmp_path / "managed.conf"
    managed.write_text("a = 1\n")
    spec = {
        "files": [str(managed), str(tmp_path / "missing"), str(tmp_path), ""],
        "sysctl": ["kernel.ostype"],
        "commands": {"true": ["true"], "false": ["false"], "absent": [str(tmp_path / "no-such-binary")]},
    }
    probes = stage_utils.probe(spec)
    assert probes["files"][str(tmp_path / "missing")] is None
    assert probes["files"][str(tmp_path)] == "directory"
    assert "" not in probes["files"]
    assert probes["sysctl"] == {"kernel.ostype": "Linux"}
    assert probes["commands"]["true"].startswith("rc=0 ") and probes["commands"]["false"].startswith("rc=1 ")
    assert probes["commands"]["absent"].startswith("rc=127 ")

    stamps = tmp_path / "stamps"
    stage_utils.write_stamp("os", "d1", probes, str(stamps))
    assert oct((stamps / "os.json").stat().st_mode & 0o777) == "0o600"
    assert oct(stamps.stat().st_mode & 0o777) == "0o700"
    verdicts = stage_utils.check_stages({"os": {"digest": "d1", "probes": spec}}, str(stamps))
    assert verdicts == {"os": {"converged": True, "reasons": []}}
    managed.write_text("a = 2\n")  # drift
    verdicts = stage_utils.check_stages({"os": {"digest": "d1", "probes": spec}}, str(stamps))
    assert not verdicts["os"]["converged"] and str(managed) in verdicts["os"]["reasons"][0]
    assert stage_utils.remove_stamp("os", str(stamps)) is True
    assert stage_utils.remove_stamp("os", str(stamps)) is False
    assert stage_utils.read_stamp("os", str(stamps)) is None


def test_check_stages_reads_shared_probes_once(stage_utils: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stage's services in one systemctl call, every stage's packages in one dpkg-query call, each file
    hashed once: the verdicts are what stage-by-stage reads give (the stamp writer's ``probe(spec)``)."""
    calls: list[list[str]] = []
    real_run = stage_utils._run

    def run(argv: list[str], timeout: float = 20) -> tuple[int, str]:
        calls.append(argv)
        if argv[0] == "systemctl":  # `systemctl show` prints one block per unit, in the order asked
            units = argv[argv.index("--") + 1 :]
            return 0, "\n".join(f"ActiveState=active\nUnitFileState={'enabled' if 'a' in u else ''}\n" for u in units)
        if argv[0] == "dpkg-query":
            names = argv[argv.index("--") + 1 :]
            return 0, "".join(f"{n}\t1.0\tinstall ok installed\n" for n in names if n != "gone")
        return real_run(argv, timeout)

    monkeypatch.setattr(stage_utils, "_run", run)
    digests: list[str] = []
    real_digest = stage_utils.file_digest
    monkeypatch.setattr(stage_utils, "file_digest", lambda path: digests.append(path) or real_digest(path))
    specs = {
        "os": {"files": ["/etc/os-release"], "packages": ["curl", "gone"]},
        "firewall": {"files": ["/etc/os-release"], "services": ["a.service", "b.service"], "packages": ["iptables"]},
        "containerd": {"files": ["/etc/os-release"], "services": ["a.service"], "commands": {"t": ["true"]}},
    }
    current = {stage: stage_utils.probe(spec) for stage, spec in specs.items()}
    calls.clear()
    digests.clear()
    verdicts = stage_utils.check_stages(
        {s: {"digest": "d", "probes": spec} for s, spec in specs.items()}, "/nonexistent"
    )
    assert [c[:2] for c in calls] == [["systemctl", "show"], ["dpkg-query", "-W"], ["true"]]
    assert calls[0][-2:] == ["a.service", "b.service"] and calls[1][-3:] == ["curl", "gone", "iptables"]
    assert digests == ["/etc/os-release"]
    assert all(not v["converged"] for v in verdicts.values()), "no stamps in /nonexistent"
    reads = stage_utils.Reads()
    reads.prefetch(list(specs.values()))
    assert {stage: stage_utils.probe(spec, reads) for stage, spec in specs.items()} == current
    assert current["os"]["packages"] == {"curl": "1.0 install ok installed", "gone": None}
    assert current["firewall"]["services"] == {"a.service": "active/enabled", "b.service": "active/-"}


@pytest.mark.parametrize("stage", sorted(_stage_roles()))
def test_every_unpacked_archive_is_probed(stage: str) -> None:
    """An archive unpacked into a directory: the stage probes at least one file under it."""
    probed = PROBES[stage].get("files") or []
    for role in _stage_roles()[stage]:
        role_dir = PLAYBOOKS / "roles" / role
        defaults = yaml.safe_load((role_dir / "defaults" / "main.yml").read_text()) or {}
        for path in sorted((role_dir / "tasks").glob("*.yml")):
            for task in _tasks(yaml.safe_load(path.read_text())):
                args = task.get("ansible.builtin.unarchive")
                if not isinstance(args, dict):
                    continue
                dest = _resolve(str(args["dest"]), defaults)
                if dest is None or "{{" in dest:
                    # a registered temporary directory (helm): what is copied out of it is a
                    # written file, checked by the test above
                    continue
                assert any(p.startswith(dest.rstrip("/") + "/") for p in probed), (
                    f"{role} unpacks into {dest}: probe a file it installs there under {stage}"
                )
