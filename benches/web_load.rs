//! Measurements, not checks (no timing assertions): how fast the built `dcgm-otel` serves :9400 under
//! the hostile loads that `tests/e2e/web_security.rs` checks for behaviour only (issue 40: the figures
//! those tests used to assert or print moved here).
//!
//! - `slowloris`: scrape latency beside 500 slowloris connections (one header byte per connection per
//!   second), against the same scrapes with no crowd in the same run (the baseline), and the time from
//!   SIGTERM to exit with the 500 connections still open.
//! - `burst`: 1,000 scrapes sent at once: how many get 200 and 503, the 200s' latency, peak RSS.
//!
//! `dcgm-otel --simulate -c 500` (the default fleet), every client on 127.0.0.1, sharing the machine's
//! cores with the exporter. Run: `cargo bench --bench web_load` (30 s of scrapes per side), `-- slowloris`
//! or `-- burst` for one, `-- --smoke` (3 s: proves it runs). The figures are in docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{ms, Stats};
use support::common::{get, signal, start, Exporter};

const SCRAPE: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// One scrape on a new connection: its time and whether it was a 200.
fn timed_scrape(port: u16) -> (Duration, bool) {
    let t = Instant::now();
    let mut c = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    c.write_all(SCRAPE).unwrap();
    let mut body = Vec::new();
    let _ = c.read_to_end(&mut body);
    (t.elapsed(), body.starts_with(b"HTTP/1.1 200"))
}

fn line(label: &str, st: &Stats) {
    println!(
        "{label:<52} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  scrapes {:>4}",
        ms(st.median),
        ms(st.p99),
        ms(st.max),
        st.runs
    );
}

/// Scrapes every 250 ms for `length`; `tick` runs before each (once a second it feeds the crowd).
fn scrapes_for(port: u16, length: Duration, mut tick: impl FnMut(Duration)) -> Stats {
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < length {
        tick(started.elapsed());
        let (took, ok) = timed_scrape(port);
        assert!(ok, "a scrape was not answered 200");
        samples.push(took);
        std::thread::sleep(Duration::from_millis(250));
    }
    Stats::from_samples(samples)
}

fn slowloris(length: Duration) {
    let mut ex: Exporter = start(
        &[
            "--simulate",
            "-c",
            "500",
            "--web-max-client-connections",
            "1024",
            "--web-read-timeout",
            "600s",
        ],
        &[],
    );
    let port = ex.port;
    let alone = scrapes_for(port, length, |_| {});
    let mut crowd: Vec<TcpStream> = (0..500)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    let request = b"GET /metrics HTTP/1.1\r\nHost: slowloris\r\nX-Pad: aaaaaaaaaa";
    let mut sent = 0usize;
    let beside = scrapes_for(port, length, |elapsed| {
        if elapsed >= Duration::from_secs(sent as u64) {
            let i = sent % request.len();
            for c in &mut crowd {
                let _ = c.write_all(&request[i..i + 1]);
            }
            sent += 1;
        }
    });
    line("slowloris: scrapes alone (baseline)", &alone);
    line(
        "slowloris: beside 500 connections, 1 header byte/s",
        &beside,
    );
    println!(
        "slowloris: beside / alone: p50 {:.2}x, p99 {:.2}x",
        ms(beside.median) / ms(alone.median).max(1e-9),
        ms(beside.p99) / ms(alone.p99).max(1e-9)
    );
    let t = Instant::now();
    signal(&ex, "-TERM");
    let status = loop {
        if let Some(st) = ex.child.try_wait().expect("wait") {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    println!(
        "slowloris: SIGTERM to exit with the 500 connections open: {:.0} ms ({status})",
        ms(t.elapsed())
    );
    drop(crowd);
}

fn rss_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn burst(rounds: usize) {
    let ex = start(
        &[
            "--simulate",
            "-c",
            "500",
            "--web-max-client-connections",
            "1024",
        ],
        &[],
    );
    let port = ex.port;
    let pid = ex.child.id();
    let rss_before = rss_kib(pid, "VmRSS:");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for round in 1..=rounds {
        let results: Vec<Option<(u16, Duration)>> = rt.block_on(async move {
            let gate = std::sync::Arc::new(tokio::sync::Barrier::new(1000));
            let tasks: Vec<_> = (0..1000)
                .map(|_| {
                    let gate = gate.clone();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        gate.wait().await;
                        let t = Instant::now();
                        let mut c = tokio::net::TcpStream::connect(("127.0.0.1", port))
                            .await
                            .ok()?;
                        c.write_all(SCRAPE).await.ok()?;
                        let mut out = Vec::new();
                        c.read_to_end(&mut out).await.ok()?;
                        let code = std::str::from_utf8(&out[..out.len().min(12)])
                            .ok()?
                            .split_whitespace()
                            .nth(1)?
                            .parse()
                            .ok()?;
                        Some((code, t.elapsed()))
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.ok().flatten());
            }
            out
        });
        let ok: Vec<Duration> = results
            .iter()
            .flatten()
            .filter(|(c, _)| *c == 200)
            .map(|(_, d)| *d)
            .collect();
        let busy = results.iter().flatten().filter(|(c, _)| *c == 503).count();
        let other = results.len() - ok.len() - busy;
        let st = Stats::from_samples(ok);
        println!(
            "burst {round}: 1000 concurrent scrapes: {} x 200, {busy} x 503, {other} other; 200s p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            st.runs,
            ms(st.median),
            ms(st.p99),
            ms(st.max)
        );
    }
    println!(
        "burst: RSS {rss_before} KiB before, {} KiB after, peak {} KiB",
        rss_kib(pid, "VmRSS:"),
        rss_kib(pid, "VmHWM:")
    );
    assert_eq!(get(port, "/metrics").unwrap().status, 200);
}

fn main() {
    let smoke = common::smoke();
    if common::selected("slowloris") {
        slowloris(Duration::from_secs(if smoke { 3 } else { 30 }));
    }
    if common::selected("burst") {
        burst(if smoke { 1 } else { 5 });
    }
}
