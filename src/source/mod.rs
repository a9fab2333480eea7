//! Sources: where GPU readings come from.
//!
//! A [`Source`] is polled once per collect interval on the collector thread (a plain OS thread, never the
//! async runtime, because libdcgm calls block). It returns a [`Reading`] with one value per counter row
//! for every monitored entity, or an error that marks the source down until a later poll succeeds.
//! Implementations: [`sim`] (the simulated fleet behind `--simulate`), `dcgm` (libdcgm through FFI) and
//! [`nvml`] (the driver's NVML, `--source nvml`). [`processes`] is the per-process side: a
//! [`processes::ProcessSource`] runs after any source, on the same thread.

pub mod args;
pub mod dcgm;
pub mod incidents;
pub mod nvml;
pub mod plan;
pub mod process_plan;
pub mod processes;
pub mod sim;

use std::sync::Arc;

use crate::counters::CounterSet;
use crate::snapshot::Reading;

/// Why a poll produced nothing.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The source lost its backend (host engine gone, connection invalid); it will try to come back.
    #[error("source unavailable: {0}")]
    Unavailable(String),
    /// Anything else that failed this cycle.
    #[error("{0}")]
    Failed(String),
}

/// A producer of readings. Called from one thread only.
pub trait Source: Send {
    /// Short name for logs and self-metrics (`simulated`, `dcgm`).
    fn name(&self) -> &'static str;

    /// Read the latest value of every counter on every monitored entity.
    fn poll(&mut self) -> Result<Reading, SourceError>;

    /// Release backend resources (DCGM groups, host engine). Called once, on shutdown.
    fn shutdown(&mut self) {}

    /// Read `counters` from the next poll on (the counters CSV was reloaded): re-plan which entities and
    /// fields are read and, for DCGM, re-create the watches. Returns the rows actually read — a source
    /// may leave out rows it cannot serve (DCGM: profiling rows without the profiling module). On an
    /// error the previous counters stay in use. Called between polls, on the collector thread.
    fn set_counters(&mut self, counters: Arc<CounterSet>) -> Result<Arc<CounterSet>, SourceError> {
        let _ = counters;
        Err(SourceError::Failed(format!(
            "the {} source cannot change its counters while running",
            self.name()
        )))
    }

    /// The rows the source reads changed by themselves since the last call (DCGM's profiling module
    /// came back or went away): the pipeline reads the next snapshots with this set. Called after
    /// every poll, before its reading is used; `None` when nothing changed (most sources never
    /// change).
    fn counters_changed(&mut self) -> Option<Arc<CounterSet>> {
        None
    }

    /// Why the source, although it answers, should not be called ready (DCGM reports fewer GPUs than
    /// the node has): `/ready` answers 503 with it. Called after every successful poll.
    fn not_ready(&self) -> Option<String> {
        None
    }

    /// A handle the source may keep to ask the collector for a collection before the next tick (a GPU
    /// was bound or unbound). Given once, before the first poll.
    fn attach_waker(&mut self, waker: Waker) {
        let _ = waker;
    }
}

/// Asks the collector thread for a collection now, from any thread.
#[derive(Clone)]
pub struct Waker(Arc<dyn Fn() + Send + Sync>);

impl Waker {
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Waker {
        Waker(Arc::new(wake))
    }

    /// Request a collection as soon as the collector is free.
    pub fn wake(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker")
    }
}
