"""The kubelets' serving certificates: approving their ``kubernetes.io/kubelet-serving`` CSRs (issue 27).

gpustack's kubelets run with ``serverTLSBootstrap: true`` (gpustack/templates/kubeadm-config.yaml.j2): instead of a
self-signed certificate each kubelet asks the cluster CA for one through a CertificateSigningRequest, at its start
and again at 70-90% of the certificate's life (``rotateCertificates``). kube-controller-manager's ``csrsigning``
controller signs such a request once it is approved, but nothing in Kubernetes approves it (kubernetes/website
``content/en/docs/tasks/administer-cluster/kubeadm/kubeadm-certs.md``, "Enabling signed kubelet serving
certificates": the CSRs "cannot be automatically approved ... This will require action from the user or a third
party controller"; and "Such a controller is not a secure mechanism unless it not only verifies the CommonName in
the CSR but also verifies the requested IPs and domain names"). :func:`judge` is that verification:

- the requester is a node (``spec.username`` ``system:node:<name>``, ``spec.groups`` with ``system:nodes``), and
  ``<name>`` is a node of gpustack.yaml with a Node object;
- the request is what the signer accepts (kubernetes/website
  ``content/en/docs/reference/access-authn-authz/certificate-signing-requests.md``, "Kubernetes signers",
  ``kubernetes.io/kubelet-serving``): subject organization exactly ``["system:nodes"]``, common name
  ``system:node:<name>`` -- the requester's own name; no email or URI SAN, at least one DNS or IP SAN; usages
  ``digital signature`` and ``server auth``, with ``key encipherment`` or without; a valid self-signature;
- the SANs are only that node's: each DNS name one of the Node object's ``Hostname``/``InternalDNS``/``ExternalDNS``
  addresses, each IP one of its IP addresses *and* the node's address in gpustack.yaml (the kubelet reports its own
  Node status, so the inventory is the part it cannot change).

A request that fails stays pending (never denied: a kubelet whose Node is not yet updated asks again), and is named
with the reason; doctor K12 reports what stays pending. Approval is ``PUT .../certificatesigningrequests/NAME/approval``
with an ``Approved`` condition (``kubectl certificate approve`` does the same).

Where it runs (docs/decisions.md, "Kubelet serving certificates"): the ``kubelet-certs`` stage of ``up`` and
``node add``, and ``gpustack certs approve`` (on demand, or scheduled on this machine).
"""

from __future__ import annotations

import base64
import ipaddress
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from gpustack.checks.certs import KUBELET_SERVING_SIGNER, pending_serving
from gpustack.errors import StageError

if TYPE_CHECKING:
    from gpustack.config.model import Config
    from gpustack.engine.steps import StageSummary, StepContext
    from gpustack.runners.kube import Kube

Obj = dict[str, Any]

SIGNER = KUBELET_SERVING_SIGNER
CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
NODE_PREFIX = "system:node:"
NODES_GROUP = "system:nodes"
#: the key usages the kubelet-serving signer permits (certificate-signing-requests.md, "Kubernetes signers")
USAGES = (
    frozenset({"digital signature", "server auth"}),
    frozenset({"key encipherment", "digital signature", "server auth"}),
)
DNS_TYPES = ("Hostname", "InternalDNS", "ExternalDNS")
IP_TYPES = ("InternalIP", "ExternalIP")
REASON = "GpustackApproved"


@dataclass(frozen=True)
class Verdict:
    """One pending kubelet-serving CSR: its name, the node it claims, approved or not and why."""

    csr: str
    node: str
    approve: bool
    reason: str


@dataclass
class Approval:
    approved: list[Verdict] = field(default_factory=list)
    refused: list[Verdict] = field(default_factory=list)
    #: False when discovery says the server serves no certificates.k8s.io/v1 (every real API server does; the fake
    #: API server of the unit tests and the test bed does not): nothing to approve there
    served: bool = True


def _addresses(node: Mapping[str, Any], types: tuple[str, ...]) -> set[str]:
    found = (node.get("status") or {}).get("addresses") or []
    return {str(a.get("address")) for a in found if isinstance(a, Mapping) and a.get("type") in types}


def _ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def _parse(request: str) -> Any:
    from cryptography import x509

    try:
        return x509.load_pem_x509_csr(base64.b64decode(request))
    except (ValueError, TypeError):
        return None


