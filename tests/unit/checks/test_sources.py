"""Package sources in the preflight: what each stage selection probes on which hosts (probe_list),
and P24/P25 on recorded probe results (the module's side: tests/unit/playbooks/test_gpustack_facts_sources.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpustack import commands
from gpustack.checks import preflight as pf
from gpustack.checks.sources import probe_list
from gpustack.commands.up import PLAN as UP
from gpustack.config import pins
from gpustack.config.model import Config, Node

CP = Node(name="cp1", address="10.0.0.11", role="control-plane")
CFG = Config(nodes=[CP, Node(name="w1", address="10.0.0.12")])
PROXY = "http://proxy.example.com:3128"


def names(stages: list[str], cfg: Config = CFG, **kw: Any) -> list[tuple[str, str, str]]:
    return [(s["name"], s["stage"], s["group"]) for s in probe_list(cfg, stages, **kw)]


def test_each_stage_probes_what_it_downloads_on_the_hosts_it_runs_on() -> None:
    every = probe_list(CFG, UP.stage_ids)
    by_name = {s["name"]: s for s in every}
    assert by_name["Kubernetes apt repository"]["url"] == "https://pkgs.k8s.io/core:/stable:/v1.36/deb/InRelease"
    assert by_name["Kubernetes apt key"]["url"].endswith("/v1.36/deb/Release.key")
    assert not [s for s in every if "flannel" in (s["name"] + s["url"]).lower()], "gpustack renders Flannel's manifest"
    assert by_name["Helm download"]["group"] == "control_plane", "only the control plane runs Helm"
    assert {s["arch"] for s in every if s["name"] == "Helm download"} == {"amd64", "arm64"}
    assert {s["url"] for s in every if s["kind"] == "registry"} == {
        "registry.k8s.io", "ghcr.io", "nvcr.io", "quay.io", "docker.io"
    }  # fmt: skip
    assert names(["preflight", "os"]) == [("the host's apt repositories", "os", "all")]
    assert [n for n, _, _ in names(["preflight", "kubernetes"])] == [
        "Kubernetes apt repository", "Kubernetes apt key", *["CNI plugins release download"] * 2,
        *["crictl release download"] * 2,
    ]  # fmt: skip
    crictl = {s["arch"]: s["url"] for s in every if s["name"] == "crictl release download"}
    assert crictl["arm64"].endswith(f"/v{pins.CRICTL_VERSION}/crictl-v{pins.CRICTL_VERSION}-linux-arm64.tar.gz")
    assert {s["stage"] for s in every if "release download" in s["name"] and "containerd" not in s["name"]
            and "runc" not in s["name"]} == {"kubernetes"}, "probed with the stage that downloads them"  # fmt: skip
    assert names(["preflight", "firewall"]) == [], "a stage that downloads nothing probes nothing"
    assert probe_list(CFG, ["preflight"]) == every, "the preflight alone is a readiness check for a whole up"
    assert all(s["kind"] == "registry" for s in probe_list(CFG, commands.sequence("upgrade").stage_ids))


def test_mirrors_distribution_containerd_and_full() -> None:
    mirror = Config(
        nodes=[CP],
        sources={"kubernetes_apt_url": "http://mirror.lan/k8s/{minor}/"},  # type: ignore[arg-type]
        versions={"kubernetes": "1.35", "containerd_source": "distribution"},  # type: ignore[arg-type]
        preflight={"registries": ["http://mirror.lan:5000"]},  # type: ignore[arg-type]
    )
    every = probe_list(mirror, UP.stage_ids)
    assert "http://mirror.lan/k8s/1.35/InRelease" in {s["url"] for s in every}
    assert not [s for s in every if "containerd" in s["name"] or "runc" in s["name"]], "the OS package: apt"
    assert [s["url"] for s in every if s["kind"] == "registry"] == ["http://mirror.lan:5000"]
    assert all(s["stage"] == "" for s in probe_list(CFG, UP.stage_ids, full=True)), "--full: converged too"


def test_a_bundle_run_probes_its_server_not_registries_nor_the_hosts_apt_sources() -> None:
    """up --bundle: images come from the bundle and apt-get tolerates the host's unreachable sources."""
    bundled = {"gpustack_bundle_images": [{"ref": "registry.k8s.io/pause:3.10.2"}], "gpustack_apt_update_cache": False}
    every = probe_list(CFG, UP.stage_ids, run_vars=bundled)
    assert not [s for s in every if s["kind"] in ("registry", "host-apt")]
    assert {s["name"] for s in every} >= {"Kubernetes apt repository", "Helm download"}
    plain = probe_list(CFG, UP.stage_ids, run_vars={"gpustack_apt_update_cache": True})
    assert plain == probe_list(CFG, UP.stage_ids)


