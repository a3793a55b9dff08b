"""The configuration model: one ``gpustack.yaml`` (every field optional; defaults are safe).

Shape-level rules (types, unknown keys, ranges) live on the models; rules that relate several
fields (duplicate nodes, CIDR overlaps) live in :mod:`gpustack.config.semantics` so each can
name the exact field it is about.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpustack.config import pins

HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$"
)
NODE_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")
# cluster.name becomes a directory under the state directory (clusters/<name>/) and kubeadm's clusterName.
CLUSTER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# A Linux interface name: at most 15 bytes (IFNAMSIZ - 1), no '/', ':' or whitespace, not '.' or '..'.
IFACE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,14}$")
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
# A pinned-version override: it ends up in download URLs and chart references.
VERSION_RE = re.compile(r"^v?[0-9]+(\.[0-9]+){1,2}([-+][0-9A-Za-z.+-]+)?$")
K8S_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
DURATION_RE = r"^[0-9]+(ms|s|m|h|d|w|y)$"
DURATION_FORM = "a number and a unit (ms, s, m, h, d, w, y) with no space, e.g. 15d, 12h, 30s"
# a Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters
LABEL_KEY_RE = re.compile(
    r"^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
URL_PLACEHOLDERS = {"minor", "version", "arch"}


def node_address_problem(v: str) -> str | None:
    """Why ``v`` cannot be a node address (None: it can). A dotted-quad that is not a valid IPv4
    address is an error, not a DNS name; loopback, unspecified, multicast, link-local and broadcast
    addresses cannot carry cluster traffic between machines."""
    try:
        ip = ipaddress.ip_address(v)
    except ValueError:
        last = v.rstrip(".").rsplit(".", 1)[-1]
        if re.fullmatch(r"[0-9.]+", v) or last.isdigit():
            return f"{v!r} is not a valid IPv4 address (four numbers 0-255, e.g. 192.0.2.10)"
        if v.lower().rstrip(".") == "localhost" or v.lower().rstrip(".").endswith(".localhost"):
            return f"{v!r} is this machine's loopback name; use an address the other nodes can reach"
        if not HOSTNAME_RE.match(v):
            return "must be an IP address or a DNS name"
        return None
    if ip.is_loopback:
        return f"{v} is a loopback address; use an address the other nodes can reach (even for a local node)"
    if ip.is_unspecified:
        return f"{v} means 'any address', not one host; use the node's own address"
    if ip.is_multicast:
        return f"{v} is a multicast address, not a host"
    if ip.is_link_local:
        return f"{v} is a link-local address; Kubernetes needs a routable node address"
    if ip == ipaddress.IPv4Address("255.255.255.255"):
        return f"{v} is the broadcast address, not a host"
    return None


def url_problem(v: str, *, schemes: tuple[str, ...] = ("http", "https"), placeholders: bool = False) -> str | None:
    """Why ``v`` is not a usable URL (None: it is). With ``placeholders``, {minor}/{version}/{arch} may appear."""
    text = v
    if placeholders:
        for name in re.findall(r"\{([^{}]*)\}", v):
            if name not in URL_PLACEHOLDERS:
                known = ", ".join("{" + p + "}" for p in sorted(URL_PLACEHOLDERS))
                return f"unknown placeholder {{{name}}} (known: {known})"
        text = re.sub(r"\{[a-z]+\}", "x", v)
    if any(c.isspace() for c in text):
        return "a URL cannot contain spaces"
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in schemes:
        return f"must be a URL starting with {' or '.join(s + '://' for s in schemes)} (got {v!r})"
    if not parts.hostname:
        return f"{v!r} has no host name"
    if port == 0:
        return f"{v!r}: port 0 is not a port"
    return None


def _ipv4_network(v: object) -> object:
    """Accept only network addresses; for a CIDR with host bits set, say so and suggest the network."""
    if isinstance(v, str):
        try:
            ipaddress.IPv4Network(v)
        except ipaddress.NetmaskValueError:
            raise ValueError(f"{v!r} has an invalid prefix length (use /0 to /32)") from None
        except ValueError:
            try:
                net = ipaddress.IPv4Network(v, strict=False)
            except ValueError:
                raise ValueError(f"{v!r} is not an IPv4 network in CIDR form, e.g. 10.244.0.0/16") from None
            raise ValueError(f"{v!r} has host bits set; did you mean {net}?") from None
    return v


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Role = Literal["control-plane", "worker"]


class Node(_Model):
    """One host. ``connection: local`` runs on this machine without SSH."""

    name: Annotated[str, Field(description="Kubernetes node name (lower-case DNS label)")]
    address: Annotated[str, Field(description="IP address or DNS name used for SSH and the cluster")]
    role: Role = "worker"
    user: str | None = Field(default=None, description="SSH user (default: your login name)")
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    ssh_key: Path | None = Field(default=None, description="private key file for SSH")
    connection: Literal["ssh", "local"] = "ssh"
    become: bool = Field(default=True, description="use sudo (must be passwordless)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NODE_NAME_RE.match(v):
            raise ValueError("must be a lower-case DNS name: a-z, 0-9, '-' and '.', at most 63 characters")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not USER_RE.match(v):
            raise ValueError(f"{v!r} is not a login name (letters, digits, '_', '.', '-', '@'; no spaces)")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        problem = node_address_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        try:
            return ipaddress.ip_address(self.address)
        except ValueError:
            return None


class Cluster(_Model):
    name: str = "gpustack"
    pod_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.244.0.0/16")
    service_cidr: ipaddress.IPv4Network = ipaddress.IPv4Network("10.96.0.0/12")
    flannel_iface: str | None = Field(
        default=None, description="NIC Flannel uses between nodes (default: the default route's)"
    )
    dns_domain: str = "cluster.local"
    control_plane_endpoint: str | None = Field(
        default=None,
        description="HA: HOST[:PORT] of an existing load balancer in front of every control-plane node's API server "
        "(port 6443 when left out)",
    )
    virtual_ip: ipaddress.IPv4Address | None = Field(
        default=None,
        description="HA: a free address on the nodes' network that gpustack moves between the control-plane nodes "
        "(kube-vip static pod, ARP)",
    )
    virtual_ip_interface: str | None = Field(
        default=None, description="NIC kube-vip announces virtual_ip on (default: the default route's)"
    )

    @field_validator("control_plane_endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        host, sep, port = v.rpartition(":")
        if not sep:
            host, port = v, ""
        if not host or (sep and (not port.isdigit() or not 0 < int(port) < 65536)):
            raise ValueError(f"{v!r} is not HOST or HOST:PORT (e.g. k8s-api.example.com:6443)")
        problem = node_address_problem(host)
        if problem:
            raise ValueError(f"{v!r}: {problem}")
        return v

    @field_validator("virtual_ip_interface")
    @classmethod
    def _vip_iface(cls, v: str | None) -> str | None:
        if v is not None and (not IFACE_RE.match(v) or v in {".", ".."}):
            raise ValueError(f"{v!r} is not a network interface name (e.g. eth0)")
        return v

    @property
    def api_endpoint(self) -> tuple[str, int] | None:
        """(host, port) every node reaches the API server at in an HA cluster; None: the first control plane."""
        if self.control_plane_endpoint:
            host, sep, port = self.control_plane_endpoint.rpartition(":")
            return (host, int(port)) if sep else (self.control_plane_endpoint, 6443)
        if self.virtual_ip is not None:
            return str(self.virtual_ip), 6443
        return None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not CLUSTER_NAME_RE.match(v) or ".." in v:
            raise ValueError(
                f"{v!r} is not a safe cluster name: 1-63 letters, digits, '.', '_' or '-', starting with a letter "
                "or digit, no '/', spaces or '..' (it names a directory in the state directory)"
            )
        return v

    @field_validator("pod_cidr", "service_cidr", mode="before")
    @classmethod
    def _cidr(cls, v: object) -> object:
        return _ipv4_network(v)

    @field_validator("flannel_iface")
    @classmethod
    def _iface(cls, v: str | None) -> str | None:
        if v is not None and (not IFACE_RE.match(v) or v in {".", ".."}):
            raise ValueError(
                f"{v!r} is not a network interface name (at most 15 characters, no '/', ':' or spaces; e.g. eth0, ens5f0)"
            )
        return v

    @field_validator("dns_domain")
    @classmethod
    def _dns_domain(cls, v: str) -> str:
        if not HOSTNAME_RE.match(v):
            raise ValueError(f"{v!r} is not a DNS domain (e.g. cluster.local)")
        return v

    @property
    def api_service_ip(self) -> ipaddress.IPv4Address:
        """The first address of the service CIDR: the ``kubernetes`` Service (10.96.0.1)."""
        return self.service_cidr.network_address + 1


class Versions(_Model):
    """Overrides of the pin table (gpustack/config/pins.py). Leave unset to use the pins."""

    kubernetes: str = pins.KUBERNETES[pins.KUBERNETES_DEFAULT]
    flannel: str = pins.FLANNEL_VERSION
    helm: str = pins.HELM_VERSION
    helm_sha256: dict[str, str] | None = Field(
        default=None, description="arch -> sha256 of the Helm archive, required for an unpinned Helm version"
    )
    containerd: str = Field(default=pins.CONTAINERD_VERSION, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    containerd_sha256: dict[str, str] | None = Field(
        default=None, description="arch -> sha256 of the containerd release archive (for an unpinned version)"
    )
    runc: str = Field(default=pins.RUNC_VERSION, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    runc_sha256: dict[str, str] | None = Field(
        default=None, description="arch -> sha256 of the runc binary (for an unpinned version)"
    )
    containerd_source: Literal["release", "distribution"] = Field(
        default="release",
        description="release: upstream archives (checksummed); distribution: the OS package, where the matrix allows it",
    )
    image_digests: dict[str, str] | None = Field(
        default=None,
        description="image reference (name:tag) -> sha256:<digest>: added to (or replacing) the pin table's image digests",
    )
    gpu_operator: str = pins.CHARTS["gpu-operator"].version
    kube_prometheus_stack: str = pins.CHARTS["kube-prometheus-stack"].version
    dcgm_exporter: str = pins.CHARTS["dcgm-exporter"].version

    @field_validator("kubernetes", mode="before")
    @classmethod
    def _kubernetes(cls, v: object) -> str:
        if isinstance(v, (int, float)):
            v = str(v)  # an unquoted 1.35 in YAML
        if not isinstance(v, str):
            raise ValueError("must be a version string such as '1.36'")
        try:
            return pins.kubernetes_patch(v)
        except KeyError:
            known = ", ".join(f"{m} ({p})" for m, p in pins.KUBERNETES.items())
            raise ValueError(f"unknown Kubernetes version {v!r}; supported: {known}") from None

    @field_validator("flannel", "helm", "gpu_operator", "kube_prometheus_stack", "dcgm_exporter", mode="before")
    @classmethod
    def _version(cls, v: object) -> object:
        if isinstance(v, (int, float)):
            v = str(v)
        if isinstance(v, str) and not VERSION_RE.match(v):
            raise ValueError(f"{v!r} is not a version such as 3.18.4 or v26.7.0")
        return v

    @field_validator("flannel")
    @classmethod
    def _flannel(cls, v: str) -> str:
        v = v.removeprefix("v")
        if v not in pins.FLANNEL_CNI_PLUGIN:
            known = ", ".join(pins.FLANNEL_CNI_PLUGIN)
            raise ValueError(f"gpustack renders Flannel's manifest for {known} only (not {v!r})")
        return v

    @field_validator("helm_sha256")
    @classmethod
    def _sha(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for arch, digest in (v or {}).items():
            if arch not in {"amd64", "arm64"}:
                raise ValueError(f"unknown architecture {arch!r} (amd64, arm64)")
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"{arch}: {digest!r} is not a sha256 (64 lower-case hex digits)")
        return v

    @field_validator("image_digests")
    @classmethod
    def _digests(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        for ref, digest in (v or {}).items():
            if "@" in ref or ":" not in ref.rsplit("/", 1)[-1]:
                raise ValueError(f"{ref!r}: use an image reference with a tag (name:tag), without a digest")
            if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
                raise ValueError(f"{ref}: {digest!r} is not a digest (sha256: and 64 lower-case hex digits)")
        return v

    @property
    def kubernetes_minor(self) -> str:
        return ".".join(self.kubernetes.split(".")[:2])


class Sources(_Model):
    """Where packages and binaries come from. Point these at a mirror for air-gapped sites.

    Placeholders: {minor} (Kubernetes minor, e.g. 1.36), {version}, {arch} (amd64/arm64).
    """

    kubernetes_apt_url: str = pins.KUBERNETES_APT_URL
    kubernetes_apt_key_url: str = pins.KUBERNETES_APT_KEY_URL
    helm_url: str = pins.HELM_URL
    containerd_url: str = pins.CONTAINERD_URL
    runc_url: str = pins.RUNC_URL
    kubernetes_apt_key_fingerprint: str = Field(
        default=pins.KUBERNETES_APT_KEY_FINGERPRINT,
        pattern=r"^[0-9A-F]{40}$",
        description="fingerprint the Kubernetes apt key must have (a mirror's own key: set its fingerprint)",
    )
    # --- where `gpustack bundle create` fetches from (air-gapped sites; see docs/airgap.md) ---
    registry_mirrors: dict[str, str] = Field(
        default_factory=dict,
        description="registry host (registry.k8s.io, nvcr.io, ...) -> URL of a mirror serving the same repositories",
    )
    chart_repos: dict[str, str] = Field(
        default_factory=dict, description="chart name -> Helm repository URL (default: the pin table's)"
    )
    os_apt: dict[str, list[str]] = Field(
        default_factory=dict,
        description="OS release (ubuntu-24.04, debian-12, ...) -> sources.list lines 'URL SUITE COMPONENT...' "
        "(default: the distribution's archive)",
    )
    os_apt_keyring: dict[str, Path] = Field(
        default_factory=dict,
        description="OS release or OS id (ubuntu, debian) -> keyring file apt verifies that archive with",
    )

    @field_validator("kubernetes_apt_key_fingerprint", mode="before")
    @classmethod
    def _fingerprint(cls, v: object) -> object:
        return v.replace(" ", "").upper() if isinstance(v, str) else v

    @field_validator("kubernetes_apt_url", "kubernetes_apt_key_url", "helm_url", "containerd_url", "runc_url")
    @classmethod
    def _url(cls, v: str) -> str:
        problem = url_problem(v, placeholders=True)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("registry_mirrors", "chart_repos")
    @classmethod
    def _url_map(cls, v: dict[str, str]) -> dict[str, str]:
        for key, url in v.items():
            problem = url_problem(url)
            if problem:
                raise ValueError(f"{key}: {problem}")
        return v

    @field_validator("os_apt", "os_apt_keyring")
    @classmethod
    def _os_keys(cls, v: dict[str, object]) -> dict[str, object]:
        known = {f"{o.id}-{o.version}" for o in pins.OS_RELEASES} | {o.id for o in pins.OS_RELEASES}
        for key in v:
            if key not in known:
                raise ValueError(f"{key!r} is not a supported OS release ({', '.join(sorted(known))})")
        return v

    @field_validator("os_apt")
    @classmethod
    def _apt_lines(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for key, lines in v.items():
            for line in lines:
                parts = line.split()
                problem = url_problem(parts[0]) if parts else "empty line"
                if problem or len(parts) < 3:
                    raise ValueError(f"{key}: {line!r} is not 'URL SUITE COMPONENT...' ({problem or 'too short'})")
        return v


class Proxy(_Model):
    http: str | None = None
    https: str | None = None
    no_proxy: list[str] = Field(
        default_factory=list, description="added to the computed list (localhost, node addresses, CIDRs, .svc)"
    )

    @field_validator("http", "https")
    @classmethod
    def _proxy_url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        problem = url_problem(v)
        if problem:
            raise ValueError(f"{problem} (a proxy is http://host:port)")
        if urlsplit(v).path not in {"", "/"}:
            raise ValueError(f"{v!r}: a proxy URL has no path (http://host:port)")
        return v

    @field_validator("no_proxy")
    @classmethod
    def _no_proxy(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not entry or any(c.isspace() or c in ",;" for c in entry):
                raise ValueError(
                    f"{entry!r} is not a no_proxy entry: one host, domain (.example.com), IP or CIDR per list item"
                )
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.http or self.https)


class Firewall(_Model):
    enabled: bool = Field(default=True, description="manage the GPUSTACK iptables chain")
    extra_tcp_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list)


RECEIVER_NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class Gpu(_Model):
    """Who provides each GPU component. ``auto`` is decided from the preflight facts."""

    driver: Literal["auto", "preinstalled", "operator"] = Field(
        default="auto", description="auto: preinstalled when any GPU node already has an NVIDIA driver"
    )
    toolkit: Literal["auto", "preinstalled", "operator"] = Field(
        default="auto", description="auto: preinstalled when the facts show the NVIDIA container toolkit"
    )
    exporter: Literal["standalone", "operator"] = Field(
        default="standalone", description="dcgm-exporter from its own chart (standalone) or from the GPU Operator"
    )
    nfd: Literal["auto", "enabled", "disabled"] = Field(
        default="auto", description="auto: let the GPU Operator deploy Node Feature Discovery unless it already runs"
    )


class PrometheusStorage(_Model):
    """Prometheus' TSDB volume. kubeadm clusters have no default StorageClass: name one, or opt into emptyDir."""

    size: str = "50Gi"
    storage_class: str | None = Field(default=None, description="StorageClass of the PersistentVolumeClaim")
    ephemeral: bool = Field(default=False, description="emptyDir: metrics are lost when the Prometheus pod moves")

    @field_validator("storage_class")
    @classmethod
    def _storage_class(cls, v: str | None) -> str | None:
        if v is not None and not K8S_NAME_RE.match(v):
            raise ValueError(f"{v!r} is not a StorageClass name (lower-case letters, digits, '-', '.')")
        return v

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:
        if not re.match(r"^[0-9]+(Ki|Mi|Gi|Ti|Pi|K|M|G|T|P)?$", v):
            raise ValueError(f"{v!r} is not a volume size: a number and a unit with no space, e.g. 50Gi, 500Mi, 1Ti")
        return v


