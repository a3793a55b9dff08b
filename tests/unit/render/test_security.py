"""``security:`` (issue 28): the settings, the files gpustack renders for the control planes, the kubeadm flags that
use them, the cluster's encryption key store, and what ``render`` shows (never the key)."""

from __future__ import annotations

import base64
import json
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpustack.config.model import Config
from gpustack.config.security import CIS_CIPHER_SUITES
from gpustack.errors import ConfigError
from gpustack.paths import encryption_keys_path
from gpustack.render import security
from gpustack.render.ansible import extravars
from gpustack.render.encryption_keys import ensure_keys, load_keys, new_key, run_extravars
from gpustack.render.files import generated_files
from gpustack.render.kubeadm import render_init_config

NODES = [{"name": "cp1", "address": "192.0.2.10", "role": "control-plane"}]


def cfg(**sec: Any) -> Config:
    return Config.model_validate({"nodes": NODES, "security": sec})


def kubeadm_docs(c: Config) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(render_init_config(c)) if d}


def args(component: dict[str, Any]) -> dict[str, str]:
    return {a["name"]: a["value"] for a in component.get("extraArgs") or []}


# --- settings ----------------------------------------------------------------------------------------


def test_hardened_by_default() -> None:
    sec = Config().security
    assert sec.encryption_at_rest and sec.audit.enabled and not sec.profiling
    assert (sec.pod_security.enforce, sec.pod_security.warn, sec.pod_security.audit) == (
        "baseline",
        "restricted",
        "restricted",
    )
    assert sec.tls_cipher_suites == list(CIS_CIPHER_SUITES)
    assert (sec.audit.max_age, sec.audit.max_backup, sec.audit.max_size) == (30, 10, 100)  # CIS 1.2.17-1.2.19
    assert sec.extend_token_expiration is False


@pytest.mark.parametrize(
    "bad",
    [{"pod_security": {"enforce": "strict"}}, {"audit": {"max_age": 0}}, {"tls_cipher_suites": ["RC4 please"]},
     {"encryption": True}],
)  # fmt: skip
def test_invalid_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        cfg(**bad)


# --- kubeadm -----------------------------------------------------------------------------------------


def test_kubeadm_carries_every_hardening_flag_and_mount() -> None:
    docs = kubeadm_docs(cfg())
    cc = docs["ClusterConfiguration"]
    api = args(cc["apiServer"])
    assert api["encryption-provider-config"] == security.ENCRYPTION_CONFIG
    assert api["admission-control-config-file"] == security.ADMISSION_CONFIG
    assert api["audit-policy-file"] == security.AUDIT_POLICY and api["audit-log-path"] == security.AUDIT_LOG
    assert (api["audit-log-maxage"], api["audit-log-maxbackup"], api["audit-log-maxsize"]) == ("30", "10", "100")
    assert api["profiling"] == "false" and api["service-account-extend-token-expiration"] == "false"
    assert api["tls-cipher-suites"] == ",".join(CIS_CIPHER_SUITES)
    assert args(cc["controllerManager"]) == {"profiling": "false"} == args(cc["scheduler"])
    mounts = {v["hostPath"]: v for v in cc["apiServer"]["extraVolumes"]}
    for path in (security.ENCRYPTION_CONFIG, security.AUDIT_POLICY, security.ADMISSION_CONFIG, security.AUDIT_LOG):
        directory = str(Path(path).parent)
        assert mounts[directory]["mountPath"] == directory
        assert mounts[directory]["readOnly"] is (directory != security.AUDIT_LOG_DIR)
    kubelet = docs["KubeletConfiguration"]
    assert kubelet["tlsCipherSuites"] == list(CIS_CIPHER_SUITES)
    # on by default: os_prep sets the kernel parameters the kubelet checks first (docs/decisions.md)
    assert kubelet["protectKernelDefaults"] is True
    assert kubelet["podPidsLimit"] == 32768
    # CA-signed kubelet serving certificates, and the API server verifying them (CIS 1.2.5), in the one configuration
    # kubeadm init reads: no kubelet of the cluster ever serves a self-signed certificate to a verifying API server
    assert kubelet["serverTLSBootstrap"] is True
    assert api["kubelet-certificate-authority"] == "/etc/kubernetes/pki/ca.crt"


