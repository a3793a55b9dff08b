"""Every bad-input case gives ConfigError (exit 2) naming file, line and field; good input loads."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpustack.config import pins
from gpustack.config.load import env_overrides, load
from gpustack.errors import ConfigError

GOOD = """\
nodes:
  - name: cp1
    address: 192.0.2.10
    role: control-plane
  - name: w1
    address: 192.0.2.11
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gpustack.yaml"
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


def err(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as ei:
        load(write(tmp_path, text), environ=environ or {}, cwd=tmp_path)
    assert ei.value.exit_code == 2
    return ei.value.message


def test_good_config_loads_with_defaults(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, GOOD), environ={}, cwd=tmp_path)
    cfg = loaded.config
    assert [n.name for n in cfg.nodes] == ["cp1", "w1"]
    assert cfg.control_plane.name == "cp1"
    assert [w.name for w in cfg.workers] == ["w1"]
    assert str(cfg.cluster.pod_cidr) == "10.244.0.0/16"
    assert str(cfg.cluster.service_cidr) == "10.96.0.0/12"
    assert str(cfg.cluster.api_service_ip) == "10.96.0.1"
    assert cfg.versions.kubernetes == pins.KUBERNETES["1.36"]
    assert loaded.provenance["nodes"] == "file"


def test_no_file_targets_this_machine(tmp_path: Path) -> None:
    cfg = load(None, environ={}, cwd=tmp_path).config
    assert len(cfg.nodes) == 1
    assert cfg.nodes[0].connection == "local" and cfg.nodes[0].role == "control-plane"


def test_invalid_yaml_names_line(tmp_path: Path) -> None:
    msg = err(tmp_path, "nodes:\n  - name: a\n    address: [1, 2\n")
    assert "gpustack.yaml:" in msg and "invalid YAML" in msg


def test_unknown_key_names_line_and_field(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "cluster:\n  pod_cdir: 10.1.0.0/16\n")
    assert "gpustack.yaml:8: cluster.pod_cdir: unknown key" in msg


def test_unknown_node_key(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "    colour: blue\n")
    assert "gpustack.yaml:7: nodes[1].colour: unknown key" in msg


def test_wrong_type(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "ssh:\n  connect_timeout: soon\n")
    assert "gpustack.yaml:8: ssh.connect_timeout:" in msg and "integer" in msg


def test_bad_role(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD.replace("role: control-plane", "role: master"))
    assert "gpustack.yaml:4: nodes[0].role:" in msg


def test_duplicate_node_names(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD.replace("name: w1", "name: cp1"))
    assert "gpustack.yaml:5: nodes[1].name: duplicate node name 'cp1'" in msg


def test_duplicate_node_addresses(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD.replace("192.0.2.11", "192.0.2.10"))
    assert "gpustack.yaml:6: nodes[1].address: duplicate node address '192.0.2.10'" in msg


def test_no_control_plane(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD.replace("role: control-plane", "role: worker"))
    assert "no node has role: control-plane" in msg and "gpustack.yaml:1: nodes:" in msg


def test_two_control_planes(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "    role: control-plane\n")
    assert "gpustack.yaml:7: nodes[1].role: 2 control-plane nodes: etcd needs an odd number" in msg
    assert "cluster.control_plane_endpoint: 2 control-plane nodes need one address for the API server" in msg


def test_overlapping_cidrs(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "cluster:\n  pod_cidr: 10.96.0.0/16\n")
    # blamed on the field the file sets (pod_cidr, line 8), not on service_cidr's default
    assert "gpustack.yaml:8: cluster.pod_cidr: pod CIDR 10.96.0.0/16 and service CIDR 10.96.0.0/12 overlap" in msg


def test_an_overlap_set_by_the_environment_is_blamed_on_the_variable(tmp_path: Path) -> None:
    """Issue #18: a pod CIDR from GPUSTACK_CLUSTER__POD_CIDR overlapping the file's service CIDR was
    reported at the file's service_cidr line."""
    path = write(tmp_path, GOOD + "cluster:\n  service_cidr: 10.96.0.0/16\n")
    with pytest.raises(ConfigError) as ei:
        load(path, environ={"GPUSTACK_CLUSTER__POD_CIDR": "10.96.0.0/12"}, cwd=tmp_path)
    assert ei.value.message.splitlines()[1].strip() == (
        "environment (GPUSTACK_CLUSTER__POD_CIDR): cluster.pod_cidr: pod CIDR 10.96.0.0/12 and service CIDR "
        "10.96.0.0/16 overlap"
    )
    # the other way round: the variable sets the service CIDR, the file the pod CIDR
    path = write(tmp_path, GOOD + "cluster:\n  pod_cidr: 10.96.0.0/16\n")
    with pytest.raises(ConfigError) as ei:
        load(path, environ={"GPUSTACK_CLUSTER__SERVICE_CIDR": "10.96.0.0/12"}, cwd=tmp_path)
    assert "environment (GPUSTACK_CLUSTER__SERVICE_CIDR): cluster.service_cidr: pod CIDR" in ei.value.message


