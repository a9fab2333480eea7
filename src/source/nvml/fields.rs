//! Which DCGM fields NVML can give, and how: the table that makes `--source nvml` serve the same
//! counters CSV, metric names and units as DCGM.
//!
//! Each DCGM field id maps to one NVML read ([`Read`]). A field not in the table is one NVML cannot
//! give (profiling `DCGM_FI_PROF_*`, vGPU licensing, DCGM-computed fields): it is reported absent with
//! reason `unsupported` and listed once at start. Units follow DCGM's: clocks MHz, temperatures °C,
//! power W (NVML gives mW), energy mJ, framebuffer MiB (NVML gives bytes), PCIe throughput KB/s, NvLink
//! throughput MB/s — a rate, as DCGM reports it, from NVML's cumulative per-link data counters (KiB):
//! their growth over the collect interval ([`Read::LinkRate`]), absent at the first reading.
//! docs/sources.md ("Hosts without DCGM (NVML)") has the same table for users.

use super::ffi;

/// How one DCGM field is read through NVML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Read {
    /// `nvmlSystemGetDriverVersion` (text).
    DriverVersion,
    /// `nvmlDeviceGetName` (text; the MIG device's own name on an instance).
    Name,
    Serial,
    /// `nvmlDeviceGetUUID` (the `MIG-` UUID on an instance).
    Uuid,
    PciBusId,
    VbiosVersion,
    /// The NVML index.
    Index,
    /// `nvmlDeviceGetMigMode` (current).
    MigMode,
    /// `nvmlDeviceGetClockInfo(type)`, MHz.
    Clock(u32),
    /// `nvmlDeviceGetMaxClockInfo(type)`, MHz.
    MaxClock(u32),
    /// `nvmlDeviceGetTemperature(GPU)`, °C.
    GpuTemp,
    /// `nvmlDeviceGetPowerUsage`, mW → W.
    Power,
    /// `nvmlDeviceGetPowerManagementLimit`, mW → W.
    PowerLimit,
    /// `nvmlDeviceGetTotalEnergyConsumption`, mJ.
    Energy,
    Pstate,
    FanSpeed,
    /// `nvmlDeviceGetPcieThroughput(TX|RX)`, KB/s.
    Pcie(u32),
    /// `nvmlDeviceGetCurrPcieLinkGeneration` / `nvmlDeviceGetCurrPcieLinkWidth` (lanes).
    PcieLinkGen,
    PcieLinkWidth,
    /// `nvmlDeviceGetUtilizationRates().gpu` / `.memory`.
    GpuUtil,
    MemUtil,
    EncUtil,
    DecUtil,
    /// The last XID from the NVML event set (0 when none since start).
    Xid,
    /// `nvmlDeviceGetMemoryInfo_v2`, bytes → MiB (on an instance: the MIG device's memory).
    FbTotal,
    FbFree,
    FbUsed,
    FbReserved,
    /// `nvmlDeviceGetCurrentClocksThrottleReasons` (the same bit mask as DCGM's).
    ThrottleReasons,
    /// `nvmlDeviceGetFieldValues(id)` on the GPU, batched with the others of the same GPU.
    Field(u32),
    /// An NvLink's state (`nvmlDeviceGetNvLinkState`): 1 up (links that are down are not entities).
    LinkState,
    /// `nvmlDeviceGetFieldValues(id, scopeId = link)`.
    LinkField(u32),
    /// NvLink data throughput in MB/s: the growth of NVML's cumulative data counters
    /// (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` / `_RX`, KiB, per link) over the collect interval,
    /// transmitted (`tx`), received (`rx`) or both; on an NvLink its own link, on a GPU all its links.
    LinkRate {
        tx: bool,
        rx: bool,
    },
}

