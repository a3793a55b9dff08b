"""gpustack's environment variables: the config overlay (``GPUSTACK_<SECTION>__<FIELD>``) and the
registry of gpustack's own variables that are *not* config fields.

The loader turns every ``GPUSTACK_*`` variable into a config override except the ones registered
here, so a variable that some part of gpustack (the CLI, the launcher, the host scripts, the test
suite) reads must be listed in :data:`NON_CONFIG` -- and is documented in docs/configuration.md,
which a unit test keeps in step with this table.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

PREFIX = "GPUSTACK_"


@dataclass(frozen=True)
class EnvVar:
    name: str
    read_by: str  # cli | launcher | host | tests
    meaning: str


NON_CONFIG: dict[str, EnvVar] = {
    v.name: v
    for v in (
        EnvVar("GPUSTACK_CONFIG", "cli", "the config file to use (like --config)"),
        EnvVar("GPUSTACK_STATE_DIR", "cli", "the state directory (default ~/.local/state/gpustack)"),
        EnvVar("GPUSTACK_NO_COLOR", "cli", "no colour in output (like NO_COLOR)"),
        EnvVar("GPUSTACK_VENV", "launcher", "the virtualenv scripts/gpustack installs into"),
        EnvVar("GPUSTACK_TODAY", "cli", "the day support horizons are judged against (YYYY-MM-DD; default today)"),
        EnvVar("GPUSTACK_KEEP_RUNS", "cli", "how many run directories `up` keeps (default 20)"),
        EnvVar(
            "GPUSTACK_CONNECT_TIMEOUT", "cli", "seconds a first connection to the Kubernetes API may take (default 5)"
        ),
        EnvVar("GPUSTACK_SOURCE_TIMEOUT", "cli", "seconds each source of verify and doctor may take (default 30)"),
        EnvVar("GPUSTACK_IPTABLES", "host", "the iptables binary the host firewall script uses"),
        EnvVar("GPUSTACK_IPTABLES_RESTORE", "host", "the iptables-restore binary the host firewall script uses"),
        EnvVar("GPUSTACK_IP6TABLES", "host", "the ip6tables binary the host firewall script uses"),
        EnvVar("GPUSTACK_IP6TABLES_RESTORE", "host", "the ip6tables-restore binary the host firewall script uses"),
        EnvVar("GPUSTACK_SKIP_SANDBOX", "tests", "skip the playbook sandbox converge tests on purpose"),
        EnvVar("GPUSTACK_VERIFY_SAMPLE", "tests", "write the verify sample output of docs/commands.md to this file"),
        EnvVar("GPUSTACK_DOUBLES_ROOT", "tests", "path prefix for the test-bed kubeadm/kubelet/kubectl/helm doubles"),
        EnvVar("GPUSTACK_DOUBLES_CLUSTER", "tests", "the directory the test-bed doubles share as their cluster"),
        EnvVar("GPUSTACK_DOUBLES_HOST", "tests", "the host name the test-bed doubles record (default: hostname)"),
        EnvVar("GPUSTACK_HELM_DOUBLE_VERSION", "tests", "the version the test-bed helm double reports"),
        EnvVar("GPUSTACK_TESTBED_CACHE", "tests", "the test bed's cache (root file system, Debian downloads)"),
        EnvVar("GPUSTACK_TEST_PROMETHEUS", "tests", "Prometheus releases tests/prometheus runs (newest,oldest)"),
        EnvVar("GPUSTACK_TESTBED_MIRROR", "tests", "the Debian mirror the test bed's debootstrap uses"),
        EnvVar("GPUSTACK_TESTBED_LOCK_TIMEOUT", "tests", "seconds to wait for another test-bed session"),
        EnvVar("GPUSTACK_REALBIN_CACHE", "tests", "where the real helm/kubectl binaries are extracted"),
        EnvVar("GPUSTACK_TEST_VENV", "tests", "the virtualenv scripts/test.sh installs into (default: .venv)"),
    )
}


def check_own(environ: Mapping[str, str]) -> None:
    """The values of gpustack's own variables that a run would otherwise trip over late (after
    taking the cluster's lock): ConfigError (exit 2) naming the variable, before anything happens."""
    from pathlib import Path

    from gpustack.errors import ConfigError
    from gpustack.paths import keep_runs

    keep_runs(environ)
    raw = environ.get("GPUSTACK_STATE_DIR")
    if raw:
        path = Path(raw).expanduser()
        for cur in (path, *path.parents):
            if cur.exists():
                if not cur.is_dir():
                    where = "" if cur == path else f" ({cur} is not a directory)"
                    raise ConfigError(
                        f"environment variable GPUSTACK_STATE_DIR={raw!r}: not a directory{where}",
                        hint="point it at a directory (created 0700 when missing), or unset it",
                    )
                break


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside ``X`` or ``X | None``, else None (lists, dicts, scalars)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        models = [m for a in typing.get_args(annotation) if (m := _model_of(a)) is not None]
        return models[0] if len(models) == 1 else None
    return None


def config_variables(model: type[BaseModel]) -> Iterator[tuple[str, ...]]:
    """Every settable field path below the sections of ``model`` (lists such as nodes excluded)."""

    def walk(m: type[BaseModel], path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        for name, info in m.model_fields.items():
            sub = _model_of(info.annotation)
            if sub is not None:
                yield from walk(sub, (*path, name))
            elif path:
                yield (*path, name)

    return walk(model, ())


def variable_name(path: Iterable[str]) -> str:
    return PREFIX + "__".join(p.upper() for p in path)


def check_path(model: type[BaseModel], parts: list[str]) -> str | None:
    """None when ``parts`` (lower-case) names a config field; else what is wrong with it."""
    m: type[BaseModel] | None = model
    for i, part in enumerate(parts):
        if m is None:
            return None  # inside a dict/list field: its own validation names the problem
        fields = m.model_fields
        if part not in fields:
            where = "section" if i == 0 else f"field of {'.'.join(parts[:i])}"
            return f"no {where} named {part!r}"
        m = _model_of(fields[part].annotation)
        if i == 0 and m is None:
            return f"{part!r} cannot be set from the environment (it is a list); put it in the config file"
    if m is not None:
        return f"{'.'.join(parts)} is a section; name one of its fields (GPUSTACK_{parts[0].upper()}__<FIELD>)"
    return None


def suggest(name: str, model: type[BaseModel]) -> str | None:
    candidates = [variable_name(p) for p in config_variables(model)] + list(NON_CONFIG)
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    return close[0] if close else None


def referenced_secret_variables(data: Any) -> set[str]:
    """Names in ``*_env`` fields of the config (e.g. ``api_url_env: GPUSTACK_SLACK_URL``): secrets the
    config reads from the environment, never config overrides themselves."""
    out: set[str] = set()
    if isinstance(data, Mapping):
        for k, v in data.items():
            if isinstance(k, str) and k.endswith("_env") and isinstance(v, str):
                out.add(v)
            else:
                out |= referenced_secret_variables(v)
    elif isinstance(data, list):
        for v in data:
            out |= referenced_secret_variables(v)
    return out
