//! Sub-interval distributions read from DCGM (`--distribution FIELD@INTERVAL`): every sample DCGM
//! took of a sampled field between two collections, per GPU and MIG instance.
//!
//! Watching: a private group of the monitored GPUs and MIG instances (split at the group size limit)
//! and one field group per sample interval (the profiling fields apart, so that a missing profiling
//! module leaves only them out), watched at that interval, keeping three collect intervals
//! of history ([`keep`]); the regular watches keep their own frequency. A board-level field (power)
//! is read on a MIG instance as the regular reads do.
//!
//! Reading: one `dcgmGetValuesSince_v2` per (group, field group) and collection, from the oldest
//! cursor of its slots, straight into the [`Accumulator`] (no copy, no allocation per sample). Blank
//! and sentinel values, and samples with an error status, are never folded in. The accumulator's
//! cursor per entity and field is the guarantee: a sample at or before it is not counted again, so a
//! re-read after a reconnect or a rediscovery counts nothing twice; a new slot (cursor 0) takes no
//! sample older than one collect interval before its newest, by DCGM's own clock.
//!
//! The DCGM objects live with the connection ([`DistributionWatch`]); the accumulator and its cursors
//! with the source ([`DistributionState`]): after a host-engine reconnect the group and watches are
//! created again and reading resumes from the kept cursors. A restarted host engine has lost its
//! history; what it kept (a reconnect to an engine that stayed up) is read once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::client::{Connection, DcgmError, EntityPair, FieldGroup, Group};
use super::ffi;
use super::values::sample_number;
use crate::fields::{catalog, EntityLevel};
use crate::snapshot::distribution::{Accumulator, DistributionSpec, Distributions};
use crate::snapshot::{Entity, EntityKind};
use crate::telemetry::self_metrics::Metric;

/// History DCGM keeps of a sampled field: three collect intervals (a collection that comes late, or
/// one reconnection attempt, loses nothing), as age and as sample count.
pub fn keep(collect: Duration, every: Duration) -> (Duration, i32) {
    let age = collect * 3;
    let samples = (age.as_secs_f64() / every.as_secs_f64().max(1e-6)).ceil() as i64 + 1;
    (age, i32::try_from(samples).unwrap_or(i32::MAX))
}

/// What outlives a connection: the accumulator (cursors, samples of the interval, cumulative views)
/// and the entity keys its slots follow.
pub struct DistributionState {
    acc: Accumulator,
    keys: Vec<String>,
    collect: Duration,
    dropped: Option<Arc<Metric>>,
}

impl DistributionState {
    pub fn new(specs: Arc<[DistributionSpec]>, collect: Duration) -> DistributionState {
        DistributionState {
            acc: Accumulator::new(specs, 0, collect),
            keys: Vec::new(),
            collect,
            dropped: None,
        }
    }

    pub fn specs(&self) -> &Arc<[DistributionSpec]> {
        self.acc.specs()
    }

    /// Count samples over a slot's cap in `metric`.
    pub fn count_dropped(&mut self, metric: Arc<Metric>) {
        self.dropped = Some(metric);
    }

    /// The session's entities (in reading order) replace the previous ones: a kept entity keeps its
    /// cursors and samples, a new one starts afresh.
    fn follow(&mut self, entities: &[Arc<Entity>]) {
        let keys: Vec<String> = entities.iter().map(|e| e.key()).collect();
        if keys == self.keys {
            return;
        }
        let old: HashMap<&str, usize> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        let previous: Vec<Option<usize>> =
            keys.iter().map(|k| old.get(k.as_str()).copied()).collect();
        self.acc.remap(&previous);
        self.keys = keys;
    }

