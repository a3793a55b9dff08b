#!/usr/bin/env python3
"""Probe a real NVIDIA GPU machine the way gpustack reads one, save the raw outputs as test data, compare them
with the recorded data the tests use. See docs/gpu-probe.md.

    python3 scripts/gpu_probe.py --out "$OUT"          # as root on the GPU machine; a minute or two
    python3 scripts/gpu_probe.py --replay DIR --out X   # analyse a saved capture again (no machine access)

Capture (read-only): the commands in :data:`COMMANDS`, the files in :data:`FILES`, sysfs PCI devices, /dev/nvidia*
nodes, /dev/char links and the host facts of playbooks/library/gpustack_facts.py (``collect()``, loaded by path).
Analysis: gpustack's parsers on the raw data, cross-checks between the sources, the facts against
tests/fixtures/facts, the capture against tests/fixtures/gpu-probe, and gpustack's preflight (gpustack/checks;
needs pydantic and PyYAML, else reported as not run) on the new and the recorded facts, side by side.

Output, under ``--out`` (default ``$OUT``, else ./gpu-probe-out), in the layout of tests/fixtures::

    summary.json, summary.txt                 every probe (ok / failed / missing) and every comparison
    fixtures/facts/<label>.json               gpustack_facts output (as tests/fixtures/facts/*.json)
    fixtures/gpu-probe/<label>/commands/      <name>.txt (stdout) and <name>.json (argv, rc, stderr, seconds)
    fixtures/gpu-probe/<label>/files/         raw files, path kept (':' written as '_'; files.json maps them)
    fixtures/gpu-probe/<label>/sysfs-pci.json, dev-nodes.json, dev-char.json, preflight.json

Exit status 0 whatever a probe found (failures are in the summary); 2 only for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / "tests" / "fixtures"
QUERY_FIELDS = "index,name,uuid,pci.bus_id,driver_version,memory.total,compute_cap,mig.mode.current"

#: (name, argv, why gpustack cares)
COMMANDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("nvidia-smi", ("nvidia-smi",), "verify's CUDA pod runs it (gpustack/diagnose/collect_workload.py cuda_pod)"),
    ("nvidia-smi-L", ("nvidia-smi", "-L"), "what doctor's fixes tell users to run; the test doubles print its lines"),
    ("nvidia-smi-query-gpu", ("nvidia-smi", f"--query-gpu={QUERY_FIELDS}", "--format=csv"), "cross-checks"),
    ("nvidia-smi-q", ("nvidia-smi", "-q"), "the full report the alert texts point to"),
    ("nvidia-smi-q-x", ("nvidia-smi", "-q", "-x"), "the same as XML"),
    ("nvidia-smi-topo-m", ("nvidia-smi", "topo", "-m"), "NVLink/NVSwitch topology (fabric manager check)"),
    ("nvidia-smi-nvlink-s", ("nvidia-smi", "nvlink", "-s"), "named by the DCGM diag findings"),
    ("lspci-nvidia", ("lspci", "-nn", "-D", "-d", "10de:"), "the PCI view of gpustack_facts, by another tool"),
    ("lsmod", ("lsmod",), "loaded modules (nvidia, nouveau)"),
    ("uname-a", ("uname", "-a"), "kernel"),
    ("nvidia-ctk-version", ("nvidia-ctk", "--version"), "the container toolkit gpustack_facts looks for"),
    ("fabricmanager-active", ("systemctl", "is-active", "nvidia-fabricmanager"), "gpustack_facts fabricmanager"),
    ("persistenced-active", ("systemctl", "is-active", "nvidia-persistenced"), "driver persistence"),
    ("dcgmi-discovery", ("dcgmi", "discovery", "-l"), "DCGM on the host, if any (diag runs it in a pod)"),
    ("dmesg", ("dmesg",), "kernel log; only NVRM / Xid / nvidia lines are kept"),
)
#: probes whose exit status is the answer (systemctl is-active: 3 = inactive), not a failure
ANY_STATUS = frozenset({"fabricmanager-active", "persistenced-active"})
#: files and directories copied as they are (gpustack_facts reads the first four)
FILES = ("/proc/driver/nvidia", "/sys/module/nvidia/version", "/proc/modules", "/etc/os-release",
         "/proc/version", "/proc/cmdline", "/sys/firmware/efi/efivars")  # fmt: skip
MAX_FILE = 1 << 20
DMESG_KEEP = re.compile(r"NVRM|Xid|nvidia|nouveau", re.I)
#: one line of `nvidia-smi -L` (upstream shape: tests/prometheus/test_verify_cli.py NVIDIA_SMI)
SMI_LIST_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-f-]+)\)$")
SMI_HEADER = re.compile(r"Driver Version:\s*([0-9.]+)\s+CUDA Version:\s*([0-9.]+)")


def parse_smi_header(text: str) -> dict[str, str] | None:
    """Driver and CUDA version from the banner of plain ``nvidia-smi``."""
    m = SMI_HEADER.search(text)
    return {"driver": m.group(1), "cuda": m.group(2)} if m else None


def parse_smi_list(text: str) -> list[dict[str, str]]:
    """GPUs of ``nvidia-smi -L`` (MIG device lines, indented, are not GPUs)."""
    return [{"index": m.group(1), "name": m.group(2), "uuid": m.group(3)}
            for line in text.splitlines() if (m := SMI_LIST_LINE.match(line))]  # fmt: skip


def parse_query_csv(text: str) -> list[dict[str, str]]:
    """Rows of ``nvidia-smi --query-gpu=... --format=csv`` keyed by the header's field names."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    keys = [k.strip().split(" [")[0] for k in lines[0].split(",")]
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=False)) for line in lines[1:]]


