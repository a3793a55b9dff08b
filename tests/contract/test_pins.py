"""Every double declares the version of the real thing it imitates; these fail when gpustack/config/pins.py
moves past it. Moving a pin then means: read the new upstream version's behaviour, update the double and its
facts (tests/contract/upstream/*.yaml), then the version it declares."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpustack.config import pins
from gpustack.config.pins import version_tuple
from tests.contract.upstream import fact_files, facts
from tests.fakes import fake_helm, grafana_api, kube_semantics
from tests.prometheus import replay_exporter

TESTS = Path(__file__).resolve().parents[1]
DOUBLES = TESTS / "testbed" / "doubles"
VERSIONS = facts("versions")
#: the minor a default cluster runs, and the tests' real control plane (tests/realbin): the doubles imitate it.
#: 1.37 is offered (an explicit `versions.kubernetes` or `upgrade --to 1.37`) but not the default yet
#: (docs/decisions.md, issue 30): no double nor the real-binary fixture follows it until it becomes the default.
DEFAULT_MINOR = pins.KUBERNETES_DEFAULT


def _declared(script: Path, name: str) -> str:
    """A module-level ``NAME = "value"`` of a double that is a script (it is not imported: it runs on test hosts)."""
    (value,) = re.findall(rf'^{name} = "([^"]+)"', script.read_text(), re.M)
    return value


def test_the_fake_api_server_imitates_the_default_kubernetes() -> None:
    assert version_tuple(kube_semantics.IMITATES) >= version_tuple(DEFAULT_MINOR)


@pytest.mark.parametrize("double", ["kubeadm", "kubelet", "kubectl"])
def test_the_testbed_kubernetes_doubles_imitate_the_default_kubernetes(double: str) -> None:
    assert version_tuple(_declared(DOUBLES / double, "IMITATES")) >= version_tuple(DEFAULT_MINOR), double


def test_the_helm_doubles_imitate_the_pinned_helm() -> None:
    minor = ".".join(pins.HELM_VERSION.split(".")[:2])
    assert minor == VERSIONS["helm"]["minor"]
    assert fake_helm.VERSION == "v" + pins.HELM_VERSION
    assert re.search(
        rf'"GPUSTACK_HELM_DOUBLE_VERSION", "v{re.escape(pins.HELM_VERSION)}"', (DOUBLES / "helm").read_text()
    )
    assert _declared(DOUBLES / "helm", "KUBE_CLIENT_VERSION") == VERSIONS["helm"]["kube_client"]


def test_the_grafana_double_imitates_the_pinned_charts_grafana() -> None:
    chart = pins.CHARTS["kube-prometheus-stack"].version
    assert chart in VERSIONS["kube-prometheus-stack"], f"record kube-prometheus-stack {chart}'s versions first"
    assert VERSIONS["kube-prometheus-stack"][chart]["grafana"] == grafana_api.GRAFANA_VERSION


def test_the_replayed_exporter_reports_the_pinned_operators_driver() -> None:
    chart = pins.CHARTS["gpu-operator"].version
    assert chart in VERSIONS["gpu-operator"], f"record gpu-operator {chart}'s versions first"
    assert VERSIONS["gpu-operator"][chart]["driver"] == replay_exporter.DRIVER


def test_the_recorded_dcgm_outputs_are_of_the_pinned_dcgm() -> None:
    chart = pins.CHARTS["gpu-operator"].version
    assert VERSIONS["gpu-operator"][chart]["dcgm"].startswith(pins.DCGM_VERSION + "-")
    for log in sorted((TESTS / "fixtures" / "dcgmi").glob("*.log")):
        versions = set(re.findall(r"\(DCGM ([\d.]+)\)", log.read_text()))
        assert versions <= {pins.DCGM_VERSION}, log.name
    recorded = TESTS / "fixtures" / "dcgmi"
    assert (recorded / f"dcgm-{pins.DCGM_VERSION}").is_dir(), "record the pinned DCGM's documents first"
    for path in sorted((recorded / f"dcgm-{pins.DCGM_VERSION}").glob("diag-*.json")):
        data = json.loads(path.read_text())
        for one in data.get("iterations", [data]):
            meta = one.get("metadata") or one["DCGM Diagnostic"]
            assert meta["version"] == pins.DCGM_VERSION, path.name
    # dcgm-3.3.9/ is DCGM 3.x on purpose: the older shape gpustack still reads
    for path in sorted(recorded.glob("dcgm-3.*/diag-*.json")):
        assert json.loads(path.read_text())["version"].startswith("3."), path.name


def test_the_kubeadm_doubles_pause_image_is_the_pinned_one() -> None:
    images = re.search(r"^LISTED_IMAGES = \((.*?)\)$", (DOUBLES / "kubeadm").read_text(), re.M | re.S)
    assert images is not None
    (pause,) = re.findall(r'"pause:([^"]+)"', images.group(1))
    minor = _declared(DOUBLES / "kubeadm", "IMITATES")
    assert pause == pins.KUBERNETES_LINES[minor].pause == str(VERSIONS["kubernetes"]["pause"][minor])


def test_every_upstream_fact_names_its_source() -> None:
    for name in fact_files():
        data = facts(name)
        for key, node in data.items():
            if not isinstance(node, dict):
                continue
            # a section names its source, or every entry under it does (versions.yaml: one per chart version)
            assert "source" in node or all(isinstance(v, dict) and "source" in v for v in node.values()), (name, key)
