"""TEST DOUBLE DATA: a gpustack cluster whose nodes carry different GPU models (issue 32 item 1), as GPU feature
discovery labels them: ``nvidia.com/gpu.product`` is NVML's product name with runs of blanks as one dash and
characters other than ``[A-Za-z0-9-_. ]`` dropped (NVIDIA/k8s-device-plugin commit 1b826acc internal/lm/resource.go
``getProductName`` -> ``sanitise``: ``strings.Join(strings.Fields(input), "-")``). The fields each
model's exporter reports come from gpustack/monitoring/gpu_models.py (the replayed exporter's ``NodeSpec.model``).

Kept out of tests/fakes/scenarios.py (capped): :func:`with_models` relabels the nodes of any scenario's objects.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
H100 = "NVIDIA H100 80GB HBM3"
T4 = "Tesla T4"
L4 = "NVIDIA L4"
RTX4090 = "NVIDIA GeForce RTX 4090"
#: the mixed clusters of the golden paths, by node index of ``scenarios.healthy(3)`` (cp-1, gpu-node-1, gpu-node-2):
#: an H100 control plane beside a T4 and a GeForce RTX 4090 worker (the issue's cluster), and the same without the
#: H100 (no node reports memory temperature or NVLink: R04 excuses those panels by the table)
MIXES: dict[str, tuple[str, str, str]] = {
    "h100-t4-rtx4090": (H100, T4, RTX4090),
    "l4-t4-rtx4090": (L4, T4, RTX4090),
}


def product_label(model: str) -> str:
    """GPU feature discovery's ``nvidia.com/gpu.product`` for NVML's product name ``model`` (``sanitise``)."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", model).split())


def with_models(objects: list[Obj], models: Mapping[str, str]) -> list[Obj]:
    """``objects`` with each Node named in ``models`` labelled with its model's product (copies; others as they are)."""
    out = []
    for obj in objects:
        name = (obj.get("metadata") or {}).get("name")
        if obj.get("kind") == "Node" and name in models:
            obj = copy.deepcopy(obj)
            obj["metadata"]["labels"]["nvidia.com/gpu.product"] = product_label(models[name])
        out.append(obj)
    return out
