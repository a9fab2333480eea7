//! NvSwitch, NvSwitch-link, CPU and CPU-core entities end to end, through the built binary: the
//! `hgx-h100` and `grace-hopper` simulated scenarios and the same fleets served by the fake libdcgm,
//! compared line for line with golden files (dcgm-exporter's label templates, the host label per
//! release); `-s` / `-p` selections and their errors; and the OTLP resources an in-test HTTP receiver
//! gets for switches and CPUs (both request pipelines).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::{common, peers};

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::support::fake_lib::Fake;
use crate::support::otlp::{resources, Receiver};
use common::{check_golden, run_to_exit, scrape, series, start};

/// `promtool check metrics` accepts the body; skipped when promtool is not installed, outside CI.
fn promtool_accepts(body: &str) {
    if let Some(promtool) = peers::promtool() {
        peers::promtool_accepts(&promtool, body, "the body");
    }
}

/// A scenario's own counters CSV (what `--simulate=<name>` uses), as a file for `-f`.
fn scenario_counters(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("src/source/sim/scenarios/{name}-counters.csv"))
        .display()
        .to_string()
}

#[test]
fn golden_hgx_h100_simulated_and_through_libdcgm() {
    let sim = start(
        &["--simulate=hgx-h100", "-c", "60000", "--no-self-metrics"],
        &[("NODE_NAME", "golden-host")],
    );
    let simulated = scrape(sim.port);
    check_golden("simulated-hgx-h100.prom", &simulated);
    promtool_accepts(&simulated);
    // dcgm-exporter's templates: a switch, a switch port (host label always `hostname`), and the
    // GPU series beside them.
    assert!(simulated.contains(
        "\nDCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT{nvswitch=\"nvswitch3\",Hostname=\"golden-host\",\
         DCGM_FI_DEV_NVSWITCH_FIRMWARE_VERSION=\"96.10.6D.00.01\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"} "
    ));
    assert!(simulated.contains(
        "\nDCGM_FI_DEV_NVSWITCH_LINK_CRC_ERRORS{nvlink=\"17\",nvswitch=\"nvswitch3\",hostname=\"golden-host\",\
         DCGM_FI_DRIVER_VERSION=\"550.144.03\"} 0\n"
    ));
    let fake = Fake::new();
    let csv = scenario_counters("hgx-h100");
    let dcgm = fake.start(
        &["-c", "60000", "-f", &csv, "--no-self-metrics"],
        &[
            ("NODE_NAME", "golden-host"),
            ("FAKE_DCGM_SCENARIO", "hgx-h100"),
        ],
    );
    let through = scrape(dcgm.port);
    check_golden("dcgm-fake-hgx-h100.prom", &through);
    assert_eq!(
        series(&through),
        series(&simulated),
        "libdcgm and simulation differ"
    );
    let calls = fake.calls();
    // Switches come from dcgmGetEntityGroupEntities, their ports from the NvLink status; switch and
    // link groups are watched apart from the GPUs.
    assert!(calls
        .iter()
        .any(|c| c.starts_with("dcgmGetEntityGroupEntities entityGroup=3 flags=0 count=4 ")));
    assert!(calls
        .iter()
        .any(|c| c.starts_with("dcgmGroupAddEntity") && c.contains("entityGroup=3 entity=2 ")));
    // Port 17 of switch 3: DCGM_FE_SWITCH | 17 << 8 | 3 << 24.
    let raw = 3 | (17 << 8) | (3u32 << 24);
    assert!(calls.iter().any(|c| c.starts_with("dcgmGroupAddEntity")
        && c.contains(&format!("entityGroup=6 entity={raw} "))));
}

