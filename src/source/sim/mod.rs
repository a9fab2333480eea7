//! The simulated source behind `--simulate[=SCENARIO]`: a deterministic fleet of realistic GPUs (and,
//! when the scenario has them, NvSwitches and Grace CPUs) for laptops, demos, CI and benchmarks. It
//! produces the same [`Reading`]s a DCGM source would, so every exporter downstream runs unchanged.
//! Simulated time advances by exactly one collect interval per poll. A field in a watch group
//! (`--config-file` `collection.watchGroups`) is sampled at its group's interval, as DCGM samples a
//! watched field: between samples it reads the last sampled value. Sampled fields (`--distribution`)
//! also yield every sample between collections ([`sampling`]), and a scenario's waveforms set a
//! field's values outright.

pub mod args;
pub mod cpus;
pub mod events;
pub mod fleet;
pub mod incidents;
pub mod models;
pub mod pods;
pub mod processes;
pub mod sampling;
pub mod scenario;
pub mod switches;
pub mod waveforms;

use std::sync::Arc;
use std::time::Duration;

pub use fleet::{Fleet, SimGpu};
pub use scenario::{Scenario, ScenarioError};

use super::{Source, SourceError};
use crate::config::devices::{DeviceError, Selectors};
use crate::counters::exporter::IncidentReads;
use crate::counters::CounterSet;
use crate::snapshot::distribution::DistributionSpec;
use crate::snapshot::inventory::Wanted;
use crate::snapshot::values::ValuePool;
use crate::snapshot::{Attribution, Entity, EntityReading, FieldValue, Reading};
use crate::telemetry::self_metrics::SelfMetrics;

/// The node a simulated fleet belongs to, whose name its GPU UUIDs derive from: `NODE_NAME`
/// (`node_name_env`, when set and not blank), else the kernel's host name. The fake libraries of the
/// tests take it the same way, so they and `--simulate` agree on a host.
pub fn node_name(node_name_env: Option<&str>) -> String {
    node_name_env
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned())
}

/// A [`Source`] over a simulated [`Fleet`].
pub struct SimSource {
    fleet: Fleet,
    counters: Arc<CounterSet>,
    selectors: Selectors,
    entities: Vec<Arc<Entity>>,
    /// Per row: its watch-group interval in seconds, when it has one.
    row_interval: Vec<Option<f64>>,
    /// Per entity and row: the last sample of a watch-group row (simulated time, value); empty
    /// without watch groups.
    sampled: Vec<Vec<Option<(f64, FieldValue)>>>,
    /// The value arrays, reused between collections.
    values: ValuePool,
    step_s: f64,
    polls: u64,
    no_attribution: Arc<Attribution>,
    incidents: incidents::IncidentReader,
    seed: u64,
    waveforms: waveforms::Waveforms,
    /// The sampled fields, when distributions are configured.
    sampler: Option<sampling::Sampler>,
}

impl SimSource {
    /// Build the fleet node `node` simulates ([`node_name`]) and decide which entities to monitor
    /// (`-d`, `-s`, `-p`); absent ids are an error.
    pub fn new(
        scenario: &Scenario,
        seed: u64,
        node: &str,
        counters: Arc<CounterSet>,
        selectors: &Selectors,
        interval: Duration,
    ) -> Result<SimSource, DeviceError> {
        let fleet = Fleet::new(scenario, seed, node);
        let waveforms = waveforms::Waveforms::new(&scenario.waveforms, fleet.gpus().len() as u32);
        let fleet_xids = fleet.xid_log().len();
        let entities = fleet.inventory().entities(
            &fleet
                .inventory()
                .select(selectors, Wanted::from_counters(&counters))?,
        );
        let mut source = SimSource {
            fleet,
            counters: counters.clone(),
            selectors: selectors.clone(),
            entities,
            row_interval: Vec::new(),
            sampled: Vec::new(),
            values: ValuePool::new(&counters),
            step_s: interval.as_secs_f64(),
            polls: 0,
            no_attribution: Arc::new(Attribution::default()),
            incidents: incidents::IncidentReader::new(std::time::SystemTime::now(), fleet_xids),
            seed,
            waveforms,
            sampler: None,
        };
        source.plan_rows();
        Ok(source)
    }