def run(results: list[dict[str, Any]]) -> dict[str, pf.Finding]:
    return {f.id: f for f in pf.run_checks(CFG, {"cp1": {"sources": results}}, nodes=["cp1"])}


def test_unreachable_through_the_proxy_names_host_source_proxy_and_error() -> None:
    found = run([
        {"name": "Kubernetes apt repository", "url": "https://pkgs.k8s.io/core:/stable:/v1.36/deb/InRelease",
         "kind": "apt", "via": PROXY, "ok": False, "error": "Tunnel connection failed: 403 Forbidden"},
        {"name": "Kubernetes apt key", "url": "https://pkgs.k8s.io/core:/stable:/v1.36/deb/Release.key",
         "kind": "file", "via": PROXY, "ok": True, "status": 200},
        {"name": "image registry nvcr.io", "url": "https://nvcr.io/v2/", "kind": "registry", "via": PROXY,
         "ok": True, "status": 401},
    ])  # fmt: skip
    p20 = found["P24-package-sources"]
    assert p20.status == "fail" and p20.host == "cp1"
    assert p20.summary == "cannot reach 1 package source(s): Kubernetes apt repository"
    assert f"https://pkgs.k8s.io/core:/stable:/v1.36/deb/InRelease (through {PROXY}): Tunnel connection" in p20.evidence
    assert PROXY in p20.fix and "cp1" in p20.fix and "pkgs.k8s.io" in p20.fix
    assert found["P25-image-registries"].status == "pass"


def test_unreachable_without_a_proxy_suggests_one() -> None:
    found = run([
        {"name": "image registry docker.io", "url": "https://registry-1.docker.io/v2/", "kind": "registry",
         "via": "direct", "ok": False, "error": "[Errno -3] Temporary failure in name resolution"},
        {"name": "Helm download", "url": "https://get.helm.sh/helm-v4.2.4-linux-amd64.tar.gz", "kind": "file",
         "via": "direct", "ok": False, "status": 404, "error": "HTTP 404 Not Found"},
    ])  # fmt: skip
    p21 = found["P25-image-registries"]
    assert p21.status == "fail" and "(direct): [Errno -3]" in p21.evidence
    assert "proxy.http" in p21.fix and "preflight.registries" in p21.fix and "registry-1.docker.io" in p21.fix
    p20 = found["P24-package-sources"]
    assert p20.status == "fail" and "HTTP 404 Not Found" in p20.evidence
    assert p20.fix.startswith(
        "https://get.helm.sh/helm-v4.2.4-linux-amd64.tar.gz answered with an error: check the URL"
    )
    assert "no route" not in p20.fix, "the server answered: a wrong URL, not a missing route"


@pytest.mark.parametrize(
    ("results", "summary"),
    [
        ([], "no package source to reach (none needed by the selected stages)"),
        ([{"name": "k", "url": "http://m/k", "kind": "file", "skipped": "stage kubernetes converged on this host"}],
         "no package source to reach (stages converged here)"),
        ([{"name": "k", "url": "http://m/k", "kind": "file", "ok": True, "via": "direct"}],
         "reaches 1 package source(s)"),
    ],
)  # fmt: skip
def test_nothing_to_reach_or_all_reached_passes(results: list[dict[str, Any]], summary: str) -> None:
    p20 = run(results)["P24-package-sources"]
    assert p20.status == "pass" and p20.summary == summary


def test_ignore_preflight_downgrades_by_name() -> None:
    findings = pf.run_checks(CFG, {"cp1": {"sources": [{"name": "r", "url": "https://quay.io/v2/",
                                                         "kind": "registry", "ok": False, "error": "x"}]}},
                             nodes=["cp1"])  # fmt: skip
    ignored = {f.id: f for f in pf.apply_ignores(findings, ["image-registries"])}
    assert ignored["P25-image-registries"].status == "warn"
