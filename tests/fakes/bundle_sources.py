"""Everything ``gpustack bundle create`` fetches, built by the tests and served on loopback, with
the ``sources:``/``versions:`` of gpustack.yaml that point a config at it:

* an OCI registry (tests/fakes/oci_registry.py) with a small real image under every name the
  config needs (kubeadm's list from the kubeadm test double, Flannel's pinned images, the charts'
  images, verify's), mirrored for every registry host;
* a Helm repository with charts named and versioned like the pinned ones, packaged and indexed by
  the real helm (tests/realbin), whose templates name images the way the real charts do (an
  ``image:`` field, NVIDIA's repository/image/version sections, an operator argument), at the versions the
  pinned charts deploy (tests/contract/upstream/versions.yaml; tests/contract/test_bundle_doubles_contract.py);
* a Debian-style OS archive (tests/fakes/apt_archive.py) with every package the os stage and the
  kubelet need, and the Kubernetes repository the test bed uses (tests/testbed/services.py), whose
  kubeadm is the test double;
* files with known sha256 (containerd, runc, Helm).
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import textwrap
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpustack.config import pins
from tests.fakes.apt_archive import Archive, Pkg, build_archive
from tests.fakes.oci_registry import Image, Registry, RegistryServer, build_image
from tests.testbed.services import build_k8s_repo

TESTBED = Path(__file__).resolve().parent.parent / "testbed"
DOUBLES = TESTBED / "doubles"
K8S_VERSION = pins.KUBERNETES["1.36"]
REGISTRIES = ("registry.k8s.io", "nvcr.io", "quay.io", "ghcr.io", "docker.io")
#: every image a 1.36 config names, with the test charts below (kubeadm's list: the double's)
IMAGES = (
    *(f"registry.k8s.io/{n}:v{K8S_VERSION}" for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")),
    f"registry.k8s.io/kube-proxy:v{K8S_VERSION}",
    "registry.k8s.io/coredns/coredns:v1.12.4",
    "registry.k8s.io/etcd:3.6.6-0",
    "registry.k8s.io/pause:3.10.2",
    "registry.k8s.io/e2e-test-images/agnhost:2.53",
    pins.VERIFY_CUDA_IMAGE,
    pins.DCGM_IMAGE,  # gpustack diag's and verify --load's
    # Flannel's (gpustack renders its manifest with the pinned images)
    pins.FLANNEL_IMAGE.format(version=pins.FLANNEL_VERSION),
    pins.FLANNEL_CNI_PLUGIN_IMAGE.format(tag=pins.FLANNEL_CNI_PLUGIN[pins.FLANNEL_VERSION]),
    "nvcr.io/nvidia/gpu-operator:v26.7.0",
    "nvcr.io/nvidia/driver:595.91.07-ubuntu24.04",
    "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0",
    "quay.io/prometheus-operator/prometheus-operator:v0.93.1",
    "quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1",
    f"quay.io/prometheus/prometheus:{pins.PROMETHEUS_IMAGE_TAG['88.5.3']}",  # gpustack's values set the tag
    f"nvcr.io/nvidia/k8s/dcgm-exporter:{pins.DCGM_EXPORTER_IMAGE_TAG['4.8.2']}",  # gpustack's values set the tag
)
#: os stage packages (every release's list) and the kubelet's dependencies from the OS
OS_PACKAGES = (
    Pkg("ca-certificates"),
    Pkg("curl", "libcurl4 (>= 0.0.1)"),
    Pkg("libcurl4", "libc6"),
    Pkg("libc6"),
    Pkg("gnupg", "gpg | gnupg2"),
    Pkg("gpg", "libc6"),
    Pkg("conntrack"),
    Pkg("socat"),
    Pkg("ebtables"),
    Pkg("ethtool"),
    Pkg("iptables", "libc6", version="1.4.21+gpustack.test"),  # the kubelet wants >= 1.4.21
    Pkg("iproute2"),
    Pkg("kmod"),
    Pkg("procps"),
    Pkg("python3-apt", "python3"),
    Pkg("python3"),
    Pkg("apt-transport-https"),
    Pkg("util-linux"),
    Pkg("mount"),
    Pkg("base-files", essential=True),  # Essential, needed by nothing: apt must not pull it in
    Pkg("unrelated-package"),
)

CHARTS: dict[str, dict[str, str]] = {
    "gpu-operator": {
        "values.yaml": "driver:\n  enabled: true\ntoolkit:\n  enabled: true\n",
        "templates/operator.yaml": textwrap.dedent(
            """\
            apiVersion: apps/v1
            kind: Deployment
            metadata: {name: gpu-operator}
            spec:
              selector: {matchLabels: {app: gpu-operator}}
              template:
                metadata: {labels: {app: gpu-operator}}
                spec:
                  containers:
                    - name: gpu-operator
                      image: nvcr.io/nvidia/gpu-operator:v26.7.0
                      env:
                        - {name: OPERATOR_NAMESPACE, value: gpu-operator}
            ---
            apiVersion: nvidia.com/v1
            kind: ClusterPolicy
            metadata: {name: cluster-policy}
            spec:
              driver:
                enabled: {{ .Values.driver.enabled }}
                repository: nvcr.io/nvidia
                image: driver
                version: "595.91.07"
              toolkit:
                enabled: {{ .Values.toolkit.enabled }}
                repository: nvcr.io/nvidia/k8s
                image: container-toolkit
                version: v1.20.0
              vgpuManager:
                enabled: false
                repository: nvcr.io/nvidia/private
                image: vgpu-manager
                version: "1.0"
            """
        ),
    },
    "kube-prometheus-stack": {
        "values.yaml": "prometheus: {prometheusSpec: {image: {}}}\n",
        "templates/operator.yaml": textwrap.dedent(
            """\
            apiVersion: apps/v1
            kind: Deployment
            metadata: {name: prometheus-operator}
            spec:
              selector: {matchLabels: {app: prometheus-operator}}
              template:
                metadata: {labels: {app: prometheus-operator}}
                spec:
                  containers:
                    - name: operator
                      image: quay.io/prometheus-operator/prometheus-operator:v0.93.1
                      args:
                        - --kubelet-service=kube-system/kubelet
                        - --prometheus-config-reloader=quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1
            ---
            apiVersion: monitoring.coreos.com/v1
            kind: Prometheus
            metadata: {name: kube-prometheus-stack-prometheus}
            spec:
              image: quay.io/prometheus/prometheus:{{ .Values.prometheus.prometheusSpec.image.tag | default "v3.14.0-distroless" }}
            """
        ),
    },
    "dcgm-exporter": {
        "values.yaml": "image: {}\n",
        "templates/daemonset.yaml": textwrap.dedent(
            """\
            apiVersion: apps/v1
            kind: DaemonSet
            metadata: {name: dcgm-exporter}
            spec:
              selector: {matchLabels: {app: dcgm-exporter}}
              template:
                metadata: {labels: {app: dcgm-exporter}}
                spec:
                  containers:
                    - name: exporter
                      image: nvcr.io/nvidia/k8s/dcgm-exporter:{{ .Values.image.tag | default "4.5.3-4.8.2-distroless" }}
            """
        ),
    },
}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


@dataclass
class FileServer:
    """A directory on http://127.0.0.1:<port>, recording request paths."""

    root: Path
    requests: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        seen = self.requests

        class Handler(_Quiet):
            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                seen.append(self.path)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(self.root)))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class BundleSources:
    files: FileServer
    registry: Registry
    registry_server: RegistryServer
    images: dict[str, Image]
    archive: Archive
    file_sha256: dict[str, str]
    k8s_fingerprint: str

    def config(self, *, os_release: str = "debian-12", files: bool = True) -> dict[str, Any]:
        """``sources:`` and ``versions:`` for gpustack.yaml (``files``: also the file URLs and sums)."""
        base = self.files.url
        sources: dict[str, Any] = {
            "kubernetes_apt_url": f"{base}/k8s/v{{minor}}/deb/",
            "kubernetes_apt_key_url": f"{base}/k8s/v{{minor}}/deb/Release.key",
            "kubernetes_apt_key_fingerprint": self.k8s_fingerprint,
            "registry_mirrors": {r: self.registry_server.url for r in REGISTRIES},
            "chart_repos": {name: f"{base}/charts" for name in CHARTS},
            "os_apt": {os_release: [self.archive.line(base)]},
            "os_apt_keyring": {os_release: str(self.archive.keyring)},
        }
        versions: dict[str, Any] = {
            "image_digests": {
                "registry.k8s.io/pause:3.10.2": self.images["registry.k8s.io/pause:3.10.2"].digest,
                "registry.k8s.io/e2e-test-images/agnhost:2.53": self.images[
                    "registry.k8s.io/e2e-test-images/agnhost:2.53"
                ].digest,
                pins.DCGM_IMAGE: self.images[pins.DCGM_IMAGE].digest,
            }
        }
        if files:
            sources.update(
                {
                    "containerd_url": f"{base}/files/containerd-{{version}}-linux-{{arch}}.tar.gz",
                    "runc_url": f"{base}/files/runc.{{arch}}",
                    "helm_url": f"{base}/files/helm-v{{version}}-linux-{{arch}}.tar.gz",
                    "cni_plugins_url": f"{base}/files/cni-plugins-linux-{{arch}}-v{{version}}.tgz",
                    "crictl_url": f"{base}/files/crictl-v{{version}}-linux-{{arch}}.tar.gz",
                    "etcd_url": f"{base}/files/etcd-v{{version}}-linux-{{arch}}.tar.gz",
                }
            )
            versions.update(
                {
                    "containerd_sha256": {"amd64": self.file_sha256["containerd"]},
                    "runc_sha256": {"amd64": self.file_sha256["runc"]},
                    "helm_sha256": {"amd64": self.file_sha256["helm"]},
                    "cni_plugins_sha256": {"amd64": self.file_sha256["cni-plugins"]},
                    "crictl_sha256": {"amd64": self.file_sha256["crictl"]},
                    "etcd_sha256": {"amd64": self.file_sha256["etcd"]},
                }
            )
        return {"sources": sources, "versions": versions}


