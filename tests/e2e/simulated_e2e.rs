//! End to end on the simulated fleet: the binary as a user runs it, scraped over loopback.
//! Golden files: `UPDATE_GOLDEN=1 cargo nextest run --test e2e simulated_e2e` rewrites tests/golden/*.prom.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::{common, peers};

use std::io::Read as _;
use std::time::{Duration, Instant};

use common::{check_golden, fixtures_dir, get, get_with, run_to_exit, scrape, start};

#[test]
fn golden_default_scenario() {
    let e = start(
        &[
            "--simulate",
            "--simulate-seed",
            "1",
            "-c",
            "60000",
            "--no-self-metrics",
        ],
        &[("NODE_NAME", "golden-host")],
    );
    check_golden("simulated-default.prom", &scrape(e.port));
}

#[test]
fn golden_dgx_old_namespace_lowercase_host_label() {
    let e = start(
        &[
            "--simulate=dgx-h100-mig",
            "--simulate-seed",
            "3",
            "-c",
            "60000",
            "--no-self-metrics",
            "-o",
            "--hostname-label",
            "hostname",
            "-rbmn",
        ],
        &[("NODE_NAME", "golden-host")],
    );
    check_golden("simulated-dgx-h100-mig-old-namespace.prom", &scrape(e.port));
}

/// NvLink series: dcgm-exporter's link template spells the host label `hostname` in every release and
/// never rewrites the model name; the GPU and MIG series around them follow the flags. The XID series
/// carries `err_code`/`err_msg`.
#[test]
fn golden_nvlinks_default_host_label() {
    let scenario = common::fixtures_path("scenarios/nvlink-pair.yaml");
    let csv = common::fixtures_path("counters/nvlink.csv");
    let e = start(
        &[
            &format!("--simulate={scenario}"),
            "-f",
            &csv,
            "-c",
            "60000",
            "--no-self-metrics",
        ],
        &[("NODE_NAME", "golden-host")],
    );
    check_golden("simulated-nvlink.prom", &scrape(e.port));
}

#[test]
fn golden_nvlinks_lowercase_host_label_and_blank_free_model() {
    let scenario = common::fixtures_path("scenarios/nvlink-pair.yaml");
    let csv = common::fixtures_path("counters/nvlink.csv");
    let e = start(
        &[
            &format!("--simulate={scenario}"),
            "-f",
            &csv,
            "-c",
            "60000",
            "--no-self-metrics",
            "--hostname-label",
            "hostname",
            "-rbmn",
        ],
        &[("NODE_NAME", "golden-host")],
    );
    check_golden("simulated-nvlink-hostname-rbmn.prom", &scrape(e.port));
}

#[test]
fn exact_lines_for_a_gpu_and_a_mig_instance_and_absent_values() {
    let e = start(
        &["--simulate", "--simulate-seed", "1", "-c", "60000"],
        &[("NODE_NAME", "golden-host")],
    );
    let body = scrape(e.port);
    let gpu = "DCGM_FI_DEV_MEM_CLOCK{gpu=\"0\",UUID=\"GPU-1014a9ed-7550-917e-d8dc-3eef7ed5481c\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"golden-host\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"} 2619";
    let mig = "DCGM_FI_DEV_MEM_CLOCK{gpu=\"1\",UUID=\"GPU-dd3fced7-2ce4-9e7d-0b6b-9f5458ddca3d\",pci_bus_id=\"00000000:2A:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"2g.20gb\",GPU_I_ID=\"3\",Hostname=\"golden-host\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"} 2619";
    assert!(
        body.lines().any(|l| l == gpu),
        "missing GPU line in:\n{body}"
    );
    assert!(body.lines().any(|l| l == mig), "missing MIG line");
    // GPU utilization is not supported on MIG instances: present for GPU 0, absent on every instance.
    let util: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{"))
        .collect();
    assert_eq!(util.len(), 1, "{util:?}");
    assert!(util[0].contains("gpu=\"0\""));
    // vGPU licensing is not supported on bare metal: the whole family is absent, never a sentinel.
    assert!(!body.contains("DCGM_FI_DEV_VGPU_LICENSE_STATUS{"));
    assert!(!body.contains("# TYPE DCGM_FI_DEV_VGPU_LICENSE_STATUS"));
    for sentinel in [
        "2147483632",
        "9223372036854775792",
        "140737488355328",
        "NaN",
        "Inf",
    ] {
        assert!(!body.contains(sentinel), "sentinel {sentinel} leaked");
    }
    // ...and it is counted.
    assert!(body.contains("dcgm_otel_absent_values_total{field=\"DCGM_FI_DEV_VGPU_LICENSE_STATUS\",reason=\"not_supported\"} 4"), "{body}");
    assert!(body.contains("dcgm_otel_source_up{source=\"simulated\"} 1"));
}

