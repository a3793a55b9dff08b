"""verify and doctor: collect once into a Snapshot, analyse with pure checks, report.

Modules: ``snapshot`` (the collected data, JSON-serialisable), ``registry`` (check ids, layers,
which command runs them), ``report`` (table / json / junit), ``collect_*`` (the only I/O),
``checks_*`` (pure functions Snapshot -> Findings), ``engine`` (wiring, exit codes).
"""
