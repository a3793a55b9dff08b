"""doctor --bundle: members, permissions, and no planted secret in any member."""

from __future__ import annotations

import base64
import io
import json
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpustack import __version__
from gpustack.checks.model import Finding
from gpustack.diagnose.bundle import REDACTED, redact, redact_text, write_bundle
from gpustack.diagnose.report import summary
from gpustack.diagnose.snapshot import GrafanaData, Snapshot

PLANTED = {
    "secret_data": "s3cret-data-value-1",
    "secret_string": "s3cret-stringdata-2",
    "kube_key": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCk1JSUV2-client-key-3",
    "kube_token": "eyJhbGciOiJSUzI1NiJ9.kube-token-4",
    "kube_password": "kube-pass-5",
    "env_pass": "env-pass-6",
    "env_apikey": "env-apikey-7",
    "grafana_password": "grafana-admin-8",
    "webhook_token": "webhook-query-token-9",
    "slack_path": "T0000/B0000/slack-path-secret-10",
    "log_password": "log-hunter2-11",
    "annotation": "last-applied-secret-12",
    "datasource": "basic-auth-pw-13",
    "url_userinfo": "userinfo-pw-14",
    "bearer": "bearer-token-15",
}


def planted_snapshot() -> Snapshot:
    p = PLANTED
    secret = {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "grafana-admin", "namespace": "monitoring", "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": json.dumps(
                {"kind": "Secret", "stringData": {"admin-password": p["annotation"]}})}},
        "data": {"admin-password": base64.b64encode(p["secret_data"].encode()).decode()},
        "stringData": {"other": p["secret_string"]},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "grafana-0", "namespace": "monitoring"},
        "spec": {"containers": [{"name": "grafana", "env": [
            {"name": "GF_SECURITY_ADMIN_PASSWORD", "value": p["grafana_password"]},
            {"name": "DB_PASS", "value": p["env_pass"]},
            {"name": "SERVICE_API_KEY", "value": p["env_apikey"]},
            {"name": "LOG_LEVEL", "value": "debug"},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "x", "key": "y"}}},
        ]}]},
    }  # fmt: skip
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "solo"},
            "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}  # fmt: skip
    alert_cm = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "am", "namespace": "monitoring"},
        "data": {"alertmanager.yaml": f"receivers:\n- webhook_configs:\n  - url: https://example.com/hook?token={p['webhook_token']}\n"
                 f"- slack_configs:\n  - api_url: https://hooks.slack.com/services/{p['slack_path']}\n"},
    }  # fmt: skip
    kubeconfig = {"users": [{"name": "admin", "user": {"client-key-data": p["kube_key"], "token": p["kube_token"],
                                                       "password": p["kube_password"]}}]}  # fmt: skip
    return Snapshot(
        kube={"Secret": [secret], "Pod": [pod], "Node": [node], "ConfigMap": [alert_cm]},
        pod_logs={"monitoring/grafana-0/grafana": f"t=1 level=info msg=start password={p['log_password']}\n"
                  f"GET http://admin:{p['url_userinfo']}@grafana/api/health\nAuthorization: Bearer {p['bearer']}\n"},
        grafana=GrafanaData(reachable=True, datasources=[{"name": "Prometheus", "basicAuthPassword": p["datasource"],
                                                          "secureJsonData": {"httpHeaderValue1": p["datasource"]}}]),
        hosts={"solo": {"hostname": "solo", "kubeconfig": kubeconfig, "firewall": {"jump": True}}},
        errors={"grafana": f"GET https://grafana/api?token={p['webhook_token']}: 401"},
    )  # fmt: skip


def read_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        out = {}
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out[m.name] = f.read()
        return out


