"""Package sources, checked from every node before any stage needs them (registered with the
preflight checks, like gpustack/checks/compat.py).

:func:`probe_list` says what the selected stages will download on which hosts; the preflight
playbook hands it to the gpustack_facts module, which tries each source from the host through
the configured proxy (``facts.sources``); P24 and P25 turn the results into findings that name the
host, the source, the proxy and the error. So an ``up`` on a host without egress fails in its
preflight, before the first change, instead of 25 s into the kubernetes stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from gpustack.checks.context import Context, check, host_finding
from gpustack.checks.model import Finding
from gpustack.config.model import Config
from gpustack.render.ansible import ARCHES, helm_downloads, node_tools_vars, runtime_vars

#: stages that make the nodes pull images (kubeadm's control plane, Flannel, the cluster layer,
#: an upgrade's new control plane, the components' new charts)
IMAGE_STAGES = frozenset({"control-plane", "workers", "network", "cluster", "crds"})
#: every `up` stage that downloads something: what the preflight alone (a readiness check) probes
SOURCE_STAGES = frozenset({"os", "containerd", "kubernetes", "helm"}) | IMAGE_STAGES


def _spec(name: str, url: str, kind: str, stage: str, group: str = "all", arch: str = "") -> dict[str, str]:
    spec = {"name": name, "url": url, "kind": kind, "stage": stage, "group": group}
    if arch:
        spec["arch"] = arch
    return spec


def probe_list(
    cfg: Config, stage_ids: Iterable[str], *, full: bool = False, run_vars: Mapping[str, Any] | None = None
) -> list[dict[str, str]]:
    """What the ``up`` stages in ``stage_ids`` download, for the gpustack_facts module: each source
    with the stage that needs it (a host where that stage is converged does not probe it, unless
    ``full``), the inventory group whose hosts need it and, for per-architecture files, the arch.
    The preflight alone (``up --only preflight``, a readiness check) probes what a whole ``up`` needs.

    ``run_vars`` (the command's own playbook variables) say how the run fetches: from an air-gapped
    bundle (``up --bundle``) the images are imported from it (no registry is pulled from) and apt's
    lists are refreshed with ``apt-get``, which lets the host's own unreachable sources be (so they
    are not probed); the bundle's server is what the sources point at, and is probed."""
    run_vars = run_vars or {}
    bundled_images = bool(run_vars.get("gpustack_bundle_images"))
    apt_module = run_vars.get("gpustack_apt_update_cache", True) is not False
    ids = set(stage_ids)
    if ids <= {"preflight"}:
        ids = set(SOURCE_STAGES)
    minor = cfg.versions.kubernetes_minor
    out: list[dict[str, str]] = []
    if "os" in ids and apt_module:  # the os stage refreshes apt's lists over the host's own repositories
        out.append(_spec("the host's apt repositories", "", "host-apt", "os"))
    if "containerd" in ids and cfg.versions.containerd_source == "release":
        rt = runtime_vars(cfg)
        for what, key in (("containerd", "gpustack_containerd_downloads"), ("runc", "gpustack_runc_downloads")):
            for arch, dl in rt[key].items():
                out.append(_spec(f"{what} release download", dl["url"], "file", "containerd", arch=arch))
    if "kubernetes" in ids:
        repo = cfg.sources.kubernetes_apt_url.format(minor=minor)
        out.append(_spec("Kubernetes apt repository", repo.rstrip("/") + "/InRelease", "apt", "kubernetes"))
        key = cfg.sources.kubernetes_apt_key_url.format(minor=minor)
        out.append(_spec("Kubernetes apt key", key, "file", "kubernetes"))
        tools = node_tools_vars(cfg)
        for what, dl_key in (
            ("CNI plugins", "gpustack_cni_plugins_downloads"),
            ("crictl", "gpustack_crictl_downloads"),
        ):
            for arch, dl in tools[dl_key].items():
                out.append(_spec(f"{what} release download", dl["url"], "file", "kubernetes", arch=arch))
    if "helm" in ids:
        for arch, dl in helm_downloads(cfg).items():
            if arch in ARCHES:
                out.append(_spec("Helm download", dl["url"], "file", "helm", "control_plane", arch))
    if ids & IMAGE_STAGES and not bundled_images:
        out += [_spec(f"image registry {r}", r, "registry", "") for r in cfg.preflight.registries]
    if full:  # --full visits converged stages too: they need their sources
        out = [{**s, "stage": ""} for s in out]
    return out


