//! Semantic-convention names in the direct request: every row of the table, one at a time (a counters
//! CSV with only that row's fields, values written by hand and the expected point written by hand),
//! then the modes (`semconv` replaces, `both` adds), the identity of GPUs and MIG instances, derived
//! inputs (health → `hw.status`, XID totals → `hw.errors`) and delta temporality.

use std::time::{Duration, UNIX_EPOCH};

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Metric, NumberDataPoint,
};

use super::*;
use crate::config::LabelStyle;
use crate::counters;
use crate::export::otel::naming::{OtelAttributeStyle, OtelResourceMode};
use crate::export::otel::semconv::{Input, Instrument as Sc, MAPPINGS};
use crate::snapshot::{
    Attribution, DerivedFamily, DerivedInfo, DerivedKind, DerivedSample, Entity, EntityReading,
    FieldValue, GpuIdentity, MigIdentity, Snapshot,
};

/// A point's expected value.
#[derive(Debug, Clone, Copy)]
enum Want {
    Int(i64),
    Double(f64),
}

/// An expected point: (extra attribute, value).
type WantPoint = (Option<(&'static str, &'static str)>, Want);

/// Per row of [`MAPPINGS`], in order: the raw values of its inputs (distinct fields in order, or the derived
/// family's samples on one GPU) and the point(s) expected: (extra attribute, value).
fn expectations() -> Vec<(Vec<FieldValue>, Vec<WantPoint>)> {
    use FieldValue::{Double as D, Int as I};
    let mib = 1_048_576i64;
    vec![
        (vec![I(87)], vec![(None, Want::Double(0.87))]),
        (vec![I(12)], vec![(None, Want::Double(0.12))]),
        (vec![I(5)], vec![(None, Want::Double(0.05))]),
        (vec![I(1024)], vec![(None, Want::Int(1024 * mib))]),
        (vec![I(81559)], vec![(None, Want::Int(81559 * mib))]),
        (
            vec![I(1000), I(80000), I(559)],
            vec![(None, Want::Int(81559 * mib))],
        ),
        (
            vec![I(1000), I(80559)],
            vec![(None, Want::Int(81559 * mib))],
        ),
        (vec![I(20000), I(80000)], vec![(None, Want::Double(0.25))]),
        (
            vec![I(20000), I(59000), I(1000)],
            vec![(None, Want::Double(0.25))],
        ),
        (vec![I(20000), I(60000)], vec![(None, Want::Double(0.25))]),
        (vec![D(312.5)], vec![(None, Want::Double(312.5))]),
        (
            vec![I(123_456_789)],
            vec![(None, Want::Double(123_456.789))],
        ),
        (vec![I(64)], vec![(None, Want::Double(64.0))]),
        (vec![I(71)], vec![(None, Want::Double(71.0))]),
        (vec![I(5_000_000)], vec![(None, Want::Int(5_000_000))]),
        (vec![I(7_000_000)], vec![(None, Want::Int(7_000_000))]),
        (vec![I(11_000_000)], vec![(None, Want::Int(11_000_000))]),
        (vec![I(13_000_000)], vec![(None, Want::Int(13_000_000))]),
        // ECC: the lifetime aggregate counters only (the volatile ones keep their DCGM names).
        (vec![I(4)], vec![(None, Want::Int(4))]),
        (vec![I(2)], vec![(None, Want::Int(2))]),
        (vec![I(9)], vec![(None, Want::Int(9))]),
        // XID totals: two XIDs on the GPU, 2 and 3 times.
        (vec![D(2.0), D(3.0)], vec![(None, Want::Int(5))]),
        // Health: one watch passes, one warns → degraded.
        (
            vec![D(0.0), D(10.0)],
            vec![
                (Some(("hw.state", "ok")), Want::Int(0)),
                (Some(("hw.state", "degraded")), Want::Int(1)),
                (Some(("hw.state", "failed")), Want::Int(0)),
            ],
        ),
    ]
}

fn gpu_identity() -> Arc<GpuIdentity> {
    Arc::new(GpuIdentity {
        index: 0,
        uuid: "GPU-aaa".into(),
        pci_bus_id: "00000000:18:00.0".into(),
        model: "NVIDIA H100 80GB HBM3".into(),
        serial: "1650923000001".into(),
        vbios: "96.00.99.00.01".into(),
    })
}

