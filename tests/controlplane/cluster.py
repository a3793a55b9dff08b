"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok, as processes, from gpustack's own kubeadm configuration.

:func:`start` renders gpustack's kubeadm configuration for a one-node cluster, lets the real kubeadm write the
certificates, kubeconfigs and static pod manifests (:mod:`tests.controlplane.kubeadm_phases`), then runs each
manifest's command as a process in its own session, waiting for each to be healthy: etcd (TLS, client and peer
certificates from kubeadm's etcd CA), the API server (``--authorization-mode=Node,RBAC`` and the admission
plugins kubeadm enables), the controller-manager (every default controller: the disruption controller fills
PodDisruptionBudget status, the garbage collector, the namespace controller, ...), the scheduler, and kwok, which
stands in for the kubelets: it manages the nodes labelled ``type=kwok`` (:mod:`tests.controlplane.nodes`), keeps
them Ready and takes the pods bound to them through their lifecycle without containers.

:meth:`ControlPlane.stop` ends every process (SIGTERM to its session, SIGKILL after a grace period) and checks
none is left. Each process logs to ``<workdir>/logs/<name>.log``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpustack.config.model import Config
from gpustack.render.kubeadm import render_init_config
from tests.controlplane import kubeadm_phases as kp
from tests.realbin import real_bins
from tests.realbin.gobuild import binary

NODE = "cp-0"
START_TIMEOUT = 180.0
STOP_GRACE = 15.0
#: started again when they exit, as the kubelet restarts a static pod's container: kubeadm gives both
#: ``--leader-elect=true``, and one that cannot renew its lease in time (a starved CPU) exits by design
RESTARTED = ("kube-controller-manager", "kube-scheduler")


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (the message names the component and the end of its log)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((kp.LOOPBACK, 0))
        return int(sock.getsockname()[1])


def free_ports() -> kp.Ports:
    chosen: set[int] = set()
    while len(chosen) < 6:
        chosen.add(free_port())
    return kp.Ports(*sorted(chosen))


@dataclass
class ControlPlane:
    """A running control plane: its kubeconfigs, URL and processes."""

    workdir: Path
    ports: kp.Ports
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    started_in: dict[str, float] = field(default_factory=dict)  # component -> seconds until healthy
    restarts: dict[str, int] = field(default_factory=dict)  # component -> times started again (RESTARTED)
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def url(self) -> str:
        return f"https://{kp.LOOPBACK}:{self.ports.apiserver}"

    @property
    def admin_kubeconfig(self) -> Path:
        """kubeadm's admin.conf (``kubeadm:cluster-admins`` group, bound to cluster-admin)."""
        return self.pki / "admin.conf"

    def log(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def tail(self, name: str, lines: int = 30) -> str:
        try:
            return "\n".join(self.log(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- processes ------------------------------------------------------------------------------------

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        self.log(name).parent.mkdir(parents=True, exist_ok=True)
        with open(self.log(name), "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, cwd=self.workdir)  # fmt: skip
        self.processes[name] = proc
        return proc

    def alive(self, name: str) -> None:
        proc = self.processes[name]
        if proc.poll() is not None:
            raise ControlPlaneError(f"{name} exited ({proc.returncode}):\n{self.tail(name)}")

    def supervise(self, interval: float = 1.0) -> threading.Thread:
        """Start :data:`RESTARTED` components again when they exit, until :meth:`stop` (a daemon thread)."""

        def watch() -> None:
            while not self.stopping.wait(interval):
                for name in RESTARTED:
                    proc = self.processes.get(name)
                    if proc is not None and proc.poll() is not None and not self.stopping.is_set():
                        self.restarts[name] = self.restarts.get(name, 0) + 1
                        self.spawn(name, [str(a) for a in proc.args])  # type: ignore[union-attr]

        thread = threading.Thread(target=watch, name="controlplane-supervisor", daemon=True)
        thread.start()
        return thread

    def stop(self) -> list[str]:
        """End every process, newest first; returns the names of those that needed SIGKILL."""
        self.stopping.set()
        killed = []
        for name, proc in reversed(list(self.processes.items())):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_GRACE)
                except subprocess.TimeoutExpired:
                    killed.append(name)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=STOP_GRACE)
            with contextlib.suppress(ProcessLookupError, PermissionError):  # anything left in its session
                os.killpg(proc.pid, signal.SIGKILL)
        return killed

    # -- health ---------------------------------------------------------------------------------------

    def _tls(self, ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca))
        ctx.load_cert_chain(str(cert), str(key))
        return ctx

    def _get(self, url: str, ctx: ssl.SSLContext) -> int:
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, OSError):
            return 0

    def wait_healthy(self, name: str, url: str, ctx: ssl.SSLContext, *, timeout: float = START_TIMEOUT) -> None:
        started = time.monotonic()
        while self._get(url, ctx) != 200:
            self.alive(name)
            if time.monotonic() - started > timeout:
                raise ControlPlaneError(f"{name} not healthy at {url} after {timeout:.0f} s:\n{self.tail(name)}")
            time.sleep(0.2)
        self.started_in[name] = round(time.monotonic() - started, 2)

    def admin_tls(self) -> ssl.SSLContext:
        """TLS with kubeadm's admin client certificate (read from admin.conf's embedded data)."""
        cfg = yaml.safe_load(self.admin_kubeconfig.read_text())
        user = cfg["users"][0]["user"]
        creds = self.workdir / "admin-client"
        creds.mkdir(mode=0o700, exist_ok=True)
        import base64

        (creds / "cert").write_bytes(base64.b64decode(user["client-certificate-data"]))
        (creds / "key").write_bytes(base64.b64decode(user["client-key-data"]))
        return self._tls(self.pki / "ca.crt", creds / "cert", creds / "key")


