"""DCGM's diagnostic error codes and what gpustack makes of them for a release. Pure, data.

Facts from NVIDIA/DCGM v4.6.0 (commit 51b65cce): the ``DCGM_FR_*`` codes (``dcgmlib/dcgm_errors.h``, in code
order as ``dcgmlib/src/dcgm_errors.c`` lists them), ``dcgmErrorSeverity_t`` and ``dcgmErrorCategory_t``
(same header), and which codes the diagnostic raises as a *warning* (``nvvs/src/Software.cpp``; the same
checks in v3.3.9's ``nvvs/plugin_src/software/Software.cpp``).

**What blocks a release** (``gpustack health release`` needs a passing level >= 2 diag). DCGM 4.x's JSON
writes a warning as "Fail" (:mod:`gpustack.diag.dcgmi`), so the status string cannot decide; the error
DCGM attaches can. DCGM raises a result as WARN (``SetResult(..., NVVS_RESULT_WARN)``) only in the
software plugin and only with the codes in :data:`WARN_ONLY`: each is a host or configuration state
(persistence mode off, a graphics process or a CUDA environment variable present, a /dev/nvidia* node
not readable), not a fault of the GPU, and each is raised nowhere else. Every other error blocks:

- ``DCGM_FR_CANNOT_OPEN_LIB`` (22) is a WARN for the CUDA libraries but a FAIL for NVML, with the same
  code: gpustack cannot tell them apart, so it blocks;
- ``DCGM_FR_SRAM_THRESHOLD`` (118) is a WARN in 4.6, but DCGM rates it ``DCGM_ERROR_ISOLATE`` ("cannot
  perform workload, GPU should be isolated"), hardware memory: it blocks;
- an error without a code (a bare string) blocks, and so does a "Fail" that names no error at all.
"""

from __future__ import annotations

#: DCGM_FR_* name by code (index = code), without the ``DCGM_FR_`` prefix (dcgm_errors.h v4.6.0)
_TABLE = """
OK UNKNOWN UNRECOGNIZED PCI_REPLAY_RATE VOLATILE_DBE_DETECTED VOLATILE_SBE_DETECTED PENDING_PAGE_RETIREMENTS
RETIRED_PAGES_LIMIT RETIRED_PAGES_DBE_LIMIT CORRUPT_INFOROM CLOCKS_EVENT_THERMAL POWER_UNREADABLE CLOCKS_EVENT_POWER
NVLINK_ERROR_THRESHOLD NVLINK_DOWN NVSWITCH_FATAL_ERROR NVSWITCH_NON_FATAL_ERROR NVSWITCH_DOWN NO_ACCESS_TO_FILE
NVML_API DEVICE_COUNT_MISMATCH BAD_PARAMETER CANNOT_OPEN_LIB DENYLISTED_DRIVER NVML_LIB_BAD GRAPHICS_PROCESSES
HOSTENGINE_CONN FIELD_QUERY BAD_CUDA_ENV PERSISTENCE_MODE LOW_BANDWIDTH HIGH_LATENCY CANNOT_GET_FIELD_TAG
FIELD_VIOLATION FIELD_THRESHOLD FIELD_VIOLATION_DBL FIELD_THRESHOLD_DBL UNSUPPORTED_FIELD_TYPE FIELD_THRESHOLD_TS
FIELD_THRESHOLD_TS_DBL THERMAL_VIOLATIONS THERMAL_VIOLATIONS_TS TEMP_VIOLATION CLOCKS_EVENT_VIOLATION INTERNAL
PCIE_GENERATION PCIE_WIDTH ABORTED TEST_DISABLED CANNOT_GET_STAT STRESS_LEVEL CUDA_API FAULTY_MEMORY
CANNOT_SET_WATCHES CUDA_UNBOUND ECC_DISABLED MEMORY_ALLOC CUDA_DBE MEMORY_MISMATCH CUDA_DEVICE ECC_UNSUPPORTED
ECC_PENDING MEMORY_BANDWIDTH TARGET_POWER API_FAIL API_FAIL_GPU CUDA_CONTEXT DCGM_API CONCURRENT_GPUS
TOO_MANY_ERRORS NVLINK_CRC_ERROR_THRESHOLD NVLINK_ERROR_CRITICAL ENFORCED_POWER_LIMIT MEMORY_ALLOC_HOST GPU_OP_MODE
NO_MEMORY_CLOCKS NO_GRAPHICS_CLOCKS HAD_TO_RESTORE_STATE L1TAG_UNSUPPORTED L1TAG_MISCOMPARE ROW_REMAP_FAILURE
UNCONTAINED_ERROR EMPTY_GPU_LIST DBE_PENDING_PAGE_RETIREMENTS UNCORRECTABLE_ROW_REMAP PENDING_ROW_REMAP
BROKEN_P2P_MEMORY_DEVICE BROKEN_P2P_WRITER_DEVICE NVSWITCH_NVLINK_DOWN EUD_BINARY_PERMISSIONS EUD_NON_ROOT_USER
EUD_SPAWN_FAILURE EUD_TIMEOUT EUD_ZOMBIE EUD_NON_ZERO_EXIT_CODE EUD_TEST_FAILED FILE_CREATE_PERMISSIONS
PAUSE_RESUME_FAILED PCIE_H_REPLAY_VIOLATION GPU_EXPECTED_NVLINKS_UP NVSWITCH_EXPECTED_NVLINKS_UP XID_ERROR
SBE_VIOLATION DBE_VIOLATION PCIE_REPLAY_VIOLATION SBE_THRESHOLD_VIOLATION DBE_THRESHOLD_VIOLATION
PCIE_REPLAY_THRESHOLD_VIOLATION CUDA_FM_NOT_INITIALIZED SXID_ERROR GFLOPS_THRESHOLD_VIOLATION NAN_VALUE
FABRIC_MANAGER_TRAINING_ERROR BROKEN_P2P_PCIE_MEMORY_DEVICE BROKEN_P2P_PCIE_WRITER_DEVICE
BROKEN_P2P_NVLINK_MEMORY_DEVICE BROKEN_P2P_NVLINK_WRITER_DEVICE TEST_SKIPPED SRAM_THRESHOLD
NVLINK_EFFECTIVE_BER_THRESHOLD FALLEN_OFF_BUS NVLINK_SYMBOL_BER_THRESHOLD IMEX_UNHEALTHY FABRIC_PROBE_STATE
BINARY_PERMISSIONS GPU_RECOVERY_RESET GPU_RECOVERY_REBOOT GPU_RECOVERY_DRAIN_P2P GPU_RECOVERY_DRAIN_RESET NCCL_ERROR
RETEST_REQUESTED CONTAINED_ERROR UNCORRECTABLE_ROW_REMAP_LIMIT
"""
_NAMES = tuple(_TABLE.split())

