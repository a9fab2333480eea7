//! The per-pod energy counter's fallbacks end to end (docs/kubernetes.md "Energy"), through the built
//! binary on a simulated node whose scenario gives one pod a whole GPU and fixes the GPU's power and
//! energy counter with `waveforms:`, so that the right answer is known whatever the timing:
//!
//! - no energy counter (not in the counters CSV, or in it but not supported on the device): each
//!   interval's energy comes from the power at both ends — at a constant 300 W the pod's joules are
//!   300 × its GPU-seconds, and every interval is counted `source="power"`;
//! - an energy counter that goes backwards (a driver reload; here a square wave between 5,000 and 6,000 J):
//!   the interval that saw it fall gets no energy (`source="none"`), neither a negative one nor the
//!   counter's new value nor power; the one that saw it rise gets 1,000 J. The pod's joules are
//!   1,000 × the rises, never decrease, and rises and falls alternate.
//!
//! The exact arithmetic (the trapezoid of a changing power, shares) is `tests/e2e/pod_cost.rs`'s.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common::{self, get, Exporter};

use std::path::Path;
use std::time::{Duration, Instant};

/// One H100 held by one pod, with `extra` scenario lines (waveforms, unsupported fields).
fn scenario(dir: &Path, extra: &str) -> String {
    let path = dir.join("scenario.yaml");
    std::fs::write(
        &path,
        format!(
            "description: one pod on one GPU\n\
             gpus:\n  - {{ model: H100-SXM5-80GB, load: training }}\n\
             pods:\n  - {{ namespace: ml, pod: trainer-0, container: main, devices: [{{ gpu: 0 }}] }}\n\
             {extra}"
        ),
    )
    .unwrap();
    format!("--simulate={}", path.display())
}

const CONSTANT_POWER: &str =
    "  - { field: DCGM_FI_DEV_POWER_USAGE, gpu: 0, square: { low: 300, high: 300, period: 1s } }\n";

/// The simulated node (its pods as the cluster), collecting every 200 ms.
fn start(simulate: &str, extra: &[&str]) -> Exporter {
    let mut args = vec![simulate, "-c", "200"];
    args.extend_from_slice(extra);
    common::start_as_user(&args, &[])
}

fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// The pod's sample of a cost family (0 when it has none).
fn pod_value(body: &str, family: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(&format!("{family}{{")) && l.contains("pod=\"trainer-0\""))
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
        .unwrap_or(0.0)
}

fn intervals(body: &str, source: &str) -> f64 {
    value(
        body,
        &format!("dcgm_otel_pod_energy_intervals_total{{source=\"{source}\"}}"),
    )
}

const SECONDS: &str = "dcgm_otel_pod_gpu_seconds_total";
const JOULES: &str = "dcgm_otel_pod_gpu_energy_joules_total";

/// Scrape until `cond` holds (every 50 ms), or panic after 30 s; every body is handed to `each` first.
fn scrape_until(
    e: &Exporter,
    what: &str,
    mut each: impl FnMut(&str),
    cond: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = get(e.port, "/metrics").unwrap().text();
        each(&body);
        if cond(&body) {
            return body;
        }
        let own: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with("dcgm_otel_pod"))
            .collect();
        assert!(Instant::now() < deadline, "{what}:\n{}", own.join("\n"));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// At a constant 300 W the pod's joules are 300 × its GPU-seconds, counted from power.
fn energy_from_power(simulate: &str, extra: &[&str]) {
    let e = start(simulate, extra);
    let body = scrape_until(
        &e,
        "intervals charged from power",
        |_| {},
        |b| intervals(b, "power") >= 5.0,
    );
    let (seconds, joules) = (pod_value(&body, SECONDS), pod_value(&body, JOULES));
    assert!(seconds > 0.0, "{body}");
    // Both are rendered with 6 decimals.
    assert!(
        (joules - 300.0 * seconds).abs() <= 300.0 * 1e-6 + 1e-6,
        "{joules} J for {seconds} GPU-seconds at 300 W"
    );
    assert_eq!(intervals(&body, "counter"), 0.0);
    assert_eq!(intervals(&body, "none"), 0.0);
}

#[test]
fn energy_comes_from_power_when_the_counters_have_no_energy_counter() {
    let dir = tempfile::tempdir().unwrap();
    let simulate = scenario(dir.path(), &format!("waveforms:\n{CONSTANT_POWER}"));
    let csv = dir.path().join("counters.csv");
    std::fs::write(
        &csv,
        "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n\
         DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n",
    )
    .unwrap();
    energy_from_power(&simulate, &["-f", csv.to_str().unwrap()]);
}

#[test]
fn energy_comes_from_power_when_the_device_has_no_energy_counter() {
    let dir = tempfile::tempdir().unwrap();
    // The default counters read the energy counter; this GPU does not support it.
    let simulate = scenario(
        dir.path(),
        &format!(
            "unsupported_fields: [DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION]\nwaveforms:\n{CONSTANT_POWER}"
        ),
    );
    energy_from_power(&simulate, &[]);
}

#[test]
fn an_energy_counter_going_backwards_gives_its_interval_no_energy() {
    let dir = tempfile::tempdir().unwrap();
    // 6,000,000 mJ for two collections, 5,000,000 for two: it rises by 1,000 J and falls back.
    let simulate = scenario(
        dir.path(),
        &format!(
            "waveforms:\n{CONSTANT_POWER}  - {{ field: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, gpu: 0, square: {{ low: 5000000, high: 6000000, period: 800ms }} }}\n"
        ),
    );
    let e = start(&simulate, &[]);
    let mut last_joules = 0.0;
    let body = scrape_until(
        &e,
        "three falls of the counter",
        |b| {
            let j = pod_value(b, JOULES);
            assert!(
                j >= last_joules,
                "the pod's joules went down: {last_joules} then {j}"
            );
            last_joules = j;
        },
        |b| intervals(b, "none") >= 3.0,
    );
    let (joules, falls) = (pod_value(&body, JOULES), intervals(&body, "none"));
    let rises = joules / 1000.0;
    assert_eq!(
        rises.fract(),
        0.0,
        "{joules} J is not a whole number of rises"
    );
    assert!(
        (rises - falls).abs() <= 1.0,
        "{rises} rises of 1,000 J and {falls} falls: the falls were charged"
    );
    assert_eq!(
        intervals(&body, "power"),
        0.0,
        "the counter was read: no power"
    );
    assert!(intervals(&body, "counter") >= 2.0 * falls - 2.0, "{body}");
}
