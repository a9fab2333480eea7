//! The per-pod cost counters over a scripted pod lifetime: a pod holds a whole GPU for 30 collections
//! of 1 s while the GPU's energy counter grows at a known slope, a MIG instance is held by one pod and
//! another instance shared by two; the exposition lines a scrape shows are exact (GPU-seconds, joules
//! from the energy counter, idle seconds below the threshold), and a departed pod's series go once
//! the retention has passed. Drives the collector-side accumulator and the real Prometheus renderer.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dcgm_otel::config::LabelStyle;
use dcgm_otel::counters;
use dcgm_otel::enrich::kubernetes::cost::{CostAccumulator, CostSettings, EqualShares};
use dcgm_otel::enrich::kubernetes::PodRef;
use dcgm_otel::export::prometheus::Renderer;
use dcgm_otel::snapshot::{
    Attribution, Entity, EntityReading, FieldValue, GpuIdentity, HostInfo, MigIdentity, Snapshot,
};
use dcgm_otel::telemetry::self_metrics::SelfMetrics;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};

/// On OTLP the cost counters are monotonic cumulative sums on the pod's own Resource (the holder's
/// view: `k8s.*` attributes, no hardware identity) with the GPU's `hw.id` on the point, under OTel
/// names; the GPU's own readings stay on the GPU's Resource (which carries pod `a` while `a` alone
/// holds it, collection 30). Once the pod is gone (collection 31) its retained series still arrive
/// on its Resource.
fn otlp_checks(snap: &Snapshot, k: u32) {
    use dcgm_otel::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
    use dcgm_otel::export::otel::otlp::request::DirectBuilder;
    let naming = Naming::new(
        OtelAttributeStyle::Otel,
        LabelStyle::default(),
        &snap.counters,
    );
    let split = naming.resource_split(OtelResourceMode::PerEntity);
    let mut builder = DirectBuilder::new(
        naming,
        split,
        &[],
        snap.counters.clone(),
        opentelemetry_sdk::metrics::Temporality::Cumulative,
        SystemTime::now(),
    );
    let request = builder.build(snap).request;
    let text = |kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue], key: &str| {
        kvs.iter().find(|kv| kv.key == key).and_then(|kv| {
            match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.clone()),
                _ => None,
            }
        })
    };
    let attr = |rm: &opentelemetry_proto::tonic::metrics::v1::ResourceMetrics, key: &str| {
        rm.resource.as_ref().and_then(|r| text(&r.attributes, key))
    };
    let gpu0: Vec<_> = request
        .resource_metrics
        .iter()
        .filter(|rm| attr(rm, "hw.id").as_deref() == Some("GPU-0"))
        .collect();
    let holder: Vec<_> = request
        .resource_metrics
        .iter()
        .filter(|rm| {
            attr(rm, "k8s.pod.name").as_deref() == Some("a") && attr(rm, "hw.id").is_none()
        })
        .collect();
    assert_eq!(holder.len(), 1, "one Resource of pod a at collection {k}");
    assert_eq!(attr(holder[0], "k8s.namespace.name").as_deref(), Some("ml"));
    let metrics = &holder[0].scope_metrics[0].metrics;
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    let cost = [
        "nvidia.pod.gpu.time",
        "nvidia.pod.gpu.energy",
        "nvidia.pod.gpu.idle_time",
    ];
    assert_eq!(names, cost, "the pod's Resource carries its cost counters");
    if k == 30 {
        assert_eq!(gpu0.len(), 1, "GPU 0 is one Resource");
        assert_eq!(attr(gpu0[0], "k8s.pod.name").as_deref(), Some("a"));
        let own: Vec<&str> = gpu0[0].scope_metrics[0]
            .metrics
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert!(own.contains(&"DCGM_FI_DEV_GPU_UTIL"), "{own:?}");
        assert!(!own.iter().any(|n| cost.contains(n)), "{own:?}");
    }
    let seconds = metrics
        .iter()
        .find(|m| m.name == cost[0])
        .expect("GPU-seconds metric");
    assert_eq!(seconds.unit, "s");
    let Some(Data::Sum(sum)) = &seconds.data else {
        panic!("a Sum")
    };
    assert!(sum.is_monotonic);
    assert_eq!(sum.aggregation_temporality, 2, "cumulative");
    let point = sum
        .data_points
        .iter()
        .find(|p| text(&p.attributes, "hw.id").as_deref() == Some("GPU-0"))
        .expect("pod a's GPU-0 series, the GPU named on the point");
    assert_eq!(
        point.value,
        Some(number_data_point::Value::AsDouble(if k == 30 {
            29.0
        } else {
            30.0
        }))
    );
}

