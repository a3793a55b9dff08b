"""Smoke test of the test bed itself: two real hosts, SSH, network, containerd, firewall and
sysctl rights, the signed APT repository through the proxy, and the /proc/modules fake."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator

import pytest

from ._proc import wait_for
from .hosts import Host, Testbed
from .prepare import FAKE_MODULES_PATH, fake_loaded_modules
from .pytest_plugin import K8S_VERSION, TestbedFactory
from .services import ForwardProxy, HelmTarball, HttpServer, K8sRepo

pytestmark = pytest.mark.testbed

KEYRING = "/etc/apt/keyrings/k8s-testbed.gpg"


@pytest.fixture
def bed(testbed_factory: TestbedFactory) -> Iterator[Testbed]:
    """Two hosts; the first one pretends the nouveau module is loaded."""
    yield testbed_factory(["tb1", "tb2"], prepare={"tb1": fake_loaded_modules(["nouveau"])})


def test_testbed_smoke(
    bed: Testbed,
    k8s_repo: K8sRepo,
    http_server: HttpServer,
    proxy: ForwardProxy,
    helm_tarball: HelmTarball,
) -> None:
    """All of the test bed's promises, on one pair of booted hosts."""
    first, second = bed.hosts
    for host in bed.hosts:
        _check_systemd_and_ssh(bed, host)
    _check_paramiko(bed, second)
    _check_hosts_reach_each_other(first, second)
    _check_no_way_out(first)
    _check_containerd(first)
    _check_network_admin(first)
    _check_signed_repo_through_proxy(first, k8s_repo, http_server, proxy)
    _check_proxy_rules(second, proxy, http_server)
    _check_helm_tarball(second, http_server, helm_tarball)
    _check_fake_modules(first, second)
    _check_files_and_sshd(second)


def _check_systemd_and_ssh(bed: Testbed, host: Host) -> None:
    state = host.run("systemctl is-system-running", check=False).stdout.strip()
    if state != "running":
        failed = host.run("systemctl --failed --no-legend --plain", check=False).stdout
        units = [line.split()[0] for line in failed.splitlines() if line.strip()]
        journal = "".join(host.run(f"journalctl -b -u {unit} --no-pager -n 30", check=False).stdout for unit in units)
        raise AssertionError(f"{host.name} is {state}:\n{failed}\n{journal}")
    assert host.run("hostname", check=True).stdout.strip() == host.name
    assert host.run("sudo -n id -u", check=True).stdout.strip() == "0"
    assert host.run("id -u", user="root", check=True).stdout.strip() == "0"
    keys = {h.read_file("/etc/ssh/ssh_host_ed25519_key.pub").split()[1] for h in bed.hosts}
    assert len(keys) == len(bed.hosts), "every host must have its own host key"
    ids = {h.read_file("/etc/machine-id").strip() for h in bed.hosts}
    assert len(ids) == len(bed.hosts), "every host must have its own machine id"
    unknown = host.run("true", known_hosts=bed.empty_known_hosts)
    assert unknown.returncode == 255
    assert "Host key verification failed" in unknown.stderr


def _check_paramiko(bed: Testbed, host: Host) -> None:
    """Product code may talk SSH through paramiko: same keys, strict host key checking."""
    import paramiko

    client = paramiko.SSHClient()
    client.load_host_keys(str(bed.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        host.address,
        username=host.user,
        key_filename=str(host.ssh_key),
        look_for_keys=False,
        allow_agent=False,
        timeout=10,
    )
    with client:
        _, stdout, _ = client.exec_command("hostname", timeout=10)
        assert stdout.read().decode().strip() == host.name
    stranger = paramiko.SSHClient()
    stranger.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException), stranger:
        stranger.connect(
            host.address,
            username=host.user,
            key_filename=str(host.ssh_key),
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )


def _check_hosts_reach_each_other(first: Host, second: Host) -> None:
    first.run(f"ping -c1 -W2 {second.address}", check=True)
    second.run(f"ping -c1 -W2 {first.name}", check=True)  # by name via /etc/hosts
    probe = f"python3 -c \"import socket; socket.create_connection(('{second.address}', 22), 3)\""
    first.run(probe, check=True)


def _check_no_way_out(host: Host) -> None:
    started = time.monotonic()
    code = (
        "import socket\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 80), timeout=3)\n"
        "    print('connected')\n"
        "except OSError as exc:\n"
        "    print('blocked', type(exc).__name__)\n"
    )
    out = host.run(f"python3 -c {shlex.quote(code)}", check=True).stdout
    assert out.startswith("blocked"), out
    assert time.monotonic() - started < 15
    assert host.run("getent hosts deb.debian.org").returncode != 0  # no DNS either


def _check_containerd(host: Host) -> None:
    host.sudo("systemctl restart containerd", check=True)
    out = host.sudo("ctr version", check=True).stdout
    assert "Server:" in out