def _subject(req: Any) -> tuple[list[str], list[str]]:
    from cryptography.x509.oid import NameOID

    cns = [str(a.value) for a in req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [str(a.value) for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return cns, orgs


def _sans(req: Any) -> tuple[list[str], list[str], int]:
    """DNS names, IPs, and the count of email/URI names in the request's subjectAltName extension."""
    from cryptography import x509

    try:
        ext = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], [], 0
    dns = [str(n) for n in ext.get_values_for_type(x509.DNSName)]
    ips = [str(n) for n in ext.get_values_for_type(x509.IPAddress)]
    other = len(ext.get_values_for_type(x509.RFC822Name)) + len(ext.get_values_for_type(x509.UniformResourceIdentifier))
    return dns, ips, other


def judge(csr: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], inventory: Mapping[str, str]) -> Verdict:
    """Approve ``csr`` (a pending kubelet-serving CSR) or not. ``nodes``: the Node objects by name; ``inventory``:
    gpustack.yaml's node name -> address."""
    name = str((csr.get("metadata") or {}).get("name") or "")
    spec = csr.get("spec") or {}
    user = str(spec.get("username") or "")
    node = user[len(NODE_PREFIX) :] if user.startswith(NODE_PREFIX) else ""

    def no(reason: str) -> Verdict:
        return Verdict(name, node or user, False, reason)

    if spec.get("signerName") != SIGNER:
        return no(f"signer {spec.get('signerName')!r}, not {SIGNER}")
    if not node or NODES_GROUP not in (spec.get("groups") or []):
        return no(f"requested by {user or 'nobody'}, not a node (system:node:<name> in group system:nodes)")
    if node not in inventory:
        return no(f"node {node} is not in gpustack.yaml")
    if node not in nodes:
        return no(f"node {node} has no Node object")
    req = _parse(str(spec.get("request") or ""))
    if req is None:
        return no("spec.request is not a PEM certificate request")
    if not req.is_signature_valid:
        return no("the request's signature does not verify")
    cns, orgs = _subject(req)
    if cns != [f"{NODE_PREFIX}{node}"]:
        return no(f"common name {', '.join(cns) or 'none'}, not {NODE_PREFIX}{node} (the requester)")
    if orgs != [NODES_GROUP]:
        return no(f"organization {orgs}, not exactly [{NODES_GROUP!r}]")
    usages = frozenset(str(u) for u in spec.get("usages") or [])
    if usages not in USAGES:
        return no(f"usages {sorted(usages)}: a kubelet serving certificate has digital signature, server auth "
                  "(and key encipherment)")  # fmt: skip
    dns, ips, other = _sans(req)
    if other:
        return no("email or URI subject alternative names are not allowed")
    if not dns and not ips:
        return no("no DNS or IP subject alternative name")
    allowed_dns = _addresses(nodes[node], DNS_TYPES)
    foreign_dns = [d for d in dns if d not in allowed_dns]
    if foreign_dns:
        return no(f"DNS name(s) {', '.join(foreign_dns)} not among node {node}'s addresses "
                  f"({', '.join(sorted(allowed_dns)) or 'none'})")  # fmt: skip
    allowed_ips = {_ip(a) for a in _addresses(nodes[node], IP_TYPES)} & {_ip(inventory[node])}
    foreign_ips = [i for i in ips if _ip(i) not in allowed_ips]
    if foreign_ips:
        return no(f"IP(s) {', '.join(foreign_ips)} not node {node}'s address ({inventory[node]} in gpustack.yaml, "
                  "reported by its Node object)")  # fmt: skip
    return Verdict(name, node, True, f"{node}: DNS {', '.join(dns) or '-'}, IP {', '.join(ips) or '-'}")


def _approved(csr: Mapping[str, Any], verdict: Verdict) -> Obj:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": "Approved", "status": "True", "reason": REASON, "lastUpdateTime": now,
                 "message": f"gpustack: the requester, subject and addresses are node {verdict.node}'s"}  # fmt: skip
    status = dict(csr.get("status") or {})
    status["conditions"] = [*(status.get("conditions") or []), condition]
    return {**csr, "status": status}


def approve_pending(kube: Kube, cfg: Config) -> Approval:
    """Judge every pending kubelet-serving CSR; approve the ones that pass. Two LISTs, one PUT per approval."""
    if kube.resource("certificates.k8s.io/v1", "CertificateSigningRequest") is None:
        return Approval(served=False)
    csrs = kube.list_all(CSR_PATH, {"fieldSelector": f"spec.signerName={SIGNER}"})
    nodes = {str((n.get("metadata") or {}).get("name")): n for n in kube.list_all("/api/v1/nodes")}
    inventory = {n.name: n.address for n in cfg.nodes}
    out = Approval()
    for csr in pending_serving(csrs):
        verdict = judge(csr, nodes, inventory)
        if verdict.approve:
            kube.request("PUT", f"{CSR_PATH}/{verdict.csr}/approval", body=_approved(csr, verdict))
            out.approved.append(verdict)
        else:
            out.refused.append(verdict)
    return out


def describe(result: Approval) -> list[str]:
    lines = [f"approved {v.csr} ({v.reason})" for v in result.approved]
    lines += [f"left pending {v.csr} of {v.node}: {v.reason}" for v in result.refused]
    return lines


def kubelet_certs_step(ctx: StepContext) -> list[StageSummary]:
    """The ``kubelet-certs`` stage of ``up`` and ``node add``: approve the kubelets' pending serving CSRs through
    this machine's admin kubeconfig (a refused one fails nothing: doctor K12 names it)."""
    from gpustack.engine.steps import StageSummary
    from gpustack.paths import kubeconfig_path
    from gpustack.runners.kubeconfig import kube_from_file

    if ctx.opts.dry_run:
        return [StageSummary("kubelet-certs", "not run", 0.0, note="dry run")]
    kubeconfig = kubeconfig_path(ctx.cfg.cluster.name)
    if not kubeconfig.is_file():
        raise StageError(f"no admin kubeconfig at {kubeconfig}", stage="kubelet-certs",
                         hint="run the control-plane stage first: gpustack up --from control-plane")  # fmt: skip
    t0 = time.monotonic()
    result = approve_pending(kube_from_file(kubeconfig), ctx.cfg)
    for line in describe(result):
        ctx.console.print(f"  - {line}", markup=False)
    note = f"{len(result.approved)} approved" + (f", {len(result.refused)} left pending" if result.refused else "")
    if not result.served:
        note = "the API server serves no certificates.k8s.io/v1"
    status = "changed" if result.approved else "ok"
    return [StageSummary("kubelet-certs", status, round(time.monotonic() - t0, 2), changed=len(result.approved),
                         note=note)]  # fmt: skip
