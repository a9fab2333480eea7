//! The snapshot: the one currency between sources and exporters.
//!
//! A source (simulated fleet, libdcgm) reads every monitored entity once per collect interval and hands
//! the pipeline a [`Reading`]; the pipeline adds host and workload attribution and publishes an immutable
//! [`Snapshot`] by one atomic swap. Exporters (Prometheus text, OTel instruments, OTLP push) only ever
//! read the newest snapshot — they never call a source, and a scrape never waits on one.
//!
//! [`entity`] is the entity model (GPU, MIG instance, NvLink, NvSwitch and its links, CPU and its cores), [`inventory`] what a source discovered and
//! the monitored entities in output order, [`attribution`] who uses each entity, as open attribute sets;
//! [`process`] the processes running on them (per-process GPU use, beside the entities);
//! [`incident`] events between collections (XID, clock events, health transitions); [`p2p`] the NvLink
//! peer-to-peer status of GPU pairs; [`PerSetValues`] a field written with each pod's own value;
//! [`distribution`] the samples of chosen fields between two collections, folded per entity;
//! [`values`] the field values of a collection, only those each entity's kind reads, in arrays reused
//! from one collection to the next;
//! [`SnapshotStore`] holds the newest published snapshot.

pub mod attribution;
pub mod derived;
pub mod distribution;
pub mod entity;
pub mod incident;
pub mod inventory;
pub mod p2p;
pub mod pod_split;
pub mod process;
pub mod values;

// Settled at start-up (config/); every snapshot carries it.
pub use crate::config::host::HostInfo;

use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwapOption;

pub use attribution::{Attribute, AttributeKey, Attribution, Placement};
pub use derived::{
    DerivedFamily, DerivedInfo, DerivedKind, DerivedSample, DerivedSubject, SeriesLabel,
};
pub use entity::{CpuIdentity, Entity, EntityKind, GpuIdentity, MigIdentity};
pub use incident::{ClockSample, HealthResult, Incident, IncidentKind};
pub use p2p::P2pLink;
pub use process::ProcessReading;
pub use values::{Absent, EntityValues, FieldValue};

use crate::counters::CounterSet;

/// One entity and the latest value of each counter row its kind reads ([`values`]: read them with
/// [`EntityValues::get`] and [`EntityValues::iter`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EntityReading {
    pub entity: Arc<Entity>,
    pub values: EntityValues,
    pub attribution: Arc<Attribution>,
}

/// One field of one entity whose series carry a value per attribute set instead of the entity's one
/// value repeated: the device's own value goes on one series without attribution (the device-level
/// series), and each attribute set's series carries the value given for it. The writer is the Kubernetes
/// enricher with `--kubernetes-virtual-gpus` and per-process readings (`DCGM_FI_DEV_GPU_UTIL` and
/// `DCGM_FI_DEV_FB_USED` of a pod-held device, each pod's own, as dcgm-exporter ≥ 4.5 writes them); the
/// :9400 renderer the reader. OTLP needs none of it: there a device's readings are on its Resource once,
/// and each pod's part on the pod's own Resource (`pod_split`).
#[derive(Debug, Clone, PartialEq)]
pub struct PerSetValues {
    /// Index of the entity in `Snapshot::entities`.
    pub entity: usize,
    /// The counter row (index into `CounterSet::rows`).
    pub row: usize,
    /// One value per attribute set of the entity, in `Attribution::sets` order; an absent value writes
    /// no series for that set.
    pub per_set: Vec<FieldValue>,
}

/// What a source returns from one poll.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Entities in output order (GPUs and instances, GPU links, NvSwitches, their links, CPUs, cores).
    pub entities: Vec<EntityReading>,
    /// Driver version reported by the source, if it knows one.
    pub driver_version: Option<String>,
    /// Incidents that happened since the previous poll, each handed over once (attribution empty).
    pub incidents: Vec<Incident>,
    /// Every clock-event bitmask sample since the previous poll, per GPU (when clock events are read).
    pub clock_samples: Vec<ClockSample>,
    /// NvLink P2P status of every ordered GPU pair, when the counters list `DCGM_EXP_P2P_STATUS`.
    pub p2p: Vec<P2pLink>,
    /// The sampled fields' distributions since the previous poll (entity indexes into `entities`).
    pub distributions: distribution::Distributions,
}

/// An immutable, complete view of the fleet at one collection.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Collection sequence number, from 1.
    pub seq: u64,
    /// Wall-clock time the collection finished.
    pub taken_at: SystemTime,
    pub counters: Arc<CounterSet>,
    pub host: Arc<HostInfo>,
    pub driver_version: Option<String>,
    pub entities: Vec<EntityReading>,
    /// Processes running on the monitored entities (empty unless per-process collection is on).
    pub processes: Vec<ProcessReading>,
    /// Series derived from the enriched readings that are not DCGM fields (per-pod cost counters);
    /// written after the DCGM families. Empty when the collection failed.
    pub derived: Vec<DerivedFamily>,
    /// Fields of entities whose series carry a value per attribute set (each sharing pod's own), beside
    /// the device's value on a series without attribution (`--kubernetes-virtual-gpus`). Usually empty.
    pub per_set: Vec<PerSetValues>,
    /// Incidents seen by this collection only (XIDs, clock events, health transitions), with the
    /// attribution their entity had; a later snapshot never repeats them.
    pub incidents: Vec<Incident>,
    /// Every sample of the sampled fields since the previous collection, per entity (entity indexes
    /// into `entities`). Empty unless distributions are configured.
    pub distributions: distribution::Distributions,
}

impl Snapshot {
    /// Number of present numeric values (what a Prometheus scrape would count as samples, before
    /// per-pod duplication).
    pub fn numeric_values(&self) -> usize {
        self.entities
            .iter()
            .map(|e| {
                e.values
                    .iter()
                    .filter(|(_, v)| v.as_f64().is_some())
                    .count()
            })
            .sum()
    }
}

/// The newest published snapshot, readable from any thread without locks.
#[derive(Default)]
pub struct SnapshotStore {
    latest: ArcSwapOption<Snapshot>,
}

impl SnapshotStore {
    pub fn new() -> Arc<SnapshotStore> {
        Arc::new(SnapshotStore::default())
    }
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest.load_full()
    }
    pub fn publish(&self, snap: Arc<Snapshot>) {
        self.latest.store(Some(snap));
    }
}