def test_each_relaxation_takes_out_exactly_its_flags() -> None:
    base = args(kubeadm_docs(cfg())["ClusterConfiguration"]["apiServer"])
    no_enc = args(kubeadm_docs(cfg(encryption_at_rest=False))["ClusterConfiguration"]["apiServer"])
    assert set(base) - set(no_enc) == {"encryption-provider-config"}
    no_audit = args(kubeadm_docs(cfg(audit={"enabled": False}))["ClusterConfiguration"]["apiServer"])
    assert set(base) - set(no_audit) == {"audit-policy-file", "audit-log-path", "audit-log-maxage",
                                         "audit-log-maxbackup", "audit-log-maxsize"}  # fmt: skip
    prof = kubeadm_docs(cfg(profiling=True))["ClusterConfiguration"]
    assert args(prof["apiServer"])["profiling"] == args(prof["scheduler"])["profiling"] == "true"
    no_suites = kubeadm_docs(cfg(tls_cipher_suites=[]))
    assert "tls-cipher-suites" not in args(no_suites["ClusterConfiguration"]["apiServer"])
    assert "tlsCipherSuites" not in no_suites["KubeletConfiguration"]
    assert kubeadm_docs(cfg(protect_kernel_defaults=False))["KubeletConfiguration"]["protectKernelDefaults"] is False
    assert "podPidsLimit" not in kubeadm_docs(cfg(pod_pids_limit=None))["KubeletConfiguration"]


# --- the files ---------------------------------------------------------------------------------------


def test_encryption_config_writes_with_the_first_key_and_reads_unencrypted_last() -> None:
    keys = [security.EncryptionKey("new", "A" * 44), security.EncryptionKey("old", "B" * 44)]
    doc = yaml.safe_load(security.render_encryption_config(keys))
    assert (doc["apiVersion"], doc["kind"]) == ("apiserver.config.k8s.io/v1", "EncryptionConfiguration")
    (res,) = doc["resources"]
    assert res["resources"] == ["secrets"]
    assert res["providers"][0]["secretbox"]["keys"] == [{"name": "new", "secret": "A" * 44},
                                                        {"name": "old", "secret": "B" * 44}]  # fmt: skip
    assert res["providers"][-1] == {"identity": {}}


def test_audit_policy_never_logs_bodies_and_silences_the_noise() -> None:
    policy = security.audit_policy()
    assert (policy["apiVersion"], policy["kind"]) == ("audit.k8s.io/v1", "Policy")
    levels = [r["level"] for r in policy["rules"]]
    assert set(levels) == {"None", "Metadata"}  # never Request or RequestResponse: no body is ever logged
    assert policy["rules"][-1] == {"level": "Metadata"}  # the default
    secrets_rule = next(r for r in policy["rules"] if any("secrets" in g["resources"] for g in r.get("resources", [])))
    assert secrets_rule["level"] == "Metadata"
    health = next(r for r in policy["rules"] if "nonResourceURLs" in r)
    assert health["level"] == "None" and "/readyz*" in health["nonResourceURLs"]
    # first match wins: every None rule comes before the Metadata rules
    assert levels == sorted(levels, key=lambda lvl: lvl != "None")


def test_admission_config_enforces_baseline_and_exempts_only_kube_system() -> None:
    plugin = security.admission_config(cfg())["plugins"][0]
    assert plugin["name"] == "PodSecurity"
    conf = plugin["configuration"]
    assert conf["apiVersion"] == "pod-security.admission.config.k8s.io/v1"
    assert (
        conf["defaults"]["enforce"] == "baseline"
        and conf["defaults"]["warn"] == conf["defaults"]["audit"] == "restricted"
    )
    assert conf["exemptions"] == {"usernames": [], "runtimeClasses": [], "namespaces": ["kube-system"]}
    more = security.admission_config(cfg(pod_security={"enforce": "restricted", "exempt_namespaces": ["lab"]}))
    assert more["plugins"][0]["configuration"]["exemptions"]["namespaces"] == ["kube-system", "lab"]
    assert more["plugins"][0]["configuration"]["defaults"]["enforce"] == "restricted"


