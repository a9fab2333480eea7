//! One OTel observable instrument per counters-CSV row: `gauge` → f64 observable gauge, `counter` →
//! observable counter (cumulative, monotonic; u64 for integer fields, f64 for double fields), named as
//! the row, with the UCUM unit of [`units`](crate::export::otel::units) and the CSV help as description. `label` rows are
//! not instruments: they become attributes ([`naming`](crate::export::otel::naming)). A row name seen twice is registered
//! once (the first row wins), like the Prometheus renderer.
//!
//! Callbacks read the newest published snapshot, never a source. Within one SDK collection every
//! callback sees the *same* snapshot: the first callback pins it ([`SnapshotView::current`]) and the
//! exporter unpins it after the collection ([`SnapshotView::unpin`]). Absent, text and non-finite
//! values emit no data point (and negative integers emit none on a counter). Callbacks never panic: the
//! body runs under `catch_unwind`, because a panicking callback silently ends all OTel exports.
//!
//! A callback finds its row by name in the pinned snapshot's counter set, so a counters reload never
//! makes it read another row: a removed row's instrument observes nothing, and rows new in a reloaded
//! set get their instruments from [`SnapshotView::register_new`] (called between collections; the SDK
//! runs callbacks under its registry lock, so never from a callback). An instrument keeps the type it
//! was registered with until restart.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use opentelemetry::metrics::{AsyncInstrument, Meter};
use opentelemetry::KeyValue;

use crate::counters::{CounterSet, MetricKind};
use crate::export::otel::naming::Naming;
use crate::export::otel::units::unit_for;
use crate::fields::ValueType;
use crate::lock::LockExt;
use crate::snapshot::SnapshotStore;
use crate::snapshot::{FieldValue, Snapshot};

/// A snapshot and the attribute sets of its entities, prepared once for all instruments.
pub struct Prepared {
    pub snapshot: Arc<Snapshot>,
    /// Per entity (index-aligned with `snapshot.entities`), one attribute set per pod/job.
    pub sets: Vec<Vec<Vec<KeyValue>>>,
    /// The first metric row of each name in the snapshot's counter set.
    pub rows: HashMap<String, usize>,
}

fn metric_rows(counters: &CounterSet) -> HashMap<String, usize> {
    let mut rows = HashMap::new();
    for (i, r) in counters.rows.iter().enumerate() {
        if r.kind != MetricKind::Label {
            rows.entry(r.name.clone()).or_insert(i);
        }
    }
    rows
}

struct Pin {
    prepared: Option<Arc<Prepared>>,
    /// When the running collection pinned its snapshot (`None`: no collection running).
    pinned: Option<std::time::Instant>,
}

/// The snapshot the callbacks of one collection observe.
pub struct SnapshotView {
    store: Arc<SnapshotStore>,
    naming: Naming,
    pin: Mutex<Pin>,
    /// The meter the instruments are registered on and the names registered so far.
    registry: Mutex<(Option<Meter>, HashSet<String>)>,
}

impl SnapshotView {
    pub fn new(store: Arc<SnapshotStore>, naming: Naming) -> Arc<SnapshotView> {
        Arc::new(SnapshotView {
            store,
            naming,
            pin: Mutex::new(Pin {
                prepared: None,
                pinned: None,
            }),
            registry: Mutex::new((None, HashSet::new())),
        })
    }

