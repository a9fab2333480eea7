//! What every source does with incident history, whatever it reads it from: clock-event edges (a
//! reason that became active or stopped, from successive bitmask samples; a GPU's first sample only
//! sets the baseline, as dcgm-exporter's edge counting does) and health-watch transitions (a watch
//! whose result or error code changed, from successive health checks). The tracker lives as long as
//! the source, so a reconnect to the host engine neither repeats nor loses a transition.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::fields::{clock_events, health};
use crate::snapshot::{Entity, EntityKind, HealthResult, IncidentKind};

/// The whole-GPU entities of the monitored GPUs and MIG instances, in order (a MIG GPU's made from
/// its instances' identity): what clock events and health are read and reported on.
pub fn whole_gpus(entities: &[Arc<Entity>]) -> Vec<Arc<Entity>> {
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
        out.push(if e.kind == EntityKind::Gpu {
            e.clone()
        } else {
            Arc::new(Entity::gpu(gpu.clone()))
        });
    }
    out
}

/// One health incident as a check reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthIncident {
    /// `DCGM_HEALTH_WATCH_*` bit.
    pub watch: u32,
    pub result: HealthResult,
    /// `DCGM_FR_*` number.
    pub code: u32,
    pub message: String,
}

struct ClockState {
    mask: u64,
    since: [SystemTime; clock_events::REASONS.len()],
}

/// Last clock-event mask and health per GPU (by GPU index).
#[derive(Default)]
pub struct Tracker {
    clocks: HashMap<u32, ClockState>,
    health: HashMap<u32, Vec<(HealthResult, u32)>>,
}

impl Tracker {
    /// A clock-event bitmask sample of a GPU taken at `at`: the reasons that ended or began, in bit
    /// order (none for the GPU's first sample).
    pub fn clock_sample(&mut self, gpu: u32, mask: u64, at: SystemTime) -> Vec<IncidentKind> {
        let Some(state) = self.clocks.get_mut(&gpu) else {
            self.clocks.insert(
                gpu,
                ClockState {
                    mask,
                    since: [at; clock_events::REASONS.len()],
                },
            );
            return Vec::new();
        };
        let (started, ended) = clock_events::edges(state.mask, mask);
        let mut out = Vec::new();
        for (r, (bit, name)) in clock_events::REASONS.iter().enumerate() {
            if ended & bit != 0 {
                out.push(IncidentKind::ClockEventEnded {
                    reason: name,
                    duration: at.duration_since(state.since[r]).unwrap_or(Duration::ZERO),
                });
            }
            if started & bit != 0 {
                state.since[r] = at;
                out.push(IncidentKind::ClockEventStarted { reason: name });
            }
        }
        state.mask = mask;
        out
    }

    /// The result of one health check of a GPU (`active`: its incidents, any watch): a transition
    /// for every GPU watch whose worst incident changed (to pass when it has none any more).
    pub fn health_check(&mut self, gpu: u32, active: &[HealthIncident]) -> Vec<IncidentKind> {
        let previous = self
            .health
            .entry(gpu)
            .or_insert_with(|| vec![(HealthResult::Pass, 0); health::WATCHES.len()]);
        let mut out = Vec::new();
        for (w, (bit, name)) in health::WATCHES.iter().enumerate() {
            // The worst incident of the watch (the first of equals).
            let worst = active.iter().filter(|h| h.watch == *bit).fold(
                None,
                |best: Option<&HealthIncident>, h| match best {
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
            out.push(IncidentKind::Health {
                watch: name,
                previous: slot.0,
                result,
                error_code: health::error_code_name(code).into(),
                message: message.into(),
            });
            *slot = (result, code);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_after_the_baseline() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut tr = Tracker::default();
        assert!(tr.clock_sample(0, 0x40, t).is_empty());
        assert_eq!(
            tr.clock_sample(0, 0x04, t + Duration::from_secs(2)),
            vec![
                IncidentKind::ClockEventStarted {
                    reason: "power_cap"
                },
                IncidentKind::ClockEventEnded {
                    reason: "hw_thermal",
                    duration: Duration::from_secs(2)
                },
            ]
        );
    }

    #[test]
    fn health_transitions_once() {
        let mut tr = Tracker::default();
        let fail = HealthIncident {
            watch: 0x10,
            result: HealthResult::Fail,
            code: 4,
            message: "dbe".into(),
        };
        let t = tr.health_check(1, std::slice::from_ref(&fail));
        assert_eq!(t.len(), 1);
        assert!(tr.health_check(1, &[fail]).is_empty());
        let back = tr.health_check(1, &[]);
        assert!(matches!(
            &back[..],
            [IncidentKind::Health { watch: "MEM", result: HealthResult::Pass, error_code, .. }] if &**error_code == "DCGM_FR_OK"
        ));
    }
}
