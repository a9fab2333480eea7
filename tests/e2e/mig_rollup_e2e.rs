//! The MIG roll-up (issue 39): per GPU in MIG mode, `dcgm_otel_mig_gpu_utilization_ratio` on :9400 (and
//! `nvidia.gpu.mig.utilization` on the GPU board's OTLP Resource) equals the sum of its instances'
//! `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, each weighted by its compute slices over the GPU's 7 — on the
//! simulated fleet and through the fake libdcgm. Each comparison is within one body or one request
//! (one collection).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common::{scrape, start};
use crate::support::fake_lib::Fake;
use crate::support::otlp::{attrs, Receiver};

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;

/// Compute slices of a MIG profile name (`3g.40gb` → 3).
fn slices(profile: &str) -> f64 {
    profile.split('g').next().unwrap().parse().unwrap()
}

/// A label's value in a series' label text.
fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
    series[start..].split('"').next()
}

/// Per GPU index: (the roll-up the body serves, the weighted sum of its instances' values in it).
fn rollups_and_sums(body: &str) -> BTreeMap<String, (Option<f64>, f64)> {
    let mut out: BTreeMap<String, (Option<f64>, f64)> = BTreeMap::new();
    for line in body.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let Some(gpu) = label(series, "gpu") else {
            continue;
        };
        if series.starts_with("dcgm_otel_mig_gpu_utilization_ratio{") {
            out.entry(gpu.to_string()).or_default().0 = Some(value);
        } else if series.starts_with("DCGM_FI_PROF_GR_ENGINE_ACTIVE{") {
            if let Some(profile) = label(series, "GPU_I_PROFILE") {
                out.entry(gpu.to_string()).or_default().1 += slices(profile) / 7.0 * value;
            }
        }
    }
    out
}

/// Every GPU with instances has its roll-up, equal to the weighted sum; GPUs without none.
fn assert_rollups(body: &str, mig_gpus: &[&str]) {
    let got = rollups_and_sums(body);
    for gpu in mig_gpus {
        let (rollup, sum) = got[*gpu];
        let rollup = rollup.unwrap_or_else(|| panic!("no roll-up for GPU {gpu}:\n{body}"));
        assert!(sum > 0.0, "GPU {gpu} has no instance values");
        assert!(
            (rollup - sum).abs() < 1e-12,
            "GPU {gpu}: roll-up {rollup}, weighted sum {sum}"
        );
    }
    let with_rollup: Vec<&String> = got
        .iter()
        .filter(|(_, v)| v.0.is_some())
        .map(|(k, _)| k)
        .collect();
    assert_eq!(with_rollup, mig_gpus, "roll-ups on other GPUs:\n{body}");
}

#[test]
fn equals_the_weighted_sum_on_the_simulated_fleet() {
    let e = start(&["--simulate", "-c", "200"], &[]);
    // Several collections: the instances' values change, the equality holds in each body.
    for _ in 0..3 {
        assert_rollups(&scrape(e.port), &["1"]);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let e = start(&["--simulate=dgx-h100-mig", "-c", "60000"], &[]);
    assert_rollups(&scrape(e.port), &["4", "5", "6", "7"]);
}

#[test]
fn equals_the_weighted_sum_through_the_fake_libdcgm() {
    let fake = Fake::new();
    let e = fake.start(&["-c", "200"], &[]);
    for _ in 0..3 {
        assert_rollups(&scrape(e.port), &["1"]);
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// A gauge's value on a resource's metrics.
fn gauge(metrics: &[opentelemetry_proto::tonic::metrics::v1::Metric], name: &str) -> Option<f64> {
    metrics
        .iter()
        .find(|m| m.name == name)
        .and_then(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.first().and_then(|p| match p.value {
                Some(Value::AsDouble(d)) => Some(d),
                Some(Value::AsInt(i)) => Some(i as f64),
                None => None,
            }),
            _ => None,
        })
}

/// Over OTLP the roll-up is on the GPU board's Resource (`hw.id` = the GPU's UUID), and equals the
/// weighted sum of the values on its instances' Resources (`hw.parent` = that UUID) in the same request.
#[test]
fn on_the_gpu_boards_otlp_resource() {
    let receiver = Receiver::http(0, None);
    let endpoint = format!("http://{}", receiver.addr);
    let _e = start(
        &[
            "--simulate",
            "-c",
            "200",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
        ],
        &[],
    );
    let req = receiver.nth_or_later(2);
    // the MIG GPU: the board its instances' Resources name as their parent (UUIDs follow node and seed)
    let board = req
        .resource_metrics
        .iter()
        .find_map(|rm| attrs(&rm.resource.as_ref().unwrap().attributes).remove("hw.parent"))
        .expect("no MIG instance Resource (hw.parent) in the request");
    let board = board.as_str();
    let mut rollup = None;
    let mut sum = 0.0;
    for rm in &req.resource_metrics {
        let a = attrs(&rm.resource.as_ref().unwrap().attributes);
        let metrics: Vec<_> = rm
            .scope_metrics
            .iter()
            .flat_map(|s| s.metrics.iter().cloned())
            .collect();
        if a.get("hw.id").map(String::as_str) == Some(board) {
            rollup = gauge(&metrics, "nvidia.gpu.mig.utilization");
        } else if a.get("hw.parent").map(String::as_str) == Some(board) {
            let profile = &a["nvidia.mig.profile"];
            sum +=
                slices(profile) / 7.0 * gauge(&metrics, "DCGM_FI_PROF_GR_ENGINE_ACTIVE").unwrap();
        }
    }
    let rollup = rollup.expect("no nvidia.gpu.mig.utilization on the board's Resource");
    assert!(sum > 0.0);
    assert!(
        (rollup - sum).abs() < 1e-12,
        "roll-up {rollup}, weighted sum {sum}"
    );
}
