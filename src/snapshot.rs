//! The snapshot: the one currency between sources and exporters.
//!
//! A source (simulated fleet, libdcgm) reads every monitored entity once per collect interval and hands
//! the pipeline a [`Reading`]; the pipeline adds host and workload attribution and publishes an immutable
//! [`Snapshot`] by one atomic swap. Exporters (Prometheus text, OTel instruments, OTLP push) only ever
//! read the newest snapshot — they never call a source, and a scrape never waits on one.

use std::sync::Arc;
use std::time::SystemTime;

use crate::config::counters::CounterSet;

/// What kind of DCGM entity a series describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EntityKind {
    /// A whole GPU (`DCGM_FE_GPU`).
    Gpu,
    /// A MIG GPU instance (`DCGM_FE_GPU_I`).
    GpuInstance,
    /// One NvLink of a GPU (`DCGM_FE_LINK`).
    NvLink,
}

/// Identity of a physical GPU, shared by the GPU, its MIG instances and its links.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuIdentity {
    /// DCGM GPU id (equals the NVML index on real systems): the `gpu` label.
    pub index: u32,
    /// `GPU-xxxxxxxx-...`: the `UUID` label.
    pub uuid: String,
    /// DCGM's PCI bus id, e.g. `00000000:8D:00.0`.
    pub pci_bus_id: String,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub model: String,
}

impl GpuIdentity {
    /// The `device` label: `nvidia<index>`.
    pub fn device(&self) -> String {
        format!("nvidia{}", self.index)
    }
}

/// Identity of a MIG GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MigIdentity {
    /// DCGM entity id of the GPU instance (what `-d i:<ids>` selects).
    pub entity_id: u32,
    /// NVML GPU-instance id: the `GPU_I_ID` label.
    pub gi_id: u32,
    /// Profile name, e.g. `1g.10gb`: the `GPU_I_PROFILE` label.
    pub profile: String,
    /// `MIG-xxxxxxxx-...`, what the kubelet reports for MIG devices.
    pub uuid: String,
}

/// One monitored entity. Identity only; values live in [`EntityReading`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entity {
    pub kind: EntityKind,
    /// The DCGM entity id within its kind (GPU id, GPU_I id, link id).
    pub entity_id: u32,
    /// The GPU this entity is, or belongs to.
    pub gpu: Arc<GpuIdentity>,
    /// Set for [`EntityKind::GpuInstance`].
    pub mig: Option<Arc<MigIdentity>>,
    /// Link index (1-based per GPU, as dcgm-exporter numbers them) for [`EntityKind::NvLink`].
    pub link: Option<u32>,
}

impl Entity {
    pub fn gpu(gpu: Arc<GpuIdentity>) -> Self {
        Entity {
            kind: EntityKind::Gpu,
            entity_id: gpu.index,
            gpu,
            mig: None,
            link: None,
        }
    }

    pub fn instance(gpu: Arc<GpuIdentity>, mig: Arc<MigIdentity>) -> Self {
        Entity {
            kind: EntityKind::GpuInstance,
            entity_id: mig.entity_id,
            gpu,
            mig: Some(mig),
            link: None,
        }
    }

    pub fn nvlink(gpu: Arc<GpuIdentity>, entity_id: u32, link_index: u32) -> Self {
        Entity {
            kind: EntityKind::NvLink,
            entity_id,
            gpu,
            mig: None,
            link: Some(link_index),
        }
    }

    /// A stable, human-readable key: `gpu0`, `gpu0/gi3`, `gpu0/nvlink2`.
    pub fn key(&self) -> String {
        match (self.kind, &self.mig, self.link) {
            (EntityKind::GpuInstance, Some(m), _) => format!("gpu{}/gi{}", self.gpu.index, m.gi_id),
            (EntityKind::NvLink, _, Some(l)) => format!("gpu{}/nvlink{}", self.gpu.index, l),
            _ => format!("gpu{}", self.gpu.index),
        }
    }
}

