"""First-run installation, used by scripts/gpustack (the launcher) and scripts/test.sh:
``python -m gpustack.bootstrap collections`` installs the pinned Ansible collections the playbooks
use (gpustack/config/pins.py) next to ansible-core, in this interpreter's site-packages, where
ansible-core finds them (``ansible_collections`` on sys.path). A no-op when they are there.

Standard library only apart from pip: it runs right after ``pip install gpustack``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from gpustack.config import pins


def site_dir() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def installed_version(fqcn: str, root: Path) -> str | None:
    ns, name = fqcn.split(".")
    manifest = root / "ansible_collections" / ns / name / "MANIFEST.json"
    try:
        return str(json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def missing(root: Path) -> dict[str, str]:
    """Collections (fqcn -> pinned version) that are absent or at another version under ``root``."""
    return {c: v for c, v in pins.ANSIBLE_COLLECTIONS.items() if installed_version(c, root) != v}


def _download(dest: Path, log: Callable[[str], None]) -> Path:
    pkg, version, sha256 = pins.ANSIBLE_COLLECTIONS_WHEEL
    req = dest / "requirements.txt"
    req.write_text(f"{pkg}=={version} --hash=sha256:{sha256}\n", encoding="utf-8")
    log(f"downloading the {pkg} {version} wheel (~54 MB, sha256-checked) for its collections")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
         "--only-binary=:all:", "--require-hashes", "-r", str(req), "-d", str(dest)],
        check=True,
    )  # fmt: skip
    return next(dest.glob(f"{pkg}-{version}-*.whl"))


def extract(wheel: Path, need: dict[str, str], root: Path, log: Callable[[str], None]) -> None:
    """Unpack only the ``need``ed collection directories from ``wheel`` into ``root``; each replaces
    any other version atomically (unpacked beside it, then renamed)."""
    with zipfile.ZipFile(wheel) as zf:
        for fqcn, version in need.items():
            ns, name = fqcn.split(".")
            prefix = f"ansible_collections/{ns}/{name}/"
            members = [m for m in zf.namelist() if m.startswith(prefix)]
            if not members:
                raise RuntimeError(f"{wheel.name} has no {fqcn}")
            target = root / "ansible_collections" / ns / name
            staging = target.with_name(f".{name}.new")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            for m in members:
                rel = m[len(prefix) :]
                if not rel or m.endswith("/"):
                    continue
                out = staging / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(m) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
            manifest = json.loads((staging / "MANIFEST.json").read_text(encoding="utf-8"))
            got = manifest["collection_info"]["version"]
            if got != version:
                shutil.rmtree(staging)
                raise RuntimeError(f"{wheel.name} carries {fqcn} {got}, not the pinned {version}")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
            log(f"installed {fqcn} {version} ({len(members)} files)")


def install_collections(root: Path | None = None, *, log: Callable[[str], None] = print) -> list[str]:
    root = root or site_dir()
    need = missing(root)
    if not need:
        return []
    log("Ansible collections: " + ", ".join(f"{c} {v}" for c, v in need.items()))
    with tempfile.TemporaryDirectory(prefix="gpustack-collections-") as tmp:
        extract(_download(Path(tmp), log), need, root, log)
    return sorted(need)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["collections"]:
        print("usage: python -m gpustack.bootstrap collections", file=sys.stderr)
        return 2
    try:
        install_collections(log=lambda m: print(f"gpustack: {m}", file=sys.stderr, flush=True))
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"gpustack: installing the Ansible collections failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
