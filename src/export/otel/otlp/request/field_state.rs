//! The counter state of the field series (delta temporality, resets): one slot per attribute set of
//! the layout and counter instrument, found by index instead of by hashing the series' text, and
//! valid only when the previous export wrote it (a series that sent no point in an export starts
//! over, as with the per-series map that the derived and semantic-convention series keep). A new
//! layout takes over the state of every series it still has, matched by its text, once.

use std::cell::Cell;
use std::collections::HashMap;

use super::{EntityLayout, SeriesState};

/// One series' state and the export that wrote it.
#[derive(Clone, Copy, Default)]
pub(super) struct Slot {
    pub state: Option<SeriesState>,
    pub export: u64,
}

/// The slots of a layout: `(set_base[entity] + set) × counters + counter`.
#[derive(Default)]
pub(super) struct FieldState {
    slots: Vec<Cell<Slot>>,
    set_base: Vec<usize>,
    sets: usize,
    counters: usize,
}

impl FieldState {
    /// The slots of `entities` with `counters` counter instruments; the series of `old` (on
    /// `old_entities`, the same instruments) written by export `last` keep their state.
    pub(super) fn new(
        entities: &[EntityLayout],
        counters: usize,
        old: &FieldState,
        old_entities: &[EntityLayout],
        last: u64,
    ) -> FieldState {
        let mut set_base = Vec::with_capacity(entities.len());
        let mut sets = 0;
        for e in entities {
            set_base.push(sets);
            sets += e.sets.len();
        }
        let state = FieldState {
            slots: vec![Cell::new(Slot::default()); sets * counters],
            set_base,
            sets,
            counters,
        };
        if old.counters != counters || old.slots.is_empty() {
            return state;
        }
        let mut kept: HashMap<(usize, &str), Slot> = HashMap::new();
        for (e, layout) in old_entities.iter().enumerate() {
            for (s, set) in layout.sets.iter().enumerate() {
                for c in 0..counters {
                    let slot = old.slot(e, s, c).map(Cell::get).unwrap_or_default();
                    if slot.export == last && slot.state.is_some() {
                        kept.insert((c, &*set.series), slot);
                    }
                }
            }
        }
        for (e, layout) in entities.iter().enumerate() {
            for (s, set) in layout.sets.iter().enumerate() {
                for c in 0..counters {
                    if let (Some(slot), Some(was)) =
                        (state.slot(e, s, c), kept.get(&(c, &*set.series)))
                    {
                        slot.set(*was);
                    }
                }
            }
        }
        state
    }

    /// The slot of counter `c` on set `s` of entity `e`.
    pub(super) fn slot(&self, e: usize, s: usize, c: usize) -> Option<&Cell<Slot>> {
        if c >= self.counters {
            return None;
        }
        let set = self.set_base.get(e)? + s;
        let end = self.set_base.get(e + 1).copied().unwrap_or(self.sets);
        if set >= end {
            return None;
        }
        self.slots.get(set * self.counters + c)
    }
}
