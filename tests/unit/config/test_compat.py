"""The compatibility matrix (gpustack/config/pins.py) and the config combinations it refuses (exit 2)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpustack.config import compat, pins
from gpustack.config.load import load
from gpustack.config.model import Config, Node, Versions
from gpustack.errors import ConfigError

GOOD = """\
nodes:
  - name: cp1
    address: 192.0.2.10
    role: control-plane
"""
CP = Node(name="cp1", address="192.0.2.10", role="control-plane")


def err(tmp_path: Path, text: str) -> str:
    p = tmp_path / "gpustack.yaml"
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        load(p, environ={}, cwd=tmp_path)
    assert ei.value.exit_code == 2
    return ei.value.message


def cfg(**versions: object) -> Config:
    return Config(nodes=[CP], versions=Versions(**versions))  # type: ignore[arg-type]


def test_every_pinned_minor_has_a_matrix_line_and_the_defaults_pass() -> None:
    assert set(pins.KUBERNETES) == set(pins.KUBERNETES_LINES)
    for minor in pins.KUBERNETES:
        assert compat.config_problems(cfg(kubernetes=minor)) == []
    assert pins.at_least(pins.CONTAINERD_VERSION, pins.KUBERNETES_LINES["1.36"].containerd_min)
    # every pinned artifact has a checksum for both architectures
    for table in (pins.CONTAINERD_SHA256, pins.RUNC_SHA256, pins.HELM_SHA256):
        for sums in table.values():
            assert set(sums) == {"amd64", "arm64"} and all(len(s) == 64 for s in sums.values())


def test_matrix_facts() -> None:
    assert pins.KUBERNETES_LINES["1.36"].containerd_min == "2.0.0"  # 1.35 was the last minor with containerd 1.x
    assert pins.KUBERNETES_LINES["1.35"].containerd_min == "1.7.28"  # RELEASES.md's 1.7 floor for 1.35
    assert pins.KUBERNETES_LINES["1.35"].cgroup_v2_required and not pins.KUBERNETES_LINES["1.34"].cgroup_v2_required
    assert compat.sandbox_image(cfg(kubernetes="1.36")) == "registry.k8s.io/pause:3.10.2"
    assert compat.sandbox_image(cfg(kubernetes="1.35")) == "registry.k8s.io/pause:3.10.1"
    assert {(o.id, o.version) for o in pins.OS_RELEASES} == {
        ("ubuntu", "22.04"),
        ("ubuntu", "24.04"),
        ("debian", "12"),
        ("debian", "13"),
    }
    # no OS archive ships a containerd 2: the distribution's package is never allowed for 1.36
    assert compat.distribution_allowed("1.36") == []
    # 1.7 is past its end of support (September 2026): the OS's own containerd is allowed nowhere any more
    assert compat.distribution_allowed("1.35") == []
    from datetime import date

    assert {o.name for o in compat.distribution_allowed("1.35", date(2026, 8, 1))} == {
        "Ubuntu 22.04 LTS",
        "Ubuntu 24.04 LTS",
        "Debian 13",
    }


@pytest.mark.parametrize(
    ("version", "expected"),
    [("v2.1.9+ds1", (2, 1, 9)), ("1.6.20~ds1", (1, 6, 20)), ("2.2", (2, 2)), ("", ())],
)
def test_version_tuple(version: str, expected: tuple[int, ...]) -> None:
    assert pins.version_tuple(version) == expected


def test_gpu_operator_range_per_os(monkeypatch: pytest.MonkeyPatch) -> None:
    """v26.7.0 as amended (cloud-native-docs #488, #490): 1.33-1.37 on every OS; the per-OS mechanism still works."""
    assert pins.gpu_operator_supports("v26.7.0", "1.37") is True and pins.gpu_operator_supports("v26.7.0", "1.36")
    assert pins.gpu_operator_supports("v26.7.0", "1.32") is False
    assert pins.gpu_operator_supports("v26.7.0", "1.32", "ubuntu", "24.04") is False  # #490 raised it to 1.33
    wider = pins.GpuOperatorRange("1.33", "1.37", per_os=((("ubuntu", "24.04"), ("1.32", "1.37")),))
    monkeypatch.setitem(pins.GPU_OPERATOR_VALIDATED, "v26.7.0", wider)
    assert pins.gpu_operator_supports("v26.7.0", "1.32", "ubuntu", "24.04") is True
    assert pins.gpu_operator_supports("v99.0.0", "1.36") is None


def test_distribution_containerd_refused_for_1_36(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "versions:\n  containerd_source: distribution\n")
    assert "versions.containerd_source: Kubernetes 1.36 needs containerd 2.0.0 or newer" in msg
    assert "Debian 12 1.6" in msg


def test_distribution_containerd_refused_once_its_branch_is_past(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ubuntu's and Debian 13's containerd 1.7 ran Kubernetes 1.35, but 1.7 is past its end of support since
    September 2026 (containerd RELEASES.md): gpustack never installs a runtime its own doctor flags."""
    text = GOOD + "versions:\n  kubernetes: '1.35'\n  containerd_source: distribution\n"
    msg = err(tmp_path, text)
    assert "versions.containerd_source: Kubernetes 1.35 needs containerd 1.7.28 or newer on a branch still in" in msg
    monkeypatch.setenv("GPUSTACK_TODAY", "2026-08-01")  # before 1.7's end: allowed
    p = tmp_path / "gpustack.yaml"
    p.write_text(text, encoding="utf-8")
    assert load(p, environ={}, cwd=tmp_path).config.versions.containerd_source == "distribution"


@pytest.mark.parametrize(
    ("minor", "containerd", "refused"),
    [("1.36", "2.4.0", "newer than every branch"), ("1.35", "2.4.0", "newer than every branch"),
     ("1.35", "1.7.27", "too old"), ("1.35", "2.3.4", ""), ("1.36", "2.2.7", ""),
     ("1.34", "2.3.4", ""),  # upgrade-only: what the cluster runs is not refused
     ("1.34", "2.4.0", "")],
)  # fmt: skip
def test_the_matrix_refuses_what_containerds_releases_md_does_not_list(
    minor: str, containerd: str, refused: str
) -> None:
    sums = {"amd64": "0" * 64, "arm64": "0" * 64}
    problems = [p.message for p in compat.config_problems(cfg(kubernetes=minor, containerd=containerd,
                                                                containerd_sha256=sums))]  # fmt: skip
    assert [m for m in problems if refused and refused in m] if refused else problems == [], problems


def test_too_old_containerd_refused(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "versions:\n  containerd: 1.7.30\n  containerd_sha256: {amd64: x}\n")
    assert "versions.containerd: containerd 1.7.30 is too old for Kubernetes 1.36 (needs 2.0.0 or newer)" in msg


def test_containerd_2_3_accepted_and_written_as_config_version_4(tmp_path: Path) -> None:
    """containerd 2.3 (the LTS branch) is the pin; gpustack writes the config version it writes itself (4)."""
    from gpustack.render.ansible import runtime_vars

    assert pins.CONTAINERD_VERSION.startswith("2.3.")
    assert compat.config_problems(cfg()) == []
    assert runtime_vars(cfg())["gpustack_containerd_config_version"] == 4
    assert runtime_vars(cfg(containerd="2.2.7"))["gpustack_containerd_config_version"] == 3
    assert (
        runtime_vars(cfg(containerd_source="distribution", kubernetes="1.35"))["gpustack_containerd_config_version"]
        == 0
    )


def test_unpinned_containerd_and_runc_need_checksums(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "versions:\n  containerd: 2.2.1\n  runc: 1.3.0\n")
    assert "versions.containerd: containerd 2.2.1 has no pinned checksum" in msg
    assert "versions.runc: runc 1.3.0 has no pinned checksum" in msg


def test_unpinned_cni_plugins_and_crictl_need_checksums(tmp_path: Path) -> None:
    msg = err(tmp_path, GOOD + "versions:\n  cni_plugins: 1.8.0\n  crictl: 1.35.0\n")
    assert "versions.cni_plugins: CNI plugins 1.8.0 has no pinned checksum: set versions.cni_plugins_sha256" in msg
    assert "versions.crictl: crictl 1.35.0 has no pinned checksum: set versions.crictl_sha256" in msg
    from gpustack.render.ansible import node_tools_vars

    # with the site's own checksums the version is accepted, and those are what the hosts verify
    ok = cfg(crictl="1.35.0", crictl_sha256={"amd64": "a" * 64})
    assert node_tools_vars(ok)["gpustack_crictl_downloads"] == {
        "amd64": {"url": pins.CRICTL_URL.format(version="1.35.0", arch="amd64"), "sha256": "a" * 64}
    }
    assert "not a sha256" in err(tmp_path, GOOD + "versions:\n  crictl_sha256: {amd64: '12'}\n")


def test_gpu_operator_range_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pins.GPU_OPERATOR_VALIDATED, "v26.7.0", pins.GpuOperatorRange("1.35", "1.36"))
    msg = err(tmp_path, GOOD + "versions:\n  kubernetes: '1.34'\n")
    assert "versions.kubernetes: GPU Operator v26.7.0 is validated on Kubernetes 1.35-1.36, not 1.34" in msg


def test_fingerprint_is_normalised_and_checked(tmp_path: Path) -> None:
    p = tmp_path / "gpustack.yaml"
    spaced = "de15 b144 86cd 377b 9e87  6e1a 2346 54da 9a29 6436"
    p.write_text(GOOD + f"sources:\n  kubernetes_apt_key_fingerprint: '{spaced}'\n", encoding="utf-8")
    fpr = load(p, environ={}, cwd=tmp_path).config.sources.kubernetes_apt_key_fingerprint
    assert fpr == pins.KUBERNETES_APT_KEY_FINGERPRINT
    assert "sources.kubernetes_apt_key_fingerprint" in err(
        tmp_path, GOOD + "sources:\n  kubernetes_apt_key_fingerprint: '1234'\n"
    )


def test_matrix_rows_for_the_chosen_version() -> None:
    rows = compat.matrix_rows(cfg(kubernetes="1.35"))
    assert len(rows) == 1
    minor, patch, containerd, cgroup, sandbox, operator, oses = rows[0]
    assert (minor, patch, cgroup) == ("1.35", pins.KUBERNETES["1.35"], "required")
    assert containerd == (">= 1.7.28, one of 2.3.0+, 2.2.0+, 2.1.5+, 1.7.28+ (containerd RELEASES.md; newer branches "
                          "refused)")  # fmt: skip
    assert sandbox == "registry.k8s.io/pause:3.10.1" and operator.startswith("v26.7.0: yes")
    # every supported OS, with containerd from the release archives; the OS's own containerd only where new enough
    assert oses.startswith("Ubuntu 22.04 LTS, Ubuntu 24.04 LTS, Debian 12, Debian 13: all, with containerd from")
    assert (
        "(containerd_source: distribution): none (not: Ubuntu 22.04 LTS's 1.7: past its end of support, Ubuntu 24.04 "
        "LTS's 1.7: past its end of support, Debian 12's 1.6, Debian 13's 1.7: past its end of support)" in oses
    ), oses
    default = compat.matrix_rows(cfg())[0][-1]  # Kubernetes 1.36: no OS ships a containerd 2, and none is unsupported
    assert ": all, with containerd from the release archives (the default)" in default
    assert "(containerd_source: distribution): none (" in default and "(own containerd" not in default
    assert [r[0] for r in compat.matrix_rows()] == list(pins.KUBERNETES_LINES)


def test_artifacts_carry_checksums() -> None:
    arts = {(a.name, a.arch): a for a in compat.artifacts(cfg())}
    cd = arts[("containerd", "amd64")]
    assert cd.url.endswith(f"/v{pins.CONTAINERD_VERSION}/containerd-{pins.CONTAINERD_VERSION}-linux-amd64.tar.gz")
    assert cd.checksum == "sha256:" + pins.CONTAINERD_SHA256[pins.CONTAINERD_VERSION]["amd64"]
    assert arts[("runc", "arm64")].checksum == "sha256:" + pins.RUNC_SHA256[pins.RUNC_VERSION]["arm64"]
    assert arts[("kubernetes apt key", "all")].checksum == f"gpg:{pins.KUBERNETES_APT_KEY_FINGERPRINT}"
    assert arts[("helm", "amd64")].checksum == "sha256:" + pins.HELM_SHA256[pins.HELM_VERSION]["amd64"]
    cni, crictl = arts[("cni-plugins", "arm64")], arts[("crictl", "amd64")]
    assert cni.url == (f"https://github.com/containernetworking/plugins/releases/download/v{pins.CNI_PLUGINS_VERSION}/"
                       f"cni-plugins-linux-arm64-v{pins.CNI_PLUGINS_VERSION}.tgz")  # fmt: skip
    assert cni.checksum == "sha256:" + pins.CNI_PLUGINS_SHA256[pins.CNI_PLUGINS_VERSION]["arm64"]
    assert crictl.url.endswith(f"/v{pins.CRICTL_VERSION}/crictl-v{pins.CRICTL_VERSION}-linux-amd64.tar.gz")
    assert crictl.checksum == "sha256:" + pins.CRICTL_SHA256[pins.CRICTL_VERSION]["amd64"]
    # the distribution's containerd downloads nothing; the CNI plugins and crictl come from their archives either way
    names = {a.name for a in compat.artifacts(cfg(kubernetes="1.35", containerd_source="distribution"))}
    assert "containerd" not in names and "runc" not in names and {"cni-plugins", "crictl"} <= names


def test_image_digests() -> None:
    assert (
        "registry.k8s.io/e2e-test-images/agnhost:2.53@"
        + pins.IMAGE_DIGESTS["registry.k8s.io/e2e-test-images/agnhost:2.53"]
    ) == pins.VERIFY_NET_IMAGE
    assert pins.with_digest("nvcr.io/x:1") == "nvcr.io/x:1"
    for line in pins.KUBERNETES_LINES.values():  # every sandbox image gpustack pins has a digest recorded
        assert pins.IMAGE_DIGESTS[pins.PAUSE_IMAGE.format(tag=line.pause)].startswith("sha256:")
    for digest in pins.IMAGE_DIGESTS.values():
        assert len(digest) == len("sha256:") + 64


def test_an_estimate_already_past_is_not_read_as_due() -> None:
    """issue 31: kube-prometheus-stack 'until Prometheus 3.15 (expected ~2026-09)' judged in November said
    'ENDING (due, estimate)'; it says that the expected date has passed, and to check upstream."""
    from datetime import date

    rows = {row[0]: row for row in compat.pin_rows(None, date(2026, 11, 26))}
    assert rows["runc"][3].startswith("supported (") and "estimate" not in rows["runc"][3]
    assert rows["helm"][3].startswith("ENDING (") and "days, estimate)" in rows["helm"][3]  # still ahead: days


def test_the_version_table_names_the_prometheus_kube_prometheus_stack_is_judged_by() -> None:
    """kube-prometheus-stack publishes no support policy: its row is judged by the Prometheus gpustack deploys with
    it, the 3.13.5 LTS (not the chart's default 3.14.0, past since 2026-09-28), and says so."""
    from datetime import date

    (row,) = [r for r in compat.pin_rows(None, date(2026, 11, 26)) if r[0] == "kube-prometheus-stack"]
    assert row[1] == f"{pins.CHARTS['kube-prometheus-stack'].version} (Prometheus {pins.PROMETHEUS_VERSION})"
    assert row[2] == "2027-07-31" and "supported" in row[3]