class _Receiver(_Model):
    name: str = Field(pattern=RECEIVER_NAME_RE, description="receiver name, used in alerting.routes")


def _one_source(obj: BaseModel, stem: str) -> None:
    file_, env = getattr(obj, f"{stem}_file"), getattr(obj, f"{stem}_env")
    if (file_ is None) == (env is None):
        raise ValueError(f"set exactly one of {stem}_file or {stem}_env (secrets never go in gpustack.yaml)")


class WebhookReceiver(_Receiver):
    type: Literal["webhook"]
    url: str = Field(description="endpoint Alertmanager POSTs alerts to")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        problem = url_problem(v)
        if problem:
            raise ValueError(problem)
        return v


class SlackReceiver(_Receiver):
    type: Literal["slack"]
    api_url_file: Path | None = None
    api_url_env: str | None = None
    channel: str

    @model_validator(mode="after")
    def _source(self) -> SlackReceiver:
        _one_source(self, "api_url")
        return self


class PagerDutyReceiver(_Receiver):
    type: Literal["pagerduty"]
    routing_key_file: Path | None = None
    routing_key_env: str | None = None

    @model_validator(mode="after")
    def _source(self) -> PagerDutyReceiver:
        _one_source(self, "routing_key")
        return self


class EmailReceiver(_Receiver):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    type: Literal["email"]
    to: str
    from_: str = Field(alias="from")
    smarthost: str = Field(description="host:port of the SMTP server")
    auth_username: str | None = None
    auth_password_file: Path | None = None
    auth_password_env: str | None = None
    require_tls: bool = True

    @field_validator("to", "from_")
    @classmethod
    def _address(cls, v: str) -> str:
        if not re.fullmatch(r"[^@\s,;<>]+@[^@\s,;<>]+", v):
            raise ValueError(f"{v!r} is not an e-mail address (one address, name@domain)")
        return v

    @field_validator("smarthost")
    @classmethod
    def _smarthost(cls, v: str) -> str:
        if not re.match(r"^[^:\s]+:[0-9]{1,5}$", v) or not 0 < int(v.rsplit(":", 1)[1]) < 65536:
            raise ValueError(f"{v!r} is not host:port of an SMTP server, e.g. smtp.example.com:587")
        return v

    @model_validator(mode="after")
    def _source(self) -> EmailReceiver:
        if self.auth_username is not None:
            _one_source(self, "auth_password")
        elif self.auth_password_file is not None or self.auth_password_env is not None:
            raise ValueError("auth_password_file/auth_password_env need auth_username")
        return self