/// The mapping: DCGM field id, its name (checked against the catalog by a test), the NVML read.
pub const TABLE: &[(u16, &str, Read)] = &[
    (1, "DCGM_FI_DRIVER_VERSION", Read::DriverVersion),
    (50, "DCGM_FI_DEV_NAME", Read::Name),
    (52, "DCGM_FI_DEV_NVML_INDEX", Read::Index),
    (53, "DCGM_FI_DEV_SERIAL", Read::Serial),
    (54, "DCGM_FI_DEV_UUID", Read::Uuid),
    (57, "DCGM_FI_DEV_PCI_BUSID", Read::PciBusId),
    (67, "DCGM_FI_DEV_MIG_MODE", Read::MigMode),
    (85, "DCGM_FI_DEV_VBIOS_VERSION", Read::VbiosVersion),
    (100, "DCGM_FI_DEV_SM_CLOCK", Read::Clock(ffi::NVML_CLOCK_SM)),
    (
        101,
        "DCGM_FI_DEV_MEM_CLOCK",
        Read::Clock(ffi::NVML_CLOCK_MEM),
    ),
    (
        102,
        "DCGM_FI_DEV_VIDEO_CLOCK",
        Read::Clock(ffi::NVML_CLOCK_VIDEO),
    ),
    (
        112,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        Read::ThrottleReasons,
    ),
    (
        113,
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        Read::MaxClock(ffi::NVML_CLOCK_SM),
    ),
    (
        114,
        "DCGM_FI_DEV_MAX_MEM_CLOCK",
        Read::MaxClock(ffi::NVML_CLOCK_MEM),
    ),
    (
        115,
        "DCGM_FI_DEV_MAX_VIDEO_CLOCK",
        Read::MaxClock(ffi::NVML_CLOCK_VIDEO),
    ),
    (
        140,
        "DCGM_FI_DEV_MEMORY_TEMP",
        Read::Field(ffi::NVML_FI_DEV_MEMORY_TEMP),
    ),
    (150, "DCGM_FI_DEV_GPU_TEMP", Read::GpuTemp),
    (155, "DCGM_FI_DEV_POWER_USAGE", Read::Power),
    (156, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", Read::Energy),
    (160, "DCGM_FI_DEV_POWER_MGMT_LIMIT", Read::PowerLimit),
    (190, "DCGM_FI_DEV_PSTATE", Read::Pstate),
    (191, "DCGM_FI_DEV_FAN_SPEED", Read::FanSpeed),
    (
        200,
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        Read::Pcie(ffi::NVML_PCIE_UTIL_TX_BYTES),
    ),
    (
        201,
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        Read::Pcie(ffi::NVML_PCIE_UTIL_RX_BYTES),
    ),
    (
        202,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        Read::Field(ffi::NVML_FI_DEV_PCIE_REPLAY_COUNTER),
    ),
    (203, "DCGM_FI_DEV_GPU_UTIL", Read::GpuUtil),
    (204, "DCGM_FI_DEV_MEM_COPY_UTIL", Read::MemUtil),
    (206, "DCGM_FI_DEV_ENC_UTIL", Read::EncUtil),
    (207, "DCGM_FI_DEV_DEC_UTIL", Read::DecUtil),
    (230, "DCGM_FI_DEV_XID_ERRORS", Read::Xid),
    (237, "DCGM_FI_DEV_PCIE_LINK_GEN", Read::PcieLinkGen),
    (238, "DCGM_FI_DEV_PCIE_LINK_WIDTH", Read::PcieLinkWidth),
    (250, "DCGM_FI_DEV_FB_TOTAL", Read::FbTotal),
    (251, "DCGM_FI_DEV_FB_FREE", Read::FbFree),
    (252, "DCGM_FI_DEV_FB_USED", Read::FbUsed),
    (253, "DCGM_FI_DEV_FB_RESERVED", Read::FbReserved),
    (
        310,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_ECC_SBE_VOL_TOTAL),
    ),
    (
        311,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_ECC_DBE_VOL_TOTAL),
    ),
    (
        312,
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_ECC_SBE_AGG_TOTAL),
    ),
    (
        313,
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_ECC_DBE_AGG_TOTAL),
    ),
    (
        390,
        "DCGM_FI_DEV_RETIRED_SBE",
        Read::Field(ffi::NVML_FI_DEV_RETIRED_SBE),
    ),
    (
        391,
        "DCGM_FI_DEV_RETIRED_DBE",
        Read::Field(ffi::NVML_FI_DEV_RETIRED_DBE),
    ),
    (
        392,
        "DCGM_FI_DEV_RETIRED_PENDING",
        Read::Field(ffi::NVML_FI_DEV_RETIRED_PENDING),
    ),
    (
        393,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Read::Field(ffi::NVML_FI_DEV_REMAPPED_UNC),
    ),
    (
        394,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        Read::Field(ffi::NVML_FI_DEV_REMAPPED_COR),
    ),
    (
        395,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        Read::Field(ffi::NVML_FI_DEV_REMAPPED_FAILURE),
    ),
    (
        396,
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        Read::Field(ffi::NVML_FI_DEV_REMAPPED_PENDING),
    ),
    (
        409,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL),
    ),
    (
        419,
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
    ),
    (
        429,
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
    ),
    (
        439,
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        Read::Field(ffi::NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
    ),
    (
        449,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        Read::LinkRate { tx: true, rx: true },
    ),
    (1508, "DCGM_FI_DEV_NVLINK_GET_STATE", Read::LinkState),
    (
        1525,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_PER_LINK_TOTAL",
        Read::LinkField(ffi::NVML_FI_DEV_NVLINK_ERROR_DL_CRC),
    ),
    (
        1527,
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_PER_LINK_TOTAL",
        Read::LinkField(ffi::NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY),
    ),
    (
        1528,
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_PER_LINK_TOTAL",
        Read::LinkField(ffi::NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY),
    ),
    (
        1529,
        "DCGM_FI_DEV_NVLINK_THROUGHPUT_PER_LINK",
        Read::LinkRate { tx: true, rx: true },
    ),
    (
        1530,
        "DCGM_FI_DEV_NVLINK_TX_THROUGHPUT_PER_LINK",
        Read::LinkRate {
            tx: true,
            rx: false,
        },
    ),
    (
        1531,
        "DCGM_FI_DEV_NVLINK_RX_THROUGHPUT_PER_LINK",
        Read::LinkRate {
            tx: false,
            rx: true,
        },
    ),
];

/// The NVML read of a DCGM field, or `None` when NVML cannot give it.
pub fn read_for(field_id: u16) -> Option<Read> {
    TABLE
        .iter()
        .find(|(id, _, _)| *id == field_id)
        .map(|(_, _, r)| *r)
}

/// Reads answered from the MIG device handle on a GPU instance (the others come from its GPU).
pub fn per_instance(read: Read) -> bool {
    matches!(
        read,
        Read::Name
            | Read::Uuid
            | Read::FbTotal
            | Read::FbFree
            | Read::FbUsed
            | Read::FbReserved
            | Read::GpuUtil
            | Read::MemUtil
            | Read::EncUtil
            | Read::DecUtil
            | Read::Xid
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_catalog() {
        for (id, name, _) in TABLE {
            let f = crate::fields::catalog()
                .by_name(name)
                .unwrap_or_else(|| panic!("{name} not in the catalog"));
            assert_eq!(f.id, *id, "{name}");
        }
        assert_eq!(read_for(155), Some(Read::Power));
        assert_eq!(read_for(1001), None);
    }
}
