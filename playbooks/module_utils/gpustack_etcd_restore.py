"""etcd restore on a kubeadm control plane, in phases recorded on the host (``gpustack etcd restore``; module
``gpustack_etcd_restore``). Standard library only (the target's python3, 3.8 or newer).

The procedure is kubeadm's and etcd's documented one (etcd-io/website ``op-guide/recovery.md``, "Restoring a
cluster"; kubernetes/website ``configure-upgrade-etcd.md``, "Restoring an etcd cluster"): stop every API server and
etcd member, restore every member's data directory from the same snapshot with its own name and peer URL, every
member in ``--initial-cluster`` and a new cluster token, start them, check. On each host the phases are:

- ``stop``: the snapshot copy checked (its whole sha256 as this machine computed it, and the hash etcd appends),
  the member read from kubeadm's manifest (``--name``, ``--initial-advertise-peer-urls``, ``--data-dir``, the
  image), ``etcd.yaml`` and ``kube-apiserver.yaml`` moved from ``/etc/kubernetes/manifests`` to
  :data:`PARKED` (the kubelet stops static pods whose manifest is gone), then wait until their containers are gone;
- ``restore``: the data directory moved aside (``/var/lib/etcd`` -> ``/var/lib/etcd.before-restore-<id>``, never
  deleted), ``etcdutl snapshot restore`` into ``<data dir>.restoring`` (a partial one from an interrupted run is
  gpustack's own and is removed), 0700, renamed into place;
- ``start``: the manifests moved back (the kubelet starts etcd and the API server);
- ``done``: the record closed, the snapshot's copy on the host removed.

Every phase is written to :data:`RECORD` (0600) before the next starts; a run interrupted anywhere is finished by
the next run with the same restore id (the phases already done are skipped); a record of another, unfinished
restore refuses the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import TYPE_CHECKING

from ansible.module_utils.gpustack_etcd import (  # type: ignore[import-not-found]
    SnapshotError,
    restore_argv,
    verify_snapshot,
)

if TYPE_CHECKING:  # annotations only: the target may run Python 3.8
    from collections.abc import Callable, Sequence

    Run = Callable[[Sequence[str]], tuple[int, str, str]]

MANIFESTS = "/etc/kubernetes/manifests"
RESTORE_DIR = "/var/lib/gpustack/etcd-restore"
PARKED = RESTORE_DIR + "/manifests"
RECORD = RESTORE_DIR + "/state.json"
#: the static pods stopped during a restore: etcd and the API server that writes into it
STATIC_PODS = ("etcd.yaml", "kube-apiserver.yaml")
CONTAINERS = ("etcd", "kube-apiserver")
PHASES = ("stopping", "stopped", "restored", "started", "done")
CRI_ENDPOINT = "unix:///run/containerd/containerd.sock"
#: the containerd namespace the kubelet's images live in (containerd's CRI plugin)
K8S_NAMESPACE = "k8s.io"
FLAG = re.compile(r"^\s*-\s+--(?P<name>[a-z0-9-]+)=(?P<value>.*?)\s*$")
IMAGE = re.compile(r"^\s*image:\s*(?P<image>\S+)\s*$")


class RestoreError(Exception):
    """The restore cannot go on on this host (the message says what is left as it was)."""


# -- kubeadm's etcd manifest -------------------------------------------------------------------------------------


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def manifest_member(text: str) -> dict:
    """This member as kubeadm's ``etcd.yaml`` runs it: name, peer URL, data directory, image and the
    ``--initial-cluster`` it was started with. kubeadm writes each flag as one ``- --name=value`` list item
    (``cmd/kubeadm/app/phases/etcd/local.go`` ``getEtcdCommand``)."""
    flags: dict = {}
    image = ""
    for line in text.splitlines():
        m = FLAG.match(line)
        if m:
            flags.setdefault(m.group("name"), _unquote(m.group("value")))
            continue
        i = IMAGE.match(line)
        if i and not image:
            image = _unquote(i.group("image"))
    member = {
        "name": flags.get("name", ""),
        "peer_url": flags.get("initial-advertise-peer-urls", "").split(",")[0],
        "data_dir": flags.get("data-dir", ""),
        "image": image,
        "initial_cluster": flags.get("initial-cluster", ""),
    }
    missing = [k for k in ("name", "peer_url", "data_dir") if not member[k]]
    if missing:
        raise RestoreError(f"kubeadm's etcd manifest names no {', '.join(missing)}")
    if not member["data_dir"].startswith("/") or member["data_dir"].rstrip("/") in ("", "/var", "/var/lib"):
        raise RestoreError(f"etcd's data directory {member['data_dir']!r} is not one a restore can move aside")
    return member


def initial_cluster(members: Sequence[dict]) -> str:
    """``name=peer_url,...`` of every member (sorted by name); one name with two URLs is refused."""
    urls: dict = {}
    for m in members:
        if urls.setdefault(m["name"], m["peer_url"]) != m["peer_url"]:
            raise RestoreError(f"two control planes call their etcd member {m['name']!r}")
    if len(set(urls.values())) != len(urls):
        raise RestoreError("two etcd members advertise the same peer URL")
    return ",".join(f"{n}={u}" for n, u in sorted(urls.items()))


def read_manifest(manifests: str = MANIFESTS, parked: str = PARKED) -> str:
    """``etcd.yaml`` from the kubelet's directory, or from where an interrupted restore parked it."""
    for d in (manifests, parked):
        path = os.path.join(d, "etcd.yaml")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                return f.read()
    raise RestoreError(f"no etcd.yaml in {manifests} or {parked}: not a kubeadm control plane with stacked etcd")


