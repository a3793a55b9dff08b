#!/usr/bin/python
"""gpustack_etcd_restore: one phase of an etcd restore on a control plane (see module_utils/gpustack_etcd_restore.py)."""

from __future__ import annotations

from ansible.module_utils.gpustack_etcd_restore import (
    MANIFESTS,
    PARKED,
    RECORD,
    RESTORE_DIR,
    RestoreError,
    check_snapshot,
    ctr_etcdutl,
    etcdutl_version,
    finish,
    initial_cluster,
    manifest_member,
    own_record,
    park,
    reached,
    read_manifest,
    restore_data,
    unpark,
    wait_gone,
    write_record,
)

DOCUMENTATION = r"""
---
module: gpustack_etcd_restore
short_description: One phase of an etcd restore on a kubeadm control plane
description:
  - C(stop) checks the snapshot copy (its sha256 and the hash etcd appends), reads the member from kubeadm's
    etcd manifest, finds an etcdutl, moves etcd.yaml and kube-apiserver.yaml out of the kubelet's manifest
    directory and waits until their containers are gone. Nothing changes when a check fails.
  - C(restore) moves etcd's data directory aside (never deleted) and restores the snapshot into it with
    C(etcdutl snapshot restore) (this member's name and peer URL, every member, the new cluster token), 0700.
  - C(start) moves the manifests back; C(done) closes the record and removes the snapshot's copy on the host.
  - Each phase is recorded in C(record) (0600); a phase already done by this restore is skipped (changed=false).
  - C(probe) changes nothing; it says which etcdutl the restore would run (C(found), C(etcdutl), C(version)), so
    the role downloads etcd's release archive only for a host that has none.
options:
  phase:
    description: The phase to run.
    type: str
    required: true
    choices: [probe, stop, restore, start, done]
  restore_id:
    description: The restore's id (this machine's record); part of the moved-aside data directory's name.
    type: str
    required: true
  snapshot:
    description: The snapshot's copy on this host.
    type: str
    default: ""
  sha256:
    description: The snapshot's sha256 as this machine computed it.
    type: str
    default: ""
  token:
    description: The restored cluster's new C(--initial-cluster-token).
    type: str
    default: ""
  members:
    description: Every member (C({name, peer_url}), from each control plane's C(stop)) for C(--initial-cluster).
    type: list
    elements: dict
    default: []
  etcdutl:
    description: >-
      An etcdutl on the host; empty to take one from the PATH, else the etcd image's through
      C(ctr -n k8s.io run --rm).
    type: str
    default: ""
  cri_endpoint:
    description: The CRI socket crictl asks.
    type: str
    default: unix:///run/containerd/containerd.sock
  wait:
    description: Seconds to wait until the containers are gone (C(stop)).
    type: int
    default: 300
author: gpustack
"""

EXAMPLES = r"""
- name: Stop etcd and the API server
  gpustack_etcd_restore:
    phase: stop
    restore_id: 20261129T080000Z
    snapshot: /var/lib/gpustack/etcd-restore/etcd-cp1-20261129T044512Z.db
    sha256: "{{ gpustack_etcd_restore_sha256 }}"
    token: gpustack-restore-20261129T080000Z
"""

RETURN = r"""
member:
  description: This member (name, peer_url, data_dir, image, initial_cluster) as kubeadm's manifest runs it.
  type: dict
  returned: success
record:
  description: The host's record of the restore after this phase (id, phase, snapshot, sha256, aside, ...).
  type: dict
  returned: success
found:
  description: Whether an etcdutl was found (C(probe)).
  type: bool
  returned: probe
etcdutl:
  description: The argv that runs it (a path, or C(ctr ... run) of the etcd image); empty when none (C(probe)).
  type: list
  returned: probe
version:
  description: Its C(etcdutl version) release, e.g. 3.6.8 (C(probe)).
  type: str
  returned: probe
"""