/// Why a value is missing. Missing values are never rendered; they are counted in self-metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Absent {
    /// DCGM returned a blank sentinel (no data yet / N/A).
    Blank,
    /// DCGM reports the field not supported on this entity.
    NotSupported,
    /// DCGM reports the field or entity not found.
    NotFound,
    /// DCGM reports insufficient permission (e.g. profiling without CAP_SYS_ADMIN).
    NotPermissioned,
    /// A non-zero status or a value that cannot be represented (NaN, blob, wrong type).
    Error,
    /// The field does not apply to this kind of entity (a link field on a GPU); not counted.
    NotApplicable,
}

impl Absent {
    pub fn as_str(self) -> &'static str {
        match self {
            Absent::Blank => "blank",
            Absent::NotSupported => "not_supported",
            Absent::NotFound => "not_found",
            Absent::NotPermissioned => "not_permissioned",
            Absent::Error => "error",
            Absent::NotApplicable => "not_applicable",
        }
    }
}

/// The latest value of one field on one entity.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Int(i64),
    Double(f64),
    Text(Box<str>),
    Absent(Absent),
}

impl FieldValue {
    /// The value as a float for numeric exporters; `None` for text and absent values.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            FieldValue::Int(i) => Some(*i as f64),
            FieldValue::Double(d) if d.is_finite() => Some(*d),
            _ => None,
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            FieldValue::Text(s) => Some(s),
            _ => None,
        }
    }
}

/// A Kubernetes pod (and container) that was allocated an entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub container: String,
    pub uid: String,
}

/// Who uses an entity: filled by enrichers (Kubernetes pod-resources, HPC job files).
/// Empty means "not attributed": such series carry no pod/job labels at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    /// One series per pod when several pods share a device.
    pub pods: Vec<PodRef>,
    /// One series per job id.
    pub hpc_jobs: Vec<String>,
}

impl Attribution {
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.hpc_jobs.is_empty()
    }

    /// Every (pod, job) combination that gets its own series: pods × jobs, where a missing side is
    /// one `None`. An unattributed entity yields the single combination `(None, None)`.
    pub fn combinations(&self) -> Vec<(Option<&PodRef>, Option<&str>)> {
        let pods: Vec<Option<&PodRef>> = if self.pods.is_empty() {
            vec![None]
        } else {
            self.pods.iter().map(Some).collect()
        };
        let jobs: Vec<Option<&str>> = if self.hpc_jobs.is_empty() {
            vec![None]
        } else {
            self.hpc_jobs.iter().map(|j| Some(j.as_str())).collect()
        };
        let mut out = Vec::with_capacity(pods.len() * jobs.len());
        for pod in &pods {
            for job in &jobs {
                out.push((*pod, *job));
            }
        }
        out
    }
}

/// One entity and the latest value of every counter row, index-aligned with [`CounterSet::rows`].
#[derive(Debug, Clone, PartialEq)]
pub struct EntityReading {
    pub entity: Arc<Entity>,
    pub values: Vec<FieldValue>,
    pub attribution: Arc<Attribution>,
}

/// What a source returns from one poll.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// Entities in output order (GPU index, then instance, then link).
    pub entities: Vec<EntityReading>,
    /// Driver version reported by the source, if it knows one.
    pub driver_version: Option<String>,
}

/// Facts about the node, the same for every entity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostInfo {
    /// Value of the host label; `None` with `--no-hostname`.
    pub hostname: Option<String>,
    /// `NODE_NAME` when running in Kubernetes.
    pub node_name: Option<String>,
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
}

impl Snapshot {
    /// Number of present numeric values (what a Prometheus scrape would count as samples, before
    /// per-pod duplication).
    pub fn numeric_values(&self) -> usize {
        self.entities
            .iter()
            .map(|e| e.values.iter().filter(|v| v.as_f64().is_some()).count())
            .sum()
    }
}
