"""The renewal of a cluster's kubeadm certificates, as ``gpustack certs renew`` and ``gpustack upgrade`` share it
(pure rules and this machine's record, ``<state>/clusters/<name>/certs-renew.json``; docs/lifecycle.md, "Day 365").

A renewal has a start. A control plane whose every kubeadm leaf certificate (read by the preflight's
``kubeadm certs check-expiration``) expires at least ``certificates.validity`` after that start was renewed by it:
kubeadm signs notAfter = the signing time + certificateValidityPeriod. A renewal interrupted or failed is continued
from its start, so the control planes it renewed are not renewed again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.checks.certs import parse_iso
from gpustack.paths import kubeconfig_path

if TYPE_CHECKING:
    from gpustack.config.model import Config

#: version of the certs-renew.json format
RECORD_FORMAT = 1
#: clock difference allowed between this machine and a host when telling a renewed certificate (seconds)
SLACK_SECONDS = 120


def record_path(cfg: Config) -> Path:
    """This machine's record of the cluster's certificate renewal: ``<state>/clusters/<name>/certs-renew.json``."""
    return kubeconfig_path(cfg.cluster.name).parent / "certs-renew.json"


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


#: the certificate facts' time format, read as the expiry checks read it
parse_time = parse_iso


def renewal_start(previous: Mapping[str, Any] | None, validity: str, now: datetime) -> datetime:
    """When this renewal began (pure): an unfinished previous one (running: interrupted; failed) with the same
    validity is continued from its start; otherwise now."""
    if previous and previous.get("status") in ("running", "failed") and previous.get("validity") == validity:
        started = parse_iso(previous.get("started"))
        if started is not None and started <= now:
            return started
    return now


def new_record(started: datetime, validity: str, due: Sequence[str], *, status: str = "running") -> dict[str, Any]:
    return {"format": RECORD_FORMAT, "status": status, "started": iso(started), "validity": validity,
            "renew": list(due)}  # fmt: skip


def finish_record(record: Mapping[str, Any], status: str, now: datetime, error: str = "") -> dict[str, Any]:
    out = {**record, "status": status, "finished": iso(now)}
    if error:
        out["error"] = error
    return out


def leaf_expiries(kubeadm: Mapping[str, Any] | None) -> list[datetime] | None:
    """The expiry of every certificate ``kubeadm certs renew all`` renews, from the host's check-expiration facts
    (playbooks/module_utils/gpustack_certs.py): not the CAs, not externally managed or missing ones. None: the
    facts are missing or kubeadm failed (the node is renewed)."""
    if not kubeadm or kubeadm.get("error"):
        return None
    out = []
    for cert in kubeadm.get("certificates") or []:
        if cert.get("authority") or cert.get("external") or cert.get("missing"):
            continue
        when = parse_iso(cert.get("expires"))
        if when is None:
            return None
        out.append(when)
    return out or None


def renewed_since(kubeadm: Mapping[str, Any] | None, started: datetime, validity: str) -> bool:
    """Whether every leaf certificate was signed at or after ``started`` (pure): kubeadm signs notAfter = the
    signing time + certificateValidityPeriod (cmd/kubeadm/app/util/pkiutil), so such a certificate expires no
    earlier than ``started`` + validity (less :data:`SLACK_SECONDS` for the hosts' clocks)."""
    from gpustack.config.certificates import duration_seconds  # pydantic: not at `gpustack --help`

    expiries = leaf_expiries(kubeadm)
    if not expiries:
        return False
    floor = started + timedelta(seconds=duration_seconds(validity) - SLACK_SECONDS)
    return min(expiries) >= floor


def control_plane_names(cfg: Config) -> list[str]:
    return [n.name for n in cfg.control_planes]


def unreachable(cfg: Config, facts: Mapping[str, Any]) -> list[str]:
    """Control planes the preflight read no facts from (pure)."""
    return [n for n in control_plane_names(cfg) if not facts.get(n)]


def kubeadm_facts(facts: Mapping[str, Any], node: str) -> Mapping[str, Any] | None:
    """The node's ``kubeadm certs check-expiration`` facts; None where it has no /etc/kubernetes/pki/apiserver.crt
    (playbooks/module_utils/gpustack_certs.py: not a kubeadm control plane's PKI, nothing kubeadm could renew)."""
    found = ((facts.get(node) or {}).get("certificates") or {}).get("kubeadm")
    return found if isinstance(found, Mapping) else None


def nodes_to_renew(cfg: Config, facts: Mapping[str, Any], started: datetime) -> list[str]:
    """The control planes this renewal has not renewed yet, in the config's order (pure). One whose facts name no
    kubeadm PKI is left out; one where kubeadm could not be read is renewed (the renewal says what fails)."""
    validity = cfg.certificates.validity
    return [
        n for n in control_plane_names(cfg)
        if kubeadm_facts(facts, n) is not None and not renewed_since(kubeadm_facts(facts, n), started, validity)
    ]  # fmt: skip
