//! The OTLP exporter against a collector under stress (`support::fault_collector`, gRPC and HTTP): how
//! the built binary's retries look from the collector's side. After a retryable answer the next
//! attempt waits for the backoff counted from the answer, however late the answer came; a collector
//! that accepts and never answers gets no back-to-back attempts; a delay the collector asks for
//! (gRPC `RetryInfo`, HTTP `Retry-After` in seconds or as an HTTP-date) is honoured from its answer,
//! and requests queued meanwhile do not shorten it. Also: each collection is exported exactly once
//! when the export interval is the collect interval, a partial success is one JSON log line with
//! one key per field, and a malformed gRPC failure (status details that are not base64) is a failed
//! export, retried, not the end of exporting.
//!
//! Timing is read from the collector's side and only as lower bounds with margins (an attempt must
//! not come earlier than the schedule allows; on a loaded machine it may come later).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::common;
use crate::support::fault_collector::{Attempt, FaultCollector, Reply, Signal, Throttle};
use crate::support::otlp::{attrs, Receiver as Sink};
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};

const WAIT: Duration = Duration::from_secs(60);

/// The exporter on the bare simulated fleet, pushing metrics only (no incident log records) to
/// `collector`, with `extra` flags.
fn exporter(collector: &FaultCollector, extra: &[&str]) -> common::Exporter {
    let url = collector.url();
    let mut args = vec![
        "--simulate",
        "--simulate-seed",
        "1",
        "--otlp-endpoint",
        &url,
        "--otlp-protocol",
        collector.protocol(),
        "--otlp-logs=false",
    ];
    args.extend(extra);
    common::start(&args, &[])
}

/// How long after `earlier`'s answer `later` arrived (zero when it came before the answer).
fn after_answer(earlier: &Attempt, later: &Attempt) -> Duration {
    let answered = earlier
        .answered
        .unwrap_or_else(|| panic!("attempt never answered: {earlier:?}"));
    later.arrived.saturating_duration_since(answered)
}

/// A retryable failure answered late (1.2 s, far past the first backoff step) is still followed by
/// the backoff: the next attempt comes no sooner than the shortest jittered delay (125 ms) after the
/// answer. Before: about 2 ms after it, while the log said `"retry_in_ms":229`.
#[test]
fn a_slow_failure_is_followed_by_the_backoff() {
    for collector in [FaultCollector::grpc(), FaultCollector::http()] {
        collector.script(
            Signal::Metrics,
            [Reply::slow_failure(Duration::from_millis(1200)); 3],
        );
        // Exports every 500 ms: new requests are queued while each failure is being answered.
        let _exporter = exporter(&collector, &["-c", "500"]);
        let got = collector.wait_for(Signal::Metrics, 4, WAIT);
        for (n, pair) in got.windows(2).take(3).enumerate() {
            let gap = after_answer(&pair[0], &pair[1]);
            assert!(
                gap >= Duration::from_millis(100),
                "{}: retry {} came {gap:?} after the failure's answer (backoff: at least 125 ms)",
                collector.protocol(),
                n + 1
            );
        }
    }
}

/// A collector that accepts the request and never answers: every attempt ends at the client's
/// timeout (1 s), and the next one waits for the backoff on top (125 ms + 250 + 500 + 1000 at the
/// least for the four gaps, with a 2 s export interval). Before: back to back, one per timeout.
#[test]
fn a_hung_collector_gets_no_back_to_back_attempts() {
    const TIMEOUT: Duration = Duration::from_millis(1000);
    for collector in [FaultCollector::grpc(), FaultCollector::http()] {
        collector.script(Signal::Metrics, [Reply::Hang; 4]);
        let _exporter = exporter(&collector, &["-c", "2000", "--otlp-timeout", "1000"]);
        let got = collector.wait_for(Signal::Metrics, 5, WAIT);
        let waits: Vec<Duration> = got
            .windows(2)
            .take(4)
            .map(|p| {
                p[1].arrived
                    .saturating_duration_since(p[0].arrived)
                    .saturating_sub(TIMEOUT)
            })
            .collect();
        let total: Duration = waits.iter().sum();
        assert!(
            total >= Duration::from_millis(1000),
            "{}: the attempts after four timeouts waited only {waits:?} beyond the timeout (backoff: at least 1.875 s in all)",
            collector.protocol()
        );
    }
}

