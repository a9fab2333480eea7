//! Per-process collection (`--collect-processes`): which processes run on the monitored GPUs and MIG
//! instances, read once per collection right after the source poll, on the collector thread.
//!
//! A [`ProcessSource`] is separate from the [`Source`](super::Source) of the GPU metrics because the
//! normal GPU node reads metrics through DCGM and processes through NVML (DCGM has no per-process
//! memory or utilization in its field API): any source can be paired with any process source.
//! Implementations: `nvml::processes` (NVML, next to DCGM or NVML) and `sim::processes` (the
//! scenario's `processes:`). A failing process poll is logged once and its series are withdrawn for
//! that collection; the GPU metrics are unaffected.

use std::path::PathBuf;

use super::SourceError;
use crate::snapshot::{EntityReading, ProcessReading};

/// A producer of per-process readings. Called from the collector thread only.
pub trait ProcessSource: Send {
    /// Short name for logs (`nvml`, `simulated`).
    fn name(&self) -> &'static str;

    /// The processes running on `entities` (the monitored entities of the reading just polled),
    /// already capped per entity (the rest folded into `other`).
    fn poll(&mut self, entities: &[EntityReading]) -> Result<Vec<ProcessReading>, SourceError>;
}

/// Settings every process source shares.
#[derive(Debug, Clone)]
pub struct ProcessOptions {
    /// `--max-processes-per-gpu`: series per GPU or MIG instance; the rest are summed as `other`.
    pub max_per_entity: usize,
    /// `--proc-root`: where `<pid>/comm` and `<pid>/cgroup` are read (the host's /proc).
    pub proc_root: PathBuf,
}

impl Default for ProcessOptions {
    fn default() -> Self {
        ProcessOptions {
            max_per_entity: 16,
            proc_root: PathBuf::from("/proc"),
        }
    }
}
