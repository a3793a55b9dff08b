"""Ansible inventory and extra vars from the config. Pure functions, no I/O.

The extra vars are the whole contract between Python and the playbooks: every variable the
roles read that is not a role default comes from :func:`extravars` (or a command's plan), and the
roles read each under the name it has here -- no role default renames one, and every one is read
(tests/unit/test_layout.py keeps both).
"""

from __future__ import annotations

import getpass
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from gpustack.config import compat, pins
from gpustack.config.model import Config, Node
from gpustack.constants import LOCAL_STORAGE_PATH
from gpustack.paths import state_dir
from gpustack.render import security
from gpustack.render.etcd import etcd_vars
from gpustack.render.firewall import firewall_vars
from gpustack.render.flannel import flannel_manifest
from gpustack.render.kubeadm import api_endpoint, render_init_config
from gpustack.render.values import uses_local_storage

ARCHES = ("amd64", "arm64")


def _host_vars(node: Node, cfg: Config) -> dict[str, Any]:
    hv: dict[str, Any] = {
        "ansible_host": node.address,
        "gpustack_node_name": node.name,
        "gpustack_node_address": node.address,
        "gpustack_role": node.role,
        # whose ~/.kube/config the control-plane stage writes (and its stamp probes)
        "gpustack_login_user": node.user or getpass.getuser(),
    }
    if node.connection == "local":
        hv["ansible_connection"] = "local"
        hv["ansible_python_interpreter"] = "/usr/bin/python3"
    else:
        hv["ansible_port"] = node.port
        if node.user:
            hv["ansible_user"] = node.user
        if node.ssh_key:
            hv["ansible_ssh_private_key_file"] = str(node.ssh_key.expanduser())
    hv["ansible_become"] = node.become
    return hv


def inventory(cfg: Config) -> dict[str, Any]:
    """Groups ``control_plane`` (the first one runs kubeadm init) and ``workers`` under ``all``;
    host names are node names."""
    return {
        "all": {
            "children": {
                "control_plane": {"hosts": {n.name: _host_vars(n, cfg) for n in cfg.control_planes}},
                "workers": {"hosts": {n.name: _host_vars(n, cfg) for n in cfg.workers}},
            }
        }
    }


def host_vars(cfg: Config, names: Iterable[str]) -> list[dict[str, Any]]:
    """The inventory variables of the nodes ``names`` (as :func:`inventory` gives them), in the config's order."""
    chosen = set(names)
    return [_host_vars(n, cfg) for n in cfg.nodes if n.name in chosen]


def no_proxy(cfg: Config) -> list[str]:
    """What must never go through the proxy: local, pod and service addresses and the API endpoint
    (what the kubelet and containerd reach inside the cluster). Not every node's address: nothing
    that reads the proxy environment talks to another node, and a list that grew with each node
    would rewrite every host's proxy drop-ins (and restart containerd and the kubelet) whenever a
    node is added or removed; ``proxy.no_proxy`` adds more."""
    base = [
        "localhost",
        "127.0.0.1",
        "::1",
        str(cfg.cluster.pod_cidr),
        str(cfg.cluster.service_cidr),
        ".svc",
        f".{cfg.cluster.dns_domain}",
    ]
    endpoint = api_endpoint(cfg).rsplit(":", 1)[0].strip("[]")
    return list(dict.fromkeys([*base, endpoint, *cfg.proxy.no_proxy]))


def proxy_env(cfg: Config) -> dict[str, str]:
    if not cfg.proxy.enabled:
        return {}
    env: dict[str, str] = {}
    if cfg.proxy.http:
        env["HTTP_PROXY"] = env["http_proxy"] = cfg.proxy.http
    if cfg.proxy.https:
        env["HTTPS_PROXY"] = env["https_proxy"] = cfg.proxy.https
    env["NO_PROXY"] = env["no_proxy"] = ",".join(no_proxy(cfg))
    return env


def proxy_apt(cfg: Config) -> dict[str, Any]:
    """apt's proxy settings with the credentials apart (docs/decisions.md, "Proxy credentials"): ``http`` and
    ``https``, the proxy URLs without user and password (apt.conf.d, which every user's apt reads: 0644), and
    ``auth``, one netrc-style entry per proxy that has them (``machine``, ``login``, ``password``) for
    /etc/apt/auth.conf.d (0600, read by root)."""
    if not cfg.proxy.enabled:
        return {"http": "", "https": "", "auth": []}
    out: dict[str, Any] = {"auth": []}
    for scheme in ("http", "https"):
        url = getattr(cfg.proxy, scheme) or ""
        public, login, password = split_credentials(url)
        out[scheme] = public
        if login or password:
            parts = urlsplit(public)
            entry = {"machine": f"{parts.scheme}://{parts.netloc}", "login": login, "password": password}
            if entry not in out["auth"]:
                out["auth"].append(entry)
    return out


