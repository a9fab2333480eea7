//! End to end through NVML: the built `dcgm-otel` binary loads the fake `libnvidia-ml.so.1`
//! (`tests/fake-libnvml`, built by `cargo build --workspace` as `target/<profile>/libfake_libnvml.so`)
//! as the GPU source (`--source nvml`), as the per-process collector next to the fake libdcgm, and
//! with injected faults (a GPU falling off the bus, a process exiting, an unsupported call, an XID).
//! Asserts the exposition lines a user sees.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;
use crate::support::fake_lib::Fake as Libs;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{scrape, start, Exporter};
use dcgm_otel::source::sim::{Fleet, Scenario};

/// Scrape until `cond` holds (at most 15 s).
fn scrape_until(e: &Exporter, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let body = scrape(e.port);
        if cond(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The sample lines of one family.
fn lines<'a>(body: &'a str, family: &str) -> Vec<&'a str> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .collect()
}

/// Series keys (name and labels) of the DCGM families.
fn dcgm_series(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with("DCGM_FI_"))
        .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
        .collect()
}

fn default_fleet() -> Fleet {
    Fleet::new(&Scenario::load("default").unwrap(), 1, "test-node")
}

/// The device labels of GPU `gpu` (and MIG instance `mig`) of the default fleet, host `test-node`.
fn device(f: &Fleet, gpu: usize, mig: Option<usize>) -> String {
    let g = &f.gpus()[gpu];
    let mut s = format!(
        "gpu=\"{}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia{}\",modelName=\"{}\"",
        g.identity.index,
        g.identity.uuid,
        g.identity.pci_bus_id,
        g.identity.index,
        g.identity.model
    );
    if let Some(m) = mig {
        let m = &g.instances[m];
        s += &format!(",GPU_I_PROFILE=\"{}\",GPU_I_ID=\"{}\"", m.profile, m.gi_id);
    }
    s + ",Hostname=\"test-node\""
}

#[test]
fn nvml_source_serves_the_dcgm_series_minus_the_dcgm_only_fields() {
    let libs = Libs::new();
    let nvml = start(
        &[
            "--source",
            "nvml",
            "--nvml-library",
            &libs.nvml_path(),
            "-c",
            "200",
        ],
        &[],
    );
    let dcgm = start(&["--dcgm-library", &libs.lib_path(), "-c", "200"], &[]);
    // NvLink bandwidth is a rate: NVML's counters give one from the second collection on.
    let nvml_body = scrape_until(&nvml, "GPU series", |b| {
        b.contains("DCGM_FI_DEV_SM_CLOCK{") && b.contains("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{")
    });
    let dcgm_body = scrape_until(&dcgm, "GPU series", |b| b.contains("DCGM_FI_DEV_SM_CLOCK{"));
    // Same series (names, labels, label order) from both sources, except the fields NVML cannot give.
    let nvml_only_shape: BTreeSet<String> = dcgm_series(&dcgm_body)
        .into_iter()
        .filter(|s| !s.starts_with("DCGM_FI_PROF_"))
        .collect();
    let nvml_series = dcgm_series(&nvml_body);
    // The XID series carries its err_code; both are 0 here.
    assert_eq!(nvml_series, nvml_only_shape);
    // Exact values that do not move with simulated time.
    let f = default_fleet();
    assert!(nvml_body.contains(&format!(
        "DCGM_FI_DEV_FB_RESERVED{{{},DCGM_FI_DRIVER_VERSION=\"550.144.03\"}} 541\n",
        device(&f, 0, None)
    )));
    // The DCGM-only rows are counted absent as unsupported, per entity and collection.
    for field in [
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    ] {
        assert!(
            nvml_body.contains(&format!(
                "dcgm_otel_absent_values_total{{field=\"{field}\",reason=\"unsupported\"}} "
            )),
            "{field} not counted as unsupported"
        );
    }
    assert!(nvml_body.contains("dcgm_otel_source_up{source=\"nvml\"} 1\n"));
    let err = common::terminate(nvml);
    assert_eq!(
        err.matches("these counters have no NVML equivalent")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains(
        "fields=DCGM_FI_DEV_VGPU_LICENSE_STATUS,DCGM_FI_PROF_GR_ENGINE_ACTIVE,DCGM_FI_PROF_PIPE_TENSOR_ACTIVE,DCGM_FI_PROF_DRAM_ACTIVE,DCGM_FI_PROF_PCIE_TX_BYTES,DCGM_FI_PROF_PCIE_RX_BYTES"
    ), "{err}");
}

