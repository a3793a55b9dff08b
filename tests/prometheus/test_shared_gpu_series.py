"""Two and three pods on one time-sliced GPU, series as dcgm-exporter 4.8.2 prints them with
``--kubernetes-virtual-gpus=true`` (the device series plus per-pod, per-process GPU_UTIL and FB_USED;
tests/prometheus/shared_gpu_series.py): the dashboard's device panels, GPUAllocatedButIdle and the activity rule
read the device, once (issue 32, item 6). A promtool rule test written per case, on both Prometheus releases."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpustack.monitoring.dashboard import concretize, load_dashboard, panel_queries
from gpustack.monitoring.rules import rules_path, usage_rules_path
from tests.prometheus.shared_gpu_series import SharedGPU, SharingPod, gpu_series

NODE = "gpu-4090-01"
MODEL = "NVIDIA GeForce RTX 4090"  # no profiling fields: the activity rule falls back on GPU_UTIL
SAMPLES = 41  # 40 minutes at 1 m: GPUAllocatedButIdle's 30 m `for`


def _pods(prefix: str, count: int, util: list[float], fb: list[float]) -> tuple[SharingPod, ...]:
    return tuple(SharingPod("team-a", f"{prefix}-{i}", f"5d0c9a7e-1b2f-4c3d-8e9f-{prefix}{i:010d}"[:36], str(i),
                            util[i], fb[i]) for i in range(count))  # fmt: skip


def _gpus(pods: int) -> list[SharedGPU]:
    split = {2: [20000.0, 10000.0], 3: [15000.0, 10000.0, 5000.0]}[pods]
    # GPU 0: busy (80 %), 30000 MiB used in all; one pod's processes unmapped (no hostPID): it reads 0.
    busy = SharedGPU(NODE, 0, "GPU-0b6d7f3a-1c2e-4a5b-8d9f-0a1b2c3d4e50", MODEL,
                     {"DCGM_FI_DEV_GPU_UTIL": 80, "DCGM_FI_DEV_FB_USED": 30000, "DCGM_FI_DEV_FB_FREE": 50000,
                      "DCGM_FI_DEV_FB_RESERVED": 500, "DCGM_FI_DEV_GPU_TEMP": 60},
                     _pods("busy", pods, [60.0] + [0.0] * (pods - 1), split))  # fmt: skip
    # GPU 1: held by the same number of pods, idle.
    idle = SharedGPU(NODE, 1, "GPU-1c7e8a4b-2d3f-4b6c-9e0a-1b2c3d4e5f61", MODEL,
                     {"DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_FB_USED": 1000, "DCGM_FI_DEV_FB_FREE": 79000,
                      "DCGM_FI_DEV_FB_RESERVED": 500, "DCGM_FI_DEV_GPU_TEMP": 40},
                     _pods("idle", pods, [0.0] * pods, [1000.0 / pods] * pods))  # fmt: skip
    return [busy, idle]


def _panel(title: str) -> str:
    [expr] = [e for t, e in panel_queries(load_dashboard()) if t == title]
    return concretize(expr)


def _gpu(gpu: int) -> str:
    return f'{{node="{NODE}", gpu="{gpu}"}}'


def _test_file(tmp_path: Path, pods: int) -> Path:
    gpus = _gpus(pods)
    series = [s for g in gpus for s in gpu_series(g, "10.244.3.9:9400", SAMPLES)]
    exprs = [
        {"expr": _panel("GPU Framebuffer Mem Used"), "eval_time": "5m",
         "exp_samples": [{"labels": _gpu(0), "value": 30000}, {"labels": _gpu(1), "value": 1000}]},
        {"expr": _panel("Framebuffer Used %"), "eval_time": "5m",
         "exp_samples": [{"labels": _gpu(0), "value": 0.375}, {"labels": _gpu(1), "value": 0.0125}]},
        {"expr": "gpustack:gpu_activity:ratio", "eval_time": "5m",
         "exp_samples": [{"labels": f'gpustack:gpu_activity:ratio{{node="{NODE}", gpu="{g.index}", UUID="{g.uuid}", '
                                    f'modelName="{MODEL}", namespace="team-a", pod="{p.name}"}}',
                          "value": g.device["DCGM_FI_DEV_GPU_UTIL"] / 100} for g in gpus for p in g.pods]},
        {"expr": 'ALERTS{alertname="GPUAllocatedButIdle", alertstate="firing"}', "eval_time": "35m",
         "exp_samples": [{"labels": f'ALERTS{{alertname="GPUAllocatedButIdle", alertstate="firing", severity="info", '
                                    f'node="{NODE}", gpu="1", UUID="{gpus[1].uuid}", modelName="{MODEL}", '
                                    f'exported_namespace="team-a", exported_pod="{p.name}"}}', "value": 1}
                         for p in gpus[1].pods]},
    ]  # fmt: skip
    doc = {
        "rule_files": [str(rules_path()), str(usage_rules_path())],
        "evaluation_interval": "1m",
        "tests": [{"name": f"{pods} pods on each of two time-sliced GPUs", "interval": "1m",
                   "input_series": series, "promql_expr_test": exprs}],
    }  # fmt: skip
    path = tmp_path / f"shared-{pods}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000), encoding="utf-8")
    return path


def test_the_series_are_shaped_as_the_exporter_prints_them() -> None:
    busy, _ = _gpus(3)
    by_metric: dict[str, list[str]] = {}
    for s in gpu_series(busy, "i", 1):
        by_metric.setdefault(s["series"].split("{")[0], []).append(s["series"])
    # per-process fields: the device series (no pod labels) and one per pod with pod_uid and vgpu
    assert len(by_metric["DCGM_FI_DEV_FB_USED"]) == 4
    assert sum("exported_pod" not in s for s in by_metric["DCGM_FI_DEV_FB_USED"]) == 1
    assert all("pod_uid=" in s and "vgpu=" in s for s in by_metric["DCGM_FI_DEV_FB_USED"] if "exported_pod" in s)
    # other fields: a copy per pod, no device series, no pod_uid
    assert len(by_metric["DCGM_FI_DEV_FB_FREE"]) == 3
    assert all("exported_pod" in s and "pod_uid" not in s for s in by_metric["DCGM_FI_DEV_FB_FREE"])


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
@pytest.mark.parametrize("pods", [2, 3])
def test_device_panels_idle_alert_and_activity_read_the_device_once(promtool: str, tmp_path: Path, pods: int) -> None:
    path = _test_file(tmp_path, pods)
    proc = subprocess.run([promtool, "test", "rules", path.name], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
