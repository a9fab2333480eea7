//! The exporter's own telemetry: its `dcgm_otel_*` self-metrics ([`self_metrics`]), the Prometheus text
//! primitives they and the GPU metrics are written with ([`exposition`]), and its logs ([`logging`]).
//! Everything above this layer reports through it; it depends on nothing but the lock helper.

pub mod exposition;
pub mod logging;
pub mod self_metrics;
