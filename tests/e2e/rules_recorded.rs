//! The alerting rules (`prometheus/rules/`) tested on what the exporter really serves, not on series typed
//! by hand: this test runs `dcgm-otel --simulate=tests/fixtures/scenarios/alerts.yaml` (a held throttle, a
//! 15 s throttle blip, an XID storm, a failing and a warning health watch), records every collection's
//! /metrics body (the exporter's own debug dump, `--dump-enabled`), and writes the recording as the
//! `input_series` of a promtool test whose expected alerts are `tests/rules/recorded.expected.yml`. Then it
//! runs `promtool test rules` on that fresh recording, and checks that the committed recording
//! (`tests/rules/recorded.test.yml`, which `tests/run-all.sh` tests with the other rule tests) has the same
//! series with the same values. `UPDATE_GOLDEN=1 cargo nextest run --test e2e rules_recorded` rewrites the
//! committed recording (only from a run that saw every collection on time).
//!
//! The values are compared sample by sample, the committed notation expanded back into one sample per
//! collection ([`expand`]). Two things depend on the run rather than on the exporter, and only those are
//! let through: a collection the dump writer skipped (at most a tenth) is promtool's `_` in the fresh recording (any
//! committed sample matches it; `stale`, which follows the first scrape without the series, is "no sample"
//! like `_`); and the window counts (`DCGM_EXP_*_COUNT`) of a collection published more than half an
//! interval late. Their windows are wall-clock time while the simulated incidents are stamped with
//! simulated time (one interval per collection), so a collection the loaded machine started late sees one
//! sample fewer in its window; such collections' window counts are not compared (how many is printed).
//! Every other value must be the committed one.
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

/// By collection number (1..=COLLECTIONS): series → value. A collection not recorded is `None`.
type Recording = Vec<Option<BTreeMap<String, String>>>;

