//! The alerting rules (`prometheus/rules/`) tested on what the exporter really serves, not on series typed
//! by hand: this test runs `dcgm-otel --simulate=tests/fixtures/scenarios/alerts.yaml` (a held throttle, a
//! 15 s throttle blip, an XID storm, a failing and a warning health watch), records one scrape per collection, and writes the recording as the
//! `input_series` of a promtool test whose expected alerts are `tests/rules/recorded.expected.yml`. Then it
//! runs `promtool test rules` on that fresh recording, and checks that the committed recording
//! (`tests/rules/recorded.test.yml`, which `tests/run-all.sh` tests with the other rule tests) has the same
//! series. `UPDATE_GOLDEN=1 cargo nextest run --test e2e rules_recorded` rewrites the committed recording.
//!
//! Time is compressed 75 times: the exporter collects every 200 ms and each collection is written as one
//! 15 s scrape (the compose stack's scrape interval); its windows are 4000 ms, 20 collections, which is
//! dcgm-exporter's default 300000 ms window at a 15 s interval. The counters are the shipped
//! `deploy/counters/alerts.csv` without `DCGM_FI_DEV_CLOCKS_EVENT_REASONS`, so the thermal alert can only
//! fire from `DCGM_EXP_CLOCK_EVENTS_COUNT`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::{common, peers};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{fixtures_path, get, in_ci, start};

