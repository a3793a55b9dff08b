"""Contract: the helm doubles (tests/fakes/fake_helm.py behind tests/fakes/helm; tests/testbed/doubles/helm)
answer what the real Helm 4.3 answers.

The real helm (tests/realbin, v4.3.x) runs here. It cannot install into the fake API server (it sends protobuf
bodies), but it reads releases the way it stores them (Secrets ``sh.helm.release.v1.<name>.v<n>``, the release
JSON gzipped and base64-encoded: helm/helm v4.2.4 pkg/storage/driver/secrets.go, util.go; the real v4.3.1
reads the same records here). So the double's
releases are written into the fake API server in Helm's storage format and the real helm and the double answer
the same commands, the ones gpustack's runner (pyhelm3 0.5) sends: every output is compared.
The flags the double parses are checked against the real helm's own ``--help``."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
from collections.abc import Iterator
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyhelm3.command import CHART_METADATA_TEMPLATE

from gpustack.config import pins
from gpustack.runners.helm import Helm, ReleaseSpec
from tests.fakes import fake_helm
from tests.fakes.kube_api import FakeKubeAPI
from tests.realbin import RealBins, real_bins

FAKE_HELM = str(Path(__file__).resolve().parents[1] / "fakes" / "helm")
TESTBED_HELM = Path(__file__).resolve().parents[1] / "testbed" / "doubles" / "helm"
NS = "monitoring"


def _release_secret(name: str, ns: str, rev: dict[str, Any]) -> dict[str, Any]:
    """One revision of the double's state as Helm 4 stores it (pkg/storage/driver/util.go encodeRelease:
    JSON, gzip, base64; secrets.go newSecretsObject: the labels and the type)."""
    record = fake_helm.release_json(name, ns, rev)
    record["chart"]["metadata"] = {"apiVersion": "v2", "name": rev["chart"]["name"], "version": rev["chart"]["version"]}
    encoded = base64.b64encode(gzip.compress(json.dumps(record).encode())).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{name}.v{rev['revision']}",
            "namespace": ns,
            "labels": {"name": name, "owner": "helm", "status": rev["status"], "version": str(rev["revision"])},
        },
        "data": {"release": base64.b64encode(encoded.encode()).decode()},
    }


class Both:
    """The double and the real helm, on the same releases."""

    def __init__(self, tmp: Path, api: FakeKubeAPI, bins: RealBins) -> None:
        self.tmp, self.api, self.bins = tmp, api, bins
        self.kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        self.env = {**os.environ, "FAKE_HELM_STATE": str(tmp / "state"), "HOME": str(tmp),
                    "HELM_CACHE_HOME": str(tmp / "cache"), "HELM_CONFIG_HOME": str(tmp / "config")}  # fmt: skip
        for var in ("FAKE_HELM_FAIL", "FAKE_HELM_DELAY", "FAKE_HELM_API", "FAKE_HELM_LOG"):
            self.env.pop(var, None)

    def helm(self, real: bool, *argv: str) -> subprocess.CompletedProcess[str]:
        exe = str(self.bins.helm) if real else FAKE_HELM
        return subprocess.run([exe, *argv, "--kubeconfig", str(self.kubeconfig)], capture_output=True, text=True,
                              env=self.env, timeout=60)  # fmt: skip

    def publish(self) -> None:
        """Write the double's releases into the fake API server in Helm's storage format."""
        state = fake_helm.State(self.tmp / "state")
        self.api.seed([_release_secret(name, ns, rev) for ns, name, revs in state.all() for rev in revs])


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    tmp = tmp_path_factory.mktemp("helm-contract")
    with FakeKubeAPI.running() as api:
        b = Both(tmp, api, real_bins())
        os.environ["FAKE_HELM_STATE"] = b.env["FAKE_HELM_STATE"]
        try:
            helm = Helm(executable=FAKE_HELM)  # gpustack's runner installs, then upgrades: revisions 1 and 2
            spec = ReleaseSpec("kube-prometheus-stack", "kube-prometheus-stack", "https://charts.example.com", "88.5.3",
                               NS, {"grafana": {"enabled": True}})  # fmt: skip
            helm.ensure_releases([spec])
            helm.ensure_releases([ReleaseSpec(**{**spec.__dict__, "values": {"grafana": {"enabled": False}}})])
        finally:
            os.environ.pop("FAKE_HELM_STATE", None)
        b.publish()
        yield b


def _same(both: Both, *argv: str) -> tuple[str, str]:
    fake, real = both.helm(False, *argv), both.helm(True, *argv)
    assert (fake.returncode, fake.stderr) == (real.returncode, real.stderr), argv
    return fake.stdout, real.stdout


def _times(obj: Any) -> Any:
    """RFC 3339 timestamps as datetimes (Go trims trailing zeros of the fraction, Python does not)."""
    if isinstance(obj, dict):
        return {k: _times(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_times(v) for v in obj]
    if isinstance(obj, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", obj):
        return datetime.fromisoformat(obj.replace("Z", "+00:00"))
    return obj


def test_status_json(both: Both) -> None:
    fake, real = _same(both, "status", "kube-prometheus-stack", "--output", "json", "--namespace", NS)
    assert _times(json.loads(fake)) == _times(json.loads(real))


def test_history_json(both: Both) -> None:
    fake, real = _same(both, "history", "kube-prometheus-stack", "--output", "json", "--max", "5", "--namespace", NS)
    assert _times(json.loads(fake)) == _times(json.loads(real))


@pytest.mark.parametrize("revision", [None, "1"])
def test_get_values_json(both: Both, revision: str | None) -> None:
    rev = ["--revision", revision] if revision else []
    fake, real = _same(both, "get", "values", "kube-prometheus-stack", "--output", "json", "--namespace", NS, *rev)
    assert json.loads(fake) == json.loads(real)


def test_get_all_with_pyhelm3s_chart_metadata_template(both: Both) -> None:
    fake, real = _same(
        both, "get", "all", "kube-prometheus-stack", "--template", CHART_METADATA_TEMPLATE, "--namespace", NS
    )
    assert yaml.safe_load(fake) == yaml.safe_load(real)


def test_list_json(both: Both) -> None:
    fake, real = _same(both, "list", "--max", "256", "--output", "json", "--all-namespaces")
    assert json.loads(fake) == json.loads(real)


@pytest.mark.parametrize("argv", [("status", "nope"), ("history", "nope"), ("uninstall", "nope")])
def test_missing_release_errors(both: Both, argv: tuple[str, ...]) -> None:
    _same(both, *argv, "--namespace", NS)


def test_version_outputs(both: Both) -> None:
    real = both.helm(True, "version", "--template", "{{.Version}}").stdout
    fake = both.helm(False, "version", "--template", "{{.Version}}").stdout
    assert real.startswith("v4.3.") and fake.startswith("v4.3.")
    for args, pattern in ((("version", "--short"), r"v\d+\.\d+\.\d+\+g[0-9a-f]{7}\n"),
                          (("version",), r'version\.BuildInfo\{Version:"v[\d.]+", GitCommit:"[0-9a-f]{40}", '
                                         r'GitTreeState:"clean", GoVersion:"go[\d.]+", KubeClientVersion:"v1\.\d+"\}\n'),
                          (("version", "--template", "{{.GitCommit}} {{.KubeClientVersion}}"), r"[0-9a-f]{40} v1\.\d+")):  # fmt: skip
        assert re.fullmatch(pattern, both.helm(True, *args).stdout), args
        env = {**os.environ, "GPUSTACK_DOUBLES_ROOT": str(both.tmp / "testbed-root")}
        testbed = subprocess.run([str(TESTBED_HELM), *args], capture_output=True, text=True, env=env, timeout=30)
        assert re.fullmatch(pattern, testbed.stdout), (args, testbed.stdout)


# --- flags -----------------------------------------------------------------------------------------------


@cache
def _real_flags(subcommand: str) -> dict[str, bool]:
    """Flag -> takes a value, from the real helm's ``<subcommand> --help`` (global flags included)."""
    out = subprocess.run([str(real_bins().helm), *subcommand.split(), "--help"], capture_output=True, text=True,
                         timeout=30).stdout  # fmt: skip
    flags: dict[str, bool] = {}
    for m in re.finditer(r"^\s+(?:-\w, )?(--[\w-]+)(?: (\S+))?\s{2,}", out, re.M):
        typ = m.group(2) or ""
        flags[m.group(1)] = bool(typ) and not typ.startswith("WaitStrategy")  # --wait's value is optional
    return flags


