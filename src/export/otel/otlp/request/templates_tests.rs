//! The request written from templates against prost's encoding of the request built as proto
//! values, byte for byte, over a sequence of exports: both resource modes, both attribute styles, the
//! three metric-name modes, delta and cumulative temporality (a counter reset, a series that departs
//! and comes back), derived families (a device family with series labels, on a shared GPU, a MIG
//! board and a departed GPU; a holder family: pod GPU-seconds), per-process points, MIG instances
//! (with and without their GPU monitored), NvLinks, XID values that bring attributes, absent and
//! non-finite values.

use std::borrow::Cow;
use std::time::{Duration, UNIX_EPOCH};

use prost::Message;

use super::*;
use crate::config::LabelStyle;
use crate::enrich::kubernetes::cost::GPU_SECONDS;
use crate::export::otel::naming::{OtelAttributeStyle, OtelResourceMode};
use crate::export::otel::test_fleet::{self, pods};
use crate::snapshot::attribution::{self as attr, Attribute};
use crate::snapshot::{
    DerivedFamily, DerivedInfo, DerivedKind, DerivedSample, DerivedSubject, Entity, EntityReading,
    FieldValue, GpuIdentity, MigIdentity, ProcessReading, SeriesLabel,
};

const CSV: &str = "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock in MHz.\n\
                   DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy in mJ.\n\
                   DCGM_FI_DEV_NVLINK_PPRM_OPER_RECOVERY, gauge, Link recovery status.\n\
                   DCGM_FI_DEV_POWER_USAGE, gauge, Power draw in W.\n\
                   DCGM_FI_DRIVER_VERSION, label, Driver version.\n\
                   DCGM_FI_DEV_XID_ERRORS, gauge, Last XID.\n\
                   DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Graphics engine active.\n\
                   DCGM_FI_DEV_FB_USED, gauge, Used framebuffer in MiB.\n\
                   DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization.\n";

static XID_TOTALS: DerivedInfo = DerivedInfo {
    name: "DCGM_EXP_XID_ERRORS_TOTAL",
    help: Cow::Borrowed("XID errors."),
    unit: "{error}",
    kind: DerivedKind::Counter,
    otel_name: "DCGM_EXP_XID_ERRORS_TOTAL",
    subject: DerivedSubject::Device,
};

static HEALTH: DerivedInfo = DerivedInfo {
    name: "DCGM_EXP_GPU_HEALTH_STATUS",
    help: Cow::Borrowed("Health result per watch."),
    unit: "",
    kind: DerivedKind::Gauge,
    otel_name: "DCGM_EXP_GPU_HEALTH_STATUS",
    subject: DerivedSubject::Device,
};

fn gpu(index: u32, uuid: &str) -> Arc<GpuIdentity> {
    Arc::new(GpuIdentity {
        index,
        uuid: uuid.into(),
        pci_bus_id: format!("00000000:{:02X}:00.0", 0x40 + index),
        model: "NVIDIA H100 80GB HBM3".into(),
        serial: String::new(),
        vbios: String::new(),
    })
}

fn mig(gpu: &Arc<GpuIdentity>, gi: u32, uuid: &str) -> Arc<Entity> {
    Arc::new(Entity::instance(
        gpu.clone(),
        Arc::new(MigIdentity {
            entity_id: gi,
            gi_id: gi,
            profile: "1g.10gb".into(),
            uuid: uuid.into(),
        }),
    ))
}

/// Export `seq` (1..=5) of the fleet: the test fleet plus MIG instances (of the monitored GPU 0 and
/// of a GPU in MIG mode that is not monitored itself), derived families and processes. Energy goes
/// back at export 3 (a reset); the plain GPU departs at export 4 and returns at 5.
fn fleet(counters: &Arc<CounterSet>, seq: u64) -> Snapshot {
    use FieldValue::{Absent as A, Double as D, Int as I};
    let energy = [5000, 7000, 100, 300, 400][(seq as usize - 1) % 5];
    let mut snap = test_fleet::snapshot(counters.clone(), seq, energy);
    snap.taken_at = UNIX_EPOCH + Duration::from_secs(1_700_000_010 + seq);
    let na = || A(crate::snapshot::Absent::NotApplicable);
    let extra = [
        // XID: a code that changes between exports (the cached attributes follow).
        vec![
            I([0, 43, 43, 0, 13][(seq as usize - 1) % 5]),
            na(),
            I(70_000),
            D(0.5),
        ],
        vec![na(), na(), na(), na()],
        vec![na(), na(), na(), na()],
        vec![I(-1), D(f64::INFINITY), na(), na()],
        vec![I(31), na(), I(1000), D(99.0)],
    ];
    for (e, values) in snap.entities.iter_mut().zip(extra) {
        let mut all: Vec<FieldValue> = (0..4)
            .map(|r| e.values.get(r).cloned().unwrap_or_else(na))
            .collect();
        all.extend(values);
        e.values = all.into();
    }
    let board = gpu(3, "GPU-ddd");
    let gpu0 = snap.entities[0].entity.gpu.clone().unwrap();
    let instance = |entity: Arc<Entity>, xid: i64, active: f64| EntityReading {
        entity,
        values: vec![
            I(1200),
            I(energy * 3),
            na(),
            D(150.0),
            FieldValue::Text("550.1".into()),
            I(xid),
            D(active),
            I(512 * seq as i64),
            na(),
        ]
        .into(),
        attribution: Arc::new(pods(&["m"])),
    };
    snap.entities
        .push(instance(mig(&board, 1, "MIG-d1"), 0, 0.25));
    snap.entities
        .push(instance(mig(&board, 2, "MIG-d2"), 79, 0.75));
    snap.entities
        .push(instance(mig(&gpu0, 5, "MIG-a5"), 0, f64::NAN));
    let shared = snap.entities[0].entity.clone();
    let plain = snap.entities[4].entity.clone();
    if seq == 4 {
        snap.entities.remove(4);
    }
    snap.derived = derived(&shared, &plain, &board, seq);
    snap.processes = processes(&shared);
    snap.distributions = distributions(snap.entities.len(), seq);
    snap
}

