"""`gpustack security apply` without hosts: the engine runs the plan with its preflight replaced and its Ansible stages
replaced by :class:`Regenerate` (the TEST DOUBLE of the security_apply role's ``kubeadm upgrade node phase
control-plane`` and the kubelet mirroring the new static pods: each control plane's mirror pods rewritten from the
ClusterConfiguration the run uploaded), against the fake API server (tests/fakes/kube_api.py: the mirror pods, the
kubeadm-config ConfigMap) and, for the Secret rewrite (PUTs, which the fake does not serve),
tests/unit/cluster/test_key_rotation.py's SecretStore. What the real kubeadm 1.36.5 writes from the uploaded configuration is
tests/controlplane/test_security_apply.py's."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.cluster import security_apply as sa
from gpustack.commands import security_apply as cmd
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.engine.plan import CommandPlan, Stage
from gpustack.engine.steps import StageSummary
from gpustack.errors import ConfigError, StageError
from gpustack.paths import resource_file
from gpustack.render.kubeadm import render_init_config
from gpustack.runners.kube import Kube
from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.cluster.test_key_rotation import SecretStore
from tests.unit.playbooks.conftest import PLAYBOOKS, load_path

kubelet_filter = load_path("gpustack_kubelet_filter", PLAYBOOKS / "filter_plugins" / "gpustack_kubelet.py")

KUBELET_CM = "/api/v1/namespaces/kube-system/configmaps/kubelet-config"
#: the kubelet configuration of a cluster an older gpustack built: kubeadm 1.36.5's (tests/fixtures/kubelet) without
#: the settings added since (protectKernelDefaults, podPidsLimit)
BUILT_KUBELET = {k: v for k, v in yaml.safe_load((Path(__file__).resolve().parents[2] / "fixtures/kubelet"
                 / "kubeadm-1.36.5-config.yaml").read_text()).items() if k not in ("protectKernelDefaults", "podPidsLimit")}  # fmt: skip
KUBELET_NODES = ("cp1", "cp2", "w1")
NODES = [{"name": f"cp{i}", "address": f"192.0.2.1{i}", "role": "control-plane", "connection": "local"}
         for i in (1, 2)] + [{"name": "w1", "address": "192.0.2.20", "connection": "local"}]  # fmt: skip
CM = "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"


def config(**sec: Any) -> Config:
    return Config.model_validate({"nodes": NODES, "cluster": {"virtual_ip": "192.0.2.100"}, "security": sec})


#: the cluster as it was built: no encryption, no audit log, profiling on
BUILT = config(encryption_at_rest=False, audit={"enabled": False}, profiling=True)


def cluster_configuration(c: Config) -> str:
    (doc,) = [d for d in yaml.safe_load_all(render_init_config(c)) if d and d["kind"] == "ClusterConfiguration"]
    return yaml.safe_dump(doc, sort_keys=False)


def mirror_pod(node: str, component: str, extra_args: list[dict[str, str]]) -> dict[str, Any]:
    command = [component, "--bind-address=0.0.0.0", *(f"--{a['name']}={a['value']}" for a in extra_args)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{component}-{node}", "namespace": "kube-system",
                         "labels": {"component": component, "tier": "control-plane"}},
            "spec": {"nodeName": node, "containers": [{"name": component, "image": "x", "command": command}]}}  # fmt: skip


def pods_from(text: str, node: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load(text)
    return [mirror_pod(node, c, doc[sa.SECTION[c]].get("extraArgs") or []) for c in sa.COMPONENTS]


class Regenerate:
    """The engine with its preflight replaced and its Ansible stages played by this double: ``files`` records its
    call; ``control-plane`` regenerates each control plane's mirror pods from the uploaded ClusterConfiguration, as
    kubeadm rewrites the manifests and the kubelet mirrors them (``cut_after``: stops after that many nodes)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, api: FakeKubeAPI, kube: Kube) -> None:
        monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path))
        self.api, self.kube = api, kube
        self.stages: list[str] = []
        self.regenerated: list[str] = []
        self.sent: dict[str, Any] = {}
        self.cut_after: int | None = None
        monkeypatch.setattr(engine_run, "run_preflight", lambda *a, **kw: ({}, []))
        monkeypatch.setattr(engine_run, "ansible_stages", self.ansible)
        monkeypatch.setattr(sa, "admin_kube", lambda cfg: kube)
        text = cluster_configuration(BUILT)
        api.seed([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeadm-config",
                   "namespace": "kube-system"}, "data": {"ClusterConfiguration": text}}])  # fmt: skip
        api.seed([p for n in ("cp1", "cp2") for p in pods_from(text, n)])
        api.seed([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubelet-config",
                   "namespace": "kube-system"}, "data": {"kubelet": yaml.safe_dump(BUILT_KUBELET)}}])  # fmt: skip
        #: each node's /var/lib/kubelet/config.yaml, and the nodes whose kubelet the kubelets stage reconfigured
        self.node_kubelet = {n: dict(BUILT_KUBELET) for n in KUBELET_NODES}
        self.reconfigured: list[str] = []
        self.store = SecretStore()
        from gpustack.cluster import secrets

        real = secrets.rewrite_secrets
        monkeypatch.setattr(secrets, "rewrite_secrets", lambda _kube: real(self.store))  # type: ignore[arg-type]

    def ansible(self, plan: CommandPlan, stages: list[Stage], cfg: Config, opts: Any, *a: Any, **kw: Any) -> Any:
        self.sent = dict(opts.extravars)
        for stage in stages:
            self.stages.append(stage.id)
            if stage.id == "control-plane" and not opts.dry_run:  # check mode: the role's kubeadm does not run
                text = str(self.kube.request("GET", CM)["data"]["ClusterConfiguration"])
                for n, node in enumerate(("cp1", "cp2")):
                    if self.cut_after is not None and n >= self.cut_after:
                        self.cut_after = None
                        raise StageError(f"{node}: task 'Wait until the API server is ready' failed",
                                         stage=stage.id, hosts=(node,))  # fmt: skip
                    self.regenerated.append(node)
                    self.api.seed(pods_from(text, node))
            if stage.id == "kubelets" and not opts.dry_run:  # the role's judgement (its filter), kubeadm's download
                cm = yaml.safe_load(str(self.kube.request("GET", KUBELET_CM)["data"]["kubelet"]))
                for node in KUBELET_NODES:
                    if kubelet_filter.gpustack_kubelet_drift(
                        self.node_kubelet[node], opts.extravars["gpustack_kubelet_settings"]
                    ):
                        self.node_kubelet[node] = cm
                        self.reconfigured.append(node)
        return [StageSummary(s.id, "changed", 0.0, 1) for s in stages], type(
            "R", (), {"failures": [], "rc": 0, "status": "successful"}
        )()

    def puts(self) -> list[str]:
        return self.store.puts


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_api: FakeKubeAPI, kube: Kube) -> Regenerate:
    return Regenerate(monkeypatch, tmp_path, fake_api, kube)


