"""``gpustack bundle list``: every artifact a run needs (logic: gpustack/airgap.py).

``bundle create`` (fetch everything on a connected machine) and ``up --bundle`` are not built yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpustack.cli.options import console_for, load_config
from gpustack.errors import UsageError

bundle_app = typer.Typer(help="Artifacts for air-gapped sites.", no_args_is_help=True)


@bundle_app.command("list")
def list_(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="gpustack.yaml (default: the usual lookup)")
    ] = None,
    os_: Annotated[
        str, typer.Option("--os", help="target OS as id-version, e.g. ubuntu-24.04 or debian-13")
    ] = "ubuntu-24.04",
    output: Annotated[str, typer.Option("--output", "-o", help="table or json")] = "table",
) -> None:
    """Print every artifact a run of this config needs on the chosen OS: files with sha256, apt
    packages, container images, chart archives."""
    from gpustack import airgap
    from gpustack.config import pins
    from gpustack.paths import resource_dir

    if output not in ("table", "json"):
        raise UsageError(f"--output {output}: use table or json")
    os_id, _, version = os_.partition("-")
    release = pins.os_release(os_id, version)
    if release is None:
        known = ", ".join(f"{o.id}-{o.version}" for o in pins.OS_RELEASES)
        raise UsageError(f"--os {os_}: not a supported OS ({known})")
    cfg = load_config(config).config
    found = airgap.items(cfg, resource_dir("playbooks"), release)
    if output == "json":
        typer.echo(json.dumps([i.as_dict() for i in found], indent=2))
        return
    console_for().table(
        f"artifacts for {release.name}, Kubernetes {cfg.versions.kubernetes}",
        ["kind", "name", "version", "source", "checksum", "note"],
        [[i.kind, i.name, i.version, i.source, i.checksum, i.note] for i in found],
    )