def test_host_files_follow_the_settings() -> None:
    assert set(security.host_files(cfg())) == {security.ADMISSION_CONFIG, security.AUDIT_POLICY}
    assert set(security.host_files(cfg(audit={"enabled": False}))) == {security.ADMISSION_CONFIG}


# --- the key store -----------------------------------------------------------------------------------


def test_a_key_is_made_once_kept_private_and_32_bytes(tmp_path: Path) -> None:
    c = cfg()
    keys = ensure_keys(c, tmp_path)
    assert len(keys) == 1 and len(base64.b64decode(keys[0].secret)) == 32
    path = encryption_keys_path("gpustack", tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert ensure_keys(c, tmp_path) == keys == load_keys(c, tmp_path)  # the same key on every later run
    assert ensure_keys(cfg(), tmp_path / "other") != keys  # another state: another key


def test_key_names_and_randomness_come_from_the_clock_and_the_source() -> None:
    key = new_key(datetime(2026, 11, 29, 4, 15, tzinfo=timezone.utc), random=lambda n: b"\x01" * n)
    assert key.name == "key-20261129T041500Z" and base64.b64decode(key.secret) == b"\x01" * 32


@pytest.mark.parametrize(
    "content", ["not json", json.dumps({"keys": [{"name": "k", "secret": base64.b64encode(b"short").decode()}]}),
                json.dumps({"keys": []}), json.dumps({"nokeys": 1})],
)  # fmt: skip
def test_a_damaged_key_file_is_an_error_never_replaced(tmp_path: Path, content: str) -> None:
    path = encryption_keys_path("gpustack", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    with pytest.raises(ConfigError, match="encryption key file"):
        ensure_keys(cfg(), tmp_path)
    assert path.read_text() == content


def test_the_run_gets_the_key_and_the_pure_extravars_never_do(tmp_path: Path) -> None:
    c = cfg()
    ev = extravars(c, kubeconfig_dest=tmp_path / "admin.conf")
    assert ev["gpustack_encryption_config"] == "" and ev["gpustack_encryption_enabled"] is True
    run = run_extravars(c, tmp_path)
    (key,) = load_keys(c, tmp_path)
    assert key.secret in run["gpustack_encryption_config"]
    assert run_extravars(cfg(encryption_at_rest=False), tmp_path / "x") == {}
    assert not (tmp_path / "x").exists()  # no key made for a cluster that does not encrypt
    # a run that builds no control plane (reset, upgrade, ...) passes the keys there are and never makes one
    assert run_extravars(c, tmp_path / "y", make=False) == {} and not (tmp_path / "y").exists()
    assert run_extravars(c, tmp_path, make=False) == run


def test_only_the_runs_that_build_control_planes_make_the_key() -> None:
    """The playbooks that apply the control_plane role whole or its security.yml (which writes the
    EncryptionConfiguration) are the keyed ones; node-add.yml imports site.yml."""
    import re

    from gpustack.engine.stages import KEYED_PLAYBOOKS

    playbooks = Path(__file__).resolve().parents[3] / "playbooks"
    whole = {
        p.name for p in playbooks.glob("*.yml") if re.search(r"^\s*- role: control_plane\s*$", p.read_text(), re.M)
    }
    assert whole == {"site.yml"}, whole
    files_only = {p.name for p in playbooks.glob("*.yml") if "tasks_from: security.yml" in p.read_text()}
    assert files_only == {"security-apply.yml"}, files_only  # gpustack security apply: encryption turned on
    assert "import_playbook: site.yml" in (playbooks / "node-add.yml").read_text()
    assert {"site.yml", "node-add.yml", "security-apply.yml"} == KEYED_PLAYBOOKS


def test_render_shows_every_file_and_never_the_key(tmp_path: Path) -> None:
    c = cfg()
    (key,) = ensure_keys(c, tmp_path)
    files = generated_files(c, state_root=tmp_path)
    assert {"security/encryption-config.yaml", "security/audit-policy.yaml", "security/admission-config.yaml"} <= set(
        files
    )
    enc = yaml.safe_load(files["security/encryption-config.yaml"])
    assert enc["resources"][0]["providers"][0]["secretbox"]["keys"] == [{"name": key.name, "secret": "REDACTED"}]
    assert not [path for path, text in files.items() if key.secret in text]
    # before the first run: a placeholder name, still no secret
    fresh = generated_files(c, state_root=tmp_path / "fresh")
    assert "secret: REDACTED" in fresh["security/encryption-config.yaml"]
    off = generated_files(cfg(encryption_at_rest=False, audit={"enabled": False}), state_root=tmp_path)
    assert [p for p in off if p.startswith("security/")] == ["security/admission-config.yaml"]


def test_plan_names_each_setting_and_how_a_running_cluster_gets_it() -> None:
    rows = {r[0]: r for r in security.plan_rows(cfg(profiling=True, tls_cipher_suites=[]))}
    assert set(rows) == {"encryption_at_rest", "audit", "pod_security", "profiling", "tls_cipher_suites",
                         "protect_kernel_defaults", "pod_pids_limit"}  # fmt: skip
    assert rows["profiling"][1] == "on" and rows["tls_cipher_suites"][1] == "Go's defaults"
    assert "turning it on rewrites every Secret; turning it off is refused" in rows["encryption_at_rest"][3]
    # the control plane's flags: `gpustack security apply`; the kubelet's configuration: not applied yet
    assert {k for k, r in rows.items() if r[3].startswith(security.EXISTING)} == {
        "encryption_at_rest", "audit", "pod_security", "profiling", "tls_cipher_suites"}  # fmt: skip
    assert rows["protect_kernel_defaults"][3] == security.EXISTING_KUBELET
    assert rows["pod_pids_limit"][1:] == ["32768", "kubelet configuration", security.EXISTING_KUBELET]
    assert rows["tls_cipher_suites"][3].endswith(security.EXISTING_KUBELET)
    assert rows["pod_security"][1] == "enforce baseline, warn restricted, audit restricted"


def test_a_rotation_goes_through_its_phases_and_each_is_recorded(tmp_path: Path) -> None:
    from gpustack.render.encryption_keys import advance_rotation, rotation_phase

    c = cfg()
    (old,) = ensure_keys(c, tmp_path)
    new = new_key(datetime(2027, 1, 1, tzinfo=timezone.utc))
    assert rotation_phase(c, tmp_path) is None
    phase, keys = advance_rotation(c, tmp_path, make=lambda: new)
    assert (phase, keys) == ("added", [old, new]) and rotation_phase(c, tmp_path) == "added"
    assert load_keys(c, tmp_path) == [old, new]  # what a run (up, a resumed rotation) applies now
    assert advance_rotation(c, tmp_path) == ("promoted", [new, old])
    assert advance_rotation(c, tmp_path) == ("rewritten", [new, old])
    assert advance_rotation(c, tmp_path) == ("removed", [new])
    # the old key is gone from the file, the rotation is still recorded until every API server runs without it
    assert rotation_phase(c, tmp_path) == "removed" and load_keys(c, tmp_path) == [new]
    assert advance_rotation(c, tmp_path) == (None, [new])
    assert rotation_phase(c, tmp_path) is None and load_keys(c, tmp_path) == [new]
    assert stat.S_IMODE(encryption_keys_path("gpustack", tmp_path).stat().st_mode) == 0o600


def test_no_rotation_without_a_key(tmp_path: Path) -> None:
    from gpustack.render.encryption_keys import advance_rotation

    with pytest.raises(ConfigError, match="no encryption key to rotate"):
        advance_rotation(cfg(), tmp_path)


def test_a_rotation_in_the_second_the_key_was_made_gets_a_name_of_its_own(tmp_path: Path) -> None:
    from gpustack.render.encryption_keys import advance_rotation

    c, when = cfg(), datetime(2027, 1, 1, tzinfo=timezone.utc)
    (old,) = ensure_keys(c, tmp_path, make=lambda: new_key(when))
    _, keys = advance_rotation(c, tmp_path, make=lambda: new_key(when))
    assert [k.name for k in keys] == [old.name, f"{old.name}-2"] and keys[0].secret != keys[1].secret
