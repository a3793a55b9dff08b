"""The containerd stage's release path on a real host: containerd 2.1 and runc 1.3 (Debian
forky's builds, served by the bed's file server in the upstream release layout with the test's
own sha256) replace the host's containerd 1.6; config version 3 with SystemdCgroup, the Kubernetes
minor's sandbox image and runc's BinaryName; the CRI plugin loads; a converged re-run changes
nothing; a checksum mismatch stops the run naming the artifact. On a Debian 12 host and on a
Debian 13 host (~80 s each, plus a one-off Debian 13 root build of a few minutes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib
import yaml

from gpustack.config import pins

from .cluster import up, write_config
from .hosts import Testbed
from .pytest_plugin import TestbedFactory
from .services import Sources


@pytest.mark.parametrize(("suite", "distro_containerd"), [("bookworm", "1.6"), ("trixie", "1.7")])
def test_containerd2_from_release_archives(
    testbed_factory: TestbedFactory,
    tmp_path: Path,
    sources: Sources,
    request: pytest.FixtureRequest,
    suite: str,
    distro_containerd: str,
) -> None:
    root = request.getfixturevalue("rootfs_trixie") if suite == "trixie" else None
    bed: Testbed = testbed_factory(["rt1"], **({"rootfs": root} if root else {}))
    host = bed.hosts[0]
    runtime = sources.runtime
    assert runtime is not None
    # the root's own containerd is the distribution's (Debian 12: 1.6, Debian 13: 1.7)
    installed = host.sudo("containerd --version", check=True).stdout.split()[2]
    assert installed.startswith(distro_containerd)
    cfg = write_config(bed, tmp_path / "gpustack.yaml", sources)
    state = tmp_path / "state"

    first = up(cfg, state, "--only", "os,containerd")
    assert first.rc == 0, first.output
    findings = {f["id"]: f for f in json.loads((first.last_run_dir() / "preflight.json").read_text())}
    assert findings["P18-containerd"]["status"] == "warn"
    assert f"containerd {installed.split('~')[0]} is installed" in findings["P18-containerd"]["summary"]
    assert findings["P01-os"]["status"] == "pass"
    # the bed's kernel runs cgroup v1: the check fires on the real host (downgraded by write_config)
    assert findings["P17-cgroup-v2"]["status"] == "warn" and "(ignored)" in findings["P17-cgroup-v2"]["summary"]
    assert first.summary()["containerd"]["changed"] > 0

    # containerd 2 runs from /usr/local/bin under gpustack's unit
    version = host.sudo("ctr version", check=True).stdout
    server = version.split("Server:", 1)[1]
    assert f"Version:  {runtime.containerd_version}" in server or runtime.containerd_version in server
    assert host.run("systemctl is-active containerd", check=True).stdout.strip() == "active"
    unit = host.sudo("systemctl show -p ExecStart containerd", check=True).stdout
    assert "/usr/local/bin/containerd" in unit
    # the CRI plugin loaded (containerd 2 splits it: runtime, images and the gRPC service)
    plugins = host.sudo("ctr plugins ls", check=True).stdout
    cri = [line.split() for line in plugins.splitlines() if line.split()[:2] == ["io.containerd.grpc.v1", "cri"]]
    assert cri and cri[0][-1] == "ok", plugins
    runtime_plugin = [
        line.split() for line in plugins.splitlines() if line.split()[:2] == ["io.containerd.cri.v1", "runtime"]
    ]
    assert runtime_plugin and runtime_plugin[0][-1] == "ok", plugins
    # runc: checksum-verified binary where BinaryName points
    assert host.sudo("sha256sum /usr/local/sbin/runc", check=True).stdout.split()[0] == runtime.runc_sha256
    if suite == "trixie":  # forky's runc needs glibc 2.38: it runs on Debian 13, not on Debian 12
        assert runtime.runc_version in host.sudo("/usr/local/sbin/runc --version", check=True).stdout
    # config version 3 with our three settings
    conf = tomllib.loads(host.sudo("cat /etc/containerd/config.toml", check=True).stdout)
    assert conf["version"] == 3
    runc = conf["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]["options"]
    assert runc["SystemdCgroup"] is True and runc["BinaryName"] == "/usr/local/sbin/runc"
    sandbox = conf["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"]
    assert sandbox == f"registry.k8s.io/pause:{pins.KUBERNETES_LINES['1.36'].pause}"
    # containerd itself reports the sandbox image it uses (its merged view of the config)
    assert sandbox in host.sudo("/usr/local/bin/containerd config dump", check=True).stdout
    # the distribution's version 2 file was kept as a backup
    assert host.sudo("ls /etc/containerd/ | grep -c 'config.toml\\..*~'", check=False).stdout.strip() != "0"

    # converged: nothing changes on a second run
    second = up(cfg, state, "--only", "os,containerd")
    assert second.rc == 0, second.output
    assert all(v == 0 for v in second.changed().values()), second.changed()

    # a checksum that does not match stops the run and names the artifact
    data = yaml.safe_load(cfg.read_text())
    data["versions"]["containerd_sha256"] = {"amd64": "0" * 64}
    host.sudo("rm -f /var/cache/gpustack/downloads/containerd-*.tar.gz", check=True)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    third = up(bad, state, "--only", "containerd")
    assert third.rc != 0
    assert f"containerd-{runtime.containerd_version}-linux-amd64.tar.gz" in third.output
    assert "checksum" in third.output.lower() and "did not match" in third.output
    # nothing half-changed: the running containerd is still the verified one
    assert runtime.containerd_version in host.sudo("ctr version", check=True).stdout
