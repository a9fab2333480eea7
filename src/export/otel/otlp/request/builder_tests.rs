//! The direct builder on hand-made snapshots: start times across resets, encoding, layout reuse.

use std::collections::HashSet;

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality,
};
use prost::Message;

use super::*;
use crate::config::LabelStyle;
use crate::export::otel::naming::{OtelAttributeStyle, OtelResourceMode};
use crate::snapshot::*;

use crate::export::otel::test_fleet::{counters as test_counters, snapshot};

fn naming(counters: &CounterSet, style: OtelAttributeStyle) -> Naming {
    Naming::new(style, LabelStyle::default(), counters)
}

fn base() -> Vec<KeyValue> {
    vec![
        KeyValue::new("service.name", "t"),
        KeyValue::new("host.name", "node-a"),
    ]
}

/// A host-mode builder of the test fleet whose exports start at t = 1000 s.
fn host_builder(counters: &Arc<CounterSet>, temporality: Temporality) -> DirectBuilder {
    DirectBuilder::new(
        naming(counters, OtelAttributeStyle::Otel),
        ResourceSplit::Host,
        &base(),
        counters.clone(),
        temporality,
        UNIX_EPOCH + Duration::from_secs(1000),
    )
}

#[test]
fn a_delta_starts_at_the_previous_export_and_a_reset_restarts() {
    let counters = test_counters();
    let mut b = host_builder(&counters, Temporality::Delta);
    let mut snap = snapshot(counters.clone(), 1, 5000);
    snap.taken_at = UNIX_EPOCH + Duration::from_secs(1010);
    let first = b.build(&snap);
    let mut snap = snapshot(counters.clone(), 2, 100);
    snap.taken_at = UNIX_EPOCH + Duration::from_secs(1020);
    let second = b.build(&snap);
    let sum = |req: &ExportMetricsServiceRequest| -> Vec<(u64, u64, i64)> {
        let m = req.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .find(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            .unwrap();
        let Some(Data::Sum(s)) = &m.data else {
            panic!()
        };
        let mut v: Vec<(u64, u64, i64)> = s
            .data_points
            .iter()
            .map(|dp| {
                let Some(number_data_point::Value::AsInt(i)) = dp.value else {
                    panic!()
                };
                (
                    dp.start_time_unix_nano / 1_000_000_000,
                    dp.time_unix_nano / 1_000_000_000,
                    i,
                )
            })
            .collect();
        v.sort();
        v
    };
    // GPU 0 is shared by two pods: its energy is one series (the entity model), not one per pod.
    assert_eq!(
        sum(&first.request),
        vec![(1000, 1010, 5000), (1000, 1010, 10000)]
    );
    assert_eq!(
        sum(&second.request),
        vec![(1010, 1020, 100), (1010, 1020, 200)],
        "lower than before: a reset, the delta is the new value"
    );
}

/// Counter state outlives a layout rebuild (a GPU leaves) for the series still there, and a
/// series that sent no point in an export (its value absent) starts over.
#[test]
fn a_delta_survives_a_new_layout_and_a_gap_restarts_it() {
    let counters = test_counters();
    let mut b = host_builder(&counters, Temporality::Delta);
    let mut got = Vec::new();
    for (seq, energy) in [(1u64, 5000i64), (2, 7000), (3, 7500), (4, 0), (5, 9000)] {
        let mut snap = snapshot(counters.clone(), seq, energy);
        snap.taken_at = UNIX_EPOCH + Duration::from_secs(1000 + 10 * seq);
        if seq >= 2 {
            // GPU-bbb leaves: the layout is made again.
            snap.entities.remove(3);
        }
        if seq == 4 {
            snap.entities[0]
                .values
                .set(1, FieldValue::Absent(Absent::Blank));
        }
        let req = b.build(&snap).request;
        for dp in req.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .filter(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            .flat_map(|m| match &m.data {
                Some(Data::Sum(s)) => s.data_points.clone(),
                _ => Vec::new(),
            })
        {
            // GPU-aaa's series only.
            let Some(number_data_point::Value::AsInt(v)) = dp.value else {
                panic!()
            };
            if !format!("{:?}", dp.attributes).contains("GPU-aaa") {
                continue;
            }
            got.push((
                seq,
                dp.start_time_unix_nano / 1_000_000_000,
                dp.time_unix_nano / 1_000_000_000,
                v,
            ));
        }
    }
    assert_eq!(
        got,
        vec![
            (1, 1000, 1010, 5000),
            (2, 1010, 1020, 2000),
            (3, 1020, 1030, 500),
            (5, 1000, 1050, 9000),
        ]
    );
}

/// A cumulative counter that goes backwards (driver reload, GPU reset) starts a new stream: its
/// start time moves to the previous point's time and stays there while the stream lasts.
#[test]
fn a_cumulative_reset_starts_a_new_stream() {
    let counters = test_counters();
    let mut b = host_builder(&counters, Temporality::Cumulative);
    let mut got = Vec::new();
    for (seq, energy) in [(1u64, 5000i64), (2, 7000), (3, 100), (4, 300)] {
        let mut snap = snapshot(counters.clone(), seq, energy);
        snap.taken_at = UNIX_EPOCH + Duration::from_secs(1000 + 10 * seq);
        let req = b.build(&snap).request;
        let m = req.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .find(|m| m.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            .unwrap()
            .clone();
        let Some(Data::Sum(s)) = m.data else { panic!() };
        assert_eq!(
            s.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        // GPU-aaa's series (GPU-ccc reads twice as much).
        let dp = s
            .data_points
            .iter()
            .min_by_key(|dp| match dp.value {
                Some(number_data_point::Value::AsInt(i)) => i,
                _ => i64::MAX,
            })
            .unwrap()
            .clone();
        let Some(number_data_point::Value::AsInt(v)) = dp.value else {
            panic!()
        };
        got.push((
            dp.start_time_unix_nano / 1_000_000_000,
            dp.time_unix_nano / 1_000_000_000,
            v,
        ));
    }
    assert_eq!(
        got,
        vec![
            (1000, 1010, 5000),
            (1000, 1020, 7000),
            (1020, 1030, 100),
            (1020, 1040, 300)
        ]
    );
}

#[test]
fn encoding_one_resource_at_a_time_gives_the_request_bytes() {
    let counters = test_counters();
    for per_entity in [true, false] {
        let n = naming(&counters, OtelAttributeStyle::Otel);
        let split = n.resource_split(if per_entity {
            OtelResourceMode::PerEntity
        } else {
            OtelResourceMode::Host
        });
        let mut b = DirectBuilder::new(
            n,
            split,
            &base(),
            counters.clone(),
            Temporality::Cumulative,
            SystemTime::now(),
        );
        let snap = snapshot(counters.clone(), 1, 5000);
        let built = b.build(&snap);
        let encoded = b.build_encoded(&snap);
        assert_eq!(encoded.body, built.request.encode_to_vec());
        assert_eq!(encoded.data_points, built.data_points);
        assert_eq!(encoded.resources, built.request.resource_metrics.len());
        assert_eq!(
            ExportMetricsServiceRequest::decode(&encoded.body[..]).unwrap(),
            built.request
        );
    }
}

#[test]
fn layout_is_reused_until_an_entity_changes() {
    let counters = test_counters();
    let n = naming(&counters, OtelAttributeStyle::Otel);
    let split = n.resource_split(OtelResourceMode::PerEntity);
    let mut b = DirectBuilder::new(
        n,
        split,
        &base(),
        counters.clone(),
        Temporality::Cumulative,
        SystemTime::now(),
    );
    let snap = snapshot(counters.clone(), 1, 5000);
    let first = b.build(&snap).request;
    let resources = b.layout.resources.as_ptr();
    // Same entities (same Arcs), new values: the cached resources stay.
    let mut next = snap.clone();
    next.seq = 2;
    next.entities[0].values.set(0, FieldValue::Int(1500));
    let second = b.build(&next).request;
    assert_eq!(b.layout.resources.as_ptr(), resources);
    assert_eq!(first.resource_metrics.len(), second.resource_metrics.len());
    // A new driver version (a label row) changes the resources.
    let mut next = next.clone();
    next.entities[0]
        .values
        .set(4, FieldValue::Text("560.2".into()));
    let third = b.build(&next).request;
    let versions: HashSet<String> = third
        .resource_metrics
        .iter()
        .filter_map(|rm| {
            rm.resource
                .as_ref()?
                .attributes
                .iter()
                .find(|kv| kv.key == "nvidia.driver.version")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    any_value::Value::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
        })
        .collect();
    assert!(versions.contains("560.2"), "{versions:?}");
}
