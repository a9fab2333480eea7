//! Incidents read from DCGM, once per collection, without loss between collections:
//!
//! - XID errors and clock-event bitmasks: a private group (the monitored GPUs, their MIG instances)
//!   watching `DCGM_FI_DEV_XID_ERRORS` / `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`, read with
//!   `dcgmGetValuesSince_v2` from a cursor: every sample since the previous read, so three XIDs between
//!   two collections are three incidents (not the latest value). Each sample is attributed to the
//!   entity DCGM returns it for (a MIG instance's own id, never its parent's index). Every clock-event
//!   sample is handed over as well (one per watch interval, the collect interval), for the window
//!   count; the samples DCGM already held at the first watch are handed over with the first read.
//! - Health: a private group of the GPUs with `dcgmHealthSet(DCGM_HEALTH_WATCH_ALL)` once, then one
//!   `dcgmHealthCheck` per collection (never per scrape); transitions per watch system.
//! - P2P: `dcgmGetNvLinkP2PStatus` once per collection (DCGM ≥ 4.3).
//!
//! Only what the listed `DCGM_EXP_*` families need is created and read. The objects live with the
//! connection ([`IncidentWatch`]); the cursor and last states ([`IncidentState`]) live with the source,
//! so after a host-engine reconnect the group, watch and health group are created again and reading
//! resumes from the same cursor: nothing is counted twice and the totals never go back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::client::{Connection, DcgmError, EntityPair, FieldGroup, Group, SinceSample};
use super::ffi::{self, Pod};
use crate::counters::exporter::IncidentReads;
use crate::fields::{clock_events, health};
use crate::snapshot::{
    Attribution, ClockSample, Entity, EntityKind, HealthResult, Incident, IncidentKind, P2pLink,
};
use crate::source::incidents::{HealthIncident, Tracker};

const XID_FIELD: u16 = 230;
/// Samples kept by the history watch: 600 s, as dcgm-exporter's watches. The cursor is read every
/// collection, but this is a values-since read: after a lost link to a host engine that stayed up, the
/// history of the outage (up to 10 minutes) is read from the cursor, so no XID is lost.
const MAX_KEEP_AGE: Duration = Duration::from_secs(600);

/// What outlives a connection: the values-since cursor and the last clock masks and health results.
pub struct IncidentState {
    tracker: Tracker,
    /// µs since the epoch; `None` until the first watch (then: its creation time).
    cursor: Option<i64>,
    /// Clock-event samples found at the first watch, for the next read to hand over.
    held: Vec<ClockSample>,
    none: Arc<Attribution>,
}

impl Default for IncidentState {
    fn default() -> Self {
        IncidentState {
            tracker: Tracker::default(),
            cursor: None,
            held: Vec::new(),
            none: Arc::new(Attribution::default()),
        }
    }
}

/// The DCGM objects of one connection.
pub struct IncidentWatch {
    reads: IncidentReads,
    // Field order = drop order: the groups before the connection they belong to.
    history: Option<(Group, FieldGroup)>,
    health: Option<Group>,
    response: Box<ffi::dcgmHealthResponse_v5>,
    /// Whole-GPU entities of the monitored GPUs, in order.
    gpus: Vec<Arc<Entity>>,
    /// Monitored MIG instances by GPU-instance entity id.
    instances: HashMap<u32, Arc<Entity>>,
    samples: Vec<SinceSample>,
    /// DCGM calls the last read made, and the wall time it spent in them.
    pub last_calls: usize,
    pub last_time: Duration,
    /// Parts that could not be set up (left out), for the source to log and count.
    pub setup_errors: Vec<DcgmError>,
    conn: Connection,
}

