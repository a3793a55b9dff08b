"""The CIS Kubernetes Benchmark's control-plane checks that can be judged from the API: each component's flags as its
static pod's mirror pod in kube-system shows them (the kubelet mirrors every static pod into the API with the
manifest's spec, command line included). Pure data and functions; gpustack/diagnose/checks_security.py registers
one doctor check per item.

Ids, texts and tests from kube-bench ``cfg/cis-1.12`` (aquasecurity/kube-bench, the benchmark kube-bench applies to
Kubernetes 1.34-1.36): ``master.yaml`` (1.2 API server, 1.3 controller-manager, 1.4 scheduler) and ``etcd.yaml`` (2).
Each test reads as kube-bench's ``test_items`` do: a flag set or not, ``eq``/``noteq``/``gte``, ``has``/``nothave``
in a comma list, ``valid_elements``. Items that need the hosts' files (1.1.x file modes, 1.2.28's provider, the
kubelet's 4.x) are not judged here.

Two kinds of exception, both reported as ``warn``, never hidden:

- a **relaxation**: a ``security:`` setting of gpustack.yaml the user changed from its default turns exactly its
  checks into warnings (``security.profiling: true`` -> 1.2.15, 1.3.2, 1.4.1);
- **left on purpose**: what gpustack does not set on any cluster yet, with the reason (docs/configuration.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: the control-plane components, by the ``component`` label kubeadm gives their static pods
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
MANIFEST = "/etc/kubernetes/manifests/{component}.yaml"

#: CIS 1.2.29's valid_elements (kube-bench cfg/cis-1.12 master.yaml): TLS 1.3's and the ECDHE AEAD suites
CIS_1_2_29_SUITES = frozenset(
    [
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ]
)

Flags = Mapping[str, str]
#: a judgement: (the check passes, the evidence: the flag as the command line has it, or that it is absent)
Verdict = tuple[bool, str]


def parse_flags(argv: Sequence[str]) -> dict[str, str]:
    """``--name=value`` (kubeadm's form) and ``--name value``; a bare ``--name`` is ``true`` (Go's bool flags).
    The last occurrence wins, as in Go's flag parsing."""
    out: dict[str, str] = {}
    args = [str(a) for a in argv]
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        if not eq:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = nxt if nxt and not nxt.startswith("-") and name not in _BOOL_FLAGS else "true"
        out[name] = value
    return out


#: flags read here that are booleans: a bare ``--profiling`` is true and takes no value after it
_BOOL_FLAGS = frozenset({"profiling", "anonymous-auth", "client-cert-auth", "peer-client-cert-auth", "auto-tls",
                         "peer-auto-tls", "service-account-lookup", "use-service-account-credentials",
                         "service-account-extend-token-expiration"})  # fmt: skip


def _shown(flags: Flags, name: str) -> str:
    return f"--{name}={flags[name]}" if name in flags else f"--{name} not set"


def is_set(*names: str) -> Callable[[Flags], Verdict]:
    def judge(flags: Flags) -> Verdict:
        return all(n in flags for n in names), "; ".join(_shown(flags, n) for n in names)

    return judge


def not_set(name: str) -> Callable[[Flags], Verdict]:
    return lambda flags: (name not in flags, _shown(flags, name))


def equals(name: str, value: str, *, unset_ok: bool = False) -> Callable[[Flags], Verdict]:
    """``eq`` (``unset_ok``: kube-bench's ``bin_op: or`` with ``set: false``)."""

    def judge(flags: Flags) -> Verdict:
        if name not in flags:
            return unset_ok, _shown(flags, name)
        return flags[name].strip().lower() == value.lower(), _shown(flags, name)

    return judge


def not_equal(name: str, value: str) -> Callable[[Flags], Verdict]:
    """``noteq``; kube-bench's test of a flag not set fails it (1.3.3)."""
    return lambda flags: (name in flags and flags[name].strip().lower() != value.lower(), _shown(flags, name))


