"""gpustack/cluster/key_rotation.py: the steps of `gpustack secrets rotate-key` on this machine, against the key file
in a temporary state directory and, for the rewrite, :class:`SecretStore` (a test double of
:class:`gpustack.runners.kube.Kube` in front of a real API server's Secrets: LIST and PUT; the real rewrite is
tests/controlplane/test_security.py's): each step moves
the rotation on only from the phase before its own, a run cut off anywhere is finished by the next (no second key),
and the old key leaves the key file only after every Secret was rewritten."""

from __future__ import annotations

import stat
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from gpustack.cluster import key_rotation as kr
from gpustack.config.model import Config
from gpustack.errors import ConfigError, GpustackError
from gpustack.paths import encryption_keys_path
from gpustack.render.encryption_keys import ensure_keys, load_keys, new_key, rotation_phase
from gpustack.runners.kube import Kube

NODES = [{"name": "cp1", "address": "192.0.2.11", "role": "control-plane", "connection": "local"}]
NEW = new_key(datetime(2027, 1, 1, tzinfo=timezone.utc))


def cfg(**sec: object) -> Config:
    return Config.model_validate({"nodes": NODES, "security": sec})


class SecretStore:
    """TEST DOUBLE of Kube for rewrite_secrets: ``list_all("/api/v1/secrets")`` and ``request("PUT", ...)``; a path in
    ``fail`` answers 500 once (as the real client raises ApiException); every PUT is recorded in ``puts``."""

    def __init__(self, n: int = 3) -> None:
        self.secrets = [{"metadata": {"name": f"s{i}", "namespace": "ns"}, "data": {"k": "dg=="}} for i in range(n)]
        self.puts: list[str] = []
        self.fail: set[str] = set()

    def list_all(self, path: str, query: Mapping[str, str] | None = None) -> list[dict]:
        assert path == "/api/v1/secrets"
        return [dict(s) for s in self.secrets]

    def request(self, method: str, path: str, *, body: object = None) -> dict:
        assert method == "PUT" and isinstance(body, dict) and body["kind"] == "Secret"
        if path in self.fail:
            self.fail.discard(path)
            raise ApiException(status=500, reason="Internal Server Error")
        self.puts.append(path)
        return body


@pytest.fixture
def api() -> SecretStore:
    return SecretStore()


def kube(api: SecretStore, tmp_path: Path) -> Kube:
    return api  # type: ignore[return-value]


def puts(api: SecretStore) -> list[str]:
    return api.puts


def test_a_rotation_runs_through_its_steps(tmp_path: Path, api: SecretStore) -> None:
    c = cfg()
    (old,) = ensure_keys(c, tmp_path)
    got = kr.begin(c, tmp_path, make=lambda: NEW)
    assert got.changed and NEW.name in got.note
    assert load_keys(c, tmp_path) == [old, NEW] and rotation_phase(c, tmp_path) == "added"
    assert kr.promote(c, tmp_path).changed and load_keys(c, tmp_path) == [NEW, old]
    assert puts(api) == []  # nothing rewritten before the new key is first

    got = kr.rewrite(c, kube(api, tmp_path), tmp_path)
    assert got.changed and got.rewritten is not None and got.rewritten.rewritten == 3
    assert sorted(puts(api)) == [f"/api/v1/namespaces/ns/secrets/s{i}" for i in range(3)]
    assert load_keys(c, tmp_path) == [NEW] and rotation_phase(c, tmp_path) == "removed"
    assert "3 Secret(s) rewritten" in got.note

    assert kr.finish(c, tmp_path).changed
    assert rotation_phase(c, tmp_path) is None and load_keys(c, tmp_path) == [NEW]
    assert stat.S_IMODE(encryption_keys_path(c.cluster.name, tmp_path).stat().st_mode) == 0o600


def test_a_failed_rewrite_keeps_the_old_key_and_the_next_run_finishes(tmp_path: Path, api: SecretStore) -> None:
    c = cfg()
    (old,) = ensure_keys(c, tmp_path)
    kr.begin(c, tmp_path, make=lambda: NEW)
    kr.promote(c, tmp_path)
    api.fail.add("/api/v1/namespaces/ns/secrets/s1")
    with pytest.raises(GpustackError, match="PUT Secret ns/s1: 500"):
        kr.rewrite(c, kube(api, tmp_path), tmp_path)
    assert rotation_phase(c, tmp_path) == "promoted" and load_keys(c, tmp_path) == [NEW, old]

    # the next run: begin and promote do nothing (no second key), the rewrite is done again from the start
    def never() -> object:
        raise AssertionError("a resumed rotation made a new key")

    again = kr.begin(c, tmp_path, make=never)  # type: ignore[arg-type]
    assert not again.changed and "resuming the rotation recorded at 'promoted'" in again.note
    assert not kr.promote(c, tmp_path).changed and load_keys(c, tmp_path) == [NEW, old]
    got = kr.rewrite(c, kube(api, tmp_path), tmp_path)
    assert got.rewritten is not None and got.rewritten.rewritten == 3
    assert load_keys(c, tmp_path) == [NEW] and kr.finish(c, tmp_path).changed


@pytest.mark.parametrize("cut_after", ["begin", "promote", "rewrite"])
def test_a_run_cut_off_after_each_step_is_finished_by_the_next(
    tmp_path: Path, api: SecretStore, cut_after: str
) -> None:
    """Each step records its phase before the control planes get the keys; the next run applies the recorded keys
    (the Ansible stage, not here) and takes the steps not taken yet, each once."""
    c = cfg()
    (old,) = ensure_keys(c, tmp_path)
    order = ["begin", "promote", "rewrite", "finish"]
    client = kube(api, tmp_path)
    steps = {"begin": lambda: kr.begin(c, tmp_path, make=lambda: NEW), "promote": lambda: kr.promote(c, tmp_path),
             "rewrite": lambda: kr.rewrite(c, client, tmp_path), "finish": lambda: kr.finish(c, tmp_path)}  # fmt: skip
    for name in order[: order.index(cut_after) + 1]:
        assert steps[name]().changed
    done = [name for name in order if steps[name]().changed]  # the next run, from the start
    assert done == order[order.index(cut_after) + 1 :]
    assert rotation_phase(c, tmp_path) is None and load_keys(c, tmp_path) == [NEW]
    assert len(puts(api)) == 3  # every Secret rewritten once, whichever run did it
    assert old not in load_keys(c, tmp_path)


def test_the_old_key_stays_until_the_rewrite(tmp_path: Path) -> None:
    """finish never drops a key, and rewrite (the only step that does) is a no-op before the new key is first."""
    c = cfg()
    (old,) = ensure_keys(c, tmp_path)
    kr.begin(c, tmp_path, make=lambda: NEW)
    assert not kr.finish(c, tmp_path).changed
    assert not kr.rewrite(c, None, tmp_path).changed  # type: ignore[arg-type]  # no API call either
    assert load_keys(c, tmp_path) == [old, NEW] and rotation_phase(c, tmp_path) == "added"


def test_a_rotation_is_refused_without_encryption_or_a_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="encryption_at_rest is off"):
        kr.refuse_without_encryption(cfg(encryption_at_rest=False), tmp_path)
    with pytest.raises(ConfigError, match="no encryption key to rotate"):
        kr.refuse_without_encryption(cfg(), tmp_path)
    ensure_keys(cfg(), tmp_path)
    kr.refuse_without_encryption(cfg(), tmp_path)
    assert kr.describe(cfg(), tmp_path).startswith("a new key is made")
    kr.begin(cfg(), tmp_path)
    assert "recorded phase 'added'" in kr.describe(cfg(), tmp_path)