#[test]
fn golden_grace_hopper_both_host_labels_and_through_libdcgm() {
    // 4.8.3's label set: `hostname` and, on CPU series, `cpu_serial`.
    let sim = start(
        &[
            "--simulate=grace-hopper",
            "-c",
            "60000",
            "--no-self-metrics",
            "--hostname-label",
            "hostname",
        ],
        &[("NODE_NAME", "golden-host")],
    );
    let simulated = scrape(sim.port);
    check_golden("simulated-grace-hopper.prom", &simulated);
    promtool_accepts(&simulated);
    assert!(simulated.contains(
        "\nDCGM_FI_DEV_CPU_CLOCK_CURRENT{cpucore=\"143\",cpu=\"1\",hostname=\"golden-host\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"} "
    ));
    let cpu0 = simulated
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_CPU_TEMP_CURRENT{cpu=\"0\""))
        .unwrap();
    assert!(
        cpu0.starts_with("DCGM_FI_DEV_CPU_TEMP_CURRENT{cpu=\"0\",cpu_serial=\"")
            && cpu0.contains("\",hostname=\"golden-host\",DCGM_FI_DEV_CPU_MODEL=\"Grace\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"} "),
        "{cpu0}"
    );
    // ≤ 4.8.2's label set: `Hostname`, no serial.
    let old = start(
        &[
            "--simulate=grace-hopper",
            "-c",
            "60000",
            "--no-self-metrics",
        ],
        &[("NODE_NAME", "golden-host")],
    );
    let body = scrape(old.port);
    assert!(body.contains(
        "\nDCGM_FI_DEV_CPU_POWER_LIMIT{cpu=\"1\",Hostname=\"golden-host\",DCGM_FI_DEV_CPU_MODEL=\"Grace\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"} 250.000000\n"
    ));
    assert!(!body.contains("cpu_serial"));
    let fake = Fake::new();
    let csv = scenario_counters("grace-hopper");
    let dcgm = fake.start(
        &[
            "-c",
            "60000",
            "-f",
            &csv,
            "--no-self-metrics",
            "--hostname-label",
            "hostname",
        ],
        &[
            ("NODE_NAME", "golden-host"),
            ("FAKE_DCGM_SCENARIO", "grace-hopper"),
        ],
    );
    let through = scrape(dcgm.port);
    check_golden("dcgm-fake-grace-hopper.prom", &through);
    assert_eq!(
        series(&through),
        series(&simulated),
        "libdcgm and simulation differ"
    );
    assert!(fake
        .calls()
        .iter()
        .any(|c| c.starts_with("dcgmGetCpuHierarchy_v2 count=2 ")));
}

#[test]
fn switch_and_cpu_selection() {
    let with = |args: &[&str]| {
        let mut all = vec!["-c", "60000", "--no-self-metrics"];
        all.extend_from_slice(args);
        let e = start(&all, &[]);
        series(&scrape(e.port))
    };
    let s = with(&["--simulate=hgx-h100", "-s", "g:1+i:0-2"]);
    let switches: BTreeSet<&str> = s
        .iter()
        .filter_map(|l| l.split("nvswitch=\"").nth(1))
        .filter_map(|r| r.split('"').next())
        .collect();
    assert_eq!(switches, BTreeSet::from(["nvswitch1"]));
    let ports: BTreeSet<&str> = s
        .iter()
        .filter(|l| l.contains("nvswitch="))
        .filter_map(|l| l.split("{nvlink=\"").nth(1))
        .filter_map(|r| r.split('"').next())
        .collect();
    assert_eq!(ports, BTreeSet::from(["0", "1", "2"]));
    let s = with(&["--simulate=hgx-h100", "-s", "g"]);
    assert!(s.iter().any(|l| l.contains("{nvswitch=\"nvswitch0\"")));
    assert!(
        !s.iter().any(|l| l.contains(",nvswitch=")),
        "links with -s g"
    );
    let s = with(&["--simulate=hgx-h100", "-s", "i"]);
    assert!(
        !s.iter().any(|l| l.contains("nvswitch=")),
        "-s i selects no switch"
    );
    // The GPU series are -d's business.
    assert!(s.iter().any(|l| l.contains("gpu=\"7\"")));
    let s = with(&["--simulate=grace-hopper", "-p", "g:1+i:72,73"]);
    let cpus: BTreeSet<&str> = s
        .iter()
        .filter_map(|l| l.split_once("{cpu=\"").or_else(|| l.split_once(",cpu=\"")))
        .filter_map(|(_, r)| r.split('"').next())
        .collect();
    assert_eq!(cpus, BTreeSet::from(["1"]));
    let cores: BTreeSet<&str> = s
        .iter()
        .filter_map(|l| l.split("{cpucore=\"").nth(1))
        .filter_map(|r| r.split('"').next())
        .collect();
    assert_eq!(cores, BTreeSet::from(["72", "73"]));

    // Absent ids and bad grammar stop start-up with one line, exit 2.
    let (code, err) = run_to_exit(&["--simulate=hgx-h100", "-s", "g:7"], &[]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "dcgm-otel: device selection asks for NvSwitch 7, which does not exist (present: 0,1,2,3)\n"
    );
    let (code, err) = run_to_exit(&["--simulate=grace-hopper", "-p", "g:0+i:100"], &[]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("dcgm-otel: device selection asks for CPU core 100, which does not exist (present: 0,1,2,")
            && err.ends_with(",70,71)\n")
            && err.lines().count() == 1,
        "{err}"
    );
    let (code, err) = run_to_exit(
        &["--simulate", "-p", "g:3-1"],
        &[("DCGM_EXPORTER_CPU_DEVICES_STR", "f")],
    );
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--cpu-devices") && err.contains("range start is greater than its end"),
        "{err}"
    );
    let (code, err) = run_to_exit(
        &["--simulate"],
        &[("DCGM_EXPORTER_OTHER_DEVICES_STR", "f+g")],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("DCGM_EXPORTER_OTHER_DEVICES_STR") && err.contains("'f' (flex) cannot"),
        "{err}"
    );
    // Through libdcgm the same check applies once the switches are discovered.
    let fake = Fake::new();
    let csv = scenario_counters("hgx-h100");
    let lib_dir = fake.dir.path().display().to_string();
    let (code, err) = run_to_exit(
        &["-f", &csv, "-s", "g:0+i:40"],
        &[
            ("LD_LIBRARY_PATH", &lib_dir),
            ("FAKE_DCGM_SCENARIO", "hgx-h100"),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.ends_with("device selection asks for NvSwitch NvLink 40, which does not exist (present: 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17)\n"),
        "{err}"
    );
}

