"""pytest fixtures of the test bed, re-exported by ``tests/testbed/conftest.py``.

(The ``fixtures/`` directory next to this module holds data files, not fixtures.) Tests in
other directories get these with ``pytest_plugins = ["testbed.pytest_plugin"]`` in
``tests/conftest.py``.

Session scope: ``rootfs``, ``testbed_network`` (bridge + machine lock), ``testbed_doubles``,
``http_server``, ``k8s_repo``, ``helm_tarball``, ``proxy``,
``services_dir``.
Function scope: ``testbed_factory``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from gpustack.config import pins

from .hosts import PrepareHook, Testbed
from .network import BRIDGE_ADDRESS, TestbedNetwork
from .realkubeadm import with_real_kubeadm
from .rootfs import ensure_rootfs
from .runtime import RuntimeArchives, publish_runtime
from .services import (
    ForwardProxy,
    HelmTarball,
    HttpServer,
    K8sRepo,
    Sources,
    build_helm_tarball,
    build_k8s_repo,
    doubles_with_fallback,
)

DOUBLES_DIR = Path(__file__).parent / "doubles"
K8S_MINOR = "1.36"
K8S_VERSION = pins.KUBERNETES[K8S_MINOR]
#: Other versions in the same repository: an older and a newer one, so that only an explicit
#: pin (kubeadm=<K8S_VERSION>-1.1) installs K8S_VERSION.
K8S_EXTRA_VERSIONS = (pins.KUBERNETES["1.35"], "1.36." + str(int(K8S_VERSION.rsplit(".", 1)[1]) + 1))
HELM_VERSION = pins.HELM_VERSION
HTTP_PORT = 8081
PROXY_PORT = 3128
#: Without these the test bed tests are skipped; any other missing tool (gpg, apt-ftparchive,
#: gcc ...) makes them fail loudly instead, so CI cannot pass by skipping.
REQUIRED_TOOLS = ("debootstrap", "systemd-nspawn")

TestbedFactory = Callable[..., Testbed]


def unavailable_reason() -> str | None:
    """Why the test bed cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "the test bed needs root (network namespaces, systemd-nspawn)"
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if missing:
        return f"the test bed needs these tools: {', '.join(missing)} (see tests/testbed/__init__.py)"
    return None


@pytest.fixture(scope="session")
def rootfs() -> Path:
    """The cached Debian 12 root (built on first use, a minute or so)."""
    return ensure_rootfs()


@pytest.fixture(scope="session")
def rootfs_trixie() -> Path:
    """The cached Debian 13 (trixie) root, for hosts beside the Debian 12 ones
    (``testbed_factory(names, rootfs=rootfs_trixie)``)."""
    return ensure_rootfs(suite="trixie")


@pytest.fixture(scope="session")
def testbed_network() -> Iterator[str]:
    """The bridge gsbr0 with the outer machine's address, held for the whole session."""
    TestbedNetwork.acquire()
    try:
        yield BRIDGE_ADDRESS
    finally:
        TestbedNetwork.release()


@pytest.fixture(scope="session")
def services_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Session directory for served files and service logs (``http.log``, ``proxy.log``)."""
    return tmp_path_factory.mktemp("testbed-services")


@pytest.fixture(scope="session")
def testbed_doubles(services_dir: Path) -> Path:
    """Directory with kubeadm/kubelet/kubectl/helm doubles (tests/testbed/doubles, with
    placeholders for any that do not exist yet)."""
    return doubles_with_fallback(DOUBLES_DIR, services_dir / "doubles")


@pytest.fixture(scope="session")
def http_server(testbed_network: str, services_dir: Path) -> Iterator[HttpServer]:
    """HTTP file server on http://10.213.0.1:8081 serving ``services_dir/www``."""
    server = HttpServer(services_dir / "www", host=testbed_network, port=HTTP_PORT, log_path=services_dir / "http.log")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def k8s_repo(http_server: HttpServer, testbed_doubles: Path) -> K8sRepo:
    """Signed flat APT repo at http://10.213.0.1:8081/k8s/v1.36/deb/ (1.36.4-1.1 plus the
    versions in K8S_EXTRA_VERSIONS)."""
    return build_k8s_repo(testbed_doubles, K8S_VERSION, http_server.root, K8S_MINOR, extra_versions=K8S_EXTRA_VERSIONS)


@pytest.fixture(scope="session")
def helm_tarball(http_server: HttpServer, testbed_doubles: Path) -> HelmTarball:
    """helm-v<pinned version>-linux-amd64.tar.gz on the HTTP server (``.sha256`` holds its checksum)."""
    return build_helm_tarball(testbed_doubles / "helm", http_server.root, HELM_VERSION)


@pytest.fixture(scope="session")
def runtime_archives(http_server: HttpServer) -> RuntimeArchives:
    """containerd 2.1 and runc 1.3 from Debian forky, published like their upstream release
    downloads (tests/testbed/runtime.py), with the test's own sha256."""
    return publish_runtime(http_server)


@pytest.fixture(scope="session")
def proxy(testbed_network: str, services_dir: Path) -> Iterator[ForwardProxy]:
    """Forward proxy on http://10.213.0.1:3128 (loopback and 10.213.0.0/24 only)."""
    server = ForwardProxy(host=testbed_network, port=PROXY_PORT, log_path=services_dir / "proxy.log")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def sources(
    http_server: HttpServer,
    k8s_repo: K8sRepo,
    helm_tarball: HelmTarball,
    proxy: ForwardProxy,
    runtime_archives: RuntimeArchives,
) -> Sources:
    """Every service `up` needs from the bed, published and running."""
    return Sources(http_server, k8s_repo, helm_tarball, proxy, runtime_archives)


@pytest.fixture
def testbed_factory(rootfs: Path, testbed_network: str, tmp_path: Path) -> Iterator[TestbedFactory]:
    """``make(names, prepare=None, nspawn_args=None, rootfs=None, real_kubeadm=False, **kw) -> Testbed`` (booted);
    every test bed made is closed when the test ends. Logs: ``<tmp_path>/testbed-N/``. ``real_kubeadm``: the real
    kubeadm bound into every host (tests/testbed/realkubeadm.py), for a test that reads what it writes; the
    others keep the double's placeholders, so they need no Go build (conftest.py runs them first)."""
    made: list[Testbed] = []

    def make(
        names: Sequence[str],
        prepare: PrepareHook | Mapping[str, PrepareHook] | None = None,
        nspawn_args: Mapping[str, Sequence[str]] | None = None,
        real_kubeadm: bool = False,
        **kwargs: object,
    ) -> Testbed:
        workdir = tmp_path / f"testbed-{len(made) + 1}"
        root = kwargs.pop("rootfs", rootfs)  # another suite's root (e.g. rootfs_trixie)
        binds = with_real_kubeadm(names, nspawn_args) if real_kubeadm else nspawn_args
        bed = Testbed(names, workdir, prepare=prepare, nspawn_args=binds, rootfs=root, **kwargs)  # type: ignore[arg-type]
        made.append(bed)
        bed.start()
        return bed

    try:
        yield make
    finally:
        for bed in reversed(made):
            bed.close()
