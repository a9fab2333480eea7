//! One connection's worth of DCGM state: the groups, field groups and watches created for the monitored
//! entities, and the per-cycle read of their latest values.
//!
//! Watching: GPUs and MIG instances share one entity group (split at the group size limit); NvLinks (of
//! GPUs and of switches), NvSwitches, CPUs and CPU cores each get their own, as dcgm-exporter's entity
//! groups; fields go to the groups whose entity kind reads them ([`EntityKind::reads`]), into field
//! groups of at most 127 ids, with the profiling (DCP) fields in separate field groups so that a
//! profiling failure cannot take the basic fields down (the host engine unwatches a whole field group
//! when one of its fields fails). Watch frequency = collect interval (a watch group's own interval for
//! its fields); DCGM keeps three watch intervals of samples ([`keep`]), not dcgm-exporter's 600 s: the
//! session reads only the latest value, so older samples are host-engine memory for nothing.
//!
//! Reading: `dcgmEntitiesGetLatestValues` over all entities that ask for the same fields, so a cycle is
//! normally one call (more only past 512 values per call, or when some entities stopped asking for a
//! field they do not support). Everything here lives and dies with the connection: after a reconnect a
//! new session is built from a fresh discovery.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::client::{Connection, DcgmError, EntityPair, FieldGroup, Group, ValueBuffer};
use super::ffi;
use super::values;
use crate::counters::{CounterSet, MetricKind};
use crate::fields::EntityLevel;
use crate::snapshot::inventory::Inventory;
use crate::snapshot::inventory::Selection;
use crate::snapshot::values::{RowLayout, ValuePool, ValueWriter};
use crate::snapshot::{Absent, Attribution, Entity, EntityKind, EntityReading, FieldValue};

/// History DCGM keeps of a field watched every `every` and read once per collection: three watch
/// intervals (a late collection or a reconnection attempt still finds a sample), as age and as sample
/// count. dcgm-exporter keeps 600 s of every field: 20 samples at a 30 s interval, 600 at 1 s.
pub fn keep(every: Duration) -> (Duration, i32) {
    super::distributions::keep(every, every)
}
/// Most field ids one field group may hold (the API rejects 128 and more).
const FIELD_GROUP_MAX: usize = ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP - 1;
/// Most field ids one latest-values call accepts.
const CALL_MAX_FIELDS: usize = ffi::DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP;
/// Most entities one latest-values call accepts.
const CALL_MAX_ENTITIES: usize = 1024;
/// Values per latest-values call. Each value is a 4,128-byte `dcgmFieldValue_v2`, so this bounds the
/// reusable buffer to 2.1 MB: its 512 pages stay in the caches and the TLB between the library's writes
/// and our reads. 2,048 (an 8.5 MB buffer) cost the `large` fleet 1.3x the time outside libdcgm
/// (`benches/dcgm_cycle.rs`) and 4.8 MB more RSS, for 9 calls a collection instead of 28.
pub const CALL_MAX_VALUES: usize = 512;

/// Whether a field needs DCGM's profiling module (DCP): ids 1000..1100 and the per-link NvLink bytes.
pub fn needs_profiling(field: u16) -> bool {
    (1000..1100).contains(&field) || (1532..=1533).contains(&field)
}

/// The counter rows as the source reads them, with the field → rows index.
#[derive(Debug, Clone)]
pub struct RowPlan {
    pub kinds: Vec<MetricKind>,
    pub fields: Vec<u16>,
    pub levels: Vec<EntityLevel>,
    /// Per field in a watch group: its watch interval.
    intervals: HashMap<u16, Duration>,
    by_field: HashMap<u16, Vec<usize>>,
    /// Which rows each entity kind reads (where a value lies in the snapshot).
    layout: Arc<RowLayout>,
}

impl RowPlan {
    pub fn new(counters: &CounterSet) -> Self {
        let rows = &counters.rows;
        let mut by_field: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            by_field.entry(r.field.id).or_default().push(i);
        }
        let intervals = rows
            .iter()
            .filter_map(|r| counters.watch_interval(r.field.id).map(|d| (r.field.id, d)))
            .collect();
        RowPlan {
            kinds: rows.iter().map(|r| r.kind).collect(),
            fields: rows.iter().map(|r| r.field.id).collect(),
            levels: rows.iter().map(|r| r.field.level).collect(),
            intervals,
            by_field,
            layout: Arc::new(RowLayout::new(counters)),
        }
    }

    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    fn applies(&self, row: usize, kind: EntityKind) -> bool {
        kind.reads(self.levels[row])
    }

    /// Unique field ids that apply to an entity kind, in first-seen row order.
    fn fields_for(&self, kind: EntityKind) -> Vec<u16> {
        let mut seen = BTreeSet::new();
        (0..self.len())
            .filter(|&r| self.applies(r, kind))
            .map(|r| self.fields[r])
            .filter(|f| seen.insert(*f))
            .collect()
    }

    /// The watch interval of a field: its watch group's, else `default`.
    fn interval_of(&self, field: u16, default: Duration) -> Duration {
        self.intervals.get(&field).copied().unwrap_or(default)
    }
}

