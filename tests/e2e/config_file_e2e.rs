//! `--config-file` (dcgm-exporter 4.8.3's YAML) end to end: precedence flag > environment > file >
//! default for the counters and the collect interval, inline fields, watch groups (sampled at their own
//! interval in the simulation, watched at it through libdcgm), the file's CSV followed by hot reload,
//! and every bad file a one-line start-up error with `file:line:column` and exit code 2.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;

use std::path::Path;

use crate::support::fake_lib::Fake;
use common::{run_to_exit, scrape, start, terminate};

fn families(body: &str) -> Vec<String> {
    let mut v: Vec<String> = body
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_"))
        .filter_map(|l| l.split('{').next())
        .map(str::to_string)
        .collect();
    v.dedup();
    v
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// What the start-up log says was loaded: (origin, interval in ms).
fn loaded(err: &str) -> (String, u64) {
    let line = err
        .lines()
        .find(|l| l.contains("configuration loaded"))
        .unwrap_or_else(|| panic!("{err}"));
    let origin = line
        .split("origin=")
        .nth(1)
        .and_then(|r| r.split(" rows=").next())
        .unwrap()
        .to_string();
    let interval = line
        .split("interval_ms=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    (origin, interval)
}

#[test]
fn precedence_flag_then_environment_then_file_then_default() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, t\n");
    let b = write(dir.path(), "b.csv", "DCGM_FI_DEV_SM_CLOCK, gauge, s\n");
    let c = write(dir.path(), "c.csv", "DCGM_FI_DEV_POWER_USAGE, gauge, p\n");
    let cfg = write(
        dir.path(),
        "config.yaml",
        &format!("version: 1\nmetrics:\n  file: {a}\ncollection:\n  interval: 1500ms\n"),
    );
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["--simulate", "--config-file", &cfg];
        all.extend_from_slice(args);
        loaded(&terminate(start(&all, env)))
    };
    // The file over the defaults (and over the scenario's own counters).
    assert_eq!(run(&[], &[]), (a.clone(), 1500));
    // The environment over the file.
    assert_eq!(
        run(
            &[],
            &[
                ("DCGM_EXPORTER_COLLECTORS", &b),
                ("DCGM_EXPORTER_INTERVAL", "2500")
            ]
        ),
        (b.clone(), 2500)
    );
    // The flag over the environment.
    assert_eq!(
        run(
            &["-f", &c, "-c", "3500"],
            &[
                ("DCGM_EXPORTER_COLLECTORS", &b),
                ("DCGM_EXPORTER_INTERVAL", "2500")
            ]
        ),
        (c.clone(), 3500)
    );
    // The file itself through its variable; without it the defaults.
    let e = start(&["--simulate"], &[("DCGM_EXPORTER_CONFIG_FILE", &cfg)]);
    assert_eq!(loaded(&terminate(e)), (a.clone(), 1500));
    let e = start(&["--simulate"], &[]);
    assert_eq!(
        loaded(&terminate(e)),
        ("built-in default counters".to_string(), 30000)
    );
}

#[test]
fn inline_fields_and_the_files_csv_is_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "inline.yaml",
        "version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: GPU temperature.\n    - { name: DCGM_FI_DRIVER_VERSION, prometheusType: label, help: Driver. }\n",
    );
    let e = start(&["--simulate", "--config-file", &cfg, "-c", "60000"], &[]);
    let body = scrape(e.port);
    assert_eq!(families(&body), ["DCGM_FI_DEV_GPU_TEMP"]);
    assert!(body.contains("# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature.\n"));
    assert!(body.contains(",DCGM_FI_DRIVER_VERSION=\"550.144.03\"} "));
    let err = terminate(e);
    assert_eq!(loaded(&err).0, cfg);

    // metrics.file: that CSV is followed like -f.
    let csv = write(dir.path(), "m.csv", "DCGM_FI_DEV_GPU_TEMP, gauge, t\n");
    let cfg = write(
        dir.path(),
        "file.yaml",
        &format!("version: 1\nmetrics: {{file: {csv}}}\n"),
    );
    let e = start(&["--simulate", "--config-file", &cfg, "-c", "300"], &[]);
    assert_eq!(families(&scrape(e.port)), ["DCGM_FI_DEV_GPU_TEMP"]);
    let tmp = write(
        dir.path(),
        "m.tmp",
        "DCGM_FI_DEV_SM_CLOCK, gauge, s\nDCGM_FI_DEV_GPU_TEMP, gauge, t\n",
    );
    std::fs::rename(&tmp, &csv).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while families(&scrape(e.port)) != ["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"] {
        assert!(std::time::Instant::now() < deadline, "not reloaded");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    terminate(e);
}