    /// Fold the samples read since the previous collection (the interval ends now).
    pub fn finish(&mut self) -> Distributions {
        if let Some(m) = &self.dropped {
            let n = self.acc.take_dropped();
            if n > 0 {
                m.add(n as f64);
            }
        }
        self.acc.finish(now_us())
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What sets a field group apart: the sample interval, and whether its fields need the profiling
/// module.
type SetKey = (Duration, bool);

/// One watched field group: its specs (indexes into the state's specs) and their field ids.
struct Set {
    fields: FieldGroup,
    specs: Vec<(u16, usize)>,
}

/// The DCGM objects of one connection.
pub struct DistributionWatch {
    // Field order = drop order: the groups before the connection they belong to.
    sets: Vec<Set>,
    groups: Vec<Group>,
    /// (group, set) pairs watched.
    watches: Vec<(usize, usize)>,
    /// DCGM entity → index in the session's entities.
    index: HashMap<(u32, u32), usize>,
    /// Per group: its members' entity indexes.
    members: Vec<Vec<usize>>,
    /// DCGM calls of the last read and the time spent in them.
    pub last_calls: usize,
    pub last_time: Duration,
    /// Sampled profiling fields that could not be watched (left out), for the source to log.
    pub setup_errors: Vec<DcgmError>,
    conn: Connection,
}

impl Drop for DistributionWatch {
    /// Unwatch while the engine is alive (destroying a field group does not).
    fn drop(&mut self) {
        for &(g, s) in &self.watches {
            if let (Some(g), Some(s)) = (self.groups.get(g), self.sets.get(s)) {
                let _ = self.conn.unwatch(g, &s.fields);
            }
        }
    }
}

/// Whether `kind` reads a spec's field (GPU-side entities only: GPUs and MIG instances).
fn reads(kind: EntityKind, level: EntityLevel) -> bool {
    matches!(kind, EntityKind::Gpu | EntityKind::GpuInstance) && kind.reads(level)
}

impl DistributionWatch {
    /// Watch the sampled fields on the session's GPUs and MIG instances (`None`: none configured or
    /// no such entity). The state follows the session's entity list.
    pub fn establish(
        conn: &Connection,
        entities: &[Arc<Entity>],
        state: &mut DistributionState,
        name_prefix: &str,
        group_max_entities: usize,
    ) -> Result<Option<DistributionWatch>, DcgmError> {
        state.follow(entities);
        let specs = state.specs().clone();
        if specs.is_empty() {
            return Ok(None);
        }
        let level = |s: &DistributionSpec| {
            catalog()
                .by_id(s.field)
                .map_or(EntityLevel::Gpu, |f| f.level)
        };
        let mut index = HashMap::new();
        let mut pairs = Vec::new();
        for (i, e) in entities.iter().enumerate() {
            let group = match e.kind {
                EntityKind::Gpu => ffi::DCGM_FE_GPU,
                EntityKind::GpuInstance => ffi::DCGM_FE_GPU_I,
                _ => continue,
            };
            if specs.iter().any(|s| reads(e.kind, level(s))) {
                index.insert((group, e.entity_id), i);
                pairs.push((EntityPair::new(group, e.entity_id), i));
            }
        }
        if pairs.is_empty() {
            return Ok(None);
        }
        let mut watch = DistributionWatch {
            sets: Vec::new(),
            groups: Vec::new(),
            watches: Vec::new(),
            index,
            members: Vec::new(),
            last_calls: 0,
            last_time: Duration::ZERO,
            setup_errors: Vec::new(),
            conn: conn.clone(),
        };
        for (i, chunk) in pairs.chunks(group_max_entities.max(1)).enumerate() {
            let members: Vec<EntityPair> = chunk.iter().map(|(p, _)| *p).collect();
            let name = format!("{name_prefix}-sampled-{i}");
            watch.groups.push(conn.create_group(&name, &members)?);
            watch.members.push(chunk.iter().map(|(_, i)| *i).collect());
        }
        // One field group per sample interval, the profiling (DCP) fields apart: the host engine
        // unwatches a whole field group when one of its fields fails.
        let mut sets: Vec<(SetKey, Vec<(u16, usize)>)> = Vec::new();
        for (s, spec) in specs.iter().enumerate() {
            let is_prof = catalog()
                .by_id(spec.field)
                .is_some_and(|f| f.is_profiling());
            let key = (spec.every, is_prof);
            match sets.iter_mut().find(|(k, _)| *k == key) {
                Some((_, list)) => list.push((spec.field, s)),
                None => sets.push((key, vec![(spec.field, s)])),
            }
        }
        for (n, ((every, is_prof), list)) in sets.into_iter().enumerate() {
            let ids: Vec<u16> = list.iter().map(|(f, _)| *f).collect();
            let name = format!("{name_prefix}-sampled-fields-{n}");
            let fields = conn.create_field_group(&name, &ids)?;
            watch.sets.push(Set {
                fields,
                specs: list,
            });
            let (age, samples) = keep(state.collect, every);
            let s = watch.sets.len() - 1;
            for g in 0..watch.groups.len() {
                match conn.watch(&watch.groups[g], &watch.sets[s].fields, every, age, samples) {
                    Ok(()) => watch.watches.push((g, s)),
                    // No profiling module here: the other sampled fields go on.
                    Err(e) if is_prof && !e.connection_lost() => {
                        watch.setup_errors.push(e);
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(Some(watch))
    }

    /// Read every sample since the slots' cursors into the state's accumulator. Stops at the first
    /// failed call (what was read stays read: the cursors moved past it only).
    pub fn read(&mut self, state: &mut DistributionState) -> Result<(), DcgmError> {
        let started = Instant::now();
        self.last_calls = 0;
        let result = self.read_all(state);
        self.last_time = started.elapsed();
        result
    }

    fn read_all(&mut self, state: &mut DistributionState) -> Result<(), DcgmError> {
        let collect_us = i64::try_from(state.collect.as_micros()).unwrap_or(i64::MAX);
        for &(g, s) in &self.watches {
            let (Some(group), Some(set), Some(members)) =
                (self.groups.get(g), self.sets.get(s), self.members.get(g))
            else {
                continue;
            };
            // From the oldest cursor of the group's slots (0: every slot is new, all DCGM kept).
            let since = members
                .iter()
                .flat_map(|&e| set.specs.iter().map(move |&(_, s)| (e, s)))
                .map(|(e, s)| state.acc.cursor(e, s))
                .filter(|&c| c > 0)
                .min()
                .map_or(0, |c| c + 1);
            self.last_calls += 1;
            let (index, acc) = (&self.index, &mut state.acc);
            self.conn
                .values_since_batches(group, &set.fields, since, &mut |eg, eid, batch| {
                    let Some(&e) = index.get(&(eg, eid)) else {
                        return;
                    };
                    fold(acc, e, &set.specs, batch, collect_us);
                })?;
        }
        Ok(())
    }
}

/// Push one batch (one entity's samples, in time order) into the accumulator. A slot at cursor 0
/// (a new entity) takes only the last collect interval of it, by DCGM's timestamps.
fn fold(
    acc: &mut Accumulator,
    entity: usize,
    specs: &[(u16, usize)],
    batch: &[ffi::dcgmFieldValue_v1],
    collect_us: i64,
) {
    for &(field, spec) in specs {
        let floor = if acc.cursor(entity, spec) == 0 {
            let newest = batch
                .iter()
                .filter(|v| v.fieldId == field)
                .map(|v| v.ts)
                .max();
            match newest {
                Some(t) => t.saturating_sub(collect_us),
                None => continue,
            }
        } else {
            i64::MIN
        };
        for v in batch.iter().filter(|v| v.fieldId == field && v.ts > floor) {
            if let Some(x) = sample_number(v) {
                acc.push(entity, spec, v.ts, x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::source::dcgm::ffi::Pod;

    fn sample(ts: i64, status: i32, ft: u8, v: f64) -> ffi::dcgmFieldValue_v1 {
        let mut s = ffi::dcgmFieldValue_v1::zeroed();
        s.fieldId = 155;
        s.fieldType = u16::from(ft);
        s.status = status;
        s.ts = ts;
        if ft == ffi::DCGM_FT_DOUBLE {
            s.value.set_f64(v);
        } else {
            s.value.set_i64(v as i64);
        }
        s
    }

    fn acc() -> Accumulator {
        let spec =
            crate::config::distributions::parse_spec("DCGM_FI_DEV_POWER_USAGE@100ms").unwrap();
        Accumulator::new(vec![spec].into(), 1, Duration::from_secs(1))
    }

    #[test]
    fn blanks_and_errors_are_never_folded() {
        let mut acc = acc();
        let d = ffi::DCGM_FT_DOUBLE;
        let batch = [
            sample(1_000_100, ffi::DCGM_ST_OK, d, 300.0),
            sample(1_000_200, ffi::DCGM_ST_OK, d, ffi::DCGM_FP64_BLANK),
            sample(1_000_300, ffi::DCGM_ST_NO_DATA, d, 999.0),
            sample(
                1_000_400,
                ffi::DCGM_ST_OK,
                ffi::DCGM_FT_INT64,
                ffi::DCGM_INT32_BLANK as f64,
            ),
            sample(1_000_500, ffi::DCGM_ST_OK, d, 500.0),
        ];
        fold(&mut acc, 0, &[(155, 0)], &batch, 1_000_000);
        let out = acc.finish(2_000_000);
        let s = &out.entries[0].interval;
        assert_eq!((s.count, s.min, s.max), (2, 300.0, 500.0));
        // Read again (a reconnect re-reading what DCGM kept): nothing counted twice.
        fold(&mut acc, 0, &[(155, 0)], &batch, 1_000_000);
        assert!(acc.finish(3_000_000).entries.is_empty());
    }

    #[test]
    fn a_new_entity_takes_one_interval_of_what_dcgm_kept() {
        let mut acc = acc();
        // Three seconds of history at 100 ms; the collect interval is 1 s.
        let batch: Vec<_> = (1..=30)
            .map(|k| sample(k * 100_000, ffi::DCGM_ST_OK, ffi::DCGM_FT_DOUBLE, k as f64))
            .collect();
        fold(&mut acc, 0, &[(155, 0)], &batch, 1_000_000);
        let out = acc.finish(4_000_000);
        let s = &out.entries[0].interval;
        assert_eq!((s.count, s.min, s.max), (10, 21.0, 30.0));
    }

    #[test]
    fn history_is_kept_for_three_collect_intervals() {
        let (age, samples) = keep(Duration::from_secs(30), Duration::from_millis(100));
        assert_eq!((age, samples), (Duration::from_secs(90), 901));
    }
}
