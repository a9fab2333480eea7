//! Collector-cycle bench (issue 8): the real [`Pipeline::run`] over the `large` simulated fleet, back to
//! back, for N cycles (default 100,000): source poll → snapshot → publication → Prometheus body (text,
//! self-metrics, gzip) made right away, as a gzip scrape after every collection would have it made
//! (the exporter itself makes it at the first scrape; OTLP runs on its own thread: `exposition --
//! otlp` measures it).
//! Prints CPU per cycle — the collector thread's `/proc/thread-self/schedstat`, read as each poll
//! starts, right after the thread woke up, when the kernel's counter is exact — wall time per cycle
//! (poll start → last consumer), and the process RSS over the run (`VmRSS`), so growth shows.
//!
//! Run: `cargo bench --bench cycle` (100,000 cycles, several minutes), `-- --cycles 5000`,
//! `-- --source fake` (the DCGM source over tests/fake-libdcgm instead of the simulated source;
//! `cargo build --release -p fake-libdcgm` first),
//! `-- --collect-only` (no body made: the collection alone, what a collection nobody scrapes costs),
//! `-- --smoke` (20 cycles: proves it runs). A counting allocator reports the heap allocations per
//! cycle after warm-up (every thread of the process: here, the collector's). See docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

mod common;

use std::alloc::System;
use std::sync::mpsc::Sender;

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ms, Stats};
use dcgm_otel::counters::CounterSet;
use dcgm_otel::export::metrics_body::MetricsBody;
use dcgm_otel::export::prometheus::Renderer;
use dcgm_otel::export::SnapshotConsumer;
use dcgm_otel::pipeline::{CollectorStatus, Control, Pipeline};
use dcgm_otel::snapshot::SnapshotStore;
use dcgm_otel::snapshot::{Reading, Snapshot};
use dcgm_otel::source::dcgm::{DcgmOptions, DcgmSource};
use dcgm_otel::source::sim::SimSource;
use dcgm_otel::source::{Source, SourceError};
use dcgm_otel::telemetry::self_metrics::SelfMetrics;
use std::path::PathBuf;

/// CPU time this thread has run, in nanoseconds (first field of /proc/thread-self/schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

/// Times each cycle: the wrapped source marks its start (the collector thread has just woken up, so
/// the kernel's CPU counter for it is exact), the probe consumer its end.
/// The system allocator, counting allocations (stats_alloc: no unsafe code here).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

struct Probe {
    /// Made after each collection, as a gzip scrape would (`None` with `--collect-only`).
    body: Option<Arc<MetricsBody>>,
    /// Allocations and bytes when the first counted cycle began.
    allocs_at_warmup: Mutex<Option<(u64, u64)>>,
    cycles: u64,
    warmup: u64,
    stop: Mutex<Option<Sender<Control>>>,
    state: Mutex<ProbeState>,
}

/// Samples in 1 µs buckets up to 100 ms, allocated and touched up front, so recording a sample never
/// allocates and the RSS trace shows the pipeline's memory, not the bench's.
struct Hist {
    counts: Vec<u32>,
    samples: usize,
    max: Duration,
}

const HIST_BUCKETS: usize = 100_000;

impl Default for Hist {
    fn default() -> Self {
        let mut counts = vec![1u32; HIST_BUCKETS];
        counts.iter_mut().for_each(|c| *c = std::hint::black_box(0));
        Hist {
            counts,
            samples: 0,
            max: Duration::ZERO,
        }
    }
}

impl Hist {
    fn add(&mut self, d: Duration) {
        let b = (d.as_micros() as usize).min(HIST_BUCKETS - 1);
        self.counts[b] += 1;
        self.samples += 1;
        self.max = self.max.max(d);
    }

    fn stats(&self) -> Stats {
        let at = |q: f64| {
            let rank = ((self.samples.max(1) - 1) as f64 * q).round() as usize;
            let mut seen = 0usize;
            for (b, &c) in self.counts.iter().enumerate() {
                seen += c as usize;
                if seen > rank {
                    return Duration::from_micros(b as u64);
                }
            }
            self.max
        };
        Stats {
            runs: self.samples,
            min: at(0.0),
            median: at(0.5),
            p99: at(0.99),
            max: self.max,
        }
    }
}

#[derive(Default)]
struct ProbeState {
    seen: u64,
    start_cpu: u64,
    start_wall: Option<Instant>,
    cpu: Hist,
    wall: Hist,
    rss: Vec<(u64, u64)>,
    series: usize,
    in_dcgm: Duration,
    dcgm_polls: u32,
}

