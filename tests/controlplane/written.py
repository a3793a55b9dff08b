"""The DaemonSets' pods of a scenario written as their controller and kubelet would write them, for the 1,000-node
benchmark (scripts/bench_controlplane.py ``--daemonset-pods written``).

At 1,000 kwok nodes a healthy scenario has ~9,000 DaemonSet pods. Made by the real DaemonSet controller, bound by the
real scheduler and run by kwok, they took more than an hour on the 2-core machine this project is built on (four
attempts, 2026-11-29: pods still Pending after 50 minutes, the scheduler and controller-manager losing their leases
under load). What the benchmark measures is gpustack's reads of a cluster holding them, which do not depend on who
wrote them. So, with the controller-manager's ``daemonset-controller`` off (:data:`CONTROLLER_ARGS`), this module
writes what that controller and the kubelet would:

- each pod with the DaemonSet's template, its labels, the controller owner reference (uid, ``controller`` and
  ``blockOwnerDeletion``, as ``pkg/controller/controller_utils.go`` ``GetPodFromTemplate`` sets them) and
  ``spec.nodeName`` (the real controller pins each pod to its node with a ``metadata.name`` node affinity and the
  scheduler binds it there: the same node);
- the pod's status as the scenario holds it (Running, Ready, the pod IP): what the kubelet reports, and what kwok's
  ``pod-ready`` stage would write (its selector skips a pod that already has a pod IP);
- each DaemonSet's status from the scenario with ``observedGeneration`` = its generation, as the controller's
  ``updateDaemonSetStatus`` writes it.

Every other object (Deployments, StatefulSets, Services, mirror pods, nodes) still goes through the real controllers
and kwok (:mod:`tests.controlplane.load`).
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpustack.runners.kube import Kube
from tests.fakes.scenarios import Scenario

Obj = dict[str, Any]
#: appended to kubeadm's ``--controllers=*,bootstrapsigner,tokencleaner`` (a string slice: a second flag appends)
CONTROLLER_ARGS = ["--controllers=-daemonset-controller"]
MERGE = "application/merge-patch+json"


def _ds_owner(pod: Obj) -> tuple[str, str] | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "DaemonSet":
            return str(pod["metadata"].get("namespace", "")), str(ref.get("name"))
    return None


def pod_for(ds: Obj, scenario_pod: Obj) -> Obj:
    """The pod the DaemonSet controller creates on the scenario pod's node (its name, the template, the owner)."""
    meta = ds["metadata"]
    template = ds["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    spec["nodeName"] = scenario_pod["spec"]["nodeName"]
    labels = {**(template.get("metadata") or {}).get("labels", {}), **scenario_pod["metadata"].get("labels", {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": scenario_pod["metadata"]["name"], "namespace": meta["namespace"], "labels": labels,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta["name"],
                                              "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]},
            "spec": spec}  # fmt: skip


def write_daemonset_pods(kube: Kube, scenario: Scenario, *, workers: int = 8) -> int:
    """Create the scenario's DaemonSet pods and their status, then the DaemonSets' status; the pods written."""
    daemonsets = {(d["metadata"]["namespace"], d["metadata"]["name"]): d
                  for d in kube.list_all("/apis/apps/v1/daemonsets")}  # fmt: skip
    pods = [(daemonsets[key], p) for p in scenario.objects
            if p["kind"] == "Pod" and (key := _ds_owner(p)) is not None and key in daemonsets]  # fmt: skip

    def one(item: tuple[Obj, Obj]) -> None:
        ds, p = item
        pod = pod_for(ds, p)
        path = f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods"
        kube.request("POST", path, body=pod)
        kube.request("PATCH", f"{path}/{pod['metadata']['name']}/status", body={"status": p.get("status") or {}},
                     content_type=MERGE)  # fmt: skip

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, pods))
    wanted = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in scenario.objects
              if o["kind"] == "DaemonSet"}  # fmt: skip
    for key, ds in daemonsets.items():
        status = dict((wanted.get(key) or {}).get("status") or {})
        status["observedGeneration"] = ds["metadata"].get("generation", 1)
        path = f"/apis/apps/v1/namespaces/{key[0]}/daemonsets/{key[1]}/status"
        kube.request("PATCH", path, body={"status": status}, content_type=MERGE)
    return len(pods)
