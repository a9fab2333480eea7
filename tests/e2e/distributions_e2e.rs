//! Sub-interval distributions (`--distribution`) on the simulated fleet, as a user scrapes them: a
//! scenario whose GPU 0 power is a known square wave (250 W / 650 W, 400 ms period) sampled every
//! 100 ms with a 1 s collect interval gives an interval max of 650, a min of 250 and ten samples,
//! labelled exactly like the field's own series (one per pod sharing the GPU), while the last-value
//! series shows one of the two levels. Over OTLP the same wave is an ExponentialHistogram point on the
//! GPU's Resource (delta: the interval's; cumulative: every sample since the start). Without `--distribution` nothing new appears (the golden files
//! of `simulated_e2e` stay as they are).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::fake_lib::Fake;
use crate::support::{common, otlp};

use std::time::{Duration, Instant};

use common::{fixtures_path, scrape, start};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, ExponentialHistogramDataPoint,
};
use otlp::Receiver;

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
    start_square_wave_with(extra, &[])
}

fn start_square_wave_with(extra: &[&str], env: &[(&str, &str)]) -> common::Exporter {
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
    start(&args, env)
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
    // GPU 0 shared by two pods (one series, as the field's own), and GPU 1's two MIG instances.
    assert_eq!(last.len(), 3, "{body}");
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
    // Power is the board's: GPU 1's two MIG instances show the same samples.
    let board: Vec<f64> = max
        .iter()
        .filter(|(l, _)| l.starts_with("gpu=\"1\""))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(board.len(), 2, "{body}");
    assert_eq!(board[0], board[1], "{body}");
    assert!(body.contains("# HELP dcgm_otel_power_usage_interval_max Highest of the DCGM_FI_DEV_POWER_USAGE samples (W) since the previous collection, sampled every 100ms.\n# TYPE dcgm_otel_power_usage_interval_max gauge\n"), "{body}");
    // Utilization at 250 ms: four samples a collection.
    let util = samples(&body, "dcgm_otel_gpu_util_interval_samples");
    assert_eq!(util.len(), 1, "{body}");
    assert!(util.iter().all(|(_, v)| *v == 4.0), "{body}");
}

#[test]
fn nothing_new_without_a_distribution() {
    // An empty variable (as templates set it) is no distribution.
    let e = start_square_wave_with(&[], &[("DCGM_OTEL_DISTRIBUTIONS", "")]);
    let body = scrape(e.port);
    assert!(body.contains("DCGM_FI_DEV_POWER_USAGE{"), "{body}");
    assert!(!body.contains("interval_"), "{body}");
}

/// (resource attributes, the power gauge's value, the power histogram's point) of every Resource
/// carrying either.
type PowerView = Vec<(
    std::collections::BTreeMap<String, String>,
    Vec<f64>,
    Vec<ExponentialHistogramDataPoint>,
    i32,
)>;

fn power_view(req: &ExportMetricsServiceRequest) -> PowerView {
    let mut out = Vec::new();
    for rm in &req.resource_metrics {
        let (mut gauge, mut hist, mut temporality) = (Vec::new(), Vec::new(), 0);
        for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
            match (&m.data, m.name.as_str()) {
                (Some(Data::Gauge(g)), "DCGM_FI_DEV_POWER_USAGE") => {
                    gauge.extend(g.data_points.iter().map(|p| match p.value {
                        Some(number_data_point::Value::AsDouble(v)) => v,
                        Some(number_data_point::Value::AsInt(v)) => v as f64,
                        None => f64::NAN,
                    }));
                }
                (Some(Data::ExponentialHistogram(h)), "DCGM_FI_DEV_POWER_USAGE.distribution") => {
                    assert_eq!(m.unit, "W");
                    hist.extend(h.data_points.iter().cloned());
                    temporality = h.aggregation_temporality;
                }
                _ => {}
            }
        }
        if !gauge.is_empty() || !hist.is_empty() {
            let attrs = otlp::attrs(&rm.resource.as_ref().unwrap().attributes);
            out.push((attrs, gauge, hist, temporality));
        }
    }
    out
}

fn start_with_receiver(receiver: &Receiver, temporality: &str) -> common::Exporter {
    start_square_wave(&[
        "--distribution",
        "DCGM_FI_DEV_POWER_USAGE@100ms",
        "--otlp-endpoint",
        &receiver.url(),
        "--otlp-temporality",
        temporality,
    ])
}

