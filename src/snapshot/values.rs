//! The values of one collection, stored sparse and reused.
//!
//! An entity has a value only for the counter rows its kind reads ([`EntityKind::reads`]): a GPU has
//! no NvLink field, a link no GPU field. The dense layout this replaced gave every entity a slot for
//! every row, two thirds of them "not applicable" on a node of GPUs, MIG instances and links, and
//! allocated those arrays anew for every collection. Here a [`RowLayout`], made once per counter set,
//! lists per entity kind the rows it reads; a collection's values lie in one array, each entity's in
//! the run of its kind's rows. A source writes them through a [`ValueWriter`] taken from its
//! [`ValuePool`], which hands the same array back once no snapshot refers to it any more: a collection
//! allocates no value array in the steady state.
//!
//! Consumers read an entity's values through [`EntityValues`] only: [`EntityValues::get`] (the value
//! of one row) and [`EntityValues::iter`] (every value the entity has, with its row, in row order).
//! A row the entity's kind does not read has no value (`None`), as has one a source marked
//! [`Absent::NotApplicable`]; every other absent value is there, with its reason (counted in
//! self-metrics, never written).

use std::sync::Arc;

use super::entity::EntityKind;
use crate::counters::CounterSet;

/// Why a value is missing. Missing values are never rendered; they are counted in self-metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Absent {
    /// DCGM returned a blank sentinel (no data yet / N/A).
    Blank,
    /// DCGM reports the field not supported on this entity.
    NotSupported,
    /// DCGM reports the field or entity not found.
    NotFound,
    /// DCGM reports insufficient permission (e.g. profiling without CAP_SYS_ADMIN).
    NotPermissioned,
    /// A non-zero status or a value that cannot be represented (NaN, blob, wrong type).
    Error,
    /// The field does not apply to this kind of entity (a link field on a GPU); not counted.
    NotApplicable,
    /// The source cannot give this field at all (a DCGM-only field read through NVML).
    Unsupported,
}

impl Absent {
    pub fn as_str(self) -> &'static str {
        match self {
            Absent::Blank => "blank",
            Absent::NotSupported => "not_supported",
            Absent::NotFound => "not_found",
            Absent::NotPermissioned => "not_permissioned",
            Absent::Error => "error",
            Absent::NotApplicable => "not_applicable",
            Absent::Unsupported => "unsupported",
        }
    }
}

/// The latest value of one field on one entity.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    Int(i64),
    Double(f64),
    Text(Box<str>),
    Absent(Absent),
}

impl FieldValue {
    /// The value as a float for numeric exporters; `None` for text and absent values.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            FieldValue::Int(i) => Some(*i as f64),
            FieldValue::Double(d) if d.is_finite() => Some(*d),
            _ => None,
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            FieldValue::Text(s) => Some(s),
            _ => None,
        }
    }

    fn applies(&self) -> bool {
        !matches!(self, FieldValue::Absent(Absent::NotApplicable))
    }
}

/// Entity kinds, then one class for values given row by row ([`EntityValues::from_rows`]).
const KINDS: [EntityKind; 7] = [
    EntityKind::Gpu,
    EntityKind::GpuInstance,
    EntityKind::NvLink,
    EntityKind::NvSwitch,
    EntityKind::NvSwitchLink,
    EntityKind::Cpu,
    EntityKind::CpuCore,
];
/// The class of values given for every row, in row order.
const EVERY_ROW: u8 = KINDS.len() as u8;

fn class_of(kind: EntityKind) -> u8 {
    match kind {
        EntityKind::Gpu => 0,
        EntityKind::GpuInstance => 1,
        EntityKind::NvLink => 2,
        EntityKind::NvSwitch => 3,
        EntityKind::NvSwitchLink => 4,
        EntityKind::Cpu => 5,
        EntityKind::CpuCore => 6,
    }
}

/// No slot: the class does not read the row.
const NO_SLOT: u32 = u32::MAX;

/// Which rows each entity kind reads and where each row's value lies in an entity's run: made once
/// per counter set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RowLayout {
    rows: usize,
    /// Per kind (in [`KINDS`] order), per row: the slot of the row in the kind's run, or [`NO_SLOT`].
    slot: Vec<u32>,
    /// Per kind: the rows it reads, in row order (the run's slots in order).
    rows_of: Vec<Vec<u32>>,
}

impl RowLayout {
    /// The layout of `counters`: a kind reads a row when it reads the row's field level.
    pub fn new(counters: &CounterSet) -> RowLayout {
        let rows = counters.rows.len();
        let mut slot = vec![NO_SLOT; KINDS.len() * rows];
        let mut rows_of = Vec::with_capacity(KINDS.len());
        for (k, kind) in KINDS.iter().enumerate() {
            let read: Vec<u32> = (0..rows)
                .filter(|&r| kind.reads(counters.rows[r].field.level))
                .map(|r| r as u32)
                .collect();
            for (s, &r) in read.iter().enumerate() {
                slot[k * rows + r as usize] = s as u32;
            }
            rows_of.push(read);
        }
        RowLayout {
            rows,
            slot,
            rows_of,
        }
    }

