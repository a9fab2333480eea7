//! The simulated source's incident reader: what the DCGM source reads from DCGM's history, read from
//! the simulated fleet — every XID since the previous poll (a cursor into the fleet's XID log), clock
//! events that began or ended (edges of the clock-event bitmask; the first poll only sets the
//! baseline, as dcgm-exporter's edge counting does), health-watch transitions, and the P2P status
//! when `DCGM_EXP_P2P_STATUS` is listed. Incidents carry the simulated time they happened at.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Fleet;
use crate::counters::exporter::IncidentReads;
use crate::fields::{clock_events, health};
use crate::snapshot::{
    Attribution, Entity, EntityKind, HealthResult, Incident, IncidentKind, P2pLink,
};

/// Per GPU: the last clock-event bitmask and when each active reason began (simulated seconds).
struct ClockState {
    mask: u64,
    since: [f64; clock_events::REASONS.len()],
}

/// The reader's cursors and last-seen states.
pub struct IncidentReader {
    /// Wall-clock time of simulated time 0.
    origin: SystemTime,
    xid_cursor: usize,
    clocks: HashMap<u32, ClockState>,
    /// Per GPU and watch ([`health::WATCHES`] order): result and `DCGM_FR_*` number.
    health: HashMap<u32, Vec<(HealthResult, u32)>>,
    none: Arc<Attribution>,
}

impl IncidentReader {
    pub fn new(origin: SystemTime) -> IncidentReader {
        IncidentReader {
            origin,
            xid_cursor: 0,
            clocks: HashMap::new(),
            health: HashMap::new(),
            none: Arc::new(Attribution::default()),
        }
    }

    fn at(&self, time_s: f64) -> SystemTime {
        if time_s >= 0.0 {
            self.origin + Duration::from_secs_f64(time_s)
        } else {
            self.origin
                .checked_sub(Duration::from_secs_f64(-time_s))
                .unwrap_or(self.origin)
        }
    }

    fn incident(&self, entity: Arc<Entity>, time_s: f64, kind: IncidentKind) -> Incident {
        Incident {
            entity,
            attribution: self.none.clone(),
            at: self.at(time_s),
            kind,
        }
    }