def pci_address(bus_id: str) -> str:
    """nvidia-smi's ``00000000:18:00.0`` -> sysfs's ``0000:18:00.0``."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def label_for(facts: Mapping[str, Any], gpus: Sequence[Mapping[str, str]]) -> str:
    """``ubuntu2204-h100-80gb-hbm3``: OS, release and the first GPU's model."""
    os_part = f"{facts.get('os_id', 'unknown')}{str(facts.get('os_version_id', '')).replace('.', '')}"
    model = gpus[0]["name"] if gpus else "no-gpu"
    model = re.sub(r"^nvidia\s+", "", model, flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", f"{os_part}-{model}".lower()).strip("-")


#: facts whose value is a record of named fields (compared field by field); other mappings are data (peers by address)
NESTED_FACTS = ("kubernetes", "containerd", "fabricmanager", "unattended_upgrades", "firewall")


def compare_facts(recorded: Mapping[str, Any], got: Mapping[str, Any]) -> dict[str, list[str]]:
    """Field differences (and in :data:`NESTED_FACTS`): recorded fields the new facts lack, new fields, changed types."""
    out: dict[str, list[str]] = {"missing": [], "new": [], "type_changed": []}

    def walk(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str, depth: int) -> None:
        for key in sorted(set(a) | set(b)):
            path = f"{prefix}{key}"
            if key not in b:
                out["missing"].append(path)
            elif key not in a:
                out["new"].append(path)
            elif isinstance(a[key], dict) and isinstance(b[key], dict) and depth < 1 and key in NESTED_FACTS:
                walk(a[key], b[key], path + ".", depth + 1)
            elif None not in (a[key], b[key]) and type(a[key]) is not type(b[key]):
                out["type_changed"].append(f"{path}: {type(a[key]).__name__} -> {type(b[key]).__name__}")

    walk(recorded, got, "", 0)
    return out


GPU_FIELDS = ("nvidia_pci_devices", "nvidia_nvswitches", "nvidia_driver_version", "nvidia_smi",
              "nvidia_container_toolkit", "nouveau_loaded", "secure_boot", "nvidia_dev_char_symlinks",
              "fabricmanager", "os_id", "os_version_id", "kernel", "arch")  # fmt: skip


def value_differences(recorded: Mapping[str, Any], got: Mapping[str, Any]) -> list[str]:
    """The GPU, OS and kernel facts whose values differ (lists of devices by count and device id)."""
    out = []
    for key in GPU_FIELDS:
        a, b = recorded.get(key), got.get(key)
        if key == "nvidia_pci_devices":
            a = sorted({d.get("device_id") for d in a or []}), len(a or [])
            b = sorted({d.get("device_id") for d in b or []}), len(b or [])
        if a != b:
            out.append(f"{key}: recorded {a!r}, here {b!r}")
    return out


def compare_captures(recorded: Mapping[str, Any], got: Mapping[str, Any]) -> dict[str, list[str]]:
    """A capture against a recorded one (tests/fixtures/gpu-probe/*): commands that answered there but not here,
    files there but not here, other --query-gpu columns, other keys in the JSON captures' entries."""
    ok = lambda cap: {n for n, i in cap["commands"].items() if i.get("rc") == 0}  # noqa: E731
    header = lambda cap: (stdout_of(cap, "nvidia-smi-query-gpu") or "").split("\n", 1)[0]  # noqa: E731
    keys = lambda entries: sorted({k for e in entries for k in e})  # noqa: E731
    out = {
        "commands not answering here": sorted(ok(recorded) - ok(got)),
        "files absent here": sorted(set(recorded["files"]) - set(got["files"])),
        "query-gpu header": [] if not header(got) or header(recorded) == header(got)
        else [f"recorded {header(recorded)!r}, here {header(got)!r}"],
    }  # fmt: skip
    for name in ("pci", "dev_nodes"):
        if recorded[name] and got[name] and keys(recorded[name]) != keys(got[name]):
            out.setdefault("entry keys", []).append(f"{name}: recorded {keys(recorded[name])}, here {keys(got[name])}")
    return out


def check(name: str, values: Mapping[str, object]) -> dict[str, Any]:
    """One cross-check: ``ok`` when every available source agrees, ``differs`` when not, ``not run`` when fewer
    than two sources had an answer."""
    known = {json.dumps(v, sort_keys=True) for v in values.values() if v is not None}
    answered = sum(v is not None for v in values.values())
    status = "not run" if answered < 2 else ("ok" if len(known) == 1 else "differs")
    return {"check": name, "status": status, "values": dict(values)}


# ------------------------------------------------------------------------------------------------ capture (I/O)


def run_command(argv: Sequence[str], timeout: float) -> dict[str, Any]:
    if shutil.which(argv[0]) is None:
        return {"argv": list(argv), "rc": None, "stdout": "", "stderr": "", "seconds": 0.0, "error": "not installed"}
    env = dict(os.environ, LC_ALL="C", LANG="C")
    start = time.monotonic()
    try:
        proc = subprocess.run(list(argv), capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL,
                              check=False)  # fmt: skip
        out, err, rc, error = proc.stdout, proc.stderr, proc.returncode, None
    except subprocess.TimeoutExpired as exc:
        out, err, rc, error = exc.stdout or b"", exc.stderr or b"", None, f"timed out after {timeout:.0f} s"
    except OSError as exc:
        out, err, rc, error = b"", b"", None, str(exc)
    if rc not in (0, None) and error is None:
        error = f"exit status {rc}"
    return {"argv": list(argv), "rc": rc, "stdout": out.decode("utf-8", "replace"),
            "stderr": err.decode("utf-8", "replace")[-4000:], "seconds": round(time.monotonic() - start, 2),
            "error": error}  # fmt: skip


def write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


def write_json(path: Path, data: Any) -> None:
    write(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def capture_files(dest: Path) -> list[dict[str, Any]]:
    """Copy :data:`FILES` (directories walked) under ``dest/files``; a manifest entry per file."""
    entries: list[dict[str, Any]] = []
    for top in FILES:
        paths = [top]
        if os.path.isdir(top):
            paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs)
        elif not os.path.exists(top):
            entries.append({"path": top, "error": "absent"})
            continue
        for path in paths:
            if "efivars" in path and "SecureBoot" not in path:
                continue  # only the Secure Boot variable gpustack_facts reads
            try:
                with open(path, "rb") as fh:
                    data = fh.read(MAX_FILE)
            except OSError as exc:
                entries.append({"path": path, "error": str(exc)})
                continue
            saved = "files/" + path.lstrip("/").replace(":", "_")  # ':' is no file name for every tool
            write(dest / saved, data)
            entries.append({"path": path, "saved": saved, "bytes": len(data)})
    return entries


def capture_dev_nodes() -> list[dict[str, Any]]:
    out = []
    for path in sorted(Path("/dev").glob("nvidia*")):
        try:
            st = path.lstat()
        except OSError:
            continue
        entry: dict[str, Any] = {"path": str(path), "mode": oct(stat.S_IMODE(st.st_mode))}
        if stat.S_ISCHR(st.st_mode):
            entry.update(kind="char", major=os.major(st.st_rdev), minor=os.minor(st.st_rdev))
        else:
            entry["kind"] = "dir" if stat.S_ISDIR(st.st_mode) else "other"
        out.append(entry)
    return out


def load_facts_module() -> ModuleType:
    """playbooks/library/gpustack_facts.py, with its module_utils under the names Ansible gives them."""

    def load(name: str, path: Path) -> ModuleType:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    # every module_utils file, each after the ones it imports (they import each other at module level): a file
    # whose import is not loaded yet is tried again after the others
    pending = sorted((REPO / "playbooks" / "module_utils").glob("*.py"))
    while pending:
        left = []
        for path in pending:
            try:
                load(f"ansible.module_utils.{path.stem}", path)
            except ModuleNotFoundError as exc:
                # not loaded yet: a sibling (found under its full name in sys.modules once loaded, even where
                # Ansible itself is not installed, as under python3 -S)
                if not (exc.name in ("ansible", "ansible.module_utils")
                        or (exc.name or "").startswith("ansible.module_utils.gpustack")):  # fmt: skip
                    raise
                sys.modules.pop(f"ansible.module_utils.{path.stem}", None)
                left.append(path)
        if len(left) == len(pending):
            raise ModuleNotFoundError(f"module_utils that import each other in a circle: {[p.name for p in left]}")
        pending = left
    return load("gpustack_facts_probe", REPO / "playbooks" / "library" / "gpustack_facts.py")


def read_capture(raw: Path) -> dict[str, Any]:
    """What a capture directory holds: command stdout by name, files by original path, the JSON captures."""
    commands = {}
    for meta in sorted((raw / "commands").glob("*.json")):
        info = json.loads(meta.read_text())
        info["stdout"] = (raw / "commands" / f"{meta.stem}.txt").read_text(encoding="utf-8")
        commands[meta.stem] = info
    manifest = json.loads((raw / "files.json").read_text()) if (raw / "files.json").exists() else []
    files = {e["path"]: (raw / e["saved"]).read_bytes() for e in manifest if e.get("saved")}

    def load(name: str, default: Any) -> Any:
        return json.loads((raw / name).read_text()) if (raw / name).exists() else default

    return {"commands": commands, "files": files, "pci": load("sysfs-pci.json", []),
            "dev_nodes": load("dev-nodes.json", []), "dev_char": load("dev-char.json", {})}  # fmt: skip


def stdout_of(cap: Mapping[str, Any], name: str) -> str | None:
    info = cap["commands"].get(name)
    return info["stdout"] if info and info.get("rc") == 0 else None


def cross_checks(cap: Mapping[str, Any], facts_mod: ModuleType) -> list[dict[str, Any]]:
    """gpustack's parsers on the raw data, and the sources checked against each other."""
    text = lambda p: cap["files"][p].decode("utf-8", "replace") if p in cap["files"] else None  # noqa: E731
    proc_version = text("/proc/driver/nvidia/version")
    header = parse_smi_header(stdout_of(cap, "nvidia-smi") or "")
    listed = parse_smi_list(stdout_of(cap, "nvidia-smi-L") or "")
    rows = parse_query_csv(stdout_of(cap, "nvidia-smi-query-gpu") or "")
    gpus = facts_mod.parse_pci_devices(cap["pci"]) if cap["pci"] else None
    drivers = sorted({r.get("driver_version", "") for r in rows}) if rows else None
    modules = text("/proc/modules")
    minors = sorted(n["minor"] for n in cap["dev_nodes"] if re.fullmatch(r"/dev/nvidia\d+", n["path"]))
    out = [
        check("driver version (/proc/driver/nvidia/version via parse_nvidia_version; nvidia-smi banner; "
              "--query-gpu driver_version)",
              {"proc": facts_mod.parse_nvidia_version(proc_version) if proc_version else None,
               "nvidia-smi": header["driver"] if header else None,
               "query-gpu": drivers[0] if drivers and len(drivers) == 1 else drivers}),
        check("GPU count (sysfs PCI via parse_pci_devices; nvidia-smi -L; --query-gpu)",
              {"pci": len(gpus) if gpus is not None else None, "nvidia-smi -L": len(listed) if listed else None,
               "query-gpu": len(rows) if rows else None}),
        check("PCI addresses (sysfs vs --query-gpu pci.bus_id)",
              {"pci": sorted(g["slot"] for g in gpus) if gpus else None,
               "query-gpu": sorted(pci_address(r["pci.bus_id"]) for r in rows if r.get("pci.bus_id")) or None}),
        check("GPU names (nvidia-smi -L vs --query-gpu)",
              {"nvidia-smi -L": [g["name"] for g in listed] or None, "query-gpu": [r.get("name") for r in rows] or None}),
        check("device nodes /dev/nvidiaN (one per GPU) vs nvidia-smi -L",
              {"dev": minors or None, "nvidia-smi -L": [int(g["index"]) for g in listed] or None}),
    ]  # fmt: skip
    has = {n["path"] for n in cap["dev_nodes"]}
    out.append({"check": "control device nodes /dev/nvidiactl, /dev/nvidia-uvm",
                "status": "ok" if {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= has else ("not run" if not has else "differs"),
                "values": {"present": sorted(has)}})  # fmt: skip
    if modules is not None:
        loaded = {line.split()[0] for line in modules.splitlines() if line.split()}
        out.append({"check": "modules: nvidia loaded, nouveau not (parse_modules_nouveau)",
                    "status": "ok" if "nvidia" in loaded and not facts_mod.parse_modules_nouveau(modules) else "differs",
                    "values": {"nvidia": "nvidia" in loaded, "nvidia_uvm": "nvidia_uvm" in loaded,
                               "nouveau": facts_mod.parse_modules_nouveau(modules)}})  # fmt: skip
    symlinks = facts_mod.derive_dev_char_symlinks(bool(proc_version), cap["dev_char"])
    out.append({"check": "/dev/char links to NVIDIA nodes (derive_dev_char_symlinks)",
                "status": "ok" if symlinks else ("not run" if symlinks is None else "differs"),
                "values": {"symlinks": symlinks, "links": len(cap["dev_char"])}})  # fmt: skip
    smi_l = stdout_of(cap, "nvidia-smi-L")
    if smi_l is not None:
        odd = [line for line in smi_l.splitlines() if line.strip() and not SMI_LIST_LINE.match(line)
               and not line.startswith("  MIG")]  # fmt: skip
        out.append({"check": "nvidia-smi -L lines have the recorded shape (GPU N: NAME (UUID: GPU-...))",
                    "status": "ok" if not odd and listed else "differs", "values": {"other lines": odd[:5]}})  # fmt: skip
    return out


def preflight(facts_by_label: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """gpustack's preflight checks (gpustack/checks) on each facts set; needs gpustack's dependencies."""
    try:
        sys.path.insert(0, str(REPO))
        from gpustack.checks import preflight as pf
        from gpustack.config.model import Config
    except ImportError as exc:
        return {"status": "not run", "error": f"{exc} (run with the python of gpustack's venv, or pip install -e .)"}
    out: dict[str, Any] = {"status": "ok", "findings": {}}
    for label, facts in facts_by_label.items():
        name = re.sub(r"[^a-z0-9-]+", "-", label.lower())[:63].strip("-") or "node"
        cfg = Config.model_validate({"nodes": [{"name": name, "address": "192.0.2.10", "role": "control-plane",
                                                "connection": "local"}]})  # fmt: skip
        findings = pf.run_checks(cfg, {name: facts})
        out["findings"][label] = {f.id: {"status": f.status, "summary": f.summary} for f in findings}
    return out


def capture(raw: Path, timeout: float, failures: list[str], facts_mod: ModuleType) -> None:
    for name, argv, _why in COMMANDS:
        result = run_command(argv, timeout)
        if name in ANY_STATUS and result["rc"] is not None:
            result["error"] = None
        if name == "dmesg":
            result["stdout"] = "".join(line + "\n" for line in result["stdout"].splitlines() if DMESG_KEEP.search(line))
        write(raw / "commands" / f"{name}.txt", result.pop("stdout"))
        write_json(raw / "commands" / f"{name}.json", result)
        if result["error"]:
            failures.append(f"{' '.join(argv)}: {result['error']}")
    steps: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("files.json", lambda: capture_files(raw)),
        ("sysfs-pci.json", facts_mod.collect_pci_raw),  # the exact input of parse_pci_devices / parse_nvswitches
        ("dev-nodes.json", capture_dev_nodes),
        ("dev-char.json", lambda: {k: v for k, v in facts_mod.collect_dev_char_links().items() if "nvidia" in v}),
    )
    for name, step in steps:
        try:
            write_json(raw / name, step())
        except Exception as exc:  # a probe that breaks is recorded, the others still run
            failures.append(f"{name}: {type(exc).__name__}: {exc}")


def guarded(failures: list[str], what: str, fn: Callable[[], Any], default: Any) -> Any:
    try:
        return fn()
    except Exception as exc:
        failures.append(f"{what}: {type(exc).__name__}: {exc}")
        traceback.print_exc(file=sys.stderr)
        return default


def render(summary: Mapping[str, Any]) -> str:
    lines = [f"gpu_probe {summary['started']} on {summary['host']} (label {summary['label']})", "", "probes:"]
    lines += [f"  {p['status']:<8} {p['name']:<22} {p['detail']}" for p in summary["probes"]]
    lines += ["", "cross-checks:"] + [f"  {c['status']:<8} {c['check']}: {json.dumps(c['values'])}"
                                       for c in summary["cross_checks"]]  # fmt: skip
    for fixture, diff in summary["facts_vs_recorded"].items():
        lines += ["", f"facts vs recorded {fixture}:"] + [f"  {k}: {', '.join(v) or 'none'}" for k, v in diff.items()]
    for capture, diff in summary["capture_vs_recorded"].items():
        lines += ["", f"capture vs recorded {capture}:"] + [f"  {k}: {', '.join(v) or 'none'}" for k, v in diff.items()]
    pre = summary["preflight"]
    lines += ["", f"preflight: {pre['status']}" + (f" ({pre['error']})" if pre.get("error") else "")]
    lines += [f"  {d}" for d in summary.get("preflight_differences", [])]
    lines += ["", f"failures ({len(summary['failures'])}):"] + [f"  {f}" for f in summary["failures"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-probe-out"))
    parser.add_argument("--label", help="fixture name (default: OS, release and GPU model)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per command (default 60)")
    parser.add_argument("--replay", type=Path, help="analyse this saved capture (fixtures/gpu-probe/<label>)")
    parser.add_argument("--recorded", type=Path, default=RECORDED, help="the recorded fixtures to compare with")
    args = parser.parse_args(argv)
    if args.replay and not (args.replay / "commands").is_dir():
        parser.error(f"--replay {args.replay}: not a capture (no commands/ directory)")
    try:
        return probe(args)
    except Exception:  # the summary says what broke; the exit status stays 0 (see the module docstring)
        text = traceback.format_exc()
        write_json(args.out / "summary.json", {"failures": [f"gpu_probe itself failed: {text}"]})
        write(args.out / "summary.txt", f"gpu_probe itself failed:\n{text}")
        print(f"gpu_probe: failed, see {args.out / 'summary.txt'}\n{text}", file=sys.stderr)
        return 0


def probe(args: argparse.Namespace) -> int:
    """Capture (unless ``--replay``), analyse, write the summary."""
    failures: list[str] = []
    started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    facts_mod = load_facts_module()
    tmp = args.out / "fixtures" / "gpu-probe" / ".capture"
    if args.replay:
        raw, facts = args.replay, None
        facts_file = args.replay.parent.parent / "facts" / f"{args.replay.name}.json"
        if facts_file.exists():
            facts = json.loads(facts_file.read_text())
    else:
        shutil.rmtree(tmp, ignore_errors=True)
        capture(tmp, args.timeout, failures, facts_mod)
        facts = guarded(failures, "gpustack_facts collect()", lambda: facts_mod.collect(False, [], 22, 1.0), None)
        raw = tmp
    cap = read_capture(raw)
    label = args.label or (args.replay.name if args.replay else
                           label_for(facts or {}, parse_smi_list(stdout_of(cap, "nvidia-smi-L") or "")))  # fmt: skip
    if not args.replay:
        final = args.out / "fixtures" / "gpu-probe" / label
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        raw = final
        if facts is not None:
            write_json(args.out / "fixtures" / "facts" / f"{label}.json", facts)
    recorded = {p.stem: json.loads(p.read_text()) for p in sorted((args.recorded / "facts").glob("*.json"))
                if p.stem != label}  # fmt: skip
    captures = {p.name: p for p in sorted((args.recorded / "gpu-probe").glob("*")) if p.is_dir() and p.name != label}
    vs_captures = {name: guarded(failures, f"compare with {name}", lambda p=p: compare_captures(read_capture(p), cap),
                                 {}) for name, p in captures.items()}  # fmt: skip
    checks = guarded(failures, "cross-checks", lambda: cross_checks(cap, facts_mod), [])
    pre = guarded(failures, "preflight", lambda: preflight({label: facts or {}, **recorded}) if facts else
                  {"status": "not run", "error": "no facts"}, {"status": "failed"})  # fmt: skip
    pre_diff = []
    for fixture in recorded:
        mine, theirs = pre.get("findings", {}).get(label, {}), pre.get("findings", {}).get(fixture, {})
        pre_diff += [f"{cid}: recorded {fixture} {theirs.get(cid, {}).get('status')}, here "
                     f"{mine.get(cid, {}).get('status')} ({mine.get(cid, theirs.get(cid, {})).get('summary', '')})"
                     for cid in sorted(set(mine) | set(theirs))
                     if mine.get(cid, {}).get("status") != theirs.get(cid, {}).get("status")]  # fmt: skip
    if pre.get("findings"):
        write_json(raw / "preflight.json", pre["findings"].get(label, {}))
    probes = [{"name": n, "status": "missing" if i.get("error") == "not installed" else ("failed" if i.get("error") else "ok"),
               "detail": i.get("error") or f"{len(i['stdout'].splitlines())} lines, {i.get('seconds')} s"}
              for n, i in cap["commands"].items()]  # fmt: skip
    summary = {
        "started": started, "host": socket.gethostname(), "label": label, "replay": str(args.replay or ""),
        "output": str(raw), "probes": probes, "cross_checks": checks,
        "facts_vs_recorded": {f: {**compare_facts(r, facts), "values": value_differences(r, facts)}
                              for f, r in recorded.items()} if facts else {},
        "capture_vs_recorded": vs_captures,
        "preflight": {k: v for k, v in pre.items() if k != "findings"}, "preflight_differences": pre_diff,
        "failures": failures,
    }  # fmt: skip
    write_json(args.out / "summary.json", summary)
    write(args.out / "summary.txt", render(summary))
    print(render(summary), end="")
    print(f"gpu_probe: {sum(p['status'] == 'ok' for p in probes)}/{len(probes)} probes ok, "
          f"{sum(c['status'] == 'ok' for c in checks)}/{len(checks)} cross-checks ok, "
          f"{len(failures)} failure(s); saved under {args.out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
