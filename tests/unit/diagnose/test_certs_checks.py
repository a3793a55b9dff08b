"""H15 / H16 / K11: certificate expiry judged from host facts and the kubeconfig, against the snapshot's time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpustack.checks.certs import RENEW_FIX
from gpustack.diagnose import checks_certs as cc
from gpustack.diagnose.snapshot import Snapshot

REAL = Path(__file__).parents[1] / "playbooks" / "data" / "kubeadm-1.36.5-check-expiration.json"


def kubeadm_facts(leaf: str, ca: str = "2036-11-26T01:26:57Z", **overrides: Any) -> dict[str, Any]:
    """The facts module's record of the real kubeadm output, with every leaf expiring at ``leaf``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("certs_parsers", Path(__file__).parents[3] / "playbooks" /
                                                  "module_utils" / "gpustack_certs.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = json.loads(REAL.read_text())
    for entry in doc["certificates"]:
        entry["expirationDate"] = overrides.get(entry["name"], leaf)
    for entry in doc["certificateAuthorities"]:
        entry["expirationDate"] = ca
    return module.parse_check_expiration(0, json.dumps(doc))  # type: ignore[no-any-return]


def snap(hosts: dict[str, Any], *, now: str = "2026-11-29T12:00:00+00:00", warn: int = 90, fail: int = 30,
         target: dict[str, Any] | None = None, **more: Any) -> Snapshot:  # fmt: skip
    return Snapshot(hosts=hosts, collected_at=now, settings={"certificates": {"warn_days": warn, "fail_days": fail}},
                    target=target or {}, **more)  # fmt: skip


def cp(kubeadm: dict[str, Any] | None, serving: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"certificates": {"kubeadm": kubeadm, "kubelet_serving": serving}}


def test_a_fresh_cluster_passes_and_names_the_first_to_expire() -> None:
    facts = kubeadm_facts("2027-11-29T01:36:57Z", **{"apiserver": "2027-11-28T01:36:57Z"})
    (found,) = cc.control_plane_certificates(snap({"cp1": cp(facts), "w1": cp(None)}))
    assert found.status == "pass" and found.host == "cp1"
    assert "apiserver expires 2027-11-28" in found.evidence and "in 363 days" in found.summary


def test_warn_at_90_days_fail_at_30_and_when_expired() -> None:
    hosts = {
        "cp1": cp(kubeadm_facts("2027-02-01T00:00:00Z")),  # 63 days
        "cp2": cp(kubeadm_facts("2026-12-20T00:00:00Z")),  # 20 days
        "cp3": cp(kubeadm_facts("2027-11-01T00:00:00Z", **{"admin.conf": "2026-11-28T00:00:00Z"})),
    }
    by_host = {f.host: f for f in cc.control_plane_certificates(snap(hosts))}
    assert by_host["cp1"].status == "warn" and "11 of 11 certificates expire within 90 days" in by_host["cp1"].summary
    assert by_host["cp2"].status == "fail" and "within 30 days" in by_host["cp2"].summary
    assert by_host["cp3"].status == "fail" and "1 of 11" in by_host["cp3"].summary
    assert "admin.conf EXPIRED 2026-11-28 00:00 UTC (36 hours ago)" in by_host["cp3"].evidence
    for f in by_host.values():
        assert f.fix.startswith(RENEW_FIX)


def test_the_thresholds_come_from_the_settings() -> None:
    hosts = {"cp1": cp(kubeadm_facts("2027-02-01T00:00:00Z"))}  # 63 days
    assert cc.control_plane_certificates(snap(hosts, warn=60, fail=10))[0].status == "pass"
    assert cc.control_plane_certificates(snap(hosts, warn=100, fail=70))[0].status == "fail"


def test_an_expiring_ca_is_named_with_its_own_fix() -> None:
    hosts = {"cp1": cp(kubeadm_facts("2027-11-01T00:00:00Z", ca="2027-01-15T00:00:00Z"))}
    (found,) = cc.control_plane_certificates(snap(hosts))
    assert found.status == "warn" and found.summary.startswith("CA ca expires 2027-01-15")
    assert "manual-rotation-of-ca-certificates" in found.fix and "kubeadm certs renew" not in found.fix