/// `--distribution DCGM_FI_DEV_POWER_USAGE@100ms`: five samples on every entity (a board-level field:
/// written once per board, as the field's own points).
fn distributions(entities: usize, seq: u64) -> crate::snapshot::distribution::Distributions {
    use crate::snapshot::distribution::{Accumulator, DistributionSpec};
    let specs: Arc<[DistributionSpec]> = Arc::from(vec![DistributionSpec {
        field: 155,
        name: "DCGM_FI_DEV_POWER_USAGE".into(),
        every: Duration::from_millis(100),
    }]);
    let mut acc = Accumulator::new(specs, entities, Duration::from_secs(1));
    let start_us = (1_700_000_009 + seq as i64) * 1_000_000;
    for e in 0..entities {
        for k in 1..=5i64 {
            acc.push(
                e,
                0,
                start_us + k * 100_000,
                100.0 + (k * (e as i64 + 1)) as f64,
            );
        }
    }
    acc.finish(start_us + 1_000_000)
}

fn derived(
    shared: &Arc<Entity>,
    plain: &Arc<Entity>,
    board: &Arc<GpuIdentity>,
    seq: u64,
) -> Vec<DerivedFamily> {
    let xids = (seq % 3) as f64 * 2.0;
    let code = |c: &str| {
        vec![SeriesLabel {
            prometheus: Cow::Borrowed("xid"),
            otel: Some("nvidia.xid.code"),
            otel_int: true,
            value: c.into(),
        }]
    };
    let sample = |entity: &Arc<Entity>, labels, value| DerivedSample {
        entity: entity.clone(),
        attributes: Arc::from(Vec::new()),
        labels,
        value,
    };
    let departed = Arc::new(Entity::gpu(gpu(7, "GPU-eee")));
    let pod = |name: &str| -> Arc<[Attribute]> {
        Arc::from(vec![
            Attribute::new(&attr::NAMESPACE, "ml"),
            Attribute::new(&attr::POD, name),
        ])
    };
    vec![
        DerivedFamily {
            info: Cow::Borrowed(&XID_TOTALS),
            samples: vec![
                sample(shared, code("31"), xids),
                sample(shared, code("31"), xids),
                sample(shared, code("79"), 1.0),
                sample(&Arc::new(Entity::gpu(board.clone())), code("48"), xids),
                sample(&departed, code("13"), 3.0 + xids),
                sample(plain, Vec::new(), f64::NAN),
            ],
        },
        DerivedFamily {
            info: Cow::Borrowed(&HEALTH),
            samples: vec![sample(shared, Vec::new(), 20.0)],
        },
        DerivedFamily {
            info: Cow::Borrowed(&GPU_SECONDS),
            samples: ["a", "b"]
                .iter()
                .map(|p| DerivedSample {
                    entity: shared.clone(),
                    attributes: pod(p),
                    labels: Vec::new(),
                    value: 15.0 * seq as f64,
                })
                .collect(),
        },
    ]
}

fn processes(gpu0: &Arc<Entity>) -> Vec<ProcessReading> {
    let mut a = ProcessReading::new(gpu0.clone(), 4242, "python3");
    a.memory_bytes = Some(1 << 30);
    a.sm_util = Some(55.0);
    a.attribution = Arc::new(pods(&["a"]));
    let mut host = ProcessReading::new(gpu0.clone(), 5120, "nvidia-smi");
    host.memory_bytes = Some(64 << 20);
    host.sm_util = Some(f64::NAN);
    vec![a, host]
}

