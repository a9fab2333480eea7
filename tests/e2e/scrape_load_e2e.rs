//! Scrapes never reach DCGM: the built binary reads the fake libdcgm while scrapers hit `/metrics` at
//! 50 requests a second (plain and gzip), and the fake's call log must show exactly one latest-values
//! read of every monitored entity per collection — however many scrapes came in between.
//!
//! The collections are counted without a clock: the interval is ten minutes, so the only collections
//! are the first one and those SIGHUP asks for (it re-reads the counters file and collects at once); the
//! test sends one, waits until the served `dcgm_otel_collects_total` says it ran, keeps scraping, and
//! sends the next. So the number of collections is known exactly, and so is what the call log must hold.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common::{self, get, get_with, terminate};
use crate::support::fake_lib::Fake;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Scrapes a second.
const RATE: u32 = 50;
/// Collections asked for with SIGHUP after the first one.
const EXTRA_COLLECTIONS: u64 = 4;
/// Scrapes between two collections (half a second at 50/s).
const SCRAPES_BETWEEN: u64 = 25;

/// The value of `name` (a series without labels, or `name{...}` as written) in a body.
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// What the scraper thread has seen: scrapes done and the newest `dcgm_otel_collects_total`.
#[derive(Default)]
struct Seen {
    scrapes: AtomicU64,
    collections: AtomicU64,
    failures: AtomicU64,
}

/// Scrape `/metrics` at [`RATE`] a second (every other one asking for gzip) until `stop`.
fn scraper(port: u16, seen: Arc<Seen>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let period = Duration::from_secs(1) / RATE;
        let mut next = Instant::now();
        let mut n = 0u64;
        while !stop.load(Ordering::Acquire) {
            let gzip = n % 2 == 1;
            let got = if gzip {
                get_with(port, "/metrics", &[("Accept-Encoding", "gzip")])
            } else {
                get(port, "/metrics")
            };
            match got {
                Ok(r) if r.status == 200 => {
                    if gzip {
                        assert_eq!(r.header("Content-Encoding"), Some("gzip"));
                    } else if let Some(c) =
                        value(&r.text(), "dcgm_otel_collects_total{source=\"dcgm\"}")
                    {
                        seen.collections.fetch_max(c as u64, Ordering::AcqRel);
                    }
                }
                _ => {
                    seen.failures.fetch_add(1, Ordering::AcqRel);
                }
            }
            seen.scrapes.fetch_add(1, Ordering::AcqRel);
            n += 1;
            next += period;
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
    })
}

/// Wait until `cond` holds (checked every 10 ms) or panic after `limit`.
fn wait_for(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Parse `key=value` words of a call-log line.
fn kv(line: &str) -> BTreeMap<&str, &str> {
    line.split(' ').filter_map(|w| w.split_once('=')).collect()
}

#[test]
fn scrapes_at_50_per_second_read_dcgm_once_per_collection() {
    let fake = Fake::new();
    let counters = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/counters/default-counters.csv")
        .display()
        .to_string();
    // Ten minutes: no collection comes from the clock while the test runs.
    let e = fake.start(&["-c", "600000", "-f", &counters], &[]);
    let seen = Arc::new(Seen::default());
    let stop = Arc::new(AtomicBool::new(false));
    let scraping = scraper(e.port, seen.clone(), stop.clone());
    let scrapes_past = |n: u64| {
        let from = seen.scrapes.load(Ordering::Acquire);
        wait_for(
            &format!("{n} more scrapes"),
            Duration::from_secs(60),
            || seen.scrapes.load(Ordering::Acquire) >= from + n,
        );
    };
    wait_for(
        "the first collection served",
        Duration::from_secs(20),
        || seen.collections.load(Ordering::Acquire) == 1,
    );
    scrapes_past(SCRAPES_BETWEEN);
    for k in 2..=1 + EXTRA_COLLECTIONS {
        common::signal(&e, "-HUP");
        wait_for(
            &format!("collection {k} after SIGHUP"),
            Duration::from_secs(20),
            || seen.collections.load(Ordering::Acquire) >= k,
        );
        scrapes_past(SCRAPES_BETWEEN);
    }
    stop.store(true, Ordering::Release);
    scraping.join().unwrap();
    let collections = seen.collections.load(Ordering::Acquire);
    let scrapes = seen.scrapes.load(Ordering::Acquire);
    assert_eq!(
        seen.failures.load(Ordering::Acquire),
        0,
        "scrapes that did not answer 200"
    );
    assert_eq!(
        collections,
        1 + EXTRA_COLLECTIONS,
        "one collection at start and one per SIGHUP"
    );
    let stderr = terminate(e);
    eprintln!("{scrapes} scrapes over {collections} collections");

    let calls = fake.calls();
    // Every monitored entity (GPU 0 and GPU 1's three MIG instances) read once per collection, in
    // non-live latest-values calls, whatever the scrapes did.
    let mut reads: BTreeMap<String, u64> = BTreeMap::new();
    let mut read_calls = 0u64;
    for c in &calls {
        let f = kv(c);
        if c.starts_with("dcgmEntitiesGetLatestValues ") && f["flags"] == "0" {
            read_calls += 1;
            for entity in f["entities"].split(',') {
                *reads.entry(entity.to_string()).or_default() += 1;
            }
        }
        assert!(
            !c.starts_with("dcgmEntityGetLatestValues "),
            "a read of one entity: {c}"
        );
    }
    let expected: BTreeMap<String, u64> = ["1:0", "4:8", "4:9", "4:10"]
        .iter()
        .map(|e| (e.to_string(), collections))
        .collect();
    assert_eq!(
        reads, expected,
        "latest-value reads per entity after {collections} collections and {scrapes} scrapes\n{stderr}"
    );
    // At most two calls a collection (GPUs and MIG instances ask for different fields).
    assert!(
        read_calls <= 2 * collections,
        "{read_calls} latest-values calls for {collections} collections"
    );
    // Nothing else between the first update and the teardown: no re-watch, no discovery.
    let first_update = calls
        .iter()
        .position(|c| c.starts_with("dcgmUpdateAllFields"))
        .unwrap();
    let teardown = calls
        .iter()
        .position(|c| c.starts_with("dcgmUnwatchFields"))
        .unwrap();
    for c in &calls[first_update + 1..teardown] {
        assert!(
            c.starts_with("dcgmEntitiesGetLatestValues ") && kv(c)["flags"] == "0",
            "a call between collections: {c}"
        );
    }
}