static XID_TOTALS: DerivedInfo = DerivedInfo {
    name: "DCGM_EXP_XID_ERRORS_TOTAL",
    help: std::borrow::Cow::Borrowed("XID errors."),
    unit: "{error}",
    kind: DerivedKind::Counter,
    otel_name: "DCGM_EXP_XID_ERRORS_TOTAL",
    subject: crate::snapshot::DerivedSubject::Device,
};
static HEALTH: DerivedInfo = DerivedInfo {
    name: "DCGM_EXP_GPU_HEALTH_STATUS",
    help: std::borrow::Cow::Borrowed("Health result per watch."),
    unit: "",
    kind: DerivedKind::Gauge,
    otel_name: "DCGM_EXP_GPU_HEALTH_STATUS",
    subject: crate::snapshot::DerivedSubject::Device,
};

fn snapshot_of(counters: Arc<CounterSet>, entities: Vec<EntityReading>) -> Snapshot {
    Snapshot {
        seq: 1,
        taken_at: UNIX_EPOCH + Duration::from_secs(1_700_000_010),
        counters,
        host: Arc::new(crate::snapshot::HostInfo::default()),
        driver_version: Some("550.1".into()),
        entities,
        processes: Vec::new(),
        derived: Vec::new(),
        per_set: Vec::new(),
        incidents: Vec::new(),
        distributions: Default::default(),
    }
}

