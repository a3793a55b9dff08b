"""The security layer (gpustack/diagnose/checks_security.py, rules in gpustack/diagnose/cis.py): CIS Kubernetes
Benchmark items (kube-bench cfg/cis-1.12) judged from the control plane's mirror pods, as the fake API server's
snapshot holds them. The mirror pods carry kubeadm 1.36's own flags for each component (cmd/kubeadm/app/phases/
controlplane/manifests.go, etcd/local.go; the real manifests are judged in tests/controlplane/test_security.py) and
gpustack's (gpustack/render/security.py ``kubeadm_security`` from the config): a default cluster has no failure,
each wrong flag fails exactly its check on its node, each relaxation setting turns exactly its checks into warnings."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack.config.model import Config
from gpustack.diagnose import checks_security as cs
from gpustack.diagnose import cis, registry
from gpustack.diagnose.snapshot import Snapshot
from gpustack.render.security import kubeadm_security

NODES = ("cp1", "cp2", "cp3")
PKI = "/etc/kubernetes/pki"
#: the checks gpustack leaves on every cluster (docs/configuration.md): warnings on a default cluster
LEFT = {"S1.2.1-apiserver-anonymous-auth"}


def kubeadm_flags(cfg: Config, node: str) -> dict[str, dict[str, str]]:
    """Each component's flags as kubeadm 1.36 writes its static pod manifest from gpustack's configuration."""
    sec = kubeadm_security(cfg)
    api = {
        "advertise-address": "192.0.2.11",
        "allow-privileged": "true",
        "authorization-mode": "Node,RBAC",
        "client-ca-file": f"{PKI}/ca.crt",
        "enable-admission-plugins": "NodeRestriction",
        "enable-bootstrap-token-auth": "true",
        "etcd-cafile": f"{PKI}/etcd/ca.crt",
        "etcd-certfile": f"{PKI}/apiserver-etcd-client.crt",
        "etcd-keyfile": f"{PKI}/apiserver-etcd-client.key",
        "etcd-servers": "https://127.0.0.1:2379",
        "kubelet-client-certificate": f"{PKI}/apiserver-kubelet-client.crt",
        "kubelet-client-key": f"{PKI}/apiserver-kubelet-client.key",
        "secure-port": "6443",
        "service-account-issuer": "https://kubernetes.default.svc.cluster.local",
        "service-account-key-file": f"{PKI}/sa.pub",
        "service-account-signing-key-file": f"{PKI}/sa.key",
        "service-cluster-ip-range": "10.96.0.0/12",
        "tls-cert-file": f"{PKI}/apiserver.crt",
        "tls-private-key-file": f"{PKI}/apiserver.key",
        **dict(sec.api_server_args),
    }
    cm = {
        "authentication-kubeconfig": "/etc/kubernetes/controller-manager.conf",
        "bind-address": "127.0.0.1",
        "client-ca-file": f"{PKI}/ca.crt",
        "cluster-signing-cert-file": f"{PKI}/ca.crt",
        "controllers": "*,bootstrapsigner,tokencleaner",
        "kubeconfig": "/etc/kubernetes/controller-manager.conf",
        "leader-elect": "true",
        "root-ca-file": f"{PKI}/ca.crt",
        "service-account-private-key-file": f"{PKI}/sa.key",
        "use-service-account-credentials": "true",
        **dict(sec.controller_manager_args),
    }
    sched = {
        "bind-address": "127.0.0.1",
        "kubeconfig": "/etc/kubernetes/scheduler.conf",
        "leader-elect": "true",
        **dict(sec.scheduler_args),
    }
    etcd = {
        "advertise-client-urls": "https://192.0.2.11:2379",
        "cert-file": f"{PKI}/etcd/server.crt",
        "client-cert-auth": "true",
        "data-dir": "/var/lib/etcd",
        "key-file": f"{PKI}/etcd/server.key",
        "name": node,
        "peer-cert-file": f"{PKI}/etcd/peer.crt",
        "peer-client-cert-auth": "true",
        "peer-key-file": f"{PKI}/etcd/peer.key",
        "peer-trusted-ca-file": f"{PKI}/etcd/ca.crt",
        "trusted-ca-file": f"{PKI}/etcd/ca.crt",
    }
    return {"kube-apiserver": api, "kube-controller-manager": cm, "kube-scheduler": sched, "etcd": etcd}


def mirror(component: str, node: str, flags: dict[str, str]) -> dict[str, Any]:
    """A mirror pod as the kubelet registers a kubeadm static pod (name <component>-<node>, labels component/tier)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{component}-{node}", "namespace": "kube-system",
                         "labels": {"component": component, "tier": "control-plane"},
                         "annotations": {"kubernetes.io/config.source": "file"}},
            "spec": {"nodeName": node, "containers": [{"name": component,
                                                       "command": [component, *(f"--{k}={v}" for k, v in flags.items())]}]}}  # fmt: skip