#: the shared fixture's control plane as before issue 28's hardening (its tests' pods and Secrets are not about it):
#: no encryption, no audit log, PodSecurity privileged; tests/controlplane/test_security.py starts a default one
RELAXED = {"encryption_at_rest": False, "audit": {"enabled": False},
           "pod_security": {"enforce": "privileged", "warn": "privileged", "audit": "privileged"}}  # fmt: skip


def gpustack_config(*, hardened: bool = False, pod_cidr: str | None = None) -> Config:
    """The one-node cluster gpustack.yaml describes, as the fixture renders its kubeadm configuration (``hardened``:
    gpustack's default ``security:``, else :data:`RELAXED`; ``pod_cidr``: ``cluster.pod_cidr``, else its default)."""
    nodes = [{"name": NODE, "address": kp.ADVERTISE, "role": "control-plane"}]
    cluster = {"cluster": {"pod_cidr": pod_cidr}} if pod_cidr else {}
    return Config.model_validate({"nodes": nodes, **cluster, **({} if hardened else {"security": RELAXED})})


def write_security_files(cfg: Config, pki: Path) -> None:
    """The control plane's hardening files, from gpustack's own rendering (gpustack/render/security.py) and a key
    made and kept by gpustack's own key store (gpustack/render/encryption_keys.py, in ``<workdir>/state``), where the
    relocated flags name them (:func:`kp.host_path`)."""
    from gpustack.render import security
    from gpustack.render.encryption_keys import ensure_keys

    files = dict(security.host_files(cfg))
    if cfg.security.encryption_at_rest:
        files[security.ENCRYPTION_CONFIG] = security.render_encryption_config(ensure_keys(cfg, pki.parent / "state"))
    for path, text in files.items():
        target = kp.host_path(path, pki)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target.write_text(text)
        target.chmod(0o600)
    if cfg.security.audit.enabled:
        kp.host_path(security.AUDIT_LOG_DIR + "/", pki).mkdir(parents=True, exist_ok=True, mode=0o700)


