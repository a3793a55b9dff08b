"""kube-state-metrics series of pods no replayed GPU holds -- queued for GPUs (Pending, no node) or ended (Failed) --
read from the pod objects the fake API server holds, merged into the replayed kube-state-metrics' exposition
(:class:`~.replay_server.KsmReplay` ``extra``). A stand-in for kube-state-metrics 2.20 as the replayed one is
(docs/testing.md): ``kube_pod_container_resource_requests`` (``node`` is the pod's ``spec.nodeName``, empty while
unscheduled; an extended resource's request defaults to its limit; ``nvidia.com/gpu`` -> ``nvidia_com_gpu``,
``internal/store/pod.go`` with ``SanitizeLabelName``), ``kube_pod_status_phase`` (one series per phase, 1 for the
pod's), ``kube_namespace_labels`` for a namespace the replay does not know yet."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpustack.diagnose.pod_queue import gpu_requests

from .replay_exporter import gpu_uuid

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_NAME = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]")


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


def pod_series(pods: Iterable[dict[str, Any]]) -> list[str]:
    """Sample lines (no HELP/TYPE) for ``pods``' GPU requests and phases."""
    out: list[str] = []
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns, name, uid = meta["namespace"], meta["name"], gpu_uuid(meta["name"], 0)[4:]
        container = (spec.get("containers") or [{}])[0].get("name", "main")
        for resource, count in sorted(gpu_requests(pod).items()):
            labels = {"namespace": ns, "pod": name, "uid": uid, "container": container,
                      "node": spec.get("nodeName", ""), "resource": re.sub(r"[./-]", "_", resource), "unit": "integer"}  # fmt: skip
            out.append(f"kube_pod_container_resource_requests{{{_labels(labels)}}} {count}")
        phase = (pod.get("status") or {}).get("phase", "Pending")
        for p in PHASES:
            labels = {"namespace": ns, "pod": name, "uid": uid, "phase": p}
            out.append(f"kube_pod_status_phase{{{_labels(labels)}}} {int(p == phase)}")
        out.append(f'kube_namespace_labels{{namespace="{ns}"}} 1')
    return out


def merged(exposition: str, extra: Iterable[str]) -> str:
    """``exposition`` with each ``extra`` sample line placed after the last line of its metric family (the text
    format keeps a family's lines together); a series the exposition already has is not repeated."""
    lines = exposition.rstrip("\n").split("\n")
    present = set(lines)
    for line in extra:
        if line in present:
            continue
        name = _NAME.match(line)
        family = name.group(1) if name else ""
        last = max(
            (i for i, x in enumerate(lines) if x.startswith((family + "{", family + " "))), default=len(lines) - 1
        )
        lines.insert(last + 1, line)
        present.add(line)
    return "\n".join(lines) + "\n"
