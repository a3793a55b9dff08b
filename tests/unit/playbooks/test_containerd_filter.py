"""containerd_systemd_cgroup: a section-aware, minimal edit of containerd's config.toml."""

from __future__ import annotations

import difflib
from types import ModuleType

import pytest
from conftest import FIXTURES

V2 = (FIXTURES / "containerd-config-v2.toml").read_text()
V3 = (FIXTURES / "containerd-config-v3.toml").read_text()
V4 = (FIXTURES / "containerd-config-v4.toml").read_text()

NVIDIA_V2 = """
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
          runtime_type = "io.containerd.runc.v2"

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
            BinaryName = "/usr/bin/nvidia-container-runtime"
            SystemdCgroup = true
"""


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_v2_false_becomes_true_and_nothing_else(containerd_filter: ModuleType) -> None:
    out = containerd_filter.containerd_systemd_cgroup(V2)
    assert changed_lines(V2, out) == [
        "-            SystemdCgroup = false",
        "+            SystemdCgroup = true",
    ]
    assert containerd_filter.systemd_cgroup_enabled(out) is True
    assert containerd_filter.containerd_systemd_cgroup(out) == out


def test_v3_key_added_under_the_runc_options_table(containerd_filter: ModuleType) -> None:
    assert containerd_filter.systemd_cgroup_enabled(V3) is False
    out = containerd_filter.containerd_systemd_cgroup(V3)
    lines = out.splitlines()
    header = lines.index("          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]")
    assert lines[header + 1] == "            SystemdCgroup = true"
    assert len(changed_lines(V3, out)) == 1
    assert containerd_filter.containerd_systemd_cgroup(out) == out


def test_other_runtimes_are_not_touched(containerd_filter: ModuleType) -> None:
    # nvidia's options (SystemdCgroup = true) come after runc's (false): a line-oriented
    # "last match" edit would touch the wrong table
    text = V2.replace(
        '      [plugins."io.containerd.grpc.v1.cri".containerd.untrusted_workload_runtime]',
        NVIDIA_V2.strip("\n") + '\n\n      [plugins."io.containerd.grpc.v1.cri".containerd.untrusted_workload_runtime]',
    )
    assert containerd_filter.systemd_cgroup_enabled(text) is False
    out = containerd_filter.containerd_systemd_cgroup(text)
    assert changed_lines(text, out) == [
        "-            SystemdCgroup = false",
        "+            SystemdCgroup = true",
    ]
    assert out.count("SystemdCgroup = true") == 2


def test_options_table_missing(containerd_filter: ModuleType) -> None:
    start = V2.index('          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]')
    end = V2.index('      [plugins."io.containerd.grpc.v1.cri".containerd.untrusted_workload_runtime]')
    text = V2[:start] + V2[end:]
    assert "runc.options" not in text
    out = containerd_filter.containerd_systemd_cgroup(text)
    assert containerd_filter.systemd_cgroup_enabled(out) is True
    # the table lands right after the runc table, before the next table
    lines = out.splitlines()
    i = lines.index('          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]')
    assert lines[i + 1] == "            SystemdCgroup = true"
    assert "untrusted_workload_runtime" in "\n".join(lines[i + 2 :])
    assert containerd_filter.containerd_systemd_cgroup(out) == out


def test_runc_table_missing(containerd_filter: ModuleType) -> None:
    text = 'version = 2\n\n[plugins]\n  [plugins."io.containerd.grpc.v1.cri"]\n    sandbox_image = "x"\n'
    out = containerd_filter.containerd_systemd_cgroup(text)
    assert out.startswith(text)
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]' in out
    assert 'runtime_type = "io.containerd.runc.v2"' in out
    assert containerd_filter.systemd_cgroup_enabled(out) is True
    assert containerd_filter.containerd_systemd_cgroup(out) == out


def test_no_trailing_newline(containerd_filter: ModuleType) -> None:
    out = containerd_filter.containerd_systemd_cgroup(V3.rstrip("\n"))
    assert out.endswith("\n")
    assert containerd_filter.systemd_cgroup_enabled(out) is True


