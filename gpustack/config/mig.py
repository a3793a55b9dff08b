"""What the MIG-capable GPUs offer: device ids, compute slices and the MIG profiles of each family. Pure data.

Facts, not code, carried from upstream (cite when changing):

- the GPU Operator v26.7.0 static MIG configuration ``default-mig-parted-config``
  (NVIDIA/gpu-operator ``assets/state-mig-manager/0400_configmap.yaml``, commit 10ee5b36): the config names
  ``all-<profile>`` (a GI profile with ``+`` written ``.``), the instance count each creates per GPU, the
  ``device-filter`` PCI ids (``0x233010DE`` = device 0x2330, vendor 0x10DE) and the ``all-balanced`` layouts.
  A verbatim copy is kept as test data (tests/fixtures/mig/default-mig-parted-config.yaml) and
  tests/unit/config/test_sharing.py checks this table against it;
- the NVIDIA MIG User Guide, "Supported GPUs" and "Supported MIG Profiles" (compute slices: an ``Ng`` profile has
  N of the GPU's 7 slices -- 4 on A30 -- the "Fraction of SMs" column);
- since GPU Operator v26.3 (k8s-mig-manager >= v0.14.0) mig-manager discovers each node's profiles itself and
  writes them to ConfigMap ``<node>-mig-config`` (same ``all-<profile>`` names, count = the profile's maximum,
  ``all-balanced`` from the base profiles: NVIDIA/mig-parted v0.15.0 ``pkg/mig/builder``); the static
  configuration is the fallback when discovery finds no profiles. Either way these names are what the node label
  ``nvidia.com/mig.config`` selects.

Families listed here are the ones whose whole profile list the sources above state; other MIG-capable GPUs
(:data:`OTHER_MIG_CAPABLE`) are accepted with a warning and checked at run time against ``<node>-mig-config``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

NVIDIA_VENDOR = "10de"
#: mig-parted config names every MIG-capable GPU has (gpustack refuses the two that leave nothing to schedule)
ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
BALANCED = "all-balanced"
#: ``all-1g.10gb``, ``all-1g.10gb.me``, ``all-1g.24gb.gfx``, ``all-1g.24gb-me``, ``all-2g.48gb.me.all``
PROFILE_CONFIG_RE = re.compile(r"^all-(?P<g>[1-8])g\.(?P<mem>[0-9]+)gb(?P<suffix>(?:[.-][a-z]+)*)$")
#: a GI profile name as mig-parted and the device plugin write it (``1g.10gb``, ``1g.10gb+me``)
GI_PROFILE_RE = re.compile(r"^(?P<g>[1-8])g\.(?P<mem>[0-9]+)gb(?P<suffix>(?:[+-][a-z.]+)*)$")


@dataclass(frozen=True)
class MigFamily:
    """GPUs that share one MIG geometry."""

    name: str
    device_ids: tuple[str, ...]  # PCI device ids, lower-case "0x2330"
    slices: int  # compute slices of the whole GPU (7; 4 on A30)
    profiles: dict[str, int]  # GI profile -> most instances of it on one GPU (what all-<profile> creates)
    balanced: dict[str, int]  # all-balanced: GI profile -> instances per GPU

    def configs(self) -> dict[str, dict[str, int]]:
        """mig-parted config name -> GI profile -> instances per GPU."""
        out = {config_name(p): {p: n} for p, n in self.profiles.items()}
        out[BALANCED] = dict(self.balanced)
        return out


def config_name(profile: str) -> str:
    """The mig-parted config of one GI profile on every GPU: ``1g.10gb+me`` -> ``all-1g.10gb.me``."""
    return "all-" + profile.replace("+", ".")


def resource_name(profile: str) -> str:
    """The extended resource of a GI profile under ``mig.strategy: mixed`` (k8s-device-plugin v0.20.0
    internal/rm/rm.go: ``mig-`` + the profile, ``+`` written ``.``): ``nvidia.com/mig-1g.10gb``."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