def _check_network_admin(host: Host) -> None:
    host.sudo("sysctl -w net.bridge.bridge-nf-call-iptables=1", check=True)
    host.sudo("iptables -w -N TESTCHAIN && iptables -w -A TESTCHAIN -j RETURN", check=True)
    assert "-N TESTCHAIN" in host.sudo("iptables -w -S", check=True).stdout
    assert host.sudo("sysctl -w vm.swappiness=10").returncode != 0  # stays read-only


def _check_signed_repo_through_proxy(host: Host, repo: K8sRepo, server: HttpServer, proxy: ForwardProxy) -> None:
    before = proxy.count("/k8s/v1.36/deb/")
    via = f"-x {proxy.url}"
    host.sudo(
        f"mkdir -p /etc/apt/keyrings && curl -fsS {via} {repo.key_url(server.url)} | gpg --dearmor -o {KEYRING}",
        check=True,
    )
    host.sudo(f"echo '{repo.sources_line(server.url, KEYRING)}' > /etc/apt/sources.list.d/k8s-testbed.list", check=True)
    apt = f"apt-get -q -o Acquire::http::Proxy={proxy.url}"
    update = host.sudo(f"{apt} update", check=True)
    assert "NO_PUBKEY" not in update.stderr and "not signed" not in update.stderr, update.stderr
    policy = host.run("apt-cache policy kubeadm", check=True).stdout
    assert "1.36.5-1.1" in policy and f"{K8S_VERSION}-1.1" in policy, policy
    pin = f"{K8S_VERSION}-1.1"
    host.sudo(
        f"DEBIAN_FRONTEND=noninteractive {apt} install -y kubeadm={pin} kubelet={pin} kubectl={pin}",
        check=True,
        timeout=300,
    )
    host.sudo("systemctl enable --now kubelet", check=True)
    versions = host.run(
        "dpkg-query -W -f '${Package}=${Version}\\n' kubeadm kubelet kubectl", check=True
    ).stdout.split()
    assert sorted(versions) == [f"{p}={pin}" for p in ("kubeadm", "kubectl", "kubelet")]
    assert host.run("systemctl is-active kubelet").stdout.strip() == "active"
    assert proxy.count("/k8s/v1.36/deb/InRelease", status=200) >= 1
    assert proxy.count("/k8s/v1.36/deb/") > before
    assert any(r.client == host.address for r in proxy.requests)


def _check_proxy_rules(host: Host, proxy: ForwardProxy, server: HttpServer) -> None:
    tunnelled = host.run(f"curl -fsS -p -x {proxy.url} {server.url}/k8s/v1.36/deb/Release")
    assert tunnelled.returncode == 0 and "gpustack-testbed" in tunnelled.stdout, tunnelled.stderr
    assert proxy.count(f"{server.host}:{server.port}", status=200) >= 1  # CONNECT tunnel
    refused = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' -x {proxy.url} http://192.0.2.1/").stdout
    assert refused == "403"
    tunnel = host.run(f"curl -s -o /dev/null -x {proxy.url} https://deb.debian.org/")
    assert tunnel.returncode != 0
    assert proxy.count("192.0.2.1", status=403) >= 1
    assert proxy.count("deb.debian.org:443", status=403) >= 1


def _check_helm_tarball(host: Host, server: HttpServer, tarball: HelmTarball) -> None:
    url = server.url + tarball.url_path
    out = host.run(f"curl -fsS {url} | sha256sum", check=True).stdout.split()[0]
    assert out == tarball.sha256
    listing = host.run(f"curl -fsS {url} | tar -tzvf -", check=True).stdout
    assert "linux-amd64/helm" in listing and "rwxr-xr-x" in listing


def _check_fake_modules(with_fake: Host, without: Host) -> None:
    assert "nouveau" in with_fake.run("cat /proc/modules", check=True).stdout
    assert with_fake.run("grep -q '^nouveau ' /proc/modules").returncode == 0
    assert "nouveau" in with_fake.run("lsmod").stdout
    slurp = "python3 -c \"print(open('/proc/modules').read())\""
    assert "nouveau" in with_fake.run(slurp, check=True).stdout
    assert without.run("cat /proc/modules").returncode != 0  # this kernel has no modules
    with_fake.write_file(FAKE_MODULES_PATH, "")
    assert "nouveau" not in with_fake.run("cat /proc/modules").stdout


def _check_files_and_sshd(host: Host) -> None:
    host.write_file("/etc/gpustack-smoke/hello.txt", "hello\n")
    assert host.run("cat /etc/gpustack-smoke/hello.txt", check=True).stdout == "hello\n"
    host.run("echo back > /tmp/back.txt", check=True)
    assert host.read_file("/tmp/back.txt") == "back\n"
    host.stop_sshd()
    refused = host.run("true")
    assert refused.returncode == 255 and "refused" in refused.stderr, refused.stderr
    host.start_sshd()
    wait_for(lambda: True if host.run("true").returncode == 0 else None, timeout=20, what="sshd to answer again")
