"""``gpustack etcd restore``'s rules on this machine (pure, and its record): which snapshot, whether it verifies, what
the restore loses, the restore's id and new cluster token, and ``<state>/clusters/<cluster>/etcd-restore.json``.

A restore started is finished: while this machine's record says ``running`` or ``failed``, the next
``gpustack etcd restore`` continues it with the same snapshot, id and token (each host skips the phases it recorded
as done, playbooks/module_utils/gpustack_etcd_restore.py); a different snapshot is refused until it is done.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpustack.cluster.etcd_snapshot import local_dir, local_snapshots
from gpustack.errors import ConfigError, UsageError
from gpustack.paths import kubeconfig_path

if TYPE_CHECKING:
    from gpustack.config.model import Config

#: the playbook variables of the restore (PLAN.extravars)
EXTRAVARS = (
    "gpustack_etcd_restore_id",
    "gpustack_etcd_restore_snapshot",
    "gpustack_etcd_restore_sha256",
    "gpustack_etcd_restore_token",
    "gpustack_etcd_version",  # etcdutl from etcd's release archive where the image lacks it (render/ansible.py)
    "gpustack_etcd_downloads",
)
SHA256_SIZE = 32
TIME_FORMAT = "%Y%m%dT%H%M%SZ"


class SnapshotRefused(ConfigError):
    """The snapshot cannot be restored (missing, not whole, corrupt, or another restore is unfinished): exit 2,
    nothing changed."""


def record_path(cfg: Config) -> Path:
    return kubeconfig_path(cfg.cluster.name).parent / "etcd-restore.json"


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def unfinished(record: Mapping[str, Any] | None) -> bool:
    return record is not None and record.get("status") in ("running", "failed")


def verify(path: Path) -> dict[str, Any]:
    """The snapshot's size and whole sha256, after the check ``etcdutl snapshot restore`` makes: its last 32 bytes
    are the sha256 of the rest (etcd ``server/etcdserver/api/v3rpc/maintenance.go``; ``etcdutl/snapshot``:
    ``hasHash := size % 512 == sha256.Size``). SnapshotRefused otherwise. The hosts run the same check in
    playbooks/module_utils/gpustack_etcd.py ``verify_snapshot`` (host-side code ships to the hosts on its own and
    gpustack imports none of it); tests/unit/playbooks/test_etcd_snapshot_utils.py holds the two to one answer."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SnapshotRefused(f"{path}: {exc.strerror or exc}") from None
    if size <= SHA256_SIZE or size % 512 != SHA256_SIZE:
        raise SnapshotRefused(f"{path}: {size} bytes is not a whole etcd snapshot (no integrity hash at its end)")
    body, whole = hashlib.sha256(), hashlib.sha256()
    with path.open("rb") as f:
        left = size - SHA256_SIZE
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                raise SnapshotRefused(f"{path}: shorter than its size while reading")
            body.update(chunk)
            whole.update(chunk)
            left -= len(chunk)
        stored = f.read(SHA256_SIZE)
    whole.update(stored)
    if body.digest() != stored:
        raise SnapshotRefused(f"{path}: the integrity hash does not match its content (a corrupt snapshot)")
    return {"size": size, "sha256": whole.hexdigest()}


def taken_at(path: Path) -> datetime:
    """When the snapshot was taken: the UTC time in gpustack's name (``etcd-<node>-<time>.db``), else its mtime."""
    stem = path.name.removesuffix(".db")
    try:
        return datetime.strptime(stem.rsplit("-", 1)[-1], TIME_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)


def choose(cfg: Config, given: Path | None, record: Mapping[str, Any] | None) -> tuple[Path, dict[str, Any]]:
    """The snapshot to restore and its facts: an unfinished restore's (another one is refused), ``given``, or the
    newest local copy of this cluster that verifies."""
    if unfinished(record):
        assert record is not None
        kept = Path(str(record.get("snapshot")))
        if given is not None and given.resolve() != kept.resolve():
            raise SnapshotRefused(
                f"the etcd restore {record.get('id')} of {kept} is unfinished ({record.get('status')})",
                hint=f"finish it first: `gpustack etcd restore {kept}` (or without a file)",
            )
        facts = verify(kept)
        if facts["sha256"] != record.get("sha256"):
            raise SnapshotRefused(f"{kept} changed since the unfinished restore {record.get('id')} began")
        return kept, facts
    if given is not None:
        return given, verify(given)
    problems = []
    for path in reversed(local_snapshots(cfg)):
        try:
            return path, verify(path)
        except SnapshotRefused as exc:
            problems.append(exc.message)
    raise SnapshotRefused(
        f"no etcd snapshot of cluster {cfg.cluster.name} here that verifies (in {local_dir(cfg)})"
        + (f": {'; '.join(problems)}" if problems else ""),
        hint="name one: `gpustack etcd restore FILE` (e.g. a copy from /var/lib/gpustack/etcd-snapshots on a "
        "control plane)",
    )


def new_record(path: Path, facts: Mapping[str, Any], now: datetime, members: Sequence[str]) -> dict[str, Any]:
    """A restore's record before it starts: its id (the UTC start), the new cluster token, the snapshot."""
    rid = now.astimezone(timezone.utc).strftime(TIME_FORMAT)
    return {
        "id": rid,
        "token": f"gpustack-restore-{rid}",
        "snapshot": str(path.resolve()),
        "sha256": facts["sha256"],
        "size": facts["size"],
        "taken": taken_at(path).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "members": list(members),
        "status": "planned",
    }


def age(taken: datetime, now: datetime) -> str:
    seconds = max(0, int((now - taken).total_seconds()))
    if seconds < 3600:
        return f"{seconds // 60} minutes"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} hours"
    return f"{seconds // 86400} days"


def losses(record: Mapping[str, Any], now: datetime) -> list[str]:
    """What the restore loses and touches, said before the question (pure)."""
    taken = datetime.strptime(str(record["taken"]), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    members = ", ".join(record["members"])
    return [
        f"snapshot {record['snapshot']} ({record['size']} bytes, sha256 {str(record['sha256'])[:16]}…, verified)",
        f"taken {record['taken']} ({age(taken, now)} ago): everything written to the cluster since is LOST "
        "(objects, Secrets, leases, node registrations made after it)",
        f"etcd members restored: {members}; etcd and the API server stop on each until all are restored",
        "each old data directory is kept as <data dir>.before-restore-" + str(record["id"]),
    ]


def extravars(record: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "gpustack_etcd_restore_id": record["id"],
        "gpustack_etcd_restore_snapshot": record["snapshot"],
        "gpustack_etcd_restore_sha256": record["sha256"],
        "gpustack_etcd_restore_token": record["token"],
    }


def with_status(record: Mapping[str, Any], status: str, now: datetime, error: str = "") -> dict[str, Any]:
    out = {**record, "status": status, f"{status}_at": now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if error:
        out["error"] = error
    return out


def snapshot_file(value: str | os.PathLike[str] | None) -> Path | None:
    if value is None or str(value) == "":
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise UsageError(f"{path}: no such snapshot file")
    return path
