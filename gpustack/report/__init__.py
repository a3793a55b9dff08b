"""``gpustack report``: GPU usage, cost and capacity over a window, from Prometheus.

The data flow, one module each:

- :mod:`.inputs` -- the command line's values checked and parsed (``--since``, ``--until``, ``--price``,
  ``--by``); bad input is a :class:`~gpustack.errors.UsageError` naming the option (exit 2);
- :mod:`.queries` -- the PromQL, built from the shipped recording rules
  (``gpustack/templates/monitoring/gpu-usage.rules.yaml``): reading the recorded series when the rules run
  in Prometheus and cover the window, else the same expressions inlined into subqueries ("raw"). Pure;
- :mod:`.source` -- the one place that reaches Prometheus (``--prometheus-url`` or the API server's service
  proxy, as verify/doctor do) and runs the queries, counting them;
- :mod:`.compute` -- query results -> :class:`.model.Report` (grouping, prices, idle pods, percentiles,
  capacity now); :mod:`.forecast` -- least squares on daily allocation. Pure;
- :mod:`.render` -- the report as tables, CSV or JSON.

Definitions (allocated, used, idle, each number's PromQL): docs/report.md.
"""

from __future__ import annotations
