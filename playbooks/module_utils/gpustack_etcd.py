"""etcd snapshots on a control plane: take, verify, keep, prune. Standard library only (the target's python3,
3.8 or newer); used by the ``gpustack_etcd_snapshot`` module (``gpustack etcd snapshot`` and the snapshot before
``upgrade``, ``node remove`` and ``reset``) and, as a script, by the ``gpustack-etcd-snapshot`` systemd timer.

Facts it follows (upstream):

- kubeadm's stacked etcd is a static pod (``/etc/kubernetes/manifests/etcd.yaml``) whose image
  (``registry.k8s.io/etcd``, kubernetes ``cluster/images/etcd/Dockerfile``: "etcdctl is used by etcd.manifest for
  livenessProbe") holds ``etcdctl`` at the server's own version. gpustack runs that etcdctl with ``crictl exec`` in
  the running etcd container: no download, the same version as the server, and it works while the API server is
  down. The container mounts the host's ``/var/lib/etcd`` and ``/etc/kubernetes/pki/etcd`` at the same paths
  (kubeadm ``cmd/kubeadm/app/phases/etcd/local.go``), so a snapshot saved under the data directory appears on the
  host at that path; it is moved out at once.
- kubeadm's etcd client certificate for health checks: ``/etc/kubernetes/pki/etcd/healthcheck-client.{crt,key}``,
  signed by ``/etc/kubernetes/pki/etcd/ca.crt``; etcd listens for clients on ``https://127.0.0.1:2379``.
- A snapshot etcd streams (``etcdctl snapshot save``: the Maintenance ``Snapshot`` RPC) is the bbolt database
  followed by the sha256 of it (etcd ``server/etcdserver/api/v3rpc/maintenance.go``); ``etcdutl snapshot restore``
  checks that hash (``hasHash := size % 512 == sha256.Size``, etcd ``etcdutl/snapshot/v3_snapshot.go``).
  :func:`verify_snapshot` does the same check here, so a truncated or corrupt file is refused before it is kept.

The file is ``/var/lib/gpustack/etcd-snapshots/etcd-<node>-<UTC time>.db``, 0600 in a 0700 directory; only the
newest ``keep`` files of that pattern stay (:func:`prune`).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the target may run Python 3.8
    from collections.abc import Callable, Sequence

    Run = Callable[[Sequence[str]], tuple[int, str, str]]

ENDPOINT = "https://127.0.0.1:2379"
PKI = "/etc/kubernetes/pki/etcd"
CACERT = PKI + "/ca.crt"
CERT = PKI + "/healthcheck-client.crt"
KEY = PKI + "/healthcheck-client.key"
DATA_DIR = "/var/lib/etcd"
SNAPSHOT_DIR = "/var/lib/gpustack/etcd-snapshots"
#: kubeadm's etcd container (the kubelet labels each container with its name in the pod)
CONTAINER_LABEL = "io.kubernetes.container.name=etcd"
#: where etcdctl writes inside the container (the data directory's mount), moved out at once
STAGING = "gpustack-snapshot.db"
SHA256_SIZE = 32
NAME = re.compile(r"^etcd-(?P<node>.+)-(?P<time>[0-9]{8}T[0-9]{6}Z)\.db$")
TIMEOUT = 600


class SnapshotError(Exception):
    """A snapshot could not be taken or did not verify."""


def snapshot_name(node: str, now: datetime.datetime) -> str:
    """``etcd-<node>-<YYYYmmddTHHMMSSZ>.db`` (UTC): sorts by time within a node."""
    return f"etcd-{node}-{now.astimezone(datetime.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.db"


def snapshot_time(name: str) -> datetime.datetime | None:
    m = NAME.match(name)
    if not m:
        return None
    return datetime.datetime.strptime(m.group("time"), "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)


def etcdctl_argv(etcdctl: Sequence[str], *args: str, endpoint: str = ENDPOINT, cacert: str = CACERT,
                 cert: str = CERT, key: str = KEY) -> list[str]:  # fmt: skip
    """``etcdctl`` (an argv prefix: a path, or ``crictl exec ID etcdctl``) with kubeadm's client certificate."""
    return [*etcdctl, f"--endpoints={endpoint}", f"--cacert={cacert}", f"--cert={cert}", f"--key={key}", *args]


