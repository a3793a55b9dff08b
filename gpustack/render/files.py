"""``gpustack render --out DIR``: every generated file, from the same functions ``up`` uses."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from gpustack.config.model import Config
from gpustack.errors import ConfigError, UsageError
from gpustack.paths import kubeconfig_path, write_file
from gpustack.render import security
from gpustack.render.ansible import extravars, inventory, public_extravars, without_passwords
from gpustack.render.encryption_keys import load_keys
from gpustack.render.firewall_script import firewall_scripts
from gpustack.render.kubeadm import render_init_config
from gpustack.render.manifests import render_manifests
from gpustack.render.values import FactsSummary, render_values, summarize_facts


def read_facts(facts_dir: Path) -> dict[str, dict[str, Any]]:
    """Node name -> its host facts, from a run directory's facts/ (``gpustack render --facts``)."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(facts_dir.glob("*.json"))}


def load_facts(facts_dir: Path | None) -> FactsSummary:
    """Host facts from a run directory's facts/ (``gpustack render --facts``), else none known."""
    return FactsSummary() if facts_dir is None else summarize_facts(read_facts(facts_dir))


def _yaml_docs(objects: list[dict[str, object]]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False)


def generated_files(
    cfg: Config, *, state_root: Path | None = None, facts: FactsSummary | None = None
) -> dict[str, str]:
    """Relative path -> content: what `up` would apply, from the same functions (secrets excluded:
    the Grafana password and receiver credentials are created in the cluster, never written here)."""
    facts = facts or FactsSummary()
    ev = extravars(cfg, kubeconfig_dest=kubeconfig_path(cfg.cluster.name, state_root))
    ev_shown = {
        k: v
        for k, v in public_extravars(ev).items()
        if k not in ("gpustack_kubeadm_config", "gpustack_flannel_manifest", "gpustack_security_files")
    }
    files = {
        "ansible/inventory.yaml": yaml.safe_dump(inventory(cfg), sort_keys=False),
        "ansible/extravars.yaml": "# gpustack_kubeadm_config is kubeadm/kubeadm-config.yaml\n"
        "# gpustack_flannel_manifest is manifests/kube-flannel.yaml\n"
        "# gpustack_security_files are security/*.yaml; gpustack_encryption_config is filled in by the run from the "
        "cluster's key (security/encryption-config.yaml, REDACTED)\n" + yaml.safe_dump(ev_shown, sort_keys=True),
        "kubeadm/kubeadm-config.yaml": render_init_config(cfg),
        "config/effective-config.json": json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n",
        **{
            f"values/{release}.yaml": yaml.safe_dump(values, sort_keys=False)
            for release, values in render_values(cfg, facts).items()
        },
        **{f"manifests/{name}": _yaml_docs(objs) for name, objs in render_manifests(cfg, facts).items()},
        "manifests/kube-flannel.yaml": ev["gpustack_flannel_manifest"],
        **security_files(cfg, state_root),
        **firewall_scripts(cfg, ev),
    }
    # a proxy's password (proxy.http: http://user:password@host:port) is never rendered, in any file
    return {path: without_passwords(text) for path, text in files.items()}


def security_files(cfg: Config, state_root: Path | None = None) -> dict[str, str]:
    """The control planes' hardening files (gpustack/render/security.py) under security/, named as on the hosts;
    the EncryptionConfiguration with its keys' names and REDACTED for each secret."""
    files = {f"security/{PurePosixPath(path).name}": text for path, text in security.host_files(cfg).items()}
    if cfg.security.encryption_at_rest:
        try:
            keys = load_keys(cfg, state_root)
        except ConfigError:
            keys = []
        files["security/encryption-config.yaml"] = security.redacted_encryption_config(keys)
    return dict(sorted(files.items()))


# What a render wrote, kept in DIR: each file's path (relative to DIR) and the sha256 of what it
# wrote. The next render removes a file it no longer generates (switching to the operator's exporter
# must not leave values/dcgm-exporter.yaml behind) only when it is still exactly what gpustack wrote:
# a regular file inside DIR (no absolute path, no `..`, no symbolic link on the way), whose content
# has the recorded checksum. Anything else named there is kept and reported, never deleted.
MANIFEST = ".gpustack-render.json"
MANIFEST_FORMAT = 2


@dataclass(frozen=True)
class RenderResult:
    written: list[tuple[Path, int]]  # path, size in bytes
    removed: list[Path]
    kept: list[tuple[Path, str]] = field(default_factory=list)  # listed by an earlier render, not removed: why
    replaced: list[tuple[Path, str]] = field(default_factory=list)  # not gpustack's, overwritten (--force): why