    /// Read one collection: the incidents since the previous one and the P2P matrix (empty unless
    /// `reads.p2p`). `entities` are the monitored entities; only their GPUs are read.
    pub fn poll(
        &mut self,
        fleet: &Fleet,
        entities: &[Arc<Entity>],
        reads: IncidentReads,
    ) -> (Vec<Incident>, Vec<P2pLink>) {
        let gpus = physical_gpus(fleet, entities);
        let now = fleet.time();
        let mut out = Vec::new();
        let log = fleet.xid_log();
        if reads.xids {
            for x in log.get(self.xid_cursor..).unwrap_or_default() {
                let Some(entity) = xid_entity(fleet, entities, &gpus, x.gpu, x.gpu_i_id) else {
                    continue;
                };
                out.push(self.incident(entity, x.time_s, IncidentKind::Xid { code: x.code }));
            }
        }
        self.xid_cursor = log.len();
        for gpu in &gpus {
            let index = gpu.entity_id;
            if reads.clock_events {
                let mask = fleet.clock_mask(index);
                match self.clocks.get_mut(&index) {
                    None => {
                        self.clocks.insert(
                            index,
                            ClockState {
                                mask,
                                since: [now; clock_events::REASONS.len()],
                            },
                        );
                    }
                    Some(state) => {
                        let (started, ended) = clock_events::edges(state.mask, mask);
                        let mut found = Vec::new();
                        for (r, (bit, name)) in clock_events::REASONS.iter().enumerate() {
                            if ended & bit != 0 {
                                let duration =
                                    Duration::from_secs_f64((now - state.since[r]).max(0.0));
                                found.push(IncidentKind::ClockEventEnded {
                                    reason: name,
                                    duration,
                                });
                            }
                            if started & bit != 0 {
                                state.since[r] = now;
                                found.push(IncidentKind::ClockEventStarted { reason: name });
                            }
                        }
                        state.mask = mask;
                        for kind in found {
                            out.push(self.incident(gpu.clone(), now, kind));
                        }
                    }
                }
            }
            if reads.health {
                let active = fleet.health(index);
                let previous = self
                    .health
                    .entry(index)
                    .or_insert_with(|| vec![(HealthResult::Pass, 0); health::WATCHES.len()]);
                let mut found = Vec::new();
                for (w, (bit, name)) in health::WATCHES.iter().enumerate() {
                    // The worst incident of the watch (the first of equals).
                    let worst = active.iter().filter(|h| h.watch == *bit).fold(
                        None,
                        |best: Option<&super::events::ActiveHealth>, h| match best {
                            Some(b) if b.result >= h.result => Some(b),
                            _ => Some(h),
                        },
                    );
                    let (result, code, message) = match worst {
                        Some(h) => (h.result, h.code, h.message.as_str()),
                        None => (HealthResult::Pass, 0, ""),
                    };
                    let Some(slot) = previous.get_mut(w) else {
                        continue;
                    };
                    if *slot == (result, code) {
                        continue;
                    }
                    found.push(IncidentKind::Health {
                        watch: name,
                        previous: slot.0,
                        result,
                        error_code: health::error_code_name(code).into(),
                        message: message.into(),
                    });
                    *slot = (result, code);
                }
                for kind in found {
                    out.push(self.incident(gpu.clone(), now, kind));
                }
            }
        }
        let mut p2p = Vec::new();
        if reads.p2p {
            for a in &gpus {
                for b in &gpus {
                    if a.entity_id != b.entity_id {
                        p2p.push(P2pLink {
                            gpu: a.clone(),
                            peer: b.entity_id,
                            status: fleet.p2p_status(a.entity_id, b.entity_id),
                        });
                    }
                }
            }
        }
        (out, p2p)
    }
}

/// Whole-GPU entities of the monitored GPUs (a MIG GPU's made from its instances' identity), in order.
fn physical_gpus(fleet: &Fleet, entities: &[Arc<Entity>]) -> Vec<Arc<Entity>> {
    let mut out: Vec<Arc<Entity>> = Vec::new();
    for e in entities {
        let Some(gpu) = e.gpu.as_ref() else {
            continue;
        };
        if !matches!(e.kind, EntityKind::Gpu | EntityKind::GpuInstance)
            || out.iter().any(|g| g.entity_id == gpu.index)
        {
            continue;
        }
        if e.kind == EntityKind::Gpu {
            out.push(e.clone());
        } else if fleet.gpus().iter().any(|g| g.identity.index == gpu.index) {
            out.push(Arc::new(Entity::gpu(gpu.clone())));
        }
    }
    out
}

/// The entity an XID hit: the MIG instance it names (monitored or not) or the GPU.
fn xid_entity(
    fleet: &Fleet,
    entities: &[Arc<Entity>],
    gpus: &[Arc<Entity>],
    gpu: u32,
    gpu_i_id: Option<u32>,
) -> Option<Arc<Entity>> {
    let whole = gpus.iter().find(|g| g.entity_id == gpu)?;
    let Some(gi) = gpu_i_id else {
        return Some(whole.clone());
    };
    if let Some(e) = entities.iter().find(|e| {
        e.kind == EntityKind::GpuInstance
            && e.gpu_index() == Some(gpu)
            && e.mig.as_ref().is_some_and(|m| m.gi_id == gi)
    }) {
        return Some(e.clone());
    }
    let sim = fleet.gpus().iter().find(|g| g.identity.index == gpu)?;
    let mig = sim.instances.iter().find(|m| m.gi_id == gi)?;
    Some(Arc::new(Entity::instance(
        sim.identity.clone(),
        mig.clone(),
    )))
}
