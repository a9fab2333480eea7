//! The counting state of the `DCGM_EXP_*` families: totals since start, the recent XIDs and clock-event
//! bitmask samples the windows count, the health of every watch system per GPU and the last P2P
//! matrix. Fed once per collection with that collection's incidents and samples; nothing here ever
//! decreases a total.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::fields::{clock_events, health};
use crate::snapshot::{
    ClockSample, Entity, EntityKind, HealthResult, Incident, IncidentKind, P2pLink,
};

/// Most recent occurrences (XIDs) and samples with a reason set (clock events) kept for the windows;
/// beyond it the oldest are forgotten (an XID storm, or a long window at a short collect interval,
/// cannot grow memory without bound; the totals still count every one).
pub const MAX_RECENT: usize = 100_000;

/// Distinct XID codes counted per entity (each is a `DCGM_EXP_XID_ERRORS_TOTAL` series). NVIDIA's
/// catalogue has under 200; a library handing over arbitrary codes cannot grow the series without
/// bound: a code beyond this is not counted (see [`State::dropped_xid_codes`]).
pub const MAX_XID_CODES_PER_ENTITY: usize = 256;

/// An entity by kind and DCGM id (what stays the same across a reconnect's new `Arc`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityKey(EntityKind, u32);

impl EntityKey {
    pub fn of(e: &Entity) -> EntityKey {
        EntityKey(e.kind, e.entity_id)
    }
}

/// Per watch system (in [`health::WATCHES`] order): the result and its `DCGM_FR_*` name.
pub type Watches = Vec<(HealthResult, Box<str>)>;

pub struct State {
    keep: Duration,
    entities: HashMap<EntityKey, Arc<Entity>>,
    xid_totals: BTreeMap<(EntityKey, u32), u64>,
    clock_totals: BTreeMap<(EntityKey, usize), u64>,
    /// (when, entity, XID) in arrival order.
    recent_xids: VecDeque<(SystemTime, EntityKey, u32)>,
    /// (when, GPU, bitmask) of the clock-event samples with a known reason set, in arrival order.
    recent_clocks: VecDeque<(SystemTime, EntityKey, u64)>,
    /// Per GPU index.
    health: HashMap<u32, Watches>,
    pub p2p: Vec<P2pLink>,
    /// XID occurrences not counted because their entity already had [`MAX_XID_CODES_PER_ENTITY`]
    /// codes (`dcgm_otel_incidents_dropped_total{reason="xid_codes"}`).
    pub dropped_xid_codes: u64,
}

impl State {
    /// A state keeping occurrences for `keep` (the longer window).
    pub fn new(keep: Duration) -> State {
        State {
            keep,
            entities: HashMap::new(),
            xid_totals: BTreeMap::new(),
            clock_totals: BTreeMap::new(),
            recent_xids: VecDeque::new(),
            recent_clocks: VecDeque::new(),
            health: HashMap::new(),
            dropped_xid_codes: 0,
            p2p: Vec::new(),
        }
    }