/// The entity groups a session creates: which kinds share one, by the kind whose fields they read.
const GROUP_CLASSES: &[(&str, EntityKind, &[EntityKind])] = &[
    (
        "gpus",
        EntityKind::Gpu,
        &[EntityKind::Gpu, EntityKind::GpuInstance],
    ),
    (
        "links",
        EntityKind::NvLink,
        &[EntityKind::NvLink, EntityKind::NvSwitchLink],
    ),
    ("switches", EntityKind::NvSwitch, &[EntityKind::NvSwitch]),
    ("cpus", EntityKind::Cpu, &[EntityKind::Cpu]),
    ("cores", EntityKind::CpuCore, &[EntityKind::CpuCore]),
];

/// Names and limits for the objects a session creates.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Unique per process and connection, e.g. `dcgm-otel-1234-2`.
    pub name_prefix: String,
    pub interval: Duration,
    pub group_max_entities: usize,
}

/// One latest-values call of the cycle.
#[derive(Debug, Clone)]
struct Call {
    pairs: Vec<EntityPair>,
    fields: Vec<u16>,
    /// The entity (index into `Session::entities`) of each pair.
    entities: Vec<usize>,
    /// The rows of each field.
    rows: Vec<Vec<usize>>,
}

/// The result of one [`Session::read`].
pub struct Read {
    pub entities: Vec<EntityReading>,
    /// DCGM said a GPU or instance is gone: rediscover before the next read.
    pub topology_changed: bool,
}

/// A field that an entity reported as not supported for the first time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub entity: Arc<Entity>,
    pub field: u16,
}

/// State of one connection.
pub struct Session {
    /// The incident history, health group and P2P reads of this connection (when the counters list
    /// `DCGM_EXP_*` families); dropped first.
    pub incidents: Option<super::incidents::IncidentWatch>,
    /// The sampled fields' watch of this connection (`--distribution`); dropped with the incidents.
    pub distributions: Option<super::distributions::DistributionWatch>,
    /// (group index, field-group index) pairs with an active watch.
    watches: Vec<(usize, usize)>,
    // Field order = drop order: watches' groups go before the connection handle they belong to.
    field_groups: Vec<FieldGroup>,
    groups: Vec<Group>,
    conn: Connection,
    entities: Vec<Arc<Entity>>,
    pairs: Vec<EntityPair>,
    index: HashMap<(u32, u32), usize>,
    /// Per entity: fields it no longer asks for (DCGM said not supported).
    unsupported: Vec<BTreeSet<u16>>,
    /// Fields nobody asks for (their watch failed).
    unwatched: BTreeSet<u16>,
    calls: Vec<Call>,
    dirty: bool,
    buf: ValueBuffer,
    /// The value arrays of the readings, reused between collections.
    values: ValuePool,
    driver_version: Option<String>,
    attribution: Arc<Attribution>,
    /// Calls made by the last [`Session::read`].
    pub last_calls: usize,
    /// Wall time spent inside libdcgm by the last [`Session::read`].
    pub last_dcgm_time: Duration,
}

fn unwatch_all(
    conn: &Connection,
    groups: &[Group],
    field_groups: &[FieldGroup],
    watches: &[(usize, usize)],
) {
    for &(g, f) in watches {
        if let (Some(g), Some(f)) = (groups.get(g), field_groups.get(f)) {
            let _ = conn.unwatch(g, f);
        }
    }
}

impl Drop for Session {
    /// Unwatch (while the engine is alive); then the field groups and groups destroy themselves, and
    /// the connection closes when its last holder is gone.
    fn drop(&mut self) {
        unwatch_all(&self.conn, &self.groups, &self.field_groups, &self.watches);
    }
}