/// [`Recording`] and, by collection number, when each recorded collection was published
/// (`dcgm_otel_last_collect_success_timestamp_seconds`). The bodies are the exporter's own debug dump
/// (`--dump-enabled`: every collection's /metrics body, made on the collector thread as the collection
/// is published, named by its collection number), so no scrape has to land between two collections on
/// a loaded machine. A collection the dump writer skipped (still busy with the one before, counted in
/// `dcgm_otel_dump_skipped_total`) is `None`, as a Prometheus scrape that did not come.
fn record() -> (Recording, Vec<Option<f64>>) {
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
    // A deadline on the condition (COLLECTIONS collections made), generous for a loaded machine.
    let started = Instant::now();
    loop {
        let n = self_metric(
            &get(e.port, "/metrics").unwrap().text(),
            "dcgm_otel_collects_total",
        )
        .unwrap_or(0.0) as usize;
        // One more: the dump of the last recorded collection is written by then.
        if n > COLLECTIONS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no {COLLECTIONS} collections in five minutes ({n} made)"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let skipped = self_metric(
        &get(e.port, "/metrics").unwrap().text(),
        "dcgm_otel_dump_skipped_total",
    );
    drop(e);
    let mut out: Recording = vec![None; COLLECTIONS + 1];
    let mut stamps: Vec<Option<f64>> = vec![None; COLLECTIONS + 1];
    for body in dumped_bodies(&dump) {
        let n = self_metric(&body, "dcgm_otel_collects_total").unwrap_or(0.0) as usize;
        if !(1..=COLLECTIONS).contains(&n) {
            continue;
        }
        assert!(out[n].is_none(), "collection {n} dumped twice");
        stamps[n] = self_metric(&body, "dcgm_otel_last_collect_success_timestamp_seconds");
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
    eprintln!("dcgm_otel_dump_skipped_total {skipped:?}");
    (out, stamps)
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

/// One scrape of a series in promtool's expanded notation: a value, or none (`_` or `stale`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sample {
    Value(f64),
    Absent,
}

/// Expand promtool's series notation as [`values`] writes it (`_`, `_xN`, `stale`, `V`, `VxN`, `a+bxN`,
/// `a-bxN`) into one [`Sample`] per scrape.
fn expand(notation: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for token in notation.split_whitespace() {
        if token == "_" || token == "stale" {
            out.push(Sample::Absent);
            continue;
        }
        if let Some(n) = token.strip_prefix("_x") {
            out.extend(std::iter::repeat_n(Sample::Absent, n.parse().unwrap()));
            continue;
        }
        let (start, more) = match token.split_once('x') {
            Some((start, n)) => (start, n.parse::<usize>().unwrap()),
            None => (token, 0),
        };
        // `a+b` / `a-b` (a step), unless the whole is one number (`-3`, `1e+06`).
        let (first, step) = match start.parse::<f64>() {
            Ok(v) => (v, 0.0),
            Err(_) => {
                let at = start.rfind(['+', '-']).unwrap();
                let (a, b) = start.split_at(at);
                (a.parse::<f64>().unwrap(), b.parse::<f64>().unwrap())
            }
        };
        out.extend((0..=more).map(|k| Sample::Value(first + step * k as f64)));
    }
    out
}

/// The `series` → `values` pairs of a promtool test file.
fn input_series(file: &str) -> BTreeMap<String, String> {
    let quoted = |l: &str, key: &str| {
        l.trim_start()
            .strip_prefix(key)
            .map(|v| v.trim().trim_matches('\'').to_string())
    };
    let mut out = BTreeMap::new();
    let mut series = None;
    for l in file.lines() {
        if let Some(s) = quoted(l, "- series:") {
            series = Some(s);
        } else if let (Some(v), Some(s)) = (quoted(l, "values:"), series.take()) {
            out.insert(s, v);
        }
    }
    out
}

/// The window counts, whose value at a late collection is timing (see the module comment).
const WINDOWED: [&str; 2] = ["DCGM_EXP_XID_ERRORS_COUNT{", "DCGM_EXP_CLOCK_EVENTS_COUNT{"];

/// By collection number: published more than half an interval later than the collections published
/// earliest against the collect interval's schedule.
fn late(stamps: &[Option<f64>]) -> Vec<bool> {
    let interval = INTERVAL_MS.parse::<f64>().unwrap() / 1000.0;
    let lag: Vec<Option<f64>> = stamps
        .iter()
        .enumerate()
        .map(|(n, t)| t.map(|t| t - n as f64 * interval))
        .collect();
    let base = lag.iter().flatten().fold(f64::INFINITY, |a, &b| a.min(b));
    lag.iter()
        .map(|l| l.is_some_and(|l| l - base > interval / 2.0))
        .collect()
}

/// Every sample of the fresh recording that differs from the committed one (`committed`: series →
/// promtool notation), except what the run decides (a collection not seen; a late collection's window
/// counts); and how many window counts were let through as late.
fn differences(
    committed: &BTreeMap<String, String>,
    recording: &Recording,
    late: &[bool],
) -> (Vec<String>, usize) {
    let mut diffs = Vec::new();
    let mut skipped = 0;
    for (series, notation) in committed {
        let expected = expand(notation);
        if expected.len() != COLLECTIONS {
            diffs.push(format!(
                "{series}: '{notation}' is {} scrapes, not {COLLECTIONS}",
                expected.len()
            ));
            continue;
        }
        let windowed = WINDOWED.iter().any(|p| series.starts_with(p));
        for (n, want) in (1..=COLLECTIONS).zip(expected) {
            let Some(scrape) = &recording[n] else {
                continue;
            };
            if windowed && late[n] {
                skipped += 1;
                continue;
            }
            let got = scrape
                .get(series)
                .map_or(Sample::Absent, |v| Sample::Value(v.parse().unwrap()));
            if got != want {
                diffs.push(format!(
                    "{series}: collection {n}: recorded {got:?}, committed {want:?}"
                ));
            }
        }
    }
    (diffs, skipped)
}

#[test]
fn the_rules_fire_on_what_the_exporter_serves() {
    let (recording, stamps) = record();
    let missed = recording.iter().skip(1).filter(|s| s.is_none()).count();
    assert!(
        missed < COLLECTIONS / 10,
        "{missed} of {COLLECTIONS} collections not seen"
    );
    let late = late(&stamps);
    let committed_path = root().join("tests/rules/recorded.test.yml");
    let committed = test_file(&recording, "../../prometheus/rules/dcgm-otel-gpu.rules.yml");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(!in_ci(), "UPDATE_GOLDEN is set in CI");
        // The committed recording is the reference: every collection seen, none late.
        let late_ones = late.iter().filter(|l| **l).count();
        assert!(
            missed == 0 && late_ones == 0,
            "{missed} collections not seen and {late_ones} late: not written (run it again on a quieter machine)"
        );
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
    let reference = input_series(&on_disk);
    // A committed collection with no sample at all would be one its run did not see.
    let expanded: Vec<Vec<Sample>> = reference.values().map(|v| expand(v)).collect();
    for n in 0..COLLECTIONS {
        assert!(
            expanded
                .iter()
                .any(|e| e.get(n).is_some_and(|s| *s != Sample::Absent)),
            "{}: collection {} has no sample",
            committed_path.display(),
            n + 1
        );
    }
    let (diffs, skipped) = differences(&reference, &recording, &late);
    eprintln!(
        "{missed} collections not seen; {} late, their {skipped} window counts not compared",
        late.iter().filter(|l| **l).count()
    );
    assert!(
        diffs.is_empty(),
        "{} values differ from {} (UPDATE_GOLDEN=1 re-records it when the change is meant):\n{}",
        diffs.len(),
        committed_path.display(),
        diffs
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
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

#[test]
fn expand_reverses_the_notation() {
    let scrape = |v: Option<&str>| {
        Some(
            v.map(|v| BTreeMap::from([("s".to_string(), v.to_string())]))
                .unwrap_or_default(),
        )
    };
    let rec: Vec<_> = std::iter::once(None)
        .chain(
            [
                None,
                Some("1"),
                Some("2"),
                Some("3"),
                Some("3"),
                Some("2.5"),
                Some("2.5"),
                None,
                None,
                Some("7"),
                Some("6"),
                Some("5"),
            ]
            .map(scrape),
        )
        .collect();
    let written = values(&rec, "s");
    assert_eq!(written, "_ 1+1x2 3 2.5x1 stale _ 7-1x2");
    use Sample::{Absent, Value};
    assert_eq!(
        expand(&written),
        [
            Absent,
            Value(1.0),
            Value(2.0),
            Value(3.0),
            Value(3.0),
            Value(2.5),
            Value(2.5),
            Absent,
            Absent,
            Value(7.0),
            Value(6.0),
            Value(5.0)
        ]
    );
    assert_eq!(expand("_x3 0x2 -1 1e+06"), {
        let mut v = vec![Absent; 3];
        v.extend([Value(0.0); 3]);
        v.extend([Value(-1.0), Value(1e6)]);
        v
    });
}

#[test]
fn only_collections_published_late_have_their_windows_let_through() {
    // Collections 1..=5 on schedule (a few ms of jitter), 6 started 150 ms late, 7 on time again.
    let stamps = [
        None,
        Some(100.003),
        Some(100.201),
        Some(100.4),
        None,
        Some(100.805),
        Some(101.15),
        Some(101.201),
    ];
    assert_eq!(
        late(&stamps),
        [false, false, false, false, false, false, true, false]
    );
}