# -- the record ---------------------------------------------------------------------------------------------------


def private_dir(path: str) -> None:
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def read_record(path: str = RECORD) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise RestoreError(f"{path}: not JSON ({exc}); move it away only once etcd and the API server run") from None
    return data if isinstance(data, dict) else {}


def write_record(record: dict, path: str = RECORD) -> None:
    """``record`` to ``path`` 0600 (a temporary file, fsync, rename)."""
    private_dir(os.path.dirname(path))
    tmp = path + ".part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(record, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def reached(record: dict, phase: str) -> bool:
    return record.get("phase") in PHASES and PHASES.index(record["phase"]) >= PHASES.index(phase)


def own_record(path: str, restore_id: str) -> dict:
    """This restore's record (empty when none); another restore's unfinished record refuses the run."""
    record = read_record(path)
    if record and record.get("id") != restore_id and record.get("phase") != "done":
        raise RestoreError(
            f"another etcd restore ({record.get('id')}, snapshot {record.get('snapshot')}) is unfinished on this "
            f"host at phase {record.get('phase')} ({path}); finish it with the same snapshot"
        )
    return record if record.get("id") == restore_id else {}


# -- the phases ---------------------------------------------------------------------------------------------------


def check_snapshot(path: str, sha256: str) -> dict:
    """The copy on this host is the snapshot this machine chose: its whole sha256 and etcd's appended hash."""
    try:
        facts = verify_snapshot(path)
    except (SnapshotError, OSError) as exc:
        raise RestoreError(f"the snapshot on this host does not verify: {exc}") from None
    if facts["sha256"] != sha256:
        raise RestoreError(f"{path}: sha256 {facts['sha256']} is not the snapshot's {sha256}")
    return facts


def running_containers(run: Run, crictl: str = "crictl", endpoint: str = CRI_ENDPOINT,
                       names: Sequence[str] = CONTAINERS) -> list[str]:  # fmt: skip
    """The IDs of the running containers of ``names`` (the kubelet labels each with its name in the pod)."""
    ids: list[str] = []
    for name in names:
        rc, out, err = run([crictl, "--runtime-endpoint", endpoint, "ps", "--quiet", "--state", "Running",
                            "--label", f"io.kubernetes.container.name={name}"])  # fmt: skip
        if rc != 0:
            raise RestoreError(f"{crictl} ps failed ({rc}): {(err or out).strip()[-300:]}")
        ids += out.split()
    return ids


def park(manifests: str = MANIFESTS, parked: str = PARKED) -> list[str]:
    """Move etcd's and the API server's manifests out of the kubelet's directory (idempotent)."""
    private_dir(parked)
    moved = []
    for name in STATIC_PODS:
        src, dest = os.path.join(manifests, name), os.path.join(parked, name)
        if os.path.exists(src):
            if os.path.exists(dest):
                raise RestoreError(f"{name} is both in {manifests} and in {parked}: compare them, keep one")
            shutil.move(src, dest)
            moved.append(name)
    return moved


