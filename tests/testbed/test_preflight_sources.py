"""Package sources are checked from the host, through the configured proxy, before any stage.

The bed's hosts have no route out: the proxy refuses every destination outside the bed, and there
is no DNS. An `up --dry-run` with the upstream sources (pkgs.k8s.io, GitHub, get.helm.sh, the public
registries) must fail in its preflight, naming the host, each source and the proxy, with nothing
changed; with the bed's own sources every probe goes through the proxy and passes."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gpustack.config import pins

from .cluster import run_gpustack, up, write_config
from .pytest_plugin import TestbedFactory
from .services import Sources

UPSTREAM = {
    "kubernetes_apt_url": pins.KUBERNETES_APT_URL,
    "kubernetes_apt_key_url": pins.KUBERNETES_APT_KEY_URL,
    "helm_url": pins.HELM_URL,
    "containerd_url": pins.CONTAINERD_URL,
    "runc_url": pins.RUNC_URL,
}


def test_sources_are_checked_from_the_host_through_the_proxy_before_any_stage(
    testbed_factory: TestbedFactory, tmp_path: Path, sources: Sources
) -> None:
    bed = testbed_factory(["egress"])
    host = bed.hosts[0]
    proxy = sources.proxy.url
    host.sudo("touch /run/gpustack-sources-marker", check=True)

    # --- the upstream sources: refused by the proxy, so the run stops in its preflight
    upstream = write_config(
        bed,
        tmp_path / "upstream.yaml",
        sources,
        extra={"sources": UPSTREAM, "preflight": {"registries": list(pins.IMAGE_REGISTRIES)}},
    )
    t0 = time.monotonic()
    r = up(upstream, tmp_path / "state", "--dry-run")
    took = time.monotonic() - t0
    assert r.rc == 1, r.output
    assert "preflight failed" in r.stderr and "nothing was changed" in r.stderr, r.stderr
    assert "▶ os" not in r.stdout, "no stage started"
    flat = " ".join(r.stdout.split())
    for needle in (
        "P24-package-sources",
        "P25-image-registries",
        "Kubernetes apt repository",
        "https://pkgs.k8s.io/core:/stable:/v1.36/deb/InRelease",
        # the proxy as results name it: user@host:port, never the password (the config's URL carries one)
        f"through alice@{proxy.removeprefix('http://')}",
        "Tunnel connection failed: 403",
        "https://registry-1.docker.io/v2/",
        host.name,
    ):
        assert needle in flat, f"{needle!r} missing:\n{r.stdout}"
    assert r.summary()["preflight"]["status"] == "failed"
    assert sources.proxy.count("pkgs.k8s.io:443", status=403) >= 1, "the probe went through the proxy"
    changed = host.sudo("find /etc /usr/local /var/lib -newer /run/gpustack-sources-marker", check=False)
    assert changed.stdout.strip() == "", changed.stdout
    print(f"test_preflight_sources: the run without egress stopped after {took:.1f}s")

    # --- the bed's own sources: every probe reaches them through the proxy, from the host
    local = write_config(bed, tmp_path / "local.yaml", sources)
    before = len(sources.proxy.requests)
    ok = run_gpustack(local, tmp_path / "state", "up", "--yes", "--only", "preflight")
    assert ok.rc == 0, ok.output
    facts = json.loads((ok.last_run_dir() / "facts" / f"{host.name}.json").read_text())
    probed = [s for s in facts["sources"] if not s.get("skipped")]
    assert probed and all(s["ok"] and s["via"] == f"alice@{proxy.removeprefix('http://')}" for s in probed), probed
    kinds = {s["name"] for s in probed}
    assert {"Kubernetes apt repository", "Kubernetes apt key", "Helm download"} <= kinds, kinds
    assert not [k for k in kinds if "Flannel" in k], "gpustack renders Flannel's manifest: nothing to probe"
    seen = [r for r in sources.proxy.requests[before:] if r.client == host.address]
    for path in ("/deb/InRelease", "/deb/Release.key", "/helm/", "/v2/"):
        assert any(path in r.target for r in seen), f"{path} not fetched through the proxy: {seen}"