/// A delay the collector asks for counts from its answer: 2 s asked for in an answer that took
/// 1.5 s, while new requests are queued every 200 ms, is 2 s after the answer. Before: 0.5 s after
/// it (the delay was counted from the send, and a queued request cut the wait short).
#[test]
fn a_requested_delay_counts_from_the_answer() {
    let throttle = Reply::throttle(
        Duration::from_millis(1500),
        Throttle::After(Duration::from_secs(2)),
    );
    for collector in [FaultCollector::grpc(), FaultCollector::http()] {
        collector.script(Signal::Metrics, [throttle, throttle]);
        let _exporter = exporter(&collector, &["-c", "200"]);
        let got = collector.wait_for(Signal::Metrics, 3, WAIT);
        for (n, pair) in got.windows(2).take(2).enumerate() {
            let gap = after_answer(&pair[0], &pair[1]);
            assert!(
                gap >= Duration::from_millis(1990),
                "{}: retry {} came {gap:?} after an answer asking for 2 s",
                collector.protocol(),
                n + 1
            );
        }
    }
}

/// `Retry-After` as an HTTP-date (RFC 9110 allows both forms): no attempt before that date. Before:
/// the date was ignored and the backoff (125–250 ms) used.
#[test]
fn a_retry_after_date_is_honoured() {
    let collector = FaultCollector::http();
    let throttle = Reply::throttle(
        Duration::from_millis(100),
        Throttle::HttpDate(Duration::from_secs(2)),
    );
    collector.script(Signal::Metrics, [throttle, throttle]);
    let _exporter = exporter(&collector, &["-c", "200"]);
    let got = collector.wait_for(Signal::Metrics, 3, WAIT);
    for pair in got.windows(2).take(2) {
        let date = pair[0].not_before.expect("an HTTP-date was sent");
        assert!(
            pair[1].arrived_wall >= date,
            "an attempt came {:?} before the Retry-After date",
            date.duration_since(pair[1].arrived_wall)
                .unwrap_or_default()
        );
    }
}

/// GPU 0's energy counter in a /metrics body (dump file).
fn energy_in_body(body: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\","))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// With the export interval equal to the collect interval (the default), every collection reaches
/// the collector, once. The collections are known from `--dump-enabled` (every collection's /metrics
/// body, named by its sequence number) and told apart by GPU 0's energy counter, which grows at every
/// collection. Before: the export tick raced the collection and 0–28 % of collections were never sent.
#[test]
fn each_collection_is_exported_once() {
    let sink = Sink::grpc(0, None);
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().display().to_string();
    let url = format!("http://{}", sink.addr);
    let exporter = common::start(
        &[
            "--simulate",
            "--simulate-seed",
            "1",
            "-c",
            "100",
            "--otlp-endpoint",
            &url,
            "--otlp-logs=false",
            "--dump-enabled",
            "--dump-directory",
            &dump,
            "--dump-compression=false",
        ],
        &[],
    );
    sink.wait_for(40, WAIT);
    common::terminate(exporter);
    // Collection (sequence number) → GPU 0's energy, from the dump files.
    let mut collections: BTreeMap<u64, f64> = BTreeMap::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let Some(seq) = name
            .strip_prefix("metrics-")
            .and_then(|n| n.strip_suffix(".prom"))
            .and_then(|n| n.rsplit('-').next()?.parse::<u64>().ok())
        else {
            continue;
        };
        let body = std::fs::read_to_string(dir.path().join(&name)).unwrap();
        collections.insert(seq, energy_in_body(&body).expect(&name));
    }
    // GPU 0's energy in each request the collector received.
    let sent: Vec<f64> = sink
        .requests()
        .iter()
        .flat_map(|req| &req.resource_metrics)
        .filter(|rm| {
            attrs(&rm.resource.as_ref().unwrap().attributes)
                .get("nvidia.gpu.index")
                .map(String::as_str)
                == Some("0")
        })
        .flat_map(|rm| rm.scope_metrics.iter().flat_map(|s| &s.metrics))
        .filter(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        .filter_map(|m| match &m.data {
            Some(Data::Sum(s)) => s.data_points.first(),
            _ => None,
        })
        .filter_map(|p| match p.value {
            Some(number_data_point::Value::AsInt(i)) => Some(i as f64),
            Some(number_data_point::Value::AsDouble(d)) => Some(d),
            None => None,
        })
        .collect();
    assert!(collections.len() >= 40, "{} dumps", collections.len());
    let missing: Vec<u64> = collections
        .iter()
        .filter(|(_, e)| !sent.contains(e))
        .map(|(seq, _)| *seq)
        .collect();
    let twice: Vec<u64> = collections
        .iter()
        .filter(|(_, e)| sent.iter().filter(|s| s == e).count() > 1)
        .map(|(seq, _)| *seq)
        .collect();
    assert_eq!(
        (missing, twice),
        (vec![], vec![]),
        "collections never exported, and exported twice, out of {}",
        collections.len()
    );
}