    /// The number of counter rows the layout was made for.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The rows an entity of `kind` reads, in row order.
    pub fn rows_of(&self, kind: EntityKind) -> &[u32] {
        self.rows_of
            .get(usize::from(class_of(kind)))
            .map_or(&[], Vec::as_slice)
    }

    /// Values stored for a fleet of `kinds` (what [`ValueWriter`] will write for them).
    pub fn slots(&self, kinds: impl Iterator<Item = EntityKind>) -> usize {
        kinds.map(|k| self.rows_of(k).len()).sum()
    }

    fn slot(&self, class: u8, row: usize, len: u32) -> Option<usize> {
        if class == EVERY_ROW {
            return (row < len as usize).then_some(row);
        }
        if row >= self.rows {
            return None;
        }
        let s = *self.slot.get(usize::from(class) * self.rows + row)?;
        (s != NO_SLOT).then_some(s as usize)
    }

    fn rows_of_class(&self, class: u8) -> Option<&[u32]> {
        self.rows_of.get(usize::from(class)).map(Vec::as_slice)
    }
}

/// The values of one collection (or of one entity given row by row), shared by its entities'
/// [`EntityValues`].
#[derive(Debug, Clone, Default)]
struct Block {
    layout: Arc<RowLayout>,
    values: Vec<FieldValue>,
}

/// The values of an entity that has none, shared.
static NO_ROWS: std::sync::LazyLock<EntityValues> = std::sync::LazyLock::new(|| EntityValues {
    block: Arc::default(),
    start: 0,
    len: 0,
    class: EVERY_ROW,
});

/// One entity's values: a run of its collection's value array.
#[derive(Clone)]
pub struct EntityValues {
    block: Arc<Block>,
    start: u32,
    len: u32,
    class: u8,
}

impl EntityValues {
    /// Values given for every counter row, in row order (hand-made readings, tests): `values[row]` is
    /// row `row`'s value.
    pub fn from_rows(values: Vec<FieldValue>) -> EntityValues {
        let len = values.len() as u32;
        EntityValues {
            block: Arc::new(Block {
                layout: NO_ROWS.block.layout.clone(),
                values,
            }),
            start: 0,
            len,
            class: EVERY_ROW,
        }
    }

    /// No value at all (an entity that only names a device); allocates nothing.
    pub fn none() -> EntityValues {
        NO_ROWS.clone()
    }

    /// The value of counter row `row`; `None` when the entity has none (its kind does not read the row).
    #[inline]
    pub fn get(&self, row: usize) -> Option<&FieldValue> {
        let slot = self.block.layout.slot(self.class, row, self.len)?;
        let v = self.run().get(slot)?;
        v.applies().then_some(v)
    }

    /// Every value the entity has, with its counter row, in row order: the one way consumers read
    /// them all.
    pub fn iter(&self) -> Values<'_> {
        Values {
            rows: self
                .block
                .layout
                .rows_of_class(self.class)
                .map(<[u32]>::iter),
            run: self.run().iter().enumerate(),
        }
    }

    /// Set row `row`'s value (tests and benches; copies the collection's values when they are
    /// shared). A row the entity's kind does not read is left as it is; returns whether it was set.
    pub fn set(&mut self, row: usize, value: FieldValue) -> bool {
        let Some(slot) = self.block.layout.slot(self.class, row, self.len) else {
            return false;
        };
        let at = self.start as usize + slot;
        match Arc::make_mut(&mut self.block).values.get_mut(at) {
            Some(v) => {
                *v = value;
                true
            }
            None => false,
        }
    }

    fn run(&self) -> &[FieldValue] {
        let start = self.start as usize;
        self.block
            .values
            .get(start..start + self.len as usize)
            .unwrap_or(&[])
    }
}

/// An entity's values with their rows ([`EntityValues::iter`]).
pub struct Values<'a> {
    /// The rows of the run's slots; `None` for values given row by row.
    rows: Option<std::slice::Iter<'a, u32>>,
    run: std::iter::Enumerate<std::slice::Iter<'a, FieldValue>>,
}

