"""``gpustack status``: the certificates it can read without SSH, judged against ``certificates`` in gpustack.yaml.

- this machine's kubeconfig: its client certificate (gpustack's copy of admin.conf expires with the cluster's);
- each control plane's API server (``address:6443``): the certificate it serves, read from a TLS handshake that
  sends nothing and trusts nothing, so it is read even when the client certificate has expired.

Both are renewed with every other kubeadm certificate (``kubeadm certs renew all``), so they stand for the rest;
doctor reads every certificate on the hosts (H15, H16). docs/lifecycle.md, "Day 365".
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

from rich.markup import escape

from gpustack.checks.certs import judge, parse_iso
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.runners.tls import served_certificate_expiry

API_PORT = 6443
TLS_TIMEOUT = 2.0  # status stays quick when a control plane does not answer


def gather_certificates(
    cfg: Config, target: Mapping[str, Any] | None, *, now: datetime | None = None, timeout: float = TLS_TIMEOUT
) -> list[dict[str, Any]]:
    """One row per certificate read: ``what``, ``expires`` (ISO or ""), ``status`` (pass/warn/fail/unknown),
    ``text``."""
    now = now or datetime.now(timezone.utc)
    limits = {"warn_days": cfg.certificates.warn_days, "fail_days": cfg.certificates.fail_days}
    rows: list[dict[str, Any]] = []

    def row(what: str, expires: datetime | None, unknown: str) -> None:
        if expires is None:
            rows.append({"what": what, "expires": "", "status": "unknown", "text": unknown})
            return
        j = judge(expires, now, **limits)
        rows.append({"what": what, "expires": expires.isoformat(), "status": j.status, "text": j.text})

    if target:
        files = ", ".join(str(f) for f in target.get("kubeconfig") or [])
        expires = parse_iso(target.get("client_certificate_expires"))
        if expires is not None:
            row(f"kubeconfig {files}", expires, "")
    nodes = cfg.control_planes
    with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:  # each waits at most `timeout`, together
        served = list(pool.map(lambda n: served_certificate_expiry(n.address, API_PORT, timeout=timeout), nodes))
    for node, expires in zip(nodes, served, strict=True):
        row(f"API server {node.name} ({node.address}:{API_PORT})", expires, "not reachable")
    return rows


def print_certificates(rows: list[dict[str, Any]], console: Console) -> None:
    if not rows:
        return
    style = {"pass": "ok", "warn": "warn", "fail": "fail", "unknown": "skip"}
    table = [[escape(r["what"]), f"[{style[r['status']]}]{r['status']}[/{style[r['status']]}]", escape(r["text"])]
             for r in rows]  # fmt: skip
    console.table("Certificates (doctor H15/H16 read every one on the hosts)", ["certificate", "status", "expiry"],
                  table)  # fmt: skip
