"""``gpustack bundle list`` (every artifact a run needs; logic: gpustack/bundle/catalog.py) and ``gpustack
bundle create`` (fetch them all into a directory on a connected machine; logic: gpustack/bundle/).
``gpustack up --bundle DIR`` uses what create made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpustack.cli.options import ConfigOpt, DetailOpt, console_for, examples, load_config, split_csv
from gpustack.console import literal
from gpustack.errors import UsageError

bundle_app = typer.Typer(help="Artifacts for air-gapped sites.", no_args_is_help=True)


@bundle_app.command(
    "list",
    short_help="Every artifact a run needs, with its checksum",
    epilog=examples("gpustack bundle list", "gpustack bundle list --os debian-12 -o json"),
)
def list_(
    config: ConfigOpt = None,
    os_: Annotated[
        str, typer.Option("--os", metavar="OS", help="target OS as id-version, e.g. ubuntu-24.04 or debian-13")
    ] = "ubuntu-24.04",
    output: Annotated[str, typer.Option("--output", "-o", metavar="FORMAT", help="table or json")] = "table",
) -> None:
    """Print every artifact a run of this config needs on the chosen OS: files with sha256, apt
    packages, container images, chart archives."""
    from gpustack.bundle import catalog
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
    found = catalog.items(cfg, resource_dir("playbooks"), release)
    if output == "json":
        typer.echo(json.dumps([i.as_dict() for i in found], indent=2))
        return
    console_for().table(
        f"artifacts for {release.name}, Kubernetes {cfg.versions.kubernetes}",
        ["kind", "name", "version", "source", "checksum", "note"],
        [[literal(c) for c in (i.kind, i.name, i.version, i.source, i.checksum, i.note)] for i in found],
    )


@bundle_app.command(
    "create",
    short_help="Fetch all of it into DIR, on a connected machine",
    epilog=examples(
        "gpustack bundle create --out /media/bundle --os ubuntu-24.04,debian-12",
        "gpustack up --bundle /media/bundle   # then, on the site",
    ),
)
def create(
    out: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="the bundle directory (created; a re-run resumes it)")
    ],
    config: ConfigOpt = None,
    os_: Annotated[
        list[str] | None,
        typer.Option(
            "--os",
            metavar="OS,...",
            help="node OS release(s), id-version, repeated or comma-separated (default ubuntu-24.04)",
        ),
    ] = None,
    arch: Annotated[
        list[str] | None,
        typer.Option("--arch", metavar="ARCH,...", help="node architecture(s): amd64, arm64 (default amd64)"),
    ] = None,
    helm: Annotated[
        Path | None,
        typer.Option("--helm", metavar="FILE", help="helm to pull and render charts with (default: gpustack's, PATH)"),
    ] = None,
    kubeadm: Annotated[
        Path | None,
        typer.Option(
            "--kubeadm", metavar="FILE", help="kubeadm for its image list (default: from the bundle's kubeadm package)"
        ),
    ] = None,
    verbose: DetailOpt = 0,
) -> None:
    """Fetch everything a run of this config needs on the chosen OS releases into one directory
    (on a machine with internet access): files verified against their pins, charts, signed apt
    repositories, images as OCI archives, and bundle.json listing each with its sha256. Run it
    again to resume or to update the bundle after a config change."""
    from gpustack.bundle import want
    from gpustack.bundle.create import CreateOptions, summary_rows
    from gpustack.bundle.create import create as run_create
    from gpustack.constants import BUNDLE_MANIFEST
    from gpustack.paths import resource_dir

    releases = []
    for text in split_csv(os_) or ["ubuntu-24.04"]:
        try:
            releases.append(want.parse_release(text))
        except ValueError as exc:
            raise UsageError(f"--os {exc}") from None
    arches = split_csv(arch) or ["amd64"]
    bad = [a for a in arches if a not in ("amd64", "arm64")]
    if bad:
        raise UsageError(f"--arch {', '.join(bad)}: use amd64 or arm64")
    console = console_for(verbose)
    cfg = load_config(config).config
    opts = CreateOptions(
        out=out,
        releases=tuple(dict.fromkeys(releases)),
        arches=tuple(dict.fromkeys(arches)),
        helm=str(helm) if helm else None,
        kubeadm=str(kubeadm) if kubeadm else None,
    )
    result = run_create(cfg, opts, console, playbooks=resource_dir("playbooks"))
    console.table(
        f"bundle {out}", ["kind", "artifacts", "size"], [[literal(c) for c in r] for r in summary_rows(result.manifest)]
    )
    for warning in result.warnings:
        console.warn(warning)
    console.print(
        f"[ok]done[/ok] in {result.seconds:.1f}s: {len(result.fetched)} fetched, {len(result.kept)} already there"
        + (f", {len(result.removed)} no longer needed removed" if result.removed else "")
        + f"; manifest {literal(out / BUNDLE_MANIFEST)}. Copy the directory to the site and run: gpustack up --bundle "
        + literal(out)
    )