def snapshot(cfg: Config | None = None, *, change: dict[str, dict[str, str | None]] | None = None,
             on: str = "cp2", settings: Config | None = None) -> Snapshot:  # fmt: skip
    """A 3-control-plane cluster built from ``cfg``; ``change`` sets (None: removes) flags of components on ``on``;
    ``settings``: the gpustack.yaml doctor runs with (default: ``cfg``)."""
    cfg = cfg or Config()
    pods = []
    for node in NODES:
        for component, flags in kubeadm_flags(cfg, node).items():
            for k, v in ((change or {}).get(component, {}) if node == on else {}).items():
                if v is None:
                    flags.pop(k, None)
                else:
                    flags[k] = v
            pods.append(mirror(component, node, flags))
    sec = (settings or cfg).security.model_dump(mode="json")
    return Snapshot(kube={"Pod": pods}, settings={"security": sec})


def findings(snap: Snapshot) -> list[Any]:
    """The flag checks' findings (the layer's file checks read host facts: tests/unit/diagnose/test_security_files.py)."""
    flags = {r.check_id for r in cis.RULES} | {"S2.7-etcd-unique-ca"}
    return registry.run([s for s in registry.select("doctor", layers=["security"]) if s.id in flags], snap)


def not_passing(snap: Snapshot) -> set[tuple[str, str, str | None]]:
    return {(f.id, f.status, f.host) for f in findings(snap) if f.status != "pass"}


def test_every_rule_is_a_registered_doctor_check_of_the_security_layer() -> None:
    from gpustack.diagnose.checks_security_files import RULES as FILE_RULES
    from gpustack.diagnose.cis_kubelet import RULES as KUBELET_RULES

    specs = {s.id: s for s in registry.select("doctor", layers=["security"])}
    # the host-fact checks: files (test_security_files.py) and the kubelet's (test_security_kubelet.py)
    files = {r.check_id for r in FILE_RULES} | {r.check_id for r in KUBELET_RULES}
    assert set(specs) - files == {r.check_id for r in cis.RULES} | {"S2.7-etcd-unique-ca"}
    assert len(specs) == 40 + len(files) and all(s.needs == ("Pod",) for s in specs.values() if s.id not in files)
    assert (
        specs["S1.2.15-apiserver-profiling"].title == "CIS 1.2.15: Ensure that the --profiling argument is set to false"
    )
    assert not registry.select("verify", layers=["security"])  # doctor only


def test_a_default_cluster_has_no_failure_and_warns_only_what_gpustack_leaves() -> None:
    got = findings(snapshot())
    assert {(f.id, f.status, f.host) for f in got if f.status != "pass"} == {
        (c, "warn", n) for c in LEFT for n in NODES
    }
    passes = {f.id: f for f in got if f.status == "pass"}
    assert len(passes) == 39
    # gpustack's kubelets serve CA-signed certificates (serverTLSBootstrap), so the API server verifies them
    assert passes["S1.2.5-apiserver-kubelet-certificate-authority"].summary.endswith(f"={PKI}/ca.crt")
    assert passes["S1.2.15-apiserver-profiling"].summary == "CIS 1.2.15: --profiling=false"
    assert passes["S1.2.15-apiserver-profiling"].evidence == "on cp1, cp2, cp3"
    assert passes["S1.2.29-apiserver-tls-cipher-suites"].summary.startswith(
        "CIS 1.2.29: --tls-cipher-suites=TLS_ECDHE_"
    )
    # a cluster made before that: the flag is missing, a warning that says why (not a failure)
    older = findings(snapshot(change={"kube-apiserver": {"kubelet-certificate-authority": None}}, on="cp1"))
    warn = next(f for f in older if f.id == "S1.2.5-apiserver-kubelet-certificate-authority" and f.host == "cp1")
    assert "left on purpose" in warn.summary and "serverTLSBootstrap" in warn.evidence
    assert "--kubelet-certificate-authority not set" in warn.evidence


