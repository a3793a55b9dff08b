"""Custom MIG layouts (``gpu_sharing.mig_layouts``): the model and whether a GPU can take one. Pure.

A layout is written as mig-parted writes one configuration (NVIDIA/mig-parted v0.15.0 ``api/spec/v1``, the shape
of the GPU Operator's ``default-mig-parted-config``): a list of entries, each ``devices`` (``all`` or GPU indexes),
``mig-enabled`` and ``mig-devices`` (GI profile -> instances per GPU)::

    gpu_sharing:
      mig_layouts:
        infer-mix:
          - devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 4, "3g.40gb": 1}

What a GPU can take (:func:`fit_problems`), from the facts carried in :mod:`gpustack.config.mig`:

- every profile must be one of the GPU's (the family's profile list) and at most its maximum count
  (``instanceCount`` in NVML; the static config's ``all-<profile>`` counts);
- compute slices: the ``Ng`` of each instance, at most the GPU's 7 (A30: 4) (MIG User Guide, "Fraction of SMs");
- memory slices: 8 on 7-slice GPUs, 4 on A30; a profile takes ``round(its GB / the family's smallest 1g GB)``
  of them (MIG User Guide "Supported MIG Profiles", fraction of memory: 1g.5gb 1/8, 2g.10gb 2/8, 3g.20gb 4/8);
- placements: on 7-slice GPUs each instance starts at fixed memory slices (NVML
  ``nvmlDeviceGetGpuInstancePossiblePlacements`` on a real H100 80GB, tests/fixtures/gpu-probe/
  ubuntu2404-h100-80gb-hbm3/nvml.json: 1g at 0..6, 1g double-memory at 0/2/4/6, 2g at 0/2/4, 3g at 0/4, 4g at 0,
  7g at 0); gpustack assumes the same geometry on every 7-slice family (the MIG User Guide draws the same one
  for A100 and H100) and checks A30 by its budgets only. mig-parted stays the final arbiter
  (``unsupported MIG Device specified``, G12 reports it).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from gpustack.config import mig
from gpustack.config.fields import StrictModel

#: a layout's name is the node label's value and a key of the ConfigMap: a label value, not ``all-...`` (the
#: operator's own names)
LAYOUT_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
#: (compute slices, memory slices) -> first memory slice each instance may start at, 7-slice GPUs (H100 NVML)
PLACEMENTS_7: dict[tuple[int, int], tuple[int, ...]] = {
    (1, 1): (0, 1, 2, 3, 4, 5, 6),
    (1, 2): (0, 2, 4, 6),
    (2, 2): (0, 2, 4),
    (3, 4): (0, 4),
    (4, 4): (0,),
    (7, 8): (0,),
}


class MigLayoutEntry(StrictModel):
    """One entry of a mig-parted configuration: which GPUs, and what each gets."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    devices: Literal["all"] | list[Annotated[int, Field(ge=0, le=15)]] = Field(
        default="all", description="all, or the GPU indexes this entry applies to ([0, 1])"
    )
    mig_enabled: bool = Field(default=True, alias="mig-enabled", description="MIG mode of these GPUs")
    mig_devices: dict[str, Annotated[int, Field(ge=1, le=7)]] = Field(
        default_factory=dict,
        alias="mig-devices",
        description='GI profile -> instances per GPU, e.g. {"1g.10gb": 4, "3g.40gb": 1}',
    )

    @field_validator("mig_devices")
    @classmethod
    def _profiles(cls, v: dict[str, int]) -> dict[str, int]:
        for name in v:
            if not mig.GI_PROFILE_RE.match(name):
                raise ValueError(f"{name!r} is not a GPU instance profile (such as 1g.10gb, 3g.40gb, 1g.10gb+me)")
        return v


MigLayout = Annotated[list[MigLayoutEntry], Field(min_length=1)]


def layout_name_problem(name: str) -> str | None:
    if name.startswith("all-"):
        return f"{name!r}: names starting with all- are the GPU Operator's own configurations; pick another name"
    if not LAYOUT_NAME_RE.match(name):
        return f"{name!r} is not a layout name: lower-case letters, digits, '.', '_' and '-', at most 63 characters"
    return None


def memory_slices(family: mig.MigFamily) -> int:
    """Memory slices of the whole GPU: 8, or 4 on 4-slice GPUs (A30)."""
    return 4 if family.slices == 4 else 8


def profile_memory_slices(family: mig.MigFamily, profile: str) -> int:
    m = mig.GI_PROFILE_RE.match(profile)
    smallest = min(int(p.split("g.")[1].split("gb")[0]) for p in family.profiles if p.startswith("1g."))
    return max(1, round(int(m["mem"]) / smallest)) if m else 0