fn energy_of_gpu0(body: &str) -> i64 {
    body.lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .expect("energy series for GPU 0")
}

/// The first value of `name` (a self-metric) in `body`.
fn self_metric(body: &str, name: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
}

#[test]
fn energy_counter_grows_between_scrapes() {
    let e = start(&["--simulate", "-c", "150"], &[]);
    let body = scrape(e.port);
    let (first, collects) = (
        energy_of_gpu0(&body),
        self_metric(&body, "dcgm_otel_collects_total").unwrap(),
    );
    // Two collections later (a deadline, not a sleep: a loaded machine may collect late).
    let deadline = Instant::now() + Duration::from_secs(20);
    let later = loop {
        let body = scrape(e.port);
        if self_metric(&body, "dcgm_otel_collects_total").unwrap() >= collects + 2.0 {
            break body;
        }
        assert!(Instant::now() < deadline, "no two collections in 20 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    let second = energy_of_gpu0(&later);
    assert!(second > first, "energy did not grow: {first} then {second}");
}

#[test]
fn promtool_accepts_the_exposition() {
    let Some(promtool) = peers::promtool() else {
        return;
    };
    let out = std::process::Command::new(&promtool)
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    for args in [
        vec!["--simulate", "-c", "60000"],
        vec!["--simulate=dgx-h100-mig", "-c", "60000", "-o"],
        vec!["--simulate=large", "-c", "60000"],
    ] {
        let e = start(&args, &[]);
        let body = scrape(e.port);
        peers::promtool_accepts(&promtool, &body, &format!("{args:?}"));
    }
}

#[test]
fn large_scenario_has_ten_thousand_series() {
    let e = start(
        &["--simulate=large", "-c", "60000", "--no-self-metrics"],
        &[],
    );
    let body = scrape(e.port);
    let samples = body.lines().filter(|l| !l.starts_with('#')).count();
    assert!(samples >= 10_000, "large scenario has {samples} series");
}

#[test]
fn endpoints_health_ready_gzip_methods() {
    let e = start(&["--simulate", "-c", "500"], &[]);
    let h = get(e.port, "/health").unwrap();
    assert_eq!((h.status, h.text().as_str()), (200, "OK\n"));
    assert_eq!(get(e.port, "/ready").unwrap().status, 200);
    let root = get(e.port, "/").unwrap();
    assert!(root.text().contains("href=\"./metrics\""));
    assert_eq!(get(e.port, "/nope").unwrap().status, 404);
    let plain = get(e.port, "/metrics").unwrap();
    assert_eq!(
        plain.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let gz = get_with(e.port, "/metrics", &[("Accept-Encoding", "gzip")]).unwrap();
    assert_eq!(gz.header("content-encoding"), Some("gzip"));
    let mut unzipped = String::new();
    flate2::read::GzDecoder::new(&gz.body[..])
        .read_to_string(&mut unzipped)
        .unwrap();
    assert!(unzipped.starts_with("# HELP DCGM_FI_DEV_SM_CLOCK"));
    // POST is not allowed.
    use std::io::Write as _;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", e.port)).unwrap();
    s.write_all(
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 405"), "{resp}");
}

/// The rows of a counters CSV as dcgm-exporter reads them (read here, not with the exporter's own
/// parser): (name, type) of every line that is neither blank nor a comment.
fn csv_rows(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut cols = l.split(',').map(str::trim);
            let name = cols.next().unwrap_or_default().to_string();
            let kind = cols.next().unwrap_or_default().to_string();
            (name, kind)
        })
        .collect()
}

/// Each of dcgm-exporter's counters files loads as it is, and every one of its rows is accounted
/// for in the body: a family of its name and type with samples, a label of its name (`label` rows),
/// or counted as absent (`dcgm_otel_absent_values_total{field=...}`: the simulated fleet does not
/// support it). A row dropped on the way fails, whatever the other rows do.
#[test]
fn every_dcgm_exporter_csv_loads_unchanged() {
    let dir = fixtures_dir().join("dcgm-exporter-csv");
    let mut files = Vec::new();
    for sub in [dir.clone(), dir.join("4.5.3-4.8.2")] {
        for entry in std::fs::read_dir(&sub).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|x| x == "csv") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert_eq!(files.len(), 6, "{files:?}");
    for f in files {
        let path = f.to_str().unwrap();
        let rows = csv_rows(&std::fs::read_to_string(&f).unwrap());
        assert!(rows.len() >= 10, "{path}: {rows:?}");
        let e = start(&["--simulate", "-c", "60000", "-f", path], &[]);
        let body = scrape(e.port);
        let lines: Vec<&str> = body.lines().collect();
        let unaccounted: Vec<String> = rows
            .iter()
            .filter(|(name, kind)| {
                let served = lines.contains(&format!("# TYPE {name} {kind}").as_str())
                    && lines.iter().any(|l| l.starts_with(&format!("{name}{{")));
                let label = kind == "label"
                    && lines.iter().any(|l| {
                        !l.starts_with('#')
                            && (l.contains(&format!(",{name}=\""))
                                || l.contains(&format!("{{{name}=\"")))
                    });
                let absent = self_metric_prefix(
                    &body,
                    &format!("dcgm_otel_absent_values_total{{field=\"{name}\","),
                ) > 0.0;
                !(served || label || absent)
            })
            .map(|(name, kind)| format!("{name} ({kind})"))
            .collect();
        assert!(
            unaccounted.is_empty(),
            "{path}: rows neither served, nor a label, nor counted absent: {unaccounted:?}\n{body}"
        );
    }
}

/// The sum of the samples whose line starts with `prefix`.
fn self_metric_prefix(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[test]
fn version_and_grouped_help() {
    let (code, out) = run_to_exit(&["--version"], &[]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(&format!("dcgm-otel {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    let (code, short) = run_to_exit(&["-v"], &[]);
    assert_eq!((code, short), (0, out));
    let (code, out) = run_to_exit(&["--help"], &[]);
    assert_eq!(code, 0);
    for heading in ["Metrics:", "Source:", "Server:", "Logging:"] {
        assert!(out.contains(heading), "missing {heading} in help");
    }
}

/// `--help` and the unknown-scenario error name every built-in scenario; `DCGM_OTEL_SIMULATE` is also a
/// switch: `true` runs the default scenario, `false` turns the simulation off.
#[test]
fn every_built_in_scenario_is_listed_and_simulate_is_a_switch() {
    let (code, help) = run_to_exit(&["--help"], &[]);
    assert_eq!(code, 0);
    let (code, err) = run_to_exit(&["--simulate=nope"], &[]);
    assert_eq!(code, 2, "{err}");
    for name in dcgm_otel::source::sim::scenario::builtin_names() {
        assert!(help.contains(name), "--help lacks {name}");
        assert!(
            err.contains(&format!(" {name},")) || err.contains(&format!(" {name};")),
            "{err}"
        );
    }
    let e = start(&["-c", "60000"], &[("DCGM_OTEL_SIMULATE", "true")]);
    assert!(scrape(e.port).contains("DCGM_FI_DEV_SM_CLOCK{gpu=\"1\""));
    let err = common::terminate(e);
    assert!(err.contains("SIMULATED METRICS"), "{err}");
    // false: no simulation, so the exporter looks for libdcgm (none here): exit 1, naming it.
    let (code, err) = run_to_exit(
        &["--dcgm-library", "/nonexistent/libdcgm.so.4"],
        &[("DCGM_OTEL_SIMULATE", "false")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("scenario"), "{err}");
}

#[test]
fn environment_is_used_when_the_flag_is_absent_and_the_flag_wins() {
    let e = start(&["--simulate"], &[("DCGM_EXPORTER_INTERVAL", "1234")]);
    let err = common::terminate(e);
    assert!(err.contains("interval_ms=1234"), "{err}");
    let e = start(
        &["--simulate", "-c", "4321"],
        &[("DCGM_EXPORTER_INTERVAL", "1234")],
    );
    let err = common::terminate(e);
    assert!(err.contains("interval_ms=4321"), "{err}");
    let e = start(&["--simulate", "--log-format", "json"], &[]);
    let err = common::terminate(e);
    assert!(
        err.lines()
            .any(|l| l.starts_with('{') && l.contains("\"interval_ms\":30000")),
        "{err}"
    );
}

/// SIGHUP never ends the exporter: with or without a web config it logs what it reloaded and keeps
/// serving.
#[test]
fn sighup_never_kills_the_exporter() {
    let mut e = start(&["--simulate", "-c", "1000"], &[]);
    let log = common::follow_stderr(&mut e);
    // Signals sent before the exporter handled the previous one may be delivered as one (POSIX
    // signals coalesce): each SIGHUP is sent after the line of the one before.
    for _ in 0..5 {
        common::signal(&e, "-HUP");
        common::next_line_with(
            &log,
            "SIGHUP received: nothing to reload",
            Duration::from_secs(20),
        );
        assert_eq!(get(e.port, "/metrics").unwrap().status, 200);
    }
    assert!(e.child.try_wait().unwrap().is_none(), "exited after SIGHUP");
    common::terminate(e);
    // Exactly one line per SIGHUP: none beyond the five.
    let rest: Vec<String> = log.iter().collect();
    assert!(
        !rest.iter().any(|l| l.contains("SIGHUP received")),
        "{rest:#?}"
    );
}

#[test]
fn scenario_file_and_no_hostname() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.yaml");
    std::fs::write(&file, "description: lab\ngpus:\n  - model: A30\n    mig: [2g.12gb, 2g.12gb]\n  - model: L4\n    load: idle\n").unwrap();
    let arg = format!("--simulate={}", file.display());
    let e = start(&[&arg, "-c", "60000", "-n"], &[]);
    let body = scrape(e.port);
    assert!(body.contains("modelName=\"NVIDIA A30\",GPU_I_PROFILE=\"2g.12gb\",GPU_I_ID=\"1\",DCGM_FI_DRIVER_VERSION"), "{body}");
    assert!(body.contains("modelName=\"NVIDIA L4\",DCGM_FI_DRIVER_VERSION"));
    assert!(!body.contains("Hostname="));
}

#[test]
fn unimplemented_dcgm_exporter_flags_are_accepted_with_a_warning() {
    let e = start(
        &[
            "--simulate",
            "--disable-startup-validate",
            "-fake-gpus",
            "-kubernetes-enable-pod-labels",
        ],
        &[],
    );
    let err = common::terminate(e);
    for flag in ["--disable-startup-validate", "--fake-gpus"] {
        assert!(
            err.lines()
                .any(|l| l.contains("not implemented") && l.contains(flag)),
            "no warning for {flag}:\n{err}"
        );
    }
    // Implemented, but only with -k: said once.
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("have no effect without -k")
                && l.contains("--kubernetes-enable-pod-labels"))
            .count(),
        1,
        "{err}"
    );
}

/// Under plain `--simulate` the scenario's pods turn -k on by itself: `--kubernetes-enable-pod-labels`
/// then adds the pods' labels, with no warning that it needs -k (README "Run", "Simulated cluster").
#[test]
fn pod_label_flag_under_plain_simulate_works_without_a_warning() {
    let e = common::start_as_user(
        &["--simulate", "-c", "200", "--kubernetes-enable-pod-labels"],
        &[],
    );
    let body = scrape(e.port);
    assert!(
        body.contains("app=\"llm-finetune\"") && body.contains("pod=\"llm-finetune-0\""),
        "{body}"
    );
    let err = common::terminate(e);
    assert!(!err.contains("no effect without -k"), "{err}");
}

/// `dcgm-otel --simulate` alone shows the simulated cluster: pod labels on the series and the three
/// per-pod cost families, no kubelet. With --collect-processes the GPU shared by two pods is split by
/// their processes' SM use (55 % and 25 % in the default scenario), not in halves.
#[test]
fn plain_simulate_shows_pods_and_cost_counters_split_by_process_use() {
    let e = common::start_as_user(&["--simulate", "-c", "200", "--collect-processes"], &[]);
    // Until both pods have GPU time (a deadline, not a sleep).
    let has_seconds = |b: &str, pod: &str| {
        b.lines().any(|l| {
            l.starts_with("dcgm_otel_pod_gpu_seconds_total{gpu=\"0\"")
                && l.contains(&format!("pod=\"{pod}\""))
                && !l.ends_with(" 0")
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = loop {
        let body = scrape(e.port);
        if has_seconds(&body, "llm-finetune-0") && has_seconds(&body, "notebook-alice") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "no GPU time for both pods of GPU 0 in 20 s:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    for needle in [
        "namespace=\"research\",pod=\"llm-finetune-0\"",
        "container=\"trainer\"",
        "# TYPE dcgm_otel_pod_gpu_seconds_total counter",
        "# TYPE dcgm_otel_pod_gpu_energy_joules_total counter",
        "# TYPE dcgm_otel_pod_gpu_idle_seconds_total counter",
    ] {
        assert!(body.contains(needle), "missing {needle} in:\n{body}");
    }
    let seconds = |pod: &str| -> f64 {
        body.lines()
            .find(|l| {
                l.starts_with("dcgm_otel_pod_gpu_seconds_total{gpu=\"0\"")
                    && l.contains(&format!("pod=\"{pod}\""))
            })
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("no seconds for {pod} in:\n{body}"))
    };
    let (a, b) = (seconds("llm-finetune-0"), seconds("notebook-alice"));
    assert!(a > 0.0 && b > 0.0, "{a} {b}");
    let ratio = a / b;
    assert!(
        (ratio - 55.0 / 25.0).abs() < 1e-4,
        "seconds split by SM use 55:25, got {a} and {b}"
    );
}

/// The value of `dcgm_otel_bodies_made_total{encoding}` in a /metrics text.
fn bodies_made(text: &str, encoding: &str) -> String {
    let prefix = format!("dcgm_otel_bodies_made_total{{encoding=\"{encoding}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {prefix}in\n{text}"))
        .to_string()
}

/// The text of a reply that must be gzip-encoded.
fn gunzip(r: &common::Response) -> String {
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..])
        .read_to_string(&mut text)
        .unwrap();
    text
}

/// `/metrics` bodies are made at the first scrape after a collection, once per collection however
/// many scrapers ask at the same time, and gzip only when a scraper asks for it: the exporter's own
/// `dcgm_otel_bodies_made_total` counts them (this body included) and the bytes served are the same.
#[test]
fn bodies_are_made_once_per_collection_and_only_when_asked() {
    let counters = format!(
        "{}/src/counters/default-counters.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    // A long interval: only SIGHUP (which re-reads the counters file) brings a new collection.
    let e = start(&["--simulate", "-c", "600000", "-f", &counters], &[]);
    // 16 scrapes at once, every other one asking for gzip: one body, its text the same for all.
    let port = e.port;
    let replies: Vec<(bool, common::Response)> = std::thread::scope(|s| {
        let scrapes: Vec<_> = (0..16)
            .map(|i| {
                s.spawn(move || {
                    let gzip = i % 2 == 0;
                    let headers: &[(&str, &str)] = if gzip {
                        &[("Accept-Encoding", "gzip")]
                    } else {
                        &[]
                    };
                    (gzip, get_with(port, "/metrics", headers).unwrap())
                })
            })
            .collect();
        scrapes.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let texts: Vec<String> = replies
        .iter()
        .map(|(gzip, r)| if *gzip { gunzip(r) } else { r.text() })
        .collect();
    assert!(texts.iter().all(|t| t == &texts[0]), "different bodies");
    // The body's self-metrics are as of its first making: the text (identity) or, when a gzip scrape
    // came first, the gzip copy alone; the other encoding is made later from the same bytes.
    let first = (
        bodies_made(&texts[0], "identity"),
        bodies_made(&texts[0], "gzip"),
    );
    assert!(
        first == ("1".into(), "0".into()) || first == ("0".into(), "1".into()),
        "{first:?}"
    );
    // A new collection: the next plain scrape renders it; gzip was made once for the first one and
    // not for this one, which nobody asked gzip for yet.
    common::signal(&e, "-HUP");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let second = loop {
        let text = scrape(port);
        if bodies_made(&text, "identity") == "2" {
            break text;
        }
        assert!(std::time::Instant::now() < deadline, "no second collection");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(bodies_made(&second, "gzip"), "1");
    assert_eq!(
        scrape(port),
        second,
        "a second scrape is served from memory"
    );
    let zipped = get_with(port, "/metrics", &[("Accept-Encoding", "gzip")]).unwrap();
    assert_eq!(gunzip(&zipped), second, "gzip is the same body, compressed");
}

/// A scraper that asks only for gzip never makes the plain body (2.3 MB kept per collection for
/// `large`): `dcgm_otel_bodies_made_total{encoding="identity"}` stays 0 over collections; a plain
/// scrape of the same collection then gets exactly the bytes the gzip body decompresses to, made once.
#[test]
fn gzip_only_scrapers_never_make_the_plain_body() {
    // A long interval: only SIGHUP (which re-reads the counters file) brings a new collection.
    // `large`: a body of some 250 KB, streamed through the compressor 64 KiB at a time.
    let counters = format!(
        "{}/src/counters/default-counters.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let e = start(&["--simulate=large", "-c", "600000", "-f", &counters], &[]);
    let port = e.port;
    let gzip_scrape = || {
        let r = get_with(port, "/metrics", &[("Accept-Encoding", "gzip")]).unwrap();
        assert_eq!(r.status, 200);
        gunzip(&r)
    };
    // A gzip scrape of the body of collection `n` (or a later one).
    let gzip_scrape_after = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = gzip_scrape();
            let collects = text
                .lines()
                .find_map(|l| l.strip_prefix("dcgm_otel_collects_total"))
                .and_then(|l| l.rsplit_once(' '))
                .and_then(|(_, v)| v.parse::<u64>().ok());
            if collects.is_some_and(|c| c >= n) {
                break text;
            }
            assert!(Instant::now() < deadline, "no body of collection {n}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let first = gzip_scrape_after(1);
    assert_eq!(gzip_scrape(), first, "served from memory");
    common::signal(&e, "-HUP");
    let second = gzip_scrape_after(2);
    assert_eq!(
        bodies_made(&second, "identity"),
        "0",
        "gzip-only scrapes made no plain body"
    );
    assert_eq!(
        bodies_made(&second, "gzip"),
        "2",
        "one gzip body per collection"
    );
    assert!(second.contains("\nDCGM_FI_DEV_GPU_TEMP{"), "{second}");
    assert!(
        second.len() > 3 * 64 * 1024,
        "several chunks: {} bytes",
        second.len()
    );
    // Plain asked now: the same bytes, the text made once (the body's self-metrics stay as of its
    // first making).
    assert_eq!(scrape(port), second, "plain body = decompressed gzip body");
    assert_eq!(scrape(port), second);
    assert_eq!(gzip_scrape(), second);
    common::signal(&e, "-HUP");
    let third = gzip_scrape_after(3);
    assert_eq!(
        bodies_made(&third, "identity"),
        "1",
        "one plain body for two plain scrapes"
    );
}

/// Fields the simulator writes as 0 because 0 is what its model says (a healthy, possibly idle GPU):
/// (first id, last id, why). Any other 0 in a simulated scrape is a value nobody modelled.
const MODELLED_ZEROS: &[(u16, u16, &str)] = &[
    (52, 52, "GPU 0's NVML index"),
    (55, 55, "GPU 0's minor number"),
    (65, 65, "compute mode Default"),
    (67, 67, "MIG mode off"),
    (74, 74, "confidential computing off"),
    (94, 94, "no GPM before Hopper"),
    (190, 190, "performance state P0"),
    (583, 592, "no NvLink recovery, link-down or code-word error"),
    (112, 112, "no clock event active"),
    (202, 202, "no PCIe replay yet"),
    (203, 204, "an idle GPU's utilization"),
    (206, 207, "no video engine work in the simulated loads"),
    (230, 230, "no XID yet"),
    (
        253,
        253,
        "a MIG instance has no driver reservation of its own",
    ),
    (310, 345, "no ECC error on a healthy GPU"),
    (390, 396, "no retired page, no remapped row"),
    (400, 439, "no NvLink error"),
    (449, 449, "an idle GPU moves no NvLink data"),
    (497, 499, "no NvLink error"),
    (782, 788, "no NvSwitch port error"),
    (809, 824, "no NvSwitch lane error"),
    (856, 857, "no SXID"),
    (863, 863, "switch 0's physical id"),
    (864, 864, "no NvSwitch reset required"),
    (865, 865, "port 0's link id"),
    (866, 869, "PCIe domain, device and function 0"),
    (
        872,
        875,
        "the remote GPU's PCIe domain, device and function 0",
    ),
    (
        1001,
        1012,
        "an idle GPU's profiling ratios and NvLink rates",
    ),
    (1100, 1104, "an idle CPU core (and no niced work)"),
    (1525, 1533, "no NvLink error; an idle link's rates"),
];

/// The simulator tells nothing a GPU would not: on every built-in scenario, with every numeric DCGM
/// field listed, a field is either modelled (from the load or the GPU model's specifications) or
/// absent — a 0 appears only where it is the model's value. And NvLink bandwidth is a rate in MB/s.
#[test]
fn the_simulator_writes_no_zero_it_does_not_model() {
    use dcgm_otel::fields::catalog;
    let mut ids: Vec<u16> = catalog().names().map(|(_, id)| id).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut csv = String::new();
    for id in ids {
        let Some(f) = catalog().by_id(id) else {
            continue;
        };
        if f.value_type.is_numeric() {
            csv.push_str(&format!("{}, gauge, field {id}.\n", f.name));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("every-field.csv");
    std::fs::write(&path, csv).unwrap();
    let mut made_up: Vec<String> = Vec::new();
    for scenario in dcgm_otel::source::sim::scenario::builtin_names() {
        let simulate = format!("--simulate={scenario}");
        let e = start(
            &[
                &simulate,
                "-f",
                path.to_str().unwrap(),
                "-c",
                "60000",
                "--no-self-metrics",
            ],
            &[],
        );
        let body = scrape(e.port);
        let mut nvlink = 0;
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let name = series.split('{').next().unwrap();
            let value: f64 = value.parse().unwrap();
            let Some(f) = catalog().by_name(name) else {
                continue;
            };
            if f.id == 449 {
                nvlink += 1;
                assert!(value < 1.0e6, "{scenario}: not a rate in MB/s: {line}");
            }
            let modelled = MODELLED_ZEROS
                .iter()
                .any(|(first, last, _)| (*first..=*last).contains(&f.id));
            let seen = format!("{scenario}: {name}{{");
            if value == 0.0 && !modelled && !made_up.iter().any(|m| m.starts_with(&seen)) {
                made_up.push(format!("{scenario}: {line}"));
            }
        }
        if ["default", "hgx-h100"].contains(&scenario) {
            assert!(nvlink > 0, "{scenario}: no NvLink bandwidth");
        }
    }
    assert!(
        made_up.is_empty(),
        "zeros nobody modelled:\n{}",
        made_up.join("\n")
    );
}

/// A simulated H100's limits are the board's (700 W power limit, 200 W minimum, slowdown at 89 °C,
/// shutdown at 92 °C), its instantaneous power a reading near the averaged one, never 0.
#[test]
fn the_simulator_states_the_models_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.csv");
    std::fs::write(
        &path,
        "DCGM_FI_DEV_POWER_USAGE, gauge, p.\n\
         DCGM_FI_DEV_POWER_USAGE_INSTANT, gauge, p.\n\
         DCGM_FI_DEV_POWER_MGMT_LIMIT, gauge, p.\n\
         DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN, gauge, p.\n\
         DCGM_FI_DEV_SLOWDOWN_TEMP, gauge, t.\n\
         DCGM_FI_DEV_SHUTDOWN_TEMP, gauge, t.\n\
         DCGM_FI_DEV_MAX_SM_CLOCK, gauge, c.\n",
    )
    .unwrap();
    let e = start(
        &[
            "--simulate",
            "-f",
            path.to_str().unwrap(),
            "-c",
            "60000",
            "--no-self-metrics",
        ],
        &[],
    );
    let body = scrape(e.port);
    let gpu0 = |name: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(&format!("{name}{{gpu=\"0\"")))
            .and_then(|l| l.rsplit_once(' '))
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or_else(|| panic!("no {name} of GPU 0 in:\n{body}"))
    };
    assert_eq!(gpu0("DCGM_FI_DEV_POWER_MGMT_LIMIT"), 700.0);
    assert_eq!(gpu0("DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN"), 200.0);
    assert_eq!(gpu0("DCGM_FI_DEV_SLOWDOWN_TEMP"), 89.0);
    assert_eq!(gpu0("DCGM_FI_DEV_SHUTDOWN_TEMP"), 92.0);
    assert_eq!(gpu0("DCGM_FI_DEV_MAX_SM_CLOCK"), 1980.0);
    let (power, instant) = (
        gpu0("DCGM_FI_DEV_POWER_USAGE"),
        gpu0("DCGM_FI_DEV_POWER_USAGE_INSTANT"),
    );
    assert!(
        instant > 0.0 && (instant - power).abs() <= 0.05 * 700.0,
        "{power} {instant}"
    );
}

/// Two simulated nodes of one scenario have different GPU UUIDs (a fleet in a tool keyed on UUID does
/// not merge); one node's are the same at every start.
#[test]
fn simulated_nodes_have_their_own_gpu_uuids() {
    let uuids = |node: &str| -> std::collections::BTreeSet<String> {
        let e = start(
            &["--simulate", "-c", "60000", "--no-self-metrics"],
            &[("NODE_NAME", node)],
        );
        scrape(e.port)
            .lines()
            .filter_map(|l| l.split("UUID=\"").nth(1))
            .map(|rest| rest.split('"').next().unwrap().to_string())
            .collect()
    };
    let (a, b) = (uuids("node-a"), uuids("node-b"));
    assert_eq!(a.len(), 2, "{a:?}");
    assert!(a.is_disjoint(&b), "{a:?} {b:?}");
    assert_eq!(a, uuids("node-a"));
}
