//! A small hand-made snapshot for the OTel unit tests (the direct builder, the SDK conversion): three
//! GPUs — one shared by two pods with two NvLinks, one with only absent or unusable values and an HPC
//! job, one plain — over a four-field counters CSV plus the driver-version label.

use std::sync::Arc;
use std::time::SystemTime;

use crate::counters::{self, CounterSet};
use crate::snapshot::attribution::{self, Attribute};
use crate::snapshot::*;

pub const CSV: &str = "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock in MHz.\n\
                       DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Energy in mJ.\n\
                       DCGM_FI_DEV_NVLINK_PPRM_OPER_RECOVERY, gauge, Link recovery status.\n\
                       DCGM_FI_DEV_POWER_USAGE, gauge, Power draw in W.\n\
                       DCGM_FI_DRIVER_VERSION, label, Driver version.\n";

pub fn counters() -> Arc<CounterSet> {
    Arc::new(counters::parse(CSV, "test").expect("the test CSV parses"))
}

fn gpu(index: u32, uuid: &str, bus: &str) -> Arc<GpuIdentity> {
    Arc::new(GpuIdentity {
        index,
        uuid: uuid.into(),
        pci_bus_id: bus.into(),
        model: "NVIDIA H100 80GB HBM3".into(),
        serial: String::new(),
        vbios: String::new(),
    })
}

/// Pods `names` of namespace `ml`, container `main`, UID `uid-<name>`, sharing one device.
pub fn pods(names: &[&str]) -> Attribution {
    let mut a = Attribution::default();
    let alternatives: Vec<Vec<Attribute>> = names
        .iter()
        .map(|n| {
            vec![
                Attribute::new(&attribution::CONTAINER, "main"),
                Attribute::new(&attribution::NAMESPACE, "ml"),
                Attribute::new(&attribution::POD, *n),
                Attribute::new(&attribution::POD_UID, format!("uid-{n}")),
            ]
        })
        .collect();
    a.split(&alternatives);
    a
}

/// The snapshot; `energy` is GPU 0's energy counter (GPU 2 reads twice as much).
pub fn snapshot(counters: Arc<CounterSet>, seq: u64, energy: i64) -> Snapshot {
    let gpu0 = gpu(0, "GPU-aaa", "00000000:18:00.0");
    let shared = EntityReading {
        entity: Arc::new(Entity::gpu(gpu0.clone())),
        values: vec![
            FieldValue::Int(1410),
            FieldValue::Int(energy),
            FieldValue::Absent(Absent::NotApplicable),
            FieldValue::Double(312.5),
            FieldValue::Text("550.1".into()),
        ]
        .into(),
        attribution: Arc::new(pods(&["a", "b"])),
    };
    let link = |l: u32| EntityReading {
        entity: Arc::new(Entity::nvlink(gpu0.clone(), 100 + l, l)),
        values: vec![
            FieldValue::Absent(Absent::NotApplicable),
            FieldValue::Absent(Absent::NotApplicable),
            FieldValue::Int(l as i64),
            FieldValue::Absent(Absent::NotApplicable),
            FieldValue::Absent(Absent::NotApplicable),
        ]
        .into(),
        attribution: Arc::new(Attribution::default()),
    };
    let mut job = Attribution::default();
    job.add(&[Attribute::new(&attribution::HPC_JOB, "job-7")]);
    let unusable = EntityReading {
        entity: Arc::new(Entity::gpu(gpu(1, "GPU-bbb", "00000000:2A:00.0"))),
        values: vec![
            FieldValue::Absent(Absent::Blank),
            FieldValue::Int(-4),
            FieldValue::Absent(Absent::NotApplicable),
            FieldValue::Double(f64::NAN),
            FieldValue::Text("550.1".into()),
        ]
        .into(),
        attribution: Arc::new(job),
    };
    let plain = EntityReading {
        entity: Arc::new(Entity::gpu(gpu(2, "GPU-ccc", "00000000:3A:00.0"))),
        values: vec![
            FieldValue::Int(1980),
            FieldValue::Int(energy * 2),
            FieldValue::Absent(Absent::NotApplicable),
            FieldValue::Double(99.25),
            FieldValue::Text("550.1".into()),
        ]
        .into(),
        attribution: Arc::new(Attribution::default()),
    };
    Snapshot {
        seq,
        taken_at: SystemTime::now(),
        counters,
        host: Arc::new(HostInfo::default()),
        driver_version: Some("550.1".into()),
        entities: vec![shared, link(0), link(1), unusable, plain],
        processes: Vec::new(),
        derived: Vec::new(),
        per_set: Vec::new(),
        incidents: Vec::new(),
        distributions: Default::default(),
    }
}
