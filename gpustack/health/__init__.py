"""``gpustack health``: GPU fault quarantine (off until enabled).

Modules: ``policy`` (the versioned table of fatal signals and its evaluation; pure), ``breaker`` (the
circuit breaker's ledger and decision; pure), ``actions`` (the node patches and the release rules; pure),
``collect`` (Nodes from the API, signals from Prometheus: the I/O of an evaluation), ``runner`` (evaluate,
reserve, patch, release), ``manifests`` (the scheduled in-cluster evaluation).
"""