#[test]
fn otlp_delta_histograms_hold_each_interval() {
    let receiver = Receiver::grpc(0, None);
    let _e = start_with_receiver(&receiver, "delta");
    let view = power_view(&receiver.nth_or_later(2));
    // GPU 0 and GPU 1's board (read once, by one of its two MIG instances): one point each.
    let points: Vec<_> = view.iter().flat_map(|(_, _, h, _)| h).collect();
    assert_eq!(points.len(), 2, "{view:#?}");
    let mut square = 0;
    for (attrs, gauge, hist, temporality) in &view {
        assert_eq!(*temporality, AggregationTemporality::Delta as i32);
        assert_eq!((gauge.len(), hist.len()), (1, 1), "{attrs:?}");
        let (last, p) = (gauge[0], &hist[0]);
        assert_eq!(p.count, 10, "{attrs:?}");
        let (min, max) = (p.min.unwrap(), p.max.unwrap());
        assert!(min <= last && last <= max, "{attrs:?}: {min} {last} {max}");
        let buckets = p.positive.as_ref().unwrap();
        assert_eq!(buckets.bucket_counts.iter().sum::<u64>() + p.zero_count, 10);
        assert!(p.start_time_unix_nano < p.time_unix_nano);
        if min == 250.0 {
            square += 1;
            assert_eq!((max, p.sum), (650.0, Some(4500.0)), "{attrs:?}");
            assert!(last == 250.0 || last == 650.0, "{last}");
            // 250 W and 650 W at scale 4: buckets 127 and 149.
            assert_eq!((p.scale, buckets.offset), (4, 127));
            assert_eq!(buckets.bucket_counts.len(), 23);
        }
    }
    assert_eq!(square, 1, "{view:#?}");
}

#[test]
fn otlp_cumulative_histograms_add_up_since_the_start() {
    let receiver = Receiver::grpc(0, None);
    let _e = start_with_receiver(&receiver, "cumulative");
    let first = power_view(&receiver.first());
    let later = power_view(&receiver.nth_or_later(3));
    let count = |v: &PowerView| -> Vec<u64> {
        v.iter()
            .flat_map(|(_, _, h, _)| h)
            .map(|p| p.count)
            .collect()
    };
    let (a, b) = (count(&first), count(&later));
    assert_eq!(a.len(), 2, "{first:#?}");
    assert!(a.iter().all(|c| c % 10 == 0), "{a:?}");
    assert!(b.iter().zip(&a).all(|(b, a)| b > a), "{a:?} then {b:?}");
    assert!(later
        .iter()
        .all(|(_, _, _, t)| *t == AggregationTemporality::Cumulative as i32));
}

// ---------------------------------------------------------------------------------------------------
// Through the fake libdcgm: the DCGM source watches the sampled field at 100 ms and reads every
// sample with dcgmGetValuesSince_v2; the fake serves the scenario's square wave at the watch's
// frequency (README of tests/fake-libdcgm).

fn start_fake(fake: &Fake, scenario: &str, extra: &[&str], faults: &str) -> common::Exporter {
    let scenario = fixtures_path(scenario);
    let csv = fixtures_path("counters/power-util.csv");
    let mut args = vec![
        "-f",
        &csv,
        "-c",
        "1000",
        "--no-self-metrics",
        "--distribution",
        "DCGM_FI_DEV_POWER_USAGE@100ms",
    ];
    args.extend_from_slice(extra);
    fake.start(
        &args,
        &[
            ("FAKE_DCGM_SCENARIO", scenario.as_str()),
            ("FAKE_DCGM_FAULTS", faults),
        ],
    )
}

