"""The building blocks of the configuration model: the patterns and validators its fields share,
and :class:`StrictModel`, the base of every section (unknown keys are errors, values frozen)."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

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
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        return "a URL cannot contain control characters"
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


def ipv4_network(v: object) -> object:
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


class StrictModel(BaseModel):
    """Every config section: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
