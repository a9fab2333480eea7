//! The simulated source's incident reader: what the DCGM source reads from DCGM's history, read from
//! the simulated fleet — every XID since the previous poll (a cursor into the fleet's XID log), the
//! clock-event bitmask and health incidents of the collection (turned into edges and transitions by
//! [`crate::source::incidents::Tracker`]; the bitmask is also handed over as the collection's one
//! sample per GPU, as DCGM's watch at the collect interval holds one), and the P2P status when
//! `DCGM_EXP_P2P_STATUS` is listed. Incidents carry the simulated time they happened at.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Fleet;
use crate::counters::exporter::IncidentReads;
use crate::snapshot::{
    Attribution, ClockSample, Entity, EntityKind, Incident, IncidentKind, P2pLink,
};
use crate::source::incidents::{whole_gpus, Tracker};

/// The reader's cursors and last-seen states.
pub struct IncidentReader {
    /// Wall-clock time of simulated time 0.
    origin: SystemTime,
    xid_cursor: usize,
    tracker: Tracker,
    none: Arc<Attribution>,
}

impl IncidentReader {
    /// A reader starting after the first `known_xids` XIDs (those of the collection the source starts
    /// at: history before it started, as on DCGM).
    pub fn new(origin: SystemTime, known_xids: usize) -> IncidentReader {
        IncidentReader {
            origin,
            xid_cursor: known_xids,
            tracker: Tracker::default(),
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

    /// Read one collection: the incidents since the previous one, the clock-event samples and the P2P
    /// matrix (empty unless `reads.p2p`). `entities` are the monitored entities; only their GPUs are
    /// read.
    pub fn poll(
        &mut self,
        fleet: &Fleet,
        entities: &[Arc<Entity>],
        reads: IncidentReads,
    ) -> (Vec<Incident>, Vec<ClockSample>, Vec<P2pLink>) {
        let gpus = whole_gpus(entities);
        let now = fleet.time();
        let mut out = Vec::new();
        let mut samples = Vec::new();
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
            let at = self.at(now);
            let mut found = Vec::new();
            if reads.clock_events {
                let mask = fleet.clock_mask(index);
                found.extend(self.tracker.clock_sample(index, mask, at));
                samples.push(ClockSample {
                    gpu: gpu.clone(),
                    at,
                    mask,
                });
            }
            if reads.health {
                found.extend(self.tracker.health_check(index, &fleet.health(index)));
            }
            for kind in found {
                out.push(self.incident(gpu.clone(), now, kind));
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
        (out, samples, p2p)
    }
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
