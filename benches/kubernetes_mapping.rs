//! Kubernetes attribution bench (issue 5): the cost of one pod-mapping refresh on the collector thread,
//! on the `large` simulated node (8 H100s, each split into 7x 1g.10gb = 56 MIG slices, plus NVLinks)
//! with 40 pods holding the 56 slices (24 pods with one slice, 16 with two).
//!
//! Two figures, each over N refreshes (default 2,000):
//! - `refresh`: the real [`KubernetesEnricher::enrich`] against the tests' fake kubelet
//!   (`tests/support/kubelet.rs`) on a unix socket: connect, HTTP/2 handshake, `List`, decode, index,
//!   attribute every entity. CPU time is the collector (calling) thread's, from
//!   `/proc/thread-self/schedstat` summed over all runs (the value is only updated at scheduler
//!   events, so per-run readings are meaningless); the fake kubelet runs on other threads and is not
//!   counted.
//! - `match`: only [`Mapping::build`] + [`apply`] on an already decoded reply (no I/O).
//!
//! - `cost` (issue 14): one collection of the per-pod cost counters (accounting + the three families)
//!   for the same 56 attributed slices, and `churn`: the accumulator's resident memory with 10,000
//!   short-lived pods retained, and after they expired.
//!
//! Run: `cargo bench --bench kubernetes_mapping` (`-- --runs 500`; `-- --smoke`: 20 runs).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dcgm_otel::config::devices;
use dcgm_otel::counters;
use dcgm_otel::enrich::kubernetes::cost::{CostAccumulator, CostSettings, EqualShares};
use dcgm_otel::enrich::kubernetes::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
};
use dcgm_otel::enrich::kubernetes::{
    apply, GpuIdType, KubernetesConfig, KubernetesEnricher, Mapping, MatchRules, PodRef,
    SharedDevices,
};
use dcgm_otel::enrich::Enricher;
use dcgm_otel::snapshot::{Attribution, EntityReading};
use dcgm_otel::source::sim::{self, Fleet, Scenario, SimSource};
use dcgm_otel::source::Source;
use dcgm_otel::telemetry::self_metrics::SelfMetrics;
use support::kubelet::{Kubelet, Reply};

fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

fn runs() -> usize {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--smoke") || std::env::var_os("DCGM_OTEL_BENCH_SMOKE").is_some() {
        return 20;
    }
    args.iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000)
}

/// 40 pods over the 56 MIG slices of the fleet: pods 0-23 one slice, pods 24-39 two.
fn reply(fleet: &Fleet) -> ListPodResourcesResponse {
    let slices: Vec<String> = fleet
        .gpus()
        .iter()
        .flat_map(|g| g.instances.iter().map(|m| m.uuid.clone()))
        .collect();
    assert_eq!(slices.len(), 56, "the large scenario has 56 MIG slices");
    let mut it = slices.into_iter();
    let mut pods = Vec::new();
    for p in 0..40 {
        let n = if p < 24 { 1 } else { 2 };
        let ids: Vec<String> = it.by_ref().take(n).collect();
        pods.push(PodResources {
            name: format!("inference-{p:03}-7c9f8d6b5-x2k4q"),
            namespace: "serving".into(),
            containers: vec![
                ContainerResources {
                    name: "istio-proxy".into(),
                    devices: vec![],
                    dynamic_resources: vec![],
                },
                ContainerResources {
                    name: "model-server".into(),
                    devices: vec![ContainerDevices {
                        resource_name: "nvidia.com/mig-1g.10gb".into(),
                        device_ids: ids,
                        topology: None,
                    }],
                    dynamic_resources: vec![],
                },
            ],
        });
    }
    ListPodResourcesResponse {
        pod_resources: pods,
    }
}

struct Stats(Vec<Duration>);

impl Stats {
    fn line(&mut self) -> String {
        self.0.sort();
        let n = self.0.len();
        let at = |q: f64| self.0[((n as f64 - 1.0) * q).round() as usize];
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        format!(
            "min {:.1} µs, median {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            us(self.0[0]),
            us(at(0.5)),
            us(at(0.99)),
            us(self.0[n - 1])
        )
    }
}

