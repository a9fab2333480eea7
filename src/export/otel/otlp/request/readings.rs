//! What a request reads from a snapshot for one instrument: how a kind observes a value (absent,
//! text, non-finite and, on a counter, negative values send no point), and which members of a
//! Resource write the instrument, with their attribute sets and values. Both request writers (proto
//! values and templates) put exactly these in points.

use opentelemetry_proto::tonic::metrics::v1::number_data_point;

use super::{DirectBuilder, Instrument, Kind, SetLayout};
use crate::snapshot::{FieldValue, Snapshot};

/// A value as the instrument of `kind` observes it (the same filters as the SDK callbacks).
pub(super) fn observe(kind: Kind, v: &FieldValue) -> Option<number_data_point::Value> {
    match kind {
        Kind::Gauge => v.as_f64().map(number_data_point::Value::AsDouble),
        Kind::IntCounter => match v {
            FieldValue::Int(i) if *i >= 0 => Some(number_data_point::Value::AsInt(*i)),
            _ => None,
        },
        Kind::DoubleCounter => v
            .as_f64()
            .filter(|f| *f >= 0.0)
            .map(number_data_point::Value::AsDouble),
    }
}

/// The members of a Resource that write instrument `inst`, each with its attribute set's layout, its
/// raw value and the value observed from it (members whose role does not write the instrument's
/// kind of row, or without a value, are left out): what both request writers put in points.
pub(super) fn field_readings<'a>(
    b: &'a DirectBuilder,
    snap: &'a Snapshot,
    members: &'a [(usize, usize)],
    inst: &'a Instrument,
) -> impl Iterator<
    Item = (
        usize,
        usize,
        &'a SetLayout,
        &'a FieldValue,
        number_data_point::Value,
    ),
> + 'a {
    members.iter().filter_map(move |&(e, s)| {
        let reading = snap.entities.get(e)?;
        let layout = b.layout.entities.get(e)?;
        if !layout.role.writes(s, inst.per_instance) {
            return None;
        }
        let raw = reading.values.get(inst.row)?;
        let v = observe(inst.kind, raw)?;
        Some((e, s, layout.sets.get(s)?, raw, v))
    })
}
