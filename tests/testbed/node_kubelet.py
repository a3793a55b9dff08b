"""TEST DOUBLE: one test-bed host's kubelet, NVIDIA device plugin and GPU Operator pods as the fake API server
(tests/fakes/kube_api.py) sees them, played by this machine's test code for ``gpustack node patch`` on the bed
(tests/testbed/test_nodes.py). The bed's hosts run a kubelet double that talks to no API server and have no GPUs, so
this thread reads the real host and writes what a real node's components would report:

- the Node (``tests.unit.patch_cluster.gpu_node``: 8 ``nvidia.com/gpu`` allocatable) with the host's real
  ``/proc/sys/kernel/random/boot_id`` as ``status.nodeInfo.bootID`` (the kubelet reports cadvisor's ``BootID``,
  kubernetes ``pkg/kubelet/nodestatus/setters.go`` MachineInfo), and the GPU Operator's pods on it, Ready
  (``tests.unit.patch_cluster.operator_pods``);
- host down (no init to read, or its ``kubelet.service`` not active): the Node's Ready condition ``Unknown``
  (what the node lifecycle controller sets once the kubelet stops posting, reason ``NodeStatusUnknown``) and the
  GPU Operator's pods not Ready;
- host up again with a new boot id and the kubelet active: Ready, the new boot id, but no GPU allocatable and
  the operator's pods not Ready (the driver, device plugin and validator start after the kubelet), then after
  ``settle`` seconds the GPUs allocatable and the pods Ready again -- the state ``gpustack node patch`` waits for
  (gpustack/cluster/patch_wait.py ``not_back``).

``boots``: every boot id reported, in order; ``saw_down``: the host was seen down at least once.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.patch_cluster import gpu_node, operator_pods

from ._proc import TestbedError
from .hosts import Host

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
#: the kubelet active and the boot id, read inside the host (nsenter: no sshd needed, as the kubelet needs none)
READ = "systemctl is-active --quiet kubelet.service && cat /proc/sys/kernel/random/boot_id"


class HostKubelet:
    """The node ``host`` as its kubelet and GPU stack would report it to ``api``: :meth:`objects` seeded first, then
    ``with`` it (a thread that follows the host every ``interval`` seconds)."""

    def __init__(self, api: FakeKubeAPI, host: Host, *, gpus: int = 8, settle: float = 2.0, interval: float = 0.5):
        self.api, self.host, self.gpus, self.settle, self.interval = api, host, gpus, settle, interval
        self.boots: list[str] = []
        self.saw_down = False
        self.down = False
        self._back_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"kubelet-{host.name}", daemon=True)
        self.errors: list[str] = []

    def boot_id(self) -> str | None:
        """The host's boot id while its kubelet is active; None while it is down or booting."""
        try:
            proc = self.host.console_run(READ, timeout=10)
        except TestbedError:  # no init: between two boots
            return None
        out = proc.stdout.strip()
        return out if proc.returncode == 0 and out else None

    def objects(self) -> list[Obj]:
        """The Node as the host's kubelet registered it (its real boot id) and the GPU Operator's pods on it."""
        boot = self.boot_id()
        if boot is None:
            raise TestbedError(f"{self.host.name}: no active kubelet to play")
        self.boots.append(boot)
        return [gpu_node(self.host.name, gpus=self.gpus, boot=boot), *operator_pods(self.host.name)]

    def __enter__(self) -> HostKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    # --- what the node reports ----------------------------------------------------------------------------------

    def _node_status(self, *, ready: str, boot: str | None = None, gpus: int | None = None) -> None:
        node = self.api.get("v1", "Node", self.host.name)
        if node is None:
            return
        status = copy.deepcopy(node.get("status") or {})
        status["conditions"] = [
            {"type": "Ready", "status": ready, **({"reason": "NodeStatusUnknown"} if ready == "Unknown" else {})}
        ]
        if boot is not None:
            status.setdefault("nodeInfo", {})["bootID"] = boot
        if gpus is not None:
            status.setdefault("allocatable", {})[GPU] = str(gpus)
        self.api.set_status("v1", "Node", self.host.name, "", status)

    def _pods_ready(self, ready: bool) -> None:
        for pod in operator_pods(self.host.name, ready=ready):
            meta = pod["metadata"]
            if self.api.get("v1", "Pod", meta["name"], meta["namespace"]) is not None:
                self.api.set_status("v1", "Pod", meta["name"], meta["namespace"], pod["status"])

    def _tick(self) -> None:
        boot = self.boot_id()
        if boot is None:
            if not self.down:  # the kubelet stopped posting: the node lifecycle controller's Unknown
                self.down = self.saw_down = True
                self._node_status(ready="Unknown")
                self._pods_ready(False)
            return
        if boot != self.boots[-1]:  # the kubelet's first status after a boot: Ready, the GPU stack still starting
            self.boots.append(boot)
            self._node_status(ready="True", boot=boot, gpus=0)
            self._pods_ready(False)
            self._back_at = time.monotonic() + self.settle
        elif self.down:  # the kubelet back without a reboot
            self._node_status(ready="True")
            self._pods_ready(self._back_at is None)
        self.down = False
        if self._back_at is not None and time.monotonic() >= self._back_at:
            self._node_status(ready="True", gpus=self.gpus)
            self._pods_ready(True)
            self._back_at = None

    def _follow(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._tick()
            except Exception as exc:  # keep following; the test reads errors
                self.errors.append(repr(exc))
