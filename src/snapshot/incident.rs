//! Incidents: GPU events that happened between two collections — an XID error, a clock-event reason
//! starting or ending, a health-watch transition — each with the DCGM timestamp it happened at.
//!
//! Values in a [`super::Snapshot`] are "the latest reading"; incidents are occurrences. A source reads
//! them from history (a cursor into DCGM's samples, a health check) and hands each one over exactly
//! once, in the [`super::Reading`] of the collection that saw it; the pipeline attaches the attribution
//! the entity had at that collection (the pod holding the device) and publishes them in that snapshot
//! only. Consumers that emit one record per occurrence (OTLP log records) read `Snapshot::incidents`
//! of every snapshot; consumers that count (the `DCGM_EXP_*` families) keep their own totals.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::attribution::Attribution;
use super::entity::Entity;

/// DCGM's health result of one watch system (`DCGM_HEALTH_RESULT_*`; the value dcgm-exporter writes in
/// `DCGM_EXP_GPU_HEALTH_STATUS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HealthResult {
    Pass,
    Warn,
    Fail,
}

impl HealthResult {
    /// The `DCGM_HEALTH_RESULT_*` number: 0, 10, 20.
    pub fn value(self) -> u32 {
        match self {
            HealthResult::Pass => 0,
            HealthResult::Warn => 10,
            HealthResult::Fail => 20,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            HealthResult::Pass => "pass",
            HealthResult::Warn => "warn",
            HealthResult::Fail => "fail",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum IncidentKind {
    /// One XID error occurrence (`DCGM_FI_DEV_XID_ERRORS` sample; code 0 is never an incident).
    Xid { code: u32 },
    /// A clock-event reason (dcgm-exporter's name: `hw_thermal`, `power_cap`, …) became active.
    ClockEventStarted { reason: &'static str },
    /// A clock-event reason stopped being active, after `duration`.
    ClockEventEnded {
        reason: &'static str,
        duration: Duration,
    },
    /// A health watch system (`MEM`, `PCIE`, … as dcgm-exporter's `health_watch`) changed result.
    Health {
        watch: &'static str,
        previous: HealthResult,
        result: HealthResult,
        /// `DCGM_FR_*` name of the incident (`DCGM_FR_OK` on a return to pass).
        error_code: Box<str>,
        /// DCGM's message for the incident (empty on a return to pass).
        message: Box<str>,
    },
}

/// One sample of a GPU's clock-event bitmask (`DCGM_FI_DEV_CLOCKS_EVENT_REASONS`) as the history holds
/// it: one per watch interval (the collect interval), whether or not a reason changed. Edges become
/// [`IncidentKind::ClockEventStarted`] / [`IncidentKind::ClockEventEnded`]; the samples themselves are
/// what dcgm-exporter's `DCGM_EXP_CLOCK_EVENTS_COUNT` counts (a reason held for the whole window counts
/// once per sample in it).
#[derive(Debug, Clone, PartialEq)]
pub struct ClockSample {
    /// The whole GPU.
    pub gpu: Arc<Entity>,
    /// When it was taken, by DCGM's clock (the sample's timestamp).
    pub at: SystemTime,
    pub mask: u64,
}

/// One incident on one entity.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    /// The GPU or MIG instance it hit.
    pub entity: Arc<Entity>,
    /// Who held the entity at the collection that saw it (filled by the pipeline after enrichment;
    /// empty as a source hands it over).
    pub attribution: Arc<Attribution>,
    /// When it happened, by DCGM's clock (the sample's timestamp).
    pub at: SystemTime,
    pub kind: IncidentKind,
}