def kubeadm_phases(workdir: Path, cfg: Config, ports: kp.Ports) -> dict[str, list[str]]:
    """Run kubeadm's init phases (dry run into ``workdir/pki``); the placed command of each component."""
    pki = workdir / "pki"
    pki.mkdir(parents=True, exist_ok=True, mode=0o700)
    config = workdir / "kubeadm-config.yaml"
    config.write_text(kp.place(render_init_config(cfg), pki=pki, ports=ports))
    env = {**os.environ, "KUBEADM_INIT_DRYRUN_DIR": str(pki)}
    for phase in (["certs", "all"], ["kubeconfig", "all"], ["etcd", "local"], ["control-plane", "all"]):
        proc = subprocess.run([str(binary("kubeadm")), "init", "phase", *phase, "--config", str(config), "--dry-run"],
                              capture_output=True, text=True, env=env, timeout=120, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise ControlPlaneError(f"kubeadm init phase {' '.join(phase)}: {proc.stderr[-3000:]}")
    write_security_files(cfg, pki)
    for name in kp.KUBECONFIGS:
        path = pki / name
        path.write_text(kp.kubeconfig_on_loopback(path.read_text(), ports.apiserver))
    commands = {}
    for component in kp.COMPONENTS:
        manifest = yaml.safe_load((pki / f"{component}.yaml").read_text())
        args = kp.relocate(kp.command_of(manifest), root=pki, ports=ports)
        commands[component] = [str(binary(component)), *args[1:]]
    return commands


def kubectl(cp: ControlPlane, *args: str, kubeconfig: Path | None = None, stdin: str | None = None) -> str:
    """The real kubectl (tests/realbin) against the control plane; admin.conf unless told otherwise."""
    proc = subprocess.run([str(real_bins().kubectl), f"--kubeconfig={kubeconfig or cp.admin_kubeconfig}", *args],
                          input=stdin, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise ControlPlaneError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def finish_init(cp: ControlPlane) -> None:
    """What ``kubeadm init`` does once the API server answers and a test cluster needs: the
    ``kubeadm:cluster-admins`` ClusterRoleBinding that makes admin.conf's group cluster-admin (kubeadm creates it
    through super-admin.conf: ``phases/kubeconfig`` ``EnsureAdminClusterRoleBindingImpl``), and the real
    ``upload-config`` phase (the kubeadm-config and kubelet-config ConfigMaps, with their RBAC)."""
    super_admin = cp.pki / "super-admin.conf"
    kubectl(cp, "create", "clusterrolebinding", "kubeadm:cluster-admins", "--clusterrole=cluster-admin",
            "--group=kubeadm:cluster-admins", kubeconfig=super_admin)  # fmt: skip
    proc = subprocess.run([str(binary("kubeadm")), "init", "phase", "upload-config", "all",
                           f"--config={cp.workdir / 'kubeadm-config.yaml'}", f"--kubeconfig={super_admin}"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise ControlPlaneError(f"kubeadm init phase upload-config: {proc.stderr[-3000:]}")


def wait_default_service_account(cp: ControlPlane, timeout: float = START_TIMEOUT) -> None:
    """Until the controller-manager's service-account controller has made ``default/default`` (pods in a namespace
    are refused until its ServiceAccount exists, as on any new cluster)."""
    started = time.monotonic()
    while True:
        try:
            kubectl(cp, "get", "serviceaccount", "default", "--namespace=default", "-o", "name")
            break
        except ControlPlaneError:
            cp.alive("kube-controller-manager")
            if time.monotonic() - started > timeout:
                raise ControlPlaneError("no default ServiceAccount: " + cp.tail("kube-controller-manager")) from None
            time.sleep(0.2)
    cp.started_in["serviceaccount"] = round(time.monotonic() - started, 2)


def start(
    workdir: Path, cfg: Config | None = None, extra_args: Mapping[str, Sequence[str]] | None = None
) -> ControlPlane:
    """Start the control plane in ``workdir`` (see the module docstring); stops what it started on failure.
    ``extra_args``: component -> flags appended to kubeadm's (a benchmark's client rate limits; tests use none)."""
    workdir.mkdir(parents=True, exist_ok=True)
    cp = ControlPlane(workdir, free_ports())
    try:
        began = time.monotonic()
        commands = kubeadm_phases(workdir, cfg or gpustack_config(), cp.ports)
        for component, flags in (extra_args or {}).items():
            commands[component] = [*commands[component], *flags]
        cp.started_in["kubeadm"] = round(time.monotonic() - began, 2)
        etcd_tls = cp._tls(cp.pki / "etcd/ca.crt", cp.pki / "etcd/healthcheck-client.crt",
                           cp.pki / "etcd/healthcheck-client.key")  # fmt: skip
        cp.spawn("etcd", commands["etcd"])
        cp.wait_healthy("etcd", f"https://{kp.LOOPBACK}:{cp.ports.etcd_client}/health", etcd_tls)
        cp.spawn("kube-apiserver", commands["kube-apiserver"])
        admin = cp.admin_tls()
        cp.wait_healthy("kube-apiserver", f"{cp.url}/readyz", admin)
        finish_init(cp)
        cp.spawn("kube-controller-manager", commands["kube-controller-manager"])
        cp.spawn("kube-scheduler", commands["kube-scheduler"])
        cp.wait_healthy("kube-controller-manager", f"https://{kp.LOOPBACK}:{cp.ports.controller_manager}/healthz",
                        ssl._create_unverified_context())  # fmt: skip
        cp.wait_healthy("kube-scheduler", f"https://{kp.LOOPBACK}:{cp.ports.scheduler}/healthz",
                        ssl._create_unverified_context())  # fmt: skip
        cp.supervise()
        cp.spawn("kwok", kwok_command(cp))
        wait_default_service_account(cp)
        cp.started_in["total"] = round(time.monotonic() - began, 2)
    except BaseException:
        cp.stop()
        raise
    return cp


def kwok_stages() -> str:
    """kwok's own ``fast`` stage set (``kustomize/stage/fast``: node-initialize, the heartbeat with a Lease, and
    pod-ready, pod-complete, pod-delete), read from the kwok module at the version the tools module pins (the
    module cache holds it once it is built), as ``kwokctl`` installs it."""
    root = kwok_module_dir() / "kustomize" / "stage"
    docs: list[str] = []

    def resources(directory: Path) -> None:
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        for entry in kustomization.get("resources") or []:
            target = (directory / entry).resolve()
            if target.is_dir():
                resources(target)
            else:
                docs.append(target.read_text())

    resources(root / "fast")
    return "---\n".join(docs)


def kwok_module_dir() -> Path:
    """Where the go command keeps kwok's module source (downloaded from the module proxy when missing)."""
    from tests.realbin.gobuild import MODULES, go_download

    module = MODULES["kwok"]
    return go_download(module, module.upstream)


def kwok_command(cp: ControlPlane) -> list[str]:
    """kwok managing the nodes labelled ``type=kwok`` (and their pods) with its ``fast`` stages."""
    config = cp.workdir / "kwok.yaml"  # its own configuration: never the user's ~/.kwok/kwok.yaml
    config.write_text(kwok_stages())
    return [str(binary("kwok")), f"--config={config}", f"--kubeconfig={cp.admin_kubeconfig}",
            "--manage-all-nodes=false", "--manage-nodes-with-label-selector=type=kwok",
            f"--server-address={kp.LOOPBACK}:{free_port()}", "--node-lease-duration-seconds=40"]  # fmt: skip


@contextlib.contextmanager
def running(
    workdir: Path, cfg: Config | None = None, extra_args: Mapping[str, Sequence[str]] | None = None
) -> Iterator[ControlPlane]:
    cp = start(workdir, cfg, extra_args)
    try:
        yield cp
    finally:
        cp.stop()
