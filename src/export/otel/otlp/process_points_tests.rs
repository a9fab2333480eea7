//! Per-process OTLP points (`processes.rs`) through the direct request builder (`request.rs`), on
//! the hand-made test snapshot: where pid, name and pod end up in both attribute styles.

use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue as PKeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point};
use opentelemetry_sdk::metrics::Temporality;

use super::request::DirectBuilder;
use crate::config::LabelStyle;
use crate::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
use crate::export::otel::test_fleet::{counters, pods, snapshot};
use crate::snapshot::attribution::Attribution;
use crate::snapshot::ProcessReading;

fn text(kv: &PKeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(list: &[PKeyValue]) -> Vec<(String, String)> {
    list.iter().map(|kv| (kv.key.clone(), text(kv))).collect()
}

#[test]
fn process_points_carry_pid_and_name_under_their_device_and_pod_resource() {
    let counters = counters();
    let mut snap = snapshot(counters.clone(), 1, 1000);
    let gpu0 = snap.entities[0].entity.clone();
    let mut a = ProcessReading::new(gpu0.clone(), 4242, "python3");
    a.memory_bytes = Some(1 << 30);
    a.sm_util = Some(55.0);
    let mut only_pod = pods(&["a"]);
    only_pod.remove(&crate::snapshot::attribution::CONTAINER);
    a.attribution = Arc::new(only_pod);
    let mut host = ProcessReading::new(gpu0, 5120, "nvidia-smi");
    host.memory_bytes = Some(64 << 20);
    host.attribution = Arc::new(Attribution::default());
    snap.processes = vec![a, host];
    for (style, pid_key, name_key) in [
        (
            OtelAttributeStyle::Otel,
            "process.pid",
            "process.executable.name",
        ),
        (OtelAttributeStyle::Dcgm, "pid", "process_name"),
    ] {
        let naming = Naming::new(style, LabelStyle::default(), &counters);
        let split = naming.resource_split(OtelResourceMode::PerEntity);
        let mut b = DirectBuilder::new(
            naming,
            split,
            &[KeyValue::new("service.name", "t")],
            counters.clone(),
            Temporality::Cumulative,
            SystemTime::now(),
        );
        let req = b.build(&snap).request;
        type Pairs = Vec<(String, String)>;
        let with = |name: &str| -> Vec<(Pairs, Pairs, f64)> {
            req.resource_metrics
                .iter()
                .flat_map(|rm| {
                    let res = attrs(&rm.resource.as_ref().unwrap().attributes);
                    rm.scope_metrics
                        .iter()
                        .flat_map(|s| &s.metrics)
                        .filter(|m| m.name == name)
                        .flat_map(move |m| match &m.data {
                            Some(Data::Gauge(g)) => g
                                .data_points
                                .iter()
                                .map(|p| {
                                    let v = match p.value {
                                        Some(number_data_point::Value::AsDouble(d)) => d,
                                        _ => f64::NAN,
                                    };
                                    (res.clone(), attrs(&p.attributes), v)
                                })
                                .collect::<Vec<_>>(),
                            _ => Vec::new(),
                        })
                })
                .collect()
        };
        let mem = with("nvidia.process.gpu.memory.usage");
        assert_eq!(mem.len(), 2, "{style:?}");
        let (pod_key, device_key) = if style == OtelAttributeStyle::Otel {
            ("k8s.pod.name", "hw.id")
        } else {
            ("pod", "UUID")
        };
        // The pod's process: on its pod's Resource (a holder's view, not the device's), with the
        // device's identity, pid and name on the point.
        let (res, point, v) = mem
            .iter()
            .find(|(_, p, _)| p.contains(&(pid_key.to_string(), "4242".to_string())))
            .expect("the pod's process");
        assert_eq!(*v, (1u64 << 30) as f64);
        assert!(
            res.contains(&(pod_key.to_string(), "a".to_string())),
            "{res:?}"
        );
        assert!(!res.iter().any(|(k, _)| k == device_key), "{res:?}");
        assert!(point.contains(&(name_key.to_string(), "python3".to_string())));
        assert!(
            point.contains(&(device_key.to_string(), "GPU-aaa".to_string())),
            "{point:?}"
        );
        // The host process: the host's Resource (no pod, no device identity), the device on the point.
        let (res, point, _) = mem
            .iter()
            .find(|(_, p, _)| p.contains(&(pid_key.to_string(), "5120".to_string())))
            .expect("the host process");
        assert!(!res.iter().any(|(k, _)| k == pod_key || k == device_key));
        assert!(point.contains(&(device_key.to_string(), "GPU-aaa".to_string())));
        // No SM sample for the host process: one SM point, a ratio (55 % → 0.55).
        let sm = with("nvidia.process.gpu.sm.utilization");
        assert_eq!(sm.len(), 1);
        assert!((sm[0].2 - 0.55).abs() < 1e-12);
    }
}