Receiver = Annotated[WebhookReceiver | SlackReceiver | PagerDutyReceiver | EmailReceiver, Field(discriminator="type")]


class AlertRoutes(_Model):
    """Severity -> receiver names. An empty list leaves those alerts in Alertmanager only (null receiver)."""

    critical: list[str] = Field(default_factory=list)
    warning: list[str] = Field(default_factory=list)
    info: list[str] = Field(default_factory=list)

    @field_validator("critical", "warning", "info", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v


class Alerting(_Model):
    """Where Alertmanager sends gpustack's alerts. No receivers: alerts stay visible in Alertmanager."""

    receivers: list[Receiver] = Field(default_factory=list)
    routes: AlertRoutes = AlertRoutes()


class Monitoring(_Model):
    prometheus_nodeport: Annotated[int, Field(ge=30000, le=32767)] | None = 30090
    grafana_nodeport: Annotated[int, Field(ge=30000, le=32767)] | None = 30300
    alertmanager_nodeport: Annotated[int, Field(ge=30000, le=32767)] | None = None
    grafana_admin_user: str = Field(default="admin", min_length=1)
    prometheus_retention: str = "15d"
    prometheus_storage: PrometheusStorage = PrometheusStorage()
    scrape_interval: str = "15s"
    dashboard_gnet_download: bool = Field(
        default=False, description="also let Grafana download dashboard 12239 from grafana.com (needs egress)"
    )
    team_label: str = Field(
        default="team",
        description="the namespace label naming its team: exported by kube-state-metrics, read by `report --by team`",
    )

    @field_validator("prometheus_retention", "scrape_interval")
    @classmethod
    def _duration(cls, v: str) -> str:
        if not re.match(DURATION_RE, v):
            raise ValueError(f"{v!r} is not a duration: use {DURATION_FORM}")
        return v

    @field_validator("team_label")
    @classmethod
    def _label_key(cls, v: str) -> str:
        if len(v) > 253 + 1 + 63 or not LABEL_KEY_RE.match(v):
            raise ValueError(f"{v!r} is not a Kubernetes label key: use e.g. team or example.com/team")
        return v

    @property
    def nodeports(self) -> list[int]:
        return [p for p in (self.prometheus_nodeport, self.grafana_nodeport, self.alertmanager_nodeport) if p]


class Ssh(_Model):
    known_hosts: Path = Path("~/.ssh/known_hosts")
    accept_new_host_keys: bool = Field(
        default=False, description="trust and record unknown host keys (first contact only)"
    )
    connect_timeout: Annotated[int, Field(ge=1, le=300)] = 10


class Preflight(_Model):
    ignore: list[str] = Field(
        default_factory=list, description="check ids to downgrade to warnings ('all' for every check)"
    )
    min_cpus: Annotated[int, Field(ge=1)] = 2
    min_memory_gib: Annotated[float, Field(gt=0)] = 4
    min_disk_gib: Annotated[float, Field(gt=0)] = 20
    registries: list[str] = Field(
        default_factory=lambda: list(pins.IMAGE_REGISTRIES),
        description="image registries every node must reach (P25): where containerd pulls from; with "
        "registry mirrors, list the mirrors (host[:port], or http://host:port for a plain-HTTP one)",
    )

    @field_validator("registries")
    @classmethod
    def _registries(cls, v: list[str]) -> list[str]:
        for entry in v:
            if not re.fullmatch(r"(https?://)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?/?", entry):
                raise ValueError(
                    f"{entry!r} is not a registry: host[:port] (e.g. nvcr.io, mirror.example.com:5000) "
                    "or http(s)://host[:port]"
                )
        return v


WINDOW_RE = r"^[1-9][0-9]*(s|m|h|d)$"
WINDOW_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CRON_RE = r"^\S+( \S+){4}$"


def window_seconds(value: str) -> int:
    """``15m`` -> 900 (a remediation window: s, m, h or d)."""
    return int(value[:-1]) * WINDOW_SECONDS[value[-1]]


class Remediation(_Model):
    """GPU fault quarantine (`gpustack health`), scheduled in the cluster. Off until enabled."""

    enabled: bool = Field(default=False, description="run `gpustack health --apply` on `schedule` in the cluster")
    schedule: str = Field(default="*/5 * * * *", description="the CronJob's schedule (five cron fields)")
    image: str | None = Field(
        default=None, description="a container image with gpustack installed (required when enabled: none is published)"
    )
    max_nodes_per_window: Annotated[int, Field(ge=0, le=10000)] = 2
    max_percent_per_window: Annotated[float, Field(gt=0, le=100)] = 10.0
    window: str = Field(default="1h", description="the circuit breaker's window")
    xid_lookback: str = Field(default="15m", description="how long a fatal XID counts")
    rows_growth_window: str = Field(default="1h", description="growth of uncorrectable remapped rows over this window")
    allocatable_hold: str = Field(default="10m", description="allocatable GPUs below capacity for at least this long")

    @field_validator("window", "xid_lookback", "rows_growth_window", "allocatable_hold")
    @classmethod
    def _window(cls, v: str) -> str:
        if not re.match(WINDOW_RE, v):
            raise ValueError(f"{v!r} is not a window: use a number and s, m, h or d, e.g. 15m, 1h")
        return v

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        if not re.match(CRON_RE, v.strip()):
            raise ValueError(f"{v!r} is not a cron schedule: five fields, e.g. '*/5 * * * *'")
        return v.strip()

    @model_validator(mode="after")
    def _image_when_enabled(self) -> Remediation:
        if self.enabled and not self.image:
            raise ValueError(
                "remediation.enabled needs remediation.image: a container image with gpustack installed "
                "(gpustack publishes none; see docs/operations.md)"
            )
        return self


class Config(_Model):
    nodes: list[Node] = Field(default_factory=list)
    cluster: Cluster = Cluster()
    versions: Versions = Versions()
    sources: Sources = Sources()
    proxy: Proxy = Proxy()
    firewall: Firewall = Firewall()
    monitoring: Monitoring = Monitoring()
    gpu: Gpu = Gpu()
    alerting: Alerting = Alerting()
    ssh: Ssh = Ssh()
    preflight: Preflight = Preflight()
    remediation: Remediation = Remediation()

    @property
    def control_plane(self) -> Node:
        return next(n for n in self.nodes if n.role == "control-plane")

    @property
    def workers(self) -> list[Node]:
        return [n for n in self.nodes if n.role == "worker"]

    @property
    def control_planes(self) -> list[Node]:
        """Every control-plane node; the first one runs kubeadm init, the others join it."""
        return [n for n in self.nodes if n.role == "control-plane"]
