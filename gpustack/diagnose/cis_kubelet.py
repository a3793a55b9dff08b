"""The CIS Kubernetes Benchmark's kubelet items (4.2.x), judged as kube-bench judges them. Pure data and functions;
gpustack/diagnose/checks_security_kubelet.py registers one doctor check per item.

Ids, texts, flags, config paths and tests are kube-bench's ``cfg/cis-1.12`` ``node.yaml`` (aquasecurity/kube-bench
commit a73ce378), read the way kube-bench's ``check/check.go`` ``execute`` and ``check/test.go`` read them:

- each ``test_item`` looks for its flag in the kubelet's command line first (``ps -fC kubelet``: a plain substring
  search, the value after ``=``; a bare ``--flag`` is ``true``); only when the flag is not there, it reads the path of
  the kubelet's config file (``/var/lib/kubelet/config.yaml``), where an unset key counts as not found;
- ``set: true`` (the default) with a ``compare``: the value compared (``eq`` and ``noteq`` on strings, booleans
  case-insensitively; ``nothave`` a substring; ``gte`` numbers; ``valid_elements`` every comma-separated element in
  the list); ``set: true`` without one: found is a pass; ``set: false``: not found is a pass;
- ``bin_op: or`` passes when any item passes, otherwise every item must.

Two readings of ours beyond kube-bench's, stricter only: 4.2.13 (a pod PID limit) counts a value below 1 as no limit
(the kubelet's ``-1`` means unlimited; kube-bench passes any value that is set), and 4.2.14 asks ``seccompDefault``
to be ``true``, as its text says (kube-bench passes it set to anything). Values the kubelet takes for its
default pass as kube-bench passes them (kubeadm writes ``streamingConnectionIdleTimeout: 0s``, which the kubelet's
v1beta1 defaulting turns into 4h; kube-bench compares the text ``0s`` with ``0``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpustack.config.security import CIS_CIPHER_SUITES

CONFIG = "/var/lib/kubelet/config.yaml"


@dataclass(frozen=True)
class Item:
    """One kube-bench ``test_item``: ``flag`` on the command line, else ``path`` (dotted) in the config file."""

    flag: str
    path: str = ""
    set: bool = True
    op: str = ""
    value: str = ""


@dataclass(frozen=True)
class Found:
    """What one item read: where (``"flag"``, ``"config"`` or ``""``: nowhere) and the value as kube-bench has it."""

    where: str
    value: str


def _flag_value(cmdline: str, flag: str) -> str:
    """kube-bench's ``flagTestItem.findValue``: ``(flag)(=|: *)*([^\\s]*) *``; empty means ``true`` for ``--x``."""
    m = re.search("(" + re.escape(flag) + r")(=|: *)*([^\s]*) *", cmdline)
    if m and m.group(3):
        return m.group(3)
    return "true" if flag.startswith("--") else flag


