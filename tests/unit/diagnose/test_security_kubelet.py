"""The security layer's kubelet checks (CIS 4.2.x: gpustack/diagnose/checks_security_kubelet.py, judged as kube-bench
judges them in gpustack/diagnose/cis_kubelet.py) over host facts, and the facts they read
(playbooks/module_utils/gpustack_cis_files.py ``collect_kubelet``) on a directory tree standing for a host's /.

The kubelet's config file and flags are **recorded from the real kubeadm 1.36.5** (tests/fixtures/kubelet/: ``kubeadm
init phase kubelet-start --dry-run`` on gpustack's default kubeadm configuration for a node named cp1 on a host of
another name, hence ``--hostname-override``); tests/controlplane/test_kubelet_config.py renders them again with the
real kubeadm and fails when they differ, so they cannot go stale."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.config.model import Config
from gpustack.diagnose import cis_kubelet as ck
from gpustack.diagnose import registry
from gpustack.diagnose.snapshot import Snapshot

REPO = Path(__file__).resolve().parents[3]
RECORDED = REPO / "tests/fixtures/kubelet"
CONFIG_TEXT = (RECORDED / "kubeadm-1.36.5-config.yaml").read_text()
FLAGS_ENV = (RECORDED / "kubeadm-1.36.5-flags.env").read_text()
#: kubeadm's drop-in as the kubernetes/release package installs it (cmd/krel/templates/latest/kubeadm/10-kubeadm.conf)
DROP_IN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""
NODES = ("cp1", "gpu1", "gpu2")
#: the kubelet checks gpustack leaves on a default cluster (docs/configuration.md), on the recorded config:
#: 4.2.7 only where kubeadm added --hostname-override (the recorded node's name is not its host's)
LEFT = {"S4.2.7-kubelet-hostname-override", "S4.2.9-kubelet-tls-cert-file", "S4.2.14-kubelet-seccomp-default"}

spec = importlib.util.spec_from_file_location(
    "gpustack_cis_files", REPO / "playbooks/module_utils/gpustack_cis_files.py"
)
assert spec is not None and spec.loader is not None
collector = importlib.util.module_from_spec(spec)
spec.loader.exec_module(collector)


def kubelet_argv(flags_env: str = FLAGS_ENV) -> list[str]:
    """The running kubelet's command line as the unit starts it (what ``ps`` shows)."""
    return collector.unit_command_line([DROP_IN, flags_env])


def host(
    config: dict[str, Any] | None = None, argv: list[str] | None = None, source: str = "process"
) -> dict[str, Any]:
    text = CONFIG_TEXT if config is None else yaml.safe_dump(config)
    kubelet = {"source": source, "argv": kubelet_argv() if argv is None else argv,
               "config_path": ck.CONFIG, "config": text}  # fmt: skip
    return {"cis_files": {"files": {}, "pki": {}, "kubelet": kubelet}}


def recorded() -> dict[str, Any]:
    loaded = yaml.safe_load(CONFIG_TEXT)
    assert isinstance(loaded, dict)
    return loaded


def run(hosts: dict[str, Any], security: dict[str, Any] | None = None) -> list[Any]:
    ids = {r.check_id for r in ck.RULES}
    sec = Config.model_validate({"nodes": [{"name": "cp1", "address": "192.0.2.1", "role": "control-plane"}],
                                 **({"security": security} if security else {})}).security.model_dump(mode="json")  # fmt: skip
    snap = Snapshot(hosts=hosts, settings={"security": sec})
    return registry.run([s for s in registry.select("doctor", layers=["security"]) if s.id in ids], snap)


def not_passing(found: list[Any]) -> set[tuple[str, str, str | None]]:
    return {(f.id, f.status, f.host) for f in found if f.status != "pass"}


def test_every_kube_bench_kubelet_item_is_a_registered_doctor_check() -> None:
    specs = {s.id: s for s in registry.select("doctor", layers=["security"]) if s.id.startswith("S4.2.")}
    assert [r.cis for r in ck.RULES] == [f"4.2.{n}" for n in range(1, 15)]
    assert set(specs) == {r.check_id for r in ck.RULES}
    assert specs["S4.2.13-kubelet-pod-pids-limit"].title == "CIS 4.2.13: Ensure that a limit is set on pod PIDs"
    # gpustack's default suites are exactly CIS 4.2.12's list
    from gpustack.config.security import CIS_CIPHER_SUITES

    assert set(ck.SUITES.split(",")) == set(CIS_CIPHER_SUITES)


