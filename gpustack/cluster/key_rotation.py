"""``gpustack secrets rotate-key``: the steps of a Secret encryption key rotation taken on this machine.

kubernetes/website ``content/en/docs/tasks/administer-cluster/encrypt-data.md``, "Rotating a decryption key": the
new key added as a second provider key on every API server (each restarted), then made first (restarted again:
Secrets are written with it), every Secret rewritten, the old key removed (restarted). The key file in gpustack's
state (:mod:`gpustack.render.encryption_keys`) records the phase; each step here moves it on only from the phase
before its own and does nothing otherwise, and between two steps the command's Ansible stage gives every control
plane the keys the file holds (playbooks/secrets-rotate-key.yml). So a rotation cut off anywhere is finished by the
next run: the recorded keys are applied again, then the steps not yet taken are taken.

The old key leaves the key file only in :func:`rewrite`, after every Secret was rewritten through the API with the
new key while every API server wrote with it (the stage before applied the promoted keys on all of them); a rewrite
that fails keeps the phase ``promoted`` and the old key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpustack.cluster.secrets import Rewritten, rewrite_secrets
from gpustack.config.model import Config
from gpustack.errors import ConfigError
from gpustack.render.encryption_keys import advance_rotation, load_keys, new_key, rotation_phase
from gpustack.render.security import EncryptionKey
from gpustack.runners.kube import Kube


@dataclass(frozen=True)
class StepResult:
    changed: bool
    note: str
    rewritten: Rewritten | None = None


def refuse_without_encryption(cfg: Config, root: Path | None = None) -> None:
    """A rotation needs encryption at rest on and the cluster's key (made by the first ``gpustack up``)."""
    if not cfg.security.encryption_at_rest:
        raise ConfigError(
            "security.encryption_at_rest is off: there is no Secret encryption key to rotate",
            hint="turn it on (the default) for a new cluster; an existing cluster keeps what it was built with",
        )
    if not load_keys(cfg, root):
        raise ConfigError(
            "no encryption key to rotate: this machine's state has none for the cluster",
            hint="the key is made by the `gpustack up` that builds the control plane; restore the state directory's "
            "encryption-keys.json from a backup if this cluster was built from another machine",
        )


def describe(cfg: Config, root: Path | None = None) -> str:
    """Where a rotation stands, for the CLI before it asks."""
    phase = rotation_phase(cfg, root)
    if phase is None:
        return "a new key is made; the rotation runs from the start"
    return f"an interrupted rotation is resumed: recorded phase {phase!r}, its keys applied again first"


def begin(cfg: Config, root: Path | None = None, *, make: Callable[[], EncryptionKey] = new_key) -> StepResult:
    """No rotation under way: a new key recorded second (Secrets still written with the current one)."""
    phase = rotation_phase(cfg, root)
    if phase is not None:
        return StepResult(False, f"resuming the rotation recorded at {phase!r}")
    _, keys = advance_rotation(cfg, root, make=make)
    return StepResult(True, f"{keys[-1].name} added second (read, not yet written)")


def promote(cfg: Config, root: Path | None = None) -> StepResult:
    """``added`` (applied on every control plane) -> ``promoted``: the new key first."""
    if rotation_phase(cfg, root) != "added":
        return StepResult(False, "the new key is first already")
    _, keys = advance_rotation(cfg, root)
    return StepResult(True, f"{keys[0].name} first: Secrets are written with it")


def rewrite(cfg: Config, kube: Kube, root: Path | None = None) -> StepResult:
    """``promoted`` (applied on every control plane) -> every Secret rewritten -> ``rewritten`` -> ``removed``
    (the old key out of the key file). A rewrite that fails raises and leaves the phase ``promoted``."""
    phase = rotation_phase(cfg, root)
    if phase not in ("promoted", "rewritten"):
        return StepResult(False, "every Secret was rewritten already")
    result: Rewritten | None = None
    if phase == "promoted":
        result = rewrite_secrets(kube)
        advance_rotation(cfg, root)  # -> rewritten
    _, keys = advance_rotation(cfg, root)  # -> removed
    note = f"old key removed; {keys[0].name} alone"
    if result is not None:
        raced = f", {len(result.raced)} written by others meanwhile" if result.raced else ""
        note = f"{result.rewritten} Secret(s) rewritten{raced}; {note}"
    return StepResult(True, note, result)


def finish(cfg: Config, root: Path | None = None) -> StepResult:
    """``removed`` (applied on every control plane) -> no rotation under way."""
    if rotation_phase(cfg, root) != "removed":
        return StepResult(False, "no rotation to finish")
    _, keys = advance_rotation(cfg, root)
    return StepResult(True, f"rotation done: {keys[0].name} is the cluster's key")