    /// Count one collection's incidents and keep its clock-event samples; forget occurrences and
    /// samples older than the longer window.
    pub fn observe(&mut self, incidents: &[Incident], samples: &[ClockSample], now: SystemTime) {
        let known = clock_events::REASONS.iter().fold(0, |m, (b, _)| m | b);
        for s in samples.iter().filter(|s| s.mask & known != 0) {
            let key = EntityKey::of(&s.gpu);
            self.entities.insert(key, s.gpu.clone());
            self.recent_clocks.push_back((s.at, key, s.mask & known));
        }
        for i in incidents {
            let key = EntityKey::of(&i.entity);
            self.entities.insert(key, i.entity.clone());
            match &i.kind {
                IncidentKind::Xid { code } => {
                    if !self.xid_totals.contains_key(&(key, *code))
                        && self.xid_totals.range((key, 0)..=(key, u32::MAX)).count()
                            >= MAX_XID_CODES_PER_ENTITY
                    {
                        self.dropped_xid_codes += 1;
                        continue;
                    }
                    *self.xid_totals.entry((key, *code)).or_insert(0) += 1;
                    self.recent_xids.push_back((i.at, key, *code));
                }
                IncidentKind::ClockEventStarted { reason } => {
                    if let Some(r) = clock_events::REASONS.iter().position(|(_, n)| n == reason) {
                        *self.clock_totals.entry((key, r)).or_insert(0) += 1;
                    }
                }
                IncidentKind::ClockEventEnded { .. } => {}
                IncidentKind::Health {
                    watch,
                    result,
                    error_code,
                    ..
                } => {
                    let Some(w) = health::WATCHES.iter().position(|(_, n)| n == watch) else {
                        continue;
                    };
                    let Some(gpu) = i.entity.gpu_index() else {
                        continue;
                    };
                    let watches = self.health.entry(gpu).or_insert_with(|| {
                        vec![(HealthResult::Pass, health::OK_CODE.into()); health::WATCHES.len()]
                    });
                    if let Some(slot) = watches.get_mut(w) {
                        *slot = (*result, error_code.clone());
                    }
                }
            }
        }
        let horizon = now.checked_sub(self.keep).unwrap_or(SystemTime::UNIX_EPOCH);
        while self
            .recent_xids
            .front()
            .is_some_and(|(t, _, _)| *t <= horizon)
            || self.recent_xids.len() > MAX_RECENT
        {
            self.recent_xids.pop_front();
        }
        while self
            .recent_clocks
            .front()
            .is_some_and(|(t, _, _)| *t <= horizon)
            || self.recent_clocks.len() > MAX_RECENT
        {
            self.recent_clocks.pop_front();
        }
    }

    pub fn entity(&self, key: &EntityKey) -> Option<&Arc<Entity>> {
        self.entities.get(key)
    }

    /// XIDs within `(now - window, now]` per (entity, XID), ordered by entity then XID.
    pub fn xids_within(&self, window: Duration, now: SystemTime) -> Vec<(EntityKey, u32, u64)> {
        let from = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut counts: BTreeMap<(EntityKey, u32), u64> = BTreeMap::new();
        for (t, k, code) in &self.recent_xids {
            if *t > from {
                *counts.entry((*k, *code)).or_insert(0) += 1;
            }
        }
        counts.into_iter().map(|((k, c), n)| (k, c, n)).collect()
    }

    /// Per (GPU, reason), in bit order: the bitmask samples taken within `(now - window, now]` with
    /// that reason set (dcgm-exporter's count: a reason held through the window counts once per
    /// sample, so the value depends on the field's watch frequency, the collect interval).
    pub fn clock_events_within(
        &self,
        window: Duration,
        now: SystemTime,
    ) -> Vec<(EntityKey, &'static str, u64)> {
        let from = now.checked_sub(window).unwrap_or(SystemTime::UNIX_EPOCH);
        let mut counts: BTreeMap<(EntityKey, usize), u64> = BTreeMap::new();
        for (t, k, mask) in &self.recent_clocks {
            if *t > from {
                for (r, (bit, _)) in clock_events::REASONS.iter().enumerate() {
                    if mask & bit != 0 {
                        *counts.entry((*k, r)).or_insert(0) += 1;
                    }
                }
            }
        }
        counts
            .into_iter()
            .filter_map(|((k, r), n)| Some((k, clock_events::REASONS.get(r)?.1, n)))
            .collect()
    }

