//! NvLink peer-to-peer status: whether GPU `gpu` can reach GPU `peer` over NvLink, as
//! `dcgmGetNvLinkP2PStatus` reports it (`dcgmNvLinkGpuP2PStatus_t`: 0 OK … 6 Unknown). A source reads
//! it once per collection when `DCGM_EXP_P2P_STATUS` is listed; it is a state, not an incident.

use std::sync::Arc;

use super::entity::Entity;

/// The status of one ordered GPU pair.
#[derive(Debug, Clone, PartialEq)]
pub struct P2pLink {
    /// The GPU (a whole-GPU entity, even on a MIG GPU).
    pub gpu: Arc<Entity>,
    /// The peer's GPU index (`peer_gpu`).
    pub peer: u32,
    /// The raw `dcgmNvLinkGpuP2PStatus_t`.
    pub status: u32,
}