def _chart(root: Path, name: str, version: str, files: Mapping[str, str]) -> Path:
    chart = root / name
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: {version}\ndescription: gpustack test\n")
    for rel, text in files.items():
        (chart / rel).write_text(text)
    return chart


def build_charts(helm: Path, work: Path, repo: Path, url: str) -> None:
    """Package the test charts at the pinned versions with the real helm and index them."""
    repo.mkdir(parents=True)
    for name, files in CHARTS.items():
        chart = _chart(work, name, pins.CHARTS[name].version, files)
        subprocess.run([str(helm), "package", str(chart), "-d", str(repo)], check=True, capture_output=True, timeout=60)
    subprocess.run([str(helm), "repo", "index", str(repo), "--url", url], check=True, capture_output=True, timeout=60)


@contextmanager
def serve(
    tmp: Path,
    helm: Path,
    *,
    files: Mapping[str, bytes] | None = None,
    images: Sequence[str] = IMAGES,
    suite: str = "bookworm",
) -> Iterator[BundleSources]:
    """Build and serve every source; ``files``: the bytes of containerd/runc/helm/CNI plugins/crictl/etcd (stand-ins
    by default) keyed like :data:`gpustack.bundle.want.FILE_LAYOUT`."""
    www = tmp / "www"
    (www / "files").mkdir(parents=True)
    server = FileServer(www)
    registry = Registry()
    reg_server = RegistryServer(registry)
    try:
        payloads = dict(files or {})
        payloads.setdefault("containerd", b"containerd release archive stand-in\n")
        payloads.setdefault("runc", b"runc stand-in\n")
        payloads.setdefault("helm", b"helm archive stand-in\n")
        payloads.setdefault("cni-plugins", b"CNI plugins archive stand-in\n")
        payloads.setdefault("crictl", b"crictl archive stand-in\n")
        payloads.setdefault("etcd", b"etcd release archive stand-in\n")
        names = {
            "containerd": f"containerd-{pins.CONTAINERD_VERSION}-linux-amd64.tar.gz",
            "runc": "runc.amd64",
            "helm": f"helm-v{pins.HELM_VERSION}-linux-amd64.tar.gz",
            "cni-plugins": f"cni-plugins-linux-amd64-v{pins.CNI_PLUGINS_VERSION}.tgz",
            "crictl": f"crictl-v{pins.CRICTL_VERSION}-linux-amd64.tar.gz",
            "etcd": f"etcd-v{pins.ETCD_VERSION}-linux-amd64.tar.gz",
        }
        sums = {}
        for key, data in payloads.items():
            (www / "files" / names[key]).write_bytes(data)
            sums[key] = hashlib.sha256(data).hexdigest()
        built = {}
        for ref in images:
            image = build_image(ref)
            _, _, rest = ref.partition("/")
            repo, _, tag = rest.rpartition(":")
            registry.add(repo, tag, image)
            built[ref] = image
        build_charts(helm, tmp / "charts-src", www / "charts", f"{server.url}/charts")
        archive = build_archive(www / "debian", suite, OS_PACKAGES, gnupg=tmp / "gnupg")
        k8s = build_k8s_repo(DOUBLES, K8S_VERSION, www, "1.36", gnupg_home=tmp / "gnupg-k8s")
        yield BundleSources(server, registry, reg_server, built, archive, sums, k8s.fingerprint)
    finally:
        server.close()
        reg_server.close()