impl Probe {
    /// Start of a cycle (before the source poll): the CPU since the previous start is one whole cycle.
    fn cycle_start(&self) {
        let cpu = thread_cpu_ns();
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if st.seen > self.warmup && st.start_wall.is_some() {
            let d = Duration::from_nanos(cpu.saturating_sub(st.start_cpu));
            st.cpu.add(d);
        }
        st.start_cpu = cpu;
        st.start_wall = Some(Instant::now());
    }
}

/// The source under test: the simulated fleet, or the DCGM source over the fake libdcgm.
enum Inner {
    Sim(Box<SimSource>),
    Dcgm(Box<DcgmSource>),
}

/// The source, with the probe's start mark in front of each poll.
struct TimedSource {
    inner: Inner,
    probe: Arc<Probe>,
}

impl Source for TimedSource {
    fn name(&self) -> &'static str {
        match &self.inner {
            Inner::Sim(s) => s.name(),
            Inner::Dcgm(d) => d.name(),
        }
    }
    fn poll(&mut self) -> Result<Reading, SourceError> {
        self.probe.cycle_start();
        match &mut self.inner {
            Inner::Sim(s) => s.poll(),
            Inner::Dcgm(d) => {
                let r = d.poll();
                if let Ok(mut st) = self.probe.state.lock() {
                    st.in_dcgm += d.dcgm_time_last_poll();
                    st.dcgm_polls += 1;
                }
                r
            }
        }
    }
    fn shutdown(&mut self) {
        if let Inner::Dcgm(d) = &mut self.inner {
            d.shutdown();
        }
    }
}

/// `--source fake`: the DCGM source over tests/fake-libdcgm (scenario `large`), found next to the
/// benched binary (`cargo build --release -p fake-libdcgm`) or at `DCGM_OTEL_FAKE_LIB`.
fn fake_source(counters: &mut CounterSet) -> Result<DcgmSource, String> {
    let lib = std::env::var_os("DCGM_OTEL_FAKE_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_BIN_EXE_dcgm-otel"))
                .parent()
                .map(|d| d.join("libfake_libdcgm.so"))
                .unwrap_or_default()
        });
    if !lib.exists() {
        return Err(format!(
            "{} missing: cargo build --release -p fake-libdcgm",
            lib.display()
        ));
    }
    // Single-threaded here: nothing else reads the environment yet.
    std::env::set_var("FAKE_DCGM_SCENARIO", "large");
    let opts = DcgmOptions {
        library: Some(lib),
        remote: None,
        interval: Duration::from_secs(30),
        ..DcgmOptions::default()
    };
    DcgmSource::connect(opts, counters).map_err(|e| e.to_string())
}

impl SnapshotConsumer for Probe {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>) {
        // What a gzip scrape after this collection has made.
        if let Some(body) = &self.body {
            body.make(true);
        }
        let now = Instant::now();
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        st.seen += 1;
        if st.seen == self.warmup {
            if let Ok(mut at) = self.allocs_at_warmup.lock() {
                *at = Some(allocation_counts());
            }
        }
        if st.seen > self.warmup {
            if let Some(w) = st.start_wall {
                st.wall.add(now - w);
            }
        }
        let every = (self.cycles / 50).max(1);
        if st.seen == self.warmup || st.seen % every == 0 || st.seen == self.cycles {
            let seen = st.seen;
            st.rss.push((seen, common::rss_kib()));
        }
        st.series = snapshot.numeric_values();
        if st.seen >= self.cycles {
            if let Ok(mut s) = self.stop.lock() {
                if let Some(tx) = s.take() {
                    let _ = tx.send(Control::Stop);
                }
            }
        }
    }
}