    /// Sample `specs` between collections and hand their distributions over with each reading;
    /// samples over a slot's cap are counted in `self_metrics` when given.
    pub fn sample_distributions(
        &mut self,
        specs: Arc<[DistributionSpec]>,
        self_metrics: Option<&SelfMetrics>,
    ) {
        if specs.is_empty() {
            self.sampler = None;
            return;
        }
        let base_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let mut sampler = sampling::Sampler::new(
            specs,
            self.entities.len(),
            Duration::from_secs_f64(self.step_s),
            self.seed,
            base_us,
        );
        if let Some(m) = self_metrics {
            sampler.count_dropped(m);
        }
        self.sampler = Some(sampler);
    }

    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    pub fn entities(&self) -> &[Arc<Entity>] {
        &self.entities
    }

    fn plan_rows(&mut self) {
        self.row_interval = self
            .counters
            .rows
            .iter()
            .map(|c| {
                self.counters
                    .watch_interval(c.field.id)
                    .map(|d| d.as_secs_f64())
            })
            .collect();
        self.sampled = if self.row_interval.iter().any(Option::is_some) {
            vec![vec![None; self.counters.rows.len()]; self.entities.len()]
        } else {
            Vec::new()
        };
        self.values.set_counters(&self.counters);
    }
}

impl Source for SimSource {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn poll(&mut self) -> Result<Reading, SourceError> {
        if self.polls > 0 {
            self.fleet.advance(self.step_s);
        }
        self.polls += 1;
        let now = self.fleet.time();
        let now_us = (now * 1e6).round() as i64;
        let (fleet, waveforms) = (&self.fleet, &self.waveforms);
        let read = |e: &Entity, field| {
            waveforms
                .value(e, field, now_us)
                .unwrap_or_else(|| fleet.value(e.kind, e.entity_id, field))
        };
        let mut w = self.values.writer();
        for (i, e) in self.entities.iter().enumerate() {
            w.push(e.kind, |r| {
                let field = self.counters.rows[r].field.id;
                let Some(every) = self.row_interval[r] else {
                    return read(e, field);
                };
                let Some(slot) = self.sampled.get_mut(i).and_then(|s| s.get_mut(r)) else {
                    return read(e, field);
                };
                match slot {
                    // Half a step of slack: simulated time advances in float steps.
                    Some((t, v)) if now - *t < every - self.step_s / 2.0 => v.clone(),
                    _ => {
                        let v = read(e, field);
                        *slot = Some((now, v.clone()));
                        v
                    }
                }
            });
        }
        let entities = self
            .entities
            .iter()
            .zip(self.values.finish(w))
            .map(|(e, values)| EntityReading {
                entity: e.clone(),
                values,
                attribution: self.no_attribution.clone(),
            })
            .collect();
        // XIDs, clock events and health are always read (the simulator has them for free); the P2P
        // matrix only when DCGM_EXP_P2P_STATUS is listed.
        let reads = IncidentReads {
            p2p: IncidentReads::of(&self.counters.exporter_rows).p2p,
            ..IncidentReads::all()
        };
        let (incidents, clock_samples, p2p) =
            self.incidents.poll(&self.fleet, &self.entities, reads);
        let step_us = (self.step_s * 1e6).round() as i64;
        let distributions = match &mut self.sampler {
            Some(s) => s.collect(
                &self.fleet,
                &self.entities,
                &self.waveforms,
                step_us,
                now_us,
            ),
            None => Default::default(),
        };
        Ok(Reading {
            entities,
            driver_version: Some(self.fleet.driver_version().to_string()),
            incidents,
            clock_samples,
            p2p,
            distributions,
        })
    }

    fn set_counters(&mut self, counters: Arc<CounterSet>) -> Result<Arc<CounterSet>, SourceError> {
        let inventory = self.fleet.inventory();
        let (selection, missing) =
            inventory.select_present(&self.selectors, Wanted::from_counters(&counters));
        if !missing.is_empty() {
            tracing::warn!(missing = %missing.join(", "), "selected devices are not present");
        }
        let entities = inventory.entities(&selection);
        if let Some(s) = &mut self.sampler {
            let previous: Vec<Option<usize>> = entities
                .iter()
                .map(|e| self.entities.iter().position(|old| old == e))
                .collect();
            s.remap(&previous);
        }
        self.entities = entities;
        self.counters = counters.clone();
        self.plan_rows();
        Ok(counters)
    }
}