def _check_out_dir(out: Path) -> None:
    """Refuse before writing anything: DIR is a file, or DIR (or its nearest existing parent) is not writable."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a directory", hint="name a directory (created if missing)")
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"--out {out}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {probe} is not writable", hint="choose a directory you can write to")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _listed(out: Path) -> dict[str, str | None]:
    """What the earlier render's manifest lists: relative path -> sha256 (None: an older gpustack's
    list without checksums). An unreadable manifest lists nothing."""
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if isinstance(files, dict):
        return {k: v if isinstance(v, str) else None for k, v in files.items() if isinstance(k, str)}
    if isinstance(files, list):
        return {k: None for k in files if isinstance(k, str)}
    return {}


def _inside(out: Path, rel: str) -> Path | str:
    """``out / rel`` when ``rel`` names a regular file inside ``out`` reached without a symbolic link;
    else why not (never an absolute path, ``..``, or a path that leaves ``out``)."""
    parts = PurePosixPath(rel).parts
    if not rel or PurePosixPath(rel).is_absolute() or "\\" in rel or any(p in ("..", ".", "") for p in parts):
        return "not a plain path inside --out"
    cur = out
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return "gone"
        except OSError as exc:
            return f"cannot read: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return "a symbolic link: not followed"
        last = i == len(parts) - 1
        if last and not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if not last and not stat.S_ISDIR(st.st_mode):
            return "gone"
    if os.path.commonpath([os.path.realpath(cur), os.path.realpath(out)]) != os.path.realpath(out):
        return "outside --out"
    return cur


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _remove_stale(out: Path, stale: dict[str, str | None]) -> tuple[list[Path], list[tuple[Path, str]]]:
    removed: list[Path] = []
    kept: list[tuple[Path, str]] = []
    for rel, digest in sorted(stale.items()):
        where = _inside(out, rel)
        if isinstance(where, str):
            if where != "gone":
                kept.append((out / rel if not PurePosixPath(rel).is_absolute() else Path(rel), where))
            continue
        if digest is None:
            kept.append((where, "no checksum recorded (written by an older gpustack): remove it by hand"))
            continue
        if _sha256(_read_nofollow(where)) != digest:
            kept.append((where, "changed since gpustack wrote it"))
            continue
        where.unlink()
        removed.append(where)
        parent = where.parent
        while parent != out and not parent.is_symlink() and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return removed, kept


def _not_ours(out: Path, files: dict[str, bytes], listed: dict[str, str | None]) -> list[tuple[Path, str]]:
    """The files this render would overwrite that are not what gpustack's last render there wrote (a file you put
    there or changed since); a file that already holds what this render writes is not one of them."""
    found: list[tuple[Path, str]] = []
    for rel, data in files.items():
        path = out / rel
        try:
            if not path.is_file() or path.is_symlink():
                continue
            now = _sha256(_read_nofollow(path))
        except OSError:
            continue
        if now == _sha256(data):
            continue
        if rel not in listed:
            found.append((path, "not written by gpustack's last render here"))
        elif listed[rel] is not None and listed[rel] != now:
            found.append((path, "changed since gpustack wrote it"))
    return found


def _write_inside(out: Path, rel: str, data: bytes) -> Path:
    """Write ``out / rel`` (mode as the umask says): its directories are created inside ``out``; a
    symbolic link on the way is refused, never written through."""
    cur = out
    for part in PurePosixPath(rel).parts[:-1]:
        cur = cur / part
        if cur.is_symlink():
            raise UsageError(f"--out {out}: {cur} is a symbolic link: gpustack writes only inside --out")
        if not cur.exists():
            cur.mkdir()
    return write_file(out / rel, data, mode=None)


def render_to(
    cfg: Config,
    out: Path,
    *,
    state_root: Path | None = None,
    facts: FactsSummary | None = None,
    force: bool = False,
) -> RenderResult:
    """Write every generated file under ``out``; remove the files an earlier render wrote that are no
    longer generated and are unchanged (the others are kept and reported). A file it would overwrite that
    gpustack's last render there did not write as it is now (yours, or edited since) is refused before anything
    is written (UsageError, exit 2), unless ``force``: then it is overwritten and reported. A path problem is a
    UsageError raised before anything is written."""
    files = {
        rel: content.encode("utf-8")
        for rel, content in generated_files(cfg, state_root=state_root, facts=facts).items()
    }
    _check_out_dir(out)
    listed = _listed(out) if out.is_dir() else {}
    replaced = _not_ours(out, files, listed)
    if replaced and not force:
        names = ", ".join(str(p.relative_to(out)) for p, _ in replaced)
        raise UsageError(
            f"--out {out}: would overwrite {len(replaced)} file(s) gpustack did not write there as they are now: {names}",
            hint="move them out of --out (or render into another directory); --force overwrites them",
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        written: list[tuple[Path, int]] = []
        digests: dict[str, str] = {}
        for rel, data in files.items():
            path = _write_inside(out, rel, data)
            written.append((path, len(data)))
            digests[rel] = _sha256(data)
        removed, kept = _remove_stale(out, {k: v for k, v in listed.items() if k not in files})
        manifest = {"format": MANIFEST_FORMAT, "files": dict(sorted(digests.items()))}
        write_file(out / MANIFEST, json.dumps(manifest, indent=1) + "\n", mode=None)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write {exc.filename or out}: {exc.strerror}") from None
    return RenderResult(written, removed, kept, replaced)