def at_least(name: str, minimum: int) -> Callable[[Flags], Verdict]:
    def judge(flags: Flags) -> Verdict:
        try:
            return int(flags.get(name, "")) >= minimum, _shown(flags, name)
        except ValueError:
            return False, _shown(flags, name)

    return judge


def _items(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def has(name: str, element: str) -> Callable[[Flags], Verdict]:
    return lambda flags: (element in _items(flags.get(name, "")), _shown(flags, name))


def lacks(name: str, element: str) -> Callable[[Flags], Verdict]:
    """``nothave``, or the flag not set at all (kube-bench's ``bin_op: or`` with ``set: false``)."""
    return lambda flags: (element not in _items(flags.get(name, "")), _shown(flags, name))


def valid_elements(name: str, allowed: frozenset[str]) -> Callable[[Flags], Verdict]:
    def judge(flags: Flags) -> Verdict:
        if name not in flags:
            return False, _shown(flags, name)
        extra = [s for s in _items(flags[name]) if s not in allowed]
        return not extra, _shown(flags, name) + (f" (not in CIS's list: {', '.join(extra)})" if extra else "")

    return judge


def both(a: Callable[[Flags], Verdict], b: Callable[[Flags], Verdict]) -> Callable[[Flags], Verdict]:
    def judge(flags: Flags) -> Verdict:
        (ok_a, ev_a), (ok_b, ev_b) = a(flags), b(flags)
        return ok_a and ok_b, f"{ev_a}; {ev_b}"

    return judge


@dataclass(frozen=True)
class Rule:
    cis: str  # the benchmark's id, e.g. "1.2.15"
    name: str  # the check id's name part
    component: str  # a COMPONENTS entry
    text: str  # the benchmark's recommendation, as kube-bench words it
    judge: Callable[[Flags], Verdict]
    fix: str  # the flag as it should be (the fix names the manifest and the kubeadm setting)
    #: the security: settings (gpustack.yaml, in ``snap.settings["security"]``) -> why this is relaxed, or None
    relaxed: Callable[[Mapping[str, Any]], str | None] | None = None
    #: why gpustack leaves this as it is on every cluster (a warning, not a failure; docs/configuration.md)
    left: str = ""

    @property
    def check_id(self) -> str:
        return f"S{self.cis}-{self.name}"


def _setting(path: str, default: Any) -> Callable[[Mapping[str, Any]], Any]:
    def get(sec: Mapping[str, Any]) -> Any:
        node: Any = sec
        for part in path.split("."):
            node = node.get(part, default) if isinstance(node, Mapping) else default
        return node

    return get


def _when(path: str, test: Callable[[Any], bool], default: Any) -> Callable[[Mapping[str, Any]], str | None]:
    get = _setting(path, default)

    def relaxed(sec: Mapping[str, Any]) -> str | None:
        value = get(sec)
        return f"relaxed in gpustack.yaml: security.{path}: {value!r}" if test(value) else None

    return relaxed


_PROFILING = _when("profiling", lambda v: v is True, False)
_AUDIT_OFF = _when("audit.enabled", lambda v: v is False, True)


def _audit(limit: str, minimum: int) -> Callable[[Mapping[str, Any]], str | None]:
    below = _when(f"audit.{limit}", lambda v: isinstance(v, int) and v < minimum, minimum)
    return lambda sec: _AUDIT_OFF(sec) or below(sec)


API, CM, SCHED, ETCD = COMPONENTS[0], COMPONENTS[1], COMPONENTS[2], COMPONENTS[3]
ANONYMOUS_LEFT = (
    "kubeadm leaves anonymous requests on: the kubelet's probes of the API server's own pod (/livez, /readyz) and "
    "`kubeadm join`'s discovery (the cluster-info ConfigMap) are anonymous; RBAC grants anonymous users nothing else "
    "(a Manual check in CIS 1.12)"
)
KUBELET_CA_LEFT = (
    "a cluster made before gpustack set serverTLSBootstrap: its kubelets serve self-signed certificates, which no CA "
    "can verify; the API server gets --kubelet-certificate-authority once they serve CA-signed ones (docs/lifecycle.md, "
    "Kubelet serving certificates; new clusters have both)"
)

RULES: tuple[Rule, ...] = (
    Rule("1.2.1", "apiserver-anonymous-auth", API, "Ensure that the --anonymous-auth argument is set to false (Manual)",
         equals("anonymous-auth", "false"), "--anonymous-auth=false", left=ANONYMOUS_LEFT),
    Rule("1.2.2", "apiserver-token-auth-file", API, "Ensure that the --token-auth-file parameter is not set (Automated)",
         not_set("token-auth-file"), "remove --token-auth-file"),
    Rule("1.2.4", "apiserver-kubelet-client-cert", API,
         "Ensure that the --kubelet-client-certificate and --kubelet-client-key arguments are set as appropriate (Automated)",
         is_set("kubelet-client-certificate", "kubelet-client-key"),
         "--kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt "
         "--kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key"),
    Rule("1.2.5", "apiserver-kubelet-certificate-authority", API,
         "Ensure that the --kubelet-certificate-authority argument is set as appropriate (Automated)",
         is_set("kubelet-certificate-authority"), "--kubelet-certificate-authority=/etc/kubernetes/pki/ca.crt",
         left=KUBELET_CA_LEFT),
    Rule("1.2.6", "apiserver-authorization-not-alwaysallow", API,
         "Ensure that the --authorization-mode argument is not set to AlwaysAllow (Automated)",
         both(is_set("authorization-mode"), lacks("authorization-mode", "AlwaysAllow")), "--authorization-mode=Node,RBAC"),
    Rule("1.2.7", "apiserver-authorization-node", API, "Ensure that the --authorization-mode argument includes Node (Automated)",
         has("authorization-mode", "Node"), "--authorization-mode=Node,RBAC"),
    Rule("1.2.8", "apiserver-authorization-rbac", API, "Ensure that the --authorization-mode argument includes RBAC (Automated)",
         has("authorization-mode", "RBAC"), "--authorization-mode=Node,RBAC"),
    Rule("1.2.10", "apiserver-no-alwaysadmit", API,
         "Ensure that the admission control plugin AlwaysAdmit is not set (Automated)",
         lacks("enable-admission-plugins", "AlwaysAdmit"), "--enable-admission-plugins without AlwaysAdmit"),
    Rule("1.2.12", "apiserver-serviceaccount-admission", API,
         "Ensure that the admission control plugin ServiceAccount is set (Automated)",
         lacks("disable-admission-plugins", "ServiceAccount"), "--disable-admission-plugins without ServiceAccount"),
    Rule("1.2.13", "apiserver-namespacelifecycle-admission", API,
         "Ensure that the admission control plugin NamespaceLifecycle is set (Automated)",
         lacks("disable-admission-plugins", "NamespaceLifecycle"), "--disable-admission-plugins without NamespaceLifecycle"),
    Rule("1.2.14", "apiserver-noderestriction-admission", API,
         "Ensure that the admission control plugin NodeRestriction is set (Automated)",
         has("enable-admission-plugins", "NodeRestriction"), "--enable-admission-plugins=NodeRestriction"),
    Rule("1.2.15", "apiserver-profiling", API, "Ensure that the --profiling argument is set to false (Automated)",
         equals("profiling", "false"), "--profiling=false (security.profiling: false)", relaxed=_PROFILING),
    Rule("1.2.16", "apiserver-audit-log-path", API, "Ensure that the --audit-log-path argument is set (Automated)",
         is_set("audit-log-path"), "--audit-log-path=/var/log/kubernetes/audit/audit.log (security.audit.enabled: true)",
         relaxed=_AUDIT_OFF),
    Rule("1.2.17", "apiserver-audit-log-maxage", API,
         "Ensure that the --audit-log-maxage argument is set to 30 or as appropriate (Automated)",
         at_least("audit-log-maxage", 30), "--audit-log-maxage=30 (security.audit.max_age)", relaxed=_audit("max_age", 30)),
    Rule("1.2.18", "apiserver-audit-log-maxbackup", API,
         "Ensure that the --audit-log-maxbackup argument is set to 10 or as appropriate (Automated)",
         at_least("audit-log-maxbackup", 10), "--audit-log-maxbackup=10 (security.audit.max_backup)",
         relaxed=_audit("max_backup", 10)),
    Rule("1.2.19", "apiserver-audit-log-maxsize", API,
         "Ensure that the --audit-log-maxsize argument is set to 100 or as appropriate (Automated)",
         at_least("audit-log-maxsize", 100), "--audit-log-maxsize=100 (security.audit.max_size)",
         relaxed=_audit("max_size", 100)),
    Rule("1.2.21", "apiserver-service-account-lookup", API,
         "Ensure that the --service-account-lookup argument is set to true (Automated)",
         equals("service-account-lookup", "true", unset_ok=True), "--service-account-lookup=true (or not set)"),
    Rule("1.2.22", "apiserver-service-account-key-file", API,
         "Ensure that the --service-account-key-file argument is set as appropriate (Automated)",
         is_set("service-account-key-file"), "--service-account-key-file=/etc/kubernetes/pki/sa.pub"),
    Rule("1.2.23", "apiserver-etcd-client-cert", API,
         "Ensure that the --etcd-certfile and --etcd-keyfile arguments are set as appropriate (Automated)",
         is_set("etcd-certfile", "etcd-keyfile"),
         "--etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key"),
    Rule("1.2.24", "apiserver-tls-cert", API,
         "Ensure that the --tls-cert-file and --tls-private-key-file arguments are set as appropriate (Automated)",
         is_set("tls-cert-file", "tls-private-key-file"),
         "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt --tls-private-key-file=/etc/kubernetes/pki/apiserver.key"),
    Rule("1.2.25", "apiserver-client-ca-file", API, "Ensure that the --client-ca-file argument is set as appropriate (Automated)",
         is_set("client-ca-file"), "--client-ca-file=/etc/kubernetes/pki/ca.crt"),
    Rule("1.2.26", "apiserver-etcd-cafile", API, "Ensure that the --etcd-cafile argument is set as appropriate (Automated)",
         is_set("etcd-cafile"), "--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt"),
    Rule("1.2.27", "apiserver-encryption-provider-config", API,
         "Ensure that the --encryption-provider-config argument is set as appropriate (Manual)",
         is_set("encryption-provider-config"),
         "--encryption-provider-config=/etc/kubernetes/enc/encryption-config.yaml (security.encryption_at_rest: true)",
         relaxed=_when("encryption_at_rest", lambda v: v is False, True)),
    Rule("1.2.29", "apiserver-tls-cipher-suites", API,
         "Ensure that the API Server only makes use of Strong Cryptographic Ciphers (Manual)",
         valid_elements("tls-cipher-suites", CIS_1_2_29_SUITES),
         "--tls-cipher-suites with suites of CIS 1.2.29's list only (security.tls_cipher_suites, gpustack's default)",
         relaxed=_when("tls_cipher_suites", lambda v: (isinstance(v, list) and any(s not in CIS_1_2_29_SUITES for s in v))
                       or v == [], None)),
    Rule("1.2.30", "apiserver-extend-token-expiration", API,
         "Ensure that the --service-account-extend-token-expiration parameter is set to false (Automated)",
         equals("service-account-extend-token-expiration", "false"),
         "--service-account-extend-token-expiration=false (security.extend_token_expiration: false)",
         relaxed=_when("extend_token_expiration", lambda v: v is True, False)),
    Rule("1.3.2", "controller-manager-profiling", CM, "Ensure that the --profiling argument is set to false (Automated)",
         equals("profiling", "false"), "--profiling=false (security.profiling: false)", relaxed=_PROFILING),
    Rule("1.3.3", "controller-manager-service-account-credentials", CM,
         "Ensure that the --use-service-account-credentials argument is set to true (Automated)",
         not_equal("use-service-account-credentials", "false"), "--use-service-account-credentials=true"),
    Rule("1.3.4", "controller-manager-service-account-private-key", CM,
         "Ensure that the --service-account-private-key-file argument is set as appropriate (Automated)",
         is_set("service-account-private-key-file"), "--service-account-private-key-file=/etc/kubernetes/pki/sa.key"),
    Rule("1.3.5", "controller-manager-root-ca-file", CM,
         "Ensure that the --root-ca-file argument is set as appropriate (Automated)",
         is_set("root-ca-file"), "--root-ca-file=/etc/kubernetes/pki/ca.crt"),
    Rule("1.3.6", "controller-manager-rotate-kubelet-server-certificate", CM,
         "Ensure that the RotateKubeletServerCertificate argument is set to true (Automated)",
         lacks("feature-gates", "RotateKubeletServerCertificate=false"),
         "--feature-gates without RotateKubeletServerCertificate=false"),
    Rule("1.3.7", "controller-manager-bind-address", CM,
         "Ensure that the --bind-address argument is set to 127.0.0.1 (Automated)",
         equals("bind-address", "127.0.0.1", unset_ok=True), "--bind-address=127.0.0.1"),
    Rule("1.4.1", "scheduler-profiling", SCHED, "Ensure that the --profiling argument is set to false (Automated)",
         equals("profiling", "false"), "--profiling=false (security.profiling: false)", relaxed=_PROFILING),
    Rule("1.4.2", "scheduler-bind-address", SCHED, "Ensure that the --bind-address argument is set to 127.0.0.1 (Automated)",
         equals("bind-address", "127.0.0.1", unset_ok=True), "--bind-address=127.0.0.1"),
    Rule("2.1", "etcd-cert-file", ETCD,
         "Ensure that the --cert-file and --key-file arguments are set as appropriate (Automated)",
         is_set("cert-file", "key-file"),
         "--cert-file=/etc/kubernetes/pki/etcd/server.crt --key-file=/etc/kubernetes/pki/etcd/server.key"),
    Rule("2.2", "etcd-client-cert-auth", ETCD, "Ensure that the --client-cert-auth argument is set to true (Automated)",
         equals("client-cert-auth", "true"), "--client-cert-auth=true"),
    Rule("2.3", "etcd-auto-tls", ETCD, "Ensure that the --auto-tls argument is not set to true (Automated)",
         equals("auto-tls", "false", unset_ok=True), "remove --auto-tls (or --auto-tls=false)"),
    Rule("2.4", "etcd-peer-cert-file", ETCD,
         "Ensure that the --peer-cert-file and --peer-key-file arguments are set as appropriate (Automated)",
         is_set("peer-cert-file", "peer-key-file"),
         "--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt --peer-key-file=/etc/kubernetes/pki/etcd/peer.key"),
    Rule("2.5", "etcd-peer-client-cert-auth", ETCD,
         "Ensure that the --peer-client-cert-auth argument is set to true (Automated)",
         equals("peer-client-cert-auth", "true"), "--peer-client-cert-auth=true"),
    Rule("2.6", "etcd-peer-auto-tls", ETCD, "Ensure that the --peer-auto-tls argument is not set to true (Automated)",
         equals("peer-auto-tls", "false", unset_ok=True), "remove --peer-auto-tls (or --peer-auto-tls=false)"),
)  # fmt: skip
