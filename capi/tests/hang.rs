//! A DCGM call that hangs does not hold the caller: on the fake libdcgm with a poll that blocks for a
//! minute (`FAKE_DCGM_FAULTS=hang_ms=60000@2`), `stop` returns `DCGM_OTEL_STOP_TIMED_OUT` when its own
//! timeout is up, and `collect` keeps answering within its wait meanwhile. Its own test binary: the
//! fake libdcgm is process-global and reads its faults from the environment.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose
#![allow(unsafe_code)] // the tests play the C caller: raw pointers into and out of the entry points

mod common;

use std::time::{Duration, Instant};

#[test]
fn a_hung_dcgm_call_does_not_block_stop_beyond_its_timeout() {
    let so = common::fake_libdcgm();
    let dir = std::env::temp_dir().join(format!("dcgm-otel-capi-hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("calls.log");
    std::env::set_var("FAKE_DCGM_FAULTS", "hang_ms=60000@2");
    std::env::set_var("FAKE_DCGM_CALL_LOG", &log);
    let library = so.display().to_string();
    let engine = common::start(&["--dcgm-library", &library, "-c", "200"]).unwrap();
    assert!(common::collect(engine, 10_000).unwrap().data_points > 0);
    // Until the second poll hangs.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("hang begins")
    {
        assert!(Instant::now() < deadline, "the fake libdcgm never hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    // collect answers within its wait (nothing new: the collection hangs).
    assert_eq!(common::collect(engine, 300).unwrap().metrics.len(), 0);
    let (rc, message) = common::stop(engine, 1_000);
    assert_eq!(rc, 5, "{message:?}");
    assert!(message
        .unwrap()
        .starts_with("the collector did not stop within 1s"),);
    // The handle is freed without waiting for the hung call (its thread is left behind).
    common::free(engine);
    let _ = std::fs::remove_dir_all(&dir);
}