impl Drop for IncidentWatch {
    /// Unwatch the history fields while the engine is alive (destroying a field group does not).
    fn drop(&mut self) {
        if let Some((group, fields)) = &self.history {
            let _ = self.conn.unwatch(group, fields);
        }
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn at(ts_us: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(u64::try_from(ts_us).unwrap_or(0))
}

impl IncidentWatch {
    /// Create what `reads` needs for `entities` on `conn` (`None` when nothing is read).
    pub fn establish(
        conn: &Connection,
        entities: &[Arc<Entity>],
        reads: IncidentReads,
        name_prefix: &str,
        interval: Duration,
        state: &mut IncidentState,
    ) -> Result<Option<IncidentWatch>, DcgmError> {
        if !reads.any() {
            return Ok(None);
        }
        let (gpus, instances) = watched(entities);
        if gpus.is_empty() {
            return Ok(None);
        }
        let gpu_pairs: Vec<EntityPair> = gpus
            .iter()
            .map(|g| EntityPair::new(ffi::DCGM_FE_GPU, g.entity_id))
            .collect();
        // A part that cannot be set up (an older libdcgm) is left out; the others go on. Only a lost
        // connection fails the whole.
        let mut setup_errors = Vec::new();
        let history = history_watch(conn, reads, &gpu_pairs, &instances, name_prefix, interval);
        let history = part(history, &mut setup_errors)?.flatten();
        let health = if reads.health {
            let made = (|| {
                let group = conn.create_group(&format!("{name_prefix}-health"), &gpu_pairs)?;
                conn.health_watch_all(&group)?;
                Ok(group)
            })();
            part(made, &mut setup_errors)?
        } else {
            None
        };
        if let (Some((group, fields)), None) = (&history, state.cursor) {
            first_watch(conn, group, fields, &gpus, state)?;
        }
        Ok(Some(IncidentWatch {
            reads,
            history,
            health,
            response: ffi::dcgmHealthResponse_v5::boxed_zeroed(),
            gpus,
            instances,
            samples: Vec::new(),
            last_calls: 0,
            last_time: Duration::ZERO,
            setup_errors,
            conn: conn.clone(),
        }))
    }

    /// One collection: the incidents since the previous one, the P2P matrix, and the first error. A
    /// failing call never loses what the others read: the history cursor only moves past what was
    /// handed over, and the incidents found before an error are returned with it.
    pub fn read(&mut self, state: &mut IncidentState) -> Read {
        let mut read = Read::default();
        let started = std::time::Instant::now();
        if let Err(e) = self.read_into(state, &mut read) {
            read.error = Some(e);
        }
        self.last_time = started.elapsed();
        read
    }

    fn read_into(&mut self, state: &mut IncidentState, read: &mut Read) -> Result<(), DcgmError> {
        read.clock_samples.append(&mut state.held);
        self.last_calls = 0;
        self.read_history(state, read)?;
        self.read_health(state, &mut read.incidents)?;
        self.read_p2p(&mut read.p2p)
    }

    /// The XID and clock-event samples since the cursor: XIDs as incidents, clock-event masks as
    /// samples and their edges as incidents; the cursor moves past them.
    fn read_history(
        &mut self,
        state: &mut IncidentState,
        read: &mut Read,
    ) -> Result<(), DcgmError> {
        let Some((group, fields)) = &self.history else {
            return Ok(());
        };
        self.samples.clear();
        let since = state.cursor.unwrap_or_else(now_us);
        self.last_calls += 1;
        let next = match self
            .conn
            .values_since(group, fields, since, &mut self.samples)
        {
            Ok(next) => next,
            Err(e) => {
                if lacks(&e) {
                    self.history = None;
                }
                return Err(e);
            }
        };
        for s in &self.samples {
            let Some(v) = s.value else {
                continue;
            };
            let entity = match s.entity_group {
                ffi::DCGM_FE_GPU => self.gpus.iter().find(|g| g.entity_id == s.entity_id),
                ffi::DCGM_FE_GPU_I => self.instances.get(&s.entity_id),
                _ => None,
            };
            let Some(entity) = entity else {
                continue;
            };
            if s.field_id == XID_FIELD && self.reads.xids {
                // XID 0 is "no error"; anything past u32 is not an XID.
                if let Ok(code @ 1..) = u32::try_from(v) {
                    let kind = IncidentKind::Xid { code };
                    read.incidents
                        .push(incident(&state.none, entity, s.ts, kind));
                }
            } else if s.field_id == clock_events::FIELD
                && entity.kind == EntityKind::Gpu
                && self.reads.clock_events
            {
                let mask = u64::try_from(v).unwrap_or(0);
                for kind in state.tracker.clock_sample(entity.entity_id, mask, at(s.ts)) {
                    read.incidents
                        .push(incident(&state.none, entity, s.ts, kind));
                }
                read.clock_samples.push(ClockSample {
                    gpu: entity.clone(),
                    at: at(s.ts),
                    mask,
                });
            }
        }
        // The cursor moves past what was read (DCGM returns the next one to ask from).
        state.cursor = Some(next.max(since));
        Ok(())
    }

    /// One health check: each GPU's transitions of its watch systems, as incidents.
    fn read_health(
        &mut self,
        state: &mut IncidentState,
        out: &mut Vec<Incident>,
    ) -> Result<(), DcgmError> {
        let Some(group) = &self.health else {
            return Ok(());
        };
        self.last_calls += 1;
        let checked = match self.conn.health_check(group, &mut self.response) {
            Ok(c) => c,
            Err(e) => {
                if lacks(&e) {
                    self.health = None;
                }
                return Err(e);
            }
        };
        let ts = now_us();
        for gpu in &self.gpus {
            let active: Vec<HealthIncident> = checked
                .iter()
                .filter(|i| i.entity_group == ffi::DCGM_FE_GPU && i.entity_id == gpu.entity_id)
                .filter(|i| health::watch_name(i.system).is_some())
                .map(|i| HealthIncident {
                    watch: i.system,
                    result: match i.health {
                        ffi::DCGM_HEALTH_RESULT_PASS => HealthResult::Pass,
                        ffi::DCGM_HEALTH_RESULT_WARN => HealthResult::Warn,
                        _ => HealthResult::Fail,
                    },
                    code: i.code,
                    message: i.message.clone(),
                })
                .collect();
            for kind in state.tracker.health_check(gpu.entity_id, &active) {
                out.push(incident(&state.none, gpu, ts, kind));
            }
        }
        Ok(())
    }

    /// The P2P status of each pair of monitored GPUs.
    fn read_p2p(&mut self, p2p: &mut Vec<P2pLink>) -> Result<(), DcgmError> {
        if !self.reads.p2p {
            return Ok(());
        }
        self.last_calls += 1;
        let matrix = match self.conn.p2p_status() {
            Ok(m) => m,
            Err(e) => {
                if lacks(&e) {
                    self.reads.p2p = false;
                }
                return Err(e);
            }
        };
        for gpu in &self.gpus {
            let Some((_, row)) = matrix.iter().find(|(id, _)| *id == gpu.entity_id) else {
                continue;
            };
            for peer in &self.gpus {
                if peer.entity_id == gpu.entity_id {
                    continue;
                }
                if let Some(status) = row.get(peer.entity_id as usize) {
                    p2p.push(P2pLink {
                        gpu: gpu.clone(),
                        peer: peer.entity_id,
                        status: *status,
                    });
                }
            }
        }
        Ok(())
    }
}

/// An incident of `entity` at `ts` (µs since the epoch), attributed to no one yet (`none`).
fn incident(
    none: &Arc<Attribution>,
    entity: &Arc<Entity>,
    ts: i64,
    kind: IncidentKind,
) -> Incident {
    Incident {
        entity: entity.clone(),
        attribution: none.clone(),
        at: at(ts),
        kind,
    }
}

/// The whole-GPU entities of the monitored GPUs in order (a GPU seen only through its MIG instances
/// included), and the monitored MIG instances by GPU-instance entity id.
fn watched(entities: &[Arc<Entity>]) -> (Vec<Arc<Entity>>, HashMap<u32, Arc<Entity>>) {
    let mut gpus: Vec<Arc<Entity>> = Vec::new();
    let mut instances = HashMap::new();
    for e in entities {
        let Some(gpu) = e.gpu.as_ref() else {
            continue;
        };
        match e.kind {
            EntityKind::Gpu => {}
            EntityKind::GpuInstance => {
                instances.insert(e.entity_id, e.clone());
            }
            _ => continue,
        }
        if !gpus.iter().any(|g| g.entity_id == gpu.index) {
            gpus.push(if e.kind == EntityKind::Gpu {
                e.clone()
            } else {
                Arc::new(Entity::gpu(gpu.clone()))
            });
        }
    }
    (gpus, instances)
}

/// The history watch (`None` when neither XIDs nor clock events are read): a group of the GPUs
/// (and, for XIDs, their MIG instances) watching the fields read since a cursor.
fn history_watch(
    conn: &Connection,
    reads: IncidentReads,
    gpu_pairs: &[EntityPair],
    instances: &HashMap<u32, Arc<Entity>>,
    name_prefix: &str,
    interval: Duration,
) -> Result<Option<(Group, FieldGroup)>, DcgmError> {
    let mut fields = Vec::new();
    if reads.xids {
        fields.push(XID_FIELD);
    }
    if reads.clock_events {
        fields.push(clock_events::FIELD);
    }
    if fields.is_empty() {
        return Ok(None);
    }
    let mut members = gpu_pairs.to_vec();
    if reads.xids {
        members.extend(
            instances
                .keys()
                .map(|id| EntityPair::new(ffi::DCGM_FE_GPU_I, *id)),
        );
    }
    let group = conn.create_group(&format!("{name_prefix}-incidents"), &members)?;
    let fg = conn.create_field_group(&format!("{name_prefix}-incident-fields"), &fields)?;
    conn.watch(&group, &fg, interval, MAX_KEEP_AGE.max(interval * 2), 0)?;
    Ok(Some((group, fg)))
}

/// The first watch: what DCGM already has is history before this exporter started (not counted, as
/// dcgm-exporter's totals start at its start); its clock-event masks are the baseline (and samples
/// the window counts, as dcgm-exporter's history read would). The cursor comes from DCGM's own
/// clock (a remote host engine's may differ).
fn first_watch(
    conn: &Connection,
    group: &Group,
    fields: &FieldGroup,
    gpus: &[Arc<Entity>],
    state: &mut IncidentState,
) -> Result<(), DcgmError> {
    let mut samples = Vec::new();
    let next = conn.values_since(group, fields, 0, &mut samples)?;
    for s in &samples {
        if let (clock_events::FIELD, ffi::DCGM_FE_GPU, Some(v)) =
            (s.field_id, s.entity_group, s.value)
        {
            let mask = u64::try_from(v).unwrap_or(0);
            let _ = state.tracker.clock_sample(s.entity_id, mask, at(s.ts));
            if let Some(gpu) = gpus.iter().find(|g| g.entity_id == s.entity_id) {
                state.held.push(ClockSample {
                    gpu: gpu.clone(),
                    at: at(s.ts),
                    mask,
                });
            }
        }
    }
    state.cursor = Some(next);
    Ok(())
}

/// A part of the setup: made, or left out with its error kept (a lost connection fails the whole).
fn part<T>(
    made: Result<T, DcgmError>,
    errors: &mut Vec<DcgmError>,
) -> Result<Option<T>, DcgmError> {
    match made {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.connection_lost() => Err(e),
        Err(e) => {
            errors.push(e);
            Ok(None)
        }
    }
}

/// Whether an error says the library or the GPUs cannot do it at all (not worth asking again on
/// this connection): an older libdcgm without the function, or DCGM reporting it not supported.
fn lacks(e: &DcgmError) -> bool {
    matches!(
        e.code,
        ffi::DCGM_ST_FUNCTION_NOT_FOUND | ffi::DCGM_ST_NOT_SUPPORTED
    )
}

/// What [`IncidentWatch::read`] found.
#[derive(Default)]
pub struct Read {
    pub incidents: Vec<Incident>,
    /// Every clock-event bitmask sample read, per GPU.
    pub clock_samples: Vec<ClockSample>,
    pub p2p: Vec<P2pLink>,
    pub error: Option<DcgmError>,
}