fn entity_pair(e: &Entity) -> EntityPair {
    let group = match e.kind {
        EntityKind::Gpu => ffi::DCGM_FE_GPU,
        EntityKind::GpuInstance => ffi::DCGM_FE_GPU_I,
        EntityKind::NvLink | EntityKind::NvSwitchLink => ffi::DCGM_FE_LINK,
        EntityKind::NvSwitch => ffi::DCGM_FE_SWITCH,
        EntityKind::Cpu => ffi::DCGM_FE_CPU,
        EntityKind::CpuCore => ffi::DCGM_FE_CPU_CORE,
    };
    EntityPair::new(group, e.entity_id)
}

/// The entity (index into the session's entities) and the rows of a value at position `at` of call
/// `call`'s answer. DCGM promises no order: the value's own entity and field are checked against the
/// two orders a buffer of entities × fields can have (entity-major, field-major), then looked up.
fn answer_of<'c>(
    call: &'c Call,
    at: usize,
    v: &super::client::ValueRef<'_>,
    index: &HashMap<(u32, u32), usize>,
) -> Option<(usize, &'c [usize])> {
    let (ne, nf) = (call.pairs.len(), call.fields.len());
    if ne == 0 || nf == 0 {
        return None;
    }
    let key = (v.entity_group(), v.entity_id());
    let is = |e: usize, f: usize| {
        call.pairs
            .get(e)
            .is_some_and(|p| (p.entityGroupId, p.entityId) == key)
            && call.fields.get(f) == Some(&v.field_id())
    };
    let (e, f) = if is(at / nf, at % nf) {
        (at / nf, at % nf)
    } else if is(at % ne, at / ne) {
        (at % ne, at / ne)
    } else {
        let ent = *index.get(&key)?;
        let f = call.fields.iter().position(|&f| f == v.field_id())?;
        return Some((ent, call.rows.get(f)?));
    };
    Some((*call.entities.get(e)?, call.rows.get(f)?))
}

/// What [`Session::establish`] builds up: the groups, the field groups and the watches between them.
#[derive(Default)]
struct Watching {
    groups: Vec<Group>,
    field_groups: Vec<FieldGroup>,
    /// (group index, field-group index) pairs with an active watch.
    watches: Vec<(usize, usize)>,
    /// Fields whose (profiling) watch failed.
    unwatched: BTreeSet<u16>,
    /// The first profiling watch that failed.
    profiling_watch_error: Option<DcgmError>,
    /// Field groups made so far (their names count them).
    fg_seq: usize,
}