fn builder(
    counters: &Arc<CounterSet>,
    style: OtelAttributeStyle,
    mode: OtelResourceMode,
    names: MetricNames,
    temporality: Temporality,
    start: u64,
) -> DirectBuilder {
    let naming =
        Naming::new(style, LabelStyle::default(), counters).with_hw_attributes(names.semconv());
    let split = naming.resource_split(mode);
    DirectBuilder::new(
        naming,
        split,
        &[
            KeyValue::new("service.name", "t"),
            KeyValue::new("host.name", "node-a"),
        ],
        counters.clone(),
        temporality,
        UNIX_EPOCH + Duration::from_secs(start),
    )
    .with_metric_names(names)
}

#[test]
fn templates_write_prosts_bytes_of_every_export() {
    let counters = Arc::new(crate::counters::parse(CSV, "test").unwrap());
    let mut compared = 0;
    for style in [OtelAttributeStyle::Otel, OtelAttributeStyle::Dcgm] {
        for mode in [OtelResourceMode::PerEntity, OtelResourceMode::Host] {
            for names in [MetricNames::Dcgm, MetricNames::Semconv, MetricNames::Both] {
                for temporality in [Temporality::Cumulative, Temporality::Delta] {
                    // A zero start time is not written at all (prost leaves defaults out).
                    for start in [1_700_000_000, 0] {
                        let make = || builder(&counters, style, mode, names, temporality, start);
                        let (mut hand, mut reference) = (make(), make());
                        for seq in 1..=5 {
                            let snap = fleet(&counters, seq);
                            let got = hand.build_encoded(&snap);
                            let want = reference.build_encoded_reference(&snap);
                            let case = format!(
                                "{style:?} {mode:?} {names:?} {temporality:?} {start} export {seq}"
                            );
                            assert_eq!(got.data_points, want.data_points, "{case}");
                            assert_eq!(got.resources, want.resources, "{case}");
                            assert!(want.data_points > 20, "{case}: {}", want.data_points);
                            if got.body != want.body {
                                let decode = |b: &[u8]| ExportMetricsServiceRequest::decode(b);
                                assert_eq!(
                                    decode(&got.body).ok(),
                                    decode(&want.body).ok(),
                                    "{case}"
                                );
                                panic!("{case}: the bytes differ, the requests do not");
                            }
                            compared += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(compared, 2 * 2 * 3 * 2 * 2 * 5);
}

/// What the fleet's requests carry, so that the comparison above covers them: MIG instances, a
/// board written by an instance, NvLinks, XID attributes, a derived family's series labels, a
/// departed GPU's Resource, pods' GPU-seconds and processes.
#[test]
fn the_fleet_exercises_every_kind_of_point() {
    let counters = Arc::new(crate::counters::parse(CSV, "test").unwrap());
    let mut b = builder(
        &counters,
        OtelAttributeStyle::Otel,
        OtelResourceMode::PerEntity,
        MetricNames::Both,
        Temporality::Delta,
        1_700_000_000,
    );
    let req = b.build(&fleet(&counters, 1)).request;
    let text = format!("{req:?}");
    for want in [
        "MIG-d1",
        "MIG-a5",
        "GPU-ddd",
        "GPU-eee",
        "nvidia.nvlink.index",
        "nvidia.xid.code",
        "nvidia.pod.gpu.time",
        "nvidia.process.gpu.memory.usage",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "hw.status",
    ] {
        assert!(text.contains(want), "{want} missing");
    }
}

/// The sampled fields' histograms (prost-encoded after the field metrics) are in the fleet whose
/// bytes the other tests compare: one per board-level writer of power.
#[test]
fn the_fleet_carries_distributions() {
    let counters = Arc::new(crate::counters::parse(CSV, "test").unwrap());
    let mut b = builder(
        &counters,
        OtelAttributeStyle::Otel,
        OtelResourceMode::PerEntity,
        MetricNames::Dcgm,
        Temporality::Cumulative,
        1_700_000_000,
    );
    let snap = fleet(&counters, 1);
    let encoded = b.build_encoded(&snap);
    let req = ExportMetricsServiceRequest::decode(&encoded.body[..]).unwrap();
    let histograms = req
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics[0].metrics)
        .filter(|m| m.name == "DCGM_FI_DEV_POWER_USAGE.distribution")
        .count();
    assert!(histograms >= 3, "{histograms} histograms");
}

/// A rate is a Gauge over OTLP even where the counters CSV types it `counter` (dcgm-exporter
/// 4.5.3-4.8.2's `DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`, MB/s): :9400 writes the CSV's type, OTLP what
/// the value is. A real total stays a monotonic Sum.
#[test]
fn a_rate_typed_counter_in_the_csv_is_a_gauge_over_otlp() {
    let counters = crate::counters::parse(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, NVLink.\n\
         DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy.\n",
        "test",
    )
    .unwrap();
    let kinds: Vec<(String, Kind)> = instruments::instruments(&counters, &[])
        .into_iter()
        .map(|i| (i.name, i.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL".to_string(),
                Kind::Gauge
            ),
            (
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION".to_string(),
                Kind::IntCounter
            ),
        ]
    );
}