def _results(ctx: Context, registries: bool) -> list[Mapping[str, Any]]:
    got = ctx.facts.get("sources") or []
    return [r for r in got if isinstance(r, Mapping) and (r.get("kind") == "registry") == registries]


def _host(url: str) -> str:
    return urlsplit(url).hostname or url


def _finding(ctx: Context, id_: str, what: str, results: Sequence[Mapping[str, Any]], fix_direct: str) -> Finding:
    probed = [r for r in results if not r.get("skipped")]
    bad = [r for r in probed if not r.get("ok")]
    if not probed:
        why = "stages converged here" if results else "none needed by the selected stages"
        return host_finding(ctx, id_, "pass", f"no {what} to reach ({why})")
    if not bad:
        return host_finding(ctx, id_, "pass", f"reaches {len(probed)} {what}(s)")
    names = ", ".join(dict.fromkeys(str(r.get("name")) for r in bad))
    evidence = "\n".join(
        f"{r.get('url')} ({'through ' + str(r['via']) if _proxied(r) else 'direct'}): "
        f"{r.get('error') or 'HTTP ' + str(r.get('status'))}"
        for r in bad
    )
    # an HTTP answer from the source itself (404: a wrong URL or a mirror without the file) needs
    # another fix than no answer at all (no route, no DNS, a proxy that refuses)
    refused = [r for r in bad if not r.get("status") or (_proxied(r) and r.get("status") in (403, 407))]
    answered = [r for r in bad if r not in refused]
    fixes = []
    if refused:
        hosts = ", ".join(dict.fromkeys(_host(str(r.get("url"))) for r in refused))
        vias = ", ".join(sorted({str(r["via"]) for r in refused if _proxied(r)}))
        if vias:
            fixes.append(
                f"the proxy ({vias}) must let {ctx.node.name} reach {hosts}; or point gpustack.yaml at sources "
                "the node reaches (docs/configuration.md); a local mirror goes in proxy.no_proxy"
            )
        else:
            fixes.append(fix_direct.format(node=ctx.node.name, hosts=hosts))
    if answered:
        urls = ", ".join(str(r.get("url")) for r in answered)
        fixes.append(f"{urls} answered with an error: check the URL (sources: in gpustack.yaml, or the host's apt "
                     "sources) and that the mirror serves it")  # fmt: skip
    return host_finding(ctx, id_, "fail", f"cannot reach {len(bad)} {what}(s): {names}", evidence, "\n".join(fixes))


def _proxied(r: Mapping[str, Any]) -> bool:
    return r.get("via") not in (None, "", "direct")


@check
def package_sources(ctx: Context) -> Finding:
    """P24: the apt repositories (the host's own and Kubernetes'), the apt key, and the containerd,
    runc and Helm downloads the selected stages fetch on this host (Flannel's manifest is rendered by
    gpustack: nothing to reach; its images come from a registry, P25)."""
    return _finding(
        ctx,
        "P24-package-sources",
        "package source",
        _results(ctx, registries=False),
        "{node} has no route to {hosts}: set proxy.http/proxy.https in gpustack.yaml, or point sources: "
        "(and the host's apt sources) at a mirror it reaches (docs/configuration.md)",
    )


@check
def image_registries(ctx: Context) -> Finding:
    """P25: the image registries containerd on this host pulls from (preflight.registries)."""
    return _finding(
        ctx,
        "P25-image-registries",
        "image registry",
        _results(ctx, registries=True),
        "{node} has no route to {hosts}: set proxy.http/proxy.https in gpustack.yaml, or list the registry "
        "mirrors containerd uses in preflight.registries",
    )
