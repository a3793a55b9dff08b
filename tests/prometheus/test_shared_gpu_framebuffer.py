"""Issue 32 item 6, the rest: GPUFramebufferNearlyFull, "MIG Instance Framebuffer Used %" and "MIG Instances" on
shared GPUs whose framebuffer dcgm-exporter 4.8.2 prints as the device series plus per-pod, per-process ``FB_USED``
and per-pod copies of ``FB_FREE`` (tests/prometheus/shared_gpu_series.py). Each divided ``FB_USED`` by ``FB_USED +
FB_FREE`` series by series, which matches nothing there (the device's ``FB_USED`` has no pod labels, the pods'
carry ``pod_uid``, which ``FB_FREE``'s copies lack): the alert never fired on a full shared GPU and both panels were
empty for a time-sliced MIG instance. Now each reads the GPU (instance) once and names every pod holding it.
A promtool rule test with two and three pods per GPU, on both Prometheus releases."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpustack.monitoring.dashboard import concretize, load_dashboard, panel_queries
from gpustack.monitoring.rules import rules_path, usage_rules_path
from tests.prometheus.shared_gpu_series import SharedGPU, SharingPod, gpu_series

NODE = "gpu-h100-02"
MODEL = "NVIDIA H100 80GB HBM3"
SAMPLES = 16  # 15 minutes at 1 m: GPUFramebufferNearlyFull's 10 m `for`
FULL = (78000.0, 1500.0)  # a whole GPU's used and free MiB: 98.1 %
INSTANCE_FULL = (9600.0, 384.0)  # a 1g.10gb instance's (9984 MiB): 96.2 %
INSTANCE_FREE = (0.0, 9984.0)  # an instance no pod holds


def _pods(prefix: str, count: int, fb_used: float) -> tuple[SharingPod, ...]:
    return tuple(SharingPod("team-b", f"{prefix}-{i}", f"7e1d0b8f-2c3a-4d5e-9f0a-{prefix}{i:010d}"[:36], str(i),
                            0.0, fb_used / count) for i in range(count))  # fmt: skip


def _gpus(pods: int) -> tuple[SharedGPU, SharedGPU, SharedGPU]:
    def fb(used: float, free: float) -> dict[str, float]:
        return {"DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": free, "DCGM_FI_DEV_FB_RESERVED": 0}

    whole = SharedGPU(NODE, 0, "GPU-2d8f9b5c-3e4a-4c7d-8f1b-2c3d4e5f6a70", MODEL, fb(*FULL),
                      _pods("full", pods, FULL[0]))  # fmt: skip
    carved = "GPU-3e9a0c6d-4f5b-4d8e-9a2c-3d4e5f6a7b81"
    held = SharedGPU(NODE, 1, carved, MODEL, fb(*INSTANCE_FULL), _pods("mig", pods, INSTANCE_FULL[0]), ("1g.10gb", "7"))
    free = SharedGPU(NODE, 1, carved, MODEL, fb(*INSTANCE_FREE), (), ("1g.10gb", "8"))
    return whole, held, free


def _panel(title: str) -> str:
    [expr] = [e for t, e in panel_queries(load_dashboard()) if t == title]
    return concretize(expr)


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _test_file(tmp_path: Path, pods: int) -> Path:
    whole, held, free = _gpus(pods)
    series = [s for g in (whole, held, free) for s in gpu_series(g, "10.244.4.7:9400", SAMPLES)]
    instance = {"node": NODE, "gpu": "1", "GPU_I_PROFILE": "1g.10gb"}
    firing = [{"node": NODE, "gpu": str(g.index), "UUID": g.uuid, "modelName": MODEL,
               **dict(zip(("GPU_I_PROFILE", "GPU_I_ID"), g.mig, strict=False)),
               "exported_namespace": "team-b", "exported_pod": p.name} for g in (whole, held) for p in g.pods]  # fmt: skip
    alert = {"alertname": "GPUFramebufferNearlyFull", "alertstate": "firing", "severity": "warning"}
    exprs = [
        {"expr": 'ALERTS{alertname="GPUFramebufferNearlyFull", alertstate="firing"}', "eval_time": "12m",
         "exp_samples": [{"labels": "ALERTS" + _labels({**alert, **labels}), "value": 1} for labels in firing]},
        {"expr": _panel("MIG Instance Framebuffer Used %"), "eval_time": "5m",
         "exp_samples": [{"labels": _labels({**instance, "GPU_I_ID": "7"}), "value": 9600 / 9984},
                         {"labels": _labels({**instance, "GPU_I_ID": "8"}), "value": 0}]},
        {"expr": _panel("MIG Instances"), "eval_time": "5m",
         "exp_samples": [*({"labels": _labels({**instance, "GPU_I_ID": "7", "exported_namespace": "team-b",
                                               "exported_pod": p.name}), "value": 9984} for p in held.pods),
                         {"labels": _labels({**instance, "GPU_I_ID": "8"}), "value": 9984}]},
    ]  # fmt: skip
    doc = {
        "rule_files": [str(rules_path()), str(usage_rules_path())],
        "evaluation_interval": "1m",
        "tests": [{"name": f"{pods} pods on a full time-sliced GPU and on a full time-sliced MIG instance",
                   "interval": "1m", "input_series": series, "promql_expr_test": exprs}],
    }  # fmt: skip
    path = tmp_path / f"shared-fb-{pods}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000), encoding="utf-8")
    return path


def test_the_old_series_by_series_ratio_matched_nothing_on_these_series() -> None:
    """Why the expressions changed: no FB_USED series of a shared GPU has FB_FREE's label set."""
    whole, held, _ = _gpus(2)
    for gpu in (whole, held):
        rows = gpu_series(gpu, "i", 1)
        used = {r["series"].split("{", 1)[1] for r in rows if r["series"].startswith("DCGM_FI_DEV_FB_USED")}
        free = {r["series"].split("{", 1)[1] for r in rows if r["series"].startswith("DCGM_FI_DEV_FB_FREE")}
        assert len(used) == 3 and len(free) == 2 and not used & free


@pytest.mark.both_prometheus  # version-sensitive: also on the oldest supported (docs/operations.md)
@pytest.mark.parametrize("pods", [2, 3])
def test_nearly_full_alert_and_mig_framebuffer_panels_read_the_device_once(
    promtool: str, tmp_path: Path, pods: int
) -> None:
    path = _test_file(tmp_path, pods)
    proc = subprocess.run([promtool, "test", "rules", path.name], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
