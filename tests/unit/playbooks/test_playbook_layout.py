"""Shape of site.yml/preflight.yml, the Python <-> playbook variable contract, syntax and lint."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import PLAYBOOKS, REPO
from test_gpustack_facts import SCHEMA_KEYS

from gpustack import commands
from gpustack.config.model import Config, Node
from gpustack.paths import resource_dir
from gpustack.render import converge
from gpustack.render.ansible import extravars, inventory
from gpustack.runners import ansible as ar

STAGES = [
    ("os", "all", "os_prep"),
    ("firewall", "all", "firewall"),
    ("containerd", "all", "containerd"),
    ("kubernetes", "all", "kubernetes_packages"),
    ("control-plane", "control_plane", "control_plane"),
    ("workers", "workers", "worker_join"),
    ("network", "control_plane", "flannel"),
    ("helm", "control_plane", "helm"),
    # the cluster stage runs Helm on this machine: the same role installs it for the user here
    ("helm", "localhost", "helm"),
]
# names in playbooks/ that look like variables but are not (the preflight module)
#: module names, not variables
NOT_VARIABLES = {"gpustack_facts", "gpustack_stage_stamp", "gpustack_stage", "gpustack_netfilter_cleanup",
                 "gpustack_etcd_members_to_remove", "gpustack_service_stale", "gpustack_etcd_snapshot", "gpustack_etcd",
                 "gpustack_served_cert", "gpustack_etcd_restore", "gpustack_patch_state", "gpustack_patch",
                 "gpustack_flag_drift", "gpustack_kernel_hold", "gpustack_kubelet_drift"}  # fmt: skip


def sample_config() -> Config:
    return Config(
        nodes=[
            Node(name="cp1", address="10.10.0.2", role="control-plane"),
            Node(name="w1", address="10.10.0.3", user="ubuntu"),
        ]
    )


@pytest.fixture(scope="module")
def sample_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("inputs")
    cfg = sample_config()
    (d / "hosts.yml").write_text(yaml.safe_dump(inventory(cfg)))
    ev = extravars(cfg, kubeconfig_dest=d / "kubeconfig")
    (d / "extravars.json").write_text(json.dumps(ev))
    return d, d / "hosts.yml", d / "extravars.json"


def test_site_has_one_play_per_stage_in_order() -> None:
    plays = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())

    def group(play: dict[str, str]) -> str:
        # "{{ gpustack_stage_hosts['os'] | default('all') }}" -> all (converged hosts left out)
        m = re.fullmatch(r"\{\{ gpustack_stage_hosts\['[\w-]+'\] \| default\('(\w+)'\) \}\}", play["hosts"])
        return m.group(1) if m else play["hosts"]

    assert [(p["name"], group(p), p["roles"][0]["role"]) for p in plays] == STAGES
    for play in plays:
        assert play["tags"] == [play["name"]]
        assert play["become"] is (play["hosts"] != "localhost")
        assert len(play["roles"]) == 1
    up = commands.sequence("up").stages
    assert list(dict.fromkeys(p["name"] for p in plays)) == [s.id for s in up if s.runner == "ansible"]


def test_preflight_play() -> None:
    plays = yaml.safe_load((PLAYBOOKS / "preflight.yml").read_text())
    assert [p["name"] for p in plays] == ["preflight"]
    assert plays[0]["gather_facts"] is False


@pytest.mark.parametrize("role", sorted({s[2] for s in STAGES}))
def test_role_layout(role: str) -> None:
    base = PLAYBOOKS / "roles" / role
    assert (base / "tasks" / "main.yml").is_file()
    assert (base / "meta" / "main.yml").is_file()
    defaults = yaml.safe_load((base / "defaults" / "main.yml").read_text()) or {}
    assert all(k.startswith(role + "_") for k in defaults), "role defaults carry the role prefix"


def test_every_gpustack_variable_comes_from_python() -> None:
    cfg = sample_config()
    ev = extravars(cfg, kubeconfig_dest=Path("/k"))
    # the engine adds the converged-stage host patterns (gpustack/render/converge.py) and the package
    # sources the preflight tries (gpustack/checks/sources.py)
    provided = set(ev) | {"gpustack_stage_hosts", "gpustack_preflight_sources"}
    # each command's own variables, as its plan declares them (the engine refuses undeclared ones)
    provided |= {name for plan in commands.SEQUENCES.values() for name in plan.extravars}
    for host in converge.with_stage_digests(inventory(cfg), ev, "tree")["all"]["children"]["control_plane"][
        "hosts"
    ].values():
        provided |= set(host)
    for path in (PLAYBOOKS / "group_vars").rglob("*.yml"):
        provided |= set(yaml.safe_load(path.read_text()))
    used: dict[str, set[str]] = {}
    for path in PLAYBOOKS.rglob("*"):
        if path.suffix in (".yml", ".yaml", ".j2") and path.is_file():
            for name in re.findall(r"\bgpustack_[a-z0-9_]+", path.read_text()):
                used.setdefault(name, set()).add(str(path.relative_to(PLAYBOOKS)))
    unknown = {k: sorted(v) for k, v in used.items() if k not in provided | NOT_VARIABLES}
    assert not unknown, f"variables the playbooks read but Python never sets: {unknown}"


@pytest.mark.parametrize("playbook", ["site.yml", "preflight.yml"])
def test_syntax_check(sample_inputs: tuple[Path, Path, Path], playbook: str) -> None:
    _, hosts, ev = sample_inputs
    r = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            str(hosts),
            "-e",
            f"@{ev}",
            "--syntax-check",
            str(PLAYBOOKS / playbook),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def run_local_preflight(tmp: Path, **host_vars: Any) -> ar.PlaybookResult:
    """preflight.yml on this machine as the engine runs it: through ansible-runner with the playbooks directory
    as project_dir and no ansible.cfg (so Ansible must find module_utils/ next to preflight.yml and ship it with
    the module), the facts written from the module's results into ``tmp/facts``."""
    inv = {"all": {"hosts": {"me": {"ansible_connection": "local", "ansible_become": False,
                                    "ansible_python_interpreter": "/usr/bin/python3",
                                    "gpustack_node_address": "127.0.0.1", **host_vars}}}}  # fmt: skip
    (tmp / "known_hosts").touch()
    kwargs = ar.build_runner_kwargs(
        private_data_dir=tmp / "run", project_dir=resource_dir("playbooks"), playbook="preflight.yml",
        inventory=yaml.safe_load(yaml.safe_dump(inv)), extravars={"gpustack_node_addresses": ["127.0.0.1", "127.0.0.2"]},
        tags=(), settings=ar.AnsibleSettings(known_hosts=tmp / "known_hosts"), ident="local-preflight",
    )  # fmt: skip
    result = ar.run_playbook(kwargs, ar.StageTracker())
    result.write_facts(tmp / "facts")
    return result


