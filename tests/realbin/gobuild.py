"""Real Kubernetes control-plane binaries, kwok and Prometheus, built from their Go modules for the tests.

Each tools module beside this file (``k8s/``, ``kwok/``, ``prometheus/``: a committed ``go.mod`` and ``go.sum``)
requires one upstream module at the version production runs:

- ``k8s``: ``k8s.io/kubernetes`` at the pinned default Kubernetes patch (``pins.KUBERNETES[KUBERNETES_DEFAULT]``),
  with a ``replace`` line for each staging module it requires at ``v0.0.0`` (``k8s.io/api`` ... at the matching
  ``v0.Y.Z``: without them the module cannot be built outside its own repository), and ``go.etcd.io/etcd/server/v3``
  at the version kubeadm of that release deploys (``constants.DefaultEtcdVersion``, the same version
  k8s.io/kubernetes requires). Builds ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler``,
  ``kubeadm`` and ``etcd``, with the version ldflags kubernetes' own build sets (``hack/lib/version.sh``), so they
  report ``v1.36.5`` and not ``v0.0.0-master`` (which kubeadm and kubectl cannot parse).
- ``kubeadm``: kubeadm alone, from ``k8s/`` with the same flags (the same binary as ``k8s``'s, cached apart): the
  test bed binds it into its hosts, and CI builds it first, so the test bed waits less on a cold machine.
- ``kwok``: ``sigs.k8s.io/kwok`` (its own module: its dependency versions differ from kubernetes').
- ``etcd``: ``go.etcd.io/etcd/etcdctl/v3`` and ``go.etcd.io/etcd/etcdutl/v3`` at the etcd server's version in ``k8s``
  (the etcd clients gpustack's snapshots and restores run; their own module, so adding them does not change the
  ``k8s`` build's key and its cold build).
- ``prometheus``: ``github.com/prometheus/prometheus`` ``v0.3XX.Y`` = Prometheus ``3.XX.Y``, the version gpustack
  deploys with the pinned kube-prometheus-stack (``pins.KUBE_PROMETHEUS_STACK_PROMETHEUS``: v0.313.5, the 3.13 LTS); ``prometheus`` and ``promtool`` with
  the version ldflags of Prometheus' own build (``.promu.yml``) and the upstream build tag ``remove_all_sd`` (no
  cloud service discovery: the tests scrape static targets; PromQL, rules, the TSDB and the API are whole). The web
  UI's assets are not embedded (tag ``builtinassets`` off): the API does not need them.

Everything is built with ``CGO_ENABLED=0 -trimpath`` (the control plane and kwok also ``-gcflags=all=-l``:
:data:`NO_INLINING`) into a cache outside the checkout (``$GPUSTACK_REALBIN_CACHE``
or /var/cache/gpustack-tests/realbin, then ``go/<module>-<version>-<key>/bin``), keyed by the module's go.mod,
go.sum, flags and the Go toolchain: a warm run only checks the stamp. A file lock lets concurrent pytest processes
share one build. A module whose ``go.mod`` names a ``toolchain`` newer than the installed Go is built with
``GOTOOLCHAIN=<that toolchain>``, which the go command takes from the module proxy (the documented way).

``python3 -m tests.realbin.gobuild [MODULE...]`` builds (all by default) and prints where each binary is;
scripts/test.sh runs it before the tests. Cold and warm times: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.realbin import cache_dir
from tests.testbed._proc import file_lock

HERE = Path(__file__).resolve().parent
BUILD_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Module:
    """One tools module: ``binaries`` maps the name each binary gets to its Go package."""

    name: str
    upstream: str  # the module whose version names the build
    binaries: dict[str, str]
    tags: tuple[str, ...] = ()
    #: ``-gcflags`` for every package: ``all=-l`` (no inlining) takes ~21 % less compile CPU (kwok, cold, on the
    #: 2-core machine: 318 -> 252 CPU s); the binaries behave the same, somewhat slower (docs/benchmarks.md)
    gcflags: str = ""
    #: the tools module's directory under tests/realbin when another build shares it (default: ``name``)
    src: str = ""

    @property
    def dir(self) -> Path:
        return HERE / (self.src or self.name)

    def go_mod(self) -> str:
        return (self.dir / "go.mod").read_text(encoding="utf-8")

    @property
    def version(self) -> str:
        """The upstream module's version in go.mod (``v1.36.5``)."""
        return required(self.go_mod(), self.upstream)

    @property
    def toolchain(self) -> str | None:
        """go.mod's ``toolchain goX.Y.Z`` line, when it names one."""
        m = re.search(r"^toolchain\s+(go\S+)", self.go_mod(), re.M)
        return m.group(1) if m else None


