"""The tools modules that build the real control plane and Prometheus follow gpustack's pins (no build needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpustack.config import pins
from tests.realbin import gobuild

K8S = gobuild.MODULES["k8s"]


def test_kubernetes_is_the_pinned_default_patch() -> None:
    assert K8S.version == f"v{pins.KUBERNETES[pins.KUBERNETES_DEFAULT]}", (
        f"{K8S.dir / 'go.mod'} requires k8s.io/kubernetes {K8S.version}; gpustack's default Kubernetes is "
        f"{pins.KUBERNETES[pins.KUBERNETES_DEFAULT]} (move the tools module with the pin)"
    )


def test_every_staging_module_is_replaced_at_the_matching_version() -> None:
    """k8s.io/kubernetes requires its staging modules at v0.0.0: each needs a replace to v0.<minor>.<patch>."""
    text = K8S.go_mod()
    want = "v0." + K8S.version.removeprefix("v1.")
    replaces = dict(re.findall(r"^\s*(k8s\.io/\S+) => k8s\.io/\S+ (v\S+)$", text, re.M))
    assert replaces, "go.mod has no replace lines"
    assert {m: v for m, v in replaces.items() if v != want} == {}
    assert "k8s.io/api" in replaces and "k8s.io/apiserver" in replaces


def test_etcd_is_the_release_kubernetes_requires() -> None:
    """etcd's server module at the version k8s.io/kubernetes itself requires (kubeadm's DefaultEtcdVersion for that
    release is checked against the built binaries in tests/controlplane/test_control_plane.py)."""
    assert gobuild.required(K8S.go_mod(), "go.etcd.io/etcd/server/v3") == gobuild.required(
        K8S.go_mod(), "go.etcd.io/etcd/client/v3"
    )


@pytest.mark.parametrize(
    ("module", "release"), [("v0.314.0", "3.14.0"), ("v0.316.1", "3.16.1"), ("v0.305.12", "3.5.12")]
)
def test_prometheus_module_versions_name_their_release(module: str, release: str) -> None:
    assert gobuild.prometheus_release(module) == release


def test_a_module_version_that_is_not_prometheus_3_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not a Prometheus 3\.x module version"):
        gobuild.prometheus_release("v2.53.0")


def test_kubernetes_ldflags_set_both_version_packages() -> None:
    flags = gobuild.kubernetes_ldflags("v1.36.5", "2026-09-23T17:07:00Z")
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v1.36.5" in flags
        assert f"-X {pkg}.gitMajor=1" in flags and f"-X {pkg}.gitMinor=36" in flags


def test_a_toolchain_line_selects_gotoolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kubernetes minor that needs a newer Go names it in go.mod's ``toolchain`` line; the build then runs with
    ``GOTOOLCHAIN=<it>``, which the go command takes from the module proxy. Without one: the installed Go."""
    assert gobuild._env(K8S)["GOTOOLCHAIN"] == (K8S.toolchain or "local")
    assert gobuild._env(K8S)["CGO_ENABLED"] == "0"
    newer = "module x\n\ngo 1.27.0\n\ntoolchain go1.27.3\n\nrequire k8s.io/kubernetes v1.37.2\n"
    monkeypatch.setattr(gobuild.Module, "go_mod", lambda self: newer)
    assert K8S.toolchain == "go1.27.3" and K8S.version == "v1.37.2"
    assert gobuild._env(K8S)["GOTOOLCHAIN"] == "go1.27.3"


def test_etcdctl_and_etcdutl_are_the_etcd_servers_version() -> None:
    """The etcd tools module (the snapshot and restore tests' clients) follows the server the k8s module builds."""
    etcd = gobuild.MODULES["etcd"]
    server = gobuild.required(K8S.go_mod(), "go.etcd.io/etcd/server/v3")
    assert etcd.version == gobuild.required(etcd.go_mod(), "go.etcd.io/etcd/etcdutl/v3") == server
    assert set(etcd.binaries) == {"etcdctl", "etcdutl"} and not set(etcd.binaries) & set(K8S.binaries)


def test_the_test_beds_kubeadm_is_the_control_planes_built_alone() -> None:
    """CI builds kubeadm alone first (scripts/test.sh) so the test bed waits less on a cold machine: the same tools
    module, package and flags as the control plane's, cached apart (its own key)."""
    kubeadm = gobuild.MODULES["kubeadm"]
    assert kubeadm.dir == K8S.dir and kubeadm.upstream == K8S.upstream and kubeadm.version == K8S.version
    assert kubeadm.binaries == {"kubeadm": K8S.binaries["kubeadm"]}
    assert (kubeadm.gcflags, kubeadm.tags) == (K8S.gcflags, K8S.tags)
    # binary("kubeadm") (the control-plane tests) still finds the whole control plane's build
    assert list(gobuild.MODULES).index("k8s") < list(gobuild.MODULES).index("kubeadm")
    script = (Path(__file__).resolve().parents[2] / "scripts" / "test.sh").read_text()
    assert "gobuild prometheus kubeadm k8s " in script
