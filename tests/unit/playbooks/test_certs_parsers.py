"""playbooks/module_utils/gpustack_certs.py: certificate expiry as the facts module records it.

``data/kubeadm-1.36.5-check-expiration.json`` is what the real kubeadm 1.36.5 (tests/realbin, built from
k8s.io/kubernetes) printed for ``certs check-expiration -o json`` after ``init phase certs all`` and
``init phase kubeconfig all`` with ``certificateValidityPeriod: 10m0s`` (2026-11-29, this machine)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

DATA = Path(__file__).parent / "data" / "kubeadm-1.36.5-check-expiration.json"


def test_real_kubeadm_output(certs_utils: ModuleType) -> None:
    parsed = certs_utils.parse_check_expiration(0, DATA.read_text())
    assert parsed["error"] is None
    by_name = {c["name"]: c for c in parsed["certificates"]}
    assert {"admin.conf", "super-admin.conf", "apiserver", "etcd-server", "scheduler.conf"} <= set(by_name)
    assert by_name["apiserver"] == {"name": "apiserver", "expires": "2026-11-29T01:36:57Z", "ca": "ca",
                                    "authority": False, "external": False, "missing": False}  # fmt: skip
    assert by_name["etcd-peer"]["ca"] == "etcd-ca"
    cas = {c["name"] for c in parsed["certificates"] if c["authority"]}
    assert cas == {"ca", "etcd-ca", "front-proxy-ca"}
    assert by_name["ca"]["expires"] == "2036-11-26T01:26:57Z"


def test_missing_and_external_entries(certs_utils: ModuleType) -> None:
    doc = json.loads(DATA.read_text())
    doc["certificates"][0]["missing"] = True
    doc["certificates"][1]["externallyManaged"] = True
    parsed = certs_utils.parse_check_expiration(0, json.dumps(doc))
    first, second = parsed["certificates"][:2]
    assert first["missing"] and first["expires"] is None
    assert second["external"] and second["expires"]


def test_failures_are_reported_not_raised(certs_utils: ModuleType) -> None:
    failed = certs_utils.parse_check_expiration(1, "", "error execution phase: open /etc/kubernetes/pki/ca.crt: "
                                                    "permission denied\n")  # fmt: skip
    assert failed["certificates"] == [] and "exited 1" in failed["error"] and "permission denied" in failed["error"]
    assert "did not run" in certs_utils.parse_check_expiration(None, "")["error"]
    assert "no JSON" in certs_utils.parse_check_expiration(0, "CERTIFICATE  EXPIRES")["error"]
    assert "not a CertificateExpirationInfo" in certs_utils.parse_check_expiration(0, '{"kind": "Status"}')["error"]


def test_openssl_enddate(certs_utils: ModuleType) -> None:
    assert certs_utils.parse_openssl_enddate(0, "notAfter=Nov 29 01:36:57 2027 GMT\n") == "2027-11-29T01:36:57Z"
    assert certs_utils.parse_openssl_enddate(0, "notAfter=Dec  1 00:00:00 2027 GMT") == "2027-12-01T00:00:00Z"
    assert certs_utils.parse_openssl_enddate(1, "notAfter=Dec  1 00:00:00 2027 GMT") is None
    assert certs_utils.parse_openssl_enddate(0, "unable to load certificate") is None


def test_collect_on_a_control_plane_and_on_a_worker(certs_utils: ModuleType) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(list(argv))
        if argv[0].endswith("kubeadm"):
            return 0, DATA.read_text(), ""
        return 0, "notAfter=Nov 29 01:36:57 2027 GMT\n", ""

    def which(name: str) -> str:
        return f"/usr/bin/{name}"

    control_plane = {certs_utils.KUBEADM_PKI_APISERVER, "/var/lib/kubelet/pki/kubelet.crt"}
    got = certs_utils.collect_certificates(run, which, control_plane.__contains__)
    assert len(got["kubeadm"]["certificates"]) == 14 and got["kubeadm"]["error"] is None
    assert got["kubelet_serving"] == {"path": "/var/lib/kubelet/pki/kubelet.crt", "expires": "2027-11-29T01:36:57Z",
                                      "error": None}  # fmt: skip
    assert calls[0] == ["/usr/bin/kubeadm", "certs", "check-expiration", "-o", "json"]
    # a worker has the cluster CA (kubeadm join writes ca.crt) but no API server certificate
    worker = {"/etc/kubernetes/pki/ca.crt", "/var/lib/kubelet/pki/kubelet-server-current.pem",
              "/var/lib/kubelet/pki/kubelet.crt"}  # fmt: skip
    got = certs_utils.collect_certificates(run, which, worker.__contains__)
    assert got["kubeadm"] is None
    assert got["kubelet_serving"]["path"].endswith("kubelet-server-current.pem"), "the rotated one comes first"
    bare = certs_utils.collect_certificates(run, lambda name: None, control_plane.__contains__)
    assert bare["kubeadm"]["error"] == "kubeadm is not installed"
    assert bare["kubelet_serving"]["error"] == "openssl is not installed"
    assert certs_utils.collect_certificates(run, which, set().__contains__) == {
        "kubeadm": None,
        "kubelet_serving": None,
    }