def main() -> None:
    import datetime
    import os
    import subprocess
    import time

    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "phase": {"type": "str", "required": True, "choices": ["probe", "stop", "restore", "start", "done"]},
            "restore_id": {"type": "str", "required": True},
            "snapshot": {"type": "str", "default": ""},
            "sha256": {"type": "str", "default": ""},
            "token": {"type": "str", "default": ""},
            "members": {"type": "list", "elements": "dict", "default": []},
            "etcdutl": {"type": "str", "default": ""},
            "cri_endpoint": {"type": "str", "default": "unix:///run/containerd/containerd.sock"},
            "wait": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    p = module.params
    phase, rid = p["phase"], p["restore_id"]

    def run(argv):  # type: ignore[no-untyped-def]
        return module.run_command(list(argv))

    def etcdutl(member: dict) -> list:
        if p["etcdutl"]:
            return [p["etcdutl"]]
        local = module.get_bin_path("etcdutl")
        if local:
            return [local]
        ctr = module.get_bin_path("ctr") or "ctr"
        mounts = [os.path.dirname(member["data_dir"].rstrip("/")), RESTORE_DIR]
        argv = ctr_etcdutl(member["image"], f"gpustack-etcdutl-{rid}-{int(time.time())}", mounts, ctr=ctr)
        rc, out, err = run([*argv, "version"])
        if rc != 0:
            raise RestoreError(
                f"no etcdutl on this host, and the etcd image {member['image']} did not run one ({rc}: "
                f"{(err or out).strip()[-300:]}); install etcdutl of etcd's version on the control planes "
                "(etcd's release archive) and run the restore again"
            )
        return argv

    try:
        if phase == "probe":  # which etcdutl a restore would run, and that it runs; nothing changes
            member = manifest_member(read_manifest(MANIFESTS, PARKED))
            if p["etcdutl"] and not os.access(p["etcdutl"], os.X_OK):
                raise RestoreError(f"etcdutl {p['etcdutl']}: not an executable file")
            try:
                argv = etcdutl(member)
            except RestoreError as exc:
                module.exit_json(changed=False, found=False, etcdutl=[], version="", reason=str(exc))
            rc, out, err = run([*argv, "version"])
            if rc != 0:
                raise RestoreError(f"{' '.join(argv)} version failed ({rc}): {(err or out).strip()[-300:]}")
            module.exit_json(changed=False, found=True, etcdutl=argv, version=etcdutl_version(out))
        record = own_record(RECORD, rid)  # the paths are this module's globals (tests point them elsewhere)
        if phase == "stop":
            if reached(record, "stopped"):
                module.exit_json(changed=False, member=record["member"], record=record)
            if not (module.check_mode and not os.path.exists(p["snapshot"])):  # check mode copied nothing
                check_snapshot(p["snapshot"], p["sha256"])
            member = manifest_member(read_manifest(MANIFESTS, PARKED))
            etcdutl(member)  # found before anything changes
            if module.check_mode:
                module.exit_json(changed=False, member=member, record=record)
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            record = {"id": rid, "phase": "stopping", "snapshot": p["snapshot"], "sha256": p["sha256"],
                      "token": p["token"], "member": member, "started": now}  # fmt: skip
            write_record(record, RECORD)
            park(MANIFESTS, PARKED)
            wait_gone(run, p["wait"], module.get_bin_path("crictl") or "crictl", p["cri_endpoint"])
            record = {**record, "phase": "stopped"}
            write_record(record, RECORD)
            module.exit_json(changed=True, member=member, record=record)
        if module.check_mode:  # a dry run recorded nothing on the host: say whether the phase would run
            target = {"restore": "restored", "start": "started", "done": "done"}[phase]
            module.exit_json(changed=not reached(record, target), member=record.get("member", {}), record=record)
        if not reached(record, "stopped"):
            raise RestoreError(f"phase {phase} before stop: this host's record is {record or 'missing'}")
        member = record["member"]
        if phase == "restore":
            if reached(record, "restored") or module.check_mode:
                module.exit_json(changed=False, member=member, record=record)
            check_snapshot(record["snapshot"], record["sha256"])
            cluster = initial_cluster(p["members"] or [member])
            if f"{member['name']}={member['peer_url']}" not in cluster.split(","):
                raise RestoreError(f"this member ({member['name']}) is not in the initial cluster {cluster}")
            record = restore_data(run, etcdutl(member), snapshot=record["snapshot"], member=member, cluster=cluster,
                                  token=record["token"], restore_id=rid, record={**record, "cluster": cluster},
                                  record_path=RECORD)  # fmt: skip
            module.exit_json(changed=True, member=member, record=record)
        if not reached(record, "restored"):
            raise RestoreError(f"phase {phase} before restore: this host's record is at {record.get('phase')}")
        if phase == "start":
            moved = [] if module.check_mode else unpark(MANIFESTS, PARKED)
            if not reached(record, "started") and not module.check_mode:
                record = {**record, "phase": "started"}
                write_record(record, RECORD)
            module.exit_json(changed=bool(moved), member=member, record=record, moved=moved)
        # done again (a resumed run copied the snapshot here once more): only that copy goes
        copy_left = os.path.exists(record.get("snapshot") or "")
        if reached(record, "done") and not copy_left:
            module.exit_json(changed=False, member=member, record=record)
        module.exit_json(changed=True, member=member, record=finish(record, RECORD))
    except (RestoreError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"etcd restore ({phase}) on this host: {exc}")


if __name__ == "__main__":
    main()
