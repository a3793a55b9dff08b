#!/usr/bin/python
"""gpustack_netfilter_cleanup: remove the iptables chains Kubernetes and its network plugins made
(and only them), for ``gpustack reset``. See DOCUMENTATION.

Pure functions (``parse_save``, ``plan``) are unit-tested with recorded ``iptables-save`` output;
``main`` runs iptables. Standard library only (Python 3.8+ on the target).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

DOCUMENTATION = r"""
---
module: gpustack_netfilter_cleanup
short_description: Remove the iptables chains made by kube-proxy, kubelet, Flannel and CNI plugins
description:
  - For each table (filter, nat, mangle, raw) of IPv4 and IPv6, reads C(iptables-save), finds the
    user chains whose names start with one of O(prefixes), deletes the rules of OTHER chains that
    jump to them (for example C(-A INPUT -j KUBE-FIREWALL)), then flushes and deletes those chains.
  - Never flushes a built-in chain or a table, never changes a chain policy, never touches a rule
    that does not jump to a removed chain. SSH and the host's own firewall rules stay as they are.
  - Supports check mode (reports what it would remove).
options:
  prefixes:
    description: Chain name prefixes to remove.
    type: list
    elements: str
    default: [KUBE-, FLANNEL, CNI-]
  families:
    description: Address families to clean.
    type: list
    elements: str
    choices: [ipv4, ipv6]
    default: [ipv4, ipv6]
author: gpustack
"""

EXAMPLES = r"""
- name: Remove the chains Kubernetes made
  gpustack_netfilter_cleanup:
"""

RETURN = r"""
removed:
  description: Per family and table, the rules deleted and the chains removed.
  type: dict
  returned: always
"""

TABLES = ("filter", "nat", "mangle", "raw")
BUILTIN = frozenset({"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"})
BINARIES = {"ipv4": "iptables", "ipv6": "ip6tables"}


def parse_save(text):
    """``iptables-save -t TABLE`` output -> (chains in order, rules as (chain, argv-after-chain))."""
    chains = []
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(":"):
            chains.append(line[1:].split()[0])
        elif line.startswith("-A "):
            argv = shlex.split(line)
            rules.append((argv[1], argv[2:]))
    return chains, rules


def _target(argv):
    for flag in ("-j", "--jump", "-g", "--goto"):
        if flag in argv:
            i = argv.index(flag)
            if i + 1 < len(argv):
                return argv[i + 1]
    return None


def ours(chain, prefixes):
    return chain not in BUILTIN and any(chain.startswith(p) for p in prefixes)


def plan(text, prefixes):
    """What to do for one table: (rules to delete as (chain, argv), chains to flush and delete).

    Rules inside the removed chains go with their chain (flush); only rules in chains that stay
    and jump into a removed chain are deleted one by one."""
    chains, rules = parse_save(text)
    doomed = [c for c in chains if ours(c, prefixes)]
    deletions = [(chain, argv) for chain, argv in rules if not ours(chain, prefixes) and _target(argv) in doomed]
    return deletions, doomed


def _run(module, argv, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        module.fail_json(msg=f"{' '.join(argv)} failed: {proc.stderr.strip()}", rc=proc.returncode)
    return proc


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "prefixes": {"type": "list", "elements": "str", "default": ["KUBE-", "FLANNEL", "CNI-"]},
            "families": {"type": "list", "elements": "str", "default": ["ipv4", "ipv6"]},
        },
        supports_check_mode=True,
    )
    prefixes = module.params["prefixes"]
    removed = {}
    changed = False
    for family in module.params["families"]:
        binary = BINARIES.get(family)
        if binary is None:
            module.fail_json(msg=f"unknown family {family}")
        if shutil.which(binary) is None or shutil.which(binary + "-save") is None:
            continue
        for table in TABLES:
            save = _run(module, [binary + "-save", "-t", table], check=False)
            if save.returncode != 0:  # table not present in this kernel / backend
                continue
            deletions, doomed = plan(save.stdout, prefixes)
            if not deletions and not doomed:
                continue
            changed = True
            removed.setdefault(family, {})[table] = {
                "rules": [" ".join(["-A", chain, *argv]) for chain, argv in deletions],
                "chains": doomed,
            }
            if module.check_mode:
                continue
            for chain, argv in deletions:
                _run(module, [binary, "-w", "-t", table, "-D", chain, *argv])
            for chain in doomed:
                _run(module, [binary, "-w", "-t", table, "-F", chain])
            for chain in doomed:
                _run(module, [binary, "-w", "-t", table, "-X", chain])
    module.exit_json(changed=changed, removed=removed)


if __name__ == "__main__":
    main()
