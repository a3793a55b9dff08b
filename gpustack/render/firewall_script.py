"""``render --out``'s ``firewall/<node>.sh``: the gpustack-firewall script the firewall role installs on each node
(playbooks/roles/firewall/templates/gpustack-firewall.sh.j2), rendered from the same template with the role's
defaults and the run's extra vars, so the rules a run would load can be read (and diffed) before the run.

The role's defaults are Jinja expressions Ansible evaluates lazily with its own filters and tests; the few they
use (``search``, ``regex_replace``, ``difference``) are given here with Ansible's meaning, and each default is
evaluated in file order as a native value (Ansible's ``jinja2_native`` off still turns a list expression into a
list). The test bed compares this output with the script a real run installs (tests/testbed/test_firewall.py).
"""

from __future__ import annotations

import re
from typing import Any

import jinja2
import yaml
from jinja2.nativetypes import NativeEnvironment

from gpustack.config.model import Config
from gpustack.paths import resource_dir

#: what the script's first comment line says on a host (Ansible's default ``ansible_managed``)
ANSIBLE_MANAGED = "Ansible managed"


def _add_ansible_filters(env: jinja2.Environment) -> None:
    env.tests["search"] = lambda value, pattern: re.search(pattern, str(value)) is not None
    env.filters["regex_replace"] = lambda value, pattern, repl="": re.sub(pattern, repl, str(value))
    env.filters["difference"] = lambda a, b: [x for x in a if x not in b]


def _defaults(scope: dict[str, Any]) -> dict[str, Any]:
    """The firewall role's defaults, evaluated in order in ``scope`` (extra vars and host vars)."""
    env = NativeEnvironment(undefined=jinja2.StrictUndefined)
    _add_ansible_filters(env)
    raw = yaml.safe_load((resource_dir("playbooks") / "roles" / "firewall" / "defaults" / "main.yml").read_text())
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, str) and "{{" in value:
            value = env.from_string(value.strip()).render({**scope, **out})
        out[key] = value
    return out


def firewall_scripts(cfg: Config, ev: dict[str, Any]) -> dict[str, str]:
    """``firewall/<node>.sh`` -> the script, for every node (nothing when ``firewall.enabled`` is false)."""
    if not cfg.firewall.enabled:
        return {}
    template_path = resource_dir("playbooks") / "roles" / "firewall" / "templates" / "gpustack-firewall.sh.j2"
    # the template module's settings: trim_blocks on, the trailing newline kept
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    _add_ansible_filters(env)
    template = env.from_string(template_path.read_text())
    groups = {"control_plane": [n.name for n in cfg.control_planes], "workers": [n.name for n in cfg.workers]}
    out = {}
    for node in cfg.nodes:
        scope = {**ev, "inventory_hostname": node.name, "groups": groups, "gpustack_node_address": node.address}
        scope.update(_defaults(scope))
        out[f"firewall/{node.name}.sh"] = template.render({**scope, "ansible_managed": ANSIBLE_MANAGED})
    return out