def _text(value: Any) -> str:
    """A config value as Go's jsonpath prints it (``true``/``false``, numbers, a list as kube-bench's ``range``
    expressions join it: each element and a comma); unset (None) is empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "".join(f"{_text(v)}," for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _path(config: Mapping[str, Any], path: str) -> str:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(part)
    return _text(node)


def find(item: Item, cmdline: str, config: Mapping[str, Any] | None) -> Found:
    if item.flag and item.flag in cmdline:
        return Found("flag", _flag_value(cmdline, item.flag))
    if item.path and config:
        value = _path(config, item.path)
        if value != "":
            return Found("config", value)
    return Found("", "")


def _elements(value: str) -> list[str]:
    return [v for v in value.split(",") if v != ""]


def compare(op: str, got: str, want: str) -> bool:
    """kube-bench's ``compareOp`` for the operations node.yaml's 4.2 items use."""
    low = got.lower()
    if op == "eq":
        return low == want if low in ("true", "false") else got == want
    if op == "noteq":
        return low != want if low in ("true", "false") else got != want
    if op == "nothave":
        return want not in got
    if op == "gte":
        try:
            return float(got) >= float(want)
        except ValueError:
            return False
    if op == "valid_elements":
        allowed = set(_elements(want))
        return all(e in allowed for e in _elements(got))
    raise ValueError(f"no compare operation {op!r}")


def passes(item: Item, found: Found) -> bool:
    if not item.set:
        return not found.where
    if found.where and item.op:
        return compare(item.op, found.value, item.value)
    return bool(found.where)


def shown(item: Item, found: Found) -> str:
    if found.where == "flag":
        return f"{item.flag}={found.value} (command line)"
    if found.where == "config":
        return f"{item.path}: {found.value.rstrip(',')} ({CONFIG})"
    return f"{item.path or item.flag} not set" + (f" ({item.flag} neither)" if item.path else "")


@dataclass(frozen=True)
class Rule:
    cis: str
    name: str
    #: kube-bench's text, verbatim
    text: str
    items: tuple[Item, ...]
    #: the setting as it should be (config file key, the gpustack setting that renders it)
    fix: str
    any_of: bool = False
    #: the security: settings (gpustack.yaml) -> why this is relaxed, or None
    relaxed: Callable[[Mapping[str, Any]], str | None] | None = None
    #: the kubelet's config -> why gpustack leaves it on purpose (a warning), or None (a failure)
    left: Callable[[Mapping[str, Any]], str | None] | None = None
    #: the first item's value must be a number of at least 1 (4.2.13: the kubelet's -1 is no limit)
    positive: bool = False

    @property
    def check_id(self) -> str:
        return f"S{self.cis}-{self.name}"


def judge(rule: Rule, argv: Sequence[str], config: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(passes, the evidence) of one kubelet: its command line and its parsed config file (None: none read)."""
    cmdline = " ".join(str(a) for a in argv)
    results = [(passes(i, f), shown(i, f)) for i in rule.items for f in [find(i, cmdline, config)]]
    ok = any(r for r, _ in results) if rule.any_of else all(r for r, _ in results)
    evidence = "; ".join(dict.fromkeys(s for _, s in results))
    if ok and rule.positive:
        found = find(rule.items[0], cmdline, config)
        try:
            ok = int(found.value) >= 1
        except ValueError:
            ok = False
        if not ok:
            evidence += " (below 1: no limit)"
    return ok, evidence


def _relaxed_when(path: str, test: Callable[[Any], bool], default: Any) -> Callable[[Mapping[str, Any]], str | None]:
    def relaxed(sec: Mapping[str, Any]) -> str | None:
        value = sec.get(path, default) if isinstance(sec, Mapping) else default
        return f"relaxed in gpustack.yaml: security.{path}: {value!r}" if test(value) else None

    return relaxed


HOSTNAME_LEFT = (
    "kubeadm adds --hostname-override (kubeadm-flags.env) when gpustack.yaml's node name differs from the host's "
    "hostname: the node keeps the name gpustack.yaml gives it (name nodes as their hostnames to meet it)"
)
SERVING_CERT_LEFT = (
    "serverTLSBootstrap: true: the kubelet serves a certificate the cluster CA signed, requested and rotated by the "
    "kubelet itself (/var/lib/kubelet/pki/kubelet-server-current.pem), so no fixed tlsCertFile is set "
    "(docs/decisions.md, 'Kubelet serving certificates')"
)
SECCOMP_LEFT = (
    "seccompDefault would give every container the runtime's default seccomp profile, changing what existing "
    "workloads may do; gpustack leaves it to each pod (securityContext.seccompProfile, which PodSecurity restricted "
    "asks for)"
)


def _serving_cert_left(config: Mapping[str, Any]) -> str | None:
    return SERVING_CERT_LEFT if config.get("serverTLSBootstrap") is True else None


SUITES = ",".join(
    [
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ]
)


def _suites_relaxed(sec: Mapping[str, Any]) -> str | None:
    value = sec.get("tls_cipher_suites") if isinstance(sec, Mapping) else None
    if isinstance(value, list) and (value == [] or any(s not in CIS_CIPHER_SUITES for s in value)):
        return f"relaxed in gpustack.yaml: security.tls_cipher_suites: {value!r}"
    return None


_PIDS_RELAXED = _relaxed_when("pod_pids_limit", lambda v: v is None, 32768)

