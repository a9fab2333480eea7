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
pub mod nvml;
pub mod processes;
pub mod sim;

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
}
