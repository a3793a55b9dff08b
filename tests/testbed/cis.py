"""doctor's ``security`` layer against the test bed's hosts: the CIS checks judged from host facts (file modes and
owners, the kubelet's command line and config file), read over SSH by the same facts play ``up`` runs.

On the bed the files are the real kubeadm 1.36.5's (the kubeadm double hands ``init phase certs``, ``kubeconfig``,
``control-plane``, ``etcd local`` and ``kubelet-start`` to it: docs/testing.md) and their modes are what gpustack's
roles leave. The checks that read the API server's flags (from its mirror pods) are judged against the real API server
in tests/controlplane/test_security.py; the bed has none, so there they skip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpustack.diagnose.checks_security_files import RULES as FILE_RULES
from gpustack.diagnose.cis_kubelet import RULES as KUBELET_RULES

from .cluster import doctor

#: the security layer's checks judged from host facts
HOST_FACT_CHECKS = frozenset({r.check_id for r in FILE_RULES} | {r.check_id for r in KUBELET_RULES})
#: those gpustack leaves on a default cluster, reported as warnings (docs/configuration.md, "CIS checks left"):
#: etcd's data directory owned by root (no etcd user on a kubeadm host), the kubelet's serving certificate from
#: serverTLSBootstrap rather than a fixed file, seccompDefault left to each pod
LEFT = frozenset({"S1.1.12-etcd-data-dir-owner", "S4.2.9-kubelet-tls-cert-file", "S4.2.14-kubelet-seccomp-default"})
#: the kubelet checks each relaxation setting turns into a warning
RELAXED = {"tls_cipher_suites": "S4.2.12-kubelet-tls-cipher-suites", "pod_pids_limit": "S4.2.13-kubelet-pod-pids-limit"}


def security_layer(config: Path, state: Path) -> dict[str, Any]:
    """``gpustack doctor --layer security,host -o json`` against the bed's hosts (the host layer collects the host
    facts over SSH; alone, the security layer reads only the API): its report, what it printed under ``_output``."""
    _rc, report, output = doctor(config, state, "--layer", "security,host")
    return {**report, "_output": output}


def security_failures(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The security layer's failures (the host layer's own, e.g. the bed's cgroup v1, are not judged here)."""
    return [c for c in report["checks"] if c["layer"] == "security" and c["status"] == "fail"]


def host_findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings of the host-fact checks."""
    return [c for c in report["checks"] if c["id"] in HOST_FACT_CHECKS]


def not_passed(report: dict[str, Any], host: str) -> dict[str, str]:
    """Check id -> status of every host-fact finding on ``host`` (or on no host) that did not pass."""
    return {c["id"]: c["status"] for c in host_findings(report)
            if c["status"] != "pass" and c.get("host") in (None, "", host)}  # fmt: skip
