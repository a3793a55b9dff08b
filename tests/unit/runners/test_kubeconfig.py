"""Which cluster a command talks to: --kubeconfig, $KUBECONFIG (merged as kubectl merges), gpustack's
admin.conf, ~/.kube/config, --context; and connecting to the one it chose (a fake API server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpustack.errors import ConfigError, UsageError
from gpustack.paths import kubeconfig_path
from gpustack.runners.kube import REQUEST_TIMEOUT
from gpustack.runners.kubeconfig import (
    ENV,
    FLAG,
    GPUSTACK,
    HOME,
    KubeconfigNotFound,
    cluster_client,
    connect,
    merge_kubeconfigs,
    resolve_kubeconfig,
)
from tests.fakes.kube_api import FakeKubeAPI

TOKEN = "s3cret-t0ken"


def kubeconfig(path: Path, contexts: dict[str, str], current: str | None = None, **cluster_extra: Any) -> Path:
    """A kubeconfig with one cluster, user and context per ``name -> server``."""
    cfg: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": s, **cluster_extra}} for n, s in contexts.items()],
        "users": [{"name": n, "user": {"token": TOKEN}} for n in contexts],
        "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n in contexts],
    }
    if current:
        cfg["current-context"] = current
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


@pytest.fixture
def where(tmp_path: Path) -> dict[str, Any]:
    """An empty home and state directory; resolve() with them and a given environment."""
    home, state = tmp_path / "home", tmp_path / "state"
    home.mkdir()
    return {"home": home, "state_root": state, "environ": {}}


def resolve(where: dict[str, Any], **kw: Any) -> Any:
    return resolve_kubeconfig(**{**where, **kw})


def own_conf(where: dict[str, Any], server: str = "https://own:6443") -> Path:
    return kubeconfig(kubeconfig_path("gpustack", where["state_root"]), {"kubernetes-admin@gpustack": server},
                      "kubernetes-admin@gpustack")  # fmt: skip


def home_conf(where: dict[str, Any], server: str = "https://home:6443") -> Path:
    return kubeconfig(where["home"] / ".kube" / "config", {"home": server}, "home")


def test_the_flag_wins_over_everything(where: dict[str, Any], tmp_path: Path) -> None:
    own_conf(where)
    home_conf(where)
    env = kubeconfig(tmp_path / "env", {"env": "https://env:6443"}, "env")
    flag = kubeconfig(tmp_path / "flag", {"flag": "https://flag:6443"}, "flag")
    t = resolve(where, kubeconfig=flag, environ={"KUBECONFIG": str(env)})
    assert (t.source, t.server, t.context, t.files) == (FLAG, "https://flag:6443", "flag", (flag,))


def test_kubeconfig_env_before_gpustack_state_and_home(where: dict[str, Any], tmp_path: Path) -> None:
    own_conf(where)
    home_conf(where)
    env = kubeconfig(tmp_path / "env", {"env": "https://env:6443"}, "env")
    t = resolve(where, environ={"KUBECONFIG": str(env)})
    assert (t.source, t.server, t.own) == (ENV, "https://env:6443", False)


def test_gpustack_admin_conf_before_home_config(where: dict[str, Any]) -> None:
    conf = own_conf(where)
    home_conf(where)
    t = resolve(where)
    assert (t.source, t.files, t.server, t.own) == (GPUSTACK, (conf,), "https://own:6443", True)


def test_home_config_when_nothing_else(where: dict[str, Any]) -> None:
    path = home_conf(where)
    t = resolve(where, environ={"KUBECONFIG": ""})  # set but empty: as if unset, like kubectl
    assert (t.source, t.files, t.own) == (HOME, (path,), False)


def test_a_home_config_for_gpustacks_server_is_gpustacks_cluster(where: dict[str, Any]) -> None:
    own_conf(where, "https://10.0.0.1:6443")
    t = resolve(where, kubeconfig=home_conf(where, "https://10.0.0.1:6443"))
    assert t.own, "same server as gpustack's admin.conf: doctor --fix --yes may change it"


def test_kubeconfig_list_is_merged_as_kubectl_merges(where: dict[str, Any], tmp_path: Path) -> None:
    first = kubeconfig(tmp_path / "a" / "first", {"shared": "https://first:6443"})  # no current-context
    second = kubeconfig(tmp_path / "b" / "second", {"shared": "https://second:6443", "only-b": "https://b:6443"},
                        "only-b")  # fmt: skip
    third = kubeconfig(tmp_path / "c" / "third", {"c": "https://c:6443"}, "c")
    missing = tmp_path / "absent"
    t = resolve(where, environ={"KUBECONFIG": f"{first}:{missing}:{second}:{third}"})
    assert t.files == (first, second, third), "missing files are skipped"
    assert t.context == "only-b", "current-context: the first file that sets one"
    assert (
        resolve(where, environ={"KUBECONFIG": f"{first}:{second}"}, context="shared").server == "https://first:6443"
    ), "the first file to define a name wins"
    assert resolve(where, environ={"KUBECONFIG": f"{third}:{second}"}).context == "c"


def test_relative_paths_are_relative_to_their_own_file(tmp_path: Path) -> None:
    a = kubeconfig(tmp_path / "a" / "config", {"a": "https://a:6443"}, "a", **{"certificate-authority": "ca.crt"})
    b = kubeconfig(tmp_path / "b" / "config", {"b": "https://b:6443"}, **{"certificate-authority": "/abs/ca.crt"})
    merged = merge_kubeconfigs([(a, yaml.safe_load(a.read_text())), (b, yaml.safe_load(b.read_text()))])
    cas = {c["name"]: c["cluster"]["certificate-authority"] for c in merged["clusters"]}
    assert cas == {"a": str((tmp_path / "a" / "ca.crt").resolve()), "b": "/abs/ca.crt"}


def test_context_chooses_among_contexts(where: dict[str, Any], tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kc", {"prod": "https://prod:6443", "lab": "https://lab:6443"}, "prod")
    assert resolve(where, kubeconfig=path).server == "https://prod:6443"
    assert resolve(where, kubeconfig=path, context="lab").server == "https://lab:6443"
    with pytest.raises(UsageError, match=r"--context staging: no such context .*contexts: prod, lab") as exc:
        resolve(where, kubeconfig=path, context="staging")
    assert exc.value.exit_code == 2


def test_no_current_context_asks_for_one(where: dict[str, Any], tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "kc", {"prod": "https://prod:6443", "lab": "https://lab:6443"})
    with pytest.raises(UsageError, match=r"no current-context: choose one with --context \(prod, lab\)"):
        resolve(where, kubeconfig=path)


@pytest.mark.parametrize(
    ("content", "error"),
    [("clusters: {a: 1}\n", "clusters must be a list"), ("- just\n- a list\n", "not a kubeconfig"),
     ("key: [unclosed\n", "not YAML")],
)  # fmt: skip
def test_a_broken_kubeconfig_is_a_usage_error(where: dict[str, Any], tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "kc"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError, match=error):
        resolve(where, kubeconfig=path)
    with pytest.raises(UsageError, match="no such file"):
        resolve(where, kubeconfig=tmp_path / "missing")


def test_nothing_found_names_every_place_looked_at(where: dict[str, Any], tmp_path: Path) -> None:
    with pytest.raises(KubeconfigNotFound) as exc:
        resolve(where)
    assert exc.value.exit_code == 3
    assert "admin.conf" in exc.value.message and str(where["home"] / ".kube" / "config") in exc.value.message
    with pytest.raises(KubeconfigNotFound, match=r"none of the files in \$KUBECONFIG exists"):
        home_conf(where)  # a stray $KUBECONFIG is not silently replaced by ~/.kube/config
        resolve(where, environ={"KUBECONFIG": str(tmp_path / "gone")})


def test_own_only_ignores_the_environment(where: dict[str, Any], tmp_path: Path) -> None:
    env = kubeconfig(tmp_path / "env", {"env": "https://env:6443"}, "env")
    home_conf(where)
    with pytest.raises(KubeconfigNotFound, match=r"admin\.conf"):
        resolve(where, own_only=True, environ={"KUBECONFIG": str(env)})
    own_conf(where)
    assert resolve(where, own_only=True, environ={"KUBECONFIG": str(env)}).source == GPUSTACK


def test_credentials_never_in_what_is_shown(where: dict[str, Any], tmp_path: Path) -> None:
    t = resolve(where, kubeconfig=kubeconfig(tmp_path / "kc", {"a": "https://a:6443"}, "a"))
    assert TOKEN in str(t.config), "the merged config holds the credential"
    for shown in (repr(t), t.describe(), str(t.to_json())):
        assert TOKEN not in shown


def test_connect_talks_to_the_chosen_context(tmp_path: Path, where: dict[str, Any]) -> None:
    with FakeKubeAPI.running() as a, FakeKubeAPI.running() as b:
        path = kubeconfig(tmp_path / "kc", {"a": a.url, "b": b.url}, "a")
        kube = connect(resolve(where, environ={"KUBECONFIG": str(path)}, context="b"), request_timeout=5)
        assert kube.list_objects("v1", "Node") == []
        assert b.request_count > 0 and a.request_count == 0


def test_cluster_client_resolves_as_resolve_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeKubeAPI.running() as own, FakeKubeAPI.running() as other:
        monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
        monkeypatch.setenv("HOME", str(tmp_path))
        kubeconfig(kubeconfig_path("c1", tmp_path / "state"), {"own": own.url}, "own")
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "other", {"other": other.url}, "other")))
        kube = cluster_client("c1", request_timeout=7)
        assert kube.target is not None and kube.target["source"] == ENV and kube.request_timeout == 7
        kube = cluster_client("c1", own_only=True)  # gpustack's admin.conf, whatever $KUBECONFIG says
        assert kube.target is not None and kube.target["source"] == GPUSTACK and kube.request_timeout == REQUEST_TIMEOUT
        assert kube.list_objects("v1", "Node") == []
        assert own.request_count > 0 and other.request_count == 0
        with pytest.raises(UsageError, match="own cluster"):
            cluster_client("c1", tmp_path / "other", own_only=True)


def test_cluster_client_in_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import incluster_config

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="no in-cluster credentials") as exc:
        cluster_client(in_cluster=True)
    assert exc.value.exit_code == 2
    with pytest.raises(UsageError, match="exclude each other"):
        cluster_client(kubeconfig=tmp_path / "kc", in_cluster=True)
    # a pod's ServiceAccount: the API server's Service from the environment, the projected token and CA
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    kube = cluster_client(in_cluster=True, request_timeout=4)
    assert kube.api.configuration.host == "https://10.96.0.1:443" and kube.request_timeout == 4
    assert kube.api.configuration.api_key["BearerToken"] == "bearer sa-token"  # the Kube sends BearerToken auth
