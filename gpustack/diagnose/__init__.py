"""verify and doctor: collect once into a Snapshot, analyse with pure checks, report.

Modules: ``snapshot`` (the collected data, JSON-serialisable), ``registry`` (check ids, layers,
which command runs them), ``report`` (table / json / junit), ``collect_*`` (the only I/O),
``checks_*`` (pure functions Snapshot -> Findings), ``engine`` (wiring, exit codes).
"""

from __future__ import annotations


def import_all(prefix: str) -> None:
    """Import every ``gpustack.diagnose.<prefix>*`` module, so its checks or sources register."""
    import importlib
    import pkgutil

    for mod in pkgutil.iter_modules(__path__):
        if mod.name.startswith(prefix):
            importlib.import_module(f"{__name__}.{mod.name}")
