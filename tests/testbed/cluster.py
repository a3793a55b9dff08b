"""Helpers for running the real `gpustack` CLI against test-bed hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .hosts import Testbed
from .services import Sources, local_sources


@dataclass
class UpRun:
    rc: int
    stdout: str
    stderr: str
    state_dir: Path
    #: the run directory this command made (None: it made none, or the UpRun was built by hand)
    run_dir: Path | None = None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def last_run_dir(self) -> Path:
        """This command's run directory (else the newest): later runs in the same state directory
        do not change which run an UpRun reports on."""
        if self.run_dir is not None:
            return self.run_dir
        runs = sorted((self.state_dir / "runs").iterdir())
        return runs[-1]

    def summary(self) -> dict[str, dict[str, Any]]:
        data = json.loads((self.last_run_dir() / "summary.json").read_text())
        return {row["stage"]: row for row in data}

    def changed(self) -> dict[str, int]:
        return {stage: int(row["changed"]) for stage, row in self.summary().items()}


#: the password of the bed's proxy URL (the proxy asks for none; apt, curl and Python send it): issue 31's test
#: that it lands only in private files on the hosts and on this machine. ``%40`` is a percent-encoded ``@``.
PROXY_PASSWORD = "s3cr%40t-proxy"


def proxy_url(sources: Sources) -> str:
    """The bed's proxy URL as the config gives it: with a user and :data:`PROXY_PASSWORD`."""
    return sources.proxy.url.replace("http://", f"http://alice:{PROXY_PASSWORD}@", 1)


def write_config(
    bed: Testbed,
    path: Path,
    sources: Sources,
    *,
    via_proxy: bool = True,
    roles: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """A gpustack.yaml for the bed: first host is the control plane unless `roles` says otherwise.

    Package sources point at the bed's HTTP server; Helm's checksum is the double's (the pinned
    one is the real release's); with ``via_proxy`` downloads go through the bed's forward proxy.
    """
    roles = roles or {}
    nodes = [
        {
            "name": h.name,
            "address": h.address,
            "role": roles.get(h.name, "control-plane" if i == 0 else "worker"),
            "user": h.user,
            "ssh_key": str(bed.ssh_key),
        }
        for i, h in enumerate(bed.hosts)
    ]
    cfg: dict[str, Any] = {
        "nodes": nodes,
        # the bed's apt repository is signed with its own throwaway key
        "sources": {
            **local_sources(sources.http.url),
            **sources.runtime.config_sources(sources.http.url),
            "kubernetes_apt_key_fingerprint": sources.k8s_repo.fingerprint,
        },
        "versions": {
            "helm_sha256": {"amd64": sources.helm.sha256},
            # containerd 2 and runc from the file server (Debian forky's builds), with their own checksums
            **sources.runtime.config_versions(),
        },
        "ssh": {"known_hosts": str(bed.known_hosts), "connect_timeout": 10},
        # the bed's hosts share the outer machine's disk; keep the check but at a size they pass
        # The machine's kernel runs cgroup v1 (hybrid), so every bed host does: P17 rightly fails
        # for Kubernetes 1.35+ (whose kubelet refuses v1). The bed's kubelet is a double, so the
        # bed runs downgrade exactly that check to a warning.
        "preflight": {"min_disk_gib": 1, "ignore": ["cgroup-v2"], "registries": [registry_of(sources)]},
    }
    if via_proxy:
        cfg["proxy"] = {"http": proxy_url(sources), "https": proxy_url(sources)}
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(cfg.get(key), dict):
            cfg[key] = {**cfg[key], **value}
        else:
            cfg[key] = value
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def registry_of(sources: Sources) -> str:
    """The bed's stand-in for the image registries preflight checks (P25): the file server, which
    answers ``GET /v2/`` (a directory) as a registry's API endpoint answers."""
    (sources.http.root / "v2").mkdir(exist_ok=True)
    return sources.http.url


def run_gpustack(
    config: Path, state_dir: Path, *args: str, timeout: float = 900, env: Mapping[str, str] | None = None
) -> UpRun:
    full_env = {**os.environ, "GPUSTACK_STATE_DIR": str(state_dir), "NO_COLOR": "1", "COLUMNS": "200"}
    full_env.pop("GPUSTACK_CONFIG", None)
    full_env.update(env or {})
    before = _runs(state_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "gpustack", *args, "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        stdin=subprocess.DEVNULL,
    )
    made = sorted(_runs(state_dir) - before)
    return UpRun(proc.returncode, proc.stdout, proc.stderr, state_dir, made[-1] if made else None)


def doctor(config: Path, state_dir: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``gpustack doctor --output json ARGS``: its exit code, its report, everything it printed."""
    run = run_gpustack(config, state_dir, "doctor", "--output", "json", *args, timeout=300)
    try:
        report: dict[str, Any] = json.loads(run.stdout)
    except ValueError as exc:
        raise AssertionError(f"doctor printed no JSON report (rc {run.rc}):\n{run.output}") from exc
    return run.rc, report, run.output


def _runs(state_dir: Path) -> set[Path]:
    runs = state_dir / "runs"
    return set(runs.iterdir()) if runs.is_dir() else set()


#: The cluster stage needs a real API server and real Helm charts; the bed's kubeadm is a double,
#: so bed runs stop after the host layer (the cluster stage is tested against a fake API server
#: and a fake helm in tests/unit/cluster/test_layer.py and tests/unit/cluster/test_stage.py; the
#: kubelet-certs stage against the real API server in tests/controlplane/test_kubelet_csr.py).
HOST_LAYER_ONLY = ("--skip", "kubelet-certs,cluster")


def up(config: Path, state_dir: Path, *extra: str, **kw: Any) -> UpRun:
    return run_gpustack(config, state_dir, "up", "--yes", *HOST_LAYER_ONLY, *extra, **kw)


def doubles_log(text: str) -> list[list[str]]:
    """Parse a /var/log/gpustack-doubles/<name>.log (one JSON argv per line)."""
    out = []
    for line in text.splitlines():
        if line.strip():
            entry = json.loads(line)
            out.append(entry["argv"] if isinstance(entry, dict) else entry)
    return out


def first(seq: Sequence[Any]) -> Any:
    return seq[0]