def crictl_etcdctl(run: Run, crictl: str = "crictl") -> list[str]:
    """``crictl exec <id> etcdctl``: the etcdctl in the running etcd static pod container."""
    rc, out, err = run([crictl, "ps", "--state", "Running", "--label", CONTAINER_LABEL, "--quiet"])
    ids = out.split()
    if rc != 0 or not ids:
        raise SnapshotError(f"no running etcd container on this node ({crictl} ps: {(err or out).strip()[:300]})")
    return [crictl, "exec", ids[0], "etcdctl"]


def verify_snapshot(path: str) -> dict:
    """Check the sha256 etcd appends to a snapshot (as ``etcdutl snapshot restore`` does); its size and hash."""
    size = os.path.getsize(path)
    if size <= SHA256_SIZE or size % 512 != SHA256_SIZE:
        raise SnapshotError(f"{path}: {size} bytes is not a whole etcd snapshot (no integrity hash at its end)")
    h, whole = hashlib.sha256(), hashlib.sha256()
    with open(path, "rb") as f:
        left = size - SHA256_SIZE
        while left:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                raise SnapshotError(f"{path}: shorter than its size while reading")
            h.update(chunk)
            whole.update(chunk)
            left -= len(chunk)
        stored = f.read(SHA256_SIZE)
    whole.update(stored)
    if h.digest() != stored:
        raise SnapshotError(f"{path}: the integrity hash does not match its content (a corrupt snapshot)")
    return {"size": size, "sha256": whole.hexdigest()}


def private_dir(path: str) -> None:
    """``path`` and missing parents, 0700 whatever the umask."""
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def keep_file(src: str, dest_dir: str, name: str) -> str:
    """Copy ``src`` into ``dest_dir/name`` 0600 (a temporary name, fsync, rename): never a partial file there."""
    private_dir(dest_dir)
    dest = os.path.join(dest_dir, name)
    tmp = dest + ".part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return dest


def prune(directory: str, keep: int) -> list[str]:
    """Remove all but the newest ``keep`` snapshot files (``etcd-<node>-<time>.db``) in ``directory``."""
    if keep < 1 or not os.path.isdir(directory):
        return []
    named = sorted((snapshot_time(n), n) for n in os.listdir(directory) if snapshot_time(n))
    old = [os.path.join(directory, n) for _, n in named[: max(0, len(named) - keep)]]
    for path in old:
        os.unlink(path)
    return old


def newest(directory: str) -> dict | None:
    """The newest snapshot in ``directory``: ``{"path", "time"}`` (for doctor's last-snapshot age)."""
    if not os.path.isdir(directory):
        return None
    named = sorted((snapshot_time(n), n) for n in os.listdir(directory) if snapshot_time(n))
    if not named:
        return None
    when, name = named[-1]
    return {"path": os.path.join(directory, name), "time": when.strftime("%Y-%m-%dT%H:%M:%SZ")}  # type: ignore[union-attr]


def take_snapshot(run: Run, etcdctl: Sequence[str], *, node: str, data_dir: str = DATA_DIR,
                  dest_dir: str = SNAPSHOT_DIR, keep: int = 5, copy_to: str = "",
                  now: datetime.datetime | None = None, tls: dict | None = None) -> dict:  # fmt: skip
    """Save a snapshot through ``etcdctl`` into ``data_dir`` (the container's mount of it), verify it, keep it as
    ``dest_dir/etcd-<node>-<time>.db`` (and in ``copy_to`` when given), prune both to ``keep``."""
    staging = os.path.join(data_dir, STAGING)
    if os.path.exists(staging):
        os.unlink(staging)
    argv = etcdctl_argv(etcdctl, "snapshot", "save", staging, **(tls or {}))
    rc, out, err = run(argv)
    try:
        if rc != 0 or not os.path.isfile(staging):
            raise SnapshotError(f"etcdctl snapshot save failed ({rc}): {(err or out).strip()[-500:]}")
        facts = verify_snapshot(staging)
        name = snapshot_name(node, now or datetime.datetime.now(datetime.timezone.utc))
        path = keep_file(staging, dest_dir, name)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    removed = prune(dest_dir, keep)
    copy = ""
    if copy_to:
        copy = keep_file(path, copy_to, name)
        removed += prune(copy_to, keep)
    return {"path": path, "name": name, "copy": copy, "removed": removed, **facts}


