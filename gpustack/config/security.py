"""The ``security`` section: the control plane's hardening (issue 28), on by default; each relaxation a named setting.

Every default is what the CIS Kubernetes Benchmark (kube-bench ``cfg/cis-1.12``, the checks it applies to
Kubernetes 1.34-1.36) asks for; docs/configuration.md names the check each setting relaxes:

- ``encryption_at_rest`` -- Secrets encrypted in etcd with ``secretbox`` (CIS 1.2.27, 1.2.28);
- ``audit.*`` -- the API server's audit log and its rotation (CIS 1.2.16-1.2.19, 3.2.1);
- ``pod_security.*`` -- the PodSecurity admission defaults (CIS 5.2.x);
- ``profiling`` -- the API server's, controller-manager's and scheduler's ``--profiling`` (CIS 1.2.15, 1.3.2, 1.4.1);
- ``tls_cipher_suites`` -- the API server's ``--tls-cipher-suites`` and the kubelet's ``tlsCipherSuites``
  (CIS 1.2.29, 4.2.12);
- ``protect_kernel_defaults`` -- the kubelet's ``protectKernelDefaults``;
- ``pod_pids_limit`` -- the kubelet's ``podPidsLimit`` (CIS 4.2.13);
- ``extend_token_expiration`` -- the API server's ``--service-account-extend-token-expiration`` (CIS 1.2.30).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from gpustack.config.fields import StrictModel

Level = Literal["privileged", "baseline", "restricted"]

#: CIS 4.2.12's list exactly (kube-bench cfg/cis-1.12 node.yaml ``valid_elements``), all of them also in 1.2.29's
#: (master.yaml; its TLS 1.3 names are not configurable in Go: every TLS 1.3 suite is always on). ECDHE with AEAD.
CIS_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
)


class Audit(StrictModel):
    enabled: bool = Field(default=True, description="the API server writes an audit log (CIS 1.2.16, 3.2.1)")
    max_age: Annotated[int, Field(ge=1)] = Field(
        default=30, description="days an audit log file is kept (--audit-log-maxage; CIS 1.2.17 asks 30 or more)"
    )
    max_backup: Annotated[int, Field(ge=1)] = Field(
        default=10, description="rotated audit log files kept (--audit-log-maxbackup; CIS 1.2.18 asks 10 or more)"
    )
    max_size: Annotated[int, Field(ge=1)] = Field(
        default=100, description="MB at which the audit log rotates (--audit-log-maxsize; CIS 1.2.19 asks 100 or more)"
    )


class PodSecurity(StrictModel):
    enforce: Level = Field(default="baseline", description="the PodSecurity level every namespace gets unless labelled")
    warn: Level = Field(default="restricted", description="the level whose violations are returned as warnings")
    audit: Level = Field(default="restricted", description="the level whose violations are annotated in the audit log")
    exempt_namespaces: list[str] = Field(
        default_factory=list,
        description="namespaces PodSecurity never checks, besides kube-system (which always is: docs/decisions.md)",
    )


#: the kubelet's ``podPidsLimit`` by default: kubernetes/website ``concepts/policy/pid-limiting.md`` sizes a pod's
#: budget as the node's PIDs over the pods it hosts; systemd (since v243, ``sysctl.d/50-pid-max.conf``) raises
#: ``kernel.pid_max`` to 4194304 on 64-bit hosts, over the kubelet's 110 pods about 38,000 each. 32768 (the kernel's
#: own default pid_max) stays under that and far above a multi-GPU training pod's threads (docs/decisions.md)
POD_PIDS_LIMIT = 32768


class Security(StrictModel):
    encryption_at_rest: bool = Field(
        default=True, description="Secrets encrypted in etcd with a per-cluster secretbox key (CIS 1.2.27, 1.2.28)"
    )
    audit: Audit = Audit()
    pod_security: PodSecurity = PodSecurity()
    profiling: bool = Field(
        default=False,
        description="--profiling on the API server, controller-manager, scheduler (CIS 1.2.15, 1.3.2, 1.4.1)",
    )
    tls_cipher_suites: list[str] = Field(
        default_factory=lambda: list(CIS_CIPHER_SUITES),
        description="TLS 1.2 cipher suites of the API server and kubelets; [] leaves Go's defaults (CIS 1.2.29, 4.2.12)",
    )
    protect_kernel_defaults: bool = Field(
        default=True,
        description="the kubelet refuses to start when the kernel settings differ from those it needs (os_prep sets them)",
    )
    extend_token_expiration: bool = Field(
        default=False, description="--service-account-extend-token-expiration on the API server (CIS 1.2.30)"
    )
    pod_pids_limit: Annotated[int, Field(ge=1024, le=4194304)] | None = Field(
        default=POD_PIDS_LIMIT,
        description="the most processes and threads one pod may run (the kubelet's podPidsLimit, CIS 4.2.13); "
        "null: no limit",
    )

    @field_validator("tls_cipher_suites")
    @classmethod
    def _suites(cls, v: list[str]) -> list[str]:
        for name in v:
            if not name.startswith("TLS_") or not name.replace("_", "").isalnum():
                raise ValueError(
                    f"{name!r} is not a TLS cipher suite name (Go's, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)"
                )
        return list(dict.fromkeys(v))
