"""Which cluster a command talks to, and the one way to connect to it.

Every command that talks to a Kubernetes cluster gets its client (a :class:`~gpustack.runners.kube.Kube`) from
:func:`cluster_client`: the kubeconfig :func:`resolve_kubeconfig` finds, connected by :func:`connect`, or, for
gpustack's own CronJob inside the cluster (``health --in-cluster``), the pod's ServiceAccount. ``doctor``, which
reports the resolved target before it connects, calls the two steps itself.

Where the kubeconfig comes from, first match wins (docs/decisions.md, "Which cluster"):

1. ``--kubeconfig FILE``: that file only (it must exist), as with kubectl and helm;
2. ``$KUBECONFIG``: a colon-separated list of files, merged the way kubectl merges them: missing
   files are skipped, the first file to define a cluster, user or context name wins, and so does the
   first file that sets ``current-context``; relative paths in a file are relative to that file;
3. gpustack's own admin.conf (``<state>/clusters/<name>/admin.conf``), which ``gpustack up`` fetched
   for the cluster in gpustack.yaml;
4. ``~/.kube/config``.

``--context NAME`` chooses a context of the resolved configuration; without it the configuration's
``current-context`` is used. Commands that build or change gpustack's own cluster (``up``,
``upgrade``) resolve with ``own_only=True``: the admin.conf and nothing else, whatever the
environment says.

Errors: a named file that is missing or not a kubeconfig, an unknown ``--context``, no context at all
-> :class:`~gpustack.errors.UsageError` (exit 2, naming the file or the context); no kubeconfig
anywhere -> :class:`KubeconfigNotFound` (exit 3, naming every place looked at). A server that is not a
Kubernetes API server is :class:`~gpustack.runners.kube_proof.NotKubernetesAPI` (exit 3) at the client's first
request (:meth:`~gpustack.runners.kube.Kube.prove_kubernetes`).
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpustack.errors import ClusterUnreachableError, ConfigError, GpustackWarning, UsageError
from gpustack.paths import check_input_file

if TYPE_CHECKING:
    from gpustack.runners.kube import Kube

Obj = dict[str, Any]

#: the request timeout of commands that should say "unreachable" quickly (``status``, ``node remove``), not after
#: the 30 s default
QUICK_TIMEOUT = 10.0
#: where the kubeconfig came from (``KubeTarget.source``)
FLAG, ENV, GPUSTACK, HOME = "--kubeconfig", "$KUBECONFIG", "gpustack", "~/.kube/config"
#: kubeconfig keys whose value is a path, resolved relative to the file they are in (as kubectl does)
PATH_KEYS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


class KubeconfigNotFound(ClusterUnreachableError):
    """No kubeconfig in any of the places gpustack looks (exit 3: no cluster to reach)."""


@dataclass(frozen=True)
class KubeTarget:
    """The cluster a command talks to. ``config`` is the merged kubeconfig (it may hold credentials:
    never printed, logged or saved); everything else is safe to show."""

    source: str  # FLAG, ENV, GPUSTACK or HOME
    files: tuple[Path, ...]  # the files read, in precedence order
    context: str
    cluster: str  # the context's cluster entry
    user: str  # the context's user entry (a name, not a credential)
    server: str
    own: bool = False  # gpustack's own cluster (its admin.conf, or a kubeconfig for the same server)
    config: Obj = field(default_factory=dict, repr=False, compare=False)

    def describe(self) -> str:
        """One line: server, context and where the kubeconfig came from."""
        where = {FLAG: f"--kubeconfig {self.files[0]}", GPUSTACK: f"gpustack's admin.conf {self.files[0]}",
                 HOME: str(self.files[0])}.get(self.source)  # fmt: skip
        if where is None:  # $KUBECONFIG
            where = "$KUBECONFIG " + os.pathsep.join(str(f) for f in self.files)
        return f"{self.server} (context {self.context}, from {where})"

    def to_json(self) -> Obj:
        """What is safe to show and save; ``client_certificate_expires``: the user's client certificate's notAfter
        (ISO 8601 UTC; "" with token or exec credentials)."""
        from gpustack.runners.tls import client_certificate_expiry

        expires = client_certificate_expiry(self.config, self.user)
        return {"server": self.server, "context": self.context, "cluster": self.cluster, "source": self.source,
                "kubeconfig": [str(f) for f in self.files], "gpustack_cluster": self.own,
                "client_certificate_expires": expires.isoformat() if expires else ""}  # fmt: skip


def _load(path: Path) -> Obj:
    """One kubeconfig file as a dict (an empty file is an empty config, as for kubectl)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"kubeconfig {path}: cannot read it: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"kubeconfig {path}: not YAML: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"kubeconfig {path}: not a kubeconfig (a {type(data).__name__}, not a mapping)")
    for key in ("clusters", "users", "contexts"):
        if data.get(key) is not None and not isinstance(data[key], list):
            raise UsageError(f"kubeconfig {path}: {key} must be a list")
    return data