    /// The newest published snapshot.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.store.latest()
    }

    /// Register instruments for the metric rows of `counters` that have none yet (a reloaded counter
    /// set). Call between collections only. Returns how many were added.
    pub fn register_new(self: &Arc<Self>, counters: &CounterSet) -> usize {
        let meter = match self.registry.lock_unpoisoned().0.clone() {
            Some(m) => m,
            None => return 0,
        };
        register(&meter, counters, self)
    }

    /// The pinned snapshot of the running collection; the first call of a collection pins the newest.
    pub fn current(&self) -> Option<Arc<Prepared>> {
        let mut pin = self.pin.lock_unpoisoned();
        if pin.pinned.is_none() {
            let latest = self.store.latest()?;
            let fresh = match &pin.prepared {
                Some(p) => !Arc::ptr_eq(&p.snapshot, &latest),
                None => true,
            };
            if fresh {
                let sets = self.naming.snapshot_sets(&latest);
                let rows = metric_rows(&latest.counters);
                pin.prepared = Some(Arc::new(Prepared {
                    snapshot: latest,
                    sets,
                    rows,
                }));
            }
            pin.pinned = Some(std::time::Instant::now());
        }
        pin.prepared.clone()
    }

    /// End of a collection: the next callback takes the newest snapshot again. Returns the time since
    /// the collection's first callback (its callbacks and aggregation), if any callback ran.
    pub fn unpin(&self) -> Option<std::time::Duration> {
        let mut pin = self.pin.lock_unpoisoned();
        pin.pinned.take().map(|t| t.elapsed())
    }
}

fn observe_rows<T: Copy>(
    view: &SnapshotView,
    name: &str,
    field_id: u16,
    obs: &dyn AsyncInstrument<T>,
    convert: impl Fn(&FieldValue) -> Option<T>,
) {
    let body = AssertUnwindSafe(|| {
        let Some(p) = view.current() else { return };
        let Some(&row) = p.rows.get(name) else { return };
        for (e, sets) in p.snapshot.entities.iter().zip(&p.sets) {
            let Some(raw) = e.values.get(row) else {
                continue;
            };
            let Some(v) = convert(raw) else {
                continue;
            };
            let own = view.naming.value_attributes(field_id, raw);
            for attrs in sets {
                if own.is_empty() {
                    obs.observe(v, attrs);
                } else {
                    let mut all: Vec<KeyValue> = attrs.iter().chain(&own).cloned().collect();
                    all.sort_by(|a, b| a.key.cmp(&b.key));
                    obs.observe(v, &all);
                }
            }
        }
    });
    if std::panic::catch_unwind(body).is_err() {
        tracing::error!(
            metric = name,
            "an OTel callback panicked; this instrument's data points are left out of this export"
        );
    }
}

fn as_f64(v: &FieldValue) -> Option<f64> {
    v.as_f64()
}

fn as_u64(v: &FieldValue) -> Option<u64> {
    match v {
        FieldValue::Int(i) if *i >= 0 => Some(*i as u64),
        _ => None,
    }
}

fn as_nonneg_f64(v: &FieldValue) -> Option<f64> {
    v.as_f64().filter(|f| *f >= 0.0)
}

/// Register the instruments of every metric row on `meter` (names already registered through this view
/// are skipped; the view keeps `meter` for [`SnapshotView::register_new`]). Returns how many were
/// registered.
pub fn register(meter: &Meter, counters: &CounterSet, view: &Arc<SnapshotView>) -> usize {
    let mut registry = view.registry.lock_unpoisoned();
    registry.0.get_or_insert_with(|| meter.clone());
    let mut added = 0;
    for row in &counters.rows {
        if row.kind == MetricKind::Label || !registry.1.insert(row.name.clone()) {
            continue;
        }
        added += 1;
        let v = view.clone();
        let unit = unit_for(row);
        let field_id = row.field.id;
        let name = row.name.clone();
        match row.kind {
            MetricKind::Gauge => {
                meter
                    .f64_observable_gauge(row.name.clone())
                    .with_description(row.help.clone())
                    .with_unit(unit)
                    .with_callback(move |obs| observe_rows(&v, &name, field_id, obs, as_f64))
                    .build();
            }
            MetricKind::Counter if row.field.value_type == ValueType::Int64 => {
                meter
                    .u64_observable_counter(row.name.clone())
                    .with_description(row.help.clone())
                    .with_unit(unit)
                    .with_callback(move |obs| observe_rows(&v, &name, field_id, obs, as_u64))
                    .build();
            }
            MetricKind::Counter => {
                meter
                    .f64_observable_counter(row.name.clone())
                    .with_description(row.help.clone())
                    .with_unit(unit)
                    .with_callback(move |obs| observe_rows(&v, &name, field_id, obs, as_nonneg_f64))
                    .build();
            }
            MetricKind::Label => {}
        }
    }
    added
}