/// Allocations (reallocations included) and bytes asked for, so far, in the whole process.
fn allocation_counts() -> (u64, u64) {
    let s = GLOBAL.stats();
    (
        (s.allocations + s.reallocations) as u64,
        (s.bytes_allocated as u64).saturating_add(s.bytes_reallocated.max(0) as u64),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cycles: u64 = if common::smoke() {
        20
    } else {
        args.iter()
            .position(|a| a == "--cycles")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .or_else(|| {
                std::env::var("DCGM_OTEL_BENCH_CYCLES")
                    .ok()
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(100_000)
    };
    let warmup = (cycles / 100).clamp(1, 100);
    println!(
        "# collector cycle, scenario large, source {}, {cycles} cycles back to back (first {warmup} not counted)",
        if args.iter().any(|a| a == "fake") { "DCGM over the fake libdcgm" } else { "simulated" }
    );

    let fake = args
        .windows(2)
        .any(|w| w[0] == "--source" && w[1] == "fake");
    let mut counter_set = common::large_counters();
    let inner = if fake {
        match fake_source(&mut counter_set) {
            Ok(d) => Inner::Dcgm(Box::new(d)),
            Err(e) => {
                println!("fake libdcgm source unavailable: {e}");
                return;
            }
        }
    } else {
        Inner::Sim(Box::new(common::source(
            &common::large_scenario(),
            &Arc::new(counter_set.clone()),
        )))
    };
    let counters = Arc::new(counter_set);
    let self_metrics = SelfMetrics::new();
    let body = Arc::new(MetricsBody::new(Renderer::new(
        common::default_style(),
        Some(self_metrics.clone()),
    )));
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<Control>();
    let collect_only = args.iter().any(|a| a == "--collect-only");
    let probe = Arc::new(Probe {
        body: (!collect_only).then(|| body.clone()),
        allocs_at_warmup: Mutex::new(None),
        cycles,
        warmup,
        stop: Mutex::new(Some(stop_tx)),
        state: Mutex::new(ProbeState {
            rss: Vec::with_capacity(64),
            ..ProbeState::default()
        }),
    });
    // The interval only paces the loop here (1 µs: back to back); the source steps 30 s per poll.
    let interval = Duration::from_micros(1);
    let pipeline = Pipeline {
        source: Box::new(TimedSource {
            inner,
            probe: probe.clone(),
        }),
        enrichers: Vec::new(),
        consumers: vec![body.clone() as Arc<dyn SnapshotConsumer>, probe.clone()],
        counters,
        host: common::host(),
        interval,
        store: SnapshotStore::new(),
        status: CollectorStatus::new(interval),
        self_metrics,
        processes: None,
        reloader: None,
        waker: None,
    };
    let rss_before = common::rss_kib();
    let started = Instant::now();
    let cpu_before = common::process_cpu();
    let collector = std::thread::Builder::new()
        .name("collector".into())
        .spawn(move || pipeline.run(stop_rx))
        .expect("collector thread");
    let _ = collector.join();
    let elapsed = started.elapsed();
    let cpu_total = common::process_cpu().saturating_sub(cpu_before);
    let allocs_end = allocation_counts();

    let probe_warmup = warmup;
    let Ok(st) = probe.state.lock() else { return };
    let b = body.make(true);
    let cpu = st.cpu.stats();
    let wall = st.wall.stats();
    println!(
        "cycle CPU (collector thread)  median {:>7.3} ms  p99 {:>7.3} ms  min {:>7.3} ms  max {:>7.3} ms  cycles {}",
        ms(cpu.median),
        ms(cpu.p99),
        ms(cpu.min),
        ms(cpu.max),
        cpu.runs
    );
    println!(
        "cycle wall (poll → consumers) median {:>7.3} ms  p99 {:>7.3} ms  min {:>7.3} ms  max {:>7.3} ms",
        ms(wall.median),
        ms(wall.p99),
        ms(wall.min),
        ms(wall.max)
    );
    println!(
        "process CPU {:.2} s over {:.2} s wall = {:.3} ms per cycle; series {} ; body {} bytes, gzip {} bytes",
        cpu_total.as_secs_f64(),
        elapsed.as_secs_f64(),
        cpu_total.as_secs_f64() * 1e3 / cycles as f64,
        st.series,
        b.text.len(),
        b.gzip.len()
    );
    let counted = cycles.saturating_sub(probe_warmup).max(1);
    if let Some((n0, b0)) = probe.allocs_at_warmup.lock().ok().and_then(|a| *a) {
        println!(
            "heap allocations per cycle after warm-up: {:.1} ({:.0} bytes asked for){}",
            (allocs_end.0 - n0) as f64 / counted as f64,
            (allocs_end.1 - b0) as f64 / counted as f64,
            if collect_only {
                "; collection only, no body made"
            } else {
                "; body (text + gzip) made every cycle"
            }
        );
    }
    if st.dcgm_polls > 0 {
        println!(
            "time inside libdcgm (the fake) per poll: mean {:.3} ms (wall; included in the cycle figures above)",
            ms(st.in_dcgm / st.dcgm_polls)
        );
    }
    let after_warmup = st.rss.first().map(|r| r.1).unwrap_or(0);
    let max = st.rss.iter().map(|r| r.1).max().unwrap_or(0);
    let last = st.rss.last().map(|r| r.1).unwrap_or(0);
    println!(
        "RSS before {} KiB, after warm-up {} KiB, max {} KiB, at end {} KiB, growth after warm-up {} KiB",
        rss_before,
        after_warmup,
        max,
        last,
        last as i64 - after_warmup as i64
    );
    let trace: Vec<String> = st.rss.iter().map(|(c, r)| format!("{c}:{r}")).collect();
    println!("RSS trace (cycle:KiB) {}", trace.join(" "));
}