def _absolute(entry: Obj, keys: tuple[str, ...], base: Path) -> Obj:
    """A copy of a cluster/user entry with its relative file paths made absolute (relative to ``base``)."""
    out = copy.deepcopy(entry)
    inner = out.get("cluster") if "cluster" in out else out.get("user")
    if not isinstance(inner, dict):
        return out
    for key in keys:
        value = inner.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            inner[key] = str(base / value)
    exec_ = inner.get("exec")
    if isinstance(exec_, dict):
        command = exec_.get("command")
        if isinstance(command, str) and os.sep in command and not os.path.isabs(command):
            exec_["command"] = str(base / command)
    return out


def merge_kubeconfigs(files: list[tuple[Path, Obj]]) -> Obj:
    """Merge kubeconfigs as kubectl does: for clusters, users and contexts the first file that defines
    a name wins; ``current-context`` comes from the first file that sets one. Relative paths are made
    absolute against the directory of the file they came from."""
    merged: Obj = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {"clusters": set(), "users": set(), "contexts": set()}
    for path, data in files:
        base = path.parent.resolve()
        for key in ("clusters", "users", "contexts"):
            for entry in data.get(key) or []:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    continue
                if entry["name"] in seen[key]:
                    continue
                seen[key].add(entry["name"])
                merged[key].append(_absolute(entry, PATH_KEYS.get(key, ()), base))
        if not merged.get("current-context") and data.get("current-context"):
            merged["current-context"] = str(data["current-context"])
    return merged


def _named(config: Obj, key: str, name: str) -> Obj | None:
    for entry in config.get(key) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            inner = entry.get(key[:-1])
            return inner if isinstance(inner, dict) else {}
    return None


def _env_files(value: str) -> list[Path]:
    return [Path(p).expanduser() for p in value.split(os.pathsep) if p]


def _server_of(path: Path) -> str | None:
    """The server of a kubeconfig's current context (None when unreadable): tells whether a kubeconfig
    from elsewhere points at gpustack's own cluster."""
    try:
        config = merge_kubeconfigs([(path, _load(path))])
    except UsageError:
        return None
    ctx = _named(config, "contexts", str(config.get("current-context") or ""))
    cluster = _named(config, "clusters", str((ctx or {}).get("cluster") or ""))
    return str((cluster or {}).get("server") or "") or None


def resolve_kubeconfig(
    *,
    kubeconfig: Path | None = None,
    context: str | None = None,
    cluster_name: str = "gpustack",
    own_only: bool = False,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
    state_root: Path | None = None,
) -> KubeTarget:
    """The cluster to talk to (see the module docstring for the order and the errors).

    ``cluster_name``: gpustack's cluster (``cluster.name`` in gpustack.yaml), whose admin.conf is
    ``<state_root>/clusters/<cluster_name>/admin.conf``. ``environ``/``home``/``state_root`` default to
    the process' environment, home directory and gpustack's state directory (tests pass their own)."""
    from gpustack.paths import kubeconfig_path, state_dir

    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    own_conf = kubeconfig_path(cluster_name, state_root or state_dir())
    looked: list[str] = []
    files: list[Path] = []
    source = ""
    if own_only:
        if kubeconfig is not None:
            raise UsageError("--kubeconfig: this command works on gpustack's own cluster (its admin.conf) only")
        looked.append(f"gpustack's admin.conf {own_conf}")
        if own_conf.is_file():
            files, source = [own_conf], GPUSTACK
    elif kubeconfig is not None:
        path = check_input_file(kubeconfig, "--kubeconfig")
        files, source = [path], FLAG
    elif env.get("KUBECONFIG"):
        listed = _env_files(env["KUBECONFIG"])
        looked.append(f"$KUBECONFIG {env['KUBECONFIG']}")
        files, source = [p for p in listed if p.is_file()], ENV
    if not files and not own_only and kubeconfig is None:
        if env.get("KUBECONFIG"):  # set, but none of its files exists: kubectl would see an empty config
            raise KubeconfigNotFound(
                f"no kubeconfig: none of the files in $KUBECONFIG exists ({env['KUBECONFIG']})",
                hint="fix $KUBECONFIG, or unset it to use gpustack's admin.conf or ~/.kube/config",
            )
        looked += [f"gpustack's admin.conf {own_conf}", str(home / ".kube" / "config")]
        if own_conf.is_file():
            files, source = [own_conf], GPUSTACK
        elif (home / ".kube" / "config").is_file():
            files, source = [home / ".kube" / "config"], HOME
    if not files:
        raise KubeconfigNotFound(
            f"no kubeconfig for cluster {cluster_name!r}: looked at " + "; ".join(looked),
            hint="run `gpustack up` first to build it, or pass --kubeconfig FILE (or set $KUBECONFIG) for another cluster",
        )
    config = merge_kubeconfigs([(p, _load(p)) for p in files])
    where = f"kubeconfig {os.pathsep.join(str(f) for f in files)}"
    contexts = [str(c.get("name")) for c in config["contexts"] if isinstance(c, dict)]
    name = context or str(config.get("current-context") or "")
    if context is not None and context not in contexts:
        raise UsageError(f"--context {context}: no such context in {where} (contexts: {', '.join(contexts) or 'none'})")
    if not name:
        raise UsageError(f"{where} has no current-context: choose one with --context ({', '.join(contexts) or 'none'})")
    ctx = _named(config, "contexts", name)
    if ctx is None:
        raise UsageError(
            f"{where}: current-context {name!r} is not one of its contexts ({', '.join(contexts) or 'none'})"
        )
    cluster_ref, user_ref = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    cluster = _named(config, "clusters", cluster_ref)
    server = str((cluster or {}).get("server") or "")
    if not server:
        raise UsageError(f"{where}: context {name!r} names cluster {cluster_ref!r}, which has no server")
    own = source == GPUSTACK or (own_conf.is_file() and _server_of(own_conf) == server)
    return KubeTarget(source, tuple(files), name, cluster_ref, user_ref, server, own, config)