def test_cidr_contains_node_address(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD.replace("192.0.2.11", "10.244.3.4"))
    assert "gpustack.yaml:6: nodes[1].address: node address 10.244.3.4 lies inside cluster.pod_cidr" in msg


def test_invalid_cidr(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "cluster:\n  pod_cidr: 10.244.0.1/16\n")
    assert "gpustack.yaml:8: cluster.pod_cidr:" in msg


def test_a_missing_ssh_key_says_how_to_make_one(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + f"    ssh_key: {tmp_path}/missing_key\n")
    assert "gpustack.yaml:7: nodes[1].ssh_key: SSH key" in msg and "does not exist" in msg
    # issue 31: the untouched template failed here without naming the fix
    assert f"ssh-keygen -t ed25519 -f {tmp_path}/missing_key" in msg
    assert f"ssh-copy-id -i {tmp_path}/missing_key USER@192.0.2.11" in msg


def test_unreadable_ssh_key(tmp_path: Path) -> None:
    (tmp_path / "a_dir").mkdir()
    msg = err(tmp_path, GOOD + f"    ssh_key: {tmp_path}/a_dir\n")
    assert "gpustack.yaml:7: nodes[1].ssh_key: SSH key" in msg and "is not a readable file" in msg


def test_readable_ssh_key_is_fine(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("k")
    assert (
        load(write(tmp_path, GOOD + f"    ssh_key: {key}\n"), environ={}, cwd=tmp_path).config.nodes[1].ssh_key == key
    )


def test_unknown_kubernetes_version(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "versions:\n  kubernetes: '1.29'\n")
    assert "gpustack.yaml:8: versions.kubernetes: unknown Kubernetes version '1.29'" in msg
    assert f"1.36 ({pins.KUBERNETES['1.36']})" in msg


def test_unpinned_kubernetes_patch(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "versions:\n  kubernetes: 1.36.1\n")
    assert "unknown Kubernetes version '1.36.1'" in msg


def test_kubernetes_minor_resolves_to_pin(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, GOOD + "versions:\n  kubernetes: '1.35'\n"), environ={}, cwd=tmp_path).config
    assert cfg.versions.kubernetes == pins.KUBERNETES["1.35"] and cfg.versions.kubernetes_minor == "1.35"


def test_unpinned_helm_needs_checksum(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "versions:\n  helm: 3.99.0\n")
    assert "versions.helm: Helm 3.99.0 has no pinned checksum" in msg


def test_bad_node_name(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD.replace("name: w1", "name: Worker_1"))
    assert "nodes[1].name: must be a lower-case DNS name" in msg


def test_top_level_not_mapping(tmp_path: Path) -> None:
    assert "must be a mapping" in err(tmp_path, "- a\n- b\n")


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    assert "duplicate key 'cluster'" in err(tmp_path, GOOD + "cluster: {}\ncluster: {}\n")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as ei:
        load(tmp_path / "nope.yaml", environ={}, cwd=tmp_path)
    assert "nope.yaml: cannot read config file" in ei.value.message


def test_env_overrides_file(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, GOOD), environ={"GPUSTACK_VERSIONS__KUBERNETES": "1.34"}, cwd=tmp_path)
    assert loaded.config.versions.kubernetes == pins.KUBERNETES["1.34"]
    assert loaded.provenance["versions.kubernetes"] == "env"


def test_env_error_names_variable(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD, environ={"GPUSTACK_CLUSTER__POD_CIDR": "banana"})
    assert "environment (GPUSTACK_CLUSTER__POD_CIDR)" in msg


def test_env_without_section_is_rejected() -> None:
    with pytest.raises(ConfigError):
        env_overrides({"GPUSTACK_KUBERNETES": "1.35"})


def test_flags_override_env(tmp_path: Path) -> None:
    loaded = load(
        write(tmp_path, GOOD),
        environ={"GPUSTACK_VERSIONS__KUBERNETES": "1.34"},
        flags={"versions": {"kubernetes": "1.35"}},
        cwd=tmp_path,
    )
    assert loaded.config.versions.kubernetes == pins.KUBERNETES["1.35"]
    assert loaded.provenance["versions.kubernetes"] == "flag"


