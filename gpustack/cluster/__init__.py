"""The running cluster, seen from this machine through Helm and the Kubernetes API.

layer.py          the cluster layer: namespaces, Secrets, Helm releases, CRDs, gpustack's objects
stage.py          the cluster stage (`up`, `upgrade --components`) as the engine's summary rows
drain.py          cordon and evict through the Eviction API (PodDisruptionBudgets respected)
skew.py           the Kubernetes version-skew policy (pure)
upgrade_record.py this machine's record of an upgrade (upgrade.json)
status.py         `gpustack status`: nodes, releases, the last run, an upgrade's progress
secrets.py        every Secret written again with the current encryption key (encryption turned on, key rotation)
"""
