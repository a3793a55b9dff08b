#!/usr/bin/env python3
"""Read what NVML says about a real GPU's MIG capabilities and engine activity, without changing any setting.
The companion of scripts/gpu_probe.py (docs/gpu-probe.md): the facts gpustack's GPU sharing and report code
assume, read from the GPU itself.

    python3 scripts/nvml_probe.py --out "$OUT"     # on the GPU machine; needs nvidia-ml-py (pynvml); ~30 s

Writes ``nvml.json``:

- ``devices``: name, UUID, PCI bus id, memory, MIG mode (current, pending), the most MIG devices, and every GPU
  instance profile NVML knows for the GPU (``nvmlDeviceGetGpuInstanceProfileInfoV``: name, slice count, instance
  count, SMs, memory) with its possible placements: the data gpustack/config/mig.py's profile table stands for;
- ``activity``: NVML's GPM metrics (``NVML_GPM_METRIC_GRAPHICS_UTIL`` is the source of DCGM's
  ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, which report's used hours read) and ``nvmlDeviceGetUtilizationRates`` (DCGM's
  ``DCGM_FI_DEV_GPU_UTIL``), idle, at a 50 % duty cycle and fully busy, with a PyTorch matrix-multiply load in a
  child process. Skipped (and said) when PyTorch or GPM is not there.

Every call that fails is recorded with NVML's error text, never raised: exit status 0 whatever the GPU said.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: GPM metrics read (pynvml names); GRAPHICS_UTIL ~ DCGM_FI_PROF_GR_ENGINE_ACTIVE, SM_UTIL ~ ..._SM_ACTIVE,
#: SM_OCCUPANCY ~ ..._SM_OCCUPANCY, ANY_TENSOR_UTIL ~ ..._PIPE_TENSOR_ACTIVE, DRAM_BW_UTIL ~ ..._DRAM_ACTIVE
GPM_METRICS = ("GRAPHICS_UTIL", "SM_UTIL", "SM_OCCUPANCY", "ANY_TENSOR_UTIL", "DRAM_BW_UTIL")
#: the load: busy for duty * period, then idle, until killed (a 8192^2 bf16 matmul is ~1 ms on an H100)
LOAD = """
import sys, time, torch
duty, period = float(sys.argv[1]), 0.1
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize(); print("ready", flush=True)
while True:
    start = time.monotonic()
    while time.monotonic() - start < duty * period:
        a @ b; torch.cuda.synchronize()
    rest = period - (time.monotonic() - start)
    if rest > 0: time.sleep(rest)
"""


def plain(value: Any) -> Any:
    """ctypes structures, arrays and bytes -> JSON values."""
    if hasattr(value, "_fields_"):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def attempt(fn: Any, *args: Any) -> Any:
    """``{"value": ...}`` or ``{"error": ...}``: one NVML call, never raised."""
    try:
        return {"value": plain(fn(*args))}
    except Exception as exc:  # NVMLError and ctypes errors alike are data here
        return {"error": f"{type(exc).__name__}: {exc}"}


def placements(nv: Any, handle: Any, profile_id: int) -> Any:
    import ctypes

    count = ctypes.c_uint(0)
    arr = (nv.c_nvmlGpuInstancePlacement_t * 16)()
    try:
        count.value = 16
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, arr, ctypes.byref(count))
        return {"value": [{"start": arr[i].start, "size": arr[i].size} for i in range(count.value)]}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def device(nv: Any, index: int) -> dict[str, Any]:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    out: dict[str, Any] = {"index": index}
    for key, fn in (("name", nv.nvmlDeviceGetName), ("uuid", nv.nvmlDeviceGetUUID),
                    ("pci", nv.nvmlDeviceGetPciInfo), ("memory", nv.nvmlDeviceGetMemoryInfo),
                    ("mig_mode_current_pending", nv.nvmlDeviceGetMigMode),
                    ("max_mig_device_count", nv.nvmlDeviceGetMaxMigDeviceCount),
                    ("cuda_compute_capability", nv.nvmlDeviceGetCudaComputeCapability),
                    ("gpm_support", nv.nvmlGpmQueryDeviceSupport)):  # fmt: skip
        out[key] = attempt(fn, h)
    profiles = []
    for profile in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = attempt(nv.nvmlDeviceGetGpuInstanceProfileInfo, h, profile, 2)
        entry = {"profile": profile, **info}
        if "value" in info and info["value"].get("instanceCount"):
            entry["placements"] = placements(nv, h, info["value"]["id"])
        profiles.append(entry)
    out["gpu_instance_profiles"] = profiles
    return out


def gpm_window(nv: Any, handle: Any, seconds: float) -> dict[str, Any]:
    """GPM metrics over ``seconds`` and the utilisation rates at its end."""
    try:
        s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
        nv.nvmlGpmSampleGet(handle, s1)
        time.sleep(seconds)
        nv.nvmlGpmSampleGet(handle, s2)
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRICS)
        mg.sample1, mg.sample2 = s1, s2
        for i, name in enumerate(GPM_METRICS):
            mg.metrics[i].metricId = getattr(nv, f"NVML_GPM_METRIC_{name}")
        nv.nvmlGpmMetricsGet(mg)
        gpm: dict[str, Any] = {
            name: (mg.metrics[i].value if mg.metrics[i].nvmlReturn == 0 else f"nvmlReturn {mg.metrics[i].nvmlReturn}")
            for i, name in enumerate(GPM_METRICS)
        }
        nv.nvmlGpmSampleFree(s1)
        nv.nvmlGpmSampleFree(s2)
    except Exception as exc:
        gpm = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "seconds": seconds,
        "gpm_percent": gpm,
        "utilization_rates": attempt(nv.nvmlDeviceGetUtilizationRates, handle),
    }


def activity(nv: Any, handle: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"idle": gpm_window(nv, handle, 2.0)}
    for label, duty in (("duty_50", 0.5), ("busy", 1.0)):
        proc = subprocess.Popen([sys.executable, "-c", LOAD, str(duty)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            ready = proc.stdout.readline().strip() if proc.stdout else ""
            if ready != "ready":
                out[label] = {"error": f"load did not start: {ready!r} {proc.stderr.read() if proc.stderr else ''}"}
                continue
            time.sleep(1.0)
            out[label] = {"duty": duty, **gpm_window(nv, handle, 3.0)}
        finally:
            proc.kill()
            proc.wait()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "nvml-probe-out"))
    parser.add_argument("--no-load", action="store_true", help="skip the activity windows (no PyTorch load)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        import pynvml as nv
    except ImportError as exc:
        result["error"] = f"pynvml not importable: {exc}"
    else:
        try:
            nv.nvmlInit()
        except Exception as exc:  # no driver, no GPU: data, not a crash
            result["error"] = f"nvmlInit: {type(exc).__name__}: {exc}"
            (args.out / "nvml.json").write_text(json.dumps(result, indent=2) + "\n")
            print(json.dumps(result))
            return 0
        result["nvml"] = {k: attempt(getattr(nv, f)) for k, f in (
            ("driver_version", "nvmlSystemGetDriverVersion"), ("nvml_version", "nvmlSystemGetNVMLVersion"),
            ("cuda_driver_version", "nvmlSystemGetCudaDriverVersion"))}  # fmt: skip
        count = nv.nvmlDeviceGetCount()
        result["devices"] = [device(nv, i) for i in range(count)]
        if count and not args.no_load:
            result["activity"] = activity(nv, nv.nvmlDeviceGetHandleByIndex(0))
        nv.nvmlShutdown()
    (args.out / "nvml.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "devices"}, indent=2)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
