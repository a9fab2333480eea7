//! The engine library ([`dcgm_otel::engine`]) returns what the binary pushes: for the same flags and
//! the same simulated fleet, the request of its first collection equals the first request the built
//! binary sends over OTLP gRPC (timestamps aside: the two runs start at different instants), in each
//! naming mode the collector receiver offers; and its incident log records are the binary's, in order.
//! Each test runs in a process of its own ([`own_process`]): the engine reads `NODE_NAME` from its
//! process's environment, set to the binary's (`test-node`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use std::time::Duration;

use crate::support::otlp::{attrs, Receiver as Sink};
use crate::support::{common, own_process};

use dcgm_otel::engine::{Engine, EngineOptions};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

/// Every timestamp of a metrics request set to 0.
fn without_times(mut req: ExportMetricsServiceRequest) -> ExportMetricsServiceRequest {
    for m in req
        .resource_metrics
        .iter_mut()
        .flat_map(|r| &mut r.scope_metrics)
        .flat_map(|s| &mut s.metrics)
    {
        match &mut m.data {
            Some(Data::Gauge(g)) => g.data_points.iter_mut().for_each(|p| {
                p.time_unix_nano = 0;
                p.start_time_unix_nano = 0;
            }),
            Some(Data::Sum(s)) => s.data_points.iter_mut().for_each(|p| {
                p.time_unix_nano = 0;
                p.start_time_unix_nano = 0;
            }),
            Some(Data::Histogram(h)) => h.data_points.iter_mut().for_each(|p| {
                p.time_unix_nano = 0;
                p.start_time_unix_nano = 0;
            }),
            Some(Data::ExponentialHistogram(h)) => h.data_points.iter_mut().for_each(|p| {
                p.time_unix_nano = 0;
                p.start_time_unix_nano = 0;
            }),
            Some(Data::Summary(s)) => s.data_points.iter_mut().for_each(|p| {
                p.time_unix_nano = 0;
                p.start_time_unix_nano = 0;
            }),
            None => {}
        }
    }
    req
}

/// The engine's first collection for `flags`.
fn engine_first(flags: &[&str]) -> ExportMetricsServiceRequest {
    let engine = Engine::start(EngineOptions::from_args(flags.iter().copied()).unwrap()).unwrap();
    let got = engine.collect(Duration::from_secs(30)).unwrap();
    engine.stop(Duration::from_secs(10)).unwrap();
    assert_eq!(got.seq, 1);
    ExportMetricsServiceRequest::decode(&got.metrics[..]).unwrap()
}

/// The binary's first request for `flags`, pushed over OTLP gRPC.
fn binary_first(flags: &[&str]) -> ExportMetricsServiceRequest {
    let sink = Sink::grpc(0, None);
    let endpoint = format!("http://{}", sink.addr);
    let mut args = flags.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let exporter = common::start(&args, &[]);
    let first = sink.first();
    drop(exporter);
    first
}

/// The environment the binary gets from [`common::start`], for the engine in this process.
fn as_the_binary() {
    std::env::set_var("NODE_NAME", "test-node");
}

fn same_first_collection(flags: &[&str]) {
    as_the_binary();
    let from_engine = without_times(engine_first(flags));
    let from_binary = without_times(binary_first(flags));
    assert!(!from_engine.resource_metrics.is_empty());
    assert_eq!(from_engine, from_binary, "flags {flags:?}");
}

#[test]
fn the_engines_collection_is_the_binarys_request() {
    own_process::run(
        concat!(
            module_path!(),
            "::the_engines_collection_is_the_binarys_request"
        ),
        || {
            // The simulated node with its pods (the Kubernetes attribution), DCGM names.
            same_first_collection(&["--simulate", "--simulate-seed", "1", "-c", "60000", "-k"]);
        },
    );
}

#[test]
fn the_engines_collection_is_the_binarys_request_in_semconv_host_mode() {
    own_process::run(
        concat!(
            module_path!(),
            "::the_engines_collection_is_the_binarys_request_in_semconv_host_mode"
        ),
        semconv_host_mode,
    );
}

fn semconv_host_mode() {
    same_first_collection(&[
        "--simulate=dgx-h100-mig",
        "-k=false",
        "-c",
        "60000",
        "--otel-metric-names",
        "semconv",
        "--otel-resource-mode",
        "host",
        "--distribution",
        "DCGM_FI_DEV_POWER_USAGE@100ms",
    ]);
}

/// A log record without its times.
fn record(mut r: LogRecord) -> LogRecord {
    r.time_unix_nano = 0;
    r.observed_time_unix_nano = 0;
    r
}

#[test]
fn the_engines_incident_records_are_the_binarys() {
    own_process::run(
        concat!(
            module_path!(),
            "::the_engines_incident_records_are_the_binarys"
        ),
        incident_records,
    );
}

fn incident_records() {
    as_the_binary();
    let flags = ["--simulate=incidents", "-c", "200", "-k=false"];
    let engine = Engine::start(EngineOptions::from_args(flags).unwrap()).unwrap();
    let mut records = Vec::new();
    // The scenario's first events come within its first collections.
    while records.len() < 3 {
        let got = engine.collect(Duration::from_secs(30)).unwrap();
        if got.logs.is_empty() {
            continue;
        }
        let req = ExportLogsServiceRequest::decode(&got.logs[..]).unwrap();
        for rl in req.resource_logs {
            let res = attrs(&rl.resource.unwrap().attributes);
            for r in rl.scope_logs.into_iter().flat_map(|s| s.log_records) {
                records.push((res.clone(), record(r)));
            }
        }
    }
    engine.stop(Duration::from_secs(10)).unwrap();
    let sink = Sink::grpc(0, None);
    let endpoint = format!("http://{}", sink.addr);
    let mut args = flags.to_vec();
    args.extend(["--otlp-endpoint", &endpoint]);
    let exporter = common::start(&args, &[]);
    let sent: Vec<_> = sink
        .wait_for_records(records.len())
        .into_iter()
        .take(records.len())
        .map(|(res, r)| (res, record(r)))
        .collect();
    drop(exporter);
    assert_eq!(records, sent);
}
