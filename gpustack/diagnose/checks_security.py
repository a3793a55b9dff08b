"""The ``security`` layer: the CIS Kubernetes Benchmark's control-plane checks judged from the API (doctor).

Each control-plane component of a kubeadm cluster is a static pod the kubelet mirrors into kube-system (label
``component``: kube-apiserver, kube-controller-manager, kube-scheduler, etcd) with its manifest's spec, so the
flags each one runs with are its mirror pod's command line. One check per benchmark item
(:data:`gpustack.diagnose.cis.RULES`, ids ``S<cis id>-<name>``, kube-bench ``cfg/cis-1.12``), plus 2.7 (etcd's own
CA), each judged on every control plane:

- ``pass`` when every control plane meets it (the flag as evidence);
- ``fail`` per control plane that does not, with the flag as it is and the fix (the manifest to edit and the
  kubeadm setting that keeps it across ``join``/``upgrade``);
- ``warn`` instead of ``fail`` where gpustack.yaml relaxes it on purpose (a ``security:`` setting changed from its
  default: it names the setting) or where gpustack leaves it on every cluster (the reason; docs/configuration.md);
- ``skip`` when no mirror pod of the component is in the API (not a kubeadm control plane, or a managed one) or its
  command line is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack.checks.model import Finding
from gpustack.diagnose import cis
from gpustack.diagnose.objects import as_dict, as_list
from gpustack.diagnose.registry import CheckFn, register
from gpustack.diagnose.snapshot import Obj, Snapshot

LAYER = "security"
APPLY = (
    "then make kubeadm keep it: the same flag in the kubeadm-config ConfigMap's ClusterConfiguration "
    "(kubectl -n kube-system edit configmap kubeadm-config; gpustack renders it from gpustack.yaml's security:), "
    "else the next `kubeadm upgrade` or control-plane join writes the manifest without it"
)


Index = dict[str, dict[str, "list[str] | None"]]
#: the last snapshot's Pod list, its length and its control-plane mirror pods (:func:`_index`): the 40 checks read
#: one scan of the pods, not one each (30,000 pods at 1,000 nodes)
_LAST: list[tuple[list[Obj], int, Index]] = []


def _index(snap: Snapshot) -> Index:
    """Component -> control-plane node -> its command line (its container's command and args; None when empty)."""
    pods = as_list(snap.items("Pod"))
    if _LAST and _LAST[0][0] is pods and _LAST[0][1] == len(pods):
        return _LAST[0][2]
    out: Index = {}
    for pod in pods:  # a saved or hand-edited snapshot may hold anything: only mappings are read
        md = as_dict(as_dict(pod).get("metadata"))
        if md.get("namespace") != "kube-system":
            continue
        component = as_dict(md.get("labels")).get("component")
        if not isinstance(component, str) or component not in cis.COMPONENTS:
            continue
        spec = as_dict(as_dict(pod).get("spec"))
        containers = [c for c in as_list(spec.get("containers")) if isinstance(c, Mapping)]
        mine = next((c for c in containers if c.get("name") == component), containers[0] if containers else {})
        argv = [str(a) for a in [*as_list(mine.get("command")), *as_list(mine.get("args"))]]
        out.setdefault(str(component), {})[str(spec.get("nodeName") or md.get("name") or "?")] = argv or None
    _LAST[:] = [(pods, len(pods), out)]
    return out


def mirror_pods(snap: Snapshot, component: str) -> dict[str, list[str] | None]:
    """Control-plane node -> the component's command line (its container's command and args), None when empty."""
    return dict(sorted(_index(snap).get(component, {}).items()))


def security_settings(snap: Snapshot) -> Mapping[str, Any]:
    """gpustack.yaml's ``security:`` as the collection recorded it ({}: its defaults, e.g. a replayed snapshot)."""
    sec = snap.settings.get("security") if isinstance(snap.settings, Mapping) else None
    return sec if isinstance(sec, Mapping) else {}


def _unjudged(check: str, component: str, pods: Mapping[str, list[str] | None]) -> list[Finding]:
    if not pods:
        return [Finding(check, LAYER, "skip", f"no {component} mirror pod in kube-system: not a kubeadm control plane "
                        "(or a managed one), nothing to judge from the API")]  # fmt: skip
    return [Finding(check, LAYER, "skip", f"{component}'s mirror pod shows no command line", host=node,
                    evidence=f"pod {component}-{node}: its container has no command or args")
            for node, argv in pods.items() if argv is None]  # fmt: skip


def judge(rule: cis.Rule, snap: Snapshot) -> list[Finding]:
    check = rule.check_id
    pods = mirror_pods(snap, rule.component)
    out = _unjudged(check, rule.component, pods)
    if not pods:
        return out
    manifest = cis.MANIFEST.format(component=rule.component)
    relaxed = rule.relaxed(security_settings(snap)) if rule.relaxed else None
    passed: list[str] = []
    evidence = ""
    for node, argv in pods.items():
        if argv is None:
            continue
        ok, shown = rule.judge(cis.parse_flags(argv))
        if ok:
            passed.append(node)
            evidence = evidence or shown
            continue
        where = f"{shown} ({rule.component} on {node}, {manifest})"
        if relaxed or rule.left:
            out.append(Finding(check, LAYER, "warn", f"CIS {rule.cis} not met, {'relaxed' if relaxed else 'left'} "
                               f"on purpose: {rule.text}", host=node,
                               evidence=f"{where}; {relaxed or rule.left}",
                               fix=f"to meet it anyway: {rule.fix}"))  # fmt: skip
        else:
            out.append(Finding(check, LAYER, "fail", f"CIS {rule.cis} not met: {rule.text}", host=node, evidence=where,
                               fix=f"on {node}: {rule.fix} in {manifest} (the kubelet restarts the pod); {APPLY}"))  # fmt: skip
    if passed and len(passed) == len(pods):
        out.append(Finding(check, LAYER, "pass", f"CIS {rule.cis}: {evidence}", evidence=f"on {', '.join(passed)}"))
    return out


def _register(rule: cis.Rule) -> CheckFn:
    title = f"CIS {rule.cis}: {rule.text.rsplit(' (', 1)[0]}"
    reads = f"{rule.component} mirror pods (kube-system): command line"

    def check(snap: Snapshot) -> list[Finding]:
        return judge(rule, snap)

    check.__name__ = check.__qualname__ = rule.name.replace("-", "_")
    return register(rule.check_id, LAYER, title=title, reads=reads, needs=("Pod",))(check)


for _rule in cis.RULES:
    _register(_rule)


@register("S2.7-etcd-unique-ca", LAYER, title="CIS 2.7: Ensure that a unique Certificate Authority is used for etcd",
          reads="etcd and kube-apiserver mirror pods (kube-system): --trusted-ca-file, --client-ca-file",
          needs=("Pod",))  # fmt: skip
def etcd_unique_ca(snap: Snapshot) -> list[Finding]:
    """etcd's ``--trusted-ca-file`` set and not the API server's ``--client-ca-file`` on the same node (kube-bench
    tests only that it is set; the benchmark's text asks for a CA of etcd's own, as kubeadm makes: etcd/ca.crt)."""
    check = "S2.7-etcd-unique-ca"
    etcd = mirror_pods(snap, "etcd")
    out = _unjudged(check, "etcd", etcd)
    api = mirror_pods(snap, "kube-apiserver")
    ok_nodes = []
    for node, argv in etcd.items():
        if argv is None:
            continue
        trusted = cis.parse_flags(argv).get("trusted-ca-file")
        client_ca = cis.parse_flags(api.get(node) or []).get("client-ca-file")
        if not trusted:
            why = "--trusted-ca-file not set"
        elif client_ca and trusted == client_ca:
            why = f"--trusted-ca-file={trusted} is also the API server's --client-ca-file"
        else:
            ok_nodes.append(node)
            continue
        out.append(Finding(check, LAYER, "fail", "CIS 2.7 not met: etcd does not use a CA of its own", host=node,
                           evidence=f"{why} (etcd on {node}, {cis.MANIFEST.format(component='etcd')})",
                           fix="etcd's own CA as kubeadm makes it: --trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt "
                           "--peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt, its server and peer certificates "
                           "signed by it (kubeadm init phase certs etcd-ca, etcd-server, etcd-peer)"))  # fmt: skip
    if ok_nodes and len(ok_nodes) == len(etcd):
        out.append(Finding(check, LAYER, "pass", "CIS 2.7: etcd trusts a CA of its own, not the cluster's client CA",
                           evidence=f"on {', '.join(ok_nodes)}"))  # fmt: skip
    return out