def test_no_planted_secret_in_any_member(tmp_path: Path) -> None:
    findings = [Finding("H04-firewall", "host", "fail", "drops", host="solo",
                        evidence=f"see https://x/hook?token={PLANTED['webhook_token']}", fix="gpustack up --only firewall")]  # fmt: skip
    path = write_bundle(tmp_path / "out" / "bundle.tar.gz", planted_snapshot(), findings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    members = read_members(path)
    names = {n.removeprefix("gpustack-bundle/") for n in members}
    assert names == {"version.json", "snapshot.json", "findings.json", "hosts/solo.json",
                     "logs/monitoring_grafana-0_grafana.log"}  # fmt: skip
    for name, content in members.items():
        text = content.decode()
        for what, secret in PLANTED.items():
            assert secret not in text, f"{what} leaked into {name}"
            assert base64.b64encode(secret.encode()).decode() not in text, f"{what} (base64) leaked into {name}"
    version = json.loads(members["gpustack-bundle/version.json"])
    assert version["gpustack"] == __version__ and version["command"] == "doctor"
    snap = json.loads(members["gpustack-bundle/snapshot.json"])
    # useful data survives: taints (key!), plain env, URLs without their secrets, the findings
    assert snap["kube"]["Node"][0]["spec"]["taints"][0]["key"] == "node-role.kubernetes.io/control-plane"
    env = {e["name"]: e.get("value") for e in snap["kube"]["Pod"][0]["spec"]["containers"][0]["env"]}
    assert env["LOG_LEVEL"] == "debug" and env["DB_PASS"] == REDACTED and env["GF_SECURITY_ADMIN_PASSWORD"] == REDACTED
    assert "https://example.com/REDACTED?REDACTED" in snap["kube"]["ConfigMap"][0]["data"]["alertmanager.yaml"]
    report = json.loads(members["gpustack-bundle/findings.json"])
    assert report["checks"][0]["id"] == "H04-firewall"
    # the verdict counts are numbers, not credentials (issue 31: "pass": "REDACTED")
    assert report["summary"] == summary(findings) and report["summary"]["fail"] == 1
    assert json.loads(members["gpustack-bundle/hosts/solo.json"])["firewall"] == {"jump": True}


def test_failed_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: Any, **k: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(tarfile, "open", boom)
    with pytest.raises(OSError):
        write_bundle(tmp_path / "b.tar.gz", Snapshot(), [])
    assert list(tmp_path.iterdir()) == []


def test_redact_text_keeps_ordinary_text() -> None:
    line = 'level=info msg="listening on :9400" url=http://prometheus:9090/api/v1/targets'
    assert redact_text(line) == line
    assert redact_text("x -----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY----- y") == (
        f"x -----{REDACTED} PRIVATE KEY----- y"
    )


SECRET = "zz-planted-secret-zz"
keys = st.sampled_from(["password", "token", "client-key-data", "apiKey", "GF_ADMIN_PASSWORD", "secret"])
plain = st.text(alphabet="abcdefgh", min_size=1, max_size=6)
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), plain)
json_tree = st.recursive(json_leaf, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                            st.dictionaries(plain, kids, max_size=3)), max_leaves=12)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(tree=json_tree, key=keys, where=st.sampled_from(["dict", "env", "secret", "url", "text"]))
def test_a_planted_secret_never_survives_redaction(tree: Any, key: str, where: str) -> None:
    planted: Any = {
        "dict": {key: SECRET},
        "env": {"env": [{"name": key.upper(), "value": SECRET}]},
        "secret": {"kind": "Secret", "data": {"k": SECRET}},
        "url": {"u": f"https://alerts.example/hook?{key}={SECRET}"},
        "text": {"log": f"starting {key}={SECRET} done"},
    }[where]
    data = {"a": tree, "b": [tree, planted], "c": {"nested": planted}}
    assert SECRET not in json.dumps(redact(data))


def test_redact_is_total_on_odd_shapes() -> None:
    odd = {"kind": "Secret", "data": None, "stringData": ["x"], "env": "not-a-list", "annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": "not json password=p1"}}  # fmt: skip
    out = redact(odd)
    assert out["stringData"] == [REDACTED] and "p1" not in json.dumps(out)
    assert redact(io.__name__) == "io"


def test_a_tally_named_pass_is_kept_a_password_named_pass_is_not() -> None:
    data = {"summary": {"pass": 31, "fail": 2}, "proxy": {"user": "alice", "pass": "s3cret"},
            "bypass": "no-proxy-list", "passthrough": True, "passphrase": "hunter2", "sshPass": "pw-1", "DB_PASS": "pw-2",
            "BYPASS": "x", "compass": "north"}  # fmt: skip
    out = redact(data)
    assert out["summary"] == {"pass": 31, "fail": 2}
    assert out["proxy"] == {"user": "alice", "pass": REDACTED}
    assert out["bypass"] == "no-proxy-list" and out["passthrough"] is True
    assert out["passphrase"] == REDACTED and out["sshPass"] == REDACTED and out["DB_PASS"] == REDACTED
    assert out["BYPASS"] == "x" and out["compass"] == "north"