#[test]
fn per_process_series_with_exact_values() {
    let libs = Libs::new();
    let e = start(
        &[
            "--source",
            "nvml",
            "--nvml-library",
            &libs.nvml_path(),
            "--collect-processes",
            "-c",
            "200",
        ],
        &[],
    );
    let body = scrape_until(&e, "process series", |b| {
        b.contains("dcgm_otel_process_sm_utilization_percent{")
    });
    let f = default_fleet();
    let g0 = device(&f, 0, None);
    assert_eq!(
        lines(&body, "dcgm_otel_process_gpu_memory_bytes"),
        vec![
            format!("dcgm_otel_process_gpu_memory_bytes{{{g0},pid=\"4242\",process_name=\"python3\"}} 32212254720"),
            format!("dcgm_otel_process_gpu_memory_bytes{{{g0},pid=\"4377\",process_name=\"python3\"}} 12884901888"),
            format!("dcgm_otel_process_gpu_memory_bytes{{{g0},pid=\"5120\",process_name=\"nvidia-smi\"}} 67108864"),
            format!("dcgm_otel_process_gpu_memory_bytes{{{},pid=\"6001\",process_name=\"tritonserver\"}} 21474836480", device(&f, 1, Some(0))),
            format!("dcgm_otel_process_gpu_memory_bytes{{{},pid=\"6002\",process_name=\"tritonserver\"}} 4294967296", device(&f, 1, Some(1))),
        ]
    );
    // NVML has no per-process utilization on MIG GPUs: GPU 0's processes only.
    assert_eq!(
        lines(&body, "dcgm_otel_process_sm_utilization_percent"),
        vec![
            format!("dcgm_otel_process_sm_utilization_percent{{{g0},pid=\"4242\",process_name=\"python3\"}} 55"),
            format!("dcgm_otel_process_sm_utilization_percent{{{g0},pid=\"4377\",process_name=\"python3\"}} 25"),
            format!("dcgm_otel_process_sm_utilization_percent{{{g0},pid=\"5120\",process_name=\"nvidia-smi\"}} 0"),
        ]
    );
    assert!(body.contains("dcgm_otel_process_readings 5\n"), "{body}");
}

#[test]
fn processes_next_to_dcgm_and_capped_per_gpu() {
    let libs = Libs::new();
    let e = start(
        &[
            "--dcgm-library",
            &libs.lib_path(),
            "--nvml-library",
            &libs.nvml_path(),
            "--collect-processes",
            "--max-processes-per-gpu",
            "1",
            "-c",
            "200",
        ],
        &[],
    );
    let body = scrape_until(&e, "process series", |b| {
        b.contains("dcgm_otel_process_gpu_memory_bytes{")
    });
    let f = default_fleet();
    let g0 = device(&f, 0, None);
    // The device labels are the DCGM series' own.
    assert!(body.contains(&format!(
        "DCGM_FI_DEV_GPU_TEMP{{{g0},DCGM_FI_DRIVER_VERSION"
    )));
    // One process per GPU, the largest; the others summed as `other`.
    assert_eq!(
        lines(&body, "dcgm_otel_process_gpu_memory_bytes")[..2],
        [
            format!("dcgm_otel_process_gpu_memory_bytes{{{g0},pid=\"4242\",process_name=\"python3\"}} 32212254720"),
            format!("dcgm_otel_process_gpu_memory_bytes{{{g0},process_name=\"other\"}} {}", 12884901888u64 + 67108864),
        ]
    );
    assert_eq!(
        lines(&body, "dcgm_otel_process_sm_utilization_percent")[1],
        format!("dcgm_otel_process_sm_utilization_percent{{{g0},process_name=\"other\"}} 25")
    );
}

