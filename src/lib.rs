//! dcgm-otel: NVIDIA GPU metrics read through DCGM, exported as dcgm-exporter-compatible Prometheus text
//! on :9400 and as native OTLP.
//!
//! Data flows one way: a [`source`] (libdcgm or the simulated fleet) is polled every collect interval by
//! the [`pipeline`], which applies the [`enrich`]ers and publishes an immutable [`snapshot::Snapshot`];
//! the [`export`]ers (Prometheus text, OTLP) read only snapshots, and the [`server`] only serves bytes the
//! exporters already rendered. Underneath: [`config`] (shared settings), [`counters`] (the counters
//! CSV), [`fields`] (the DCGM field catalog), [`telemetry`] (self-metrics, logs), [`kubernetes_api`] (the
//! Kubernetes API client the counters ConfigMap and the pod enricher share), [`local_file`] (how a local
//! file others prepared is read). Above: [`cli`] gathers
//! every feature's flags and [`app`] wires the pieces together; [`engine`] is the collection as a
//! library (the binary runs the same phases). docs/developing.md has the map.

pub mod app;
pub mod cli;
pub mod config;
pub mod counters;
pub mod engine;
pub mod enrich;
pub mod error_chain;
pub mod export;
pub mod fields;
pub mod kubernetes_api;
pub mod local_file;
pub mod lock;
pub mod pipeline;
pub mod retry;
pub mod server;
pub mod snapshot;
pub mod source;
pub mod start_error;
pub mod startup;
pub mod telemetry;

/// `--version` output: package version and the git commit it was built from.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("DCGM_OTEL_GIT_COMMIT"),
    ")"
);