RULES: tuple[Rule, ...] = (
    Rule("4.2.1", "kubelet-anonymous-auth", "Ensure that the --anonymous-auth argument is set to false (Automated)",
         (Item("--anonymous-auth", "authentication.anonymous.enabled", op="eq", value="false"),),
         "authentication.anonymous.enabled: false (kubeadm's default)"),
    Rule("4.2.2", "kubelet-authorization-mode", "Ensure that the --authorization-mode argument is not set to AlwaysAllow (Automated)",
         (Item("--authorization-mode", "authorization.mode", op="nothave", value="AlwaysAllow"),),
         "authorization.mode: Webhook (kubeadm's default)"),
    Rule("4.2.3", "kubelet-client-ca-file", "Ensure that the --client-ca-file argument is set as appropriate (Automated)",
         (Item("--client-ca-file", "authentication.x509.clientCAFile"),),
         "authentication.x509.clientCAFile: /etc/kubernetes/pki/ca.crt (kubeadm's default)"),
    Rule("4.2.4", "kubelet-read-only-port", "Verify that if defined, the --read-only-port argument is set to 0 (Manual)",
         (Item("--read-only-port", "readOnlyPort", op="eq", value="0"), Item("--read-only-port", "readOnlyPort", set=False)),
         "readOnlyPort: 0, or not set", any_of=True),
    Rule("4.2.5", "kubelet-streaming-idle-timeout",
         "Ensure that the --streaming-connection-idle-timeout argument is not set to 0 (Manual)",
         (Item("--streaming-connection-idle-timeout", "streamingConnectionIdleTimeout", op="noteq", value="0"),
          Item("--streaming-connection-idle-timeout", "streamingConnectionIdleTimeout", set=False)),
         "streamingConnectionIdleTimeout not 0 (e.g. 4h0m0s, the kubelet's default)", any_of=True),
    Rule("4.2.6", "kubelet-make-iptables-util-chains",
         "Ensure that the --make-iptables-util-chains argument is set to true (Automated)",
         (Item("--make-iptables-util-chains", "makeIPTablesUtilChains", op="eq", value="true"),
          Item("--make-iptables-util-chains", "makeIPTablesUtilChains", set=False)),
         "makeIPTablesUtilChains: true, or not set", any_of=True),
    Rule("4.2.7", "kubelet-hostname-override", "Ensure that the --hostname-override argument is not set (Manual)",
         (Item("--hostname-override", set=False),),
         "no --hostname-override in /var/lib/kubelet/kubeadm-flags.env (the node named as its hostname)",
         left=lambda _config: HOSTNAME_LEFT),
    Rule("4.2.8", "kubelet-event-qps",
         "Ensure that the eventRecordQPS argument is set to a level which ensures appropriate event capture (Manual)",
         (Item("--event-qps", "eventRecordQPS", op="gte", value="0"), Item("--event-qps", "eventRecordQPS", set=False)),
         "eventRecordQPS: 0 or more, or not set (the kubelet's default, 50)", any_of=True),
    Rule("4.2.9", "kubelet-tls-cert-file",
         "Ensure that the --tls-cert-file and --tls-private-key-file arguments are set as appropriate (Manual)",
         (Item("--tls-cert-file", "tlsCertFile"), Item("--tls-private-key-file", "tlsPrivateKeyFile")),
         "serverTLSBootstrap: true (gpustack's default: a CA-signed serving certificate), or tlsCertFile and "
         "tlsPrivateKeyFile", left=_serving_cert_left),
    Rule("4.2.10", "kubelet-rotate-certificates", "Ensure that the --rotate-certificates argument is not set to false (Automated)",
         (Item("--rotate-certificates", "rotateCertificates", op="eq", value="true"),
          Item("--rotate-certificates", "rotateCertificates", set=False)),
         "rotateCertificates: true (kubeadm's default)", any_of=True),
    Rule("4.2.11", "kubelet-rotate-server-certificate",
         "Verify that the RotateKubeletServerCertificate argument is set to true (Manual)",
         (Item("RotateKubeletServerCertificate", "featureGates.RotateKubeletServerCertificate", op="nothave", value="false"),
          Item("RotateKubeletServerCertificate", "featureGates.RotateKubeletServerCertificate", set=False)),
         "featureGates without RotateKubeletServerCertificate: false", any_of=True),
    Rule("4.2.12", "kubelet-tls-cipher-suites",
         "Ensure that the Kubelet only makes use of Strong Cryptographic Ciphers (Manual)",
         (Item("--tls-cipher-suites", "tlsCipherSuites", op="valid_elements", value=SUITES),),
         "tlsCipherSuites with suites of CIS 4.2.12's list only (security.tls_cipher_suites, gpustack's default)",
         relaxed=_suites_relaxed),
    Rule("4.2.13", "kubelet-pod-pids-limit", "Ensure that a limit is set on pod PIDs (Manual)",
         (Item("--pod-max-pids", "podPidsLimit"),),
         "podPidsLimit: 32768 (security.pod_pids_limit, gpustack's default)", relaxed=_PIDS_RELAXED, positive=True),
    Rule("4.2.14", "kubelet-seccomp-default", "Ensure that the --seccomp-default parameter is set to true (Manual)",
         (Item("--seccomp-default", "seccompDefault", op="eq", value="true"),),
         "seccompDefault: true", left=lambda _config: SECCOMP_LEFT),
)  # fmt: skip