def test_the_real_kubeadm_config_of_a_default_cluster_has_no_failure() -> None:
    hosts = {n: host() for n in NODES}
    found = run(hosts)
    assert not_passing(found) == {(c, "warn", n) for c in LEFT for n in NODES}
    passes = {f.id: f for f in found if f.status == "pass"}
    assert len(passes) == 14 - len(LEFT)
    assert passes["S4.2.1-kubelet-anonymous-auth"].summary == (
        f"CIS 4.2.1: authentication.anonymous.enabled: false ({ck.CONFIG})"
    )
    assert passes["S4.2.13-kubelet-pod-pids-limit"].summary == f"CIS 4.2.13: podPidsLimit: 32768 ({ck.CONFIG})"
    assert passes["S4.2.12-kubelet-tls-cipher-suites"].evidence == "on cp1, gpu1, gpu2"
    warn = next(f for f in found if f.id == "S4.2.9-kubelet-tls-cert-file" and f.host == "gpu1")
    assert "serverTLSBootstrap: true" in warn.evidence and "left on purpose" in warn.summary
    hostname = next(f for f in found if f.id == "S4.2.7-kubelet-hostname-override" and f.host == "cp1")
    assert "--hostname-override=cp1 (command line)" in hostname.evidence
    # a node named as its hostname: kubeadm adds no override, 4.2.7 passes
    plain = run({"cp1": host(argv=kubelet_argv('KUBELET_KUBEADM_ARGS="--node-ip=192.0.2.1"\n'))})
    assert ("S4.2.7-kubelet-hostname-override", "pass", None) in {(f.id, f.status, f.host) for f in plain}


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = config
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value


@pytest.mark.parametrize(
    ("path", "value", "failing"),
    [
        ("authentication.anonymous.enabled", True, "S4.2.1-kubelet-anonymous-auth"),
        ("authorization.mode", "AlwaysAllow", "S4.2.2-kubelet-authorization-mode"),
        ("authentication.x509.clientCAFile", None, "S4.2.3-kubelet-client-ca-file"),
        ("readOnlyPort", 10255, "S4.2.4-kubelet-read-only-port"),
        ("streamingConnectionIdleTimeout", 0, "S4.2.5-kubelet-streaming-idle-timeout"),
        ("makeIPTablesUtilChains", False, "S4.2.6-kubelet-make-iptables-util-chains"),
        ("eventRecordQPS", -1, "S4.2.8-kubelet-event-qps"),
        ("rotateCertificates", False, "S4.2.10-kubelet-rotate-certificates"),
        ("featureGates.RotateKubeletServerCertificate", False, "S4.2.11-kubelet-rotate-server-certificate"),
        ("tlsCipherSuites", ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_128_CBC_SHA"],
         "S4.2.12-kubelet-tls-cipher-suites"),
        ("tlsCipherSuites", None, "S4.2.12-kubelet-tls-cipher-suites"),
        ("podPidsLimit", None, "S4.2.13-kubelet-pod-pids-limit"),
        ("podPidsLimit", -1, "S4.2.13-kubelet-pod-pids-limit"),
    ],
)  # fmt: skip
def test_a_wrong_setting_fails_exactly_its_check_on_its_node(path: str, value: Any, failing: str) -> None:
    bad = recorded()
    _set(bad, path, value)
    found = run({"cp1": host(), "gpu1": host(bad)})
    assert not_passing(found) - {(c, "warn", n) for c in LEFT for n in ("cp1", "gpu1")} == {(failing, "fail", "gpu1")}
    fail = next(f for f in found if f.status == "fail")
    assert "gpu1" in fail.evidence and ck.CONFIG in fail.fix and "kubelet-config" in fail.fix


def test_a_flag_on_the_command_line_is_read_before_the_config_file_as_kube_bench_does() -> None:
    argv = [*kubelet_argv(), "--anonymous-auth=true", "--read-only-port=10255", "--pod-max-pids=4096"]
    found = run({"gpu1": host(argv=argv)})
    assert {(f.id, f.status) for f in found if f.status == "fail"} == {
        ("S4.2.1-kubelet-anonymous-auth", "fail"),
        ("S4.2.4-kubelet-read-only-port", "fail"),
    }
    pids = next(f for f in found if f.id == "S4.2.13-kubelet-pod-pids-limit")
    assert pids.status == "pass" and pids.summary == "CIS 4.2.13: --pod-max-pids=4096 (command line)"


def test_kubeadms_zero_idle_timeout_passes_as_kube_bench_reads_it() -> None:
    # kubeadm writes "0s" (the kubelet defaults it to 4h); kube-bench compares the text with "0": not equal, a pass
    assert recorded()["streamingConnectionIdleTimeout"] == "0s"
    found = {f.id: f for f in run({"cp1": host()})}
    assert found["S4.2.5-kubelet-streaming-idle-timeout"].status == "pass"


def test_a_serving_certificate_neither_bootstrapped_nor_configured_fails_4_2_9() -> None:
    config = recorded()
    config["serverTLSBootstrap"] = False
    found = run({"gpu1": host(config)})
    assert ("S4.2.9-kubelet-tls-cert-file", "fail", "gpu1") in not_passing(found)
    config.update(tlsCertFile="/etc/kubelet/tls.crt", tlsPrivateKeyFile="/etc/kubelet/tls.key")
    assert "S4.2.9-kubelet-tls-cert-file" not in {c for c, _, _ in not_passing(run({"gpu1": host(config)}))}