@pytest.mark.parametrize(
    ("component", "change", "failing"),
    [
        ("kube-apiserver", {"profiling": "true"}, {"S1.2.15-apiserver-profiling"}),
        ("kube-apiserver", {"profiling": None}, {"S1.2.15-apiserver-profiling"}),  # the default is true
        ("kube-apiserver", {"authorization-mode": "AlwaysAllow"},
         {"S1.2.6-apiserver-authorization-not-alwaysallow", "S1.2.7-apiserver-authorization-node",
          "S1.2.8-apiserver-authorization-rbac"}),
        ("kube-apiserver", {"token-auth-file": "/etc/kubernetes/tokens.csv"}, {"S1.2.2-apiserver-token-auth-file"}),
        ("kube-apiserver", {"enable-admission-plugins": "NodeRestriction,AlwaysAdmit"}, {"S1.2.10-apiserver-no-alwaysadmit"}),
        ("kube-apiserver", {"enable-admission-plugins": None}, {"S1.2.14-apiserver-noderestriction-admission"}),
        ("kube-apiserver", {"disable-admission-plugins": "ServiceAccount"}, {"S1.2.12-apiserver-serviceaccount-admission"}),
        ("kube-apiserver", {"audit-log-path": None}, {"S1.2.16-apiserver-audit-log-path"}),
        ("kube-apiserver", {"audit-log-maxage": "7"}, {"S1.2.17-apiserver-audit-log-maxage"}),
        ("kube-apiserver", {"audit-log-maxbackup": "x"}, {"S1.2.18-apiserver-audit-log-maxbackup"}),
        ("kube-apiserver", {"service-account-lookup": "false"}, {"S1.2.21-apiserver-service-account-lookup"}),
        ("kube-apiserver", {"encryption-provider-config": None}, {"S1.2.27-apiserver-encryption-provider-config"}),
        ("kube-apiserver", {"tls-cipher-suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_RSA_WITH_AES_128_CBC_SHA"},
         {"S1.2.29-apiserver-tls-cipher-suites"}),
        ("kube-apiserver", {"service-account-extend-token-expiration": None}, {"S1.2.30-apiserver-extend-token-expiration"}),
        ("kube-controller-manager", {"profiling": "true"}, {"S1.3.2-controller-manager-profiling"}),
        ("kube-controller-manager", {"use-service-account-credentials": None},
         {"S1.3.3-controller-manager-service-account-credentials"}),
        ("kube-controller-manager", {"feature-gates": "RotateKubeletServerCertificate=false"},
         {"S1.3.6-controller-manager-rotate-kubelet-server-certificate"}),
        ("kube-controller-manager", {"bind-address": "0.0.0.0"}, {"S1.3.7-controller-manager-bind-address"}),
        ("kube-scheduler", {"profiling": "true"}, {"S1.4.1-scheduler-profiling"}),
        ("kube-scheduler", {"bind-address": "0.0.0.0"}, {"S1.4.2-scheduler-bind-address"}),
        ("etcd", {"client-cert-auth": "false"}, {"S2.2-etcd-client-cert-auth"}),
        ("etcd", {"auto-tls": "true"}, {"S2.3-etcd-auto-tls"}),
        ("etcd", {"peer-key-file": None}, {"S2.4-etcd-peer-cert-file"}),
        ("etcd", {"peer-client-cert-auth": None}, {"S2.5-etcd-peer-client-cert-auth"}),
        ("etcd", {"peer-auto-tls": "true"}, {"S2.6-etcd-peer-auto-tls"}),
        ("etcd", {"trusted-ca-file": f"{PKI}/ca.crt"}, {"S2.7-etcd-unique-ca"}),
    ],
)  # fmt: skip
def test_a_wrong_flag_fails_exactly_its_check_on_its_node(component: str, change: dict, failing: set[str]) -> None:
    got = findings(snapshot(change={component: change}))
    fails = [f for f in got if f.status == "fail"]
    assert {(f.id, f.host) for f in fails} == {(c, "cp2") for c in failing}
    for f in fails:
        assert f.fix and f"/etc/kubernetes/manifests/{component}.yaml" in f.evidence + f.fix, f
        assert f.summary.startswith(f"CIS {f.id[1:].split('-')[0]} not met")
    # the other checks are as on a default cluster: no pass hides the failure on cp1 and cp3 either
    assert {(f.id, f.status) for f in got if f.status == "warn"} == {(c, "warn") for c in LEFT}
    assert not [f for f in got if f.id in failing and f.status == "pass"]


def test_the_fix_names_the_flag_the_manifest_and_kubeadm_config() -> None:
    (f,) = [f for f in findings(snapshot(change={"kube-apiserver": {"profiling": "true"}})) if f.status == "fail"]
    assert f.evidence == "--profiling=true (kube-apiserver on cp2, /etc/kubernetes/manifests/kube-apiserver.yaml)"
    assert f.fix.startswith("on cp2: --profiling=false (security.profiling: false) in "
                            "/etc/kubernetes/manifests/kube-apiserver.yaml")  # fmt: skip
    assert "kubeadm-config" in f.fix