def test_config_found_via_env_var(tmp_path: Path) -> None:
    p = write(tmp_path, GOOD)
    other = tmp_path / "elsewhere"
    other.mkdir()
    assert load(None, environ={"GPUSTACK_CONFIG": str(p)}, cwd=other).source == str(p)


def test_example_config_is_valid(tmp_path: Path) -> None:
    from gpustack.config.example import example_yaml

    text = example_yaml().replace("ssh_key: ~/.ssh/id_ed25519", f"ssh_key: {tmp_path}/k")
    (tmp_path / "k").write_text("k")
    cfg = load(write(tmp_path, text), environ={}, cwd=tmp_path).config
    assert cfg.control_plane.name == "gpu-cp-1"


@pytest.mark.parametrize("endpoint", ["control_plane_endpoint", "virtual_ip"])
def test_the_example_s_ha_recipe_gives_a_valid_three_control_plane_config(tmp_path: Path, endpoint: str) -> None:
    """What the template says about control planes holds in the model (issue #18: it said "exactly
    one control-plane node (HA is not supported yet)" while 3/5-node HA was supported): following its
    HA comment -- 3 nodes with role: control-plane and ONE of the two settings it shows, uncommented --
    loads and validates."""
    from gpustack.config.example import example_yaml

    text = example_yaml().replace("ssh_key: ~/.ssh/id_ed25519", f"ssh_key: {tmp_path}/k")
    (tmp_path / "k").write_text("k")
    role_line = next(line for line in text.splitlines() if "role: control-plane" in line and "#" in line)
    assert "HA" in role_line and "not supported" not in text, role_line
    assert f"  # {endpoint}:" in text, "the template shows how to set the HA endpoint"
    cps = "".join(f"  - {{name: gpu-cp-{i}, address: 192.0.2.{20 + i}, role: control-plane}}\n" for i in (2, 3))
    text = text.replace("\ncluster:\n", "\n" + cps + "\ncluster:\n", 1)  # after the node list's last entry
    text = text.replace(f"  # {endpoint}:", f"  {endpoint}:")
    cfg = load(write(tmp_path, text), environ={}, cwd=tmp_path).config
    assert [n.name for n in cfg.control_planes] == ["gpu-cp-1", "gpu-cp-2", "gpu-cp-3"]
    assert getattr(cfg.cluster, endpoint) is not None


# --- issue 31: the template, and where a YAML or type error is -------------------------------------------------


def test_the_template_leaves_the_versions_to_the_pins() -> None:
    """`versions.kubernetes: "1.36"` was set right under "leave unset to use the pins"."""
    import yaml

    from gpustack.config.example import example_yaml

    text = example_yaml()
    assert "versions" not in yaml.safe_load(text)
    assert "# versions:" in text and "#   kubernetes:" in text


def test_the_template_s_local_node_has_no_ssh_fields_and_says_why_it_has_an_address() -> None:
    from gpustack.config.example import example_yaml

    text = example_yaml()
    block = text[text.index("# - name: this-machine") :].split("\n\n")[0]
    assert "connection: local" in block and "address:" in block and "the other nodes reach it at" in block
    assert "user:" not in block and "ssh_key:" not in block


@pytest.mark.parametrize(
    ("text", "where", "said"),
    [
        # a key indented one column less: the parser fails on its line; the scanner alone ran on to the next
        ("cluster:\n  name: x\n pod_cidr: 10.244.0.0/16\n  service_cidr: 10.96.0.0/12\n", ":9:2:", "expected key"),
        # a key without its ':': libyaml notices on the next line, while scanning the key on its own
        ("cluster:\n  name: x\n  pod_cidr 10.244.0.0/16\n  service_cidr: 10.96.0.0/12\n", ":9:3:", "expected ':'"),
    ],
)
def test_a_yaml_error_is_reported_on_its_own_line(tmp_path: Path, text: str, where: str, said: str) -> None:
    msg = err(tmp_path, GOOD + text)
    assert f"gpustack.yaml{where} invalid YAML" in msg and said in msg, msg


def test_a_type_error_names_the_value_given(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "preflight:\n  min_cpus: many\nmonitoring:\n  grafana_nodeport: 3.5\n")
    assert "preflight.min_cpus: Input should be a valid integer" in msg and "(got 'many')" in msg
    assert "monitoring.grafana_nodeport:" in msg and "(got 3.5)" in msg
    env = err(tmp_path, GOOD, environ={"GPUSTACK_PREFLIGHT__MIN_CPUS": "lots"})
    assert "(got 'lots')" in env