def apply(cfg: Config, *, dry_run: bool = False) -> cmd.ApplyResult:
    return cmd.apply(cfg, cmd.ApplyOptions(dry_run=dry_run), Console(stream=io.StringIO(), color=False))


def test_the_changed_settings_reach_every_control_plane_and_the_secrets_are_rewritten(engine: Regenerate) -> None:
    cfg = config()
    assert cmd.read_drift(cfg, engine.kube).nodes == ["cp1", "cp2"]
    result = apply(cfg)
    assert engine.stages == ["files", "control-plane", "kubelets"] and engine.regenerated == ["cp1", "cp2"]
    assert engine.sent == {
        "gpustack_security_flags": cmd.flag_vars(cfg),
        "gpustack_kubelet_settings": cmd.kubelet_vars(cfg),
    }
    # the ClusterConfiguration now renders gpustack's flags: later joins and upgrades keep them
    uploaded = yaml.safe_load(engine.kube.request("GET", CM)["data"]["ClusterConfiguration"])
    assert uploaded["apiServer"]["extraArgs"] == yaml.safe_load(cluster_configuration(cfg))["apiServer"]["extraArgs"]
    found = cmd.read_drift(cfg, engine.kube)
    assert found.nodes == [] and found.unread == {}
    assert len(engine.puts()) == 3 and not sa.rewrite_pending(cfg)  # every Secret, once; the record cleared
    rows = {s.stage: s for s in result.summaries}
    assert [s.stage for s in result.summaries] == list(cmd.PLAN.stage_ids)
    assert rows["detect"].note.startswith("2 control plane(s) change: cp1, cp2; every Secret to be rewritten")
    assert rows["upload-config"].status == "changed" and rows["rewrite"].note == "3 Secret(s) rewritten"
    # converged: a second run changes nothing and rewrites nothing
    apply(cfg)
    assert len(engine.puts()) == 3
    assert cmd.upload_config(cfg, engine.kube).note == "unchanged"


