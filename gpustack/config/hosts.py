"""The ``hosts`` section: what gpustack keeps still on every node between its own runs.

``hold_kernel`` (opt-in, as the issue asks: "An opt-in ``hosts.hold_kernel`` applies the hold at ``up``") holds, on
every node, the installed kernel meta packages (``linux-image-amd64``, ``linux-image-generic``...: they bring each new
kernel), the running kernel's image package and the installed NVIDIA driver packages (``nvidia-*``, ``libnvidia-*``,
``cuda-drivers*``: the packages preflight P21 names for ``apt-mark hold``), so unattended-upgrades cannot install a
kernel without its headers or a driver under the loaded module of a running GPU node. ``gpustack node patch`` releases
the kernel's holds for its upgrade (headers first, reboot, the GPUs back) and holds the new kernel again.
docs/decisions.md, "Kernel holds at up".
"""

from __future__ import annotations

from pydantic import Field

from gpustack.config.fields import StrictModel


class Hosts(StrictModel):
    hold_kernel: bool = Field(
        default=False,
        description="hold each node's kernel and NVIDIA driver packages (apt-mark hold) so that only `gpustack node "
        "patch` moves the kernel; false releases the holds gpustack made",
    )
