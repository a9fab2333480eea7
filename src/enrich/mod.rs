//! Enrichers: attribution that is not in DCGM — which Kubernetes pod or HPC job uses each GPU or MIG
//! instance. They run on the collector thread once per collect interval, after the source poll and before
//! publication, so a scrape never triggers a kubelet call or a directory read.

pub mod containers;
pub mod exp;
pub mod hpc;
pub mod kubernetes;
pub mod mig_rollup;
pub mod plan;

use crate::counters::CounterSet;
use crate::snapshot::{
    ClockSample, DerivedFamily, EntityReading, Incident, P2pLink, PerSetValues, ProcessReading,
};

/// Adds attribution to the entities of one reading. Must not panic; failures are logged and counted by
/// the enricher itself, and leave the entities as they were (or with the last good attribution).
pub trait Enricher: Send {
    fn name(&self) -> &'static str;
    fn enrich(&mut self, entities: &mut [EntityReading]);

    /// Attribute the processes of the same collection (called after [`Enricher::enrich`]); most
    /// enrichers have nothing to say about processes.
    fn enrich_processes(&mut self, _processes: &mut [ProcessReading]) {}
    /// The incidents, clock-event bitmask samples and P2P status of the same collection (after
    /// [`Enricher::enrich`], before [`Enricher::derive`]), for stages that count them (the `DCGM_EXP_*`
    /// families). Most ignore them.
    fn observe(
        &mut self,
        _incidents: &[Incident],
        _clock_samples: &[ClockSample],
        _p2p: &[P2pLink],
    ) {
    }
    /// Series this enricher derives from the collection once every enricher has run (the per-pod cost
    /// counters), appended to `out`. Most enrichers derive none.
    fn derive(
        &mut self,
        _entities: &[EntityReading],
        _counters: &CounterSet,
        _out: &mut Vec<DerivedFamily>,
    ) {
    }
    /// Fields whose series differ per attribute set of an entity (each pod sharing a GPU with its own
    /// value, beside the device's), once every enricher has run, appended to `out`
    /// (`snapshot::per_set`). Most enrichers have none.
    fn per_set_values(
        &mut self,
        _entities: &[EntityReading],
        _counters: &CounterSet,
        _out: &mut Vec<PerSetValues>,
    ) {
    }
}