def test_a_run_cut_off_between_control_planes_is_finished_by_the_next(engine: Regenerate) -> None:
    cfg = config()
    engine.cut_after = 1
    with pytest.raises(StageError):
        apply(cfg)
    assert cmd.read_drift(cfg, engine.kube).nodes == ["cp2"] and sa.rewrite_pending(cfg)
    assert engine.puts() == []  # not while cp2's API server still writes Secrets in clear
    with pytest.raises(StageError, match="on cp2 does not encrypt yet"):
        cmd.rewrite(cfg, engine.kube)
    apply(cfg)  # cp2's flags now differ only there; the record still says to rewrite
    assert cmd.read_drift(cfg, engine.kube).nodes == [] and len(engine.puts()) == 3 and not sa.rewrite_pending(cfg)


def test_a_change_without_encryption_rewrites_no_secret(engine: Regenerate) -> None:
    cfg = config(encryption_at_rest=False)
    apply(cfg)
    assert engine.puts() == [] and cmd.read_drift(cfg, engine.kube).nodes == []


def test_turning_encryption_off_is_refused_before_anything_changes(engine: Regenerate) -> None:
    apply(config())
    before = engine.kube.request("GET", CM)["data"]
    with pytest.raises(ConfigError, match="does not turn encryption off") as err:
        apply(config(encryption_at_rest=False))
    assert err.value.exit_code == 2 and engine.kube.request("GET", CM)["data"] == before


def test_a_dry_run_reads_and_changes_nothing(engine: Regenerate) -> None:
    cfg = config()
    result = apply(cfg, dry_run=True)
    assert not sa.rewrite_pending(cfg) and engine.puts() == [] and engine.regenerated == []
    assert engine.stages == ["files", "control-plane", "kubelets"]  # in check mode
    assert engine.reconfigured == [] and engine.node_kubelet["w1"] == BUILT_KUBELET
    assert "resourceVersion" in engine.kube.request("GET", CM)["metadata"]
    assert yaml.safe_load(engine.kube.request("GET", CM)["data"]["ClusterConfiguration"]) == yaml.safe_load(
        cluster_configuration(BUILT)
    )
    status = {s.stage: (s.status, s.note) for s in result.summaries if s.stage in ("detect", "upload-config")}
    assert status == {"detect": ("ok", "2 control plane(s) change: cp1, cp2"), "upload-config": ("not run", "dry run")}