@pytest.mark.parametrize(
    ("security", "path", "value", "relaxed"),
    [
        ({"tls_cipher_suites": []}, "tlsCipherSuites", None, "S4.2.12-kubelet-tls-cipher-suites"),
        ({"pod_pids_limit": None}, "podPidsLimit", None, "S4.2.13-kubelet-pod-pids-limit"),
    ],
)
def test_each_relaxation_turns_exactly_its_check_into_a_warning(
    security: dict[str, Any], path: str, value: Any, relaxed: str
) -> None:
    config = recorded()
    _set(config, path, value)
    found = run({"cp1": host(config)}, security)
    assert not_passing(found) == {(c, "warn", "cp1") for c in {*LEFT, relaxed}}
    warn = next(f for f in found if f.id == relaxed)
    assert f"security.{next(iter(security))}" in warn.evidence


def test_without_host_facts_or_a_kubelet_the_checks_skip() -> None:
    ids = {r.check_id for r in ck.RULES}
    assert {(f.id, f.status) for f in run({})} == {(c, "skip") for c in ids}
    none = {"cis_files": {"files": {}, "pki": {}, "kubelet": {"source": None, "argv": [], "config": None}}}
    skipped = run({"cp1": none})
    assert {f.status for f in skipped} == {"skip"} and "no kubelet" in skipped[0].summary
    # an older facts module (no kubelet key) likewise
    assert {f.status for f in run({"cp1": {"cis_files": {"files": {}, "pki": {}}}})} == {"skip"}


def test_a_broken_config_file_is_judged_from_the_command_line_alone() -> None:
    broken = host()
    broken["cis_files"]["kubelet"]["config"] = "authentication: [unclosed"
    found = {f.id: f for f in run({"gpu1": broken})}
    assert found["S4.2.1-kubelet-anonymous-auth"].status == "fail"
    assert found["S4.2.1-kubelet-anonymous-auth"].evidence.startswith("authentication.anonymous.enabled not set")


# --- the facts: collect_kubelet on a directory tree standing for / ---


def write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def test_the_facts_read_the_unit_when_no_kubelet_runs(tmp_path: Path) -> None:
    write(tmp_path, "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", DROP_IN)
    write(tmp_path, "/var/lib/kubelet/kubeadm-flags.env", FLAGS_ENV)
    write(tmp_path, "/etc/default/kubelet", "KUBELET_EXTRA_ARGS='--v=2 --max-pods=200'\n")
    write(tmp_path, ck.CONFIG, CONFIG_TEXT)
    (tmp_path / "proc").mkdir()
    got = collector.collect_kubelet(str(tmp_path))
    assert got["source"] == "unit" and got["config"] == CONFIG_TEXT
    assert got["argv"] == [
        "kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
        "--hostname-override=cp1", "--node-ip=198.51.100.1", "--v=2", "--max-pods=200",
    ]  # fmt: skip
    assert collector.collect_cis_files(str(tmp_path))["kubelet"] == got


def test_the_facts_read_the_running_kubelets_command_line_and_its_config(tmp_path: Path) -> None:
    for pid, comm, argv in (("1", "systemd", ["/sbin/init"]), ("812", "kubelet", ["/usr/bin/kubelet",
                            "--config=/etc/kubelet/own.yaml", "--node-ip=192.0.2.7"])):  # fmt: skip
        write(tmp_path, f"/proc/{pid}/comm", comm + "\n")
        (tmp_path / f"proc/{pid}/cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    write(tmp_path, "/etc/kubelet/own.yaml", "podPidsLimit: 4096\n")
    got = collector.collect_kubelet(str(tmp_path))
    assert got == {"source": "process", "argv": ["/usr/bin/kubelet", "--config=/etc/kubelet/own.yaml",
                   "--node-ip=192.0.2.7"], "config_path": "/etc/kubelet/own.yaml", "config": "podPidsLimit: 4096\n"}  # fmt: skip


def test_no_kubelet_at_all_is_said_so(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    assert collector.collect_kubelet(str(tmp_path)) == {
        "source": None, "argv": [], "config_path": ck.CONFIG, "config": None,
    }  # fmt: skip


def test_the_kubelet_configuration_gpustack_renders_sets_a_pod_pid_limit() -> None:
    from gpustack.render.security import kubeadm_security

    def kubelet(**security: Any) -> dict[str, Any]:
        cfg = Config.model_validate({"nodes": [{"name": "cp1", "address": "192.0.2.1", "role": "control-plane"}],
                                     "security": security})  # fmt: skip
        return kubeadm_security(cfg).kubelet

    assert kubelet()["podPidsLimit"] == 32768
    assert kubelet(pod_pids_limit=100000)["podPidsLimit"] == 100000
    assert "podPidsLimit" not in kubelet(pod_pids_limit=None)
    with pytest.raises(ValueError, match="greater than or equal to 1024"):
        kubelet(pod_pids_limit=10)
    assert recorded()["podPidsLimit"] == 32768  # the recording is of this rendering