    /// Every XID total: (entity key, entity, XID, count); entities with a reading first, in reading
    /// order (`position`), then the others by key.
    pub fn xid_totals(
        &self,
        position: impl Fn(&EntityKey) -> Option<usize>,
    ) -> Vec<(EntityKey, &Arc<Entity>, u32, u64)> {
        type Row<'a> = (Option<usize>, EntityKey, &'a Arc<Entity>, u32, u64);
        let mut out: Vec<Row<'_>> = self
            .xid_totals
            .iter()
            .filter_map(|((k, code), n)| Some((position(k), *k, self.entities.get(k)?, *code, *n)))
            .collect();
        out.sort_by_key(|(p, k, _, code, _)| (p.is_none(), *p, *k, *code));
        out.into_iter()
            .map(|(_, k, e, code, n)| (k, e, code, n))
            .collect()
    }

    /// Clock-event totals of one GPU, in bit order (only reasons seen).
    pub fn clock_totals(&self, gpu: &EntityKey) -> Vec<(&'static str, u64)> {
        self.clock_totals
            .range((*gpu, 0)..=(*gpu, usize::MAX))
            .filter_map(|((_, r), n)| Some((clock_events::REASONS.get(*r)?.1, *n)))
            .collect()
    }

    pub fn health_of(&self, gpu: u32) -> Option<&Watches> {
        self.health.get(&gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Attribution, GpuIdentity};

    fn gpu(index: u32) -> Arc<Entity> {
        Arc::new(Entity::gpu(Arc::new(GpuIdentity::bare(index))))
    }

    fn xid(e: &Arc<Entity>, at: SystemTime, code: u32) -> Incident {
        Incident {
            entity: e.clone(),
            attribution: Arc::new(Attribution::default()),
            at,
            kind: IncidentKind::Xid { code },
        }
    }

    #[test]
    fn windows_forget_and_totals_do_not() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let g = gpu(0);
        let mut s = State::new(Duration::from_secs(60));
        s.observe(
            &[xid(&g, t0, 31), xid(&g, t0, 31), xid(&g, t0, 48)],
            &[],
            t0,
        );
        let key = EntityKey::of(&g);
        assert_eq!(
            s.xids_within(Duration::from_secs(60), t0),
            vec![(key, 31, 2), (key, 48, 1)]
        );
        let later = t0 + Duration::from_secs(61);
        s.observe(&[xid(&g, later, 31)], &[], later);
        assert_eq!(
            s.xids_within(Duration::from_secs(60), later),
            vec![(key, 31, 1)]
        );
        let totals: Vec<(u32, u64)> = s
            .xid_totals(|_| Some(0))
            .into_iter()
            .map(|(_, _, c, n)| (c, n))
            .collect();
        assert_eq!(totals, vec![(31, 3), (48, 1)]);
    }

    #[test]
    fn xid_codes_per_entity_are_bounded_and_the_rest_counted() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let g = gpu(0);
        let mut s = State::new(Duration::from_secs(60));
        let storm: Vec<Incident> = (1..=MAX_XID_CODES_PER_ENTITY as u32 + 10)
            .map(|c| xid(&g, t0, c))
            .collect();
        s.observe(&storm, &[], t0);
        // A code already counted is still counted at the bound.
        s.observe(&[xid(&g, t0, 1)], &[], t0);
        let totals = s.xid_totals(|_| Some(0));
        assert_eq!(totals.len(), MAX_XID_CODES_PER_ENTITY);
        assert_eq!(s.dropped_xid_codes, 10);
        assert_eq!(totals.first().map(|t| (t.2, t.3)), Some((1, 2)));
    }

    fn sample(g: &Arc<Entity>, at: SystemTime, mask: u64) -> ClockSample {
        ClockSample {
            gpu: g.clone(),
            at,
            mask,
        }
    }

    fn started(g: &Arc<Entity>, at: SystemTime, reason: &'static str) -> Incident {
        Incident {
            entity: g.clone(),
            attribution: Arc::new(Attribution::default()),
            at,
            kind: IncidentKind::ClockEventStarted { reason },
        }
    }

    /// A reason held longer than the window: the window counts the samples with it set (one per
    /// second here), the total counts the one time it began.
    #[test]
    fn a_held_clock_event_counts_every_sample_in_the_window() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let g = gpu(0);
        let key = EntityKey::of(&g);
        let window = Duration::from_secs(5);
        let mut s = State::new(window);
        let at = |i: u64| t0 + Duration::from_secs(i);
        s.observe(&[], &[sample(&g, at(0), 0)], at(0));
        s.observe(
            &[started(&g, at(1), "hw_thermal")],
            &[sample(&g, at(1), 0x40)],
            at(1),
        );
        for i in 2..=17 {
            // power_cap joins for seconds 15 and 16.
            let mask = if (15..=16).contains(&i) { 0x44 } else { 0x40 };
            s.observe(&[], &[sample(&g, at(i), mask)], at(i));
        }
        assert_eq!(
            s.clock_events_within(window, at(17)),
            vec![(key, "power_cap", 2), (key, "hw_thermal", 5)]
        );
        assert_eq!(s.clock_totals(&key), vec![("hw_thermal", 1)]);
        // Once it stops, the window empties as its samples age out.
        for i in 18..=23 {
            s.observe(&[], &[sample(&g, at(i), 0)], at(i));
        }
        assert_eq!(s.clock_events_within(window, at(23)), vec![]);
    }
}
