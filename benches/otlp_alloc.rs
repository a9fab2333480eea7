//! Allocations of one OTLP export (issue 26): the direct builder on the `large` snapshot (8 × H100 ×
//! 7 MIG instances + NvLinks, the `large` counters), in steady state (layout and templates made, the
//! previous export's counter state there), counted by a counting global allocator: allocations and
//! bytes allocated per export for the template writer (`build_encoded`, what an export runs) and for
//! the prost reference (`build_encoded_reference`, the previous path), both resource modes. The
//! exports cycle through successive polls of the simulated source, so values change as in service.
//!
//! Timings are in `cargo bench --bench exposition -- otlp-pipeline-direct` (no counting allocator
//! there). Run: `cargo bench --bench otlp_alloc`, `-- --smoke` (a few exports: proves it runs).
#![allow(clippy::unwrap_used, clippy::expect_used)]
// tests and benches fail loudly on purpose

mod common;

use std::alloc::System;
use std::sync::Arc;

use dcgm_otel::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
use dcgm_otel::export::otel::otlp::request::{DirectBuilder, Encoded};
use dcgm_otel::export::otel::semconv::MetricNames;
use dcgm_otel::snapshot::Snapshot;
use opentelemetry_sdk::metrics::Temporality;
use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};

/// The system allocator, counting allocations (stats_alloc: no unsafe code here).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations (reallocations included) and bytes asked for so far.
fn counts() -> (u64, u64) {
    let s = GLOBAL.stats();
    (
        (s.allocations + s.reallocations) as u64,
        (s.bytes_allocated as u64).saturating_add(s.bytes_reallocated.max(0) as u64),
    )
}

fn builder(snap: &Snapshot, per_entity: bool) -> DirectBuilder {
    let counters = snap.counters.clone();
    let (style, mode) = if per_entity {
        (OtelAttributeStyle::Otel, OtelResourceMode::PerEntity)
    } else {
        (OtelAttributeStyle::Dcgm, OtelResourceMode::Host)
    };
    let naming = Naming::new(style, common::default_style(), &counters);
    let split = naming.resource_split(mode);
    DirectBuilder::new(
        naming,
        split,
        &[
            opentelemetry::KeyValue::new("service.name", "dcgm-otel"),
            opentelemetry::KeyValue::new("host.name", "bench-node-01"),
        ],
        counters,
        Temporality::Cumulative,
        std::time::SystemTime::now(),
    )
    .with_metric_names(MetricNames::Dcgm)
}

/// Allocations and bytes per export of `export` over `snaps`, after two warm-up rounds.
fn per_export(
    snaps: &[Snapshot],
    exports: usize,
    mut export: impl FnMut(&Snapshot) -> Encoded,
) -> (f64, f64, usize, usize) {
    for s in snaps.iter().chain(snaps) {
        std::hint::black_box(export(s));
    }
    let (a0, b0) = counts();
    let mut points = 0;
    let mut bytes = 0;
    for i in 0..exports {
        let e = export(&snaps[i % snaps.len()]);
        points = e.data_points;
        bytes = e.body.len();
        std::hint::black_box(e);
    }
    let n = exports as f64;
    let (a1, b1) = counts();
    ((a1 - a0) as f64 / n, (b1 - b0) as f64 / n, points, bytes)
}

fn main() {
    let counters = Arc::new(common::large_counters());
    let host = common::host();
    let mut src = common::source(&common::large_scenario(), &counters);
    let snaps: Vec<Snapshot> = (1..=4)
        .map(|seq| common::snapshot(&mut src, &counters, &host, seq))
        .collect();
    let exports = if common::smoke() { 3 } else { 200 };
    for (mode, per_entity) in [("per-entity", true), ("host", false)] {
        let mut reference = builder(&snaps[0], per_entity);
        let (ra, rb, points, size) =
            per_export(&snaps, exports, |s| reference.build_encoded_reference(s));
        let mut templates = builder(&snaps[0], per_entity);
        let (ta, tb, t_points, t_size) =
            per_export(&snaps, exports, |s| templates.build_encoded(s));
        assert_eq!((points, size), (t_points, t_size), "the same request");
        for (path, a, b) in [("prost reference", ra, rb), ("templates", ta, tb)] {
            println!(
                "otlp export alloc ({mode}, {path}): {a:>9.1} allocations/export  {:>9.1} KiB/export  \
                 {:.3} allocations/point  points {points}  bytes {size}  exports {exports}",
                b / 1024.0,
                a / points.max(1) as f64,
            );
        }
    }
}
