//! One data point's start time and value: the counter bookkeeping of the request (cumulative or
//! delta temporality, a value below the previous one starting a new stream at the previous point's
//! time), shared by field, derived, semantic-convention and holder points.

use std::sync::Arc;

use opentelemetry_proto::tonic::metrics::v1::{number_data_point, NumberDataPoint};

use super::{field_state, CounterState, Kind, PointContext, SeriesState, SetLayout};

impl PointContext<'_> {
    /// The point of instrument `k` for one attribute set. A counter (monotonic sum) keeps its
    /// series' state in `next`: a value below the previous one is a reset (driver reload, GPU reset)
    /// and starts a new stream whose start time is the previous point's time (OTel's reset
    /// semantics); with delta temporality the point is the difference to the previous value (after
    /// a reset, the new value), starting at the previous point.
    pub(super) fn point(
        &self,
        k: usize,
        kind: Kind,
        set: &SetLayout,
        v: number_data_point::Value,
        next: &mut CounterState,
    ) -> NumberDataPoint {
        let (value, start_time) = self.value(k, kind, &set.series, v, next);
        NumberDataPoint {
            attributes: set.point_attributes.clone(),
            start_time_unix_nano: start_time,
            time_unix_nano: self.time,
            exemplars: Vec::new(),
            flags: 0,
            value: Some(value),
        }
    }

    /// The value and start time of the point of instrument `k` for `series` (see
    /// [`PointContext::point`]); a counter's state goes into `next`.
    pub(super) fn value(
        &self,
        k: usize,
        kind: Kind,
        series: &Arc<str>,
        v: number_data_point::Value,
        next: &mut CounterState,
    ) -> (number_data_point::Value, u64) {
        if kind == Kind::Gauge {
            (v, self.start)
        } else {
            let key = (k, series.clone());
            let (value, start_time, stream_start) = self.step(self.previous.get(&key).copied(), v);
            next.insert(key, (v, self.time, stream_start));
            (value, start_time)
        }
    }

    /// [`PointContext::value`] of a field series, its counter state in its `slot` of the layout
    /// (gauges have none).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn field_value(
        &self,
        slot: Option<&std::cell::Cell<field_state::Slot>>,
        k: usize,
        kind: Kind,
        series: &Arc<str>,
        v: number_data_point::Value,
        next: &mut CounterState,
    ) -> (number_data_point::Value, u64) {
        let Some(slot) = slot.filter(|_| kind != Kind::Gauge) else {
            return self.value(k, kind, series, v, next);
        };
        let was = slot.get();
        let previous = was.state.filter(|_| was.export + 1 == self.export);
        let (value, start_time, stream_start) = self.step(previous, v);
        slot.set(field_state::Slot {
            state: Some((v, self.time, stream_start)),
            export: self.export,
        });
        (value, start_time)
    }

    /// A counter's point after `previous` (its series' last value, time and stream start): the
    /// value sent, its start time, and the stream start kept.
    pub(super) fn step(
        &self,
        previous: Option<SeriesState>,
        v: number_data_point::Value,
    ) -> (number_data_point::Value, u64, u64) {
        match previous {
            Some((prev, prev_time, prev_start)) => {
                let reset = below(v, prev);
                let stream_start = if reset { prev_time } else { prev_start };
                if self.delta {
                    (difference(v, prev), prev_time, stream_start)
                } else {
                    (v, stream_start, stream_start)
                }
            }
            None => (v, self.start, self.start),
        }
    }
}

/// Whether a counter's value is below its previous one: a reset.
pub(super) fn below(v: number_data_point::Value, prev: number_data_point::Value) -> bool {
    use number_data_point::Value::{AsDouble, AsInt};
    match (v, prev) {
        (AsInt(now), AsInt(before)) => now < before,
        (AsDouble(now), AsDouble(before)) => now < before,
        _ => false,
    }
}

/// A counter's delta; a value below the previous one is a reset (the delta is the new value).
pub(super) fn difference(
    v: number_data_point::Value,
    prev: number_data_point::Value,
) -> number_data_point::Value {
    use number_data_point::Value::{AsDouble, AsInt};
    match (v, prev) {
        (AsInt(now), AsInt(before)) if now >= before => AsInt(now - before),
        (AsDouble(now), AsDouble(before)) if now >= before => AsDouble(now - before),
        (now, _) => now,
    }
}
