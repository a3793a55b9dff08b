"""One mutator for the fuzz tests that feed real documents with one subtree broken (doctor's checks in
tests/unit/diagnose/test_robustness.py, DCGM's documents in tests/unit/diag/test_dcgmi_fuzz.py)."""

from __future__ import annotations

import random
from typing import Any


def mangle(obj: Any, rnd: random.Random, junk: Any, *, descend: float = 0.75, delete: float = 0.4) -> None:
    """Replace or delete one random subtree of ``obj`` (in place): walk down while ``rnd`` says so (each step
    with probability ``descend``), then delete that key (probability ``delete``, dicts only) or put ``junk``
    there."""
    path: list[tuple[Any, Any]] = []
    cur = obj
    while isinstance(cur, dict | list) and cur and rnd.random() < descend:
        key = rnd.choice(list(cur)) if isinstance(cur, dict) else rnd.randrange(len(cur))
        path.append((cur, key))
        cur = cur[key]
    if not path:
        return
    parent, key = path[-1]
    if rnd.random() < delete and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = junk
