"""Certificate expiry on a node, for the gpustack_facts module: what kubeadm manages on a control plane and the
kubelet's serving certificate on every node. Standard library only (the target's python3, 3.8 or newer).

- ``kubeadm certs check-expiration -o json`` prints an ``output.kubeadm.k8s.io/v1alpha3``
  ``CertificateExpirationInfo`` (kubernetes ``cmd/kubeadm/app/apis/output/v1alpha3/types.go``:
  ``certificates`` and ``certificateAuthorities``, each entry ``name``, ``expirationDate`` (RFC 3339),
  ``residualTime``, ``externallyManaged``, ``missing``; certificates also ``caName``). It covers the
  control-plane leaf certificates and the kubeconfigs kubeadm writes (admin.conf, super-admin.conf,
  controller-manager.conf, scheduler.conf) and the CAs.
- The kubelet's serving certificate is ``/var/lib/kubelet/pki/kubelet-server-current.pem`` when it is signed by
  the cluster CA (``serverTLSBootstrap``), else the self-signed ``kubelet.crt`` the kubelet writes at its first
  start (kubernetes ``pkg/kubelet/certificate``; ``cmd/kubelet/app/server.go``); read with
  ``openssl x509 -noout -enddate``.

:func:`collect_certificates` does the I/O through the callables it is given; the parsers are pure.
"""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the target may run Python 3.8
    from collections.abc import Callable, Sequence

    Run = Callable[[Sequence[str]], tuple[int | None, str, str]]

#: a control plane: workers have the cluster CA too (kubeadm join writes ca.crt), never the API server certificate
KUBEADM_PKI_APISERVER = "/etc/kubernetes/pki/apiserver.crt"
KUBELET_SERVING = (
    "/var/lib/kubelet/pki/kubelet-server-current.pem",  # signed by the cluster CA, rotated by the kubelet
    "/var/lib/kubelet/pki/kubelet.crt",  # self-signed at the kubelet's first start, never renewed
)
MAX_ERROR = 300


def _iso(text: str) -> str | None:
    """An RFC 3339 time as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC), or None."""
    try:
        when = datetime.datetime.strptime(text.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return None
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(raw: object, authority: bool) -> dict | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    return {
        "name": raw["name"],
        "expires": None if raw.get("missing") else _iso(str(raw.get("expirationDate", ""))),
        "ca": str(raw.get("caName") or "") if not authority else "",
        "authority": authority,
        "external": bool(raw.get("externallyManaged")),
        "missing": bool(raw.get("missing")),
    }


def parse_check_expiration(rc: int | None, out: str, err: str = "") -> dict:
    """``kubeadm certs check-expiration -o json`` -> ``{"certificates": [...], "error": str | None}``; each entry
    ``name``, ``expires`` (ISO UTC, None when missing), ``ca``, ``authority`` (a CA), ``external``, ``missing``."""
    if rc is None:
        return {"certificates": [], "error": "kubeadm certs check-expiration did not run"}
    if rc != 0:
        detail = " ".join((err or out).split())[:MAX_ERROR]
        return {"certificates": [], "error": f"kubeadm certs check-expiration exited {rc}: {detail}"}
    try:
        doc = json.loads(out)
    except ValueError:
        return {"certificates": [], "error": "kubeadm certs check-expiration printed no JSON"}
    if not isinstance(doc, dict) or doc.get("kind") != "CertificateExpirationInfo":
        return {"certificates": [], "error": "kubeadm certs check-expiration: not a CertificateExpirationInfo"}
    entries = [_entry(c, False) for c in doc.get("certificates") or []]
    entries += [_entry(c, True) for c in doc.get("certificateAuthorities") or []]
    return {"certificates": [e for e in entries if e is not None], "error": None}


def parse_openssl_enddate(rc: int | None, out: str) -> str | None:
    """``openssl x509 -noout -enddate`` (``notAfter=Nov 29 01:36:57 2027 GMT``) -> ISO UTC, or None."""
    if rc != 0:
        return None
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "notAfter":
            try:
                when = datetime.datetime.strptime(value.strip(), "%b %d %H:%M:%S %Y GMT")
            except ValueError:
                return None
            return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return None


def collect_certificates(run: Run, which: Callable[[str], str | None], exists: Callable[[str], bool]) -> dict:
    """What expires on this node. ``run(argv) -> (rc, stdout, stderr)``, ``which(name)``, ``exists(path)``.

    ``kubeadm``: the check-expiration result on a control plane (``/etc/kubernetes/pki/apiserver.crt`` present), None
    elsewhere; ``kubelet_serving``: ``{"path", "expires", "error"}`` of the first serving certificate found, None
    when the node has none."""
    kubeadm = None
    if exists(KUBEADM_PKI_APISERVER):
        binary = which("kubeadm")
        if binary is None:
            kubeadm = {"certificates": [], "error": "kubeadm is not installed"}
        else:
            kubeadm = parse_check_expiration(*run([binary, "certs", "check-expiration", "-o", "json"]))
    serving = None
    for path in KUBELET_SERVING:
        if exists(path):
            openssl = which("openssl")
            if openssl is None:
                serving = {"path": path, "expires": None, "error": "openssl is not installed"}
            else:
                rc, out, _ = run([openssl, "x509", "-noout", "-enddate", "-in", path])
                expires = parse_openssl_enddate(rc, out)
                serving = {"path": path, "expires": expires, "error": None if expires else "not a certificate"}
            break
    return {"kubeadm": kubeadm, "kubelet_serving": serving}
