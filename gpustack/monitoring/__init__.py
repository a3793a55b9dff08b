"""GPU monitoring content gpustack ships, and pure helpers to inspect it.

- ``values/dcgm-counters.csv``: what dcgm-exporter collects (:mod:`gpustack.monitoring.counters`);
- ``gpustack/templates/monitoring/gpu-alerts.rules.yaml``: alert rules (:mod:`gpustack.monitoring.rules`);
- ``dashboards/12239.json``: the Grafana dashboard (:mod:`gpustack.monitoring.dashboard`);
- :mod:`gpustack.monitoring.usage` cross-checks the three; :mod:`gpustack.monitoring.promql` reads
  metric names out of expressions.

Series carry a ``node`` label (the Kubernetes node, relabelled by the ServiceMonitor from the
exporter pod's node) besides dcgm-exporter's ``gpu``, ``UUID`` and ``modelName``; rules and panels
key on ``node`` rather than the exporter's host label (``Hostname`` became ``hostname``).
"""

from __future__ import annotations