def connect(target: KubeTarget, *, request_timeout: float | None = None) -> Kube:
    """The Kubernetes client (:class:`~gpustack.runners.kube.Kube`) for a resolved target."""
    from kubernetes import config as k8s_config

    from gpustack.runners.kube import REQUEST_TIMEOUT, Kube

    try:
        api = k8s_config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
            copy.deepcopy(target.config), context=target.context, persist_config=False
        )
    except (k8s_config.ConfigException, ValueError, TypeError, OSError) as exc:
        raise UsageError(f"kubeconfig {os.pathsep.join(str(f) for f in target.files)}: context "
                         f"{target.context!r} cannot be used: {exc}") from None  # fmt: skip
    kube = Kube(api, request_timeout=REQUEST_TIMEOUT if request_timeout is None else request_timeout)
    kube.target = target.to_json()
    if skips_tls_verify(target):
        # said once by the CLI (cli/app.py), instead of urllib3's InsecureRequestWarning on every request
        warnings.warn(GpustackWarning(tls_off_message(target)), stacklevel=2)
    return kube


def skips_tls_verify(target: KubeTarget) -> bool:
    """Whether the target's cluster entry turns TLS verification off (``insecure-skip-tls-verify: true``) for an
    ``https://`` server (plain HTTP has nothing to verify)."""
    cluster = _named(target.config, "clusters", target.cluster) or {}
    return cluster.get("insecure-skip-tls-verify") is True and target.server.lower().startswith("https://")


def tls_off_message(target: KubeTarget) -> str:
    where = os.pathsep.join(str(f) for f in target.files) or target.source
    return (f"TLS verification is off for cluster {target.cluster!r} ({target.server}): its kubeconfig ({where}) "
            "sets insecure-skip-tls-verify, so the API server's identity is not checked")  # fmt: skip


def cluster_client(
    cluster_name: str = "gpustack",
    kubeconfig: Path | None = None,
    *,
    context: str | None = None,
    own_only: bool = False,
    in_cluster: bool = False,
    request_timeout: float | None = None,
) -> Kube:
    """The client of every command that talks to a cluster: :func:`resolve_kubeconfig` then :func:`connect`
    (``Kube.target`` says what it talks to), or with ``in_cluster`` the pod's ServiceAccount credentials (a
    :class:`~gpustack.errors.ConfigError`, exit 2, outside a pod). ``request_timeout`` defaults to
    :data:`gpustack.runners.kube.REQUEST_TIMEOUT`."""
    from gpustack.runners.kube import REQUEST_TIMEOUT, Kube

    timeout = REQUEST_TIMEOUT if request_timeout is None else request_timeout
    if in_cluster:
        if kubeconfig is not None or context is not None:
            raise UsageError("--in-cluster and --kubeconfig/--context exclude each other")
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config

        configuration = k8s_client.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except k8s_config.ConfigException as exc:
            raise ConfigError(f"--in-cluster: no in-cluster credentials: {exc}",
                              hint="--in-cluster is for gpustack's own CronJob; use --kubeconfig elsewhere") from None  # fmt: skip
        return Kube(k8s_client.ApiClient(configuration), request_timeout=timeout)
    target = resolve_kubeconfig(kubeconfig=kubeconfig, context=context, cluster_name=cluster_name, own_only=own_only)
    return connect(target, request_timeout=timeout)


def kube_from_file(path: Path, *, context: str | None = None, request_timeout: float | None = None) -> Kube:
    """The client of one kubeconfig file (e.g. the admin.conf gpustack fetched from the control plane),
    through the one resolution path (:func:`cluster_client`)."""
    return cluster_client(kubeconfig=path, context=context, request_timeout=request_timeout)
