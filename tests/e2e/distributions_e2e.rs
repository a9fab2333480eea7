//! Sub-interval distributions (`--distribution`) on the simulated fleet, as a user scrapes them: a
//! scenario whose GPU 0 power is a known square wave (250 W / 650 W, 400 ms period) sampled every
//! 100 ms with a 1 s collect interval gives an interval max of 650, a min of 250 and ten samples,
//! labelled exactly like the field's own series (one per pod sharing the GPU), while the last-value
//! series shows one of the two levels. Without `--distribution` nothing new appears (the golden files
//! of `simulated_e2e` stay as they are).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;

use common::{fixtures_path, scrape, start};

/// `labels` → value of every sample of `name` in `body`.
fn samples(body: &str, name: &str) -> Vec<(String, f64)> {
    body.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .map(|rest| {
            let (labels, value) = rest.rsplit_once("} ").unwrap();
            (labels.to_string(), value.parse().unwrap())
        })
        .collect()
}

fn start_square_wave(extra: &[&str]) -> common::Exporter {
    let scenario = fixtures_path("scenarios/power-square-wave.yaml");
    let csv = fixtures_path("counters/power-util.csv");
    let mut args = vec![
        format!("--simulate={scenario}"),
        "-f".into(),
        csv,
        "-c".into(),
        "1000".into(),
        "-k".into(),
        "--no-self-metrics".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start(&args, &[])
}

#[test]
fn a_square_wave_gives_its_levels_on_the_fields_own_labels() {
    let e = start_square_wave(&[
        "--distribution",
        "DCGM_FI_DEV_POWER_USAGE@100ms",
        "--distribution",
        "DCGM_FI_DEV_GPU_UTIL@250ms",
    ]);
    let body = scrape(e.port);
    let last = samples(&body, "DCGM_FI_DEV_POWER_USAGE");
    // GPU 0 shared by two pods, and GPU 1's two MIG instances.
    assert_eq!(last.len(), 4, "{body}");
    let max = samples(&body, "dcgm_otel_power_usage_interval_max");
    let min = samples(&body, "dcgm_otel_power_usage_interval_min");
    let count = samples(&body, "dcgm_otel_power_usage_interval_samples");
    let p99 = samples(&body, "dcgm_otel_power_usage_interval_p99");
    let labels = |s: &[(String, f64)]| s.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
    for family in [&max, &min, &count, &p99] {
        assert_eq!(labels(family), labels(&last), "{body}");
    }
    for (i, (l, v)) in last.iter().enumerate() {
        assert_eq!(count[i].1, 10.0, "{l}");
        assert!(min[i].1 <= *v && *v <= max[i].1, "{l}: {v}");
        if l.starts_with("gpu=\"0\"") {
            assert!(l.contains("pod=\"trainer-"), "{l}");
            assert!(*v == 250.0 || *v == 650.0, "{l}: {v}");
            assert_eq!((min[i].1, max[i].1, p99[i].1), (250.0, 650.0, 650.0), "{l}");
        }
    }
    assert!(body.contains("# HELP dcgm_otel_power_usage_interval_max Highest of the DCGM_FI_DEV_POWER_USAGE samples (W) since the previous collection, sampled every 100ms.\n# TYPE dcgm_otel_power_usage_interval_max gauge\n"), "{body}");
    // Utilization at 250 ms: four samples a collection.
    let util = samples(&body, "dcgm_otel_gpu_util_interval_samples");
    assert_eq!(util.len(), 2, "{body}");
    assert!(util.iter().all(|(_, v)| *v == 4.0), "{body}");
}

#[test]
fn nothing_new_without_a_distribution() {
    let e = start_square_wave(&[]);
    let body = scrape(e.port);
    assert!(body.contains("DCGM_FI_DEV_POWER_USAGE{"), "{body}");
    assert!(!body.contains("interval_"), "{body}");
}
