"""Air-gapped install on a real host: `gpustack bundle create` on this (connected) machine fetches
from sources the test serves on loopback (tests/fakes/bundle_sources.py: an OCI registry with real
images, a chart repository packaged by the real helm, a signed OS archive, the Kubernetes
repository with the test doubles; containerd/runc are Debian forky's real builds from the bed's
file server), then `gpustack up --bundle` runs with NO proxy: the host has no route out and a
default Debian source it cannot reach. Everything comes from the bundle server gpustack runs for
the run: the OS and Kubernetes repositories, containerd, runc, Helm and Flannel, and every image,
imported into the real containerd 2 (`ctr -n k8s.io images list`). A re-run changes nothing; a
damaged artifact stops the run before anything happens, naming it. (~90 s)"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import yaml

from gpustack.bundle import manifest as mf
from gpustack.bundle import want
from gpustack.bundle.create import CreateOptions, create
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.constants import BUNDLE_PORT
from gpustack.paths import resource_dir
from tests.fakes import bundle_sources
from tests.realbin import RealBins

from .cis import LEFT, RELAXED, not_passed, security_failures, security_layer
from .cluster import run_gpustack, up, write_config
from .hosts import Testbed
from .network import BRIDGE_ADDRESS
from .prepare import write_files
from .pytest_plugin import TestbedFactory
from .services import Sources, local_sources

#: a fresh install's source, which the host cannot reach (there is no DNS on the bed)
DEBIAN_SOURCE = "deb http://deb.debian.org/debian bookworm main\n"


def test_up_from_a_bundle_with_no_route_out(
    testbed_factory: TestbedFactory, tmp_path: Path, sources: Sources, real_bins: RealBins
) -> None:
    # the real kubeadm writes the kubelet's files: doctor's CIS checks judge them (below)
    bed: Testbed = testbed_factory(
        ["ag1"], prepare=write_files({"/etc/apt/sources.list": DEBIAN_SOURCE}), real_kubeadm=True
    )
    host = bed.hosts[0]
    with bundle_sources.serve(tmp_path / "sources", real_bins.helm) as served:
        # files: the bed's (real containerd 2.1 and runc, the helm double)
        bed_files = {**local_sources(sources.http.url), **sources.runtime.config_sources(sources.http.url)}
        extra = served.config(files=False)
        extra["sources"].update(
            {k: bed_files[k] for k in ("containerd_url", "runc_url", "helm_url", "cni_plugins_url", "crictl_url")}
        )
        # etcd's release archive (etcdutl for `etcd restore`): the sources' stand-in, its checksum the test's
        served_files = served.config(files=True)
        extra["sources"]["etcd_url"] = served_files["sources"]["etcd_url"]
        extra["versions"]["etcd_sha256"] = served_files["versions"]["etcd_sha256"]
        # two relaxations of the kubelet's hardening (issue 28): doctor warns exactly their CIS checks (below)
        extra["security"] = {"tls_cipher_suites": [], "pod_pids_limit": None}
        config = write_config(bed, tmp_path / "gpustack.yaml", sources, via_proxy=False, extra=extra)
        cfg = Config.model_validate(yaml.safe_load(config.read_text()))
        bundle = tmp_path / "bundle"
        t0 = time.monotonic()
        create(
            cfg,
            CreateOptions(out=bundle, releases=(want.parse_release("debian-12"),), helm=str(real_bins.helm)),
            Console(),
            playbooks=resource_dir("playbooks"),
        )
        print(f"bundle create: {time.monotonic() - t0:.1f}s")
    # from here on nothing but the bundle: the sources above are gone
    manifest = mf.load(bundle)
    assert manifest.find("file", "etcd", version=pins.ETCD_VERSION, arch="amd64") is not None
    images = sorted(a.name for a in manifest.artifacts if a.kind == "image")
    assert "registry.k8s.io/pause:3.10.2" in images and f"ghcr.io/flannel-io/flannel:v{pins.FLANNEL_VERSION}" in images

    state = tmp_path / "state"
    before = len(sources.http.requests)
    first = up(config, state, "--bundle", str(bundle))
    assert first.rc == 0, first.output
    changed = first.changed()
    assert changed["containerd"] > 0 and changed["kubernetes"] > 0, changed
    # the bundle server served the host (and this machine's own Helm); the bed's file server nothing
    assert f"serving them on http://{BRIDGE_ADDRESS}:{BUNDLE_PORT}" in first.output
    assert "to 2 host(s) (10.213.0.1, 10.213.0.11)" in first.output, first.output
    assert "refused" not in first.output.split("bundle: served", 1)[1]
    assert [r for r in sources.http.requests[before:] if r.client == host.address] == []

    # every image the control plane runs is in the real containerd, under its name and digest
    listed = host.sudo("/usr/local/bin/ctr --namespace k8s.io images list", check=True).stdout
    refs = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:] if line.strip()}
    for a in manifest.artifacts:
        if a.kind == "image":
            assert refs.get(a.name) == a.digest, (a.name, listed)
    # with all their content, unpacked (what the kubelet's CRI needs to run them)
    checked = host.sudo("/usr/local/bin/ctr --namespace k8s.io images check", check=True).stdout
    assert all("complete" in line for line in checked.splitlines()[1:] if line.strip()), checked
    assert host.sudo("ls /var/cache/gpustack/images", check=False).stdout.strip() == ""  # archives removed
    # apt used the bundle's repositories (signed-by the keys it ships) and installed the pinned packages
    assert (
        f"http://{BRIDGE_ADDRESS}:{BUNDLE_PORT}/apt/debian-12/"
        in host.run("cat /etc/apt/sources.list.d/gpustack-bundle.list").stdout
    )
    assert (
        f"http://{BRIDGE_ADDRESS}:{BUNDLE_PORT}/apt/kubernetes-v1.36/"
        in host.run("cat /etc/apt/sources.list.d/kubernetes.list").stdout
    )
    version = host.run("dpkg-query -W -f '${Version}' kubeadm", check=True).stdout
    assert version == f"{pins.KUBERNETES['1.36']}-1.1"
    assert host.sudo("sha256sum /usr/local/sbin/runc", check=True).stdout.split()[0] == sources.runtime.runc_sha256

    # the relaxed settings reached the kubelet (the real kubeadm's config.yaml from gpustack's configuration), and
    # doctor's host-fact CIS checks turn exactly their checks into warnings, each naming its setting
    kubelet_config = host.sudo("cat /var/lib/kubelet/config.yaml", check=True).stdout
    assert "podPidsLimit" not in kubelet_config and "tlsCipherSuites" not in kubelet_config, kubelet_config
    report = security_layer(config, state)
    assert not_passed(report, host.name) == dict.fromkeys(LEFT | set(RELAXED.values()), "warn"), report["_output"]
    for setting, check in RELAXED.items():
        (found,) = [c for c in report["checks"] if c["id"] == check]
        assert f"relaxed in gpustack.yaml: security.{setting}" in found["evidence"], found
    assert security_failures(report) == [], report["_output"]

    # converged: a re-run changes nothing
    second = up(config, state, "--bundle", str(bundle))
    assert second.rc == 0, second.output
    assert all(v == 0 for v in second.changed().values()), second.changed()

    # a damaged artifact stops the run before any stage, naming it
    damaged = tmp_path / "damaged"
    shutil.copytree(bundle, damaged, ignore=shutil.ignore_patterns(".work"))
    kubelet = manifest.find("deb", "kubelet")
    assert kubelet is not None
    (damaged / kubelet.path).write_bytes(b"not kubelet")
    runs = len(list((state / "runs").iterdir()))
    third = run_gpustack(config, state, "up", "--yes", "--skip", "kubelet-certs,cluster", "--bundle", str(damaged))
    assert third.rc == 2, third.output
    assert f"{kubelet.path}: sha256 " in third.output and "nothing was changed" in third.output
    assert len(list((state / "runs").iterdir())) == runs  # no run started