@pytest.mark.parametrize("text", ["", "root = '/x'\n", "version = 1\n[plugins.cri]\n"])
def test_unsupported_versions_fail(containerd_filter: ModuleType, text: str) -> None:
    with pytest.raises(Exception, match="not supported"):
        containerd_filter.containerd_systemd_cgroup(text)


def test_split_key(containerd_filter: ModuleType) -> None:
    assert containerd_filter.split_key('plugins."io.containerd.grpc.v1.cri".containerd') == (
        "plugins",
        "io.containerd.grpc.v1.cri",
        "containerd",
    )
    assert containerd_filter.split_key(" plugins . 'a.b' ") == ("plugins", "a.b")


def test_agrees_with_the_facts_module(containerd_filter: ModuleType, runtime_parsers: ModuleType) -> None:
    for text in (
        V2,
        V3,
        containerd_filter.containerd_systemd_cgroup(V2),
        containerd_filter.containerd_systemd_cgroup(V3),
    ):
        assert runtime_parsers.parse_containerd_systemd_cgroup(text) == containerd_filter.systemd_cgroup_enabled(text)


def test_needs_default(containerd_filter: ModuleType) -> None:
    stub = (FIXTURES / "containerd-config-debian12-stub.toml").read_text()
    assert containerd_filter.needs_default(stub) is True  # Debian 12's stub: no runc table
    assert containerd_filter.needs_default("") is True
    assert containerd_filter.needs_default("root = '/x'\n") is True  # version 1
    assert containerd_filter.needs_default(V2) is False
    assert containerd_filter.needs_default(V3) is False  # runc table, key missing: edited
    assert containerd_filter.needs_default(containerd_filter.containerd_systemd_cgroup(V3)) is False


PAUSE = "registry.k8s.io/pause:3.10.2"
RUNC = "/usr/local/sbin/runc"


