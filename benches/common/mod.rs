//! Shared by the bench binaries: building simulated snapshots the way the pipeline does, a tiny
//! timing loop (min / median / p99 / max over N runs), and /proc readers for RSS and CPU time.
//!
//! No bench framework on purpose: `harness = false` binaries keep the build small on 2-core machines,
//! and every figure a bench prints says what it measured (series, bytes, runs).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use dcgm_otel::config::{HostnameLabel, LabelStyle};
use dcgm_otel::counters::{self, CounterSet};
use dcgm_otel::snapshot::{HostInfo, Snapshot};
use dcgm_otel::source::sim::{self, Scenario, SimSource};
use dcgm_otel::source::Source;

/// `--smoke`: run every bench a handful of times only (CI: proves they compile and run).
pub fn smoke() -> bool {
    std::env::args().any(|a| a == "--smoke") || std::env::var_os("DCGM_OTEL_BENCH_SMOKE").is_some()
}

/// Free-standing arguments (not flags, not the value of `--cycles`): substring filters on bench names.
pub fn filters() -> Vec<String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with('-') && (*i == 0 || args[i - 1] != "--cycles"))
        .map(|(_, a)| a.clone())
        .collect()
}

/// True when no filter was given or one of them occurs in `name`.
pub fn selected(name: &str) -> bool {
    let f = filters();
    f.is_empty() || f.iter().any(|f| name.contains(f.as_str()))
}

/// The label style of a default dcgm-exporter command line.
pub fn default_style() -> LabelStyle {
    LabelStyle {
        use_old_namespace: false,
        replace_blanks_in_model_name: false,
        hostname_label: HostnameLabel::Hostname,
    }
}

pub fn host() -> Arc<HostInfo> {
    Arc::new(HostInfo {
        hostname: Some("bench-node-01".to_string()),
        node_name: None,
    })
}

/// The project's built-in default counters.
pub fn default_counters() -> CounterSet {
    counters::parse(counters::DEFAULT_COUNTERS_CSV, "built-in default counters")
        .expect("built-in counters parse")
}

/// dcgm-exporter's `dcp-metrics-included.csv` (the copy in `tests/fixtures/dcgm/`).
pub fn dcp_counters() -> (CounterSet, &'static str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dcgm/dcgm-exporter-csv/dcp-metrics-included.csv");
    let set =
        counters::load_file(&path).expect("tests/fixtures/dcgm holds dcp-metrics-included.csv");
    (set, "dcp-metrics-included.csv")
}

/// The `large` scenario's own counters.
pub fn large_counters() -> CounterSet {
    let text = sim::scenario::builtin_counters("large").expect("large counters are built in");
    counters::parse(text, "built-in 'large' counters").expect("large counters parse")
}

/// A scenario of `n` whole H100s (MIG off, no NVLink entities): `n` entities with the default counters.
pub fn gpus_scenario(n: u32) -> Scenario {
    let yaml = format!(
        "description: bench {n} GPUs\ngpus:\n  - {{ model: H100-SXM5-80GB, count: {n}, load: training, nvlinks: 0 }}\n"
    );
    Scenario::parse(&yaml, "bench scenario").expect("bench scenario parses")
}

pub fn large_scenario() -> Scenario {
    Scenario::load("large").expect("large scenario")
}

/// A simulated source with 30 s steps, as `-c 30000` would poll it.
pub fn source(scenario: &Scenario, counters: &Arc<CounterSet>) -> SimSource {
    SimSource::new(
        scenario,
        1,
        "bench-node",
        counters.clone(),
        &dcgm_otel::config::devices::Selectors::default(),
        Duration::from_secs(30),
    )
    .expect("bench devices select")
}

/// One pipeline-shaped snapshot: poll the source, wrap the reading exactly as `pipeline` does.
pub fn snapshot(
    src: &mut SimSource,
    counters: &Arc<CounterSet>,
    host: &Arc<HostInfo>,
    seq: u64,
) -> Snapshot {
    let reading = src.poll().expect("simulated poll");
    Snapshot {
        seq,
        taken_at: SystemTime::now(),
        counters: counters.clone(),
        host: host.clone(),
        driver_version: reading.driver_version,
        entities: reading.entities,
        processes: Vec::new(),
        derived: Vec::new(),
        per_set: Vec::new(),
        incidents: Vec::new(),
        distributions: reading.distributions,
    }
}

/// Timing of repeated runs.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub runs: usize,
    pub min: Duration,
    pub median: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Stats {
    pub fn from_samples(mut s: Vec<Duration>) -> Stats {
        s.sort();
        let n = s.len().max(1);
        let at = |q: f64| {
            s.get(((n as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        Stats {
            runs: s.len(),
            min: at(0.0),
            median: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Run `f` `warmup` times, then `runs` times, timing each run.
pub fn measure(warmup: usize, runs: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..warmup {
        f();
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    Stats::from_samples(samples)
}

/// One result line: name, timing, and what was produced.
pub fn report(name: &str, st: &Stats, series: usize, bytes: usize) {
    println!(
        "{name:<44} median {:>9.1} µs  p99 {:>9.1} µs  min {:>9.1} µs  max {:>9.1} µs  runs {:>5}  series {:>6}  bytes {:>9}",
        us(st.median),
        us(st.p99),
        us(st.min),
        us(st.max),
        st.runs,
        series,
        bytes
    );
}

/// Resident set size of this process in KiB (`VmRSS` of /proc/self/status); 0 when unreadable.
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU time of this process (from /proc/self/stat, clock ticks of 1/100 s).
pub fn process_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return Duration::ZERO;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}
