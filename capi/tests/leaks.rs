//! Starting and stopping engines leaves nothing behind: after two start/collect/stop/free rounds the
//! process has the threads it had before (every engine thread ends with its engine), and twenty more
//! rounds do not grow its memory.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose
#![allow(unsafe_code)] // the tests play the C caller: raw pointers into and out of the entry points

mod common;

use std::time::{Duration, Instant};

fn round() {
    let engine = common::start(&["--simulate", "-c", "100"]).unwrap();
    common::collect(engine, 10_000).unwrap();
    common::collect(engine, 10_000).unwrap();
    assert_eq!(common::stop(engine, 5_000).0, 0);
    common::free(engine);
}

/// The process's threads once the count has settled to `want` (or the last count after 10 s).
fn threads_settle_to(want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = common::threads().len();
        if n == want || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn start_stop_rounds_leak_no_thread_and_no_memory() {
    let baseline = common::threads().len();
    round();
    round();
    let after = threads_settle_to(baseline);
    assert_eq!(after, baseline, "threads left: {:?}", common::threads());
    // Memory: the first rounds warm the allocator and the lazily built tables; after that, rounds
    // must not add up (a leak of one engine's state would be megabytes per round).
    for _ in 0..5 {
        round();
    }
    let warm = rss_kib();
    for _ in 0..20 {
        round();
    }
    let grown = rss_kib().saturating_sub(warm);
    assert!(grown < 16 * 1024, "RSS grew by {grown} KiB over 20 rounds");
    assert_eq!(threads_settle_to(baseline), baseline);
}