def test_runtime_config_v3_pins_sandbox_and_runc_binary(containerd_filter: ModuleType) -> None:
    import tomllib

    out = containerd_filter.runtime_config(V3, PAUSE, RUNC)
    parsed = tomllib.loads(out)
    assert parsed["version"] == 3
    assert parsed["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE
    options = parsed["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]["options"]
    assert options["SystemdCgroup"] is True and options["BinaryName"] == RUNC
    assert containerd_filter.sandbox_image(out) == PAUSE
    # converged: a second pass changes nothing
    assert containerd_filter.runtime_config(out, PAUSE, RUNC) == out
    # a new pin rewrites exactly one line
    moved = containerd_filter.runtime_config(out, "registry.k8s.io/pause:3.11", RUNC)
    removed, added = changed_lines(out, moved)
    assert removed.startswith("-") and removed.strip("- ") == f'sandbox = "{PAUSE}"'
    assert added.startswith("+") and added.strip("+ ") == 'sandbox = "registry.k8s.io/pause:3.11"'


def test_runtime_config_v2_sets_sandbox_image_and_leaves_runc_alone(containerd_filter: ModuleType) -> None:
    import tomllib

    out = containerd_filter.runtime_config(V2, "registry.k8s.io/pause:3.10.1", "")
    cri = tomllib.loads(out)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10.1"
    assert cri["containerd"]["runtimes"]["runc"]["options"].get("BinaryName", "") == ""
    assert containerd_filter.runtime_config(out, "registry.k8s.io/pause:3.10.1", "") == out


def test_set_string_adds_a_missing_table(containerd_filter: ModuleType) -> None:
    import tomllib

    text = "version = 3\n\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n  runtime_type = 'x'\n"
    out = containerd_filter.runtime_config(text, PAUSE, "")
    assert tomllib.loads(out)["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE
    assert out.startswith(text)


def test_sandbox_image_absent(containerd_filter: ModuleType) -> None:
    assert containerd_filter.sandbox_image("version = 3\n") is None
    assert containerd_filter.sandbox_image("") is None


def test_needs_default_for_another_config_version(containerd_filter: ModuleType) -> None:
    # containerd 2.x writes version 3: a full version 2 file from containerd 1.x is regenerated
    assert containerd_filter.needs_default(V2, 3) is True
    assert containerd_filter.needs_default(V3, 3) is False
    assert containerd_filter.needs_default(V2, 0) is False  # distribution's containerd: keep it
    assert containerd_filter.needs_default(V2, "3") is True  # Jinja may hand the number over as text


DROP_INS = "/etc/containerd/conf.d/*.toml"


def test_runtime_config_keeps_the_toolkit_drop_ins_imported(containerd_filter: ModuleType) -> None:
    """A regenerated config.toml (version 2 with `imports = []`, version 3 without the key) imports the
    directory the NVIDIA container toolkit writes 99-nvidia.toml to; a second pass changes nothing."""
    for text in (V2, V3):
        out = containerd_filter.runtime_config(text, "", "", DROP_INS)
        assert containerd_filter.imports_of(out) == [DROP_INS]
        assert containerd_filter.runtime_config(out, "", "", DROP_INS) == out
        assert containerd_filter.config_version(out) == containerd_filter.config_version(text)
    v3 = containerd_filter.runtime_config(V3, "", "", DROP_INS)
    assert changed_lines(containerd_filter.containerd_systemd_cgroup(V3), v3) == [f'+imports = ["{DROP_INS}"]']
    assert v3.splitlines()[v3.splitlines().index("version = 3") + 1] == f'imports = ["{DROP_INS}"]'


def test_imports_of_other_tools_are_kept(containerd_filter: ModuleType, runtime_parsers: ModuleType) -> None:
    multi = "version = 3\nimports = [\n  '/etc/containerd/site.toml',  # the site's own\n  \"x/*.toml\",\n]\n\n[grpc]\n"
    out = containerd_filter.ensure_import(multi, DROP_INS)
    assert containerd_filter.imports_of(out) == ["/etc/containerd/site.toml", "x/*.toml", DROP_INS]
    assert out.endswith("\n\n[grpc]\n") and out.count("imports") == 1
    # the facts module (doctor's C06, preflight's P20) reads what the filter writes
    assert runtime_parsers.parse_containerd_imports(out) == containerd_filter.imports_of(out)
    already = containerd_filter.ensure_import(out, DROP_INS)
    assert already == out
    # an `imports` key inside a table is not the top-level one
    tabled = "version = 2\n\n[plugins]\n  imports = ['a']\n"
    assert containerd_filter.imports_of(tabled) is None
    assert containerd_filter.imports_of(containerd_filter.ensure_import(tabled, DROP_INS)) == [DROP_INS]


def test_runtime_config_v4_edits_the_cri_tables_version_3_named(containerd_filter: ModuleType) -> None:
    """containerd 2.3 writes version 4: the same CRI tables as version 3 (only server settings moved), so the
    same three settings land in the same tables; the drop-ins stay imported; a second pass changes nothing;
    the version stays 4 (what containerd 2.3 reads without migrating)."""
    import tomllib

    assert containerd_filter.systemd_cgroup_enabled(V4) is False
    assert containerd_filter.needs_default(V4, 4) is False
    assert containerd_filter.needs_default(V3, 4) is True  # containerd 2.2's file when 2.3 replaces it
    assert containerd_filter.needs_default(V4, 3) is True  # and back (a downgrade)
    out = containerd_filter.runtime_config(V4, PAUSE, RUNC, DROP_INS)
    parsed = tomllib.loads(out)
    assert parsed["version"] == 4
    assert parsed["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE
    options = parsed["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]["options"]
    assert options["SystemdCgroup"] is True and options["BinaryName"] == RUNC
    assert parsed["plugins"]["io.containerd.server.v1.grpc"]["address"] == "/run/containerd/containerd.sock"
    assert containerd_filter.imports_of(out) == [DROP_INS]  # already there: not added twice
    assert containerd_filter.sandbox_image(out) == PAUSE
    assert containerd_filter.runtime_config(out, PAUSE, RUNC, DROP_INS) == out
    # only the three settings changed (two rewritten lines, one added)
    assert [line[0] for line in changed_lines(V4, out)] == ["-", "+", "-", "+", "+"]


def test_version_5_is_refused(containerd_filter: ModuleType) -> None:
    with pytest.raises(Exception, match="expected 2, 3 or 4"):
        containerd_filter.containerd_systemd_cgroup(V4.replace("version = 4", "version = 5"))
