//! Simulated incidents: a scenario's `events:` list — XID errors, clock events and health failures on
//! given GPUs at given collections — and what each collection of the fleet reads of them (the XIDs it
//! brings, the clock-event bitmask and the health incidents active). The simulated source and the fake
//! libdcgm both read them through the [`super::Fleet`], so the same scenario drives both paths.
//!
//! Collections are numbered from 1, as the fleet's steps are: the first poll reads collection 1.

use serde::Deserialize;

use crate::fields::{clock_events, health};
use crate::snapshot::HealthResult;
use crate::source::incidents::HealthIncident;

/// One `events:` item as written: `at_collection`, `gpu` (and `gpu_i_id` for a MIG instance) and
/// exactly one of `xid`, `clock_events` (with `collections`) or `health` (optionally `collections`);
/// `every: N` repeats it every N collections from `at_collection` on (an XID storm, a clock event
/// that comes back), each repetition lasting its `collections`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioEvent {
    pub at_collection: u64,
    pub gpu: u32,
    /// MIG GPU-instance id (`GPU_I_ID`) of the instance an XID hits.
    #[serde(default)]
    pub gpu_i_id: Option<u32>,
    #[serde(default)]
    pub xid: Option<u32>,
    /// Clock-event reasons by dcgm-exporter's names (`hw_thermal`, `power_cap`, …).
    #[serde(default)]
    pub clock_events: Option<Vec<String>>,
    #[serde(default)]
    pub health: Option<HealthSpec>,
    /// How many collections it lasts (clock events: required; health: default to the end).
    #[serde(default)]
    pub collections: Option<u64>,
    /// Repeat every this many collections (at least `collections`).
    #[serde(default)]
    pub every: Option<u64>,
}

/// `health: {watch: MEM, result: warn|fail, error_code: DCGM_FR_…, message: "…"}`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HealthSpec {
    pub watch: String,
    pub result: Outcome,
    /// A `DCGM_FR_*` name, or a number (one DCGM does not name renders `DCGM_FR_UNKNOWN(<n>)`).
    pub error_code: ErrorCode,
    #[serde(default)]
    pub message: String,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Warn,
    Fail,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ErrorCode {
    Number(u32),
    Name(String),
}

/// One event, checked.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Xid(u32),
    Clock(u64),
    Health(HealthIncident),
}

#[derive(Debug, Clone, PartialEq)]
struct Event {
    at: u64,
    /// Collections each occurrence lasts (`None`: to the end).
    lasts: Option<u64>,
    /// Collections between occurrences (`None`: once).
    every: Option<u64>,
    gpu: u32,
    gi: Option<u32>,
    kind: Kind,
}

impl Event {
    /// Whether an occurrence is active at a collection.
    fn is_active(&self, collection: u64) -> bool {
        let Some(since) = collection.checked_sub(self.at) else {
            return false;
        };
        let phase = self.every.map_or(since, |every| since % every);
        self.lasts.is_none_or(|lasts| phase < lasts)
    }
}

