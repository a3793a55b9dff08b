"""TEST DOUBLE: a command (nvidia-smi, lspci) that prints what a gpu_probe capture recorded for the same argv.

    python3 tests/fakes/recorded_command.py CAPTURE_DIR PROGRAM [ARGS...]

``CAPTURE_DIR`` is a capture in scripts/gpu_probe.py's layout (``commands/<name>.json`` with ``argv`` and
``rc``, ``commands/<name>.txt`` with stdout), e.g. tests/fixtures/gpu-probe/replay-h100. The recorded entry
whose argv is ``[PROGRAM, *ARGS]`` is replayed: its stdout, its stderr, its exit status. Any other argv is not
recorded: a message on stderr and exit status 6 (nvidia-smi's "not supported" would be 3; 6 marks the double's
own refusal so a test can tell). A test puts a shim named PROGRAM on PATH that execs this file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NOT_RECORDED = 6


def replay(capture: Path, argv: list[str]) -> int:
    for meta in sorted((capture / "commands").glob("*.json")):
        info = json.loads(meta.read_text(encoding="utf-8"))
        if info.get("argv") == argv and info.get("rc") is not None:
            sys.stdout.write((capture / "commands" / f"{meta.stem}.txt").read_text(encoding="utf-8"))
            sys.stderr.write(info.get("stderr") or "")
            return int(info["rc"])
    sys.stderr.write(f"{argv[0]}: {' '.join(argv[1:])}: not recorded in {capture}\n")
    return NOT_RECORDED


if __name__ == "__main__":
    sys.exit(replay(Path(sys.argv[1]), sys.argv[2:]))
