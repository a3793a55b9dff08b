"""`gpustack up --bundle`: the bundle checked against the config before anything else (a mismatch
names the artifact, exit 2), served read-only for the run, and the run's config and playbook
variables pointing every download at it. apt reads the served repositories the way a node does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import gpustack
from gpustack.bundle import apt, serve, want
from gpustack.bundle import manifest as mf
from gpustack.bundle.serve import BundleServer, listen_address
from gpustack.bundle.use import BundleMismatch, bundle_config, bundle_extravars, chart_archives, session, verify
from gpustack.config import pins
from gpustack.config.model import Config
from gpustack.console import Console
from gpustack.engine import run as engine_run
from gpustack.errors import UsageError
from gpustack.paths import resource_dir
from tests.fakes import bundle_sources
from tests.unit.bundle.conftest import make_config
from tests.unit.cli.test_cli import run

PLAYBOOKS = resource_dir("playbooks")


def mismatch(cfg: Config, bundle: Path) -> str:
    with pytest.raises(BundleMismatch) as exc:
        verify(cfg, bundle, playbooks=PLAYBOOKS)
    assert exc.value.exit_code == 2 and "nothing was changed" in exc.value.message
    assert f"gpustack bundle create --out {bundle}" in (exc.value.hint or "")
    return exc.value.message


def test_a_good_bundle_verifies(sources: bundle_sources.BundleSources, made_bundle: Path) -> None:
    manifest = verify(make_config(sources), made_bundle, playbooks=PLAYBOOKS)
    assert manifest.os == ["debian-12"] and manifest.kubernetes == pins.KUBERNETES["1.36"]


def test_a_damaged_or_missing_artifact_is_named(sources: bundle_sources.BundleSources, bundle_copy: Path) -> None:
    cfg = make_config(sources)
    manifest = mf.load(bundle_copy)
    runc = manifest.find("file", "runc", arch="amd64")
    assert runc is not None
    (bundle_copy / runc.path).write_bytes(b"tampered")
    kubeadm = manifest.find("deb", "kubeadm")
    assert kubeadm is not None
    (bundle_copy / kubeadm.path).unlink()
    message = mismatch(cfg, bundle_copy)
    assert "has files that differ from its manifest: 2 problem(s)" in message
    assert f"{runc.path}: sha256 " in message and "(file runc)" in message
    assert f"{kubeadm.path}: missing (deb kubeadm)" in message


def test_a_bundle_for_other_pins_is_named(sources: bundle_sources.BundleSources, made_bundle: Path) -> None:
    data = make_config(sources).model_dump(mode="json")
    data["versions"]["helm_sha256"] = {"amd64": "1" * 64}
    data["versions"]["image_digests"]["registry.k8s.io/pause:3.10.2"] = "sha256:" + "2" * 64
    data["versions"]["dcgm_exporter"] = "4.9.0"
    message = mismatch(Config.model_validate(data), made_bundle)
    assert "does not hold what this config needs: 3 problem(s)" in message
    assert f"helm {pins.HELM_VERSION} (amd64): sha256 " in message
    assert "the pin is " + "1" * 64 in message
    assert (
        "image registry.k8s.io/pause:3.10.2 (amd64): digest sha256:" in message
        and "pinned sha256:" + "2" * 64 in message
    )
    assert "chart dcgm-exporter 4.9.0: not in the bundle" in message
    # another Kubernetes version: everything it needs is missing, and said first
    other = make_config(sources, versions={**data["versions"], "kubernetes": "1.35", "dcgm_exporter": "4.8.2"})
    assert f"made for Kubernetes {pins.KUBERNETES['1.36']}, the config wants {pins.KUBERNETES['1.35']}" in mismatch(
        other, made_bundle
    )


def test_not_a_bundle(tmp_path: Path, sources: bundle_sources.BundleSources) -> None:
    assert "bundle.json does not exist: not a bundle" in mismatch(make_config(sources), tmp_path)
    (tmp_path / "bundle.json").write_text('{"format": 9}')
    assert "not a format-1 gpustack bundle manifest" in mismatch(make_config(sources), tmp_path)


def test_nodes_must_fit_the_bundle(made_bundle: Path) -> None:
    manifest = mf.load(made_bundle)
    facts = {
        "cp1": {"os_id": "debian", "os_version_id": "12", "arch": "x86_64"},
        "w1": {"os_id": "ubuntu", "os_version_id": "22.04", "arch": "aarch64"},
    }
    problems = [str(p) for p in mf.check_hosts(manifest, facts)]
    assert problems == [
        "repository ubuntu-22.04: node w1 runs ubuntu-22.04; the bundle has debian-12",
        "architecture arm64: node w1 is arm64; the bundle has amd64",
    ]


def test_the_run_points_at_the_server(sources: bundle_sources.BundleSources, made_bundle: Path) -> None:
    cfg = make_config(sources)
    manifest = mf.load(made_bundle)
    url = "http://192.0.2.1:8780"
    run_cfg = bundle_config(cfg, url, manifest, "192.0.2.1")
    s = run_cfg.sources
    runc = manifest.find("file", "runc", arch="amd64")
    assert runc is not None and s.runc_url.format(version=pins.RUNC_VERSION, arch="amd64") == f"{url}/{runc.path}"
    assert manifest.find("file", "kube-flannel.yml") is None, "gpustack renders Flannel's manifest"
    assert s.kubernetes_apt_url.format(minor="1.36") == f"{url}/apt/kubernetes-v1.36/"
    key = manifest.find("apt-key", "Release.key", repo="kubernetes-v1.36")
    assert key is not None and s.kubernetes_apt_key_fingerprint == key.fingerprint
    assert "192.0.2.1" in run_cfg.proxy.no_proxy
    ev = bundle_extravars(url, manifest, "192.0.2.1")
    repo = ev["gpustack_bundle_os_repos"]["debian-12"]
    os_key = manifest.find("apt-key", "Release.key", repo="debian-12")
    assert os_key is not None and repo == {
        "url": f"{url}/apt/debian-12/",
        "key_url": f"{url}/apt/debian-12/Release.key",
        "key_sha256": os_key.sha256,
    }
    pause = next(i for i in ev["gpustack_bundle_images"] if i["ref"] == "registry.k8s.io/pause:3.10.2")
    assert pause["key"] == f"registry.k8s.io/pause:3.10.2@{sources.images['registry.k8s.io/pause:3.10.2'].digest}"
    assert pause["nodes"] == "all" and pause["url"].startswith(f"{url}/images/amd64/")
    etcd = next(i for i in ev["gpustack_bundle_images"] if i["ref"].startswith("registry.k8s.io/etcd:"))
    assert etcd["nodes"] == "control-plane"
    charts = chart_archives(made_bundle, manifest, cfg)
    assert set(charts) == {"gpu-operator", "kube-prometheus-stack", "dcgm-exporter"}
    assert all(p.is_file() and p.is_absolute() for p in charts.values())


def test_the_server_serves_the_listed_files_only(made_bundle: Path) -> None:
    manifest = mf.load(made_bundle)
    deb = manifest.find("deb", "kubeadm")
    assert deb is not None and "+" not in deb.path
    plus = next(a for a in manifest.artifacts if "+" in a.path)  # quoted by clients as %2B
    with BundleServer(made_bundle, mf.served_paths(manifest), "127.0.0.1", 0) as server:
        body = urllib.request.urlopen(f"{server.url}/{deb.path}").read()
        assert mf.sha256_file(made_bundle / deb.path) == __import__("hashlib").sha256(body).hexdigest()
        quoted = plus.path.replace("+", "%2B")
        assert urllib.request.urlopen(f"{server.url}/{quoted}").status == 200
        for path in ("bundle.json", ".work/apt", "apt/../bundle.json", "", "apt/debian-12/"):
            with pytest.raises(urllib.error.HTTPError) as exc:
                urllib.request.urlopen(f"{server.url}/{path}")
            assert exc.value.code == 404
        assert {r.status for r in server.requests} == {200, 404}


def test_apt_installs_from_the_served_repositories(made_bundle: Path, tmp_path: Path) -> None:
    """What a node's apt does with the bundle: trust the shipped key, read the signed indexes,
    resolve and fetch the Kubernetes packages with their dependencies, every hash checked."""
    manifest = mf.load(made_bundle)
    with BundleServer(made_bundle, mf.served_paths(manifest), "127.0.0.1", 0) as server:
        sources = []
        for repo in ("debian-12", "kubernetes-v1.36"):
            key = made_bundle / f"apt/{repo}/Release.key"
            sources.append(apt.Source(f"{server.url}/apt/{repo}/", str(key)))
        debs = apt.AptRoot(tmp_path / "node", "amd64").resolve(
            sources, [f"kubeadm={pins.KUBERNETES['1.36']}-1.1", "kubelet", "curl"], what="node"
        )
    names = {d.name for d in debs}
    assert {"kubeadm", "kubelet", "kubernetes-cni", "curl", "libcurl4", "iptables"} <= names
    assert "cri-tools" not in names  # kubeadm 1.32+ does not depend on it: crictl is a verified download
    assert {d.version for d in debs if d.name == "kubelet"} == {f"{pins.KUBERNETES['1.36']}-1.1"}
    # a repository signed by another key is refused
    with BundleServer(made_bundle, mf.served_paths(manifest), "127.0.0.1", 0) as server:
        wrong = apt.Source(f"{server.url}/apt/debian-12/", str(made_bundle / "apt/kubernetes-v1.36/Release.key"))
        with pytest.raises(apt.AptError, match=r"NO_PUBKEY|not signed|signature"):
            apt.AptRoot(tmp_path / "node2", "amd64").resolve([wrong], ["curl"], what="node")


def test_session_serves_for_the_block_and_reports(sources: bundle_sources.BundleSources, made_bundle: Path) -> None:
    cfg = make_config(sources, nodes=[{"name": "cp1", "address": "192.0.2.10", "connection": "local"}])
    assert listen_address(cfg, None) == ("127.0.0.1", 8780)
    assert listen_address(cfg, "127.0.0.1:0") == ("127.0.0.1", 0)
    assert listen_address(cfg, "192.0.2.1") == ("192.0.2.1", 8780)
    assert listen_address(cfg, "[2001:db8::1]:9000") == ("2001:db8::1", 9000)
    assert listen_address(cfg, "2001:db8::1") == ("2001:db8::1", 8780)
    for bad in ("host.example:80", "192.0.2.1:99999", "192.0.2.1:x"):
        with pytest.raises(UsageError, match="--bundle-listen"):
            listen_address(cfg, bad)
    # the kernel's route to the first SSH node (UDP connect, nothing sent): here towards a TEST-NET address
    remote = make_config(sources)
    address, port = listen_address(remote, None)
    assert port == 8780 and address == serve.route_address("192.0.2.10")
    with session(cfg, made_bundle, Console(), playbooks=PLAYBOOKS, listen="127.0.0.1:0") as s:
        url = s.server.url
        key = s.manifest.find("apt-key", "Release.key", repo="debian-12")
        assert key is not None
        urllib.request.urlopen(f"{url}/{key.path}").read()
        assert s.config.sources.helm_url.startswith(url)
    with pytest.raises(urllib.error.URLError):  # closed with the block
        urllib.request.urlopen(f"{url}/{key.path}", timeout=2)
    assert "bundle: served 1 file(s)" in s.summary()


def test_up_bundle_stops_before_anything_on_a_mismatch(
    sources: bundle_sources.BundleSources, bundle_copy: Path, tmp_path: Path
) -> None:
    """The CLI: exit 2 naming the artifact, before the host-key check or any stage."""
    manifest = mf.load(bundle_copy)
    image = manifest.find("image", "registry.k8s.io/pause:3.10.2")
    assert image is not None
    (bundle_copy / image.path).write_bytes(b"x")
    config = tmp_path / "gpustack.yaml"
    data = make_config(sources).model_dump(mode="json", exclude_defaults=True)
    config.write_text(json.dumps(data))
    here = {"PYTHONPATH": str(Path(gpustack.__file__).resolve().parents[1])}  # this checkout's gpustack
    result = run("up", "-c", str(config), "--bundle", str(bundle_copy), "--yes", cwd=tmp_path, env_extra=here)
    assert result.returncode == 2, result.stdout + result.stderr
    assert image.path in result.stderr and "does not match the manifest" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "runs").exists()  # no run started


def test_want_paths_match_layout() -> None:
    f = want.FileWant("containerd", "2.2.7", "amd64", "u", None)
    assert f.path == "files/containerd/2.2.7/amd64/containerd-2.2.7-linux-amd64.tar.gz"


def test_node_add_installs_from_a_bundle_too(
    sources: bundle_sources.BundleSources, made_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gpustack node add --bundle`: the same check, server and variables as `up --bundle`, and the
    new nodes' OS must be in the bundle (the existing ones are not re-installed)."""
    from gpustack.commands import node_add
    from gpustack.engine.options import RunOptions
    from gpustack.engine.steps import RunResult

    nodes = [
        {"name": "cp1", "address": "192.0.2.10", "role": "control-plane"},
        {"name": "w2", "address": "192.0.2.12", "role": "worker"},
    ]
    cfg = make_config(sources, nodes=nodes)
    seen: dict[str, object] = {}

    def fake_run(seq: object, run_cfg: Config, opts: RunOptions, console: Console, **kw: object) -> object:
        guard = kw["after_preflight"]
        marker = {"admin_conf": True, "gpustack_marker": {"kubernetes_version": cfg.versions.kubernetes}}
        facts = {"cp1": {"kubernetes": marker, "os_id": "ubuntu", "os_version_id": "24.04", "arch": "x86_64"}}
        with pytest.raises(BundleMismatch, match=r"node w2 runs ubuntu-22\.04"):
            guard(run_cfg, {**facts, "w2": {"os_id": "ubuntu", "os_version_id": "22.04", "arch": "x86_64"}})  # type: ignore[operator]
        guard(run_cfg, {**facts, "w2": {"os_id": "debian", "os_version_id": "12", "arch": "x86_64"}})  # type: ignore[operator]
        seen.update(cfg=run_cfg, extravars=dict(opts.extravars))
        return RunResult(Path("/nonexistent"), [], [], {})

    monkeypatch.setattr(engine_run, "run", fake_run)
    node_add.add(cfg, node_add.AddOptions(nodes=("w2",), bundle=made_bundle, bundle_listen="127.0.0.1:0"), Console())
    ev = seen["extravars"]
    assert isinstance(ev, dict) and ev["gpustack_apt_update_cache"] is False and ev["gpustack_bundle_images"]
    assert ev["gpustack_node_add_nodes"] == ["w2"]
    run_cfg = seen["cfg"]
    assert isinstance(run_cfg, Config) and run_cfg.sources.kubernetes_apt_url.startswith("http://127.0.0.1:")
