"""`gpustack node add` and `gpustack node remove` on real hosts.

A one-node cluster (nd1) gets a worker (nd2) with `node add`: a fresh join token, the new node
Ready, and the old host changed only where the node list matters to it -- gpustack's firewall chain
now accepts nd2 -- with every other file and both services (containerd, kubelet) untouched; the
`up` after it changes nothing anywhere. Then `node patch nd2` against the bed's archive of updates
(tests/testbed/patch_archive.py: gpustack-patch-demo and the kernel meta package linux-image-gpustack-test, 1.0
installed, 2.0 offered; the kernel package's postinst writes /var/run/reboot-required): while a PodDisruptionBudget
allows no eviction it is refused before anything changes (nd2 not cordoned, no package moved, no reboot); relaxed,
nd2 is cordoned and drained through the Eviction API, upgraded, rebooted for real by ansible.builtin.reboot (its
systemd-nspawn exits 133 and tests/testbed/reboot.py starts it again: a new boot id, sshd back), waited for until the
Node reports the new boot id with its 8 GPUs and the GPU Operator's pods back -- this machine plays nd2's kubelet and
GPU stack on the fake API server (tests/testbed/node_kubelet.py) -- and uncordoned; a second run changes nothing.
Then `node remove nd2`: while a PodDisruptionBudget allows
no eviction, the removal is reported before anything is cordoned and nothing changes; once it
allows one, nd2 is drained, reset (containerd's drop-in directory gpustack made goes too), nd1's
firewall no longer accepts it, and its Node object is deleted. Then `up` with nd2 still in the
config joins it again (a fresh token), changing on nd1 only the firewall's peer rules. Last, nd2
removed `--offline`: nd2 not contacted, nd1's firewall forgets it all the same.

kubeadm/kubelet/kubectl are the test bed's doubles and a directory bind-mounted into both hosts
plays the API server for them (the join registers nd2 there; the ready stage reads it with
kubectl on nd1). The drain goes from this machine through the Kubernetes API, so for the removal
this machine's admin kubeconfig points at the fake API server (tests/fakes/kube_api.py), which
holds the cluster's Node and Pod objects and answers evictions with PodDisruptionBudget
semantics. ~5 min (the node patch part: about 70 s of it, its reboot about 3 s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.fakes.kube_api import FakeKubeAPI
from tests.unit.nodes_cluster import node, pdb, pod

from .cluster import doubles_log, run_gpustack, up, write_config
from .hosts import Host
from .node_kubelet import HostKubelet
from .patch_archive import DEMO, KERNEL_META, NEW, OLD, publish, versions
from .pytest_plugin import TestbedFactory
from .services import Sources

NAMES = ["nd1", "nd2"]
SHARED = "/var/lib/gpustack-doubles-cluster"
#: what gpustack may change on a host, and the doubles' own records (the API server's part)
WATCHED = "/etc /usr/local /var/lib/gpustack /var/lib/kubelet /opt"


def files(host: Host) -> dict[str, str]:
    out = host.sudo(f"find {WATCHED} -xdev -type f -print0 2>/dev/null | xargs -0 sha256sum", check=False).stdout
    return {line.split(None, 1)[1].strip(): line.split(None, 1)[0] for line in out.splitlines() if line.strip()}


def services(host: Host) -> dict[str, str]:
    return {
        unit: host.run(f"systemctl show -p MainPID -p ActiveEnterTimestampMonotonic {unit}", check=True).stdout
        for unit in ("containerd", "kubelet")
    }


def changed_by_host(run_dir: Path) -> dict[str, dict[str, int]]:
    """stage -> host -> tasks that changed something there."""
    return {r["stage"]: r.get("changed_by_host") or {} for r in json.loads((run_dir / "summary.json").read_text())}


def test_node_add_changes_only_the_new_host_and_node_remove_checks_budgets_first(
    testbed_factory: TestbedFactory, tmp_path: Path, sources: Sources
) -> None:
    shared = tmp_path / "cluster"
    shared.mkdir()
    bed = testbed_factory(NAMES, nspawn_args={n: [f"--bind={shared}:{SHARED}"] for n in NAMES})
    nd1, nd2 = bed.host("nd1"), bed.host("nd2")
    both = write_config(bed, tmp_path / "gpustack.yaml", sources)
    full: dict[str, Any] = yaml.safe_load(both.read_text())
    alone = tmp_path / "gpustack-one.yaml"
    alone.write_text(yaml.safe_dump({**full, "nodes": full["nodes"][:1]}))
    state = tmp_path / "state"
    built = up(alone, state)
    assert built.rc == 0, built.output

    before_files, before_services = files(nd1), services(nd1)
    tokens_before = json.loads(nd1.sudo("cat /var/lib/gpustack-doubles/tokens.json", check=False).stdout or "[]")

    # node add: a node not in the config is a usage error; a dry run changes nothing
    assert run_gpustack(both, state, "node", "add", "nd9", "--yes").rc == 2
    # --no-approve: the bed has no API server to approve the new kubelet's certificate requests through
    added = run_gpustack(both, state, "node", "add", "nd2", "--yes", "--no-verify", "--no-approve")
    assert added.rc == 0, added.output
    run = added.last_run_dir()
    assert json.loads((run / "run.json").read_text())["result"] == "ok"
    per_stage = changed_by_host(run)
    # the old host: nothing changed but the firewall's peer rules
    assert {s: c["nd1"] for s, c in per_stage.items() if c.get("nd1")}.keys() <= {"firewall"}, per_stage
    assert per_stage["firewall"].get("nd1"), "nd1's chain must accept nd2"
    assert per_stage["workers"].get("nd2") and per_stage["os"].get("nd2")
    after_files = files(nd1)
    diff = {p for p in before_files.keys() | after_files.keys() if before_files.get(p) != after_files.get(p)}
    assert diff == {"/usr/local/sbin/gpustack-firewall", "/var/lib/gpustack/stages/firewall.json"}, sorted(diff)
    assert services(nd1) == before_services, "containerd and the kubelet on nd1 were not restarted"
    chain = nd1.sudo("iptables -w -S GPUSTACK-INPUT", check=True).stdout
    assert f"-s {nd2.address}/32 -p tcp -m tcp --dport 6443" in chain
    # kubeadm on nd1: one fresh token for this run, nothing else
    calls = doubles_log(nd1.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
    tokens = json.loads(nd1.sudo("cat /var/lib/gpustack-doubles/tokens.json", check=True).stdout)
    assert len(tokens) == len(tokens_before) + 1
    join = json.loads(nd2.sudo("cat /var/lib/gpustack-doubles/join.json", check=True).stdout)
    assert join["token_id"] == tokens[-1]["token_id"] and join["node_name"] == "nd2"
    assert [c[:2] for c in calls if c[:1] != ["version"]][-1] == ["token", "create"]
    # the new node registered and Ready; its marker says who made it
    assert json.loads((shared / "nodes" / "nd2.json").read_text())["ready"] is True
    marker = json.loads(nd2.sudo("cat /etc/gpustack/installed.json", check=True).stdout)
    assert marker["role"] == "worker" and marker["control_plane"] == "nd1"

    # `up` with both nodes afterwards changes nothing on either host
    again = up(both, state)
    assert again.rc == 0, again.output
    assert all(v == 0 for v in again.changed().values()), again.changed()

    patch_nd2(both, state, nd2, sources, tmp_path / "patch")

    # node remove, drained through the API: this machine's kubeconfig points at the fake API server
    with FakeKubeAPI.running() as api:
        api.write_kubeconfig(state / "clusters" / "gpustack" / "admin.conf")
        api.seed(
            [
                node("nd1", cp=True),
                node("nd2"),
                pod("web-a", "nd2", labels={"app": "web"}),
                pod("web-b", "nd1", labels={"app": "web"}),
                pod("flannel-x", "nd2", ns="kube-flannel", owner=("DaemonSet", "kube-flannel-ds")),
                pdb("web", "web", allowed=0),
            ]
        )
        blocked = run_gpustack(both, state, "node", "remove", "nd2", "--yes")
        assert blocked.rc == 1, blocked.output
        assert "default/web-a" in blocked.stdout and "disruption budget web" in blocked.stdout
        assert "no node cordoned" in blocked.stderr
        assert not [r for r in api.mutating_requests() if not r[1].endswith("/eviction")], "only dry-run evictions"
        assert not (api.get("v1", "Node", "nd2") or {}).get("spec", {}).get("unschedulable")
        assert nd2.sudo("test -e /etc/kubernetes/kubelet.conf", check=False).returncode == 0, "nd2 untouched"

        api.seed([pdb("web", "web", allowed=1)])
        assert nd2.sudo("test -f /etc/gpustack/containerd-drop-in-dir.created", check=False).returncode == 0, (
            "up created containerd's drop-in directory on nd2 and recorded it"
        )
        removed = run_gpustack(both, state, "node", "remove", "nd2", "--yes")
        assert removed.rc == 0, removed.output
        assert api.get("v1", "Node", "nd2") is None and api.get("v1", "Pod", "web-a", "default") is None
        assert api.get("v1", "Node", "nd1") is not None and api.get("v1", "Pod", "web-b", "default") is not None
    reset = doubles_log(nd2.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
    assert ["reset", "--force", "--cri-socket", "unix:///run/containerd/containerd.sock"] in reset
    for path in ("/etc/kubernetes", "/etc/gpustack", "/var/lib/kubelet"):
        assert nd2.sudo(f"test -e {path}", check=False).returncode == 1, path
    assert "GPUSTACK-INPUT" not in nd2.sudo("iptables -w -S", check=True).stdout
    assert nd2.sudo("test -e /etc/containerd/conf.d", check=False).returncode == 1, "gpustack's empty drop-in dir"
    rows = {r["stage"]: r for r in json.loads((removed.last_run_dir() / "summary.json").read_text())}
    assert list(rows) == ["check", "drain", "reset", "firewall", "delete"]
    assert set(rows["reset"]["hosts"]) == {"nd2"}, "only the removed host is reset"
    assert set(rows["firewall"]["hosts"]) == {"nd1"} and rows["firewall"]["changed_by_host"].get("nd1")
    # nd1 accepts nd2's address no more, in the same run
    chain = nd1.sudo("iptables -w -S GPUSTACK-INPUT", check=True).stdout
    assert f"-s {nd2.address}/32" not in chain and f"-s {nd1.address}/32 -p tcp -m tcp --dport 6443" in chain, chain
    assert "delete them from gpustack.yaml" in removed.stdout

    # `up` with nd2 still in the config joins it again as `node add` did: its own fresh token, nd2
    # Ready, and on nd1 only the firewall's peer rules (accepting nd2 again) changed
    before_services = services(nd1)
    before_files = files(nd1)
    tokens_before = json.loads(nd1.sudo("cat /var/lib/gpustack-doubles/tokens.json", check=True).stdout)
    rejoined = up(both, state)
    assert rejoined.rc == 0, rejoined.output
    per_stage = changed_by_host(rejoined.last_run_dir())
    assert {s for s, c in per_stage.items() if c.get("nd1")} == {"firewall"}, per_stage
    assert per_stage["workers"].get("nd2") and per_stage["kubernetes"].get("nd2"), per_stage
    after_files = files(nd1)
    diff = {p for p in before_files.keys() | after_files.keys() if before_files.get(p) != after_files.get(p)}
    assert diff == {"/usr/local/sbin/gpustack-firewall", "/var/lib/gpustack/stages/firewall.json"}, sorted(diff)
    assert f"-s {nd2.address}/32 -p tcp -m tcp --dport 6443" in nd1.sudo("iptables -w -S GPUSTACK-INPUT").stdout
    assert services(nd1) == before_services
    tokens = json.loads(nd1.sudo("cat /var/lib/gpustack-doubles/tokens.json", check=True).stdout)
    join = json.loads(nd2.sudo("cat /var/lib/gpustack-doubles/join.json", check=True).stdout)
    assert len(tokens) == len(tokens_before) + 1 and join["token_id"] == tokens[-1]["token_id"]
    assert json.loads((shared / "nodes" / "nd2.json").read_text())["ready"] is True
    assert json.loads(nd2.sudo("cat /etc/gpustack/installed.json", check=True).stdout)["role"] == "worker"

    # nd2 removed as a dead host (--offline): not contacted, yet nd1's firewall forgets it in the same run
    reset_call = ["reset", "--force", "--cri-socket", "unix:///run/containerd/containerd.sock"]
    resets_before = doubles_log(nd2.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout).count(
        reset_call
    )
    with FakeKubeAPI.running() as api:
        api.write_kubeconfig(state / "clusters" / "gpustack" / "admin.conf")
        api.seed([node("nd1", cp=True), node("nd2")])
        offline = run_gpustack(both, state, "node", "remove", "nd2", "--offline", "--yes")
        assert offline.rc == 0, offline.output
        assert api.get("v1", "Node", "nd2") is None
    rows = {r["stage"]: r for r in json.loads((offline.last_run_dir() / "summary.json").read_text())}
    assert list(rows) == ["check", "drain", "firewall", "delete"] and set(rows["firewall"]["hosts"]) == {"nd1"}
    assert f"-s {nd2.address}/32" not in nd1.sudo("iptables -w -S GPUSTACK-INPUT", check=True).stdout
    calls = doubles_log(nd2.sudo("cat /var/log/gpustack-doubles/kubeadm.log", check=True).stdout)
    assert calls.count(reset_call) == resets_before
    assert nd2.sudo("test -e /etc/kubernetes/kubelet.conf", check=False).returncode == 0, "nd2 not contacted"


BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def patch_nd2(config: Path, state: Path, nd2: Host, sources: Sources, scratch: Path) -> None:
    """`gpustack node patch nd2` against the bed's archive of updates (tests/testbed/patch_archive.py), the drain
    through the fake API server, this machine playing nd2's kubelet and GPU stack on it (tests/testbed/node_kubelet.py):
    a blocking budget stops it before anything changes; relaxed, nd2 is drained, upgraded, rebooted for real (its
    systemd-nspawn started again by tests/testbed/reboot.py), waited for with its new boot id and GPUs, uncordoned;
    a second run changes nothing."""
    updates = publish(sources.http, scratch)
    updates.install_old(nd2)
    assert versions(nd2) == {DEMO: OLD, KERNEL_META: OLD}
    with FakeKubeAPI.running() as api:
        api.write_kubeconfig(state / "clusters" / "gpustack" / "admin.conf")
        kubelet = HostKubelet(api, nd2)
        api.seed(
            [
                node("nd1", cp=True),
                *kubelet.objects(),
                pod("web-a", "nd2", labels={"app": "web"}),
                pod("web-b", "nd1", labels={"app": "web"}),
                pdb("web", "web", allowed=0),
            ]
        )
        boot0 = kubelet.boots[0]
        with kubelet:
            # a budget that allows no eviction: refused before anything changes (nd2 not cordoned, no package moved)
            blocked = run_gpustack(config, state, "node", "patch", "nd2", "--yes")
            assert blocked.rc == 1, blocked.output
            assert "default/web-a" in blocked.output and "no node cordoned" in blocked.output, blocked.output
            assert not [r for r in api.mutating_requests() if not r[1].endswith("/eviction")], "only dry-run evictions"
            assert not (api.get("v1", "Node", "nd2") or {}).get("spec", {}).get("unschedulable")
            assert versions(nd2) == {DEMO: OLD, KERNEL_META: OLD}
            assert nd2.run(BOOT_ID, check=True).stdout.strip() == boot0

            # relaxed: drained, upgraded, rebooted (the kernel package's postinst asked), back with its GPUs, uncordoned
            api.seed([pdb("web", "web", allowed=1)])
            patched = run_gpustack(config, state, "node", "patch", "nd2", "--yes", "--ready-timeout", "300")
            assert patched.rc == 0, patched.output
            assert versions(nd2) == {DEMO: NEW, KERNEL_META: NEW}
            boot1 = nd2.run(BOOT_ID, check=True).stdout.strip()
            assert boot1 != boot0, "nd2 rebooted: a new boot id"
            assert kubelet.saw_down and kubelet.boots == [boot0, boot1], kubelet.boots
            assert "the guest rebooted (systemd-nspawn exit 133)" in nd2.console_log.read_text(errors="replace")
            assert nd2.sudo("test -e /var/run/reboot-required", check=False).returncode == 1, "gone with the boot"
            rows = {r["stage"]: r for r in json.loads((patched.last_run_dir() / "summary.json").read_text())}
            assert {"drain", "packages", "gpu", "uncordon"} <= rows.keys() and "inspect" not in rows, list(rows)
            assert rows["packages"]["changed_by_host"].get("nd2") and rows["uncordon"]["changed"] == 1, rows
            after = api.get("v1", "Node", "nd2") or {}
            assert not after.get("spec", {}).get("unschedulable"), "uncordoned"
            assert after["status"]["nodeInfo"]["bootID"] == boot1
            assert api.get("v1", "Pod", "web-a", "default") is None, "evicted"
            assert api.get("v1", "Pod", "web-b", "default") is not None
            assert "patched nd2" in patched.stdout
            record = json.loads((state / "clusters" / "gpustack" / "node-patch.json").read_text())["nodes"]["nd2"]
            assert record["status"] == "done" and record["baseline"] == {
                "gpus": 8,
                "operands": ["dcgm-exporter", "device-plugin", "driver", "validator"],
                "boot_id": boot0,
            }, record  # what had to come back: the double's GPUs and GPU Operator pods, the boot before the patch

            # a second run: nothing to upgrade, no reboot due: nothing cordoned, nothing changed
            api.reset_requests()
            again = run_gpustack(config, state, "node", "patch", "nd2", "--yes")
            assert again.rc == 0, again.output
            assert "up to date, left alone: nd2" in again.stdout, again.stdout
            assert not api.mutating_requests(), api.mutating_requests()
            assert nd2.run(BOOT_ID, check=True).stdout.strip() == boot1
        assert not kubelet.errors, kubelet.errors