def test_external_and_missing_and_unreadable() -> None:
    external = kubeadm_facts("2026-12-01T00:00:00Z")
    for entry in external["certificates"]:
        entry["external"] = not entry["authority"]
    assert cc.control_plane_certificates(snap({"cp1": cp(external)}))[0].status == "pass"
    error = {"certificates": [], "error": "kubeadm certs check-expiration exited 1: permission denied"}
    (found,) = cc.control_plane_certificates(snap({"cp1": cp(error)}))
    assert found.status == "warn" and "permission denied" in found.evidence
    assert cc.control_plane_certificates(snap({}))[0].status == "skip"
    assert cc.control_plane_certificates(snap({"w1": cp(None)}))[0].status == "skip"


def test_kubelet_serving_certificate() -> None:
    hosts = {
        "w1": cp(None, {"path": "/var/lib/kubelet/pki/kubelet.crt", "expires": "2026-12-10T00:00:00Z", "error": None}),
        "w2": cp(
            None,
            {
                "path": "/var/lib/kubelet/pki/kubelet-server-current.pem",
                "expires": "2027-02-10T00:00:00Z",
                "error": None,
            },
        ),
        "w3": cp(None, {"path": "/var/lib/kubelet/pki/kubelet.crt", "expires": "2027-12-10T00:00:00Z", "error": None}),
        "w4": cp(None, {"path": "/var/lib/kubelet/pki/kubelet.crt", "expires": None, "error": "not a certificate"}),
    }
    by_host = {f.host: f for f in cc.kubelet_serving_certificate(snap(hosts))}
    assert by_host["w1"].status == "fail" and "rm /var/lib/kubelet/pki/kubelet.crt" in by_host["w1"].fix
    assert by_host["w2"].status == "warn" and "gpustack certs approve" in by_host["w2"].fix
    # self-signed, far from expiry: the API server cannot verify it (a cluster made before serverTLSBootstrap)
    assert by_host["w3"].status == "warn" and "self-signed" in by_host["w3"].summary
    assert "serverTLSBootstrap: true" in by_host["w3"].fix and "gpustack certs approve" in by_host["w3"].fix
    assert by_host["w4"].status == "warn" and "not a certificate" in by_host["w4"].evidence


def test_the_kubeconfig_certificate() -> None:
    own = {
        "kubeconfig": ["/s/admin.conf"],
        "gpustack_cluster": True,
        "client_certificate_expires": "2026-12-05T00:00:00+00:00",
    }
    (found,) = cc.admin_kubeconfig_certificate(snap({}, target=own))
    assert found.status == "fail" and found.fix.startswith(RENEW_FIX) and "/s/admin.conf" in found.evidence
    other = dict(own, gpustack_cluster=False)
    assert "administrator" in cc.admin_kubeconfig_certificate(snap({}, target=other))[0].fix
    token = dict(own, client_certificate_expires="")
    assert cc.admin_kubeconfig_certificate(snap({}, target=token))[0].status == "skip"
    fresh = dict(own, client_certificate_expires="2027-11-20T00:00:00+00:00")
    assert cc.admin_kubeconfig_certificate(snap({}, target=fresh))[0].status == "pass"
    assert cc.admin_kubeconfig_certificate(snap({}))[0].status == "skip"


def test_a_snapshot_round_trips_its_time_and_settings() -> None:
    s = snap({"cp1": cp(kubeadm_facts("2027-02-01T00:00:00Z"))})
    again = Snapshot.from_json(json.loads(json.dumps(s.to_json())))
    assert cc.control_plane_certificates(again)[0].status == "warn"


def test_pending_kubelet_serving_requests() -> None:
    def csr(name: str, signer: str, conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
        return {"metadata": {"name": name, "creationTimestamp": "2026-11-29T11:00:00Z"},
                "spec": {"signerName": signer, "username": f"system:node:{name}"},
                "status": {"conditions": conditions or []}}  # fmt: skip

    serving = "kubernetes.io/kubelet-serving"
    items = [csr("w1", serving), csr("w2", serving, [{"type": "Approved"}]),
             csr("w3", "kubernetes.io/kube-apiserver-client-kubelet")]  # fmt: skip
    (found,) = cc.kubelet_serving_csrs(snap({}, kube={"CertificateSigningRequest": items}))
    assert found.status == "warn" and found.summary.startswith("1 kubelet serving-certificate request(s) pending")
    assert found.evidence == "w1 from system:node:w1, 60 min old" and found.fix.startswith("gpustack certs approve")
    (clean,) = cc.kubelet_serving_csrs(snap({}, kube={"CertificateSigningRequest": items[1:]}))
    assert clean.status == "pass"
    refused = snap({}, errors={"kubernetes:CertificateSigningRequest": "403 forbidden"})
    assert cc.kubelet_serving_csrs(refused)[0].status == "skip"