/// A partial success is one JSON log line with one key per field: the event's `message` once, the
/// collector's text under its own key, and for log records the count named as log records.
/// Before: two `"message"` keys (the text lost to JSON parsers), and `rejected_data_points` for logs.
#[test]
fn a_partial_success_is_one_json_line_with_one_key_per_field() {
    let collector = FaultCollector::http();
    collector.script(
        Signal::Metrics,
        [Reply::Accept {
            rejected: 3,
            message: "3 points had no unit",
        }],
    );
    collector.script(
        Signal::Logs,
        [Reply::Accept {
            rejected: 2,
            message: "2 records too old",
        }],
    );
    let scenario = common::fixtures_path("scenarios/incidents.yaml");
    let url = collector.url();
    let exporter = common::start(
        &[
            &format!("--simulate={scenario}"),
            "--simulate-seed",
            "1",
            "-c",
            "200",
            "--log-format",
            "json",
            "--otlp-endpoint",
            &url,
            "--otlp-protocol",
            "http/protobuf",
        ],
        &[],
    );
    collector.wait_for(Signal::Metrics, 1, WAIT);
    collector.wait_for(Signal::Logs, 1, WAIT);
    // The answers are logged once the sender has read them.
    let deadline = Instant::now() + Duration::from_secs(5);
    let answered = |signal| {
        collector
            .attempts()
            .iter()
            .any(|a| a.signal == signal && a.answered.is_some())
    };
    while !(answered(Signal::Metrics) && answered(Signal::Logs)) {
        assert!(Instant::now() < deadline, "no answer went out");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stderr = common::terminate(exporter);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("accepted the export only partly"))
        .collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    for line in lines {
        assert_eq!(
            line.matches("\"message\":").count(),
            1,
            "one message key: {line}"
        );
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            v["message"], "OTLP receiver accepted the export only partly",
            "{line}"
        );
        let (count_key, count, text) = if line.contains("records too old") {
            ("rejected_log_records", 2, "2 records too old")
        } else {
            ("rejected_data_points", 3, "3 points had no unit")
        };
        assert_eq!(v[count_key], count, "{line}");
        assert_eq!(v["receiver_message"], text, "{line}");
        if count_key == "rejected_log_records" {
            assert!(v.get("rejected_data_points").is_none(), "{line}");
        }
    }
}

/// A collector whose gRPC failure carries a `grpc-status-details-bin` that is not base64: tonic's
/// status parsing panics on it (`expect`), which before stopped the sender for good (no attempt after
/// the first). Now it is a failed export: retried, and the next answer is accepted.
#[test]
fn a_malformed_grpc_status_is_a_failed_export_not_the_end_of_exporting() {
    let collector = FaultCollector::grpc();
    collector.script(Signal::Metrics, [Reply::BadStatusDetails; 2]);
    let mut exporter = exporter(&collector, &["-c", "500"]);
    let got = collector.wait_for(Signal::Metrics, 4, WAIT);
    assert!(
        got.iter().skip(2).any(|a| a.reply == Reply::OK),
        "no export accepted after the malformed failures: {got:?}"
    );
    assert!(
        exporter.child.try_wait().unwrap().is_none(),
        "the exporter exited"
    );
    let body = common::scrape(exporter.port);
    let retries = body
        .lines()
        .find_map(|l| l.strip_prefix("dcgm_otel_otlp_retries_total{protocol=\"grpc\"} "))
        .and_then(|v| v.parse::<f64>().ok());
    assert!(
        retries.is_some_and(|r| r >= 2.0),
        "the two malformed failures are not counted as retries: {retries:?}"
    );
}
