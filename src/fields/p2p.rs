//! NvLink peer-to-peer status (`dcgmNvLinkGpuP2PStatus_t`, from `dcgmGetNvLinkP2PStatus`): the raw
//! values and the names dcgm-exporter writes in `DCGM_EXP_P2P_STATUS`'s `link_status` label.

/// Names of the statuses 0..=6.
pub const STATUSES: [&str; 7] = [
    "OK",
    "ChipsetNotSupported",
    "GPUNotSupported",
    "TopologyNotSupported",
    "DisabledByRegKey",
    "NotSupported",
    "Unknown",
];

/// `OK`.
pub const OK: u32 = 0;
/// `NotSupported`.
pub const NOT_SUPPORTED: u32 = 5;
/// `Unknown`: what a value outside the enum is reported as.
pub const UNKNOWN: u32 = 6;

/// The `link_status` name of a raw status (out of range → `Unknown`).
pub fn status_name(status: u32) -> &'static str {
    STATUSES
        .get(status as usize)
        .copied()
        .unwrap_or(STATUSES[UNKNOWN as usize])
}