fn main() {
    let runs = runs();
    let scenario = Scenario::load("large").expect("large scenario");
    let counters_text = sim::scenario::builtin_counters("large").expect("large counters");
    let counter_set = Arc::new(counters::parse(counters_text, "large").expect("counters"));
    let mut source = SimSource::new(
        &scenario,
        1,
        "bench-node",
        counter_set,
        &devices::Selectors::default(),
        Duration::from_secs(1),
    )
    .expect("source");
    let entities: Vec<EntityReading> = source.poll().expect("poll").entities;
    let reply = reply(source.fleet());

    // ---- match only
    let rules = MatchRules {
        extra_resource_names: vec![],
        id_type: GpuIdType::Uid,
    };
    let unattributed = Arc::new(Attribution::default());
    let reset = |e: &mut Vec<EntityReading>| {
        for r in e.iter_mut() {
            r.attribution = unattributed.clone();
        }
    };
    let mut e = entities.clone();
    let mut wall = Vec::with_capacity(runs);
    let cpu0 = thread_cpu_ns();
    for _ in 0..runs {
        reset(&mut e);
        let t = Instant::now();
        let m = Mapping::build(&reply, &rules, None);
        apply(&m, GpuIdType::Uid, SharedDevices::OneSeries, &mut e);
        wall.push(t.elapsed());
        std::hint::black_box(&e);
    }
    let cpu_match = (thread_cpu_ns() - cpu0) as f64 / runs as f64 / 1000.0;
    println!(
        "match   ({} entities, 56 MIG slices, 40 pods, {runs} runs): wall {}; CPU {cpu_match:.1} µs per run (thread total / runs)",
        entities.len(),
        Stats(wall).line()
    );

    // ---- full refresh against a fake kubelet
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("kubelet.sock");
    let _kubelet = Kubelet::start(&socket, Reply::Pods(reply.clone()));
    let registry = SelfMetrics::new();
    let mut enricher = KubernetesEnricher::new(
        KubernetesConfig {
            socket,
            rules,
            pod_uid_checkpoint: None,
            deadline: Duration::from_secs(10),
            pod_uid: false,
            pod_labels: None,
            virtual_gpus: false,
            dra: false,
            cost: CostSettings {
                idle_threshold_percent: 5.0,
                retention: Duration::from_secs(600),
            },
            node_name: None,
            interval: Duration::from_secs(1),
        },
        &registry,
    )
    .expect("enricher");
    for _ in 0..5 {
        enricher.enrich(&mut e); // warm-up
    }
    let mut wall = Vec::with_capacity(runs);
    let cpu0 = thread_cpu_ns();
    for _ in 0..runs {
        reset(&mut e);
        let t = Instant::now();
        enricher.enrich(&mut e);
        wall.push(t.elapsed());
    }
    let cpu_refresh = (thread_cpu_ns() - cpu0) as f64 / runs as f64 / 1000.0;
    let attributed = e.iter().filter(|r| !r.attribution.is_empty()).count();
    assert_eq!(attributed, 56, "every MIG slice attributed");
    println!(
        "refresh ({runs} runs, List over the unix socket + match): wall {}; CPU {cpu_refresh:.1} µs per refresh on the collector thread (thread total / runs)",
        Stats(wall).line()
    );
    println!(
        "reply size: {} bytes protobuf",
        prost::Message::encoded_len(&reply)
    );
    // A fresh connection per refresh must not pile up: count this process's open descriptors.
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0);
    println!("open file descriptors after {} refreshes: {fds}", runs + 5);
    cost_counters(&e, &source, runs);
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The cost counters (issue 14): CPU per collection with 40 pods on the 56 MIG slices, then the
/// accumulator's memory under a churn of 10,000 short-lived pods (each holds a slice for 2 collections
/// of 1 s; 10 min retention), and after they have expired.
fn cost_counters(attributed: &[EntityReading], source: &SimSource, runs: usize) {
    let registry = SelfMetrics::new();
    let settings = CostSettings {
        idle_threshold_percent: 5.0,
        retention: Duration::from_secs(600),
    };
    let counters = source_counters(source);
    let mut acc = CostAccumulator::new(settings, &registry);
    let mut wall = Vec::with_capacity(runs);
    let cpu0 = thread_cpu_ns();
    for k in 0..runs {
        let t = Instant::now();
        let out = acc.collect(attributed, &counters, k as f64, &EqualShares);
        wall.push(t.elapsed());
        std::hint::black_box(out);
    }
    let cpu = (thread_cpu_ns() - cpu0) as f64 / runs as f64 / 1000.0;
    println!(
        "cost    ({runs} collections, 56 MIG slices, 40 pods, 3 families): wall {}; CPU {cpu:.1} µs per collection",
        Stats(wall).line()
    );
    // Churn: every 2 collections each slice gets a new pod.
    let pods = if runs <= 20 { 560 } else { 10_000 };
    let mut acc = CostAccumulator::new(settings, &registry);
    let slices: Vec<usize> = (0..attributed.len())
        .filter(|&i| attributed[i].entity.mig.is_some())
        .collect();
    let mut e = attributed.to_vec();
    let rss0 = rss_kib();
    let mut started = 0usize;
    let mut k = 0u64;
    while started < pods {
        if k.is_multiple_of(2) {
            for &i in &slices {
                let mut a = Attribution::default();
                a.add(&PodRef::new("churn", &format!("job-{started}"), "main").attributes());
                e[i].attribution = Arc::new(a);
                started += 1;
            }
        }
        std::hint::black_box(acc.collect(&e, &counters, k as f64, &EqualShares));
        k += 1;
    }
    let rss_peak = rss_kib();
    let kept = acc.collect(&e, &counters, k as f64, &EqualShares)[0]
        .samples
        .len();
    for r in e.iter_mut() {
        r.attribution = Arc::new(Attribution::default());
    }
    for j in 0..700 {
        std::hint::black_box(acc.collect(&e, &counters, (k + 1 + j) as f64, &EqualShares));
    }
    let left = acc.collect(&e, &counters, (k + 701) as f64, &EqualShares)[0]
        .samples
        .len();
    println!(
        "churn   {started} pods of 2 collections each over {k} collections: {kept} series kept (all within the 10 min retention), RSS {rss0} KiB before, {rss_peak} KiB with them ({} KiB more), {left} series and {} KiB after 700 s more",
        rss_peak.saturating_sub(rss0),
        rss_kib()
    );
}

fn source_counters(_source: &SimSource) -> counters::CounterSet {
    let text = sim::scenario::builtin_counters("large").expect("large counters");
    counters::parse(text, "large").expect("counters")
}