@pytest.mark.parametrize(
    ("security", "relaxed"),
    [
        ({"profiling": True}, {"S1.2.15-apiserver-profiling", "S1.3.2-controller-manager-profiling", "S1.4.1-scheduler-profiling"}),
        ({"audit": {"enabled": False}}, {"S1.2.16-apiserver-audit-log-path", "S1.2.17-apiserver-audit-log-maxage",
                                         "S1.2.18-apiserver-audit-log-maxbackup", "S1.2.19-apiserver-audit-log-maxsize"}),
        ({"audit": {"max_age": 7}}, {"S1.2.17-apiserver-audit-log-maxage"}),
        ({"encryption_at_rest": False}, {"S1.2.27-apiserver-encryption-provider-config"}),
        ({"tls_cipher_suites": []}, {"S1.2.29-apiserver-tls-cipher-suites"}),
        ({"extend_token_expiration": True}, {"S1.2.30-apiserver-extend-token-expiration"}),
    ],
)  # fmt: skip
def test_each_relaxation_turns_exactly_its_checks_into_warnings(security: dict, relaxed: set[str]) -> None:
    cfg = Config.model_validate({"security": security})
    got = findings(snapshot(cfg))  # a cluster built with the relaxed configuration, doctor run with it
    assert {(f.id, f.status) for f in got if f.status != "pass"} == {(c, "warn") for c in relaxed | LEFT}
    for f in got:
        if f.id in relaxed:
            assert "relaxed in gpustack.yaml: security." in f.evidence and "relaxed on purpose" in f.summary
    # the same cluster judged with gpustack's defaults: they are failures
    strict = {(f.id, f.status) for f in findings(snapshot(cfg, settings=Config())) if f.status == "fail"}
    assert strict == {(c, "fail") for c in relaxed}


def test_no_mirror_pods_or_no_command_line_is_a_skip() -> None:
    got = findings(Snapshot(kube={"Pod": []}))
    assert {f.status for f in got} == {"skip"} and len(got) == 40
    assert "no kube-apiserver mirror pod in kube-system" in next(f.summary for f in got if f.id.startswith("S1.2.15"))
    snap = snapshot()
    for pod in snap.kube["Pod"]:
        if pod["spec"]["nodeName"] == "cp3":
            pod["spec"]["containers"][0].pop("command")
    got = findings(snap)
    assert {(f.status, f.host) for f in got if f.id == "S1.2.15-apiserver-profiling"} == {("skip", "cp3")}
    assert not [f for f in got if f.status == "fail"]
    # the data missing altogether: the registry's skip names the source
    assert {f.status for f in findings(Snapshot(errors={"kubernetes": "refused"}))} == {"skip"}


def test_flags_parse_as_go_reads_them() -> None:
    assert cis.parse_flags(["kube-apiserver", "--profiling", "--secure-port", "6443", "--a=b=c", "--x=1", "--x=2"]) == {
        "profiling": "true", "secure-port": "6443", "a": "b=c", "x": "2"}  # fmt: skip
    assert cis.parse_flags(["etcd", "--client-cert-auth", "--name", "cp1"]) == {
        "client-cert-auth": "true",
        "name": "cp1",
    }
    assert cs.mirror_pods(Snapshot(kube={"Pod": [mirror("etcd", "cp1", {"a": "1"})]}), "etcd") == {
        "cp1": ["etcd", "--a=1"]
    }


def test_the_expected_warnings_rows_are_what_the_checks_say() -> None:
    """docs/checks.md "Expected on a new cluster" lists this layer's warnings on a default cluster, word for word."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "checks.md").read_text(encoding="utf-8")
    section = text.split("## Expected on a new cluster")[1].split("\n## ")[0]
    rows = set(re.findall(r"^\| `(S[\d.]+-[\w-]+)` \| warn \| (.+?) \|", section, re.M))
    # the kubelet's (host facts): kubeadm 1.36.5's recorded kubelet config on a node named as its hostname
    from tests.unit.diagnose import test_security_kubelet as tk

    plain = tk.kubelet_argv('KUBELET_KUBEADM_ARGS="--node-ip=192.0.2.1"\n')
    kubelet = {(f.id, f.summary) for f in tk.run({"cp1": tk.host(argv=plain)}) if f.status == "warn"}
    assert rows == {(f.id, f.summary) for f in findings(snapshot()) if f.status == "warn"} | kubelet
    assert {r[0] for r in rows} == LEFT | {"S4.2.9-kubelet-tls-cert-file", "S4.2.14-kubelet-seccomp-default"}


def test_the_pods_are_scanned_once_for_all_the_checks() -> None:
    """At 1,000 nodes the Pod list is ~30,000 items: the 40 checks share one scan of it."""

    class Counted(list):  # type: ignore[type-arg]
        scans = 0

        def __iter__(self):  # type: ignore[no-untyped-def]
            Counted.scans += 1
            return super().__iter__()

    snap = snapshot()
    snap.kube["Pod"] = Counted(snap.kube["Pod"])
    assert not [f for f in findings(snap) if f.status == "fail"]
    assert Counted.scans == 1