/// Scrape until the body holds `needle` (a collection with samples has run).
fn scrape_until(port: u16, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = scrape(port);
        if body.contains(needle) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "no {needle} within 30 s:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `samples=` of every `dcgmGetValuesSince_v2` call on a sampled-fields field group (not the
/// incident history's) in the fake's log lines `calls`.
fn served_in(calls: &[String]) -> Vec<u64> {
    let field = |l: &str, key: &str| -> String {
        let v = l.split(&format!(" {key}=")).nth(1).unwrap();
        v.split(' ').next().unwrap().to_string()
    };
    let sampled: Vec<String> = calls
        .iter()
        .filter(|l| l.starts_with("dcgmFieldGroupCreate ") && l.contains("-sampled-fields-"))
        .map(|l| field(l, "fieldGroup"))
        .collect();
    calls
        .iter()
        .filter(|l| l.starts_with("dcgmGetValuesSince_v2 "))
        .filter(|l| sampled.contains(&field(l, "fieldGroup")))
        .map(|l| field(l, "samples").parse().unwrap())
        .collect()
}

fn served(fake: &Fake) -> Vec<u64> {
    served_in(&fake.calls())
}

#[test]
fn through_libdcgm_a_square_wave_gives_its_levels_and_counts() {
    let fake = Fake::new();
    let e = start_fake(&fake, "scenarios/power-square-wave.yaml", &[], "");
    let body = scrape_until(e.port, "dcgm_otel_power_usage_interval_samples{");
    let last = samples(&body, "DCGM_FI_DEV_POWER_USAGE");
    let max = samples(&body, "dcgm_otel_power_usage_interval_max");
    let min = samples(&body, "dcgm_otel_power_usage_interval_min");
    let count = samples(&body, "dcgm_otel_power_usage_interval_samples");
    // GPU 0, and GPU 1 through its two MIG instances.
    assert_eq!(last.len(), 3, "{body}");
    let labels = |s: &[(String, f64)]| s.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
    for family in [&max, &min, &count] {
        assert_eq!(labels(family), labels(&last), "{body}");
    }
    for (i, (l, v)) in last.iter().enumerate() {
        assert_eq!(count[i].1, 10.0, "{l}");
        if l.starts_with("gpu=\"0\"") {
            assert!(*v == 250.0 || *v == 650.0, "{l}: {v}");
            assert_eq!((min[i].1, max[i].1), (250.0, 650.0), "{l}");
        } else {
            // No waveform: every sample is the fleet's value of the collection.
            assert_eq!((min[i].1, max[i].1), (*v, *v), "{l}");
        }
    }
    // Its own group and field group, watched at 100 ms; one values-since call per collection.
    let calls = fake.calls();
    let watch = calls
        .iter()
        .find(|l| l.starts_with("dcgmWatchFields ") && l.contains(" freq=100000 "))
        .unwrap_or_else(|| panic!("no 100 ms watch in {calls:#?}"));
    assert!(
        watch.contains(" maxKeepAge=3 maxKeepSamples=31 "),
        "{watch}"
    );
    assert!(calls
        .iter()
        .any(|l| l.starts_with("dcgmFieldGroupCreate ")
            && l.contains("-sampled-fields-0 fields=155 ")));
    assert!(served(&fake).contains(&30), "{calls:#?}");
}

#[test]
fn through_libdcgm_otlp_histograms_hold_the_wave() {
    let fake = Fake::new();
    let receiver = Receiver::grpc(0, None);
    let url = receiver.url();
    let _e = start_fake(
        &fake,
        "scenarios/power-square-wave.yaml",
        &["--otlp-endpoint", &url, "--otlp-temporality", "delta"],
        "",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let view = loop {
        let view = power_view(&receiver.nth_or_later(1));
        if view.iter().any(|(_, _, h, _)| !h.is_empty()) {
            break view;
        }
        assert!(Instant::now() < deadline, "no histogram within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut square = 0;
    for (attrs, gauge, hist, _) in &view {
        for p in hist {
            assert_eq!(p.count, 10, "{attrs:?}");
            let (min, max) = (p.min.unwrap(), p.max.unwrap());
            assert!(min <= gauge[0] && gauge[0] <= max, "{attrs:?}");
            if min == 250.0 {
                square += 1;
                assert_eq!((max, p.sum), (650.0, Some(4500.0)), "{attrs:?}");
            }
        }
    }
    assert_eq!(square, 1, "{view:#?}");
}

#[test]
fn through_libdcgm_a_reconnect_loses_and_repeats_no_sample() {
    let fake = Fake::new();
    let receiver = Receiver::grpc(0, None);
    let url = receiver.url();
    // The host engine goes away after the 4th poll; it stayed up (the link dropped), so it still
    // holds the history a careless reader would fetch again.
    let e = start_fake(
        &fake,
        "scenarios/power-square-wave-1gpu.yaml",
        &["--otlp-endpoint", &url, "--otlp-temporality", "cumulative"],
        "disconnect_after_polls=4,down_ms=500,history_survives=1",
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    // Wait for three collections with samples after the reconnect.
    loop {
        let calls = fake.calls();
        let lost = calls.iter().position(|l| l.contains("rc=-21"));
        if lost.is_some_and(|at| served_in(&calls[at..]).iter().filter(|n| **n == 10).count() >= 3)
        {
            break;
        }
        assert!(Instant::now() < deadline, "{calls:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let stderr = common::terminate(e);
    assert!(stderr.contains("lost the DCGM host engine"), "{stderr}");
    let served = served(&fake);
    // Every call served the samples since the previous one only: ten per collection (none at the
    // first read, none right after the reconnect, when no time has passed for the engine).
    assert!(served.iter().all(|n| *n == 0 || *n == 10), "{served:?}");
    let total: u64 = served.iter().sum();
    let counts: Vec<u64> = receiver
        .requests()
        .iter()
        .flat_map(power_view)
        .flat_map(|(_, _, h, _)| h)
        .map(|p| p.count)
        .collect();
    let last = *counts.last().unwrap();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    // The cumulative count is everything served (the last collection may not have been pushed).
    assert!(
        last == total || last + 10 == total,
        "{last} of {total}: {served:?} {counts:?}"
    );
}
