"""The bad-input corpus (issue #10): every case runs the real CLI entry point (``main``) in-process
and must exit 2, name the file/field or the variable, print no traceback and write nothing (no
state directory, no file anywhere under the working directory)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpustack.cli.app import main
from gpustack.config import pins

CP = "  - {name: cp1, address: 192.0.2.10, role: control-plane}\n"
GOOD = "nodes:\n" + CP + "  - {name: w1, address: 192.0.2.11}\n"


@dataclass(frozen=True)
class Case:
    id: str
    content: str | bytes | None  # the config file (gpustack.yaml); None: no file
    needles: tuple[str, ...]  # all must appear in stderr
    env: dict[str, str] = field(default_factory=dict)
    argv: tuple[str, ...] = ("plan",)
    filename: str = "gpustack.yaml"
    also: tuple[str, ...] = ()  # more files with the same content
    absent: tuple[str, ...] = ()  # none may appear in stderr
    quiet: bool = False  # nothing on stdout before the error


def node(**kw: object) -> str:
    base: dict[str, object] = {"name": "cp1", "address": "192.0.2.10", "role": "control-plane"}
    base.update(kw)
    return "nodes:\n  - {" + ", ".join(f"{k}: {v}" for k, v in base.items()) + "}\n"


CASES: list[Case] = [
    # ---- the file as a whole
    Case("empty-file", "", ("gpustack.yaml: the config file is empty",)),
    Case("comments-only", "# nothing yet\n", ("gpustack.yaml: the config file is empty",)),
    Case("no-nodes-section", "cluster: {name: lab}\n", ("gpustack.yaml: no `nodes:` section",)),
    Case("empty-file-up-yes", "", ("gpustack.yaml: the config file is empty",), argv=("up", "--yes")),
    Case("no-nodes-up-yes", "firewall: {enabled: false}\n", ("no `nodes:` section",), argv=("up", "--yes")),
    Case("nodes-empty-list", "nodes: []\n", ("gpustack.yaml:1: nodes: no nodes listed",)),
    Case("top-level-list", "- a\n- b\n", ("gpustack.yaml:1: the config must be a mapping",)),
    Case("top-level-scalar", "hello\n", ("gpustack.yaml:1: the config must be a mapping",)),
    Case("invalid-yaml", "nodes: [\n", ("gpustack.yaml:2:1: invalid YAML",)),
    Case("tab-indent", "nodes:\n\t- name: a\n", ("gpustack.yaml:2", "invalid YAML")),
    Case("binary", b"\x7fELF\x02\x01\x01\x00", ("gpustack.yaml:1: not a text file",)),
    Case("utf16", GOOD.encode("utf-16"), ("gpustack.yaml: the file is UTF-16-encoded",)),
    Case("latin1", b"nodes:\n  - {name: caf\xe9}\n", ("gpustack.yaml:2: not valid UTF-8",)),
    Case("nul-in-middle", GOOD.encode() + b"\x00", ("gpustack.yaml:4: not a text file",)),
    Case("recursive-alias", GOOD + "x: &x [1, *x]\n", ("gpustack.yaml:4: x[1]: recursive YAML alias",)),
    Case(
        "alias-bomb",
        'a: &a ["l","l","l","l","l","l","l","l","l"]\n'
        + "".join(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)),
        ("gpustack.yaml:5: e: YAML aliases expand to more than 10,000 values",),
    ),
    Case("deep-nesting", "x: " + "[" * 500 + "]" * 500 + "\n", ("gpustack.yaml:1: invalid YAML: nested more than",)),
    Case("list-key", GOOD + "? [a, b]\n: 1\n", ("gpustack.yaml:4:", "mapping key must be a plain name")),
    Case("mapping-key", GOOD + "{a: 1}: 2\n", ("gpustack.yaml:4:", "mapping key must be a plain name")),
    Case("duplicate-key", GOOD + "cluster: {}\ncluster: {}\n", ("gpustack.yaml:5: duplicate key 'cluster'",)),
    Case("directory", None, ("cannot read config file: a directory",), argv=("plan", "-c", ".")),
    Case("missing-file", None, ("nope.yaml: cannot read config file",), argv=("plan", "-c", "nope.yaml")),
    Case(
        "yaml-and-yml",
        GOOD,
        ("gpustack.yaml and", "gpustack.yml exist: which one is the config?"),
        also=("gpustack.yml",),
    ),
    Case(
        "markup-in-path",
        GOOD + "bogus: 1\n",
        ("conf[/]x/gpustack.yaml:4: bogus: unknown key",),
        argv=("plan", "-c", "conf[/]x/gpustack.yaml"),
        filename="conf[/]x/gpustack.yaml",
    ),
    Case(
        "markup-in-value",
        node(name="'[bold]x[/bold]'"),
        ("nodes[0].name: must be a lower-case DNS name",),
    ),
    Case(
        "missing-config-env",
        None,
        ("environment variable GPUSTACK_CONFIG: missing.yaml: cannot read config file",),
        env={"GPUSTACK_CONFIG": "missing.yaml"},
    ),
    # ---- keys
    Case("unknown-top-key", GOOD + "bogus: 1\n", ("gpustack.yaml:4: bogus: unknown key",)),
    Case(
        "misspelt-section", GOOD + "firewal: {enabled: false}\n", ("firewal: unknown key (did you mean 'firewall'?)",)
    ),
    Case(
        "misspelt-node-key",
        node(adress="x"),
        ("gpustack.yaml:2: nodes[0].adress: unknown key (did you mean 'address'?)",),
    ),
    Case("yes-as-key", GOOD + "yes: 1\n", ("gpustack.yaml:4: yes: unknown key",)),
    # ---- environment
    Case(
        "env-typo-section",
        GOOD,
        ("GPUSTACK_FIREWAL__ENABLED", "did you mean GPUSTACK_FIREWALL__ENABLED"),
        env={"GPUSTACK_FIREWAL__ENABLED": "false"},
    ),
    Case(
        "env-typo-field",
        GOOD,
        ("GPUSTACK_CLUSTER__POD_CDIR", "did you mean GPUSTACK_CLUSTER__POD_CIDR"),
        env={"GPUSTACK_CLUSTER__POD_CDIR": "10.0.0.0/16"},
    ),
    Case(
        "env-no-section",
        GOOD,
        ("GPUSTACK_KUBERNETES", "GPUSTACK_VERSIONS__KUBERNETES"),
        env={"GPUSTACK_KUBERNETES": "1.35"},
    ),
    Case(
        "env-bad-value",
        GOOD,
        ("environment (GPUSTACK_CLUSTER__POD_CIDR): cluster.pod_cidr",),
        env={"GPUSTACK_CLUSTER__POD_CIDR": "banana"},
    ),
    Case(
        "env-pod-cidr-overlaps-file-service-cidr",
        GOOD + "cluster: {service_cidr: 10.96.0.0/16}\n",
        (
            "environment (GPUSTACK_CLUSTER__POD_CIDR): cluster.pod_cidr: pod CIDR 10.96.0.0/12 and service CIDR 10.96.0.0/16 overlap",
        ),
        env={"GPUSTACK_CLUSTER__POD_CIDR": "10.96.0.0/12"},
        absent=("gpustack.yaml:4",),
    ),
    Case(
        "env-bad-bool",
        GOOD,
        ("environment (GPUSTACK_FIREWALL__ENABLED): firewall.enabled",),
        env={"GPUSTACK_FIREWALL__ENABLED": "perhaps"},
    ),
    Case(
        "env-bad-yaml",
        GOOD,
        ("environment variable GPUSTACK_FIREWALL__EXTRA_TCP_PORTS: invalid YAML",),
        env={"GPUSTACK_FIREWALL__EXTRA_TCP_PORTS": "[1, 2"},
    ),
    Case(
        "env-list-section",
        GOOD,
        ("GPUSTACK_NODES__ADDRESS", "cannot be set from the environment"),
        env={"GPUSTACK_NODES__ADDRESS": "192.0.2.1"},
    ),
    Case(
        "env-bad-version",
        GOOD,
        ("environment (GPUSTACK_VERSIONS__KUBERNETES)", "unknown Kubernetes version"),
        env={"GPUSTACK_VERSIONS__KUBERNETES": "1.20"},
    ),
    # ---- nodes
    Case("bad-role", node(role="master"), ("gpustack.yaml:2: nodes[0].role",)),
    Case("bad-port", node(port=70000), ("gpustack.yaml:2: nodes[0].port",)),
    Case("bad-node-name", node(name="Worker_1"), ("nodes[0].name: must be a lower-case DNS name",)),
    Case("missing-address", "nodes:\n  - {name: cp1, role: control-plane}\n", ("nodes[0].address: required field",)),
    Case("duplicate-names", GOOD.replace("name: w1", "name: cp1"), ("nodes[1].name: duplicate node name",)),
    Case("no-control-plane", GOOD.replace("control-plane", "worker"), ("nodes: no node has role: control-plane",)),
    Case(
        "two-control-planes",
        GOOD.replace("192.0.2.11}", "192.0.2.11, role: control-plane}"),
        ("nodes[1].role: 2 control-plane nodes: etcd needs an odd number", "cluster.control_plane_endpoint"),
    ),
    Case(
        "two-local",
        node(connection="local") + "  - {name: w1, address: 192.0.2.11, connection: local}\n",
        ("nodes[1].connection: only one node",),
    ),
    Case("missing-ssh-key", node(ssh_key="/nonexistent/key"), ("nodes[0].ssh_key: SSH key",)),
    # ---- cluster / versions / monitoring (shape)
    Case(
        "overlapping-cidrs",
        GOOD + "cluster: {pod_cidr: 10.96.0.0/16}\n",
        ("gpustack.yaml:4: cluster.pod_cidr: pod CIDR 10.96.0.0/16 and service CIDR 10.96.0.0/12 overlap",),
    ),
    Case("node-in-pod-cidr", GOOD.replace("192.0.2.11", "10.244.3.4"), ("nodes[1].address: node address 10.244.3.4",)),
    Case("small-pod-cidr", GOOD + "cluster: {pod_cidr: 10.244.0.0/25}\n", ("cluster.pod_cidr: pod CIDR must be /24",)),
    Case("unknown-k8s", GOOD + "versions: {kubernetes: '1.20'}\n", ("versions.kubernetes: unknown Kubernetes",)),
    Case("unpinned-helm", GOOD + "versions: {helm: 3.99.0}\n", ("versions.helm: Helm 3.99.0 has no pinned checksum",)),
    Case("nodeport-range", GOOD + "monitoring: {grafana_nodeport: 80}\n", ("monitoring.grafana_nodeport",)),
    Case(
        "nodeport-clash",
        GOOD + "monitoring: {prometheus_nodeport: 30090, grafana_nodeport: 30090}\n",
        ("NodePort 30090 is already used",),
    ),
    Case(
        "storage-size",
        GOOD + "monitoring: {prometheus_storage: {size: lots}}\n",
        ("monitoring.prometheus_storage.size",),
    ),
    Case("bad-timeout", GOOD + "ssh: {connect_timeout: soon}\n", ("gpustack.yaml:4: ssh.connect_timeout",)),
    Case(
        "receiver-two-sources",
        GOOD + "alerting: {receivers: [{type: pagerduty, name: p, routing_key_env: A, routing_key_file: /x}]}\n",
        ("gpustack.yaml:4: alerting.receivers[0]: set exactly one of routing_key_file",),
    ),
    Case(
        "route-unknown-receiver",
        GOOD + "alerting: {routes: {critical: [pager]}}\n",
        ("alerting.routes.critical[0]: unknown receiver 'pager'",),
    ),
    Case("bad-receiver-type", GOOD + "alerting: {receivers: [{type: fax, name: f}]}\n", ("alerting.receivers[0]",)),
    Case("bad-gpu-driver", GOOD + "gpu: {driver: nouveau}\n", ("gpustack.yaml:4: gpu.driver",)),
    # ---- values checked beyond their type
    Case("ipv4-octet-300", node(address="192.0.2.300"), ("nodes[0].address: '192.0.2.300' is not a valid IPv4",)),
    Case("ipv4-three-parts", node(address="10.1.2"), ("nodes[0].address: '10.1.2' is not a valid IPv4",)),
    Case("loopback-address", node(address="127.0.0.1"), ("nodes[0].address: 127.0.0.1 is a loopback address",)),
    Case("loopback-local-node", node(address="127.0.1.1", connection="local"), ("127.0.1.1 is a loopback",)),
    Case("localhost-name", node(address="localhost"), ("nodes[0].address: 'localhost' is this machine's loopback",)),
    Case("unspecified-address", node(address="0.0.0.0"), ("nodes[0].address: 0.0.0.0 means 'any address'",)),
    Case("multicast-address", node(address="239.1.1.1"), ("nodes[0].address: 239.1.1.1 is a multicast",)),
    Case("link-local-address", node(address="169.254.0.5"), ("nodes[0].address: 169.254.0.5 is a link-local",)),
    Case("ipv6-loopback", node(address="'::1'"), ("nodes[0].address: ::1 is a loopback address",)),
    Case(
        "cidr-host-bits",
        GOOD + "cluster: {pod_cidr: 10.244.0.1/16}\n",
        ("gpustack.yaml:4: cluster.pod_cidr: '10.244.0.1/16' has host bits set; did you mean 10.244.0.0/16?",),
    ),
    Case(
        "cidr-bad-prefix", GOOD + "cluster: {service_cidr: 10.96.0.0/40}\n", ("cluster.service_cidr", "prefix length")
    ),
    Case(
        "cidr-not-cidr", GOOD + "cluster: {pod_cidr: banana}\n", ("cluster.pod_cidr: 'banana' is not an IPv4 network",)
    ),
    Case(
        "service-cidr-too-small",
        GOOD + "cluster: {service_cidr: 10.96.0.0/29}\n",
        ("cluster.service_cidr: service CIDR 10.96.0.0/29 is too small", "10.96.0.10"),
    ),
    Case("service-cidr-too-large", GOOD + "cluster: {service_cidr: 10.0.0.0/8}\n", ("10.0.0.0/8 is too large",)),
    Case("cluster-name-traversal", GOOD + "cluster: {name: ../../etc}\n", ("cluster.name: '../../etc' is not a safe",)),
    Case(
        "one-megabyte-value",
        GOOD + "cluster: {name: " + "a" * 1_000_000 + "}\n",
        ("cluster.name: 'aaaa", "(1,000,000 characters) is not a safe cluster name"),
    ),
    Case("cluster-name-empty", GOOD + "cluster: {name: ''}\n", ("cluster.name: '' is not a safe cluster name",)),
    Case("cluster-name-space", GOOD + "cluster: {name: my lab}\n", ("cluster.name: 'my lab' is not a safe",)),
    Case("cluster-name-slash", GOOD + "cluster: {name: a/b}\n", ("cluster.name: 'a/b' is not a safe",)),
    Case("cluster-name-dots", GOOD + "cluster: {name: a..b}\n", ("cluster.name: 'a..b' is not a safe",)),
    Case("iface-slash", GOOD + "cluster: {flannel_iface: eth0/1}\n", ("cluster.flannel_iface: 'eth0/1' is not",)),
    Case("iface-too-long", GOOD + "cluster: {flannel_iface: enp1s0f0np0abcdef}\n", ("cluster.flannel_iface",)),
    Case("dns-domain", GOOD + "cluster: {dns_domain: 'cluster local'}\n", ("cluster.dns_domain",)),
    Case(
        "source-url-scheme",
        GOOD + "sources: {helm_url: 'ftp://m/helm-{version}.tgz'}\n",
        ("sources.helm_url: must be a URL starting with http:// or https://",),
    ),
    Case(
        "source-url-placeholder",
        GOOD + "sources: {kubernetes_apt_url: 'https://m/v{minr}/'}\n",
        ("sources.kubernetes_apt_url: unknown placeholder {minr}",),
    ),
    Case("source-url-no-host", GOOD + "sources: {helm_url: 'https:///x.tar.gz'}\n", ("has no host name",)),
    Case(
        "flannel-manifest-url-removed",
        GOOD + "sources: {flannel_manifest_url: 'https://mirror.lan/kube-flannel.yml'}\n",
        ("sources.flannel_manifest_url", "gpustack renders Flannel's manifest itself"),
    ),
    Case(
        "flannel-sha256-removed",
        GOOD + "versions: {flannel_sha256: " + "a" * 64 + "}\n",
        ("versions.flannel_sha256", "gpustack renders Flannel's manifest itself"),
    ),
    Case(
        "flannel-version-not-rendered",
        GOOD + "versions: {flannel: 0.27.0}\n",
        ("versions.flannel", f"{pins.FLANNEL_VERSION} only"),
    ),
    Case("proxy-no-scheme", GOOD + "proxy: {http: 'proxy.local:3128'}\n", ("proxy.http: must be a URL",)),
    Case("proxy-bad-port", GOOD + "proxy: {https: 'http://p:99999'}\n", ("proxy.https: not a valid URL",)),
    Case("proxy-path", GOOD + "proxy: {http: 'http://p:3128/x'}\n", ("proxy.http", "has no path")),
    Case("no-proxy-comma", GOOD + "proxy: {no_proxy: ['a.local, b.local']}\n", ("proxy.no_proxy", "one host")),
    Case(
        "webhook-url",
        GOOD + "alerting: {receivers: [{type: webhook, name: h, url: 'hooks.example.com'}]}\n",
        ("alerting.receivers[0].url: must be a URL",),
    ),
    Case(
        "smarthost",
        GOOD + "alerting: {receivers: [{type: email, name: m, to: a@b, from: c@d, smarthost: smtp}]}\n",
        ("smarthost: 'smtp' is not host:port",),
    ),
    Case(
        "retention-words",
        GOOD + "monitoring: {prometheus_retention: 15 days}\n",
        ("monitoring.prometheus_retention: '15 days' is not a duration", "e.g. 15d"),
    ),
    Case("scrape-interval", GOOD + "monitoring: {scrape_interval: 15}\n", ("monitoring.scrape_interval",)),
    Case("node-user-shell", node(user="'root; rm -rf /'"), ("nodes[0].user: 'root; rm -rf /' is not a login name",)),
    Case(
        "version-path", GOOD + "versions: {flannel: ../../etc}\n", ("versions.flannel: '../../etc' is not a version",)
    ),
    Case("chart-version-words", GOOD + "versions: {gpu_operator: latest}\n", ("versions.gpu_operator: 'latest'",)),
    Case(
        "helm-sha-short",
        GOOD + "versions: {helm: 3.99.0, helm_sha256: {amd64: abc}}\n",
        ("versions.helm_sha256: amd64: 'abc' is not a sha256",),
    ),
    Case(
        "helm-sha-arch",
        GOOD + "versions: {helm: 3.99.0, helm_sha256: {x86: " + "a" * 64 + "}}\n",
        ("versions.helm_sha256: unknown architecture 'x86'",),
    ),
    Case(
        "storage-class-name",
        GOOD + "monitoring: {prometheus_storage: {storage_class: Fast SSD}}\n",
        ("monitoring.prometheus_storage.storage_class: 'Fast SSD' is not a StorageClass name",),
    ),
    Case(
        "email-two-addresses",
        GOOD + "alerting: {receivers: [{type: email, name: m, to: 'a@b, c@d', from: e@f, smarthost: 'smtp:25'}]}\n",
        ("alerting.receivers[0].to: 'a@b, c@d' is not an e-mail address",),
    ),
    Case(
        "registry-with-path",
        GOOD + "preflight: {registries: ['https://nvcr.io/nvidia']}\n",
        ("gpustack.yaml:4: preflight.registries: 'https://nvcr.io/nvidia' is not a registry: host[:port]",),
    ),
    Case("registry-space", GOOD + "preflight: {registries: ['my mirror']}\n", ("preflight.registries: 'my mirror'",)),
    # ---- render --out and init: the path itself
    Case(
        "render-out-is-file",
        GOOD + "# x\n",
        ("--out gpustack.yaml: exists and is not a directory",),
        argv=("render", "--out", "gpustack.yaml"),
    ),
    Case(
        "render-out-under-file",
        GOOD,
        ("--out gpustack.yaml/sub: gpustack.yaml is not a directory",),
        argv=("render", "--out", "gpustack.yaml/sub"),
    ),
    Case(
        "render-out-unwritable",
        GOOD,
        ("--out /proc/gpustack-render", "cannot write"),
        argv=("render", "--out", "/proc/gpustack-render"),
    ),
    Case(
        "init-missing-dir",
        None,
        ("cannot write nodir/gpustack.yaml: directory nodir does not exist",),
        argv=("init", "nodir/gpustack.yaml"),
    ),
    Case("init-into-directory", None, ("is a directory",), argv=("init", ".")),
    Case("init-exists", GOOD, ("gpustack.yaml exists; pass --force",), argv=("init",)),
    Case("init-unwritable", None, ("cannot write /proc/gpustack.yaml",), argv=("init", "/proc/gpustack.yaml")),
    # ---- other commands load the same way
    Case("render-bad-config", GOOD + "bogus: 1\n", ("bogus: unknown key",), argv=("render", "--out", "out")),
    Case("verify-bad-config", "", ("the config file is empty",), argv=("verify",)),
    Case("doctor-bad-config", GOOD + "bogus: 1\n", ("bogus: unknown key",), argv=("doctor",)),
    Case("password-bad-config", "", ("the config file is empty",), argv=("grafana-password",)),
    # ---- flags: contradictions and empty lists are refused, never "run nothing" or "run everything"
    Case(
        "only-and-skip-same",
        GOOD,
        ("--only and --skip both name os",),
        argv=("up", "--only", "os", "--skip", "os", "--yes"),
    ),
    Case(
        "from-and-skip-same",
        GOOD,
        ("--from cluster and --skip cluster contradict",),
        argv=("up", "--from", "cluster", "--skip", "cluster", "--yes"),
    ),
    Case("only-comma", GOOD, ("--only ',': names nothing",), argv=("up", "--only", ",", "--yes")),
    Case("only-empty", GOOD, ("--only '': names nothing",), argv=("up", "--only", "", "--dry-run")),
    Case("skip-blank", GOOD, ("--skip ' , ': names nothing",), argv=("plan", "--skip", " , ")),
    Case(
        "only-and-from",
        GOOD,
        ("--only and --from cannot be combined",),
        argv=("plan", "--only", "os", "--from", "helm"),
    ),
    Case(
        "only-unknown",
        GOOD,
        ("--only: unknown stage nope", "stages are: preflight, os"),
        argv=("up", "--only", "nope", "--yes"),
    ),
    Case("from-unknown", GOOD, ("--from: unknown stage etcd",), argv=("up", "--from", "etcd", "--yes")),
    Case(
        "only-preflight-skip-preflight",
        GOOD,
        ("--only and --skip both name preflight",),
        argv=("up", "--only", "preflight", "--skip", "preflight", "--dry-run"),
    ),
    Case(
        "reset-stage-from-up", GOOD, ("unknown stage os", "reset, local-state"), argv=("plan", "reset", "--only", "os")
    ),
    Case("plan-unknown-command", GOOD, ("no plan for 'deploy'",), argv=("plan", "deploy")),
    Case(
        "ignore-preflight-comma",
        GOOD,
        ("--ignore-preflight ',': names nothing",),
        argv=("up", "--ignore-preflight", ",", "--yes"),
    ),
    Case("up-no-terminal", GOOD, ("no terminal to confirm on: pass --yes",), argv=("up",)),
    Case("up-extra-argument", GOOD, ("unexpected extra argument", "cp1"), argv=("up", "cp1")),
    Case("up-unknown-flag", GOOD, ("No such option: --nodes",), argv=("up", "--nodes", "cp1")),
    Case(
        "kubernetes-version-flag",
        GOOD,
        ("command-line flag: versions.kubernetes",),
        argv=("up", "--kubernetes-version", "1.20", "--yes"),
    ),
    Case(
        "render-dash-o",
        GOOD,
        ("No such option: -o (did you mean --out?)", "-o is --output"),
        argv=("render", "-o", "out"),
    ),
    Case("render-no-out", GOOD, ("Missing option '--out'",), argv=("render",)),
    Case("reset-node-comma", GOOD, ("--node ',': names nothing",), argv=("reset", "--node", ",", "--yes")),
    Case("reset-node-unknown", GOOD, ("no node named nope",), argv=("reset", "--node", "nope", "--yes")),
    Case("reset-no-terminal", GOOD, ("no terminal to confirm on",), argv=("reset",)),
    Case("upgrade-nothing", GOOD, ("needs --to VERSION", "--components"), argv=("upgrade",)),
    Case("upgrade-both", GOOD, ("one at a time",), argv=("upgrade", "--to", "1.36", "--components")),
    Case(
        "plan-upgrade-unpinned",
        GOOD,
        ("--to 1.99: not a Kubernetes version gpustack pins",),
        argv=("plan", "upgrade", "--to", "1.99"),
        quiet=True,
    ),
    Case(
        "upgrade-unpinned",
        GOOD,
        ("--to 1.99: not a Kubernetes version gpustack pins",),
        argv=("upgrade", "--to", "1.99", "--yes"),
    ),
    Case(
        "plan-upgrade-banana",
        GOOD,
        ("--to banana: not a Kubernetes version",),
        argv=("plan", "upgrade", "--to", "banana"),
    ),
    Case("verify-layer-unknown", GOOD, ("--layer gpu: layers are host, runtime",), argv=("verify", "--layer", "gpu")),
    Case("verify-layer-comma", GOOD, ("--layer ',': names nothing",), argv=("verify", "--layer", ",")),
    Case(
        "verify-output-yaml", GOOD, ("--output yaml: choose one of table, json, junit",), argv=("verify", "-o", "yaml")
    ),
    Case("verify-check-unknown", GOOD, ("unknown check id(s): Z99",), argv=("verify", "--check", "Z99")),
    Case(
        "verify-ignore-everything",
        GOOD,
        ("no verify check matches",),
        argv=("verify", "--layer", "host", "--ignore", "H00,H01,H02,H03,C02"),
    ),
    Case(
        "verify-list-junit",
        GOOD,
        ("--list --output junit: the list is a table or json",),
        argv=("verify", "--list", "-o", "junit"),
    ),
    Case("verify-list-check-unknown", GOOD, ("unknown check id(s): K99",), argv=("verify", "--list", "--check", "K99")),
    Case(
        "verify-kubeconfig-missing",
        GOOD,
        ("--kubeconfig missing.conf: no such file",),
        argv=("verify", "--kubeconfig", "missing.conf"),
    ),
    Case(
        "verify-snapshot-missing",
        GOOD,
        ("--from-snapshot nope.json: no such file",),
        argv=("verify", "--from-snapshot", "nope.json"),
        absent=("--snapshot ",),
    ),
    Case(
        "doctor-snapshot-not-json",
        GOOD,
        ("--from-snapshot gpustack.yaml: cannot load: not a gpustack snapshot",),
        argv=("doctor", "--from-snapshot", "gpustack.yaml"),
    ),
    Case(
        "verify-kubeconfig-directory",
        GOOD,
        ("--kubeconfig .: is a directory, not a file",),
        argv=("verify", "--kubeconfig", "."),
        absent=("no such file",),
    ),
    Case(
        "verify-save-missing-directory",
        GOOD,
        ("--save no/such/dir/r.json: directory no/such/dir does not exist",),
        argv=("verify", "--save", "no/such/dir/r.json"),
        quiet=True,
    ),
    Case(
        "doctor-save-snapshot-missing-directory",
        GOOD,
        ("--save-snapshot no/such/s.json: directory no/such does not exist",),
        argv=("doctor", "--save-snapshot", "no/such/s.json"),
        quiet=True,
    ),
    Case(
        "doctor-bundle-missing-directory",
        GOOD,
        ("--bundle no/such/b.tar.gz: directory no/such does not exist",),
        argv=("doctor", "--bundle", "no/such/b.tar.gz"),
        quiet=True,
    ),
    Case(
        "diag-save-is-a-directory",
        GOOD,
        ("--save .: is a directory",),
        argv=("diag", "--save", "."),
        quiet=True,
    ),
    Case("doctor-yes-without-fix", GOOD, ("--yes only applies to --fix",), argv=("doctor", "--yes")),
    Case(
        "doctor-fix-snapshot",
        GOOD,
        ("--fix needs the live cluster",),
        argv=("doctor", "--fix", "--from-snapshot", "s.json"),
        also=("s.json",),
    ),
    Case("version-output-yaml", GOOD, ("--output yaml: use table or json",), argv=("version", "-o", "yaml")),
    Case(
        "bundle-os-unknown",
        GOOD,
        ("--os windows-11: not a supported OS",),
        argv=("bundle", "list", "--os", "windows-11"),
    ),
    Case("no-such-command", GOOD, ("No such command 'deploy'",), argv=("deploy",)),
    # ---- gpustack's own environment variables: checked before anything is taken or written
    Case(
        "keep-runs-zero",
        GOOD,
        ("GPUSTACK_KEEP_RUNS='0': must be a whole number",),
        env={"GPUSTACK_KEEP_RUNS": "0"},
        argv=("up", "--yes"),
    ),
    Case("keep-runs-words", GOOD, ("GPUSTACK_KEEP_RUNS='all'",), env={"GPUSTACK_KEEP_RUNS": "all"}),
    Case(
        "state-dir-is-a-file",
        GOOD,
        ("GPUSTACK_STATE_DIR='gpustack.yaml/state': not a directory (gpustack.yaml is not a directory)",),
        env={"GPUSTACK_STATE_DIR": "gpustack.yaml/state"},
        argv=("up", "--yes"),
    ),
    Case(
        "config-env-empty-file",
        "",
        ("the config file is empty",),
        env={"GPUSTACK_CONFIG": "gpustack.yaml"},
        argv=("up", "--dry-run"),
    ),
    Case("env-unknown-own-looking", GOOD, ("GPUSTACK_STATEDIR",), env={"GPUSTACK_STATEDIR": "/tmp/x"}),
    Case(
        "env-section-only",
        GOOD,
        ("GPUSTACK_CLUSTER", "expected GPUSTACK_<SECTION>__<FIELD>"),
        env={"GPUSTACK_CLUSTER": "x"},
    ),
    # ---- report: every option's value checked before Prometheus is asked anything
    Case("report-since-words", GOOD, ("--since '30 days': not a duration",), argv=("report", "--since", "30 days")),
    Case(
        "report-since-too-long", GOOD, ("--since '1000d'", "between 1h and 730d"), argv=("report", "--since", "1000d")
    ),
    Case("report-price-word", GOOD, ("--price 'cheap'", "not a price"), argv=("report", "--price", "cheap")),
    Case("report-price-model", GOOD, ("--price 'H100=x'", "not a price"), argv=("report", "--price", "H100=x")),
    Case("report-price-negative", GOOD, ("--price 'A100=-2'", "0 or more"), argv=("report", "--price", "A100=-2")),
    Case("report-price-two-defaults", GOOD, ("two prices for every model",), argv=("report", "--price", "1,2")),
    Case(
        "report-by", GOOD, ("--by 'pod': choose one of namespace, team, node, model",), argv=("report", "--by", "pod")
    ),
    Case("report-output", GOOD, ("--output 'yaml': choose one of table, csv, json",), argv=("report", "-o", "yaml")),
    Case(
        "report-until", GOOD, ("--until 'last monday': not a date or time",), argv=("report", "--until", "last monday")
    ),
    Case("report-team-label", GOOD, ("--team-label 'my team'",), argv=("report", "--team-label", "my team")),
    Case(
        "report-url",
        GOOD,
        ("--prometheus-url 'prom:9090': must be a URL starting with http://",),
        argv=("report", "--prometheus-url", "prom:9090"),
    ),
    Case(
        "report-url-space",
        GOOD,
        ("--prometheus-url 'http://prom server': a URL cannot contain spaces",),
        argv=("report", "--prometheus-url", "http://prom server"),
    ),
    Case(
        "report-url-ipv6",
        GOOD,
        ("--prometheus-url 'http://[::1': not a valid URL (Invalid IPv6 URL)",),
        argv=("report", "--prometheus-url", "http://[::1"),
    ),
    Case(
        "report-url-port",
        GOOD,
        ("--prometheus-url 'http://prom:99999': not a valid URL (Port out of range",),
        argv=("report", "--prometheus-url", "http://prom:99999"),
        absent=("unreachable",),
    ),
    Case(
        "report-kubeconfig-directory",
        GOOD,
        ("--kubeconfig .: is a directory, not a file",),
        argv=("report", "--kubeconfig", "."),
    ),
    Case(
        "report-kubeconfig",
        GOOD,
        ("--kubeconfig nope.conf: no such file",),
        argv=("report", "--kubeconfig", "nope.conf"),
    ),
    Case(
        "report-config-team-label",
        GOOD + "monitoring: {team_label: 'team name'}\n",
        ("monitoring.team_label", "not a Kubernetes label key"),
        argv=("report",),
    ),
    # ---- air-gapped bundles (issue #9)
    Case(
        "registry-mirror-url",
        GOOD + "sources: {registry_mirrors: {nvcr.io: 'ftp://m'}}\n",
        ("sources.registry_mirrors: nvcr.io: must be a URL starting with http:// or https://",),
    ),
    Case(
        "os-apt-release",
        GOOD + "sources: {os_apt: {centos-9: ['http://m/ x main']}}\n",
        ("sources.os_apt", "'centos-9' is not a supported OS release"),
    ),
    Case(
        "os-apt-line",
        GOOD + "sources: {os_apt: {debian-12: ['http://m/debian']}}\n",
        ("sources.os_apt", "is not 'URL SUITE COMPONENT...'"),
    ),
    Case(
        "image-digest",
        GOOD + "versions: {image_digests: {'registry.k8s.io/pause:3.10.2': 'abc'}}\n",
        ("versions.image_digests", "is not a digest"),
    ),
    Case(
        "bundle-create-os",
        GOOD,
        ("--os centos-9: not a supported OS",),
        argv=("bundle", "create", "--out", "b", "--os", "centos-9"),
    ),
    Case(
        "bundle-create-arch",
        GOOD,
        ("--arch s390x: use amd64 or arm64",),
        argv=("bundle", "create", "--out", "b", "--arch", "s390x"),
    ),
    Case(
        "up-bundle-missing",
        GOOD,
        ("bundle.json does not exist: not a bundle",),
        argv=("up", "--yes", "--bundle", "nobundle"),
    ),
]


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_exits_2_naming_it_and_writes_nothing(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    for extra in case.also:
        (work / extra).write_text(str(case.content), encoding="utf-8")
    if case.content is not None:
        path = work / case.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(case.content, bytes):
            path.write_bytes(case.content)
        else:
            path.write_text(case.content, encoding="utf-8")
    for name in [n for n in os.environ if n.startswith("GPUSTACK_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GPUSTACK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(work)
    before = _tree(work)

    with pytest.raises(SystemExit) as ei:
        main(list(case.argv))
    out, err = capsys.readouterr()

    assert ei.value.code == 2, (out, err)
    assert "Traceback" not in out + err
    assert len(err) < 5000, f"{len(err):,} characters of error"
    flat = " ".join(err.split())  # the console may wrap long lines
    for needle in case.needles:
        assert needle in flat, err
    for needle in case.absent:
        assert needle not in flat, err
    if case.quiet:
        assert out == "", out
    assert _tree(work) == before  # nothing written or removed
    assert not (tmp_path / "state").exists() and not (tmp_path / "home").exists()


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES), "case ids are unique"
    commands = {c.argv[0] for c in CASES}
    assert {"up", "plan", "render", "init", "verify", "doctor", "reset", "upgrade", "version", "bundle"} <= commands
