"""``gpustack diag``: DCGM diagnostics (``dcgmi diag -r LEVEL -j``) and health checks (``dcgmi health -c
-j``) in one Kubernetes Job per GPU node, reported in the same table / json / junit as doctor.

Modules: ``dcgmi`` (the JSON dcgmi prints -> typed results; pure), ``job`` (the Job object, the
timeouts per level, which pods use a node's GPUs; pure), ``findings`` (results -> Findings with
``D..`` check ids; pure), ``runner`` (the only I/O: create, watch, collect, clean up).
"""