#[test]
fn a_lost_gpu_an_exiting_process_an_unsupported_call_and_an_xid() {
    let libs = Libs::new();
    let e = start(
        &[
            "--source",
            "nvml",
            "--nvml-library",
            &libs.nvml_path(),
            "--collect-processes",
            "-c",
            "200",
        ],
        &[(
            "FAKE_NVML_FAULTS",
            "not_supported=nvmlDeviceGetPowerUsage,xid=79@0@3,exit=4377@5,lost_gpu=1@9",
        )],
    );
    let f = default_fleet();
    let g0 = device(&f, 0, None);
    // The XID from the event set is the last value of DCGM_FI_DEV_XID_ERRORS on GPU 0.
    let body = scrape_until(&e, "XID 79", |b| b.contains("err_code=\"79\""));
    assert!(body.contains(&format!(
        "DCGM_FI_DEV_XID_ERRORS{{{g0},DCGM_FI_DRIVER_VERSION=\"550.144.03\",err_code=\"79\",err_msg=\"GPU has fallen off the bus\"}} 79\n"
    )), "{body}");
    // Power is not supported by this "driver": absent, counted, other fields there.
    assert!(lines(&body, "DCGM_FI_DEV_POWER_USAGE").is_empty());
    assert!(body.contains(
        "dcgm_otel_absent_values_total{field=\"DCGM_FI_DEV_POWER_USAGE\",reason=\"not_supported\"} "
    ));
    // The process exits: its series go.
    let body = scrape_until(&e, "pid 4377 gone", |b| {
        !b.contains("pid=\"4377\"") && b.contains("pid=\"4242\"")
    });
    assert_eq!(lines(&body, "dcgm_otel_process_gpu_memory_bytes").len(), 4);
    // GPU 1 falls off the bus: its series (and its processes') are withdrawn, GPU 0 keeps serving.
    let body = scrape_until(&e, "GPU 1 withdrawn", |b| !b.contains("device=\"nvidia1\""));
    assert_eq!(lines(&body, "DCGM_FI_DEV_GPU_TEMP").len(), 1);
    assert!(body.contains(&format!("DCGM_FI_DEV_GPU_TEMP{{{g0},")));
    assert!(body.contains("pid=\"4242\""));
    let err = common::terminate(e);
    assert_eq!(err.matches("NVML: GPU is lost").count(), 1, "{err}");
}

/// `--source auto`: DCGM when libdcgm loads and answers, else NVML, said once in the log.
#[test]
fn source_auto_takes_dcgm_when_it_answers_else_nvml() {
    let libs = Libs::new();
    let missing = libs.dir.path().join("absent/libdcgm.so.4");
    let fallback = start(
        &[
            "--source",
            "auto",
            "--dcgm-library",
            missing.to_str().unwrap(),
            "--nvml-library",
            &libs.nvml_path(),
            "-c",
            "200",
        ],
        &[],
    );
    let body = scrape_until(&fallback, "NVML series", |b| {
        b.contains("DCGM_FI_DEV_SM_CLOCK{")
    });
    assert!(
        body.contains("dcgm_otel_source_up{source=\"nvml\"} 1\n"),
        "{body}"
    );
    let err = common::terminate(fallback);
    assert_eq!(
        err.matches("--source auto: DCGM is not usable here; reading GPUs through NVML")
            .count(),
        1,
        "{err}"
    );
    let dcgm = start(
        &[
            "--source",
            "auto",
            "--dcgm-library",
            &libs.lib_path(),
            "--nvml-library",
            &libs.nvml_path(),
            "-c",
            "200",
        ],
        &[],
    );
    let body = scrape_until(&dcgm, "DCGM series", |b| {
        b.contains("DCGM_FI_DEV_SM_CLOCK{")
    });
    assert!(
        body.contains("dcgm_otel_source_up{source=\"dcgm\"} 1\n"),
        "{body}"
    );
    let err = common::terminate(dcgm);
    assert_eq!(
        err.matches("--source auto: DCGM answers; reading GPUs through DCGM")
            .count(),
        1,
        "{err}"
    );
}

/// `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL` through NVML means what DCGM reports: a rate in MB/s, from the
/// growth of NVML's cumulative NvLink data counters between two collections. The first collection has
/// no rate: the series is absent (counted blank), never a 0 and never the counter itself.
#[test]
fn nvml_nvlink_bandwidth_is_a_rate_absent_at_the_first_collection() {
    let libs = Libs::new();
    let csv = format!(
        "{}/src/counters/default-counters.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let e = start(
        &[
            "--source",
            "nvml",
            "--nvml-library",
            &libs.nvml_path(),
            "-c",
            "600000",
            "-f",
            &csv,
        ],
        &[],
    );
    let first = scrape_until(&e, "the first collection", |b| {
        b.contains("DCGM_FI_DEV_SM_CLOCK{")
    });
    assert!(
        !first.contains("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{"),
        "{first}"
    );
    assert!(first.contains(
        "dcgm_otel_absent_values_total{field=\"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL\",reason=\"blank\"} 1\n"
    ));
    // SIGHUP re-reads the counters file: a second collection, now with a rate.
    common::signal(&e, "-HUP");
    let second = scrape_until(&e, "the second collection", |b| {
        b.contains("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{")
    });
    let rates: Vec<f64> = second
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    // GPU 0 of the default fleet has NvLinks (GPU 1 is in MIG mode: no whole-GPU series).
    assert_eq!(rates.len(), 1, "{second}");
    // A rate, not the counter (which holds about 10^10 KiB): the fake's counters grow by the fleet's
    // 20 GB/s at most per simulated second, one per collection, over at least milliseconds of wall time.
    assert!(rates[0] > 0.0 && rates[0] < 1.0e8, "{rates:?}");
}