/// Collections recorded: 18 minutes of 15 s scrapes.
const COLLECTIONS: usize = 72;
const INTERVAL_MS: &str = "200";
/// 20 collections, as 300 s are 20 scrapes of 15 s.
const WINDOW_MS: &str = "4000";
const JOB: &str = "job=\"dcgm-otel\",instance=\"gpu-node-1:9400\",";
/// The families the rules under test read.
const RECORDED: [&str; 5] = [
    "DCGM_EXP_XID_",
    "DCGM_EXP_CLOCK_",
    "DCGM_EXP_GPU_HEALTH_STATUS{",
    "DCGM_FI_DEV_XID_ERRORS{",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS{",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped alert counters without the clock-event bitmask row.
fn counters(dir: &Path) -> String {
    let csv = std::fs::read_to_string(root().join("deploy/counters/alerts.csv")).unwrap();
    let kept: String = csv
        .lines()
        .filter(|l| !l.starts_with("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(kept, csv, "alerts.csv lost its bitmask row");
    let path = dir.join("counters.csv");
    std::fs::write(&path, kept).unwrap();
    path.display().to_string()
}

/// The value of the first sample line of `name` (no labels).
fn self_metric(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

/// One body per collection, by collection number (1..=COLLECTIONS): series → value. The bodies are
/// the exporter's own debug dump (`--dump-enabled`: every collection's /metrics body, written as it is
/// made), so none is missed however late a scrape would have come on a loaded machine; a collection
/// missing from the dump (its writer still busy with the one before, counted in
/// `dcgm_otel_dump_skipped_total`) fails the recording.
fn record() -> Vec<Option<BTreeMap<String, String>>> {
    let dir = tempfile::tempdir().unwrap();
    let csv = counters(dir.path());
    let dump = dir.path().join("dump");
    let scenario = format!("--simulate={}", fixtures_path("scenarios/alerts.yaml"));
    let e = start(
        &[
            &scenario,
            "-f",
            &csv,
            "-c",
            INTERVAL_MS,
            "-x",
            WINDOW_MS,
            "--clock-events-count-window-size",
            WINDOW_MS,
            "--dump-enabled",
            "--dump-directory",
            dump.to_str().unwrap(),
            "--dump-compression=false",
        ],
        &[("NODE_NAME", "gpu-node-1")],
    );
    // A deadline on the condition (COLLECTIONS collections dumped), generous for a loaded machine.
    let started = Instant::now();
    let bodies = loop {
        let bodies = dumped_bodies(&dump);
        let newest = bodies
            .iter()
            .filter_map(|b| self_metric(b, "dcgm_otel_collects_total"))
            .fold(0.0, f64::max) as usize;
        if newest >= COLLECTIONS {
            break bodies;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no {COLLECTIONS} collections in five minutes (newest {newest})"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let skipped = self_metric(
        &get(e.port, "/metrics").unwrap().text(),
        "dcgm_otel_dump_skipped_total",
    );
    drop(e);
    let mut out: Vec<Option<BTreeMap<String, String>>> = vec![None; COLLECTIONS + 1];
    for body in bodies {
        let n = self_metric(&body, "dcgm_otel_collects_total").unwrap_or(0.0) as usize;
        if !(1..=COLLECTIONS).contains(&n) {
            continue;
        }
        assert!(out[n].is_none(), "collection {n} dumped twice");
        let series = body
            .lines()
            .filter(|l| RECORDED.iter().any(|p| l.starts_with(p)))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (name, labels) = series.split_once('{')?;
                Some((format!("{name}{{{JOB}{labels}"), value.to_string()))
            })
            .collect();
        out[n] = Some(series);
    }
    let missing: Vec<usize> = (1..=COLLECTIONS).filter(|n| out[*n].is_none()).collect();
    assert!(
        missing.is_empty(),
        "collections {missing:?} not dumped (dcgm_otel_dump_skipped_total {skipped:?})"
    );
    out
}

/// The bodies `--dump-enabled --dump-compression=false` wrote into `dir` (`metrics-<time>-<n>.prom`).
fn dumped_bodies(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_name()?.to_str()?;
            (name.starts_with("metrics-") && name.ends_with(".prom"))
                .then(|| std::fs::read_to_string(&path).ok())
                .flatten()
        })
        .collect()
}

/// promtool's expanding notation for one series: `_` before it appears and where a scrape was not
/// seen, `stale` where it disappears (as Prometheus marks a series gone from a scrape); runs of one
/// value and integer steps shortened.
fn values(recording: &[Option<BTreeMap<String, String>>], series: &str) -> String {
    let mut tokens: Vec<String> = Vec::new();
    let mut present = false;
    for scrape in recording.iter().skip(1) {
        let token = match scrape {
            None => "_".to_string(),
            Some(s) => match s.get(series) {
                Some(v) => {
                    present = true;
                    v.clone()
                }
                None if present => {
                    present = false;
                    "stale".to_string()
                }
                None => "_".to_string(),
            },
        };
        tokens.push(token);
    }
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        // An integer step (a count that grows or shrinks by one each scrape): `a+dxN`, `a-dxN`.
        let ints: Vec<i64> = tokens[i..]
            .iter()
            .map_while(|x| x.parse::<i64>().ok())
            .collect();
        if let [a, b, ..] = ints[..] {
            let d = b - a;
            let steps = ints.windows(2).take_while(|w| w[1] - w[0] == d).count();
            if d != 0 && steps >= 2 {
                let sign = if d > 0 { '+' } else { '-' };
                out.push(format!("{a}{sign}{}x{steps}", d.abs()));
                i += steps + 1;
                continue;
            }
        }
        let run = tokens[i..].iter().take_while(|x| *x == t).count();
        out.push(match (t.as_str(), run) {
            (_, 1) | ("stale", _) => t.clone(),
            // `_xN` is N missing samples; `VxN` is V repeated N more times.
            ("_", n) => format!("_x{n}"),
            (v, n) => format!("{v}x{}", n - 1),
        });
        if t == "stale" {
            i += 1;
        } else {
            i += run;
        }
    }
    out.join(" ")
}

/// The whole promtool test file: the recording as input series, the expectations appended.
fn test_file(recording: &[Option<BTreeMap<String, String>>], rules: &str) -> String {
    let expected =
        std::fs::read_to_string(root().join("tests/rules/recorded.expected.yml")).unwrap();
    let (_, alerts) = expected
        .split_once("\n    alert_rule_test:\n")
        .expect("recorded.expected.yml has an indented alert_rule_test: block");
    let all: BTreeSet<&String> = recording.iter().flatten().flat_map(|s| s.keys()).collect();
    let mut out = format!(
        "# GENERATED by tests/e2e/rules_recorded.rs (UPDATE_GOLDEN=1 cargo nextest run --test e2e rules_recorded): the\n\
         # input series are a recorded run of `dcgm-otel --simulate=tests/fixtures/scenarios/alerts.yaml -c {INTERVAL_MS}\n\
         # -x {WINDOW_MS} --clock-events-count-window-size {WINDOW_MS}`, one scrape per collection written as one 15 s\n\
         # scrape; the expected alerts are tests/rules/recorded.expected.yml. Edit that file, not this one.\n\
         rule_files:\n  - {rules}\nevaluation_interval: 1m\n\ntests:\n  - name: recorded held throttle, short blip, XID storm, health\n    interval: 15s\n    input_series:\n"
    );
    for series in all {
        out.push_str(&format!(
            "      - series: '{series}'\n        values: '{}'\n",
            values(recording, series)
        ));
    }
    out.push_str("    alert_rule_test:\n");
    out.push_str(alerts);
    out
}

fn series_lines(file: &str) -> Vec<&str> {
    file.lines()
        .filter(|l| l.trim_start().starts_with("- series:"))
        .collect()
}

#[test]
fn the_rules_fire_on_what_the_exporter_serves() {
    let recording = record();
    let missed = recording.iter().skip(1).filter(|s| s.is_none()).count();
    assert!(
        missed < COLLECTIONS / 10,
        "{missed} of {COLLECTIONS} collections not seen"
    );
    let committed_path = root().join("tests/rules/recorded.test.yml");
    let committed = test_file(&recording, "../../prometheus/rules/dcgm-otel-gpu.rules.yml");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(!in_ci(), "UPDATE_GOLDEN is set in CI");
        std::fs::write(&committed_path, &committed).unwrap();
    }
    // The fresh recording must pass the expectations too (the committed one is run by run-all.sh).
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("recorded.test.yml");
    let rules = root().join("prometheus/rules/dcgm-otel-gpu.rules.yml");
    std::fs::write(&fresh, test_file(&recording, &rules.display().to_string())).unwrap();
    if let Some(promtool) = peers::promtool() {
        let out = Command::new(promtool)
            .args(["test", "rules"])
            .arg(&fresh)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool test rules on a fresh recording failed:\n{}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&fresh).unwrap()
        );
    }
    let on_disk = std::fs::read_to_string(&committed_path).unwrap_or_default();
    assert_eq!(
        series_lines(&on_disk),
        series_lines(&committed),
        "{} records other series than the exporter serves now (UPDATE_GOLDEN=1 re-records it)",
        committed_path.display()
    );
}

#[test]
fn values_use_promtool_notation() {
    let scrape = |v: Option<&str>| {
        Some(
            v.map(|v| BTreeMap::from([("s".to_string(), v.to_string())]))
                .unwrap_or_default(),
        )
    };
    let rec = vec![
        None,
        scrape(None),
        scrape(None),
        scrape(Some("0")),
        scrape(Some("3")),
        scrape(Some("3")),
        scrape(Some("3")),
        None,
        scrape(None),
        scrape(None),
    ];
    assert_eq!(values(&rec, "s"), "_x2 0 3x2 _ stale _");
    let rec: Vec<_> = std::iter::once(None)
        .chain(["1", "2", "3", "3", "2", "1", "0", "0"].map(|v| scrape(Some(v))))
        .collect();
    assert_eq!(values(&rec, "s"), "1+1x2 3-1x3 0");
}