#[test]
fn watch_groups_sample_their_fields_at_their_own_interval() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "groups.yaml",
        "version: 1\nmetrics:\n  fields:\n    - {name: DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, prometheusType: counter, help: Energy.}\n    - {name: DCGM_FI_DEV_POWER_USAGE, prometheusType: gauge, help: Power.}\ncollection:\n  interval: 200ms\n  watchGroups:\n    - name: slow\n      interval: 1h\n      fields: [\"*_ENERGY_*\"]\n",
    );
    // Simulated: the energy counter is sampled once an hour, so it stays put while collections go on.
    let e = start(&["--simulate", "--config-file", &cfg], &[]);
    let energy = |b: &str| {
        b.lines()
            .find(|l| l.starts_with("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\""))
            .map(str::to_string)
            .unwrap()
    };
    let collects = |b: &str| {
        b.lines()
            .find(|l| l.starts_with("dcgm_otel_collects_total{"))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .unwrap()
    };
    // The control: power, in the 200 ms group, is read again at each collection (the simulated
    // power moves every collection), so a body three collections later is a fresh one.
    let power = |b: &str| {
        b.lines()
            .find(|l| l.starts_with("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""))
            .map(str::to_string)
            .unwrap()
    };
    let first = scrape(e.port);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut later = scrape(e.port);
    while collects(&later) < collects(&first) + 3.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no three collections in 20 s:\n{later}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        later = scrape(e.port);
    }
    assert_ne!(
        power(&first),
        power(&later),
        "the 200 ms group was not read again"
    );
    assert_eq!(energy(&first), energy(&later));
    terminate(e);

    // Through libdcgm: the group's field is watched every hour (3.6e9 µs), the rest every 200 ms.
    let fake = Fake::new();
    let e = fake.start(&["--config-file", &cfg], &[]);
    scrape(e.port);
    drop(e);
    let calls = fake.calls();
    let group_of = |field: &str| {
        calls
            .iter()
            .find(|c| {
                c.starts_with("dcgmFieldGroupCreate") && c.contains(&format!("fields={field} "))
            })
            .and_then(|c| c.split("fieldGroup=").nth(1))
            .and_then(|r| r.split(' ').next())
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no field group of {field}: {calls:#?}"))
    };
    let (slow, fast) = (group_of("156"), group_of("155"));
    let freq_of = |fg: &str| {
        calls
            .iter()
            .find(|c| c.starts_with("dcgmWatchFields") && c.contains(&format!(" fieldGroup={fg} ")))
            .and_then(|c| c.split("freq=").nth(1))
            .and_then(|r| r.split(' ').next())
            .map(str::to_string)
            .unwrap()
    };
    assert_eq!(freq_of(&slow), "3600000000");
    assert_eq!(freq_of(&fast), "200000");
}

#[test]
fn bad_files_are_one_line_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, text: &str, want: &str| {
        let cfg = write(dir.path(), name, text);
        let (code, err) = run_to_exit(&["--simulate", "--config-file", &cfg], &[]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(err, format!("dcgm-otel: {cfg}:{want}\n"));
    };
    check("version.yaml", "version: 2\n", "1:1: version must be 1");
    check(
        "unknown.yaml",
        "version: 1\ncollection:\n  intervall: 1s\n",
        "3:3: collection: unknown field `intervall`, expected one of `interval`, `watchGroups`, `distributions`",
    );
    check(
        "both.yaml",
        "version: 1\nmetrics:\n  file: a.csv\n  fields:\n    - {name: DCGM_FI_DEV_GPU_TEMP, prometheusType: gauge, help: t}\n",
        "2:1: metrics must specify exactly one of file or fields",
    );
    check(
        "field.yaml",
        "version: 1\nmetrics:\n  fields:\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: t\n    - name: DCGM_FI_DEV_GPU_TEMP\n      prometheusType: gauge\n      help: again\n",
        "7:7: metrics.fields[1].name duplicates metrics.fields[0].name 'DCGM_FI_DEV_GPU_TEMP'",
    );
    check(
        "interval.yaml",
        "version: 1\ncollection:\n  interval: 0s\n",
        "3:3: collection.interval: must be greater than 0",
    );
    check(
        "group.yaml",
        "version: 1\ncollection:\n  watchGroups:\n    - name: slow\n      interval: 5m\n      fields: [\"DCGM_FI_NOTHING_*\"]\n",
        "4:5: watch group 'slow' matches no field of built-in default counters",
    );
    check(
        "dup.yaml",
        "version: 1\ncollection:\n  interval: 1s\n  interval: 2s\n",
        "4:3: collection: duplicate field `interval`",
    );
    // A missing file.
    let (code, err) = run_to_exit(&["--simulate", "--config-file", "/nonexistent/c.yaml"], &[]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "dcgm-otel: /nonexistent/c.yaml: cannot read the config file: No such file or directory (os error 2)\n"
    );
}
