//! NVML cost per collection (issue 16): the NVML source and the per-process collector over the fake
//! libnvidia-ml (`tests/fake-libnvml`) serving the `large` scenario — 8 H100, each 7 × 1g.10gb MIG
//! instances, 18 NvLinks each, 100 processes — with the `large` counters. Per collection it prints the
//! NVML calls made (counted from the fake's call log, so every C call is counted) and the wall time of
//! the source poll and of the process poll (the fake answers from memory: this is dcgm-otel's own cost
//! plus the FFI crossings, not the driver's).
//!
//! Run: `cargo build --release -p fake-libnvml && cargo bench --bench nvml` (200 collections),
//! `-- --collections N`, `-- --smoke` (5 collections: proves it runs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ms, Stats};
use dcgm_otel::config::devices::DeviceSelection;
use dcgm_otel::counters;
use dcgm_otel::snapshot::EntityReading;
use dcgm_otel::source::nvml::client::Nvml;
use dcgm_otel::source::nvml::processes::NvmlProcesses;
use dcgm_otel::source::nvml::NvmlSource;
use dcgm_otel::source::processes::{ProcessOptions, ProcessSource};
use dcgm_otel::source::sim::scenario::builtin_counters;
use dcgm_otel::source::Source;

fn fake_library() -> PathBuf {
    // target/<profile>/deps/nvml-<hash> → target/<profile>/libfake_libnvml.so
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let lib = dir.join("libfake_libnvml.so");
    assert!(
        lib.exists(),
        "{} missing: cargo build --release -p fake-libnvml (or --workspace for the debug smoke run)",
        lib.display()
    );
    lib
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let collections: usize = args
        .iter()
        .position(|a| a == "--collections")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke { 5 } else { 200 });
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libnvidia-ml.so.1");
    std::os::unix::fs::symlink(fake_library(), &lib).unwrap();
    let log = dir.path().join("calls.log");
    std::env::set_var("FAKE_NVML_SCENARIO", "large");
    std::env::set_var("FAKE_NVML_CALL_LOG", &log);
    let mut counters = counters::parse(
        builtin_counters("large").unwrap(),
        "built-in 'large' counters",
    )
    .unwrap();
    let nvml: Arc<Nvml> = Nvml::open(Some(&lib)).unwrap();
    let mut source =
        NvmlSource::with_library(nvml.clone(), DeviceSelection::Flex, &mut counters).unwrap();
    let mut procs = NvmlProcesses::new(
        nvml,
        ProcessOptions {
            max_per_entity: 16,
            proc_root: dir.path().to_path_buf(),
        },
    );
    // Warm-up collection (discovery, names of new pids).
    let r = source.poll().unwrap();
    let p = procs.poll(&r.entities).unwrap();
    let entities = r.entities.len();
    let processes = p.len();
    let mut source_calls = Vec::new();
    let mut process_calls = Vec::new();
    let mut source_t: Vec<Duration> = Vec::new();
    let mut process_t: Vec<Duration> = Vec::new();
    let mut values = 0usize;
    for _ in 0..collections {
        let before = lines(&log);
        let t = Instant::now();
        let r = source.poll().unwrap();
        source_t.push(t.elapsed());
        let mid = lines(&log);
        let t = Instant::now();
        let list = procs.poll(&r.entities).unwrap();
        process_t.push(t.elapsed());
        let after = lines(&log);
        source_calls.push(mid - before);
        process_calls.push(after - mid);
        values = r
            .entities
            .iter()
            .map(|e: &EntityReading| {
                e.values
                    .iter()
                    .filter(|(_, v)| v.as_f64().is_some())
                    .count()
            })
            .sum();
        assert_eq!(list.len(), processes);
    }
    let avg = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
    println!(
        "nvml: large scenario through the fake libnvidia-ml: {entities} entities ({values} numeric values), {processes} processes, {collections} collections"
    );
    println!(
        "  NVML calls per collection: source {:.0}, processes {:.0}, total {:.0}",
        avg(&source_calls),
        avg(&process_calls),
        avg(&source_calls) + avg(&process_calls)
    );
    for (what, t) in [("source poll", source_t), ("process poll", process_t)] {
        let s = Stats::from_samples(t);
        println!(
            "  {what}: median {:.3} ms, p99 {:.3} ms, min {:.3} ms, max {:.3} ms",
            ms(s.median),
            ms(s.p99),
            ms(s.min),
            ms(s.max)
        );
    }
}
