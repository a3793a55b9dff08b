#!/usr/bin/python
"""gpustack_served_cert: does a TLS server (the API server) serve the certificate in a file? (read-only)"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpustack_served_cert
short_description: Tell whether a TLS server serves the certificate of a PEM file, optionally waiting for it
description:
  - Compares the first certificate of C(path) with the certificate C(host):C(port) presents in a TLS handshake
    (nothing is trusted or sent). With C(wait) > 0 it retries until they match or C(wait) seconds passed.
  - Changes nothing (C(changed=false)); runs in check mode. Never fails: the caller judges C(matches).
options:
  host:
    description: Address of the TLS server.
    type: str
    required: true
  port:
    description: Its port.
    type: int
    default: 6443
  path:
    description: The PEM certificate file the server should serve.
    type: str
    required: true
  wait:
    description: Seconds to wait for a match (0 asks once).
    type: float
    default: 0
author: gpustack
"""

EXAMPLES = r"""
- name: Wait until the API server serves the renewed certificate
  gpustack_served_cert:
    host: "{{ gpustack_node_address }}"
    path: /etc/kubernetes/pki/apiserver.crt
    wait: 300
  register: served
"""

RETURN = r"""
matches:
  description: The server presents exactly the file's certificate.
  type: bool
  returned: always
file:
  description: sha256 of the file's certificate (DER), empty when unreadable.
  type: str
  returned: always
served:
  description: sha256 of the served certificate (DER), empty when nothing answered.
  type: str
  returned: always
waited:
  description: Seconds spent.
  type: float
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.gpustack_served import wait_served  # noqa: E402


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "port": {"type": "int", "default": 6443},
            "path": {"type": "str", "required": True},
            "wait": {"type": "float", "default": 0.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    found = wait_served(p["host"], p["port"], p["path"], p["wait"])
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
