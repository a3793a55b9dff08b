"""`gpustack certs renew` without hosts: refused (exit 2, no stage run, no record) when a control plane is
unreachable; which control planes a renewal (or the interrupted one it resumes) still has to renew, from the
preflight's check-expiration facts; the local record; the plan and the CLI."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gpustack.cluster import renewal as rn
from gpustack.commands import certs_renew as cr
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary
from gpustack.errors import StageError

THIS_CHECKOUT = {k: os.environ[k] for k in ("PYTHONPATH", "GPUSTACK_TODAY") if k in os.environ}
NOW = datetime(2026, 11, 29, 4, 0, tzinfo=timezone.utc)
LEAVES = ("admin.conf", "apiserver", "apiserver-etcd-client", "apiserver-kubelet-client", "controller-manager.conf",
          "etcd-healthcheck-client", "etcd-peer", "etcd-server", "front-proxy-client", "scheduler.conf",
          "super-admin.conf")  # fmt: skip


def config(**cp_extra: Any) -> Config:
    nodes = [{"name": f"cp{i}", "address": f"192.0.2.{10 + i}", "role": "control-plane", "connection": "local"}
             for i in (1, 2, 3)]  # fmt: skip
    nodes.append({"name": "w1", "address": "192.0.2.20", "connection": "local"})
    nodes[1].update(cp_extra)
    return Config.model_validate({"nodes": nodes, "cluster": {"virtual_ip": "192.0.2.100"}})


def kubeadm_facts(signed: datetime, validity: timedelta = timedelta(days=365), *, missing_super: bool = False) -> dict:
    certs = [{"name": n, "expires": (signed + validity).strftime("%Y-%m-%dT%H:%M:%SZ"), "ca": "ca",
              "authority": False, "external": False, "missing": missing_super and n == "super-admin.conf"}
             for n in LEAVES]  # fmt: skip
    # the CAs never count: a ten-year CA signed long ago says nothing about the leaves
    certs.append({"name": "ca", "expires": "2030-01-01T00:00:00Z", "ca": "", "authority": True, "external": False,
                  "missing": False})  # fmt: skip
    if missing_super:
        certs[-2]["expires"] = None
    return {"certificates": certs, "error": None}


def host(kubeadm: dict | None) -> dict[str, Any]:
    return {"certificates": {"kubeadm": kubeadm, "kubelet_serving": None}}


# --- the pure rules ----------------------------------------------------------------------------------------


def test_a_certificate_signed_after_the_start_counts_as_renewed_one_before_does_not() -> None:
    assert rn.renewed_since(kubeadm_facts(NOW + timedelta(minutes=3)), NOW, "365d")
    assert not rn.renewed_since(kubeadm_facts(NOW - timedelta(days=200)), NOW, "365d")
    # one leaf left behind (a renewal cut off half-way) is enough to renew the node again
    mixed = kubeadm_facts(NOW + timedelta(minutes=1))
    mixed["certificates"][3]["expires"] = "2027-01-01T00:00:00Z"
    assert not rn.renewed_since(mixed, NOW, "365d")
    # a missing super-admin.conf (joined control planes have none) is no reason to renew
    assert rn.renewed_since(kubeadm_facts(NOW + timedelta(minutes=1), missing_super=True), NOW, "365d")


def test_what_cannot_be_read_is_renewed() -> None:
    assert not rn.renewed_since(None, NOW, "365d")
    assert not rn.renewed_since({"certificates": [], "error": "kubeadm certs check-expiration exited 1"}, NOW, "365d")
    assert not rn.renewed_since({"certificates": [], "error": None}, NOW, "365d")


def test_the_validity_decides_what_renewed_means() -> None:
    """A 10-minute validity (the real-binary tests): renewed a minute after the start expires 11 minutes after it."""
    facts = kubeadm_facts(NOW + timedelta(minutes=1), timedelta(minutes=10))
    assert rn.renewed_since(facts, NOW, "10m") and not rn.renewed_since(facts, NOW, "365d")


def test_an_unfinished_renewal_is_resumed_from_its_start() -> None:
    started = NOW - timedelta(hours=1)
    running = rn.new_record(started, "365d", ["cp1", "cp2"])
    assert rn.renewal_start(running, "365d", NOW) == started
    failed = rn.finish_record(running, "failed", NOW, "boom")
    assert rn.renewal_start(failed, "365d", NOW) == started
    # a finished one, another validity, no record, or nonsense: a new renewal starts now
    assert rn.renewal_start(rn.finish_record(running, "done", NOW), "365d", NOW) == NOW
    assert rn.renewal_start(running, "730d", NOW) == NOW
    assert rn.renewal_start(None, "365d", NOW) == NOW
    assert rn.renewal_start({"status": "running", "validity": "365d", "started": "soon"}, "365d", NOW) == NOW


def test_nodes_to_renew_keeps_the_configs_order_and_skips_the_renewed() -> None:
    failed = {"certificates": [], "error": "kubeadm certs check-expiration exited 1: ..."}
    facts = {"cp1": host(kubeadm_facts(NOW + timedelta(minutes=2))), "cp2": host(kubeadm_facts(NOW - timedelta(days=300))),
             "cp3": host(failed)}  # fmt: skip
    assert rn.nodes_to_renew(config(), facts, NOW) == ["cp2", "cp3"]
    # no /etc/kubernetes/pki/apiserver.crt (the facts module reads no kubeadm PKI): nothing kubeadm could renew
    facts["cp3"] = host(None)
    assert rn.nodes_to_renew(config(), facts, NOW) == ["cp2"]
    assert rn.unreachable(config(), {"cp1": host(None), "cp3": host(None)}) == ["cp2"]


# --- the run, with the preflight and the playbook replaced ---------------------------------------------------


class Engine:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, host_facts: dict[str, Any]) -> None:
        monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
        self.ran: list[str] = []
        self.extravars: dict[str, Any] = {}
        self.limit: list[str] = []
        self.record_seen: dict[str, Any] | None = None
        self.fail_at: str | None = None
        self.ignored: tuple[str, ...] = ()

        def preflight(plan: CommandPlan, cfg: Config, opts: Any, run_dir: Path, console: Any, **kw: Any) -> Any:
            self.ignored = tuple(opts.ignore_preflight)
            return host_facts, []

        monkeypatch.setattr(engine_run, "run_preflight", preflight)
        monkeypatch.setattr(engine_run, "ansible_stages", self.ansible)

    def ansible(self, plan_: CommandPlan, stages: list[Stage], cfg: Config, opts: Any, *a: Any, **kw: Any) -> Any:
        self.ran += [s.id for s in stages]
        self.extravars = dict(opts.extravars)
        self.limit = list(opts.limit)
        self.record_seen = rn.read_record(rn.record_path(cfg))
        if self.fail_at in self.ran:
            raise StageError("cp2: task 'Wait until the API server serves ...' failed", stage=self.fail_at,
                             hosts=("cp2",))  # fmt: skip
        return [StageSummary(s.id, "changed", 0.0, 1) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()


def renew(cfg: Config) -> cr.RenewResult:
    return cr.renew(cfg, cr.RenewOptions(), Console(stream=io.StringIO(), color=False))


def test_a_control_plane_without_facts_refuses_with_nothing_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(monkeypatch, tmp_path, {"cp1": host(None), "cp3": host(None)})
    with pytest.raises(cr.RenewRefused) as err:
        renew(config())
    assert err.value.exit_code == 2 and "cp2" in err.value.message and "no certificate renewed" in err.value.message
    assert engine.ran == [] and not rn.record_path(config()).exists()
    assert "P00-facts" in engine.ignored, "an unreadable host is the guard's refusal, not a preflight failure"


def test_a_control_plane_whose_ssh_port_is_closed_refuses_before_any_host_is_contacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpustack.runners import ssh

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = ssh.unreachable_ports([("127.0.0.1", port)], timeout=2.0)
    assert list(down) == [("127.0.0.1", port)] and down[("127.0.0.1", port)]
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert ssh.unreachable_ports([listening.getsockname()], timeout=2.0) == {}

    cfg = config(connection="ssh", address="192.0.2.12", port=2222)
    seen: list[Any] = []
    monkeypatch.setattr(ssh, "unreachable_ports",
                        lambda hosts, timeout: seen.append(hosts) or {("192.0.2.12", 2222): "Connection refused"})  # fmt: skip
    engine = Engine(monkeypatch, tmp_path, {})
    with pytest.raises(cr.RenewRefused) as err:
        renew(cfg)
    assert seen == [[("192.0.2.12", 2222)]], "only SSH control planes are probed"
    assert err.value.exit_code == 2 and "cp2" in err.value.message and "192.0.2.12:2222" in err.value.message
    assert engine.ran == [] and not rn.record_path(cfg).exists()


def test_a_renewal_renews_the_due_nodes_and_records_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = kubeadm_facts(datetime.now(timezone.utc) - timedelta(days=300))
    engine = Engine(monkeypatch, tmp_path, {n: host(old) for n in ("cp1", "cp2", "cp3")})
    result = renew(config())
    assert engine.ran == ["renew", "kubeconfig"] and engine.limit == ["cp1", "cp2", "cp3"]
    assert engine.extravars["gpustack_certs_renew_nodes"] == ["cp1", "cp2", "cp3"] == result.renewed
    assert engine.record_seen is not None and engine.record_seen["status"] == "running"
    done = json.loads(rn.record_path(config()).read_text())
    assert done["status"] == "done" and done["started"] == engine.record_seen["started"] and done["validity"] == "365d"
    assert rn.record_path(config()).stat().st_mode & 0o777 == 0o600


def test_an_interrupted_renewal_resumes_without_renewing_the_done_nodes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = kubeadm_facts(datetime.now(timezone.utc) - timedelta(days=300))
    engine = Engine(monkeypatch, tmp_path, {n: host(old) for n in ("cp1", "cp2", "cp3")})
    engine.fail_at = "renew"
    with pytest.raises(StageError) as err:
        renew(config())
    assert "not renewed again" in (err.value.hint or "")
    failed = json.loads(rn.record_path(config()).read_text())
    assert failed["status"] == "failed" and "cp2" in failed["error"]

    # cp1 was renewed before cp2 failed: its certificates now expire a validity after the renewal's start
    started = datetime.fromisoformat(failed["started"].replace("Z", "+00:00"))
    fresh = kubeadm_facts(started + timedelta(seconds=30))
    engine = Engine(monkeypatch, tmp_path, {"cp1": host(fresh), "cp2": host(old), "cp3": host(old)})
    renew(config())
    assert engine.extravars["gpustack_certs_renew_nodes"] == ["cp2", "cp3"]
    again = json.loads(rn.record_path(config()).read_text())
    assert again["status"] == "done" and again["started"] == failed["started"]

    # after a finished renewal, the next one renews every control plane again (renewed an hour ago: before its start)
    hour_old = kubeadm_facts(datetime.now(timezone.utc) - timedelta(hours=1))
    engine = Engine(monkeypatch, tmp_path, {n: host(hour_old) for n in ("cp1", "cp2", "cp3")})
    renew(config())
    assert engine.extravars["gpustack_certs_renew_nodes"] == ["cp1", "cp2", "cp3"]


def test_the_plan() -> None:
    assert cr.PLAN.command == "certs-renew" and cr.PLAN.playbook == "certs-renew.yml"
    assert cr.PLAN.stage_ids == ("preflight", "renew", "kubeconfig", "record")
    assert cr.PLAN.extravars == ("gpustack_certs_renew_nodes",)


# --- the CLI -----------------------------------------------------------------------------------------------


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "gpustack.yaml"
    cfg.write_text("nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "GPUSTACK_STATE_DIR": str(tmp_path / "state"),
           **THIS_CHECKOUT}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "gpustack", *args, "-c", str(cfg)], capture_output=True, text=True,
                          env=env, timeout=120, check=False, stdin=subprocess.DEVNULL)  # fmt: skip


def test_cli_without_a_terminal_refuses_unless_yes(tmp_path: Path) -> None:
    r = cli(tmp_path, "certs", "renew")
    assert r.returncode == 2 and "--yes" in r.stderr and "Traceback" not in r.stderr
    assert "the only API server restarts" in r.stdout


def test_plan_certs_renew(tmp_path: Path) -> None:
    r = cli(tmp_path, "plan", "certs-renew")
    assert r.returncode == 0, r.stderr
    assert "kubeadm certs renew all" in r.stdout and "kubeconfig" in r.stdout


# --- gpustack upgrade renews too ------------------------------------------------------------------------------


def test_upgrade_renews_the_control_planes_its_run_has_not_renewed() -> None:
    """The upgrade's start (kept by a resumed upgrade) is the renewal's start: a control plane kubeadm upgrade renewed
    in an interrupted run is not renewed again; one already at the target (no kubeadm upgrade) is."""
    from gpustack.commands.upgrade import renew_due

    started = NOW - timedelta(minutes=30)
    progress = {"started": started.strftime("%Y-%m-%dT%H:%M:%SZ")}
    facts = {"cp1": host(kubeadm_facts(started + timedelta(minutes=5))), "cp2": host(kubeadm_facts(NOW - timedelta(days=99))),
             "cp3": host(kubeadm_facts(NOW - timedelta(days=99))), "w1": host(None)}  # fmt: skip
    assert renew_due(config(), facts, progress) == ["cp2", "cp3"]
    assert cr.PLAN.extravars[0] in __import__("gpustack.commands.upgrade", fromlist=["PLAN"]).PLAN.extravars


def test_the_upgrade_role_renews_where_kubeadm_upgrade_did_not_and_the_play_fetches_the_kubeconfig() -> None:
    import yaml

    from gpustack.paths import resource_file

    tasks = yaml.safe_load(resource_file("playbooks", "roles/upgrade/tasks/main.yml").read_text())
    (renew,) = [t for t in tasks if t.get("ansible.builtin.include_role", {}).get("name") == "certs_renew"]
    due = renew["vars"]["certs_renew_due"]
    assert "gpustack_certs_renew_nodes" in due and "upgrade_apply" in due and "upgrade_node" in due
    assert renew["when"] == "upgrade_action != 'worker'"
    names = [t.get("name", "") for t in tasks]
    assert names.index(renew["name"]) < names.index("Record the finished node")
    plays = yaml.safe_load(resource_file("playbooks", "upgrade.yml").read_text())
    (cp,) = [p for p in plays if p["name"] == "control-plane"]
    assert cp["tasks"][0]["ansible.builtin.import_role"] == {"name": "control_plane", "tasks_from": "kubeconfig.yml"}
