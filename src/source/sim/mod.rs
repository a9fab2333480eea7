//! The simulated source behind `--simulate[=SCENARIO]`: a deterministic fleet of realistic GPUs for
//! laptops, demos, CI and benchmarks. It produces the same [`Reading`]s a DCGM source would, so every
//! exporter downstream runs unchanged. Simulated time advances by exactly one collect interval per poll.

pub mod args;
pub mod fleet;
pub mod models;
pub mod pods;
pub mod scenario;

use std::sync::Arc;
use std::time::Duration;

pub use fleet::{Fleet, SimGpu};
pub use scenario::{Scenario, ScenarioError};

use super::{Source, SourceError};
use crate::config::devices::{DeviceError, DeviceSelection};
use crate::counters::CounterSet;
use crate::snapshot::{
    Absent, Attribution, Entity, EntityKind, EntityReading, FieldValue, Reading,
};

/// A [`Source`] over a simulated [`Fleet`].
pub struct SimSource {
    fleet: Fleet,
    counters: Arc<CounterSet>,
    entities: Vec<Arc<Entity>>,
    step_s: f64,
    polls: u64,
    no_attribution: Arc<Attribution>,
}

impl SimSource {
    /// Build the fleet and decide which entities to monitor (`-d`); absent ids are an error.
    pub fn new(
        scenario: &Scenario,
        seed: u64,
        counters: Arc<CounterSet>,
        devices: &DeviceSelection,
        interval: Duration,
    ) -> Result<SimSource, DeviceError> {
        let fleet = Fleet::new(scenario, seed);
        let inventory = fleet.inventory();
        let selected = devices.select(&inventory.slots())?;
        let wants_links = counters
            .rows
            .iter()
            .any(|c| c.field.level.applies_to_links());
        let entities = inventory.entities(&selected, wants_links);
        Ok(SimSource {
            fleet,
            counters,
            entities,
            step_s: interval.as_secs_f64(),
            polls: 0,
            no_attribution: Arc::new(Attribution::default()),
        })
    }

    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    pub fn entities(&self) -> &[Arc<Entity>] {
        &self.entities
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
        let mut entities = Vec::with_capacity(self.entities.len());
        for e in &self.entities {
            let values = self
                .counters
                .rows
                .iter()
                .map(|c| {
                    let applies = match e.kind {
                        EntityKind::NvLink => c.field.level.applies_to_links(),
                        _ => c.field.level.applies_to_gpus(),
                    };
                    if applies {
                        self.fleet.value(e.kind, e.entity_id, c.field.id)
                    } else {
                        FieldValue::Absent(Absent::NotApplicable)
                    }
                })
                .collect();
            entities.push(EntityReading {
                entity: e.clone(),
                values,
                attribution: self.no_attribution.clone(),
            });
        }
        Ok(Reading {
            entities,
            driver_version: Some(self.fleet.driver_version().to_string()),
        })
    }
}
