"""The Helm runner and pyhelm3 against the REAL helm (v4.2, tests/realbin): charts the tests write
are linted, packaged, shown and templated; the exact argv pyhelm3 builds for every call gpustack
makes is parsed by the real helm (an unreachable cluster makes each stop after flag parsing, so an
unknown or renamed flag would show as a usage error instead of "cluster unreachable")."""

from __future__ import annotations

import asyncio
import subprocess
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml
from pyhelm3 import Command
from pyhelm3 import errors as helm_errors

from gpustack.runners.helm import Helm, HelmError, ReleaseSpec
from tests.realbin import RealBins

CHART_YAML = """\
apiVersion: v2
name: probe
description: a chart written by gpustack's tests
type: application
version: 0.3.1
appVersion: "1.0"
kubeVersion: ">= 1.25.0-0"
"""
VALUES_YAML = """\
greeting: hello
replicas: 1
"""
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-probe
  labels:
    app.kubernetes.io/managed-by: {{ .Release.Service }}
data:
  greeting: {{ .Values.greeting | quote }}
  replicas: {{ .Values.replicas | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
"""


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    root = tmp_path / "probe"
    (root / "templates").mkdir(parents=True)
    (root / "Chart.yaml").write_text(CHART_YAML)
    (root / "values.yaml").write_text(VALUES_YAML)
    (root / "templates" / "configmap.yaml").write_text(CONFIGMAP)
    return root


def helm(real_bins: RealBins, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(real_bins.helm), *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_lint_package_show_template(real_bins: RealBins, chart: Path, tmp_path: Path) -> None:
    lint = helm(real_bins, "lint", str(chart))
    assert lint.returncode == 0 and "1 chart(s) linted, 0 chart(s) failed" in lint.stdout, lint.stdout + lint.stderr
    packaged = helm(real_bins, "package", str(chart), "--destination", str(tmp_path))
    assert packaged.returncode == 0, packaged.stderr
    tgz = tmp_path / "probe-0.3.1.tgz"
    with tarfile.open(tgz) as tar:
        assert {"probe/Chart.yaml", "probe/values.yaml", "probe/templates/configmap.yaml"} <= set(tar.getnames())
    shown = yaml.safe_load(helm(real_bins, "show", "chart", str(tgz)).stdout)
    assert shown["name"] == "probe" and shown["version"] == "0.3.1"
    rendered = helm(real_bins, "template", "rel", str(tgz), "--set", "greeting=hi", "--kube-version", "1.36.4")
    assert rendered.returncode == 0, rendered.stderr
    cm = yaml.safe_load(rendered.stdout)
    assert cm["metadata"]["name"] == "rel-probe"
    assert cm["data"] == {"greeting": "hi", "replicas": "1", "kube": "v1.36.4"}


def test_lint_catches_a_broken_template(real_bins: RealBins, chart: Path) -> None:
    (chart / "templates" / "broken.yaml").write_text("kind: ConfigMap\nmetadata:\n  name: {{ .Values.nope.deeper }}\n")
    lint = helm(real_bins, "lint", str(chart))
    assert lint.returncode != 0 and "nil pointer" in (lint.stdout + lint.stderr)


def test_pyhelm3_template_and_show_with_the_real_helm(real_bins: RealBins, chart: Path) -> None:
    command = Command(executable=str(real_bins.helm))
    metadata = asyncio.run(command.show_chart(chart))
    assert metadata["name"] == "probe" and metadata["appVersion"] == "1.0"
    values = asyncio.run(command.show_values(chart))
    assert values == {"greeting": "hello", "replicas": 1}
    objects = list(asyncio.run(command.template("rel", chart, {"greeting": "from-stdin"}, namespace="ns1")))
    assert [o["kind"] for o in objects] == ["ConfigMap"] and objects[0]["data"]["greeting"] == "from-stdin"


UNREACHABLE = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Config
    clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
    users: [{name: u, user: {token: t}}]
    contexts: [{name: x, context: {cluster: c, user: u}}]
    current-context: x
    """
)


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(UNREACHABLE)
    path.chmod(0o600)
    return path


def assert_parsed(exc: helm_errors.Error) -> str:
    """The real helm accepted every flag and stopped at the cluster."""
    stderr = exc.stderr.decode()
    assert "unknown flag" not in stderr and "unknown shorthand" not in stderr and "invalid argument" not in stderr
    assert "connection refused" in stderr or "unreachable" in stderr, stderr
    return stderr


def test_every_argv_pyhelm3_builds_for_gpustack_parses_in_the_real_helm(
    real_bins: RealBins, chart: Path, unreachable: Path
) -> None:
    runner = Helm(unreachable, executable=str(real_bins.helm), default_timeout="30s")
    command = runner._command  # the recording pyhelm3 Command the runner drives
    calls = [
        command.status("rel", namespace="ns1"),
        command.get_values("rel", namespace="ns1"),
        command.history("rel", namespace="ns1"),
        # the runner's own call: pyhelm3 asks the real helm for its version and picks Helm 4's flags
        runner._client.install_or_upgrade_release(
            "rel",
            runner._chart(ReleaseSpec("rel", "probe", "http://127.0.0.1:9", "0.3.1", "ns1", {})),
            {"greeting": "x"},
            rollback_on_failure=True,
            wait=True,
            timeout="5m",
            namespace="ns1",
            create_namespace=True,
        ),
        command.rollback("rel", None, cleanup_on_fail=True, timeout="5m", wait=True, namespace="ns1"),
        command.uninstall("rel", timeout="5m", wait=True, namespace="ns1"),
    ]
    for call in calls:
        with pytest.raises(helm_errors.Error) as ei:
            asyncio.run(call)
        assert_parsed(ei.value)
    argvs = [c.argv for c in runner.calls]
    upgrade = next(a for a in argvs if a[0] == "upgrade")
    # pyhelm3 0.5.8 detects Helm 4 and spells --atomic the Helm 4 way; --wait (watcher) and --wait-for-jobs
    assert "--rollback-on-failure" in upgrade and "--atomic" not in upgrade
    assert {"--install", "--wait", "--wait-for-jobs", "--create-namespace"} <= set(upgrade)
    assert upgrade[upgrade.index("--timeout") + 1] == "5m" and upgrade[upgrade.index("--values") + 1] == "-"
    assert [a[0] for a in argvs if a[0] != "version"] == [
        "status",
        "get",
        "history",
        "upgrade",
        "rollback",
        "uninstall",
    ]
    # the real helm documents the flag pyhelm3 relies on
    assert "--rollback-on-failure" in helm(real_bins, "upgrade", "--help").stdout


def test_runner_reports_an_unreachable_cluster_naming_the_release(real_bins: RealBins, unreachable: Path) -> None:
    runner = Helm(unreachable, executable=str(real_bins.helm), default_timeout="30s")
    spec = ReleaseSpec("probe", "probe", "https://charts.invalid", "0.3.1", "ns1", {})
    with pytest.raises(HelmError) as ei:
        runner.ensure_release(spec)
    assert ei.value.release == "probe" and "helm status of release 'probe' failed" in ei.value.message
    assert runner.call_counts() == {"mutating": 0, "read": 1}


def test_a_bundle_chart_archive_installs_without_a_repository(
    real_bins: RealBins, chart: Path, tmp_path: Path, unreachable: Path
) -> None:
    """up --bundle: the release comes from the bundle's chart archive; the real helm takes the
    local path (with pyhelm3's --version) and stops only at the cluster."""
    packaged = helm(real_bins, "package", str(chart), "--destination", str(tmp_path))
    assert packaged.returncode == 0, packaged.stderr
    archive = tmp_path / "probe-0.3.1.tgz"
    runner = Helm(unreachable, executable=str(real_bins.helm), default_timeout="30s")
    spec = ReleaseSpec("rel", "probe", "https://charts.invalid", "0.3.1", "ns1", {}, archive=archive)
    with pytest.raises(helm_errors.Error) as ei:
        asyncio.run(
            runner._client.install_or_upgrade_release(
                "rel", runner._chart(spec), {}, rollback_on_failure=True, wait=True, timeout="5m", namespace="ns1"
            )
        )
    assert_parsed(ei.value)
    upgrade = next(c.argv for c in runner.calls if c.argv[0] == "upgrade")
    assert upgrade[1:3] == ("rel", str(archive)) and "--repo" not in upgrade
    # the archive is what helm renders (no repository contacted): template through the runner
    objects = Helm(executable=str(real_bins.helm)).template(
        "rel", archive, {"greeting": "b"}, namespace="ns1", kube_version="v1.36.4"
    )
    assert objects[0]["data"]["greeting"] == "b" and objects[0]["data"]["kube"] == "v1.36.4"