def test_the_plays_write_the_files_first_then_one_control_plane_at_a_time() -> None:
    plays = yaml.safe_load(resource_file("playbooks", "security-apply.yml").read_text())
    assert [p["name"] for p in plays] == ["files", "control-plane", "kubelets"]
    # the kubelets: every node, one at a time, the kernel parameters first, kubeadm's download, then the restart
    assert (plays[2]["hosts"], plays[2]["serial"], plays[2]["any_errors_fatal"]) == ("control_plane:workers", 1, True)
    kubelet = yaml.safe_load(resource_file("playbooks", "roles/security_apply/tasks/kubelet.yml").read_text())
    assert kubelet[0]["ansible.builtin.include_role"] == {"name": "os_prep", "tasks_from": "kubelet_sysctl.yml"}
    steps = [t["name"] for t in kubelet]
    assert steps.index("Download the cluster's kubelet configuration into config.yaml") < steps.index(
        "Restart the kubelet with its new configuration") < steps.index("Wait until the node is Ready")  # fmt: skip
    assert all(t["when"].startswith("security_apply_kubelet_drift | length > 0") for t in kubelet[3:])
    (modes,) = [t for t in kubelet if t["name"] == "Make the kubelet's config file root's alone again"]
    assert modes["ansible.builtin.include_role"] == {"name": "kubernetes_packages", "tasks_from": "file_modes.yml"}
    assert steps.index(modes["name"]) > steps.index("Download the cluster's kubelet configuration into config.yaml")
    assert plays[0]["tasks"][0]["ansible.builtin.import_role"] == {
        "name": "control_plane",
        "tasks_from": "security.yml",
    }
    assert (plays[1]["serial"], plays[1]["any_errors_fatal"], plays[1]["roles"]) == (
        1,
        True,
        [{"role": "security_apply"}],
    )
    tasks = yaml.safe_load(resource_file("playbooks", "roles/security_apply/tasks/main.yml").read_text())
    defaults = yaml.safe_load(resource_file("playbooks", "roles/security_apply/defaults/main.yml").read_text())
    (kubeadm,) = [t for t in tasks if t["name"] == "Regenerate the static pods whose flags differ"]
    assert kubeadm["when"] == "security_apply_drift | length > 0"  # a control plane as configured is skipped
    assert defaults["security_apply_kubeadm_argv"] == ["kubeadm", "upgrade", "node", "phase", "control-plane",
                                                       "--certificate-renewal=false", "--etcd-upgrade=false"]  # fmt: skip
    names = [t["name"] for t in tasks]
    assert names.index("Wait until the API server is ready") > names.index(kubeadm["name"])


def test_the_kubelet_settings_reach_the_configmap_and_every_node_one_at_a_time(engine: Regenerate) -> None:
    cfg = config()
    result = apply(cfg)
    rows = {s.stage: s for s in result.summaries}
    assert rows["upload-kubelet-config"].status == "changed"
    uploaded = yaml.safe_load(engine.kube.request("GET", KUBELET_CM)["data"]["kubelet"])
    assert uploaded["protectKernelDefaults"] is True and uploaded["podPidsLimit"] == 32768
    assert {k: v for k, v in uploaded.items() if k not in ("protectKernelDefaults", "podPidsLimit")} == BUILT_KUBELET
    assert engine.reconfigured == ["cp1", "cp2", "w1"]  # workers too
    assert all(engine.node_kubelet[n] == uploaded for n in KUBELET_NODES)
    # converged: the ConfigMap unchanged, no kubelet restarted
    apply(cfg)
    assert engine.reconfigured == ["cp1", "cp2", "w1"]
    assert cmd.upload_kubelet_config(cfg, engine.kube).note == "unchanged"
    # a relaxation later: podPidsLimit taken out of the ConfigMap and the nodes again, the site's keys kept
    relaxed = config(pod_pids_limit=None)
    apply(relaxed)
    assert "podPidsLimit" not in yaml.safe_load(engine.kube.request("GET", KUBELET_CM)["data"]["kubelet"])
    assert engine.reconfigured[3:] == ["cp1", "cp2", "w1"] and engine.node_kubelet["w1"]["clusterDNS"] == ["10.96.0.10"]
