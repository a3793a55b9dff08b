#!/usr/bin/env bash
# gpustack test bed helper (see tests/testbed/__init__.py). Needs root.
#
#   scripts/testbed.sh deps            install the Debian packages and pip packages it needs
#   scripts/testbed.sh rootfs          build (or check) the cached Debian 12 root
#   scripts/testbed.sh clean           remove leftovers of a crashed run (hosts, netns, links)
#   scripts/testbed.sh up NAME...      boot hosts for manual poking; Ctrl-C tears them down
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$here/tests${PYTHONPATH:+:$PYTHONPATH}"
python="${PYTHON:-python3}"

APT_PACKAGES=(debootstrap systemd-container iproute2 iptables util-linux openssh-client
              gnupg dpkg-dev apt-utils gcc libc6-dev curl)
PIP_PACKAGES=(pytest paramiko)

case "${1:-}" in
  deps)
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${APT_PACKAGES[@]}"
    "$python" -m pip install -q "${PIP_PACKAGES[@]}"
    ;;
  rootfs)
    "$python" -c 'from testbed.rootfs import ensure_rootfs; print(ensure_rootfs())'
    ;;
  clean)
    "$python" -c '
from testbed.network import TestbedNetwork
TestbedNetwork.acquire(timeout=60)  # takes the machine lock and removes stale state
TestbedNetwork.release()
print("clean")'
    ;;
  up)
    shift
    [ "$#" -gt 0 ] || { echo "usage: $0 up NAME..." >&2; exit 2; }
    "$python" - "$@" <<'EOF'
import shlex
import sys
import tempfile
import threading
from pathlib import Path

from testbed.hosts import Testbed

workdir = Path(tempfile.mkdtemp(prefix="gpustack-testbed-"))
with Testbed(sys.argv[1:], workdir) as bed:
    for host in bed.hosts:
        print(f"{host.name} {host.address}: {shlex.join(host.ssh_args())}")
    print(f"logs in {workdir}; Ctrl-C to tear down")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
EOF
    ;;
  *)
    sed -n '2,8p' "$0" >&2
    exit 2
    ;;
esac