#: etcd's recovery guide for Kubernetes (etcd-io/website ``content/en/docs/v3.6/op-guide/recovery.md``): a restored
#: member's revision moved far past any a watcher saw and the old revisions marked compacted, so the API server's
#: watch caches and informers list again instead of missing what happened after the snapshot
BUMP_REVISION = "1000000000"


def restore_argv(etcdutl: Sequence[str], snapshot: str, *, name: str, data_dir: str, peer_url: str,
                 initial_cluster: str, token: str) -> list[str]:  # fmt: skip
    """``etcdutl snapshot restore`` for one member of the restored cluster (etcd 3.6 removed etcdctl's restore):
    a new data directory, the member's name and peer URL as kubeadm's manifest names them, every member in
    ``initial_cluster`` (``name=https://ip:2380,...``), a new cluster token."""
    return [*etcdutl, "snapshot", "restore", snapshot, f"--name={name}", f"--data-dir={data_dir}",
            f"--initial-cluster={initial_cluster}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster-token={token}", f"--bump-revision={BUMP_REVISION}", "--mark-compacted"]  # fmt: skip


def parse_endpoint_health(out: str) -> list[dict]:
    """``etcdctl endpoint health --cluster -w json`` -> ``[{"endpoint", "health", "error"}]``."""
    try:
        data = json.loads(out or "[]")
    except ValueError:
        return []
    return [
        {"endpoint": str(e.get("endpoint") or ""), "health": bool(e.get("health")), "error": str(e.get("error") or "")}
        for e in data if isinstance(e, dict)
    ]  # fmt: skip


def _host(url: str) -> str:
    rest = url.split("://", 1)[-1]
    return rest.rsplit(":", 1)[0].strip("[]") if ":" in rest else rest


def member_health(member_list: str, health: str) -> list[dict]:
    """``etcdctl member list -w json`` and ``endpoint health --cluster -w json`` -> each member with ``healthy``
    (its client URL answered the health check; a member that never started has no client URL: unhealthy).
    etcd prints member IDs as unsigned 64-bit decimals; kept as hex, as ``member remove`` takes them."""
    try:
        members = json.loads(member_list or "{}").get("members") or []
    except (ValueError, AttributeError):
        raise SnapshotError("etcdctl member list did not print JSON") from None
    ok = {e["endpoint"] for e in parse_endpoint_health(health) if e["health"]}
    return [
        {"id": format(int(m.get("ID", 0)), "x"), "name": str(m.get("name") or ""),
         "hosts": sorted({_host(u) for u in (m.get("peerURLs") or []) + (m.get("clientURLs") or [])}),
         "healthy": any(u in ok for u in m.get("clientURLs") or [])}
        for m in members if isinstance(m, dict)
    ]  # fmt: skip


def quorum_problems(members: Sequence[dict], removing: Sequence[dict]) -> list[str]:
    """Why removing the etcd members of ``removing`` (``[{name, address}]``) is refused, judged from etcd's own
    member health (:func:`member_health`): ``member remove`` needs a majority of the members healthy now, and the
    members left need a majority of themselves healthy. Empty: allowed."""
    names = {str(r["name"]) for r in removing}
    addresses = {str(r["address"]) for r in removing}
    going = [m for m in members if m["name"] in names or set(m["hosts"]) & addresses]
    total, healthy = len(members), sum(1 for m in members if m["healthy"])
    sick = sorted(m["name"] or m["id"] for m in members if not m["healthy"])
    if total and healthy < total // 2 + 1:
        return [f"etcd has no quorum: {healthy} of {total} members are healthy (unhealthy: {', '.join(sick)})"]
    after, healthy_after = total - len(going), healthy - sum(1 for m in going if m["healthy"])
    if going and after and healthy_after < after // 2 + 1:
        return [f"removing {', '.join(m['name'] for m in going)} would leave {healthy_after} healthy of {after} etcd "
                f"members, less than a majority (unhealthy: {', '.join(s for s in sick if s not in names)})"]  # fmt: skip
    return []


