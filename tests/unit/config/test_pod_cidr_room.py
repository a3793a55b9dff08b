"""cluster.pod_cidr must hold a /24 for every node (issue 26: the real controller-manager at 1,000 kwok nodes gave
744 nodes no pod CIDR out of the default 10.244.0.0/16, which holds 256)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpustack.config.load import load
from gpustack.errors import ConfigError


def config(nodes: int, pod_cidr: str | None = None) -> str:
    lines = ["nodes:", "  - {name: cp1, address: 192.0.2.1, role: control-plane}"]
    lines += [f"  - {{name: w{i}, address: 198.18.{i // 250}.{i % 250 + 1}}}" for i in range(1, nodes)]
    if pod_cidr:
        lines += ["cluster:", f"  pod_cidr: {pod_cidr}"]
    return "\n".join(lines) + "\n"


def load_text(tmp_path: Path, text: str) -> None:
    path = tmp_path / "gpustack.yaml"
    path.write_text(text, encoding="utf-8")
    load(path, environ={}, cwd=tmp_path)


@pytest.mark.parametrize(("nodes", "pod_cidr"), [(256, None), (257, "10.244.0.0/15"), (1024, "10.244.0.0/14")])
def test_a_pod_cidr_with_a_24_for_every_node_loads(tmp_path: Path, nodes: int, pod_cidr: str | None) -> None:
    load_text(tmp_path, config(nodes, pod_cidr))


@pytest.mark.parametrize(
    ("nodes", "pod_cidr", "said"),
    [
        (257, None, "pod CIDR 10.244.0.0/16 holds 256 nodes (a /24 each) and the config has 257: use a /15 or larger"),
        (
            1000,
            None,
            "pod CIDR 10.244.0.0/16 holds 256 nodes (a /24 each) and the config has 1000: use a /14 or larger",
        ),
        (3, "10.244.0.0/23", "pod CIDR 10.244.0.0/23 holds 2 nodes (a /24 each) and the config has 3: use a /22 or"),
    ],
)
def test_more_nodes_than_the_pod_cidr_holds_is_refused(
    tmp_path: Path, nodes: int, pod_cidr: str | None, said: str
) -> None:
    with pytest.raises(ConfigError) as ei:
        load_text(tmp_path, config(nodes, pod_cidr))
    assert ei.value.exit_code == 2
    assert "cluster.pod_cidr: " + said in " ".join(ei.value.message.split())
