"""``gpustack health``: GPU fault quarantine (off until enabled).

Modules: ``xids`` (the XID policy data ``templates/health/xid-policy.yaml``: NVIDIA's catalogue mapped to gpustack's actions;
pure), ``policy`` (its evaluation on a snapshot; pure), ``breaker`` (the circuit breaker's ledger and decision;
pure), ``ledger`` (the ledger ConfigMap, on the API server's clock), ``actions`` (the node patches and the
release rules; pure), ``collect`` (Nodes from the API, signals from Prometheus: the I/O of an evaluation),
``findings`` (what a run reports; pure), ``runner`` (evaluate, reserve, patch, release), ``manifests`` (the
scheduled in-cluster evaluation).
"""
