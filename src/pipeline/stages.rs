//! A successful reading through the stages of one collection: the enrichers, the processes, the
//! incidents attributed to who held the device, the enrichers' observations, derived families and
//! per-set values; the absent values counted. Builds the snapshot the collector publishes.

use std::sync::Arc;
use std::time::SystemTime;

use super::metrics::{PipelineMetrics, ProcessPollState};
use super::Pipeline;
use crate::snapshot::{
    Absent, Attribute, Attribution, EntityKind, EntityReading, FieldValue, Incident, Snapshot,
};

impl Pipeline {
    /// A successful reading through the stages: enrichment, the processes, the incidents attributed,
    /// the enrichers' observations and derived families; the absent values counted.
    pub(super) fn snapshot(
        &mut self,
        mut reading: crate::snapshot::Reading,
        metrics: &mut PipelineMetrics,
        process_state: &mut ProcessPollState,
    ) -> Snapshot {
        for e in &mut self.enrichers {
            e.enrich(&mut reading.entities);
        }
        let processes = self.poll_processes(&reading.entities, process_state);
        let incidents =
            attribute_incidents(std::mem::take(&mut reading.incidents), &reading.entities);
        let mut derived = Vec::new();
        for e in &mut self.enrichers {
            e.observe(&incidents, &reading.clock_samples, &reading.p2p);
        }
        for e in &mut self.enrichers {
            e.derive(&reading.entities, &self.counters, &mut derived);
        }
        let mut per_set = Vec::new();
        for e in &mut self.enrichers {
            e.per_set_values(&reading.entities, &self.counters, &mut per_set);
        }
        self.count_absent(&reading, metrics);
        Snapshot {
            seq: 0,
            taken_at: SystemTime::now(),
            counters: self.counters.clone(),
            host: self.host.clone(),
            driver_version: reading.driver_version,
            entities: reading.entities,
            processes,
            derived,
            per_set,
            incidents,
            distributions: reading.distributions,
        }
    }

    /// Poll the process source (if any) for the entities just read and let the enrichers attribute the
    /// processes. A failure withdraws the process series for this collection, logged once per outage.
    fn poll_processes(
        &mut self,
        entities: &[crate::snapshot::EntityReading],
        state: &mut ProcessPollState,
    ) -> Vec<crate::snapshot::ProcessReading> {
        let Some(source) = self.processes.as_mut() else {
            return Vec::new();
        };
        match source.poll(entities) {
            Ok(mut list) => {
                if state.failing {
                    tracing::info!(source = source.name(), "per-process collection works again");
                    state.failing = false;
                }
                for e in &mut self.enrichers {
                    e.enrich_processes(&mut list);
                }
                if let Some(m) = &state.series {
                    m.set(list.len() as f64);
                }
                list
            }
            Err(err) => {
                if let Some(m) = &state.errors {
                    m.inc();
                }
                if let Some(m) = &state.series {
                    m.set(0.0);
                }
                if !state.failing {
                    tracing::warn!(source = source.name(), error = %err, "per-process collection failed; process series withdrawn until it works again");
                    state.failing = true;
                }
                Vec::new()
            }
        }
    }

    pub(super) fn count_absent(
        &self,
        reading: &crate::snapshot::Reading,
        metrics: &mut PipelineMetrics,
    ) {
        const REASONS: [Absent; 6] = [
            Absent::Blank,
            Absent::NotSupported,
            Absent::NotFound,
            Absent::NotPermissioned,
            Absent::Error,
            Absent::Unsupported,
        ];
        // Entity by entity, in the order the values lie in memory; counts per row and reason.
        let rows = self.counters.rows.len();
        let counts = &mut metrics.absent_scratch;
        counts.clear();
        counts.resize(rows, [0; 6]);
        for e in &reading.entities {
            for (row, v) in e.values.iter() {
                let FieldValue::Absent(reason) = v else {
                    continue;
                };
                if let (Some(slot), Some(row)) = (
                    REASONS.iter().position(|r| r == reason),
                    counts.get_mut(row),
                ) {
                    row[slot] += 1;
                }
            }
        }
        let counts = std::mem::take(&mut metrics.absent_scratch);
        for (i, (row, per_reason)) in self.counters.rows.iter().zip(&counts).enumerate() {
            for (slot, n) in per_reason.iter().enumerate() {
                if *n > 0 {
                    metrics.count_absent(i, &row.name, REASONS[slot], *n);
                }
            }
        }
        metrics.absent_scratch = counts;
    }
}

/// Give each incident the attribution its entity has in this collection (who held the device when the
/// incident was seen); an incident on an entity no longer read keeps the empty attribution.
fn attribute_incidents(mut incidents: Vec<Incident>, entities: &[EntityReading]) -> Vec<Incident> {
    for incident in &mut incidents {
        if let Some(reading) = entities
            .iter()
            .find(|r| Arc::ptr_eq(&r.entity, &incident.entity) || r.entity == incident.entity)
        {
            incident.attribution = reading.attribution.clone();
        } else if incident.entity.kind == EntityKind::Gpu {
            // A GPU in MIG mode has no series of its own: a clock event or health change of the
            // whole GPU hits whoever holds its instances (each distinct attribute set once).
            let index = incident.entity.gpu_index();
            let mut holders: Vec<Vec<Attribute>> = Vec::new();
            for r in entities.iter().filter(|r| {
                r.entity.kind == EntityKind::GpuInstance && r.entity.gpu_index() == index
            }) {
                for set in r.attribution.sets().filter(|s| !s.is_empty()) {
                    if !holders.iter().any(|h| h.as_slice() == set) {
                        holders.push(set.to_vec());
                    }
                }
            }
            if !holders.is_empty() {
                let mut attribution = Attribution::default();
                attribution.split(&holders);
                incident.attribution = Arc::new(attribution);
            }
        }
    }
    incidents
}
