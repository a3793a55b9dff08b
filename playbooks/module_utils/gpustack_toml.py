"""TOML helpers shared by gpustack's Ansible plugins. Standard library only (Python 3.8+).

Two consumers, two ways in:

- ``library/gpustack_facts.py`` runs on the target: it imports
  ``from ansible.module_utils.gpustack_toml import split_key``; Ansible finds this file in the
  ``module_utils/`` directory next to the playbook and ships it inside the module's payload.
- ``filter_plugins/gpustack_containerd.py`` runs on the controller, where Ansible resolves no
  ``ansible.module_utils`` import of a playbook-adjacent file: it loads this file by its path.
"""

from __future__ import annotations


def split_key(key: str) -> tuple[str, ...]:
    """Split a dotted TOML key into its parts, honouring "double" and 'single' quotes."""
    parts: list[str] = []
    buf = ""
    quote = ""
    for ch in key.strip():
        if quote:
            if ch == quote:
                quote = ""
            else:
                buf += ch
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts.append(buf.strip())
            buf = ""
        else:
            buf += ch
    parts.append(buf.strip())
    return tuple(parts)
