"""Contract: the replayed dcgm-exporter (tests/prometheus/replay_exporter.py) prints GPU metrics as dcgm-exporter
does (label set and order, both spellings of its host label: tests/contract/upstream/dcgm_exporter.yaml), in
exposition text the real promtool accepts; the recorded DCGM outputs (tests/fixtures/dcgmi) are of the pinned
DCGM and hold the JSON document gpustack's parser reads."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpustack.monitoring.counters import load_counters
from tests.contract.upstream import facts
from tests.prometheus.replay_exporter import NodeSpec, PodRef, render_dcgm

D = facts("dcgm_exporter")["gpu_metric_labels"]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("exporter", sorted(D["host_label"]))
def test_gpu_metric_labels_are_dcgm_exporters(exporter: str) -> None:
    host = D["host_label"][exporter]
    spec = NodeSpec("node-a", {0: PodRef("ml", "train-0", "trainer")}, host_label=host, gpus=2)
    text = render_dcgm(spec, load_counters(), 0.0)
    samples = [line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_TEMP{")]
    assert len(samples) == 2
    for line in samples:
        names = re.findall(r'([A-Za-z_]\w*)="', line.split("{", 1)[1])
        assert names[: len(D["identity"]) + 1] == [*D["identity"], host]
        rest = names[len(D["identity"]) + 1 :]
        labels, attributes = (
            [n for n in rest if n.startswith("DCGM_FI_")],
            [n for n in rest if not n.startswith("DCGM_FI_")],
        )
        assert rest == labels + attributes and labels == sorted(labels) and attributes == sorted(attributes)
        assert attributes in ([], D["pod_attributes"])


MIG_SAMPLE = FIXTURES / "mig" / "dcgm-exporter-h100-all-1g.10gb-one-pod.prom"


def _series(text: str) -> dict[str, list[tuple[list[str], dict[str, str], float]]]:
    """metric -> [(label names in order, labels, value)] of an exposition text."""
    out: dict[str, list[tuple[list[str], dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        body, _, value = rest.rpartition("} ")
        pairs = re.findall(r'([A-Za-z_]\w*)="([^"]*)"', body)
        out.setdefault(name, []).append(([k for k, _ in pairs], dict(pairs), float(value)))
    return out


def test_the_mig_replay_has_the_exporter_samples_shape() -> None:
    """One H100 at all-1g.10gb, a pod on GPU instance 7: the replay prints every family of the exporter sample
    (tests/fixtures/mig, from dcgm-exporter's render_metrics.go) with one series per instance, the same label names
    in the same order, the pod's labels on its instance only, GPU-level fields repeated on every instance; and
    none of the fields DCGM does not report under MIG."""
    sample = _series(MIG_SAMPLE.read_text(encoding="utf-8"))
    spec = NodeSpec("gpu-h100-01", {}, gpus=1, mig="1g.10gb", mig_pods={(0, 7): PodRef("team-a", "infer-0", "server")})
    replay = _series(render_dcgm(spec, load_counters(), 0.0))
    assert "DCGM_FI_DEV_GPU_UTIL" not in replay and "DCGM_FI_DEV_MEM_COPY_UTIL" not in replay
    exported = {c.name for c in load_counters().counters}
    common = sorted(set(sample) & exported)
    assert len(common) >= 15 and set(common) <= set(replay)
    for name in common:
        want, got = sample[name], replay[name]
        assert len(got) == len(want) == 7, name
        for (w_names, w_labels, _), (g_names, g_labels, _) in zip(want, got, strict=True):
            g_names = [n for n in g_names if n not in ("pod_uid", "err_code", "err_msg")]
            w_names = [n for n in w_names if n not in ("err_code", "err_msg")]
            assert g_names == w_names, name
            assert (g_labels["GPU_I_ID"], g_labels.get("pod")) == (w_labels["GPU_I_ID"], w_labels.get("pod")), name
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK"):
        for series in (sample[name], replay[name]):  # GPU-level: one value, repeated on each instance
            assert len({v for _, _, v in series}) == 1, name


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) is not installed")
def test_the_real_promtool_parses_the_exposition() -> None:
    """promtool parses it (a parse error is "error while linting: text format parsing error"); its lint findings
    are about dcgm-exporter's own names (modelName and UUID are camelCase, counters lack "_total"), which the real
    exporter prints too."""
    spec = NodeSpec("node-b", {1: PodRef("ml", "train-1", "trainer")}, gpus=2)
    check = subprocess.run(["promtool", "check", "metrics"], input=render_dcgm(spec, load_counters(), 30.0),
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    findings = [line for line in (check.stdout + check.stderr).splitlines() if line.strip()]
    assert "error while linting" not in check.stderr
    naming = ("label names should be written in 'snake_case' not 'camelCase'", 'counter metrics should have "_total"'
              " suffix", "metric name should not include type 'counter'")  # fmt: skip
    assert findings and all(line.endswith(naming) for line in findings), findings


@pytest.mark.parametrize("log", sorted((FIXTURES / "dcgmi").glob("*.log")), ids=lambda p: p.name)
def test_recorded_dcgmi_outputs_hold_one_json_document(log: Path) -> None:
    text = log.read_text()
    body = text.split("begin dcgmi output", 1)[-1].split("\n", 1)[-1].split("gpustack: end dcgmi output")[0]
    if "{" not in body:  # a run where dcgmi failed before printing JSON (host engine down, timeout)
        assert "exit 0" not in text
        return
    doc = json.loads(body[body.index("{") :])
    assert isinstance(doc, dict) and doc


DOCUMENTS = sorted((FIXTURES / "dcgmi").glob("dcgm-*/*.json"))


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_dcgm_documents_are_one_json_object_each_and_named_in_the_readme(path: Path) -> None:
    """dcgmi prints one object (``toStyledString``: braces at column 0); the README names each one's writer."""
    text = path.read_text()
    assert text.startswith("{\n") and isinstance(json.loads(text), dict)
    readme = (FIXTURES / "dcgmi" / "README.md").read_text()
    assert f"`{path.parent.name}/{path.name}`" in readme