const CSV: &str = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n\
DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n\
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).\n\
DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.\n";

fn gpu(index: u32) -> Arc<GpuIdentity> {
    Arc::new(GpuIdentity {
        index,
        uuid: format!("GPU-{index}"),
        pci_bus_id: format!("00000000:0{index}:00.0"),
        model: "NVIDIA H100 80GB HBM3".into(),
        serial: String::new(),
        vbios: String::new(),
    })
}

fn mig(gi: u32, profile: &str) -> Arc<MigIdentity> {
    Arc::new(MigIdentity {
        entity_id: 8 + gi,
        gi_id: gi,
        profile: profile.into(),
        uuid: format!("MIG-{gi}"),
    })
}

fn attribution(pods: &[&str]) -> Arc<Attribution> {
    let mut a = Attribution::default();
    let sets: Vec<_> = pods
        .iter()
        .map(|p| PodRef::new("ml", p, "main").attributes())
        .collect();
    a.split(&sets);
    Arc::new(a)
}

#[test]
fn thirty_collections_of_one_second_then_retention() {
    let counters = Arc::new(counters::parse(CSV, "test").unwrap());
    let registry = SelfMetrics::new();
    let mut acc = CostAccumulator::new(
        CostSettings {
            idle_threshold_percent: 5.0,
            retention: Duration::from_secs(10),
        },
        &registry,
    );
    let (g0, g1) = (gpu(0), gpu(1));
    let whole = Arc::new(Entity::gpu(g0.clone()));
    let parent = Arc::new(Entity::gpu(g1.clone()));
    let big = Arc::new(Entity::instance(g1.clone(), mig(1, "3g.40gb")));
    let small = Arc::new(Entity::instance(g1.clone(), mig(7, "1g.10gb")));
    let renderer = Renderer::new(LabelStyle::default(), None);
    let host = Arc::new(HostInfo {
        hostname: Some("node-a".into()),
        node_name: None,
    });
    let mut last = String::new();
    // Collections 1..=45 at t = 0, 1, 2, ... s. The pods are listed at collections 1..=30.
    for k in 1..=45u32 {
        let t = f64::from(k - 1);
        let held = k <= 30;
        let pods = |p: &[&'static str]| {
            if held {
                attribution(p)
            } else {
                attribution(&[])
            }
        };
        // GPU 0 draws 300 W (energy counter in mJ), busy then idle from collection 21 on.
        let util0 = if k <= 20 { 50 } else { 2 };
        let e0 = 5_000_000_i64 + 300_000 * i64::from(k - 1);
        let e1 = 9_000_000_i64 + 700_000 * i64::from(k - 1);
        let reading =
            |entity: &Arc<Entity>, util: FieldValue, energy: i64, engine: f64, a| EntityReading {
                entity: entity.clone(),
                values: vec![
                    util,
                    FieldValue::Double(123.0),
                    FieldValue::Int(energy),
                    FieldValue::Double(engine),
                ]
                .into(),
                attribution: a,
            };
        let entities = vec![
            reading(&whole, FieldValue::Int(util0), e0, 0.5, pods(&["a"])),
            reading(&parent, FieldValue::Int(60), e1, 0.6, attribution(&[])),
            reading(
                &big,
                FieldValue::Absent(dcgm_otel::snapshot::Absent::NotSupported),
                e1,
                0.6,
                pods(&["b"]),
            ),
            reading(
                &small,
                FieldValue::Absent(dcgm_otel::snapshot::Absent::NotSupported),
                e1,
                0.01,
                pods(&["c", "d"]),
            ),
        ];
        let derived = acc.collect(&entities, &counters, t, &EqualShares);
        let snap = Snapshot {
            seq: u64::from(k),
            taken_at: SystemTime::now(),
            counters: counters.clone(),
            host: host.clone(),
            driver_version: None,
            entities,
            derived,
            per_set: Vec::new(),
            incidents: Vec::new(),
            distributions: Default::default(),
            processes: Vec::new(),
        };
        let mut out = String::new();
        renderer.render_metrics(&snap, &mut out);
        if k == 30 || k == 31 {
            otlp_checks(&snap, k);
        }
        last = out
            .lines()
            .filter(|l| l.contains("dcgm_otel_pod_"))
            .collect::<Vec<_>>()
            .join("\n");
        if k == 31 {
            let id0 = "gpu=\"0\",UUID=\"GPU-0\",pci_bus_id=\"00000000:00:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-a\"";
            let id1 = |gi: u32, p: &str| {
                format!("gpu=\"1\",UUID=\"GPU-1\",pci_bus_id=\"00000000:01:00.0\",device=\"nvidia1\",modelName=\"NVIDIA H100 80GB HBM3\",GPU_I_PROFILE=\"{p}\",GPU_I_ID=\"{gi}\",Hostname=\"node-a\"")
            };
            let pod = |p: &str| format!("container=\"main\",namespace=\"ml\",pod=\"{p}\"");
            let expected = [
                "# HELP dcgm_otel_pod_gpu_seconds_total GPU-seconds held by the pod: seconds held times the pod's share of the GPU (1 for a whole GPU, compute slices / GPU slices for a MIG instance, 1/N for one of N pods sharing a device).".to_string(),
                "# TYPE dcgm_otel_pod_gpu_seconds_total counter".into(),
                // 30 intervals of 1 s (the last one closed by collection 31, when the pod is gone)
                format!("dcgm_otel_pod_gpu_seconds_total{{{id0},{}}} 30", pod("a")),
                format!("dcgm_otel_pod_gpu_seconds_total{{{},{}}} 12.857143", id1(1, "3g.40gb"), pod("b")),
                format!("dcgm_otel_pod_gpu_seconds_total{{{},{}}} 2.142857", id1(7, "1g.10gb"), pod("c")),
                format!("dcgm_otel_pod_gpu_seconds_total{{{},{}}} 2.142857", id1(7, "1g.10gb"), pod("d")),
                "# HELP dcgm_otel_pod_gpu_energy_joules_total Energy of the GPU while the pod held it, times the pod's share, in joules (from the GPU's energy counter).".into(),
                "# TYPE dcgm_otel_pod_gpu_energy_joules_total counter".into(),
                // 30 s at 300 W; MIG: 30 s at 700 W x 3/7, x 1/7 / 2
                format!("dcgm_otel_pod_gpu_energy_joules_total{{{id0},{}}} 9000", pod("a")),
                format!("dcgm_otel_pod_gpu_energy_joules_total{{{},{}}} 9000", id1(1, "3g.40gb"), pod("b")),
                format!("dcgm_otel_pod_gpu_energy_joules_total{{{},{}}} 1500", id1(7, "1g.10gb"), pod("c")),
                format!("dcgm_otel_pod_gpu_energy_joules_total{{{},{}}} 1500", id1(7, "1g.10gb"), pod("d")),
                "# HELP dcgm_otel_pod_gpu_idle_seconds_total GPU-seconds held by the pod while the device's utilization stayed below the idle threshold.".into(),
                "# TYPE dcgm_otel_pod_gpu_idle_seconds_total counter".into(),
                // GPU 0 below 5 % at collections 21..=31: 11 intervals; the 1g instance's engine at 1 %
                format!("dcgm_otel_pod_gpu_idle_seconds_total{{{id0},{}}} 11", pod("a")),
                format!("dcgm_otel_pod_gpu_idle_seconds_total{{{},{}}} 0", id1(1, "3g.40gb"), pod("b")),
                format!("dcgm_otel_pod_gpu_idle_seconds_total{{{},{}}} 2.142857", id1(7, "1g.10gb"), pod("c")),
                format!("dcgm_otel_pod_gpu_idle_seconds_total{{{},{}}} 2.142857", id1(7, "1g.10gb"), pod("d")),
            ]
            .join("\n");
            assert_eq!(last, expected);
        }
        if k == 40 {
            // 10 s after the pods were last held (collection 30 at t = 29): still kept, frozen.
            assert!(last.contains("pod=\"a\"} 30"), "{last}");
        }
    }
    // t = 44: more than 10 s since the pods were last held: the series are gone.
    assert_eq!(
        last, "",
        "departed pods' series dropped after the retention"
    );
    let mut text = String::new();
    registry.render(&mut text);
    assert!(
        text.contains("dcgm_otel_pod_cost_series_dropped_total{reason=\"retention\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("dcgm_otel_pod_energy_intervals_total{source=\"counter\"} 90"),
        "{text}"
    );
}

/// Churn: 25,000 short-lived pods (1,000 new ones sharing GPU 0 at each of 25 collections, each seen
/// once) with a day of retention. The accumulator keeps at most `MAX_SERIES` (20,000) pod × device
/// series, drops the longest-unheld beyond it (counted `reason="limit"`), and once the retention has
/// passed with no pod left it keeps none (counted `reason="retention"`): memory is bounded by the
/// limit whatever the churn.
#[test]
fn pod_churn_is_bounded_by_the_series_limit_then_the_retention() {
    use dcgm_otel::enrich::kubernetes::cost::MAX_SERIES;
    let counters = Arc::new(counters::parse(CSV, "test").unwrap());
    let registry = SelfMetrics::new();
    let mut acc = CostAccumulator::new(
        CostSettings {
            idle_threshold_percent: 5.0,
            retention: Duration::from_secs(86_400),
        },
        &registry,
    );
    let whole = Arc::new(Entity::gpu(gpu(0)));
    let reading = |k: u32, a: Arc<Attribution>| EntityReading {
        entity: whole.clone(),
        values: vec![
            FieldValue::Int(50),
            FieldValue::Double(300.0),
            FieldValue::Int(1_000_000 + 300_000 * i64::from(k)),
            FieldValue::Double(0.5),
        ]
        .into(),
        attribution: a,
    };
    let gauge = |text: &str, series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or(0.0)
    };
    let mut most = 0usize;
    for k in 0..=25u32 {
        let attribution = if k < 25 {
            let names: Vec<String> = (0..1000).map(|i| format!("job-{k}-{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            attribution(&refs)
        } else {
            attribution(&[])
        };
        let families = acc.collect(
            &[reading(k, attribution)],
            &counters,
            f64::from(k),
            &EqualShares,
        );
        most = most.max(families.iter().map(|f| f.samples.len()).max().unwrap_or(0));
    }
    let mut text = String::new();
    registry.render(&mut text);
    assert_eq!(
        gauge(&text, "dcgm_otel_pod_cost_series "),
        MAX_SERIES as f64,
        "{text}"
    );
    assert_eq!(
        gauge(
            &text,
            "dcgm_otel_pod_cost_series_dropped_total{reason=\"limit\"}"
        ),
        5000.0
    );
    assert!(most <= MAX_SERIES, "{most} series in one collection");
    // A day later, nobody on the GPU: every series has expired.
    let families = acc.collect(
        &[reading(26, attribution(&[]))],
        &counters,
        86_500.0,
        &EqualShares,
    );
    assert!(families.iter().all(|f| f.samples.is_empty()));
    let mut text = String::new();
    registry.render(&mut text);
    assert_eq!(gauge(&text, "dcgm_otel_pod_cost_series "), 0.0, "{text}");
    assert_eq!(
        gauge(
            &text,
            "dcgm_otel_pod_cost_series_dropped_total{reason=\"retention\"}"
        ),
        MAX_SERIES as f64
    );
}

/// The energy fallbacks, exactly (docs/kubernetes.md "Energy"), over five collections 1 s apart:
/// - GPU 0 has no energy counter (`NotSupported`), its power reads 100, 200, 300, 400, 500 W: each
///   interval's energy is the trapezoid of the power at both ends, 150 + 250 + 350 + 450 = 1200 J (not
///   1000 or 1400, the power at one end);
/// - GPU 1's counter reads 1,000,000, 1,300,000, then 200,000 (it went backwards: a driver reload),
///   500,000, 800,000 mJ: the interval where it fell has no energy (not the power's 123 W, not a negative
///   delta, not the new reading), the others 300 J each: 900 J;
/// - GPU 2 has neither: its pod has GPU-seconds and no energy series.
#[test]
fn energy_from_power_without_a_counter_and_none_when_the_counter_goes_backwards() {
    let counters = Arc::new(counters::parse(CSV, "test").unwrap());
    let registry = SelfMetrics::new();
    let mut acc = CostAccumulator::new(
        CostSettings {
            idle_threshold_percent: 5.0,
            retention: Duration::from_secs(600),
        },
        &registry,
    );
    let renderer = Renderer::new(LabelStyle::default(), None);
    let host = Arc::new(HostInfo {
        hostname: Some("node-a".into()),
        node_name: None,
    });
    let gpus: Vec<Arc<Entity>> = (0..3).map(|i| Arc::new(Entity::gpu(gpu(i)))).collect();
    let absent = || FieldValue::Absent(dcgm_otel::snapshot::Absent::NotSupported);
    let energy1 = [1_000_000, 1_300_000, 200_000, 500_000, 800_000];
    let mut out = String::new();
    for (k, &energy1) in energy1.iter().enumerate() {
        let reading = |g: usize, power: FieldValue, energy: FieldValue, pod: &str| EntityReading {
            entity: gpus[g].clone(),
            values: vec![FieldValue::Int(50), power, energy, FieldValue::Double(0.5)].into(),
            attribution: attribution(&[pod]),
        };
        let entities = vec![
            reading(0, FieldValue::Double(100.0 * (k + 1) as f64), absent(), "a"),
            reading(1, FieldValue::Double(123.0), FieldValue::Int(energy1), "b"),
            reading(2, absent(), absent(), "c"),
        ];
        let derived = acc.collect(&entities, &counters, k as f64, &EqualShares);
        let snap = Snapshot {
            seq: k as u64 + 1,
            taken_at: SystemTime::now(),
            counters: counters.clone(),
            host: host.clone(),
            driver_version: None,
            entities,
            derived,
            per_set: Vec::new(),
            incidents: Vec::new(),
            distributions: Default::default(),
            processes: Vec::new(),
        };
        out.clear();
        renderer.render_metrics(&snap, &mut out);
    }
    let id = |g: u32| {
        format!("gpu=\"{g}\",UUID=\"GPU-{g}\",pci_bus_id=\"00000000:0{g}:00.0\",device=\"nvidia{g}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node-a\"")
    };
    let pod = |p: &str| format!("container=\"main\",namespace=\"ml\",pod=\"{p}\"");
    let energy: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("dcgm_otel_pod_gpu_energy_joules_total{"))
        .collect();
    assert_eq!(
        energy,
        [
            format!(
                "dcgm_otel_pod_gpu_energy_joules_total{{{},{}}} 1200",
                id(0),
                pod("a")
            ),
            format!(
                "dcgm_otel_pod_gpu_energy_joules_total{{{},{}}} 900",
                id(1),
                pod("b")
            ),
        ]
    );
    assert!(
        out.contains(&format!(
            "dcgm_otel_pod_gpu_seconds_total{{{},{}}} 4\n",
            id(2),
            pod("c")
        )),
        "{out}"
    );
    let mut text = String::new();
    registry.render(&mut text);
    for line in [
        "dcgm_otel_pod_energy_intervals_total{source=\"counter\"} 3",
        "dcgm_otel_pod_energy_intervals_total{source=\"power\"} 4",
        // GPU 1's fall, and GPU 2's four intervals.
        "dcgm_otel_pod_energy_intervals_total{source=\"none\"} 5",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
}
