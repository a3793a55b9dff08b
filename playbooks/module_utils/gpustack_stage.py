"""Stage stamps: how gpustack knows, in one read-only pass, that a stage has nothing to do.

At the end of a successful stage the playbook records a stamp on the host
(``/var/lib/gpustack/stages/<stage>.json``): the stage's input digest (computed by Python from
the playbooks and every variable the host receives) and the result of the stage's probes --
the sha256 of every file the stage manages, the state of its services, its sysctl values, its
packages and the exit codes of its read-only check commands. The preflight reads the probes
again: when the digest is the same and every probe reads as recorded, the stage is converged on
that host and its play skips the host. Anything else (new inputs, a changed or deleted file, a
stopped service, a removed package, a firewall chain another tool flushed, a missing stamp) runs
the whole stage, which repairs it and records a new stamp.

Standard library only (runs with the target's python3, 3.8 or newer). Pure functions
(``verdict``, ``parse_*``) are unit-tested; ``probe`` does the reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess

STAMP_DIR = "/var/lib/gpustack/stages"
STAMP_SCHEMA = 1
_CHUNK = 1 << 20


def stamp_path(stage, directory=STAMP_DIR):
    return os.path.join(directory, stage + ".json")


def file_digest(path):
    """sha256 of a file's contents; None when it does not exist; 'directory' for a directory;
    'unreadable: ...' when it cannot be read."""
    path = os.path.expanduser(path)
    if not os.path.lexists(path):
        return None
    if os.path.isdir(path):
        return "directory"
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while True:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    break
                digest.update(chunk)
        return digest.hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def read_sysctl(key):
    try:
        with open("/proc/sys/" + key.replace(".", "/")) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _run(argv, timeout=20):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout


def parse_systemctl_show(text, units):
    """``systemctl show -p Id -p ActiveState -p UnitFileState U...`` -> {unit: 'active/enabled'}."""
    out = {}
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    for unit, block in zip(units, blocks):  # noqa: B905 (targets may run Python 3.8)
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        out[unit] = f"{props.get('ActiveState', '?')}/{props.get('UnitFileState', '') or '-'}"
    for unit in units:
        out.setdefault(unit, "unknown")
    return out


def parse_dpkg_query(text, names):
    """``dpkg-query -W -f '${Package}\\t${Version}\\t${Status}\\n' N...`` -> {name: 'version status'}."""
    out = {name: None for name in names}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0] in out:
            out[fields[0]] = f"{fields[1]} {fields[2]}"
    return out


class Reads:
    """What the stages of one check share, read once: each file hashed once (/etc/os-release is in every stage),
    every stage's services in one ``systemctl show`` and every stage's packages in one ``dpkg-query``
    (:meth:`prefetch`); the rest as it is asked for."""

    def __init__(self):
        self.files = {}
        self.services = {}
        self.packages = {}

    def prefetch(self, specs):
        self.service_states(sorted({u for spec in specs for u in spec.get("services") or []}))
        self.package_states(sorted({n for spec in specs for n in spec.get("packages") or []}))

    def file(self, path):
        if path not in self.files:
            self.files[path] = file_digest(path)
        return self.files[path]

    def service_states(self, units):
        missing = [u for u in units if u not in self.services]
        if missing:
            rc, text = _run(["systemctl", "show", "-p", "ActiveState", "-p", "UnitFileState", "--", *missing])
            self.services.update(parse_systemctl_show(text if rc == 0 else "", missing))
        return {u: self.services[u] for u in units}

    def package_states(self, names):
        missing = [n for n in names if n not in self.packages]
        if missing:
            _rc, text = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n", "--", *missing])
            self.packages.update(parse_dpkg_query(text, missing))
        return {n: self.packages[n] for n in names}


def probe(spec, reads=None):
    """Read every probe of a stage spec: files, services, sysctl, packages, commands (through ``reads``, shared
    by the stages of one check)."""
    reads = reads or Reads()
    commands = spec.get("commands") or {}
    return {
        "files": {path: reads.file(path) for path in sorted({path for path in spec.get("files") or [] if path})},
        "sysctl": {key: read_sysctl(key) for key in sorted(set(spec.get("sysctl") or []))},
        "services": reads.service_states(sorted(set(spec.get("services") or []))),
        "packages": reads.package_states(sorted(set(spec.get("packages") or []))),
        "commands": {name: command_result(list(argv)) for name, argv in sorted(commands.items())},
    }


def command_result(argv):
    """'rc=N out=<sha256 prefix of stdout>': a check command's exit code and what it printed."""
    rc, out = _run(argv)
    return f"rc={rc} out={hashlib.sha256(out.encode('utf-8', 'replace')).hexdigest()[:16]}"


def verdict(stamp, digest, current):
    """(converged, reasons): converged when the stamp has this digest and every probe reads as
    recorded. ``reasons`` say why not, for the run log (first few differences)."""
    if not stamp:
        return False, ["no stamp: the stage never completed on this host"]
    if stamp.get("schema") != STAMP_SCHEMA:
        return False, [f"stamp schema {stamp.get('schema')!r}, expected {STAMP_SCHEMA!r}"]
    if stamp.get("digest") != digest:
        return False, ["inputs changed (playbooks, configuration or versions)"]
    recorded = stamp.get("probes") or {}
    reasons = []
    for kind in ("files", "services", "sysctl", "packages", "commands"):
        old, new = recorded.get(kind) or {}, current.get(kind) or {}
        for key in sorted(set(old) | set(new)):
            if (key in old) != (key in new) or old.get(key) != new.get(key):
                reasons.append(f"{kind[:-1]} {key}: recorded {_short(old.get(key))}, now {_short(new.get(key))}")
    for key, value in sorted((current.get("files") or {}).items()):
        if isinstance(value, str) and value.startswith("unreadable"):
            reasons.append(f"file {key}: {value}")
    return not reasons, reasons[:5]


def _short(value):
    if isinstance(value, str) and len(value) == 64:
        return value[:12]
    return json.dumps(value)


def read_stamp(stage, directory=STAMP_DIR):
    try:
        with open(stamp_path(stage, directory)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_stamp(stage, digest, probes, directory=STAMP_DIR):
    """Atomically write the stamp (0600, directory 0700)."""
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700)
    data = {"schema": STAMP_SCHEMA, "stage": stage, "digest": digest, "probes": probes}
    path = stamp_path(stage, directory)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return data


def remove_stamp(stage, directory=STAMP_DIR):
    """Forget a stamp (before a stage runs: an interrupted run must never look converged)."""
    try:
        os.unlink(stamp_path(stage, directory))
        return True
    except FileNotFoundError:
        return False


def check_stages(stages, directory=STAMP_DIR):
    """{stage: {"converged": bool, "reasons": [...]}} for {stage: {"digest", "probes"}}."""
    out = {}
    reads = Reads()
    reads.prefetch([item.get("probes") or {} for item in stages.values()])
    for stage, item in sorted(stages.items()):
        current = probe(item.get("probes") or {}, reads)
        converged, reasons = verdict(read_stamp(stage, directory), item.get("digest") or "", current)
        out[stage] = {"converged": converged, "reasons": reasons}
    return out