#: kubeadm's etcd static pod manifest: present on a control plane with stacked etcd
MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"
#: etcdserverpb AlarmType (etcd ``api/etcdserverpb/rpc.proto``)
ALARMS = {0: "NONE", 1: "NOSPACE", 2: "CORRUPT"}


def parse_status(status_out: str, alarms_out: str) -> dict:
    """``etcdctl endpoint status -w json`` and ``alarm list -w json`` (etcd 3.6: ``dbSize``, ``dbSizeInUse``,
    ``dbSizeQuota`` in each endpoint's ``Status``; ``alarms: [{memberID, alarm}]``) -> doctor's etcd facts."""
    out: dict = {}
    try:
        status = (json.loads(status_out or "[]") or [{}])[0].get("Status") or {}
    except (ValueError, AttributeError, IndexError):
        status = {}
    for key, name in (("dbSize", "db_size"), ("dbSizeInUse", "db_size_in_use"), ("dbSizeQuota", "quota")):
        if isinstance(status.get(key), int):
            out[name] = status[key]
    if status.get("version"):
        out["version"] = str(status["version"])
    try:
        raw = json.loads(alarms_out or "{}").get("alarms") or []
    except (ValueError, AttributeError):
        raw = []
    out["alarms"] = sorted({ALARMS.get(a.get("alarm"), str(a.get("alarm"))) for a in raw if isinstance(a, dict)})
    return out


def collect_etcd(run: Run, exists: Callable[[str], bool], crictl: str = "crictl") -> dict | None:
    """doctor's facts on a control plane (None elsewhere): database size, in use, quota, alarms, and the newest
    snapshot in /var/lib/gpustack/etcd-snapshots; ``error`` when etcd could not be asked."""
    if not exists(MANIFEST):
        return None
    out: dict = {"newest_snapshot": newest(SNAPSHOT_DIR)}
    try:
        etcdctl = crictl_etcdctl(run, crictl)
    except SnapshotError as exc:
        out["error"] = str(exc)
        return out
    rc, status_out, err = run(etcdctl_argv(etcdctl, "endpoint", "status", "--write-out=json"))
    if rc != 0:
        out["error"] = f"etcdctl endpoint status failed ({rc}): {(err or status_out).strip()[-300:]}"
        return out
    _, alarms_out, _ = run(etcdctl_argv(etcdctl, "alarm", "list", "--write-out=json"))
    out.update(parse_status(status_out, alarms_out))
    return out


def _run(argv: Sequence[str]) -> tuple[int, str, str]:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return p.returncode, p.stdout, p.stderr


def main(argv: Sequence[str] | None = None) -> int:
    """The systemd timer's command: one snapshot through the etcd container's etcdctl."""
    ap = argparse.ArgumentParser(prog="gpustack-etcd-snapshot", description=main.__doc__)
    ap.add_argument("--node", default=socket.gethostname())
    ap.add_argument("--dir", default=SNAPSHOT_DIR)
    ap.add_argument("--keep", type=int, default=5)
    ap.add_argument("--copy-to", default="")
    ap.add_argument("--etcdctl", default="", help="an etcdctl on this host instead of the etcd container's")
    args = ap.parse_args(argv)
    try:
        etcdctl = [args.etcdctl] if args.etcdctl else crictl_etcdctl(_run)
        result = take_snapshot(_run, etcdctl, node=args.node, dest_dir=args.dir, keep=args.keep, copy_to=args.copy_to)
    except (SnapshotError, OSError) as exc:
        print(f"etcd snapshot failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
