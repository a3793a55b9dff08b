"""Certificate expiry (H15, H16, K11): what stops a kubeadm cluster on day 366 (docs/lifecycle.md, "Day 365").

- H15: every certificate and kubeconfig kubeadm manages on each control plane, and the CAs, read on the host
  with ``kubeadm certs check-expiration -o json`` (host facts ``certificates.kubeadm``). It needs no API server:
  when the API server already refuses an expired certificate, doctor still reaches the hosts over SSH.
- H16: the kubelet's serving certificate on every node (host facts ``certificates.kubelet_serving``): near expiry, or
  self-signed (``kubelet.crt``: a kubelet without ``serverTLSBootstrap``, which the API server cannot verify).
- K12: kubelet-serving CSRs left pending (gpustack/cluster/kubelet_csr.py approves the nodes' own; a pending one is
  a kubelet whose certificate is not issued or not renewed, or a request for names that are not its node's).
- K11: the client certificate of the kubeconfig this command uses (gpustack's copy of admin.conf expires with the
  cluster's own; kubeadm's renewal renews it on the host, and the copy here is replaced from there).

Thresholds: ``certificates.warn_days`` / ``fail_days`` of gpustack.yaml (``snap.settings``), judged against the
time collection started (``snap.collected_at``), so a saved snapshot is judged the same when replayed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from gpustack.checks.certs import APPROVE_FIX, RENEW_FIX, Judged, judge, parse_iso, pending_serving
from gpustack.checks.model import Finding, Status
from gpustack.diagnose.objects import items
from gpustack.diagnose.registry import register
from gpustack.diagnose.snapshot import Snapshot

DEFAULT_WARN, DEFAULT_FAIL = 90, 30
CA_FIX = (
    "the cluster CA cannot be renewed in place: follow kubeadm's manual CA rotation "
    "(https://kubernetes.io/docs/tasks/tls/manual-rotation-of-ca-certificates/) before it expires"
)
KUBELET_SELF_SIGNED_FIX = (
    "on the node: sudo rm /var/lib/kubelet/pki/kubelet.crt /var/lib/kubelet/pki/kubelet.key && "
    "sudo systemctl restart kubelet   # the kubelet writes a new self-signed serving certificate at start"
)
#: a cluster made before gpustack turned serverTLSBootstrap on (kubeadm reads the kubelet configuration only at
#: init and join): kubeadm's own procedure for an existing cluster (kubeadm-certs.md, "Enabling signed kubelet
#: serving certificates"), then gpustack's approval; docs/lifecycle.md, "Kubelet serving certificates"
KUBELET_BOOTSTRAP_FIX = (
    "self-signed: the API server cannot verify this kubelet. Set serverTLSBootstrap: true in the kubelet-config "
    "ConfigMap (kube-system) and in /var/lib/kubelet/config.yaml on every node, restart the kubelets, then: "
    'gpustack certs approve   (docs/lifecycle.md, "Kubelet serving certificates")'
)
SHOWN = 4


def _now(snap: Snapshot) -> datetime:
    return parse_iso(snap.collected_at) or datetime.now(timezone.utc)


def _limits(snap: Snapshot) -> tuple[int, int]:
    certs = snap.settings.get("certificates") if isinstance(snap.settings, Mapping) else None
    certs = certs if isinstance(certs, Mapping) else {}
    return int(certs.get("warn_days", DEFAULT_WARN)), int(certs.get("fail_days", DEFAULT_FAIL))


def _judge(snap: Snapshot, expires: datetime) -> Judged:
    warn, fail = _limits(snap)
    return judge(expires, _now(snap), warn_days=warn, fail_days=fail)


def _hosts(snap: Snapshot) -> dict[str, Mapping[str, Any]]:
    return {name: facts for name, facts in sorted(snap.hosts.items()) if isinstance(facts, Mapping)}


def _certs(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    value = facts.get("certificates")
    return value if isinstance(value, Mapping) else {}


@register("H15-certificates", "host", title="control-plane certificates and kubeconfigs not near expiry",
          reads="host facts: certificates.kubeadm (kubeadm certs check-expiration -o json, on each control plane)")  # fmt: skip
def control_plane_certificates(snap: Snapshot) -> list[Finding]:
    hosts = _hosts(snap)
    if not hosts:
        return [Finding("H15-certificates", "host", "skip", "certificate expiry: no host facts collected "
                        "(see H00-host-facts)")]  # fmt: skip
    out: list[Finding] = []
    for name, facts in hosts.items():
        kubeadm = _certs(facts).get("kubeadm")
        if not isinstance(kubeadm, Mapping):
            continue  # not a control plane (no /etc/kubernetes/pki/apiserver.crt), or facts from an older gpustack
        out.append(_one_control_plane(snap, name, kubeadm))
    if not out:
        return [Finding("H15-certificates", "host", "skip", "no control plane with kubeadm's PKI among the nodes read")]
    return out


def _one_control_plane(snap: Snapshot, name: str, kubeadm: Mapping[str, Any]) -> Finding:
    if kubeadm.get("error"):
        return Finding("H15-certificates", "host", "warn", "certificate expiry not read", host=name,
                       evidence=str(kubeadm["error"]), fix="sudo kubeadm certs check-expiration   # on the node")  # fmt: skip
    leaves: list[tuple[Judged, str]] = []
    authorities: list[tuple[Judged, str]] = []
    missing: list[str] = []
    for entry in kubeadm.get("certificates") or []:
        if not isinstance(entry, Mapping):
            continue
        expires = parse_iso(entry.get("expires"))
        if entry.get("missing") or expires is None:
            missing.append(str(entry.get("name")))
            continue
        if entry.get("external"):
            continue  # signed by an external CA: kubeadm does not renew it, nor does gpustack
        (authorities if entry.get("authority") else leaves).append((_judge(snap, expires), str(entry.get("name"))))
    if not leaves and not authorities:
        return Finding("H15-certificates", "host", "warn", "kubeadm reported no certificate", host=name,
                       evidence=", ".join(missing) or "empty check-expiration output")  # fmt: skip
    leaves.sort(key=lambda jn: jn[0].days)
    authorities.sort(key=lambda jn: jn[0].days)
    due = [(j, n) for j, n in leaves if j.status != "pass"]
    due_ca = [(j, n) for j, n in authorities if j.status != "pass"]
    shown = [f"{n} {j.text}" for j, n in due[:SHOWN]] + [f"CA {n} {j.text}" for j, n in due_ca]
    if missing:
        shown.append("missing: " + ", ".join(missing))
    if not due and not due_ca:
        first_j, first_n = (leaves or authorities)[0]
        return Finding("H15-certificates", "host", "pass", f"certificates: the first {first_j.text}", host=name,
                       evidence="; ".join([f"{first_n} {first_j.text}", *shown]))  # fmt: skip
    status: Status = "fail" if any(j.status == "fail" for j, _ in due + due_ca) else "warn"
    warn, fail = _limits(snap)
    parts = []
    if due:
        within = fail if due[0][0].status == "fail" else warn
        parts.append(f"{len(due)} of {len(leaves)} certificates expire within {within} days or have expired")
    if due_ca:
        parts.append(f"CA {due_ca[0][1]} {due_ca[0][0].text}")
    fix = "\n".join(([RENEW_FIX] if due else []) + ([CA_FIX] if due_ca else []))
    return Finding("H15-certificates", "host", status, "; ".join(parts), host=name, evidence="; ".join(shown), fix=fix)


@register("H16-kubelet-serving-certificate", "host", title="the kubelet's serving certificate not near expiry",
          reads="host facts: certificates.kubelet_serving (openssl x509 -enddate)")  # fmt: skip
def kubelet_serving_certificate(snap: Snapshot) -> list[Finding]:
    hosts = _hosts(snap)
    if not hosts:
        return [Finding("H16-kubelet-serving-certificate", "host", "skip",
                        "kubelet serving certificates: no host facts collected (see H00-host-facts)")]  # fmt: skip
    out = []
    for name, facts in hosts.items():
        serving = _certs(facts).get("kubelet_serving")
        if not isinstance(serving, Mapping):
            continue  # no kubelet yet
        expires = parse_iso(serving.get("expires"))
        path = str(serving.get("path") or "")
        if expires is None:
            out.append(Finding("H16-kubelet-serving-certificate", "host", "warn", "kubelet serving certificate not read",
                               host=name, evidence=f"{path}: {serving.get('error') or 'no date'}"))  # fmt: skip
            continue
        j = _judge(snap, expires)
        rotated = path.endswith("kubelet-server-current.pem")
        if j.status == "pass" and not rotated:
            out.append(Finding("H16-kubelet-serving-certificate", "host", "warn",
                               f"kubelet serving certificate self-signed (not verifiable), {j.text}", host=name,
                               evidence=path, fix=KUBELET_BOOTSTRAP_FIX))  # fmt: skip
            continue
        fix = "" if j.status == "pass" else (
            "the kubelet renews it itself (serverTLSBootstrap): approve its pending CSR: gpustack certs approve"
            if rotated else KUBELET_SELF_SIGNED_FIX)  # fmt: skip
        out.append(Finding("H16-kubelet-serving-certificate", "host", j.status, f"kubelet serving certificate {j.text}",
                           host=name, evidence=path, fix=fix))  # fmt: skip
    return out or [Finding("H16-kubelet-serving-certificate", "host", "skip", "no kubelet serving certificate found")]


@register("K11-admin-kubeconfig-certificate", "kubernetes", title="this machine's kubeconfig certificate not near expiry",
          reads="the kubeconfig's client certificate (client-certificate-data)")  # fmt: skip
def admin_kubeconfig_certificate(snap: Snapshot) -> list[Finding]:
    target = snap.target if isinstance(snap.target, Mapping) else {}
    if not target:
        return [Finding("K11-admin-kubeconfig-certificate", "kubernetes", "skip", "no kubeconfig in use")]
    files = ", ".join(str(f) for f in target.get("kubeconfig") or [])
    expires = parse_iso(target.get("client_certificate_expires"))
    if expires is None:
        return [Finding("K11-admin-kubeconfig-certificate", "kubernetes", "skip",
                        "the kubeconfig's user has no client certificate (token or exec credentials)",
                        evidence=files)]  # fmt: skip
    j = _judge(snap, expires)
    fix = ""
    if j.status != "pass":
        fix = (
            RENEW_FIX
            if target.get("gpustack_cluster")
            else ("ask the cluster's administrator for a new kubeconfig (kubeadm kubeconfig user --client-name NAME)")
        )
    return [Finding("K11-admin-kubeconfig-certificate", "kubernetes", j.status,
                    f"kubeconfig client certificate {j.text}", evidence=files, fix=fix)]  # fmt: skip


@register("K12-kubelet-serving-csr", "kubernetes", title="no kubelet serving-certificate request left pending",
          reads="certificatesigningrequests (signer kubernetes.io/kubelet-serving)",
          needs=("CertificateSigningRequest",))  # fmt: skip
def kubelet_serving_csrs(snap: Snapshot) -> list[Finding]:
    if "kubernetes:CertificateSigningRequest" in snap.errors:
        return [Finding("K12-kubelet-serving-csr", "kubernetes", "skip", "certificate signing requests not readable",
                        evidence=snap.errors["kubernetes:CertificateSigningRequest"])]  # fmt: skip
    pending = pending_serving(items(snap, "CertificateSigningRequest"))
    if not pending:
        return [
            Finding("K12-kubelet-serving-csr", "kubernetes", "pass", "no kubelet serving-certificate request pending")
        ]
    now = _now(snap)
    shown = []
    for csr in pending[:SHOWN]:
        meta = csr.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        created = parse_iso(meta.get("creationTimestamp"))
        age = f", {int((now - created).total_seconds() // 60)} min old" if created else ""
        shown.append(f"{meta.get('name')} from {csr['spec'].get('username')}{age}")
    return [Finding("K12-kubelet-serving-csr", "kubernetes", "warn",
                    f"{len(pending)} kubelet serving-certificate request(s) pending: those kubelets serve no "
                    "certificate, or an expiring one (logs, exec and metrics fail once it ends)",
                    evidence="; ".join(shown),
                    fix=f"{APPROVE_FIX}   (approves the nodes' own; names why it leaves any other pending)")]  # fmt: skip