#: severity (dcgmErrorSeverity_t): what DCGM says the GPU can still do
SEVERITIES: dict[int, str] = {0: "none", 1: "monitor", 2: "isolate", 3: "unknown", 4: "triage", 5: "config", 6: "reset"}

#: category (dcgmErrorCategory_t)
CATEGORIES: dict[int, str] = {
    0: "none",
    1: "performance threshold",
    2: "performance violation",
    3: "software configuration",
    4: "software library",
    5: "software XID",
    6: "software CUDA",
    7: "software EUD",
    8: "software other",
    9: "hardware thermal",
    10: "hardware memory",
    11: "hardware NVLink",
    12: "hardware NVSwitch",
    13: "hardware PCIe",
    14: "hardware power",
    15: "hardware other",
    16: "internal",
}

#: codes DCGM's diag raises only as a warning, and that say nothing about the GPU's health: they do not
#: block a release (Software.cpp v4.6.0: checkPermissions l.~290, checkForGraphicsProcesses l.~611,
#: checkPersistenceMode l.~644, checkForBadEnvVaribles l.~975)
WARN_ONLY: dict[int, str] = {
    18: "a /dev/nvidia* node is not readable (reported with DEVICE_COUNT_MISMATCH)",
    20: "fewer /dev/nvidia* nodes are accessible than NVML sees",
    25: "a graphics process runs on the GPU",
    28: "a CUDA environment variable that hurts the tests is set",
    29: "persistence mode is off",
}


def error_name(code: int | None) -> str:
    """``DCGM_FR_FAULTY_MEMORY``, or "" for an unknown code."""
    if code is None or not 0 <= code < len(_NAMES):
        return ""
    return f"DCGM_FR_{_NAMES[code]}"


def blocks_release(code: int | None) -> bool:
    """Whether an error with this DCGM_FR_* code keeps a node from being released (see the module doc)."""
    return code not in WARN_ONLY
