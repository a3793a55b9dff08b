"""The environment: gpustack's own variables are not config; a typo is reported as the variable,
with the closest valid name; docs/configuration.md documents every registered variable."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpustack.config import environment
from gpustack.config.load import load
from gpustack.config.model import Config
from gpustack.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
GOOD = "nodes:\n  - {name: cp1, address: 192.0.2.10, role: control-plane}\nfirewall:\n  enabled: true\n"


def _load(tmp_path: Path, environ: dict[str, str], text: str = GOOD) -> Config:
    (tmp_path / "gpustack.yaml").write_text(text)
    return load(tmp_path / "gpustack.yaml", environ=environ, cwd=tmp_path).config


def _error(tmp_path: Path, environ: dict[str, str], text: str = GOOD) -> str:
    with pytest.raises(ConfigError) as ei:
        _load(tmp_path, environ, text)
    assert ei.value.exit_code == 2
    return ei.value.message


@pytest.mark.parametrize("name", sorted(environment.NON_CONFIG))
def test_own_variables_are_not_config(tmp_path: Path, name: str) -> None:
    assert _load(tmp_path, {name: "1"}).nodes[0].name == "cp1"


def test_typo_in_section_names_the_variable_and_suggests(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"GPUSTACK_FIREWAL__ENABLED": "false"})
    assert msg.startswith("environment variable GPUSTACK_FIREWAL__ENABLED: no section named 'firewal'")
    assert "did you mean GPUSTACK_FIREWALL__ENABLED?" in msg
    assert "gpustack.yaml" not in msg  # not blamed on a line of the file


def test_typo_in_field(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"GPUSTACK_FIREWALL__ENABLD": "false"})
    assert "GPUSTACK_FIREWALL__ENABLD: no field of firewall named 'enabld'" in msg
    assert "GPUSTACK_FIREWALL__ENABLED" in msg


def test_typo_of_an_own_variable(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"GPUSTACK_VERIFY_SAMPL": "x"})
    assert "did you mean GPUSTACK_VERIFY_SAMPLE?" in msg


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("GPUSTACK_KUBERNETES", "did you mean GPUSTACK_VERSIONS__KUBERNETES?"),
        ("GPUSTACK_NODES__NAME", "'nodes' cannot be set from the environment (it is a list)"),
        ("GPUSTACK_MONITORING__PROMETHEUS_STORAGE", "is a section; name one of its fields"),
        ("GPUSTACK_CLUSTER__", "expected GPUSTACK_<SECTION>__<FIELD>"),
    ],
)
def test_malformed_variables(tmp_path: Path, name: str, needle: str) -> None:
    msg = _error(tmp_path, {name: "1"})
    assert f"environment variable {name}:" in msg and needle in msg


def test_nested_section_variable_works(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"GPUSTACK_MONITORING__PROMETHEUS_STORAGE__SIZE": "80Gi"})
    assert cfg.monitoring.prometheus_storage.size == "80Gi"


def test_bad_value_from_env_names_the_variable_even_when_the_file_sets_the_section(tmp_path: Path) -> None:
    msg = _error(tmp_path, {"GPUSTACK_FIREWALL__ENABLED": "perhaps"})
    assert "environment (GPUSTACK_FIREWALL__ENABLED): firewall.enabled:" in msg


def test_secret_variables_named_by_the_config_are_not_overrides(tmp_path: Path) -> None:
    text = GOOD + (
        "alerting:\n  receivers:\n    - {type: pagerduty, name: pager, routing_key_env: GPUSTACK_PD_KEY}\n"
        "  routes: {critical: [pager]}\n"
    )
    cfg = _load(tmp_path, {"GPUSTACK_PD_KEY": "s3cret"}, text)
    assert cfg.alerting.receivers[0].name == "pager"


# How code reads a variable: os.environ.get("X") / os.environ["X"] / os.getenv("X") in Python,
# $X / ${X...} in shell scripts and templates.
READ_RE = re.compile(r"""(?:environ(?:\.get)?\(?\[?|getenv\()\s*["'](GPUSTACK_[A-Z0-9_]+)|\$\{?(GPUSTACK_[A-Z0-9_]+)""")


def test_every_variable_read_in_the_tree_is_registered_or_config() -> None:
    """grep the code, scripts, playbooks and tests for GPUSTACK_* variables read from the environment."""
    names: set[str] = set()
    for top in ("gpustack", "scripts", "playbooks", "tests"):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                text = path.read_text(encoding="utf-8", errors="replace")
                names |= {a or b for a, b in READ_RE.findall(text)}
    assert {"GPUSTACK_SKIP_SANDBOX", "GPUSTACK_VENV", "GPUSTACK_IPTABLES", "GPUSTACK_STATE_DIR"} <= names
    config_names = {environment.variable_name(p) for p in environment.config_variables(Config)}
    assert sorted(names - config_names - set(environment.NON_CONFIG)) == []


def test_docs_list_every_registered_variable() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`(GPUSTACK_[A-Z0-9_]+)`", doc))
    assert set(environment.NON_CONFIG) <= documented
