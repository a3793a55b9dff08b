"""Real multi-host test bed: Debian 12 hosts as systemd-nspawn containers on one bridge.

Needed on the machine (Debian 12, root):

    apt-get update
    apt-get install -y debootstrap systemd-container iproute2 iptables util-linux \
        openssh-client gnupg dpkg-dev apt-utils gcc libc6-dev
    pip install pytest paramiko

(util-linux gives nsenter; apt-utils gives apt-ftparchive; gcc/libc6-dev build the small
LD_PRELOAD library that fakes /proc/modules; paramiko is not needed by the test bed itself,
only by product code that talks SSH to the hosts.)

Modules: :mod:`.rootfs` (cached root), :mod:`.network` (bridge, firewall, machine lock),
:mod:`.hosts` (``Testbed``, ``Host``), :mod:`.prepare` (pre-boot hooks), :mod:`.services`
(signed APT repo, HTTP file server, forward proxy), :mod:`.pytest_plugin` (pytest fixtures).
"""
