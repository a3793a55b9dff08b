"""Certificate expiry judged against the ``certificates`` settings, and the renewal doctor names as the fix.

What kubeadm signs lives ``certificates.validity`` (kubeadm's default: one year) and is renewed only by
``kubeadm certs renew`` (or ``kubeadm upgrade apply``, which renews unless told not to): the control-plane leaf
certificates, admin.conf and the other kubeconfigs kubeadm writes, and therefore the copy of admin.conf gpustack
keeps on this machine. doctor reads every one on the hosts (``H15-certificates``, from
``kubeadm certs check-expiration``); what needs no SSH is read by :mod:`gpustack.runners.tls` (this machine's
kubeconfig, the certificate each API server serves), for ``status`` and ``K11-admin-kubeconfig-certificate``.

The judgement (:func:`judge`) is pure: ``fail`` when expired or within ``fail_days``, ``warn`` within
``warn_days``, else ``pass``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

Verdict = Literal["pass", "warn", "fail"]
#: what renews them: `gpustack certs renew` (gpustack/commands/certs_renew.py) runs kubeadm's documented renewal
#: (kubernetes/website content/en/docs/tasks/administer-cluster/kubeadm/kubeadm-certs.md, "Manual certificate
#: renewal") on each control plane one at a time, restarts the control-plane pods, waits until the API server serves
#: the new certificate and fetches the admin kubeconfig again
RENEW_FIX = (
    "gpustack certs renew   (every control plane, one at a time; then this machine's admin kubeconfig is fetched again)"
)


@dataclass(frozen=True)
class Judged:
    status: Verdict
    days: float  # days left (negative: expired that long ago)
    text: str  # "expires 2027-11-28 (364 days)" / "EXPIRED 2026-11-28 (3 days ago)"


def judge(expires: datetime, now: datetime, *, warn_days: int, fail_days: int) -> Judged:
    days = (expires - now).total_seconds() / 86400
    day = expires.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if days <= 0:
        ago = -days
        return Judged("fail", days, f"EXPIRED {day} ({_span(ago)} ago)")
    status: Verdict = "fail" if days <= fail_days else "warn" if days <= warn_days else "pass"
    return Judged(status, days, f"expires {day} (in {_span(days)})")


def _span(days: float) -> str:
    if days >= 2:
        return f"{int(days)} days"
    hours = days * 24
    return f"{hours:.0f} hours" if hours >= 2 else f"{hours * 60:.0f} minutes"


def parse_iso(text: object) -> datetime | None:
    """``2027-11-28T01:36:57Z`` (what the facts module records) -> an aware datetime, or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


#: the kubelets' serving certificates: their CSRs' signer (gpustack/cluster/kubelet_csr.py approves them) and the
#: command that approves the pending ones
KUBELET_SERVING_SIGNER = "kubernetes.io/kubelet-serving"
APPROVE_FIX = "gpustack certs approve"


def _field(obj: object, key: str) -> Mapping[str, Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def csr_pending(csr: Mapping[str, Any]) -> bool:
    """No Approved, Denied or Failed condition yet (``kubectl get csr``'s ``Pending``)."""
    conditions = _field(csr, "status").get("conditions")
    conditions = conditions if isinstance(conditions, list) else []
    return not any(isinstance(c, Mapping) and c.get("type") in ("Approved", "Denied", "Failed") for c in conditions)


def pending_serving(csrs: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pending kubelet-serving CSRs among ``csrs`` (objects of any shape: what is no CSR is left out)."""
    return [c for c in csrs if isinstance(c, Mapping) and _field(c, "spec").get("signerName") == KUBELET_SERVING_SIGNER
            and csr_pending(c)]  # fmt: skip
