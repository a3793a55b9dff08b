"""`gpustack upgrade --to 1.36` on three real hosts built at 1.35: refused by `up`, then control
plane first and the workers one at a time; interrupted by Ctrl-C right after `kubeadm upgrade
apply` finished (before its step was recorded: the resumed run must not apply again), then failed
(kubeadm upgrade node fails once on the last worker), and resumed by running the same command again.
A worker left as a run interrupted between its marker and its records leaves it gets its records.

kubeadm/kubelet/kubectl are the test bed's doubles. A directory bind-mounted into every host plays
the API server (tests/testbed/doubles: the cluster version, each node's kubelet version and
schedulability, one event log across hosts), and the doubles refuse what the real tools refuse:
`upgrade node` before `upgrade apply`, a skipped minor, a kubelet newer than the API server.
Two apt repositories (v1.35, v1.36) signed by one key, as pkgs.k8s.io's are. ~4 min."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gpustack.config import pins

from .cluster import run_gpustack, up, write_config
from .hosts import Host, Testbed
from .pytest_plugin import TestbedFactory
from .services import HttpServer, Sources, build_k8s_repo

NAMES = ["ug1", "ug2", "ug3"]  # ug1: control plane
SHARED = "/var/lib/gpustack-doubles-cluster"
OLD, NEW = pins.KUBERNETES["1.35"], pins.KUBERNETES["1.36"]  # the pinned patches of the two minors


def events(shared: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (shared / "events.log").read_text().splitlines() if line.strip()]


def index(evs: list[dict[str, Any]], host: str, tool: str, *words: str, last: bool = False) -> int:
    """Position of the first (or last) call on ``host`` of ``tool`` whose argv contains ``words`` in order."""

    def match(e: dict[str, Any]) -> bool:
        argv = e["argv"]
        return (
            e["host"] == host
            and e["tool"] == tool
            and any(argv[i : i + len(words)] == list(words) for i in range(len(argv)))
        )

    found = [i for i, e in enumerate(evs) if match(e)]
    assert found, f"no {tool} {' '.join(words)} on {host}"
    return found[-1] if last else found[0]


def count(evs: list[dict[str, Any]], host: str, tool: str, *words: str) -> int:
    return sum(
        1
        for e in evs
        if e["host"] == host
        and e["tool"] == tool
        and any(e["argv"][i : i + len(words)] == list(words) for i in range(len(e["argv"])))
    )


def test_upgrade_1_35_to_1_36_on_three_hosts_interrupted_and_resumed(
    testbed_factory: TestbedFactory,
    tmp_path: Path,
    sources: Sources,
    http_server: HttpServer,
    testbed_doubles: Path,
) -> None:
    gnupg = Path(tempfile.mkdtemp(prefix="gs-ug-")) / "gnupg"  # short: gpg's socket path limit
    try:
        base = http_server.root / "upgrade"
        repo = build_k8s_repo(testbed_doubles, OLD, base, "1.35", gnupg_home=gnupg)
        assert build_k8s_repo(testbed_doubles, NEW, base, "1.36", gnupg_home=gnupg).fingerprint == repo.fingerprint
    finally:
        shutil.rmtree(gnupg.parent)
    shared = tmp_path / "cluster"
    (shared / "fail-once").mkdir(parents=True)
    bed: Testbed = testbed_factory(NAMES, nspawn_args={n: [f"--bind={shared}:{SHARED}"] for n in NAMES})
    repos = {
        "kubernetes_apt_url": f"{http_server.url}/upgrade/k8s/v{{minor}}/deb/",
        "kubernetes_apt_key_url": f"{http_server.url}/upgrade/k8s/v{{minor}}/deb/Release.key",
        "kubernetes_apt_key_fingerprint": repo.fingerprint,
    }
    cfg = write_config(
        bed, tmp_path / "gpustack.yaml", sources, extra={"versions": {"kubernetes": "1.35"}, "sources": repos}
    )
    state = tmp_path / "state"
    built = up(cfg, state)
    assert built.rc == 0, built.output
    for h in bed.hosts:
        assert h.run("kubeadm version -o short", check=True).stdout.strip() == f"v{OLD}"

    # `up` with the new version on the live cluster: refused before anything changes
    newer = yaml.safe_load(cfg.read_text())
    newer["versions"]["kubernetes"] = "1.36"
    cfg136 = tmp_path / "gpustack-136.yaml"
    cfg136.write_text(yaml.safe_dump(newer))
    refused = up(cfg136, state)
    assert refused.rc == 2, refused.output
    assert f"gpustack upgrade --to {NEW}" in refused.stderr
    assert bed.hosts[0].run("kubeadm version -o short", check=True).stdout.strip() == f"v{OLD}"

    # Ctrl-C right after `kubeadm upgrade apply` finished on ug1, before Ansible saw its result
    t_intr = time.monotonic()
    interrupted = interrupt_after_apply(cfg, state, shared)
    assert interrupted.returncode == 130, interrupted.stdout + interrupted.stderr
    assert json.loads((shared / "api.json").read_text())["version"] == f"v{NEW}", "the apply itself finished"
    ug1_steps = json.loads(bed.host("ug1").sudo("cat /var/lib/gpustack/upgrade.json", check=True).stdout)
    assert ug1_steps == {"target": NEW, "steps": ["kubeadm"]}, "the apply is not recorded"
    assert json.loads((state / "clusters" / "gpustack" / "upgrade.json").read_text())["status"] == "running"
    wait_no_module(bed.host("ug1"))
    print(f"test_upgrade: the interrupted run took {time.monotonic() - t_intr:.1f}s")

    # resumed, and failed: kubeadm upgrade node fails once on the last worker
    (shared / "fail-once" / "ug3-upgrade-node").write_text("")
    first = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes")
    assert first.rc == 1, first.output
    assert "continues" in first.stderr
    # the API server already ran the target: the resumed run did not apply again
    assert count(events(shared), "ug1", "kubeadm", "upgrade", "apply") == 1
    progress = json.loads((state / "clusters" / "gpustack" / "upgrade.json").read_text())
    assert (progress["status"], progress["from"], progress["to"]) == ("failed", OLD, NEW)
    assert {n: v["status"] for n, v in progress["nodes"].items()} == {"ug1": "done", "ug2": "done", "ug3": "pending"}
    ug3 = json.loads(bed.host("ug3").sudo("cat /var/lib/gpustack/upgrade.json", check=True).stdout)
    assert ug3 == {"target": NEW, "steps": ["kubeadm"]}
    # the half-done worker stays cordoned until its upgrade finishes
    assert json.loads((shared / "nodes" / "ug3.json").read_text())["unschedulable"] is True

    # ug2 as a run interrupted between its marker and its records leaves it: its marker names the
    # target, its own progress lacks "done", this machine's record still says pending
    ug2 = bed.host("ug2")
    ug2.sudo(
        """python3 -c 'import json; p="/var/lib/gpustack/upgrade.json"; d=json.load(open(p)); """
        """d["steps"].remove("done"); json.dump(d, open(p, "w"))'""",
        check=True,
    )
    local = state / "clusters" / "gpustack" / "upgrade.json"
    torn = json.loads(local.read_text())
    torn["nodes"]["ug2"] = {**torn["nodes"]["ug2"], "status": "pending", "version": OLD}
    local.write_text(json.dumps(torn))

    # resumed: the same command continues with ug3; ug1 and ug2 are not touched again
    second = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes")
    assert second.rc == 0, second.output
    evs = events(shared)
    assert count(evs, "ug1", "kubeadm", "upgrade", "apply") == 1
    assert count(evs, "ug1", "kubectl", "drain", "ug2") == 1
    assert count(evs, "ug3", "kubeadm", "upgrade", "node") == 2  # the failed one and the resumed one

    # the order: plan and apply on the control plane, then each worker in turn, one at a time
    plan_at = index(evs, "ug1", "kubeadm", "upgrade", "plan")
    apply_at = index(evs, "ug1", "kubeadm", "upgrade", "apply")
    assert plan_at < apply_at < index(evs, "ug1", "kubectl", "drain", "ug1")
    for w in ("ug2", "ug3"):
        drain = index(evs, "ug1", "kubectl", "drain", w)
        node = index(evs, w, "kubeadm", "upgrade", "node", last=True)
        uncordon = index(evs, "ug1", "kubectl", "uncordon", w, last=True)
        assert apply_at < drain < node < uncordon, w
    assert index(evs, "ug1", "kubectl", "uncordon", "ug2") < index(evs, "ug1", "kubectl", "drain", "ug3")

    for h in bed.hosts:
        versions = h.run("dpkg-query -W -f='${Package}=${Version} ' kubeadm kubelet kubectl", check=True).stdout
        assert sorted(versions.split()) == [f"kubeadm={NEW}-1.1", f"kubectl={NEW}-1.1", f"kubelet={NEW}-1.1"], h.name
        assert set(h.run("apt-mark showhold", check=True).stdout.split()) >= {"kubeadm", "kubelet", "kubectl"}
        assert "/v1.36/deb/" in h.sudo("cat /etc/apt/sources.list.d/kubernetes.list", check=True).stdout
        marker = json.loads(h.sudo("cat /etc/gpustack/installed.json", check=True).stdout)
        assert marker["kubernetes_version"] == NEW and marker["managed_by"] == "gpustack"
        node = json.loads((shared / "nodes" / f"{h.name}.json").read_text())
        assert (node["kubelet"], node["ready"], node["unschedulable"]) == (f"v{NEW}", True, False), h.name
    assert json.loads((shared / "api.json").read_text())["version"] == f"v{NEW}"
    done = json.loads((state / "clusters" / "gpustack" / "upgrade.json").read_text())
    assert done["status"] == "done" and done["attempts"] == 3 and done["started"] == progress["started"]
    assert {n: v["status"] for n, v in done["nodes"].items()} == {"ug1": "done", "ug2": "done", "ug3": "done"}
    for h in bed.hosts:  # every node's own record ends with "done", ug2's too
        steps = json.loads(h.sudo("cat /var/lib/gpustack/upgrade.json", check=True).stdout)["steps"]
        assert steps[-1] == "done" and steps.count("done") == 1, (h.name, steps)

    # a converged re-run changes nothing on the hosts: every node is at the target (preflight's
    # read-only probes still call `kubectl get`, and the host facts `kubelet --version`)
    third = run_gpustack(cfg, state, "upgrade", "--to", "1.36", "--yes")
    assert third.rc == 0, third.output
    new = events(shared)[len(evs) :]
    assert [e for e in new if e["tool"] == "kubeadm" or not {"drain", "uncordon", "cordon"}.isdisjoint(e["argv"])] == []
    read_only = [e for e in new if (e["tool"], e["argv"][:1]) == ("kubelet", ["--version"])]
    assert read_only, "the preflight's facts read each kubelet's version"
    assert all(e["tool"] == "kubectl" and "get" in e["argv"] for e in new if e not in read_only), new


def interrupt_after_apply(cfg: Path, state: Path, shared: Path) -> subprocess.CompletedProcess[str]:
    """`gpustack upgrade --to 1.36`, SIGINT once the kubeadm double on ug1 finished `upgrade apply`
    (it waits in its hold until the hold is lifted: the apply done, its result not yet returned)."""
    (shared / "hold").mkdir(exist_ok=True)
    (shared / "hold" / "ug1-upgrade-apply").write_text("")
    env = {**os.environ, "GPUSTACK_STATE_DIR": str(state), "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("GPUSTACK_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpustack", "upgrade", "--to", "1.36", "--yes", "-c", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 600
        while not (shared / "held" / "ug1-upgrade-apply").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "kubeadm upgrade apply never ran"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        (shared / "hold" / "ug1-upgrade-apply").unlink(missing_ok=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def wait_no_module(host: Host) -> None:
    """The held kubeadm returned and the interrupted run's module process on the host is gone."""
    deadline = time.monotonic() + 60
    while host.sudo("pgrep -af '[A]nsiballZ|[a]nsible-tmp' || true", check=True).stdout.strip():
        assert time.monotonic() < deadline, "the interrupted run's module outlived the hold"
        time.sleep(0.5)
