"""Known answers (promtool, the real rule engine) for what issue #21's config parts make the device plugin advertise,
in the usage rules `gpustack report` reads (gpustack/templates/monitoring/gpu-usage.rules.yaml):

- time-slicing with ``rename: true`` (renameByDefault): ``nvidia.com/gpu.shared`` = GPUs x replicas and
  ``nvidia.com/gpu`` 0: a request counts 1/replicas GPU;
- MIG time-sliced ``replicas`` times under mixed (``nvidia.com/mig-1g.10gb`` = instances x replicas), renamed
  or not (``nvidia.com/mig-1g.10gb.shared``): a request counts 1/7/replicas, allocatable stays one GPU.

Series as kube-state-metrics 2.20 exports them (resource names with ``.``/``-`` written ``_``) and dcgm-exporter
under MIG (one series per GPU instance: GPU_I_PROFILE, GPU_I_ID; tests/fixtures/mig/). promtool is Debian's
prometheus package (scripts/test.sh installs it; 2.42 is the oldest Prometheus gpustack supports). About 0.3 s."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.monitoring.rules import usage_rules_path

pytestmark = pytest.mark.prometheus
KSM = 'job="kube-state-metrics"'


def _node(node: str, **alloc: int) -> list[dict[str, str]]:
    out = []
    for resource, n in alloc.items():
        for metric in ("kube_node_status_allocatable", "kube_node_status_capacity"):
            out.append({"series": f'{metric}{{{KSM}, node="{node}", resource="{resource}", unit="integer"}}',
                        "values": f"{n}x11"})  # fmt: skip
    return out


def _pod(ns: str, pod: str, node: str, resource: str) -> list[dict[str, str]]:
    labels = f'{KSM}, namespace="{ns}", pod="{pod}", uid="{pod}"'
    return [
        {"series": f'kube_pod_container_resource_requests{{{labels}, container="c", node="{node}", '
                   f'resource="{resource}", unit="integer"}}', "values": "1x11"},
        {"series": f'kube_pod_status_phase{{{labels}, phase="Running"}}', "values": "1x11"},
    ]  # fmt: skip


def _dcgm(node: str, gpu: str, instances: list[str] | None = None) -> list[dict[str, str]]:
    base = f'job="dcgm-exporter", node="{node}", gpu="0", UUID="{gpu}", modelName="NVIDIA H100 80GB HBM3"'
    if instances is None:
        return [{"series": f"DCGM_FI_DEV_GPU_TEMP{{{base}}}", "values": "40x11"}]
    return [{"series": f'DCGM_FI_DEV_GPU_TEMP{{{base}, GPU_I_PROFILE="1g.10gb", GPU_I_ID="{i}"}}', "values": "40x11"}
            for i in instances]  # fmt: skip


def _scenario() -> list[dict[str, str]]:
    seven = [str(i) for i in range(7, 14)]
    series = [
        *_node("l40s-renamed", nvidia_com_gpu=0, nvidia_com_gpu_shared=8),
        {"series": f'kube_node_labels{{{KSM}, node="l40s-renamed", label_nvidia_com_gpu_sharing_strategy="time-slicing"}}',
         "values": "1x11"},
        *_dcgm("l40s-renamed", "GPU-l40s-0"), *_dcgm("l40s-renamed", "GPU-l40s-1"),
        *_pod("team-a", "ts-0", "l40s-renamed", "nvidia_com_gpu_shared"),
        *_node("h100-ts", nvidia_com_gpu=0, nvidia_com_mig_1g_10gb=14),
        *_dcgm("h100-ts", "GPU-h100-ts", seven),
        *_pod("team-b", "mig-0", "h100-ts", "nvidia_com_mig_1g_10gb"),
        *_node("h100-ts-renamed", nvidia_com_gpu=0, nvidia_com_mig_1g_10gb=0, nvidia_com_mig_1g_10gb_shared=14),
        *_dcgm("h100-ts-renamed", "GPU-h100-tsr", seven),
        *_pod("team-c", "mig-1", "h100-ts-renamed", "nvidia_com_mig_1g_10gb_shared"),
    ]  # fmt: skip
    return series


def _samples(record: str, rows: list[tuple[dict[str, str], float]]) -> dict[str, Any]:
    return {"expr": record, "eval_time": "5m", "exp_samples": [
        {"labels": record + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "value": value}
        for labels, value in rows]}  # fmt: skip


def test_renamed_and_time_sliced_mig_requests_count_their_share(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian's prometheus package) is needed: scripts/test.sh installs it"
    test = {
        "rule_files": [str(usage_rules_path())],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": _scenario(),
            "promql_expr_test": [
                _samples("gpustack:gpu_allocatable:sum", [({"node": "l40s-renamed"}, 2), ({"node": "h100-ts"}, 1),
                                                          ({"node": "h100-ts-renamed"}, 1)]),
                _samples("gpustack:gpu_allocated:sum", [
                    ({"namespace": "team-a", "pod": "ts-0", "node": "l40s-renamed"}, 0.25),
                    ({"namespace": "team-b", "pod": "mig-0", "node": "h100-ts"}, 1 / 14),
                    ({"namespace": "team-c", "pod": "mig-1", "node": "h100-ts-renamed"}, 1 / 14)]),
                _samples("gpustack:mig_replica_share:ratio", [({"node": "h100-ts"}, 0.5),
                                                              ({"node": "h100-ts-renamed"}, 0.5)]),
            ],
        }],
    }  # fmt: skip
    path = tmp_path / "renamed.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