def unpark(manifests: str = MANIFESTS, parked: str = PARKED) -> list[str]:
    """The parked manifests moved back (idempotent)."""
    moved = []
    for name in STATIC_PODS:
        src, dest = os.path.join(parked, name), os.path.join(manifests, name)
        if os.path.exists(src) and not os.path.exists(dest):
            shutil.move(src, dest)
            moved.append(name)
    return moved


def wait_gone(run: Run, timeout: float, crictl: str = "crictl", endpoint: str = CRI_ENDPOINT,
              sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
    """Until no etcd or kube-apiserver container runs (the kubelet stops them once their manifests are gone)."""
    end = clock() + timeout
    while True:
        left = running_containers(run, crictl, endpoint)
        if not left:
            return
        if clock() >= end:
            raise RestoreError(
                f"etcd/kube-apiserver containers still run {int(timeout)} s after their manifests were moved to "
                f"{PARKED}: {' '.join(left)} (is the kubelet running?)"
            )
        sleep(2)


def aside_path(data_dir: str, restore_id: str) -> str:
    return f"{data_dir.rstrip('/')}.before-restore-{restore_id}"


def ctr_etcdutl(image: str, container: str, mounts: Sequence[str], ctr: str = "ctr",
                namespace: str = K8S_NAMESPACE) -> list[str]:  # fmt: skip
    """``ctr run --rm`` of ``image`` (kubeadm's etcd image, already pulled by the kubelet) with ``mounts`` bound at
    the same paths read-write: its ``etcdutl``, the cluster's own etcd version, nothing downloaded."""
    argv = [ctr, "-n", namespace, "run", "--rm"]
    for d in sorted(set(mounts)):
        argv += ["--mount", f"type=bind,src={d},dst={d},options=rbind:rw"]
    return [*argv, image, container, "etcdutl"]


def etcdutl_version(out: str) -> str:
    """``etcdutl version``'s release ("etcdutl version: 3.6.8" then "API version: 3.6": etcd v3.6.8
    ``etcdutl/etcdutl/version_command.go``); empty when the output has no such line."""
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "etcdutl version":
            return value.strip()
    return ""


def restore_data(run: Run, etcdutl: Sequence[str], *, snapshot: str, member: dict, cluster: str, token: str,
                 restore_id: str, record: dict, record_path: str = RECORD) -> dict:  # fmt: skip
    """The data directory moved aside (kept) and restored from ``snapshot``; the record at ``restored``."""
    data_dir = member["data_dir"].rstrip("/")
    aside = record.get("aside") or aside_path(data_dir, restore_id)
    staging = data_dir + ".restoring"
    if os.path.exists(data_dir) and not os.path.exists(aside):
        if os.path.ismount(data_dir):
            raise RestoreError(f"{data_dir} is a mount point: it cannot be moved aside (nothing changed here)")
        write_record({**record, "aside": aside}, record_path)
        os.rename(data_dir, aside)
    record = {**record, "aside": aside}
    if not os.path.exists(data_dir):  # else: restored and renamed into place before an interruption
        if os.path.exists(staging):  # gpustack's own partial restore from an interrupted run
            shutil.rmtree(staging)
        argv = restore_argv(etcdutl, snapshot, name=member["name"], data_dir=staging, peer_url=member["peer_url"],
                            initial_cluster=cluster, token=token)  # fmt: skip
        rc, out, err = run(argv)
        if rc != 0 or not os.path.isdir(staging):
            raise RestoreError(f"etcdutl snapshot restore failed ({rc}): {(err or out).strip()[-500:]}")
        os.chmod(staging, 0o700)
        os.rename(staging, data_dir)
    os.chmod(data_dir, 0o700)
    record = {**record, "phase": "restored"}
    write_record(record, record_path)
    return record


def finish(record: dict, record_path: str = RECORD) -> dict:
    """The record closed; the snapshot's copy on this host removed (this machine keeps the original)."""
    snap = record.get("snapshot") or ""
    if snap.startswith(RESTORE_DIR + "/") and os.path.exists(snap):
        os.unlink(snap)
    record = {**record, "phase": "done"}
    write_record(record, record_path)
    return record