def split_credentials(url: str) -> tuple[str, str, str]:
    """``url`` without its user-info, the user and the password (percent-decoded); ``("", "", "")`` for no URL."""
    if not url:
        return "", "", ""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, "", ""
    userinfo, host = parts.netloc.rsplit("@", 1)
    login, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=host)), unquote(login), unquote(password)


#: a URL's password (``scheme://user:PASSWORD@host``), as it may appear anywhere in a rendered file
URL_PASSWORD_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/?#@:'\"]*:)[^\s/?#@'\"]*@")
#: what stands for a secret in a rendered file
REDACTED = "REDACTED"


def without_passwords(text: str) -> str:
    """``text`` with every URL's password replaced by :data:`REDACTED` (the user is kept: it says which
    credentials the run uses)."""
    return URL_PASSWORD_RE.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)


def public_extravars(ev: dict[str, Any]) -> dict[str, Any]:
    """The extra vars as ``render --out`` shows them: the proxy's password redacted wherever it is (the run
    itself gets the real ones, through its private run directory)."""
    out = dict(ev)
    if "gpustack_proxy_env" in out:
        out["gpustack_proxy_env"] = {k: without_passwords(v) for k, v in out["gpustack_proxy_env"].items()}
    if "gpustack_proxy_apt" in out:
        apt = dict(out["gpustack_proxy_apt"])
        apt["auth"] = [{**e, "password": REDACTED} for e in apt.get("auth", [])]
        out["gpustack_proxy_apt"] = apt
    return out


def helm_downloads(cfg: Config) -> dict[str, dict[str, str]]:
    v = cfg.versions
    sums = v.helm_sha256 or pins.HELM_SHA256.get(v.helm, {})
    return {
        arch: {"url": cfg.sources.helm_url.format(version=v.helm, arch=arch), "sha256": sums[arch]}
        for arch in ARCHES
        if arch in sums
    }


def _downloads(template: str, version: str, sums: dict[str, str]) -> dict[str, dict[str, str]]:
    return {
        arch: {"url": template.format(version=version, arch=arch), "sha256": sums[arch]}
        for arch in ARCHES
        if arch in sums
    }


def runtime_vars(cfg: Config) -> dict[str, Any]:
    """The containerd stage's contract: where containerd and runc come from, and the sandbox image."""
    v, s = cfg.versions, cfg.sources
    return {
        "gpustack_containerd_source": v.containerd_source,
        "gpustack_containerd_version": v.containerd,
        # the config.toml version this containerd writes and gpustack keeps (4 from 2.3, 3 for 2.0-2.2); 0 for the
        # distribution's package: keep whatever version 2/3 file it has
        "gpustack_containerd_config_version": (
            (pins.containerd_config_version(v.containerd) or 0) if v.containerd_source == "release" else 0
        ),
        "gpustack_containerd_downloads": _downloads(s.containerd_url, v.containerd, compat.containerd_sha256(cfg)),
        "gpustack_runc_version": v.runc,
        "gpustack_runc_downloads": _downloads(s.runc_url, v.runc, compat.runc_sha256(cfg)),
        "gpustack_sandbox_image": compat.sandbox_image(cfg),
    }


def node_tools_vars(cfg: Config) -> dict[str, Any]:
    """The kubernetes stage's downloads: the CNI plugins and crictl, each with its pinned sha256 per arch."""
    v, s = cfg.versions, cfg.sources
    return {
        "gpustack_cni_plugins_version": v.cni_plugins,
        "gpustack_cni_plugins_downloads": _downloads(s.cni_plugins_url, v.cni_plugins, compat.cni_plugins_sha256(cfg)),
        "gpustack_crictl_version": v.crictl,
        "gpustack_crictl_downloads": _downloads(s.crictl_url, v.crictl, compat.crictl_sha256(cfg)),
    }