def required(go_mod: str, module: str) -> str:
    """The version ``go_mod`` requires of ``module`` (a KeyError when it requires none)."""
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, re.M)
    if not m:
        raise KeyError(f"go.mod requires no {module}")
    return m.group(1)


def kubernetes_ldflags(version: str, build_date: str) -> tuple[str, ...]:
    """kubernetes' ``hack/lib/version.sh`` ldflags: component-base's and client-go's version variables."""
    major, minor = re.match(r"v(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean",
              "buildDate": build_date}  # fmt: skip
    return tuple(f"-X {pkg}.{k}={v}" for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
                 for k, v in values.items())  # fmt: skip


def prometheus_ldflags(module_version: str, build_date: str) -> tuple[str, ...]:
    """Prometheus' ``.promu.yml`` ldflags (``github.com/prometheus/common/version``); module v0.314.0 = 3.14.0."""
    version = prometheus_release(module_version)
    pkg = "github.com/prometheus/common/version"
    return (f"-X {pkg}.Version={version}", f"-X {pkg}.Branch=release-{version.rsplit('.', 1)[0]}",
            f"-X {pkg}.BuildUser=gpustack-tests", f"-X {pkg}.BuildDate={build_date}")  # fmt: skip


def prometheus_release(module_version: str) -> str:
    """Prometheus' release of its Go module's version: ``v0.314.0`` -> ``3.14.0`` (``v0.316.1`` -> ``3.16.1``)."""
    m = re.fullmatch(r"v0\.(\d)(\d\d)\.(\d+)", module_version)
    if not m:
        raise ValueError(f"not a Prometheus 3.x module version: {module_version}")
    return f"{m.group(1)}.{int(m.group(2))}.{m.group(3)}"


def _module_time(module: Module) -> str:
    """The upstream version's publication time (the proxy's ``.info``): the binaries' build date, reproducible."""
    out = _go(module, ["mod", "download", "-json", f"{module.upstream}@{module.version}"], timeout=600)
    info = json.loads(out)
    stamp = json.loads(Path(info["Info"]).read_text(encoding="utf-8"))["Time"]
    return str(stamp).replace("+00:00", "Z")


#: the control plane and kwok are built without inlining to keep CI's cold build within its time (their speed
#: matters little to the tests); Prometheus keeps the compiler's defaults (the PromQL engine and promtool's
#: backfills run hot in tests/prometheus)
NO_INLINING = "all=-l"