impl Watching {
    /// One class of entities (`label`): its `members` in groups of at most `group_max_entities`,
    /// each field set (by watch interval, profiling or not) in field groups, each watched on each
    /// group. A failed profiling watch leaves its fields out; any other failed watch undoes the
    /// watches made and fails.
    fn watch_class(
        &mut self,
        conn: &Connection,
        label: &str,
        members: &[EntityPair],
        sets: BTreeMap<(Duration, bool), Vec<u16>>,
        cfg: &WatchConfig,
    ) -> Result<(), DcgmError> {
        let first_group = self.groups.len();
        for (i, chunk) in members.chunks(cfg.group_max_entities.max(1)).enumerate() {
            let name = format!("{}-{label}-{i}", cfg.name_prefix);
            self.groups.push(conn.create_group(&name, chunk)?);
        }
        for ((every, is_prof), set) in sets {
            for chunk in set.chunks(FIELD_GROUP_MAX) {
                self.fg_seq += 1;
                let suffix = if is_prof { "-dcp" } else { "" };
                let name = format!("{}-fields-{}{suffix}", cfg.name_prefix, self.fg_seq);
                self.field_groups
                    .push(conn.create_field_group(&name, chunk)?);
                let f = self.field_groups.len() - 1;
                for g in first_group..self.groups.len() {
                    let (age, samples) = keep(every);
                    match conn.watch(&self.groups[g], &self.field_groups[f], every, age, samples) {
                        Ok(()) => self.watches.push((g, f)),
                        Err(e) if is_prof && !e.connection_lost() => {
                            self.unwatched.extend(chunk.iter().copied());
                            self.profiling_watch_error.get_or_insert(e);
                        }
                        Err(e) => {
                            unwatch_all(conn, &self.groups, &self.field_groups, &self.watches);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// What [`Session::establish`] set up.
pub struct Established {
    pub session: Session,
    /// The profiling watch failed: DCP fields are not read on this connection.
    pub profiling_watch_error: Option<DcgmError>,
}

impl Session {
    /// Create groups, field groups and watches for the selected entities, then wait for a first sample.
    pub fn establish(
        conn: Connection,
        inv: &Inventory,
        selection: &Selection,
        rows: &RowPlan,
        cfg: &WatchConfig,
    ) -> Result<Established, DcgmError> {
        let entities = inv.entities(selection);
        let pairs: Vec<EntityPair> = entities.iter().map(|e| entity_pair(e)).collect();
        let index = pairs
            .iter()
            .enumerate()
            .map(|(i, p)| ((p.entityGroupId, p.entityId), i))
            .collect();
        // GPUs and MIG instances share groups and field groups; links, switches, CPUs and cores get
        // their own. Fields are split by watch interval (watch groups), then profiling or not.
        let mut w = Watching::default();
        for (label, reads_as, kinds) in GROUP_CLASSES {
            let fields = rows.fields_for(*reads_as);
            let members: Vec<EntityPair> = entities
                .iter()
                .zip(&pairs)
                .filter(|(e, _)| kinds.contains(&e.kind))
                .map(|(_, p)| *p)
                .collect();
            if members.is_empty() || fields.is_empty() {
                continue;
            }
            let mut sets: BTreeMap<(Duration, bool), Vec<u16>> = BTreeMap::new();
            for f in fields {
                sets.entry((rows.interval_of(f, cfg.interval), needs_profiling(f)))
                    .or_default()
                    .push(f);
            }
            w.watch_class(&conn, label, &members, sets, cfg)?;
        }
        if !w.watches.is_empty() {
            if let Err(e) = conn.update_all_fields() {
                unwatch_all(&conn, &w.groups, &w.field_groups, &w.watches);
                return Err(e);
            }
        }
        let n = entities.len();
        Ok(Established {
            session: Session {
                incidents: None,
                distributions: None,
                watches: w.watches,
                field_groups: w.field_groups,
                groups: w.groups,
                conn,
                entities,
                pairs,
                index,
                unsupported: vec![BTreeSet::new(); n],
                unwatched: w.unwatched,
                calls: Vec::new(),
                dirty: true,
                buf: ValueBuffer::default(),
                values: ValuePool::with_layout(rows.layout.clone()),
                driver_version: inv.driver_version.clone(),
                attribution: Arc::new(Attribution::default()),
                last_calls: 0,
                last_dcgm_time: Duration::ZERO,
            },
            profiling_watch_error: w.profiling_watch_error,
        })
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    pub fn entities(&self) -> &[Arc<Entity>] {
        &self.entities
    }

    pub fn driver_version(&self) -> Option<&str> {
        self.driver_version.as_deref()
    }

    fn plan(&mut self, rows: &RowPlan) {
        let by_kind: Vec<(EntityKind, Vec<u16>)> = GROUP_CLASSES
            .iter()
            .flat_map(|(_, reads_as, kinds)| {
                let fields = rows.fields_for(*reads_as);
                kinds.iter().map(move |k| (*k, fields.clone()))
            })
            .collect();
        let mut buckets: BTreeMap<Vec<u16>, Vec<usize>> = BTreeMap::new();
        for (i, e) in self.entities.iter().enumerate() {
            let Some((_, all)) = by_kind.iter().find(|(k, _)| *k == e.kind) else {
                continue;
            };
            let asked: Vec<u16> = all
                .iter()
                .copied()
                .filter(|f| !self.unwatched.contains(f) && !self.unsupported[i].contains(f))
                .collect();
            if !asked.is_empty() {
                buckets.entry(asked).or_default().push(i);
            }
        }
        self.calls.clear();
        for (fields, ents) in buckets {
            for fchunk in fields.chunks(CALL_MAX_FIELDS) {
                let per_call = (CALL_MAX_VALUES / fchunk.len()).clamp(1, CALL_MAX_ENTITIES);
                for echunk in ents.chunks(per_call) {
                    self.calls.push(Call {
                        pairs: echunk.iter().map(|&i| self.pairs[i]).collect(),
                        fields: fchunk.to_vec(),
                        entities: echunk.to_vec(),
                        rows: fchunk
                            .iter()
                            .map(|f| rows.by_field.get(f).cloned().unwrap_or_default())
                            .collect(),
                    });
                }
            }
        }
        self.dirty = false;
    }

    /// Read the latest value of every row on every entity. Fields an entity reports as not supported
    /// are returned in `newly_unsupported` and not asked for again on this connection.
    pub fn read(
        &mut self,
        rows: &RowPlan,
        newly_unsupported: &mut Vec<Unsupported>,
    ) -> Result<Read, DcgmError> {
        if self.dirty {
            self.plan(rows);
        }
        let mut values = self.values.writer();
        self.unanswered(rows, &mut values);
        let mut topology_changed = false;
        let mut dcgm_time = Duration::ZERO;
        for c in 0..self.calls.len() {
            let call = &self.calls[c];
            let t = Instant::now();
            let r = self
                .conn
                .latest_values(&call.pairs, &call.fields, false, &mut self.buf);
            dcgm_time += t.elapsed();
            r?;
            topology_changed |= self.take_answers(c, rows, &mut values, newly_unsupported);
        }
        self.last_calls = self.calls.len();
        self.last_dcgm_time = dcgm_time;
        topology_changed |= self.any_gone(rows, &values);
        let attribution = &self.attribution;
        let entities = self
            .entities
            .iter()
            .zip(self.values.finish(values))
            .map(|(e, v)| EntityReading {
                entity: e.clone(),
                values: v,
                attribution: attribution.clone(),
            })
            .collect();
        Ok(Read {
            entities,
            topology_changed,
        })
    }

    /// Each entity's value of each row its kind reads before DCGM answers: not supported (DCGM said
    /// so before), an error (its watch failed), or not found (replaced when DCGM answers).
    fn unanswered(&self, rows: &RowPlan, values: &mut ValueWriter) {
        for (i, e) in self.entities.iter().enumerate() {
            let unsupported = &self.unsupported[i];
            if unsupported.is_empty() && self.unwatched.is_empty() {
                values.push(e.kind, |_| FieldValue::Absent(Absent::NotFound));
                continue;
            }
            values.push(e.kind, |r| {
                if unsupported.contains(&rows.fields[r]) {
                    FieldValue::Absent(Absent::NotSupported)
                } else if self.unwatched.contains(&rows.fields[r]) {
                    FieldValue::Absent(Absent::Error)
                } else {
                    FieldValue::Absent(Absent::NotFound)
                }
            });
        }
    }

    /// The answers of call `c` (in `buf`) into `values`; a field newly not supported on an entity
    /// into `newly_unsupported` (the calls are planned again without it). Whether an answer says the
    /// topology changed (a GPU lost or detached, an instance not found).
    fn take_answers(
        &mut self,
        c: usize,
        rows: &RowPlan,
        values: &mut ValueWriter,
        newly_unsupported: &mut Vec<Unsupported>,
    ) -> bool {
        let mut topology_changed = false;
        let Some(call) = self.calls.get(c) else {
            return false;
        };
        for (at, v) in self.buf.iter_positions() {
            let Some((ent, field_rows)) = answer_of(call, at, &v, &self.index) else {
                continue;
            };
            let status = v.status();
            topology_changed |= matches!(
                status,
                ffi::DCGM_ST_GPU_IS_LOST
                    | ffi::DCGM_ST_INSTANCE_NOT_FOUND
                    | ffi::DCGM_ST_GPUS_DETACHED
            );
            let payload = v.payload();
            let mut unsupported = false;
            for &r in field_rows {
                let Some(slot) = values.get_mut(ent, r) else {
                    continue;
                };
                let fv = values::convert(status, payload.clone(), rows.kinds[r]);
                unsupported |= fv == FieldValue::Absent(Absent::NotSupported);
                *slot = fv;
            }
            if unsupported && self.unsupported[ent].insert(v.field_id()) {
                self.dirty = true;
                newly_unsupported.push(Unsupported {
                    entity: self.entities[ent].clone(),
                    field: v.field_id(),
                });
            }
        }
        topology_changed
    }

    /// An entity that answers "not found" for everything it was asked is gone (a GPU fell off the
    /// bus, a MIG instance was destroyed): rediscover. Global fields answer for any entity id and
    /// say nothing about the entity.
    fn any_gone(&self, rows: &RowPlan, values: &ValueWriter) -> bool {
        let asked = |i: usize, r: usize| {
            rows.levels[r] != EntityLevel::Global
                && !self.unsupported[i].contains(&rows.fields[r])
                && !self.unwatched.contains(&rows.fields[r])
        };
        (0..self.entities.len()).any(|i| {
            let mut any = false;
            let all_missing = values
                .entity(i)
                .filter(|&(r, _)| asked(i, r))
                .all(|(_, v)| {
                    any = true;
                    *v == FieldValue::Absent(Absent::NotFound)
                });
            any && all_missing
        })
    }
}