impl Event {
    /// One item of `events:`: where it happens (a GPU of the scenario, a MIG instance of it for an
    /// XID), what happens, and how long and how often.
    fn check(
        e: &ScenarioEvent,
        gpus: u32,
        gi_ids: &impl Fn(u32) -> Vec<u32>,
    ) -> Result<Event, String> {
        if e.at_collection == 0 {
            return Err("at_collection counts from 1".into());
        }
        if e.gpu >= gpus {
            return Err(format!(
                "GPU {}; the scenario has GPUs 0 to {}",
                e.gpu,
                gpus.saturating_sub(1)
            ));
        }
        let kinds = [
            e.xid.is_some(),
            e.clock_events.is_some(),
            e.health.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err("needs exactly one of xid, clock_events, health".into());
        }
        if let Some(g) = e.gpu_i_id {
            if e.xid.is_none() {
                return Err("gpu_i_id is for an xid (clock events and health are per GPU)".into());
            }
            if !gi_ids(e.gpu).contains(&g) {
                return Err(format!("GPU {} has no MIG instance {g}", e.gpu));
            }
        }
        if e.collections == Some(0) {
            return Err("collections must be at least 1".into());
        }
        let (kind, lasts) = Kind::check(e)?;
        if let Some(every) = e.every {
            match lasts {
                _ if every == 0 => return Err("every must be at least 1".into()),
                None => {
                    return Err(
                        "a repeated health event needs collections (how long each lasts)".into(),
                    )
                }
                Some(k) if k > every => {
                    return Err(format!(
                        "each occurrence lasts {k} collections, longer than every: {every}"
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(Event {
            at: e.at_collection,
            lasts,
            every: e.every,
            gpu: e.gpu,
            gi: e.gpu_i_id,
            kind,
        })
    }
}

impl Kind {
    /// What an item makes happen, and for how many collections (`None`: to the end): an XID once, a
    /// clock-event mask for its `collections`, a health incident.
    fn check(e: &ScenarioEvent) -> Result<(Kind, Option<u64>), String> {
        if let Some(code) = e.xid {
            if code == 0 {
                return Err("XID 0 is no error".into());
            }
            if e.collections.is_some() {
                return Err("an xid happens once; collections does not apply".into());
            }
            Ok((Kind::Xid(code), Some(1)))
        } else if let Some(reasons) = &e.clock_events {
            let mut mask = 0;
            for r in reasons {
                mask |= clock_events::bit(r).ok_or_else(|| {
                    format!(
                        "unknown clock event '{r}' (known: {})",
                        clock_events::REASONS.map(|(_, n)| n).join(", ")
                    )
                })?;
            }
            if mask == 0 {
                return Err("clock_events is empty".into());
            }
            let Some(k) = e.collections else {
                return Err("clock_events needs collections (how long it lasts)".into());
            };
            Ok((Kind::Clock(mask), Some(k)))
        } else if let Some(h) = &e.health {
            Ok((Kind::Health(h.incident()?), e.collections))
        } else {
            Err("needs exactly one of xid, clock_events, health".into())
        }
    }
}

impl HealthSpec {
    /// The health incident: a known watch, a DCGM_FR_* code by number or name.
    fn incident(&self) -> Result<HealthIncident, String> {
        let watch = health::watch_bit(&self.watch).ok_or_else(|| {
            format!(
                "unknown health watch '{}' (known: {})",
                self.watch,
                health::WATCHES.map(|(_, n)| n).join(", ")
            )
        })?;
        let code = match &self.error_code {
            ErrorCode::Number(n) => *n,
            ErrorCode::Name(name) => health::error_code_number(name)
                .ok_or_else(|| format!("unknown error code '{name}'"))?,
        };
        let result = match self.result {
            Outcome::Warn => HealthResult::Warn,
            Outcome::Fail => HealthResult::Fail,
        };
        Ok(HealthIncident {
            watch,
            result,
            code,
            message: self.message.clone(),
        })
    }
}

/// The checked events of a scenario.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimEvents {
    events: Vec<Event>,
}

impl SimEvents {
    /// Check the items: `gpus` is the number of GPUs, `gi_ids(gpu)` the GPU-instance ids of a GPU.
    /// Errors name the item (`events[2]: …`).
    pub fn check(
        items: &[ScenarioEvent],
        gpus: u32,
        gi_ids: impl Fn(u32) -> Vec<u32>,
    ) -> Result<SimEvents, String> {
        let mut events = Vec::new();
        for (i, e) in items.iter().enumerate() {
            events.push(Event::check(e, gpus, &gi_ids).map_err(|m| format!("events[{i}]: {m}"))?);
        }
        Ok(SimEvents { events })
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    fn active(&self, gpu: u32, collection: u64) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(move |e| e.gpu == gpu && e.is_active(collection))
    }

    /// The XIDs collection `collection` brings: (GPU, GPU-instance id, XID), in file order.
    pub fn xids(&self, collection: u64) -> Vec<(u32, Option<u32>, u32)> {
        self.events
            .iter()
            .filter(|e| e.is_active(collection))
            .filter_map(|e| match e.kind {
                Kind::Xid(code) => Some((e.gpu, e.gi, code)),
                _ => None,
            })
            .collect()
    }

    /// The clock-event bitmask of a GPU at a collection.
    pub fn clock_mask(&self, gpu: u32, collection: u64) -> u64 {
        self.active(gpu, collection)
            .filter_map(|e| match e.kind {
                Kind::Clock(m) => Some(m),
                _ => None,
            })
            .fold(0, |a, m| a | m)
    }

    /// The health incidents of a GPU at a collection.
    pub fn health(&self, gpu: u32, collection: u64) -> Vec<HealthIncident> {
        self.active(gpu, collection)
            .filter_map(|e| match &e.kind {
                Kind::Health(h) => Some(h.clone()),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<SimEvents, String> {
        let items: Vec<ScenarioEvent> = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        SimEvents::check(&items, 2, |g| if g == 1 { vec![1, 5] } else { vec![] })
    }

    #[test]
    fn reads_each_kind() {
        let ev = parse(
            "- { at_collection: 3, gpu: 0, xid: 31 }\n\
             - { at_collection: 2, gpu: 1, clock_events: [hw_thermal, power_cap], collections: 3 }\n\
             - { at_collection: 4, gpu: 1, health: { watch: MEM, result: fail, error_code: DCGM_FR_FAULTY_MEMORY, message: bad } }\n\
             - { at_collection: 4, gpu: 1, gpu_i_id: 5, xid: 48 }\n",
        )
        .unwrap();
        assert_eq!(ev.xids(3), vec![(0, None, 31)]);
        assert_eq!(ev.xids(4), vec![(1, Some(5), 48)]);
        assert_eq!(ev.clock_mask(1, 1), 0);
        assert_eq!(ev.clock_mask(1, 2), 0x44);
        assert_eq!(ev.clock_mask(1, 4), 0x44);
        assert_eq!(ev.clock_mask(1, 5), 0);
        assert!(ev.health(1, 3).is_empty());
        assert_eq!(ev.health(1, 400)[0].code, 52);
    }

    #[test]
    fn every_repeats_an_event() {
        let ev = parse(
            "- { at_collection: 3, gpu: 0, xid: 13, every: 2 }\n\
             - { at_collection: 2, gpu: 1, clock_events: [hw_thermal], collections: 2, every: 5 }\n\
             - { at_collection: 4, gpu: 1, health: { watch: PCIE, result: warn, error_code: 1 }, collections: 1, every: 3 }\n",
        )
        .unwrap();
        let xid_at: Vec<u64> = (1..=9).filter(|&c| !ev.xids(c).is_empty()).collect();
        assert_eq!(xid_at, vec![3, 5, 7, 9]);
        let hot: Vec<u64> = (1..=13).filter(|&c| ev.clock_mask(1, c) != 0).collect();
        assert_eq!(hot, vec![2, 3, 7, 8, 12, 13]);
        let warned: Vec<u64> = (1..=10).filter(|&c| !ev.health(1, c).is_empty()).collect();
        assert_eq!(warned, vec![4, 7, 10]);
        let e = parse("- { at_collection: 1, gpu: 0, clock_events: [hw_thermal], collections: 3, every: 2 }\n")
            .unwrap_err();
        assert_eq!(
            e,
            "events[0]: each occurrence lasts 3 collections, longer than every: 2"
        );
        let e = parse("- { at_collection: 1, gpu: 0, xid: 13, every: 0 }\n").unwrap_err();
        assert_eq!(e, "events[0]: every must be at least 1");
        let e = parse("- { at_collection: 1, gpu: 0, health: { watch: MEM, result: fail, error_code: 1 }, every: 4 }\n")
            .unwrap_err();
        assert!(e.contains("needs collections"), "{e}");
    }

    #[test]
    fn errors_name_the_item() {
        let e = parse("- { at_collection: 1, gpu: 0, xid: 31, clock_events: [hw_thermal] }\n")
            .unwrap_err();
        assert_eq!(
            e,
            "events[0]: needs exactly one of xid, clock_events, health"
        );
        let e = parse("- { at_collection: 1, gpu: 0, clock_events: [hot], collections: 1 }\n")
            .unwrap_err();
        assert!(e.starts_with("events[0]: unknown clock event 'hot'"), "{e}");
        let e = parse("- { at_collection: 1, gpu: 1, gpu_i_id: 2, xid: 31 }\n").unwrap_err();
        assert_eq!(e, "events[0]: GPU 1 has no MIG instance 2");
        let e = parse("- { at_collection: 1, gpu: 0, clock_events: [hw_thermal] }\n").unwrap_err();
        assert!(e.contains("needs collections"), "{e}");
    }
}