MODULES: dict[str, Module] = {
    "k8s": Module(
        "k8s",
        "k8s.io/kubernetes",
        {
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            "kubeadm": "k8s.io/kubernetes/cmd/kubeadm",
            "etcd": "go.etcd.io/etcd/server/v3",
        },
        gcflags=NO_INLINING,
    ),
    #: kubeadm alone, from the same tools module and flags as "k8s" (the same binary): the test bed binds it into its
    #: hosts, and CI builds it before the rest of the control plane so the test bed's lane waits for it less on a
    #: cold machine (the rest then reuses the Go build cache)
    "kubeadm": Module(
        "kubeadm", "k8s.io/kubernetes", {"kubeadm": "k8s.io/kubernetes/cmd/kubeadm"}, gcflags=NO_INLINING, src="k8s"
    ),
    "kwok": Module("kwok", "sigs.k8s.io/kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}, gcflags=NO_INLINING),
    "etcd": Module(
        "etcd",
        "go.etcd.io/etcd/etcdctl/v3",
        {"etcdctl": "go.etcd.io/etcd/etcdctl/v3", "etcdutl": "go.etcd.io/etcd/etcdutl/v3"},
        gcflags=NO_INLINING,
    ),
    "prometheus": Module(
        "prometheus",
        "github.com/prometheus/prometheus",
        {
            "prometheus": "github.com/prometheus/prometheus/cmd/prometheus",
            "promtool": "github.com/prometheus/prometheus/cmd/promtool",
        },
        tags=("remove_all_sd",),
    ),
}


def _env(module: Module) -> dict[str, str]:
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=readonly -buildvcs=false")
    env["GOTOOLCHAIN"] = module.toolchain or "local"
    return env


def _go(module: Module, args: Sequence[str], *, timeout: float) -> str:
    proc = subprocess.run(["go", *args], cwd=module.dir, env=_env(module), capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"go {' '.join(args)} in {module.dir} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def go_download(module: Module, path: str) -> Path:
    """The source directory of ``path`` (a module the tools module requires, at that version) in the module
    cache, downloaded from the proxy when missing."""
    version = module.version if path == module.upstream else required(module.go_mod(), path)
    info = json.loads(_go(module, ["mod", "download", "-json", f"{path}@{version}"], timeout=600))
    return Path(info["Dir"])


def download(path: str, version: str) -> Path:
    """A module's source directory in the module cache (downloaded from the proxy when missing), outside any tools
    module: for data a module carries (kwok's stages, prometheus-operator's CRDs)."""
    env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    proc = subprocess.run(["go", "mod", "download", "-json", f"{path}@{version}"], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"go mod download {path}@{version} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return Path(json.loads(proc.stdout)["Dir"])


def ldflags(module: Module) -> tuple[str, ...]:
    date = _module_time(module)
    if module.upstream == "k8s.io/kubernetes":
        return kubernetes_ldflags(module.version, date)
    if module.name == "prometheus":
        return prometheus_ldflags(module.version, date)
    return ()


def _key(module: Module) -> str:
    go_version = _go(module, ["env", "GOVERSION"], timeout=300).strip()
    h = hashlib.sha256()
    for part in (module.go_mod(), (module.dir / "go.sum").read_text(encoding="utf-8"), json.dumps(module.binaries),
                 ",".join(module.tags), *([module.gcflags] if module.gcflags else []), go_version):  # fmt: skip
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:12]


def out_dir(module: Module) -> Path:
    return cache_dir() / "go" / f"{module.name}-{module.version}-{_key(module)}"


def build(module: Module, *, log: bool = False) -> Path:
    """The module's binaries (built once into the cache): the directory holding them."""
    dest = out_dir(module)
    stamp = dest / "bin" / ".built"
    if stamp.exists():
        return dest / "bin"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.with_name(dest.name + ".lock"), timeout=BUILD_TIMEOUT):
        if stamp.exists():
            return dest / "bin"
        started = time.monotonic()
        staging = dest / "bin.staging"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        flags = ["-s", "-w", *ldflags(module)]
        if log:
            print(f"building {module.name} {module.version} ({', '.join(module.binaries)}) ...", flush=True)
        for name, package in module.binaries.items():
            args = ["build", "-trimpath", "-ldflags", " ".join(flags), "-o", str(staging / name)]
            if module.gcflags:
                args.append(f"-gcflags={module.gcflags}")
            if module.tags:
                args += ["-tags", ",".join(module.tags)]
            _go(module, [*args, package], timeout=BUILD_TIMEOUT)
        (staging / ".built").write_text(f"{time.monotonic() - started:.0f} s\n", encoding="utf-8")
        shutil.rmtree(dest / "bin", ignore_errors=True)
        staging.rename(dest / "bin")
        if log:
            print(f"built {module.name} in {time.monotonic() - started:.0f} s: {dest / 'bin'}", flush=True)
    return dest / "bin"


@cache
def binary(name: str) -> Path:
    """The path of one built binary (``kube-apiserver``, ``etcd``, ``kwok``, ``prometheus`` ...), built if missing."""
    for module in MODULES.values():
        if name in module.binaries:
            return build(module) / name
    raise KeyError(
        f"no tools module builds {name!r} (known: {', '.join(b for m in MODULES.values() for b in m.binaries)})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.realbin.gobuild", description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=f"{', '.join(MODULES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}: choose from {', '.join(MODULES)}")
    for name in args.modules or list(MODULES):
        started = time.monotonic()
        bindir = build(MODULES[name], log=True)
        print(f"{name}: {bindir} ({time.monotonic() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