def _fits_placements(family: mig.MigFamily, layout: dict[str, int]) -> bool:
    shapes = [(mig.compute_slices(p), profile_memory_slices(family, p)) for p, n in layout.items() for _ in range(n)]
    if any(s not in PLACEMENTS_7 for s in shapes):
        return True  # not a shape the table knows: budgets only
    shapes.sort(key=lambda s: -s[1])

    def place(i: int, used: frozenset[int]) -> bool:
        if i == len(shapes):
            return True
        size = shapes[i][1]
        for start in PLACEMENTS_7[shapes[i]]:
            cells = frozenset(range(start, start + size))
            if not cells & used and place(i + 1, used | cells):
                return True
        return False

    return place(0, frozenset())


def fit_problems(family: mig.MigFamily, layout: dict[str, int]) -> list[str]:
    """Why one GPU of ``family`` cannot take ``layout`` (GI profile -> instances); [] when it can."""
    unknown = sorted(p for p in layout if p not in family.profiles)
    if unknown:
        offered = ", ".join(sorted(family.profiles, key=lambda p: (mig.compute_slices(p), p)))
        return [f"{family.name} has no profile {', '.join(unknown)} (it offers {offered})"]
    out = [f"{family.name} takes at most {family.profiles[p]} x {p}, not {n}" for p, n in sorted(layout.items())
           if n > family.profiles[p]]  # fmt: skip
    compute = sum(mig.compute_slices(p) * n for p, n in layout.items())
    if compute > family.slices:
        out.append(f"{compute} compute slices, {family.name} has {family.slices}")
    memory = sum(profile_memory_slices(family, p) * n for p, n in layout.items())
    if memory > memory_slices(family):
        out.append(f"{memory} memory slices, {family.name} has {memory_slices(family)}")
    if not out and family.slices == 7 and not _fits_placements(family, layout):
        out.append(f"the instances do not fit the GPU's placements (each instance starts at fixed memory slices: "
                   f"3g at 0 or 4, 4g at 0, 2g at 0/2/4) on {family.name}")  # fmt: skip
    return out


def entry_layouts(entries: list[MigLayoutEntry]) -> list[dict[str, int]]:
    """The distinct per-GPU layouts of a layout's MIG-enabled entries."""
    out: list[dict[str, int]] = []
    for e in entries:
        if e.mig_enabled and e.mig_devices not in out:
            out.append(dict(e.mig_devices))
    return out


def families_for(entries: list[MigLayoutEntry]) -> list[mig.MigFamily]:
    """The listed GPU families that can take every entry of the layout."""
    return [f for f in mig.FAMILIES if all(not fit_problems(f, lay) for lay in entry_layouts(entries))]


def entries_problem(entries: list[MigLayoutEntry]) -> str | None:
    """gpustack's rule on a layout's entries: one ``devices: all`` entry, or entries naming disjoint GPU indexes
    (so each GPU has one entry, as :func:`per_gpu` reads it)."""
    if any(e.devices == "all" for e in entries) and len(entries) > 1:
        return "an entry with devices: all must be the only one (list GPU indexes in each entry instead)"
    seen: set[int] = set()
    for e in entries:
        assert e.devices != "all" or len(entries) == 1
        twice = sorted(seen & set(e.devices)) if e.devices != "all" else []
        if twice:
            return f"GPU {twice[0]} is named by two entries"
        seen |= set(e.devices) if e.devices != "all" else set()
    return None


def per_gpu(entries: list[MigLayoutEntry], index: int) -> dict[str, int] | None:
    """GI profile -> instances on GPU ``index``; {} for a GPU whose entry turns MIG off, None when no entry names
    it (mig-parted leaves it as it is)."""
    chosen = next((e for e in entries if e.devices == "all" or index in e.devices), None)
    if chosen is None:
        return None
    return dict(chosen.mig_devices) if chosen.mig_enabled else {}


def profiles(entries: list[MigLayoutEntry]) -> list[str]:
    """Every GI profile the layout makes (sorted)."""
    return sorted({p for e in entries if e.mig_enabled for p in e.mig_devices})


def mig_parted_entries(entries: list[MigLayoutEntry]) -> list[dict[str, object]]:
    """The entries in mig-parted's own keys, for the ConfigMap."""
    out: list[dict[str, object]] = []
    for e in entries:
        item: dict[str, object] = {"devices": e.devices, "mig-enabled": e.mig_enabled}
        if e.mig_enabled:
            item["mig-devices"] = dict(e.mig_devices)
        out.append(item)
    return out