// ---- OTLP ----------------------------------------------------------------------------------------

fn otlp_case(pipeline: &str) {
    for (scenario, style) in [
        ("hgx-h100", "otel"),
        ("grace-hopper", "otel"),
        ("hgx-h100", "dcgm"),
    ] {
        let receiver = Receiver::http(0, None);
        let endpoint = format!("http://{}", receiver.addr);
        let sim = format!("--simulate={scenario}");
        let e = start(
            &[
                &sim,
                "-c",
                "500",
                "--otlp-endpoint",
                &endpoint,
                "--otlp-protocol",
                "http/protobuf",
                "--otel-attribute-style",
                style,
                "--otlp-pipeline",
                pipeline,
            ],
            &[],
        );
        let req = receiver.first();
        drop(e);
        let res = resources(&req);
        let find = |k: &str, v: &str| {
            res.iter()
                .find(|(a, _)| a.get(k).map(String::as_str) == Some(v))
                .unwrap_or_else(|| panic!("{scenario}/{style}: no resource with {k}={v}: {res:#?}"))
        };
        match (scenario, style) {
            ("hgx-h100", "otel") => {
                let (a, metrics) = find("hw.id", "nvswitch2");
                assert_eq!(a["hw.type"], "network");
                assert_eq!(a["hw.vendor"], "NVIDIA");
                assert_eq!(a["nvidia.nvswitch.index"], "2");
                assert_eq!(a["hw.firmware_version"], "96.10.6D.00.01");
                assert_eq!(a["host.name"], "test-node");
                assert!(!a.contains_key("nvidia.nvlink.index"));
                // The switch's own series and its ports' (told apart by the link index) in one resource.
                assert_eq!(
                    metrics["DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT"],
                    vec![BTreeMap::new()]
                );
                // Link-level fields are read on the switch too (dcgm-exporter's routing): the point
                // without a link index is the switch's own.
                let crc = &metrics["DCGM_FI_DEV_NVSWITCH_LINK_CRC_ERRORS"];
                let ports: BTreeSet<String> = crc
                    .iter()
                    .filter_map(|p| p.get("nvidia.nvlink.index").cloned())
                    .collect();
                assert_eq!(ports.len(), 18, "{ports:?}");
                assert_eq!(crc.len(), 19);
                assert_eq!(
                    res.iter()
                        .filter(|(a, _)| a.get("hw.type").map(String::as_str) == Some("network"))
                        .count(),
                    4
                );
            }
            ("grace-hopper", "otel") => {
                let (a, metrics) = find("hw.id", "cpu1");
                assert_eq!(a["hw.type"], "cpu");
                assert_eq!(a["nvidia.cpu.index"], "1");
                assert_eq!(a["hw.model"], "Grace");
                assert_eq!(a["hw.serial_number"].len(), 16);
                let cores: BTreeSet<String> = metrics["DCGM_FI_DEV_CPU_UTIL_TOTAL"]
                    .iter()
                    .filter_map(|p| p.get("cpu.logical_number").cloned())
                    .collect();
                assert_eq!(cores.len(), 72);
                assert!(cores.contains("72") && cores.contains("143"));
                // The CPU's own utilization: the point without a core.
                assert_eq!(
                    metrics["DCGM_FI_DEV_CPU_UTIL_TOTAL"]
                        .iter()
                        .filter(|p| p.is_empty())
                        .count(),
                    1
                );
            }
            _ => {
                let (a, metrics) = find("nvswitch", "nvswitch0");
                assert!(!a.contains_key("hw.type"));
                assert!(metrics["DCGM_FI_DEV_NVSWITCH_LINK_THROUGHPUT_TX"]
                    .iter()
                    .any(|p| p.get("nvlink").map(String::as_str) == Some("5")));
            }
        }
    }
}

#[test]
fn otlp_resources_per_switch_and_cpu_direct() {
    otlp_case("direct");
}