def compute_slices(profile: str) -> int:
    """The compute slices of a GI profile (or an ``all-<profile>`` config / ``mig-<profile>`` resource):
    the leading ``Ng``. ValueError for anything else."""
    text = profile.removeprefix("nvidia.com/").removeprefix("mig-").removeprefix("all-")
    m = re.match(r"^([1-8])g\.", text)
    if not m:
        raise ValueError(f"{profile!r} is not a MIG profile (such as 1g.10gb)")
    return int(m.group(1))


_H100_80 = ("0x2330", "0x2331", "0x2322", "0x20b2", "0x20b5", "0x20f3", "0x20f5", "0x2324")
FAMILIES: tuple[MigFamily, ...] = (
    MigFamily(
        "A100/A800 40GB", ("0x20b0", "0x20b1", "0x20f1", "0x20f6"), 7,
        {"1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
        {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
    ),
    MigFamily(
        "H100/H800/A100/A800 80GB", _H100_80, 7,
        {"1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
        {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    ),
    MigFamily(
        "A30 24GB", ("0x20b7",), 4,
        {"1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1},
        {"1g.6gb": 2, "2g.12gb": 1},
    ),
    MigFamily(
        "H100/H800 NVL 94GB", ("0x2321", "0x233a"), 7,
        {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},
        {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1},
    ),
    MigFamily(
        "H200 141GB / H200 NVL", ("0x2335", "0x233b"), 7,
        {"1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},
        {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1},
    ),
    MigFamily(
        "B200 180GB", ("0x2901",), 7,
        {"1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1},
        {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1},
    ),
    MigFamily(
        "GB200 186GB", ("0x2941",), 7,
        {"1g.23gb": 7, "1g.23gb+me": 1, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "4g.93gb": 1, "7g.186gb": 1},
        {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1},
    ),
)  # fmt: skip

#: MIG-capable GPUs (MIG User Guide "Supported GPUs"; device ids from the static config's filters) whose profile
#: list gpustack does not carry: H100 96GB / PG506 / GH200 / H20, GH200 144GB, B300, GB300, RTX PRO 6000 Blackwell
OTHER_MIG_CAPABLE: dict[str, str] = {
    "0x2342": "GH200 96GB", "0x233d": "H100 96GB", "0x20b6": "PG506 96GB", "0x2329": "H20 96GB",
    "0x2348": "GH200 144GB", "0x3182": "B300", "0x31c2": "GB300", "0x2bb5": "RTX PRO 6000 Blackwell",
}  # fmt: skip


@cache
def family_of(device_id: str) -> MigFamily | None:
    """The family of a PCI device id (``0x2330``, ``2330`` or ``10de:2330``; any case), None when not listed."""
    dev = normalize_device_id(device_id)
    return next((f for f in FAMILIES if dev in f.device_ids), None)


def normalize_device_id(device_id: str) -> str:
    dev = device_id.strip().lower().removeprefix(f"{NVIDIA_VENDOR}:").removeprefix("0x")
    return "0x" + dev[:4] if dev else ""


def mig_capable(device_id: str) -> bool:
    return family_of(device_id) is not None or normalize_device_id(device_id) in OTHER_MIG_CAPABLE


@cache
def known_configs() -> frozenset[str]:
    """Every ``all-<profile>`` config of a listed family, and ``all-balanced``."""
    return frozenset(c for f in FAMILIES for c in f.configs())


def layout(device_id: str, config: str) -> dict[str, int] | None:
    """GI profile -> instances per GPU that ``config`` makes on this GPU; None when the GPU cannot take it
    (or its family is not listed)."""
    fam = family_of(device_id)
    return None if fam is None else fam.configs().get(config)


def uniform(config: str) -> bool:
    """One GI profile on every GPU (what ``mig.strategy: single`` requires): every ``all-<profile>``."""
    return bool(PROFILE_CONFIG_RE.match(config))
