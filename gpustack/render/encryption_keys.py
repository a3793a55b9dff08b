"""The cluster's Secret encryption keys (``security.encryption_at_rest``), kept in gpustack's state on this machine.

``<state>/clusters/<name>/encryption-keys.json`` (mode 0600, its directory 0700): ``{"keys": [{"name", "secret"}, ...]}``,
the key Secrets are written with first. Each key is 32 random bytes (``secretbox`` takes exactly 32: kubernetes/website
``encrypt-data.md``), base64-encoded as the EncryptionConfiguration holds it. The keys are never printed; an etcd
snapshot restored without them holds Secrets no API server can read (docs/operations.md).
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from gpustack.config.model import Config
from gpustack.errors import ConfigError
from gpustack.paths import encryption_keys_path, ensure_private_dir, write_json
from gpustack.render.security import EncryptionKey, render_encryption_config

KEY_BYTES = 32


def new_key(now: datetime | None = None, *, random: Callable[[int], bytes] = secrets.token_bytes) -> EncryptionKey:
    """A new key named by the UTC second it was made (``key-20261129T041500Z``)."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return EncryptionKey(f"key-{stamp}", base64.b64encode(random(KEY_BYTES)).decode("ascii"))


def _valid(key: object) -> EncryptionKey | None:
    if not isinstance(key, dict) or not isinstance(key.get("name"), str) or not isinstance(key.get("secret"), str):
        return None
    try:
        raw = base64.b64decode(key["secret"], validate=True)
    except ValueError:
        return None
    return EncryptionKey(key["name"], key["secret"]) if len(raw) == KEY_BYTES and key["name"] else None


def load_keys(cfg: Config, root: Path | None = None) -> list[EncryptionKey]:
    """The cluster's keys, the write key first; [] when none was made yet. A file that is not gpustack's is an error
    (never replaced: the Secrets in etcd may need the keys it holds)."""
    path = encryption_keys_path(cfg.cluster.name, root)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        raw = data["keys"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError(f"{path}: not gpustack's encryption key file",
                          hint="restore it from a backup: the cluster's Secrets are encrypted with these keys") from None  # fmt: skip
    keys = [_valid(k) for k in raw] if isinstance(raw, list) else [None]
    if not keys or any(k is None for k in keys):
        raise ConfigError(f"{path}: not gpustack's encryption key file: a key is not 32 base64-encoded bytes with a name",
                          hint="restore it from a backup: the cluster's Secrets are encrypted with these keys")  # fmt: skip
    return [k for k in keys if k is not None]


def save_keys(cfg: Config, keys: list[EncryptionKey], root: Path | None = None, *, rotation: str | None = None) -> Path:
    path = encryption_keys_path(cfg.cluster.name, root)
    ensure_private_dir(path.parent)
    data: dict[str, object] = {"keys": [{"name": k.name, "secret": k.secret} for k in keys]}
    if rotation:
        data["rotation"] = rotation
    return write_json(path, data)


# --- rotation ----------------------------------------------------------------------------------------
# kubernetes/website encrypt-data.md "Rotating a decryption key": the new key added second on every API server
# (restart), then first (restart: Secrets are written with it), every Secret rewritten, the old key removed
# (restart). Each phase is recorded in the key file before the control planes get its configuration, so a rotation
# interrupted anywhere resumes by applying the recorded keys again and going on from the recorded phase. The last
# phase, ``removed`` (the new key alone), is cleared only once every API server runs without the old key: a run cut
# off before that applies it again instead of starting a second rotation (gpustack/cluster/key_rotation.py).

#: the phases, in order: what the key file holds in each (the configuration every API server must run with)
ROTATION_PHASES = ("added", "promoted", "rewritten", "removed")


def rotation_phase(cfg: Config, root: Path | None = None) -> str | None:
    """The phase of the rotation under way (:data:`ROTATION_PHASES`), None when none is."""
    path = encryption_keys_path(cfg.cluster.name, root)
    if not path.exists():
        return None
    try:
        phase = json.loads(path.read_text(encoding="utf-8")).get("rotation")
    except (OSError, ValueError, AttributeError):
        return None
    return phase if phase in ROTATION_PHASES else None


def _unique(key: EncryptionKey, keys: list[EncryptionKey]) -> EncryptionKey:
    """The new key under a name none of ``keys`` has (names are by the second: a rotation in the second the key
    was made; the API server refuses an EncryptionConfiguration whose key names repeat)."""
    names, name, n = {k.name for k in keys}, key.name, 1
    while name in names:
        n += 1
        name = f"{key.name}-{n}"
    return EncryptionKey(name, key.secret)


def advance_rotation(
    cfg: Config, root: Path | None = None, *, make: Callable[[], EncryptionKey] = new_key
) -> tuple[str | None, list[EncryptionKey]]:
    """One step of a key rotation, recorded; returns the phase now and the keys the API servers must get.

    none -> ``added`` (a new key, second: read, not yet written), ``added`` -> ``promoted`` (the new key first),
    ``promoted`` -> ``rewritten`` (call it once every Secret was rewritten: :mod:`gpustack.cluster.secrets`),
    ``rewritten`` -> ``removed`` (the new key alone), ``removed`` -> None (call it once every API server runs
    with the new key alone: the rotation is over)."""
    keys, phase = load_keys(cfg, root), rotation_phase(cfg, root)
    if not keys:
        raise ConfigError("no encryption key to rotate: the cluster has none yet (`gpustack up` makes it)")
    if phase is None:
        keys, phase = [*keys, _unique(make(), keys)], "added"
    elif phase == "added":
        keys, phase = [keys[-1], *keys[:-1]], "promoted"
    elif phase == "promoted":
        phase = "rewritten"
    elif phase == "rewritten":
        keys, phase = keys[:1], "removed"
    else:
        phase = None
    save_keys(cfg, keys, root, rotation=phase)
    return phase, keys


def ensure_keys(
    cfg: Config, root: Path | None = None, *, make: Callable[[], EncryptionKey] = new_key
) -> list[EncryptionKey]:
    """The cluster's keys, made once (a first key) and kept; the same keys on every later run."""
    keys = load_keys(cfg, root)
    if not keys:
        keys = [make()]
        save_keys(cfg, keys, root)
    return keys


def run_extravars(cfg: Config, root: Path | None = None, *, make: bool = True) -> dict[str, str]:
    """What a playbook run adds to :func:`gpustack.render.ansible.extravars` (which stays pure): the
    EncryptionConfiguration with the cluster's keys, made now if this is the cluster's first run (``make``: a run
    that builds control planes; any other run passes the keys there are and never makes one: a second `reset`
    must not leave a new key behind)."""
    if not cfg.security.encryption_at_rest:
        return {}
    keys = ensure_keys(cfg, root) if make else load_keys(cfg, root)
    return {"gpustack_encryption_config": render_encryption_config(keys)} if keys else {}