def test_every_flag_gpustack_sends_is_a_real_flag_and_the_double_parses_it_alike(both: Both, tmp_path: Path) -> None:
    env = {**both.env, "FAKE_HELM_LOG": str(tmp_path / "log.jsonl"), "FAKE_HELM_STATE": str(tmp_path / "state")}
    old = dict(os.environ)
    os.environ.update(env)
    try:
        helm = Helm(executable=FAKE_HELM)
        spec = ReleaseSpec("demo", "demo", "https://charts.example.com", "1.0.0", "ns", {"a": 1})
        helm.ensure_releases([spec])
        helm.ensure_releases([ReleaseSpec(**{**spec.__dict__, "values": {"a": 2}})])
    finally:
        os.environ.clear()
        os.environ.update(old)
    calls = [json.loads(line)["argv"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    seen: set[tuple[str, str]] = set()
    for argv in calls:
        sub = " ".join(argv[:2]) if argv[0] == "get" else argv[0]
        real = _real_flags(sub)
        for arg in argv:
            if not arg.startswith("--"):
                continue
            flag = arg.split("=", 1)[0]
            assert flag in real, f"helm {sub}: {flag} is not a flag of the real helm {real_bins()}"
            takes_value = "=" in arg or (
                flag in fake_helm.parse([flag, "x"])[1] and fake_helm.parse([flag, "x"])[1][flag] == "x"
            )
            assert takes_value == real[flag] or "=" in arg, f"helm {sub}: {flag} takes a value: {real[flag]}"
            seen.add((sub, flag))
    assert ("upgrade", "--rollback-on-failure") in seen and ("status", "--output") in seen


def test_the_doubles_imitate_the_pinned_helm() -> None:
    minor = ".".join(pins.HELM_VERSION.split(".")[:2])
    assert fake_helm.VERSION.lstrip("v").startswith(minor + ".")
    text = TESTBED_HELM.read_text()
    (default,) = re.findall(r'GPUSTACK_HELM_DOUBLE_VERSION", "(v[\d.]+)"', text)
    assert default == "v" + pins.HELM_VERSION