fn builder(
    counters: &Arc<CounterSet>,
    names: MetricNames,
    temporality: Temporality,
) -> DirectBuilder {
    let naming = Naming::new(OtelAttributeStyle::Otel, LabelStyle::default(), counters)
        .with_hw_attributes(names.semconv());
    let split = naming.resource_split(OtelResourceMode::PerEntity);
    DirectBuilder::new(
        naming,
        split,
        &[KeyValue::new("service.name", "t")],
        counters.clone(),
        temporality,
        UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    )
    .with_metric_names(names)
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(kvs: &[PKeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

/// (resource attributes, metric) of every metric named `name`.
fn metrics<'a>(
    req: &'a ExportMetricsServiceRequest,
    name: &str,
) -> Vec<(Vec<(String, String)>, &'a Metric)> {
    req.resource_metrics
        .iter()
        .flat_map(|rm| {
            let r = attrs(&rm.resource.as_ref().unwrap().attributes);
            rm.scope_metrics[0]
                .metrics
                .iter()
                .filter(move |m| m.name == name)
                .map(move |m| (r.clone(), m))
        })
        .collect()
}

fn points(m: &Metric) -> &[NumberDataPoint] {
    match &m.data {
        Some(Data::Gauge(g)) => &g.data_points,
        Some(Data::Sum(s)) => &s.data_points,
        _ => &[],
    }
}

fn names(req: &ExportMetricsServiceRequest) -> Vec<String> {
    let mut v: Vec<String> = req
        .resource_metrics
        .iter()
        .flat_map(|rm| rm.scope_metrics[0].metrics.iter().map(|m| m.name.clone()))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A received point: (attributes, value).
type GotPoint = (Vec<(String, String)>, Option<number_data_point::Value>);

#[test]
fn every_row_of_the_table_gives_its_point() {
    let want = expectations();
    assert_eq!(want.len(), MAPPINGS.len(), "one expectation per table row");
    for (i, (m, (inputs, expected))) in MAPPINGS.iter().zip(want).enumerate() {
        // Each field once (a ratio's numerator is also in its denominator).
        let mut fields = m.input.fields();
        let mut seen = std::collections::HashSet::new();
        fields.retain(|f| seen.insert(*f));
        let csv: String = fields
            .iter()
            .map(|f| format!("{f}, gauge, input.\n"))
            .chain(std::iter::once(
                "DCGM_FI_DEV_SM_CLOCK, gauge, clock in MHz.\n".to_string(),
            ))
            .collect();
        let counters = Arc::new(counters::parse(&csv, "test").unwrap());
        let gpu = Arc::new(Entity::gpu(gpu_identity()));
        let mut values: Vec<FieldValue> = if fields.is_empty() {
            Vec::new()
        } else {
            inputs.clone()
        };
        values.push(FieldValue::Int(1410));
        let mut snap = snapshot_of(
            counters.clone(),
            vec![EntityReading {
                entity: gpu.clone(),
                values: values.into(),
                attribution: Arc::new(Attribution::default()),
            }],
        );
        if let Some(family) = m.input.derived() {
            let info = if family == XID_TOTALS.name {
                &XID_TOTALS
            } else {
                &HEALTH
            };
            snap.derived.push(DerivedFamily {
                info: std::borrow::Cow::Borrowed(info),
                samples: inputs
                    .iter()
                    .map(|v| DerivedSample {
                        entity: gpu.clone(),
                        attributes: Arc::from(Vec::new()),
                        labels: Vec::new(),
                        value: v.as_f64().unwrap(),
                    })
                    .collect(),
            });
        }
        let req = builder(&counters, MetricNames::Semconv, Temporality::Cumulative)
            .build(&snap)
            .request;
        let found = metrics(&req, m.name);
        assert_eq!(found.len(), 1, "row {i} {}: {:?}", m.name, names(&req));
        let (resource, metric) = &found[0];
        assert!(
            resource.contains(&("hw.id".into(), "GPU-aaa".into())),
            "{resource:?}"
        );
        assert_eq!(metric.unit, m.unit, "row {i}");
        assert!(!metric.description.is_empty());
        match (&metric.data, m.instrument) {
            (Some(Data::Gauge(_)), Sc::Gauge) => {}
            (Some(Data::Sum(s)), Sc::Counter) => {
                assert!(s.is_monotonic);
                assert_eq!(
                    s.aggregation_temporality,
                    AggregationTemporality::Cumulative as i32
                );
            }
            (Some(Data::Sum(s)), Sc::UpDownCounter) => {
                assert!(!s.is_monotonic);
                assert_eq!(
                    s.aggregation_temporality,
                    AggregationTemporality::Cumulative as i32
                );
            }
            (d, k) => panic!("row {i}: {k:?} sent as {d:?}"),
        }
        // Only this row's series (others of the metric need fields the CSV lacks).
        let got: Vec<GotPoint> = points(metric)
            .iter()
            .map(|dp| (attrs(&dp.attributes), dp.value))
            .collect();
        assert_eq!(got.len(), expected.len(), "row {i}: {got:?}");
        for ((point_attrs, value), (extra, want)) in got.iter().zip(&expected) {
            // Every `hw.*` point names its hardware: `hw.id` and `hw.type` (as on the Resource).
            let mut want_attrs: Vec<(String, String)> = m
                .attributes
                .iter()
                .chain(extra.iter())
                .chain([("hw.id", "GPU-aaa"), ("hw.type", "gpu")].iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            want_attrs.sort();
            assert_eq!(point_attrs, &want_attrs, "row {i}");
            match (value, want) {
                (Some(number_data_point::Value::AsInt(g)), Want::Int(w)) => {
                    assert_eq!(g, w, "row {i}")
                }
                (Some(number_data_point::Value::AsDouble(g)), Want::Double(w)) => {
                    assert_eq!(g, w, "row {i}")
                }
                (g, w) => panic!("row {i}: got {g:?}, want {w:?}"),
            }
        }
        // semconv mode: the field the row stands for is not sent under its DCGM name too, the
        // clock (no convention) is.
        let sent = names(&req);
        if let Some(first) = fields.first() {
            assert!(!sent.contains(&first.to_string()), "row {i}: {sent:?}");
        }
        assert!(
            sent.contains(&"DCGM_FI_DEV_SM_CLOCK".to_string()),
            "{sent:?}"
        );
        if let Input::DerivedHealth(f) | Input::DerivedSum(f) = m.input {
            assert!(!sent.contains(&f.to_string()), "row {i}: {sent:?}");
        }
    }
}

const CSV: &str = "DCGM_FI_DEV_GPU_UTIL, gauge, Percent of time a kernel ran.\n\
                   DCGM_FI_DEV_FB_USED, gauge, Used framebuffer in MiB.\n\
                   DCGM_FI_DEV_FB_FREE, gauge, Free framebuffer in MiB.\n\
                   DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy in mJ.\n\
                   DCGM_FI_DEV_SM_CLOCK, gauge, SM clock in MHz.\n\
                   DCGM_FI_DRIVER_VERSION, label, Driver version.\n";

/// A GPU and one of its MIG instances.
fn fleet(counters: &Arc<CounterSet>, energy: i64) -> Snapshot {
    use FieldValue::{Int, Text};
    let gpu = gpu_identity();
    let mig = Arc::new(MigIdentity {
        entity_id: 0,
        gi_id: 3,
        profile: "1g.10gb".into(),
        uuid: "MIG-111".into(),
    });
    snapshot_of(
        counters.clone(),
        vec![
            EntityReading {
                entity: Arc::new(Entity::gpu(gpu.clone())),
                values: vec![
                    Int(50),
                    Int(20000),
                    Int(60000),
                    Int(energy),
                    Int(1410),
                    Text("550.1".into()),
                ]
                .into(),
                attribution: Arc::new(Attribution::default()),
            },
            EntityReading {
                entity: Arc::new(Entity::instance(gpu, mig)),
                values: vec![
                    Int(25),
                    Int(1000),
                    Int(9000),
                    FieldValue::Absent(crate::snapshot::Absent::NotApplicable),
                    Int(1410),
                    Text("550.1".into()),
                ]
                .into(),
                attribution: Arc::new(Attribution::default()),
            },
        ],
    )
}

#[test]
fn semconv_replaces_both_adds_in_one_request() {
    let counters = Arc::new(counters::parse(CSV, "test").unwrap());
    let snap = fleet(&counters, 5000);
    let semconv = builder(&counters, MetricNames::Semconv, Temporality::Cumulative).build(&snap);
    assert_eq!(
        names(&semconv.request),
        [
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_SM_CLOCK",
            "hw.energy",
            "hw.gpu.memory.limit",
            "hw.gpu.memory.usage",
            "hw.gpu.memory.utilization",
            "hw.gpu.utilization",
        ]
    );
    let both = builder(&counters, MetricNames::Both, Temporality::Cumulative).build(&snap);
    assert_eq!(
        names(&both.request),
        [
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "hw.energy",
            "hw.gpu.memory.limit",
            "hw.gpu.memory.usage",
            "hw.gpu.memory.utilization",
            "hw.gpu.utilization",
        ]
    );
    // Both: the DCGM-named part is what dcgm mode sends (identities aside: hw.* identity is on).
    let energy = |req: &ExportMetricsServiceRequest, name: &str| -> Vec<String> {
        metrics(req, name)
            .iter()
            .flat_map(|(_, m)| points(m).iter().map(|dp| format!("{:?}", dp.value)))
            .collect()
    };
    assert_eq!(
        energy(&both.request, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        ["Some(AsInt(5000))"]
    );
    assert_eq!(energy(&both.request, "hw.energy"), ["Some(AsDouble(5.0))"]);
}

#[test]
fn gpu_and_mig_resources_carry_the_hardware_identity() {
    let counters = Arc::new(counters::parse(CSV, "test").unwrap());
    let snap = fleet(&counters, 5000);
    let req = builder(&counters, MetricNames::Semconv, Temporality::Cumulative)
        .build(&snap)
        .request;
    let found = metrics(&req, "hw.gpu.memory.usage");
    assert_eq!(found.len(), 2);
    let get = |r: &Vec<(String, String)>, k: &str| {
        r.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone())
    };
    let gpu = &found[0].0;
    assert_eq!(get(gpu, "hw.id").as_deref(), Some("GPU-aaa"));
    assert_eq!(get(gpu, "hw.name").as_deref(), Some("nvidia0"));
    assert_eq!(get(gpu, "hw.parent"), None);
    assert_eq!(
        get(gpu, "hw.serial_number").as_deref(),
        Some("1650923000001")
    );
    assert_eq!(
        get(gpu, "hw.firmware_version").as_deref(),
        Some("96.00.99.00.01")
    );
    assert_eq!(get(gpu, "hw.driver_version").as_deref(), Some("550.1"));
    assert_eq!(get(gpu, "nvidia.driver.version").as_deref(), Some("550.1"));
    assert_eq!(get(gpu, "hw.type").as_deref(), Some("gpu"));
    assert_eq!(get(gpu, "hw.vendor").as_deref(), Some("NVIDIA"));
    let mig = &found[1].0;
    assert_eq!(get(mig, "hw.id").as_deref(), Some("MIG-111"));
    assert_eq!(get(mig, "hw.name").as_deref(), Some("nvidia0/gi3"));
    assert_eq!(get(mig, "hw.parent").as_deref(), Some("GPU-aaa"));
    assert_eq!(get(mig, "nvidia.mig.profile").as_deref(), Some("1g.10gb"));
    // The MIG instance's memory: 1000 MiB used of 1000 + 9000.
    let values: Vec<String> = found
        .iter()
        .map(|(_, m)| format!("{:?}", points(m)[0].value))
        .collect();
    assert_eq!(
        values,
        ["Some(AsInt(20971520000))", "Some(AsInt(1048576000))"]
    );
    let util: Vec<String> = metrics(&req, "hw.gpu.memory.utilization")
        .iter()
        .map(|(_, m)| format!("{:?}", points(m)[0].value))
        .collect();
    assert_eq!(util, ["Some(AsDouble(0.25))", "Some(AsDouble(0.1))"]);
}

#[test]
fn energy_is_a_delta_in_joules_with_delta_temporality() {
    let counters = Arc::new(counters::parse(CSV, "test").unwrap());
    let mut b = builder(&counters, MetricNames::Semconv, Temporality::Delta);
    let first = b.build(&fleet(&counters, 5000)).request;
    let mut snap = fleet(&counters, 7500);
    snap.seq = 2;
    let second = b.build(&snap).request;
    let energy = |req: &ExportMetricsServiceRequest| {
        let (_, m) = metrics(req, "hw.energy").into_iter().next().unwrap();
        let Some(Data::Sum(s)) = &m.data else {
            panic!()
        };
        assert_eq!(
            s.aggregation_temporality,
            AggregationTemporality::Delta as i32
        );
        assert!(s.is_monotonic);
        format!("{:?}", s.data_points[0].value)
    };
    assert_eq!(energy(&first), "Some(AsDouble(5.0))");
    assert_eq!(energy(&second), "Some(AsDouble(2.5))");
    // Memory usage is an updowncounter: cumulative whatever the preference.
    let (_, m) = metrics(&second, "hw.gpu.memory.usage")
        .into_iter()
        .next()
        .unwrap();
    let Some(Data::Sum(s)) = &m.data else {
        panic!()
    };
    assert_eq!(
        s.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
}

#[test]
fn health_is_the_worst_watch_per_gpu_and_mig_instances_have_none() {
    let counters = Arc::new(counters::parse(CSV, "test").unwrap());
    let mut snap = fleet(&counters, 5000);
    let gpu = snap.entities[0].entity.clone();
    snap.derived.push(DerivedFamily {
        info: std::borrow::Cow::Borrowed(&HEALTH),
        samples: [0.0, 20.0, 10.0]
            .into_iter()
            .map(|value| DerivedSample {
                entity: gpu.clone(),
                attributes: Arc::from(Vec::new()),
                labels: Vec::new(),
                value,
            })
            .collect(),
    });
    let both = builder(&counters, MetricNames::Both, Temporality::Cumulative)
        .build(&snap)
        .request;
    let status = metrics(&both, "hw.status");
    assert_eq!(status.len(), 1, "the GPU only");
    let states: Vec<(String, String)> = points(status[0].1)
        .iter()
        .map(|dp| {
            let state = attrs(&dp.attributes)
                .into_iter()
                .find(|(k, _)| k == "hw.state")
                .map(|(_, v)| v)
                .unwrap_or_default();
            (state, format!("{:?}", dp.value))
        })
        .collect();
    assert_eq!(
        states,
        [
            ("ok".to_string(), "Some(AsInt(0))".to_string()),
            ("degraded".to_string(), "Some(AsInt(0))".to_string()),
            ("failed".to_string(), "Some(AsInt(1))".to_string()),
        ]
    );
    // both: the derived family goes out under its own name too.
    assert_eq!(metrics(&both, "DCGM_EXP_GPU_HEALTH_STATUS").len(), 1);
}
