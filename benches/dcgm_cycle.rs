//! A measurement, not a check: one DCGM collect cycle of the `large` fleet (8 H100s, each split into
//! seven MIG instances, 18 NvLinks each) read through the fake libdcgm, in process — with the large
//! and the default counters, and with the default counters plus the six `DCGM_EXP_*` rows (what the
//! incident reads add per collection), and with two fields sampled at 100 ms (`--distribution`: what
//! reading every sample through `dcgmGetValuesSince_v2` adds; each sample is pushed from inside the
//! call's callback, so that part counts as time inside libdcgm, the fold at the end as outside). Prints the DCGM functions called, the calls per cycle and the
//! wall time per cycle; asserts only that every poll succeeds and covers every entity (no timing
//! assertions). A bench binary of its own: it sets the fake's environment in this process.
//!
//! Run: `cargo bench --bench dcgm_cycle` (the figures in docs/performance.md), `-- --smoke` (a few
//! cycles: proves it runs). The fake libdcgm is built on demand (tests/support/fake_lib.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dcgm_otel::counters::{self, CounterSet};
use dcgm_otel::source::dcgm::{DcgmOptions, DcgmSource};
use dcgm_otel::source::sim::scenario::builtin_counters;
use dcgm_otel::source::Source;

fn fake_library() -> PathBuf {
    support::fake_lib::built("libfake_libdcgm.so")
}

fn calls(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn measure(label: &str, set: CounterSet, log: &std::path::Path, cycles: usize) {
    measure_sampling(label, set, &[], log, cycles);
}

/// [`measure`] with `sampled` fields (`FIELD@INTERVAL`) read between collections.
fn measure_sampling(
    label: &str,
    mut set: CounterSet,
    sampled: &[&str],
    log: &std::path::Path,
    cycles: usize,
) {
    let before = calls(log).len();
    let specs: Vec<_> = sampled
        .iter()
        .map(|s| dcgm_otel::config::distributions::parse_spec(s).unwrap())
        .collect();
    let opts = DcgmOptions {
        library: Some(fake_library()),
        remote: None,
        interval: Duration::from_secs(1),
        distributions: specs.into(),
        ..DcgmOptions::default()
    };
    let rows = set.len();
    let mut src = DcgmSource::connect(opts, &mut set).expect("DCGM source over the fake");
    let setup = calls(log).len() - before;
    // The first cycle learns which fields instances do not support.
    let first = src.poll().expect("first poll");
    let entities = first.entities.len();
    let values: usize = first
        .entities
        .iter()
        .map(|e| {
            e.values
                .iter()
                .filter(|(_, v)| v.as_f64().is_some() || v.as_text().is_some())
                .count()
        })
        .sum();
    let mark = calls(log).len();
    let mut times = Vec::with_capacity(cycles);
    let mut in_dcgm = Duration::ZERO;
    let mut samples = 0u64;
    for _ in 0..cycles {
        let t = Instant::now();
        let r = src.poll().expect("poll");
        times.push(t.elapsed());
        in_dcgm += src.dcgm_time_last_poll();
        assert_eq!(r.entities.len(), entities);
        samples += r
            .distributions
            .entries
            .iter()
            .map(|e| e.interval.count)
            .sum::<u64>();
    }
    if !sampled.is_empty() {
        // The fake's engine time moves one collect interval a cycle: ten samples per entity and field.
        assert!(samples > 0, "no sample read");
    }
    let per_cycle = src.calls_last_poll();
    let steady_calls = calls(log);
    let steady = steady_calls.len() - mark;
    let mut per_function: BTreeMap<String, usize> = BTreeMap::new();
    for c in &steady_calls[mark..] {
        *per_function
            .entry(c.split(' ').next().unwrap_or("").to_string())
            .or_default() += 1;
    }
    src.shutdown();
    times.sort();
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    let own = mean.saturating_sub(in_dcgm / cycles as u32);
    eprintln!(
        "[{label}] {rows} rows, {entities} entities, {values} present values per cycle; setup {setup} DCGM calls; \
         {per_cycle} DCGM calls per cycle ({steady} over {cycles} cycles: {per_function:?}); \
         {} samples folded per cycle; \
         cycle wall time mean {mean:?} (of which outside libdcgm {own:?}), median {:?}, p95 {:?}, max {:?}",
        samples / cycles as u64,
        times[times.len() / 2],
        times[times.len() * 95 / 100],
        times[times.len() - 1],
    );
    assert_eq!(steady, per_cycle * cycles, "calls per cycle vary");
}

fn main() {
    // A few cycles under --smoke (proves it runs), the figures' numbers otherwise.
    let (large_cycles, default_cycles) = if common::smoke() { (2, 3) } else { (40, 100) };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    // This bench runs alone in its process, so setting the fake's environment is fine.
    std::env::set_var("FAKE_DCGM_SCENARIO", "large");
    std::env::set_var("FAKE_DCGM_CALL_LOG", &log);
    let large = counters::parse(builtin_counters("large").unwrap(), "large counters").unwrap();
    measure("large counters", large, &log, large_cycles);
    let default = counters::parse(counters::DEFAULT_COUNTERS_CSV, "default counters").unwrap();
    measure("default counters", default, &log, default_cycles);
    let exp_rows = "DCGM_EXP_XID_ERRORS_COUNT, gauge, x\nDCGM_EXP_XID_ERRORS_TOTAL, counter, x\n\
                    DCGM_EXP_CLOCK_EVENTS_COUNT, gauge, c\nDCGM_EXP_CLOCK_EVENTS_TOTAL, counter, c\n\
                    DCGM_EXP_GPU_HEALTH_STATUS, gauge, h\nDCGM_EXP_P2P_STATUS, gauge, p\n";
    let with_exp = counters::parse(
        &format!("{}\n{exp_rows}", counters::DEFAULT_COUNTERS_CSV),
        "default counters + DCGM_EXP_*",
    )
    .unwrap();
    measure(
        "default counters + DCGM_EXP_*",
        with_exp,
        &log,
        default_cycles,
    );
    let default = counters::parse(counters::DEFAULT_COUNTERS_CSV, "default counters").unwrap();
    measure_sampling(
        "default counters + 2 fields sampled at 100 ms",
        default,
        &[
            "DCGM_FI_DEV_POWER_USAGE@100ms",
            "DCGM_FI_PROF_SM_ACTIVE@100ms",
        ],
        &log,
        default_cycles,
    );
    let mut used: BTreeMap<String, usize> = BTreeMap::new();
    for c in calls(&log) {
        *used
            .entry(c.split(' ').next().unwrap_or("").to_string())
            .or_default() += 1;
    }
    eprintln!("DCGM functions called (name: count over both runs): {used:?}");
}