@pytest.fixture(scope="module")
def local_preflight(tmp_path_factory: pytest.TempPathFactory) -> tuple[ar.PlaybookResult, Path]:
    """preflight.yml run once on this machine (as root: Ansible needs no sudo for root's pass)."""
    tmp = tmp_path_factory.mktemp("preflight")
    return run_local_preflight(tmp), tmp / "facts"


def test_preflight_runs_read_only_on_this_machine(local_preflight: tuple[ar.PlaybookResult, Path]) -> None:
    result, facts_dir = local_preflight
    assert result.rc == 0, [f.message for f in result.failures]
    assert result.changed_hosts() == {}, "nothing changes, on the host or here"
    facts = json.loads((facts_dir / "me.json").read_text())
    assert facts == result.host_facts["me"]
    # the module adds what it found of the package sources ([]: none asked for)
    assert set(facts) == SCHEMA_KEYS | {"sources"} and facts["sources"] == []
    # one pass, root's: the login user's never ran
    assert [e["event_data"]["task"] for e in _facts_events(result)] == ["Collect facts as root"]
    assert facts["is_root"] is True and facts["sudo_nopasswd"] is True
    assert set(facts["peers"]) == {"127.0.0.2"}
    assert oct((facts_dir / "me.json").stat().st_mode & 0o777) == "0o600"
    assert oct(facts_dir.stat().st_mode & 0o777) == "0o700"


def _facts_events(result: ar.PlaybookResult) -> list[dict[str, Any]]:
    """The gpustack_facts tasks that returned, from the run's artifacts (job_events)."""
    events = [json.loads(p.read_text()) for p in result.artifact_dir.rglob("job_events/*.json")]
    events.sort(key=lambda e: e.get("counter", 0))
    return [
        e for e in events if e["event"] == "runner_on_ok" and e["event_data"].get("task_action") in ar.FACTS_MODULES
    ]


def test_a_root_pass_that_fails_where_sudo_works_fails_the_host(tmp_path: Path) -> None:
    """Root's pass failing for a reason other than sudo refusing (here: become through a sudo that is not there,
    to another user, so Ansible cannot skip it) is not hidden by the login user's pass: the host fails with root's
    message and has no facts."""
    result = run_local_preflight(tmp_path, ansible_become_user="nobody", ansible_become_exe="/nonexistent/sudo")
    assert result.rc != 0
    assert [e["event_data"]["task"] for e in _facts_events(result)] == ["Collect facts as the login user"]
    assert [(f.host, f.task) for f in result.failures] == [("me", "Report why the root pass failed where sudo works")]
    assert "/nonexistent/sudo" in result.failures[0].message
    assert result.host_facts == {} and not (tmp_path / "facts" / "me.json").exists()


def test_preflight_module_finds_its_module_utils_under_ansible_runner(
    local_preflight: tuple[ar.PlaybookResult, Path],
) -> None:
    """The module imports module_utils/ (the containerd config parsers): shipped by Ansible with it."""
    facts = local_preflight[0].host_facts["me"]
    assert set(facts["containerd"]) == {"path", "version", "config_version", "systemd_cgroup", "imports", "drop_ins"}


def test_ansible_lint_production() -> None:
    r = subprocess.run(
        ["ansible-lint", "--profile", "production", "--nocolor", "playbooks/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
