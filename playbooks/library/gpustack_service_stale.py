#!/usr/bin/python
"""gpustack_service_stale: does a running service predate the files it runs with? (read-only)

A handler that restarts a service after its configuration changed is lost when the run that
notified it is interrupted (Ctrl-C, SIGKILL, a lost connection): the next run finds the file
already in place, notifies nothing, and the service keeps running the old configuration. This
module answers from the host's state instead of from the run's memory, so the restart cannot be
lost: the service is stale when any of its files changed (inode change time, which no tool can set
back, unlike mtime) after the service last started (systemd's InactiveExitTimestampMonotonic).
"""

from __future__ import annotations

import glob
import os
import subprocess
import time

DOCUMENTATION = r"""
---
module: gpustack_service_stale
short_description: Tell whether a running systemd service started before its files last changed
description:
  - Reads the service's start time from C(systemctl show) and the change time (ctime) of each
    path (globs allowed). Returns C(stale=true) when the service is active or activating and a
    path changed after it started; an inactive service is never stale (starting it reads the
    files anyway).
  - Changes nothing (C(changed=false)); runs in check mode.
options:
  name:
    description: The systemd unit (containerd, kubelet.service ...).
    type: str
    required: true
  paths:
    description: Files the service reads (configuration, unit, drop-ins, binaries); globs allowed; missing ones are ignored.
    type: list
    elements: str
    required: true
author: gpustack
"""

EXAMPLES = r"""
- name: Read whether containerd runs its current configuration
  gpustack_service_stale:
    name: containerd
    paths: [/etc/containerd/config.toml, /etc/systemd/system/containerd.service.d/*.conf]
  register: containerd_stale
"""

RETURN = r"""
stale:
  description: The service runs and started before one of the paths last changed.
  type: bool
  returned: always
reason:
  description: Why (the newest path and how much later it changed), or why not.
  type: str
  returned: always
"""


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show -p A -p B`` output -> {A: value, B: value}."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def started_at(show: dict[str, str], monotonic_now: float, real_now: float) -> float | None:
    """The wall-clock time the service last started, or None when it does not run. systemd keeps
    the start in CLOCK_MONOTONIC microseconds; converted with the current offset between the clocks."""
    if show.get("ActiveState") not in ("active", "activating", "reloading"):
        return None
    raw = show.get("InactiveExitTimestampMonotonic") or "0"
    if not raw.isdigit() or int(raw) == 0:
        return None
    return real_now - monotonic_now + int(raw) / 1e6


def verdict(started: float | None, changed: dict[str, float]) -> tuple[bool, str]:
    """(stale, reason) from the start time and each path's ctime."""
    if started is None:
        return False, "not running"
    if not changed:
        return False, "none of its files exist"
    newest = max(changed, key=lambda p: changed[p])
    late = changed[newest] - started
    if late > 0:
        return True, f"{newest} changed {late:.3f}s after the service started"
    return False, f"started after its files last changed ({newest} {-late:.3f}s before)"


def main() -> None:
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "paths": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    name = module.params["name"]
    proc = subprocess.run(
        ["systemctl", "show", name, "-p", "ActiveState", "-p", "InactiveExitTimestampMonotonic"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:  # no systemd to ask: nothing runs under it to be stale
        module.exit_json(changed=False, stale=False, reason=f"systemctl show {name}: {proc.stderr.strip()}")
    show = parse_show(proc.stdout)
    real_now, mono_now = time.time(), time.clock_gettime(time.CLOCK_MONOTONIC)
    changed: dict[str, float] = {}
    for pattern in module.params["paths"]:
        for path in glob.glob(pattern) or [pattern]:
            try:
                changed[path] = os.stat(path).st_ctime
            except OSError:
                continue
    stale, reason = verdict(started_at(show, mono_now, real_now), changed)
    module.exit_json(changed=False, stale=stale, reason=reason)


if __name__ == "__main__":
    main()