def etcdutl_vars(cfg: Config) -> dict[str, Any]:
    """`etcd restore`'s fallback download: etcd's release archive (for its etcdutl), its pinned sha256 per arch."""
    return {
        "gpustack_etcd_version": pins.ETCD_VERSION,
        "gpustack_etcd_downloads": _downloads(cfg.sources.etcd_url, pins.ETCD_VERSION, compat.etcd_sha256(cfg)),
    }


def extravars(cfg: Config, *, kubeconfig_dest: Path, controller_bin_dir: Path | None = None) -> dict[str, Any]:
    """Extra vars for the playbooks (site.yml and the playbooks that import it, preflight.yml)."""
    v, c = cfg.versions, cfg.cluster
    minor = v.kubernetes_minor
    tcp_nodeports = sorted(set(cfg.monitoring.nodeports) | set(cfg.firewall.extra_tcp_ports))
    ev: dict[str, Any] = {
        "gpustack_cluster_name": c.name,
        "gpustack_kubernetes_version": v.kubernetes,
        "gpustack_kubernetes_minor": minor,
        "gpustack_kubernetes_package_version": f"{v.kubernetes}-{pins.KUBERNETES_PACKAGE_REVISION}",
        "gpustack_kubernetes_apt_url": cfg.sources.kubernetes_apt_url.format(minor=minor),
        "gpustack_kubernetes_apt_key_url": cfg.sources.kubernetes_apt_key_url.format(minor=minor),
        "gpustack_kubernetes_apt_key_fingerprint": cfg.sources.kubernetes_apt_key_fingerprint,
        "gpustack_helm_version": v.helm,
        "gpustack_helm_downloads": helm_downloads(cfg),
        "gpustack_flannel_version": v.flannel,
        # the manifest itself (gpustack/render/flannel.py): nothing is downloaded
        "gpustack_flannel_manifest": flannel_manifest(cfg),
        "gpustack_pod_cidr": str(c.pod_cidr),
        "gpustack_service_cidr": str(c.service_cidr),
        "gpustack_api_service_ip": str(c.api_service_ip),
        "gpustack_node_addresses": [n.address for n in cfg.nodes],
        # HA: etcd's peer ports open only between these; every node reaches the API server at the endpoint
        "gpustack_control_plane_addresses": [n.address for n in cfg.control_planes],
        "gpustack_virtual_ip": str(c.virtual_ip) if c.virtual_ip is not None else "",
        "gpustack_virtual_ip_interface": c.virtual_ip_interface or "",
        "gpustack_kube_vip_image": pins.KUBE_VIP_IMAGE,
        "gpustack_single_node": len(cfg.nodes) == 1,
        "gpustack_kubeadm_config": render_init_config(cfg),
        "gpustack_proxy_env": proxy_env(cfg),
        "gpustack_proxy_apt": proxy_apt(cfg),
        # apt's lists refreshed by the apt module (false with up --bundle: python-apt fails the refresh
        # when any source is unreachable, so the roles refresh with apt-get update, which only warns)
        "gpustack_apt_update_cache": True,
        "gpustack_firewall_enabled": cfg.firewall.enabled,
        "gpustack_firewall_tcp_nodeports": tcp_nodeports,
        "gpustack_kubeconfig_dest": str(kubeconfig_dest),
        "gpustack_local_storage_path": LOCAL_STORAGE_PATH if uses_local_storage(cfg) else "",
        # where the helm stage installs Helm for this machine (the cluster stage runs it here)
        "gpustack_controller_bin_dir": str(controller_bin_dir or state_dir() / "bin"),
        # security: (gpustack/render/security.py): the control planes' hardening files; the EncryptionConfiguration
        # holds the cluster's key, read from the state by the run itself (gpustack/engine/stages.py): '' here
        "gpustack_encryption_enabled": cfg.security.encryption_at_rest,
        "gpustack_encryption_config": "",
        "gpustack_security_files": security.host_files(cfg),
        # the kernel settings the kubelet checks with protectKernelDefaults, set by os_prep first
        "gpustack_protect_kernel_defaults": cfg.security.protect_kernel_defaults,
        "gpustack_audit_log_dir": security.AUDIT_LOG_DIR if cfg.security.audit.enabled else "",
        # hosts.hold_kernel: the kernel and NVIDIA driver packages held (kubernetes_packages, node_patch)
        "gpustack_hold_kernel": cfg.hosts.hold_kernel,
    }
    ev.update(runtime_vars(cfg))
    ev.update(node_tools_vars(cfg))
    ev.update(firewall_vars(cfg))
    ev.update(etcd_vars(cfg))
    return ev
