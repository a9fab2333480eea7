//! The C ABI as a C caller sees it: a run on the simulated fleet through the entry points (the
//! requests decode as OTLP), SIGPIPE blocked in every thread the engine starts and the caller's own
//! mask left as it was, bad arguments refused with a status and a message, never a crash.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose
#![allow(unsafe_code)] // the tests play the C caller: raw pointers into and out of the entry points

mod common;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;

#[test]
fn a_collection_through_the_c_abi_is_an_otlp_request() {
    let engine = common::start(&["--simulate", "-c", "200", "-k=false"]).unwrap();
    let got = common::collect(engine, 10_000).unwrap();
    assert_eq!(got.seq, 1);
    let request = ExportMetricsServiceRequest::decode(&got.metrics[..]).unwrap();
    let points: usize = request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| match &m.data {
            Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Gauge(g)) => {
                g.data_points.len()
            }
            Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Sum(s)) => {
                s.data_points.len()
            }
            _ => 0,
        })
        .sum();
    assert_eq!(points as u64, got.data_points);
    // The next one is the next collection, not the same one again.
    let next = common::collect(engine, 10_000).unwrap();
    assert_eq!(next.seq, 2);
    assert_eq!(common::stop(engine, 5_000), (0, None));
    // Stopped: collect says so; a second stop does nothing.
    assert_eq!(
        common::collect(engine, 0).err(),
        Some((
            6,
            Some("the engine's collector thread has ended; stop and start the engine again".into())
        ))
    );
    assert_eq!(common::stop(engine, 5_000), (0, None));
    common::free(engine);
}

#[test]
fn every_engine_thread_blocks_sigpipe_and_the_callers_mask_is_kept() {
    // A thread of its own, so that its mask is this test's business only.
    let (tids, caller_blocks) = std::thread::spawn(|| {
        let me = unsafe { libc::gettid() }.to_string();
        assert!(!common::blocks_sigpipe(&me));
        let before: Vec<String> = common::threads().into_iter().map(|(t, _)| t).collect();
        let engine = common::start(&["--simulate", "-c", "200"]).unwrap();
        common::collect(engine, 10_000).unwrap();
        let started: Vec<(String, String)> = common::threads()
            .into_iter()
            .filter(|(t, _)| !before.contains(t))
            .collect();
        let blocked: Vec<(String, bool)> = started
            .iter()
            .map(|(t, name)| (name.clone(), common::blocks_sigpipe(t)))
            .collect();
        let caller = common::blocks_sigpipe(&me);
        assert_eq!(common::stop(engine, 5_000).0, 0);
        common::free(engine);
        (blocked, caller)
    })
    .join()
    .unwrap();
    let names: Vec<&str> = tids.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"collector"), "{names:?}");
    for (name, blocked) in &tids {
        assert!(blocked, "engine thread {name} does not block SIGPIPE");
    }
    assert!(!caller_blocks, "the caller's mask was changed");
}

#[test]
fn bad_arguments_are_a_status_and_a_message() {
    assert_eq!(
        common::start(&["--simulate", "-c", "soon"])
            .err()
            .map(|(rc, _)| rc),
        Some(2)
    );
    let mut out = std::ptr::null_mut();
    let mut message = std::ptr::null_mut();
    let rc = unsafe {
        dcgm_otel_engine::ffi::dcgm_otel_engine_start(std::ptr::null(), 2, &mut out, &mut message)
    };
    assert_eq!(rc, 1);
    assert!(out.is_null());
    let text = unsafe { std::ffi::CStr::from_ptr(message) }
        .to_string_lossy()
        .into_owned();
    unsafe { dcgm_otel_engine::ffi::dcgm_otel_string_free(message) };
    assert_eq!(text, "null pointer for the arguments or the handle");
    // A status without a message pointer is still a status.
    let rc = unsafe {
        dcgm_otel_engine::ffi::dcgm_otel_engine_ready(std::ptr::null(), std::ptr::null_mut())
    };
    assert_eq!(rc, 1);
}