impl<'a> Iterator for Values<'a> {
    type Item = (usize, &'a FieldValue);

    #[inline]
    fn next(&mut self) -> Option<(usize, &'a FieldValue)> {
        loop {
            let (slot, v) = self.run.next()?;
            let row = match &mut self.rows {
                Some(rows) => *rows.next()? as usize,
                None => slot,
            };
            if v.applies() {
                return Some((row, v));
            }
        }
    }
}

impl From<Vec<FieldValue>> for EntityValues {
    fn from(values: Vec<FieldValue>) -> EntityValues {
        EntityValues::from_rows(values)
    }
}

impl PartialEq for EntityValues {
    fn eq(&self, other: &EntityValues) -> bool {
        self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for EntityValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Where one entity's values lie in a [`ValueWriter`].
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u32,
    len: u32,
    class: u8,
}

/// The value arrays of a source, reused: a collection's array comes back once no snapshot holds it.
#[derive(Debug, Default)]
pub struct ValuePool {
    layout: Arc<RowLayout>,
    /// The last arrays handed out (each also held by the entities of its snapshot while it lives).
    kept: Vec<Arc<Block>>,
    /// The runs of the last collection written (kept: no allocation per collection).
    runs: Vec<Run>,
}

/// Arrays a pool keeps: the one being written, the one published, one an exporter or a slow scrape
/// may still read.
const KEPT: usize = 3;

impl ValuePool {
    /// A pool for `counters`.
    pub fn new(counters: &CounterSet) -> ValuePool {
        ValuePool {
            layout: Arc::new(RowLayout::new(counters)),
            kept: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// A pool for the rows of `layout`.
    pub fn with_layout(layout: Arc<RowLayout>) -> ValuePool {
        ValuePool {
            layout,
            kept: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// Read `counters` from the next collection on.
    pub fn set_counters(&mut self, counters: &CounterSet) {
        self.layout = Arc::new(RowLayout::new(counters));
    }

    pub fn layout(&self) -> &RowLayout {
        &self.layout
    }

    /// Start a collection: an array no snapshot refers to any more, emptied, or a new one.
    pub fn writer(&mut self) -> ValueWriter {
        let free = self.kept.iter_mut().position(|b| Arc::get_mut(b).is_some());
        let (block, values) = match free {
            Some(i) => {
                let mut block = self.kept.swap_remove(i);
                let values = Arc::get_mut(&mut block)
                    .map(|b| std::mem::take(&mut b.values))
                    .unwrap_or_default();
                (Some(block), values)
            }
            None => (None, Vec::new()),
        };
        let mut runs = std::mem::take(&mut self.runs);
        runs.clear();
        ValueWriter {
            layout: self.layout.clone(),
            values: clear(values),
            runs,
            block,
        }
    }

    /// The values written, one [`EntityValues`] per entity in the order they were pushed.
    pub fn finish(&mut self, w: ValueWriter) -> impl Iterator<Item = EntityValues> + '_ {
        let ValueWriter {
            layout,
            values,
            runs,
            block,
        } = w;
        let filled = Block { layout, values };
        let block = match block {
            Some(mut b) => match Arc::get_mut(&mut b) {
                Some(inner) => {
                    *inner = filled;
                    b
                }
                None => Arc::new(filled),
            },
            None => Arc::new(filled),
        };
        if self.kept.len() >= KEPT {
            self.kept.remove(0);
        }
        self.kept.push(block.clone());
        self.runs = runs;
        self.runs.iter().map(move |r| EntityValues {
            block: block.clone(),
            start: r.start,
            len: r.len,
            class: r.class,
        })
    }
}

/// An array emptied for reuse (its capacity kept).
fn clear(mut values: Vec<FieldValue>) -> Vec<FieldValue> {
    values.clear();
    values
}

/// One collection's values being written by a source.
#[derive(Debug)]
pub struct ValueWriter {
    layout: Arc<RowLayout>,
    values: Vec<FieldValue>,
    runs: Vec<Run>,
    /// The recycled array's block, refilled by [`ValuePool::finish`].
    block: Option<Arc<Block>>,
}

impl ValueWriter {
    pub fn layout(&self) -> &RowLayout {
        &self.layout
    }

    /// Add an entity of `kind`: `value(row)` gives the value of each row the kind reads, in row
    /// order. Returns the entity's index in this collection.
    pub fn push(&mut self, kind: EntityKind, mut value: impl FnMut(usize) -> FieldValue) -> usize {
        let class = class_of(kind);
        let start = self.values.len();
        let rows = self.layout.rows_of(kind);
        self.values.extend(rows.iter().map(|&r| value(r as usize)));
        self.runs.push(Run {
            start: start as u32,
            len: (self.values.len() - start) as u32,
            class,
        });
        self.runs.len() - 1
    }

    /// The value of row `row` of entity `entity` (pushed before), to be replaced; `None` when the
    /// entity's kind does not read the row.
    #[inline]
    pub fn get_mut(&mut self, entity: usize, row: usize) -> Option<&mut FieldValue> {
        let run = *self.runs.get(entity)?;
        let slot = self.layout.slot(run.class, row, run.len)?;
        self.values.get_mut(run.start as usize + slot)
    }

    /// The values of entity `entity` (pushed before), with their rows, in row order.
    pub fn entity(&self, entity: usize) -> impl Iterator<Item = (usize, &FieldValue)> + '_ {
        let run = self.runs.get(entity).copied().unwrap_or(Run {
            start: 0,
            len: 0,
            class: 0,
        });
        let values = self
            .values
            .get(run.start as usize..(run.start + run.len) as usize)
            .unwrap_or(&[]);
        self.layout
            .rows_of_class(run.class)
            .unwrap_or(&[])
            .iter()
            .map(|&r| r as usize)
            .zip(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters;

    fn counters() -> CounterSet {
        counters::parse(
            "DCGM_FI_DEV_GPU_TEMP, gauge, t\n\
             DCGM_FI_DEV_NVLINK_PPCNT_RECOVERY_TIME_SINCE_LAST, gauge, l\n\
             DCGM_FI_DRIVER_VERSION, label, d\n\
             DCGM_FI_DEV_POWER_USAGE, gauge, p\n",
            "test",
        )
        .unwrap()
    }

    #[test]
    fn an_entity_has_the_rows_its_kind_reads() {
        let set = counters();
        let mut pool = ValuePool::new(&set);
        let mut w = pool.writer();
        let gpu = w.push(EntityKind::Gpu, |r| FieldValue::Int(r as i64));
        let link = w.push(EntityKind::NvLink, |r| FieldValue::Int(10 + r as i64));
        *w.get_mut(gpu, 3).unwrap() = FieldValue::Double(2.5);
        assert!(w.get_mut(gpu, 1).is_none(), "a GPU reads no link field");
        let v: Vec<EntityValues> = pool.finish(w).collect();
        assert_eq!(v.len(), 2);
        let rows = |e: &EntityValues| e.iter().map(|(r, v)| (r, v.clone())).collect::<Vec<_>>();
        assert_eq!(
            rows(&v[gpu]),
            [
                (0, FieldValue::Int(0)),
                (2, FieldValue::Int(2)),
                (3, FieldValue::Double(2.5))
            ]
        );
        assert_eq!(
            rows(&v[link]),
            [(1, FieldValue::Int(11)), (2, FieldValue::Int(12))]
        );
        assert_eq!(v[gpu].get(1), None);
        assert_eq!(v[link].get(1), Some(&FieldValue::Int(11)));
        assert_eq!(v[link].get(99), None);
    }

    /// Values given row by row read the same as the sparse ones; "not applicable" is no value.
    #[test]
    fn rows_given_one_by_one_read_alike() {
        let set = counters();
        let mut pool = ValuePool::new(&set);
        let mut w = pool.writer();
        w.push(EntityKind::NvLink, |r| FieldValue::Int(10 + r as i64));
        let sparse = pool.finish(w).next().unwrap();
        let na = FieldValue::Absent(Absent::NotApplicable);
        let dense = EntityValues::from_rows(vec![
            na.clone(),
            FieldValue::Int(11),
            FieldValue::Int(12),
            na,
        ]);
        assert_eq!(sparse, dense);
        assert_eq!(dense.get(0), None);
        assert_eq!(dense.get(2), Some(&FieldValue::Int(12)));
    }

    /// The array comes back once no snapshot holds it: no new array in the steady state.
    #[test]
    fn arrays_are_reused_once_released() {
        let set = counters();
        let mut pool = ValuePool::new(&set);
        let mut held = Vec::new();
        let mut seen = Vec::new();
        for round in 0..10 {
            let mut w = pool.writer();
            for _ in 0..50 {
                w.push(EntityKind::Gpu, |r| FieldValue::Int(round * 100 + r as i64));
            }
            let values: Vec<EntityValues> = pool.finish(w).collect();
            seen.push(values[0].run().as_ptr() as usize);
            assert_eq!(values[49].get(3), Some(&FieldValue::Int(round * 100 + 3)));
            // The published snapshot and the one before it are still held.
            held.push(values);
            if held.len() > 2 {
                held.remove(0);
            }
        }
        seen.sort_unstable();
        seen.dedup();
        assert!(
            seen.len() <= KEPT,
            "{} arrays for 10 collections",
            seen.len()
        );
    }

    #[test]
    fn set_copies_shared_values() {
        let set = counters();
        let mut pool = ValuePool::new(&set);
        let mut w = pool.writer();
        w.push(EntityKind::Gpu, |_| FieldValue::Int(1));
        w.push(EntityKind::Gpu, |_| FieldValue::Int(1));
        let mut v: Vec<EntityValues> = pool.finish(w).collect();
        assert!(v[0].set(3, FieldValue::Int(7)));
        assert!(!v[0].set(1, FieldValue::Int(7)));
        assert_eq!(v[0].get(3), Some(&FieldValue::Int(7)));
        assert_eq!(v[1].get(3), Some(&FieldValue::Int(1)));
    }
}
