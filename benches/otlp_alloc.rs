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
// `GlobalAlloc` is an unsafe trait: the counting allocator below (bench only, never in the product)
// forwards every call to the system allocator.
#![allow(unsafe_code)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dcgm_otel::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
use dcgm_otel::export::otel::otlp::request::{DirectBuilder, Encoded};
use dcgm_otel::export::otel::semconv::MetricNames;
use dcgm_otel::snapshot::Snapshot;
use opentelemetry_sdk::metrics::Temporality;

/// The system allocator, counting allocations (and reallocations) and the bytes they asked for.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    let mut points = 0;
    let mut bytes = 0;
    for i in 0..exports {
        let e = export(&snaps[i % snaps.len()]);
        points = e.data_points;
        bytes = e.body.len();
        std::hint::black_box(e);
    }
    let n = exports as f64;
    (
        (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / n,
        (BYTES.load(Ordering::Relaxed) - b0) as f64 / n,
        points,
        bytes,
    )
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
