//! Attribution is data: an enricher nobody's exporter knows about adds `team="x"` to GPU 0, and the
//! attribute reaches the :9400 exposition (in dcgm-exporter's attribute order, sorted among the pod
//! attributes) and the OTLP resource of that GPU — through the real pipeline, renderer and request
//! builder, none of them edited for it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dcgm_otel::config::LabelStyle;
use dcgm_otel::counters;
use dcgm_otel::enrich::Enricher;
use dcgm_otel::export::metrics_body::MetricsBody;
use dcgm_otel::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
use dcgm_otel::export::otel::otlp::request::DirectBuilder;
use dcgm_otel::export::prometheus::Renderer;
use dcgm_otel::export::SnapshotConsumer;
use dcgm_otel::pipeline::{CollectorStatus, Control, Pipeline};
use dcgm_otel::snapshot::attribution::{NAMESPACE, POD};
use dcgm_otel::snapshot::{
    Attribute, AttributeKey, EntityKind, EntityReading, HostInfo, Placement, SnapshotStore,
};
use dcgm_otel::source::sim::{Scenario, SimSource};
use dcgm_otel::telemetry::self_metrics::SelfMetrics;
use opentelemetry_proto::tonic::common::v1::any_value;

/// A team label for GPU 0, and a pod on it: what a site-specific enricher might add.
struct TeamEnricher {
    team: Arc<AttributeKey>,
}

impl Enricher for TeamEnricher {
    fn name(&self) -> &'static str {
        "team"
    }

    fn enrich(&mut self, entities: &mut [EntityReading]) {
        for e in entities {
            if e.entity.kind == EntityKind::Gpu && e.entity.gpu_index() == Some(0) {
                Arc::make_mut(&mut e.attribution).add(&[
                    Attribute::new(&self.team, "x"),
                    Attribute::new(&POD, "trainer-0"),
                    Attribute::new(&NAMESPACE, "ml"),
                ]);
            }
        }
    }
}

#[test]
fn an_enricher_adds_an_attribute_every_exporter_writes() {
    let counters = Arc::new(
        counters::parse(counters::DEFAULT_COUNTERS_CSV, "built-in default counters").unwrap(),
    );
    let scenario = Scenario::load("default").unwrap();
    let interval = Duration::from_millis(100);
    let source = SimSource::new(
        &scenario,
        1,
        "golden-host",
        counters.clone(),
        &dcgm_otel::config::devices::Selectors::default(),
        interval,
    )
    .unwrap();
    let body = Arc::new(MetricsBody::new(Renderer::new(LabelStyle::default(), None)));
    let store = SnapshotStore::new();
    let pipeline = Pipeline {
        source: Box::new(source),
        enrichers: vec![Box::new(TeamEnricher {
            team: AttributeKey::new("team", "team", Placement::Attributes),
        })],
        consumers: vec![body.clone() as Arc<dyn SnapshotConsumer>],
        counters: counters.clone(),
        host: Arc::new(HostInfo {
            hostname: Some("node-a".into()),
            node_name: None,
        }),
        interval,
        store: store.clone(),
        status: CollectorStatus::new(interval),
        self_metrics: SelfMetrics::new(),
        processes: None,
        reloader: None,
        waker: None,
    };
    let (stop, stop_rx) = std::sync::mpsc::channel::<Control>();
    let collector = std::thread::spawn(move || pipeline.run(stop_rx));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while body.make(false).seq == 0 {
        assert!(std::time::Instant::now() < deadline, "nothing published");
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.send(Control::Stop).unwrap();
    collector.join().unwrap();

    // :9400: the attribute sorted among the attribute-class labels, after the label fields.
    let body = String::from_utf8(body.make(false).text.to_vec()).unwrap();
    let line = body
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_MEM_CLOCK{gpu=\"0\""))
        .expect("GPU 0's memory clock");
    assert!(
        line.starts_with(
            "DCGM_FI_DEV_MEM_CLOCK{gpu=\"0\",UUID=\"GPU-1014a9ed-7550-917e-d8dc-3eef7ed5481c\",\
             pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",\
             Hostname=\"node-a\",DCGM_FI_DRIVER_VERSION=\"550.144.03\",namespace=\"ml\",\
             pod=\"trainer-0\",team=\"x\"} "
        ),
        "{line}"
    );
    assert!(
        !body
            .lines()
            .any(|l| l.contains("gpu=\"1\"") && l.contains("team=")),
        "only GPU 0 is attributed"
    );

    // OTLP: the attribute is part of GPU 0's resource identity, not of any data point.
    let snapshot = store.latest().unwrap();
    let naming = Naming::new(OtelAttributeStyle::Otel, LabelStyle::default(), &counters);
    let split = naming.resource_split(OtelResourceMode::PerEntity);
    let mut builder = DirectBuilder::new(
        naming,
        split,
        &[],
        counters.clone(),
        opentelemetry_sdk::metrics::Temporality::Cumulative,
        SystemTime::now(),
    );
    let request = builder.build(&snapshot).request;
    let text = |kv: &opentelemetry_proto::tonic::common::v1::KeyValue| match kv
        .value
        .as_ref()
        .and_then(|v| v.value.as_ref())
    {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        _ => String::new(),
    };
    let teams: Vec<(String, String, String)> = request
        .resource_metrics
        .iter()
        .filter_map(|rm| {
            let attrs = &rm.resource.as_ref()?.attributes;
            let get = |k: &str| attrs.iter().find(|kv| kv.key == k).map(text);
            Some((get("hw.id")?, get("team")?, get("k8s.pod.name")?))
        })
        .collect();
    assert_eq!(
        teams,
        vec![(
            "GPU-1014a9ed-7550-917e-d8dc-3eef7ed5481c".to_string(),
            "x".to_string(),
            "trainer-0".to_string()
        )]
    );
    for rm in &request.resource_metrics {
        for m in &rm.scope_metrics[0].metrics {
            let points = match &m.data {
                Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Gauge(g)) => {
                    &g.data_points
                }
                Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Sum(s)) => {
                    &s.data_points
                }
                _ => continue,
            };
            assert!(points
                .iter()
                .all(|p| p.attributes.iter().all(|kv| kv.key != "team")));
        }
    }
}
