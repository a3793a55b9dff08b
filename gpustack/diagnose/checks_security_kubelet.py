"""The ``security`` layer's kubelet checks: the CIS Kubernetes Benchmark's 4.2.x items (kube-bench ``cfg/cis-1.12``
node.yaml), judged on every node from the host facts (``cis_files.kubelet``: the running kubelet's command line and its
config file, playbooks/module_utils/gpustack_cis_files.py) with kube-bench's semantics (gpustack/diagnose/cis_kubelet.py).

- ``pass`` when every node whose kubelet was read meets it (the value as evidence);
- ``fail`` per node that does not, with the value as it is and the fix (the config file key, and the
  ``kubelet-config`` ConfigMap kubeadm writes it from);
- ``warn`` instead where gpustack.yaml relaxes it (the setting named) or gpustack leaves it on purpose (the reason:
  docs/configuration.md lists them);
- ``skip`` without host facts (``doctor --layer security`` alone reads only the API) or with no kubelet on any node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from gpustack.checks.model import Finding
from gpustack.diagnose import cis_kubelet as ck
from gpustack.diagnose.checks_security import security_settings
from gpustack.diagnose.checks_security_files import NO_FACTS
from gpustack.diagnose.registry import CheckFn, register
from gpustack.diagnose.snapshot import Snapshot

LAYER = "security"
KEEP = (
    "and in kubeadm's kubelet-config ConfigMap (kubectl -n kube-system edit configmap kubelet-config), which `kubeadm "
    "join`/`upgrade` write the file from; gpustack renders it from gpustack.yaml (gpustack/render/security.py)"
)


def kubelet_of(facts: Mapping[str, Any]) -> tuple[list[str], dict[str, Any] | None, str] | None:
    """(command line, parsed config or None, where the command line came from) of one node's kubelet; None when the
    facts hold no kubelet (not read, or no kubelet installed)."""
    cis = facts.get("cis_files")
    kubelet = cis.get("kubelet") if isinstance(cis, Mapping) else None
    if not isinstance(kubelet, Mapping):
        return None
    argv = [str(a) for a in kubelet.get("argv") or [] if isinstance(a, str | int | float)]
    text = kubelet.get("config")
    config: dict[str, Any] | None = None
    if isinstance(text, str):
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError:
            loaded = None
        config = loaded if isinstance(loaded, dict) else None
    if not argv and config is None:
        return None
    source = {"process": "the running kubelet", "unit": "the kubelet unit (not running)"}.get(
        str(kubelet.get("source")), "no command line"
    )
    return argv, config, source


def judge(rule: ck.Rule, snap: Snapshot) -> list[Finding]:
    check = rule.check_id
    hosts = {n: f for n, f in sorted(snap.hosts.items()) if isinstance(f, Mapping)}
    if not hosts:
        return [Finding(check, LAYER, "skip", NO_FACTS)]
    relaxed = rule.relaxed(security_settings(snap)) if rule.relaxed else None
    out: list[Finding] = []
    passed: list[str] = []
    evidence = ""
    for node, facts in hosts.items():
        read = kubelet_of(facts)
        if read is None:
            continue
        argv, config, source = read
        ok, shown = ck.judge(rule, argv, config)
        if ok:
            passed.append(node)
            evidence = evidence or shown
            continue
        where = f"{shown} ({source} on {node})"
        left = rule.left(config or {}) if rule.left else None
        if relaxed or left:
            out.append(Finding(check, LAYER, "warn", f"CIS {rule.cis} not met, {'relaxed' if relaxed else 'left'} "
                               f"on purpose: {rule.text}", host=node, evidence=f"{where}; {relaxed or left}",
                               fix=f"to meet it anyway: {rule.fix}"))  # fmt: skip
        else:
            out.append(Finding(check, LAYER, "fail", f"CIS {rule.cis} not met: {rule.text}", host=node, evidence=where,
                               fix=f"on {node}: {rule.fix} in {ck.CONFIG}, then `systemctl restart kubelet`; {KEEP}"))  # fmt: skip
    if not passed and not out:
        return [Finding(check, LAYER, "skip", f"CIS {rule.cis}: no kubelet on any node whose facts were read")]
    if not out:
        out.append(Finding(check, LAYER, "pass", f"CIS {rule.cis}: {evidence}", evidence=f"on {', '.join(passed)}"))
    return out


def _register(rule: ck.Rule) -> CheckFn:
    title = f"CIS {rule.cis}: {rule.text.rsplit(' (', 1)[0]}"

    def check(snap: Snapshot) -> list[Finding]:
        return judge(rule, snap)

    check.__name__ = check.__qualname__ = rule.name.replace("-", "_")
    reads = "host facts: cis_files.kubelet (the kubelet's command line, /var/lib/kubelet/config.yaml)"
    return register(rule.check_id, LAYER, title=title, reads=reads)(check)


for _rule in ck.RULES:
    _register(_rule)
