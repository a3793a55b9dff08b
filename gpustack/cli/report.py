"""``gpustack report``: GPU usage, cost and capacity over a window (the logic is gpustack.report)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpustack.cli.options import ConfigOpt, ContextOpt, DetailOpt, KubeconfigOpt, console_for, examples, load_config

#: the examples at the end of its help page
EXAMPLES = examples(
    "gpustack report                # the last 30 days, per namespace",
    "gpustack report --since 7d --by team --team-label team",
    "gpustack report --price 2.5 -o csv > gpu-hours.csv",
)


def report(
    config: ConfigOpt = None,
    since: Annotated[
        str, typer.Option("--since", metavar="DURATION", help="the window, back from --until: 30d, 12h, 2w")
    ] = "30d",
    until: Annotated[
        str | None,
        typer.Option(
            "--until", metavar="TIME", help="end of the window: 2026-11-01 (midnight UTC) or an ISO time; now"
        ),
    ] = None,
    price: Annotated[
        list[str] | None,
        typer.Option(
            "--price",
            metavar="PRICE",
            help="USD per GPU-hour: 2.5 (every model) or MODEL=PRICE,... (H100=3.2,A100=1.8)",
        ),
    ] = None,
    by: Annotated[
        str, typer.Option("--by", metavar="KEY", help="group by namespace, team, node or model")
    ] = "namespace",
    team_label: Annotated[
        str | None,
        typer.Option("--team-label", metavar="LABEL", help="namespace label naming the team (monitoring.team_label)"),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table, csv or json")] = "table",
    prometheus_url: Annotated[
        str | None,
        typer.Option("--prometheus-url", metavar="URL", help="Prometheus itself (default: the API server's proxy)"),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    verbose: DetailOpt = 0,
) -> None:
    """GPU-hours allocated, used and idle, cost, capacity and its forecast. Exit 0 ok, 1 failure, 2 usage,
    3 Prometheus unreachable."""
    import time

    from gpustack.report import inputs
    from gpustack.report.compute import Request
    from gpustack.report.render import csv_text, json_text, table_view
    from gpustack.report.source import Prometheus, endpoint, make_report

    now = time.time()
    end, seconds = inputs.parse_until(until, now), inputs.parse_duration(since)
    group, prices, fmt = inputs.parse_by(by), inputs.parse_prices(price), inputs.parse_output(output)
    label = inputs.parse_team_label(team_label) if team_label is not None else None
    prometheus_url = inputs.parse_prometheus_url(prometheus_url)
    console = console_for(verbose)
    cfg = load_config(config).config  # bad options fail above, before the config is read
    request = Request(end, seconds, group, label or cfg.monitoring.team_label, prices)
    prom = Prometheus(endpoint(cfg, kubeconfig, prometheus_url, context))
    result, elapsed = make_report(prom, request)
    console.debug(f"{prom.requests} Prometheus requests via {prom.ep.describe()} in {elapsed:.2f} s")
    if fmt == "json":
        console.out.print(json_text(result), end="", markup=False, highlight=False, emoji=False, soft_wrap=True)
    elif fmt == "csv":
        console.out.print(csv_text(result), end="", markup=False, highlight=False, emoji=False, soft_wrap=True)
    else:
        console.print(table_view(result, console.width))  # laid out for the width: printed as it is
