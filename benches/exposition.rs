//! Exposition benches (issue 8): what one snapshot costs to render, compress and serve, and the same
//! snapshot through the obvious alternatives (opentelemetry-prometheus + prometheus `TextEncoder`,
//! prometheus-client), in the same run so the ratios compare like with like.
//!
//! Run: `cargo bench --bench exposition` (all), `cargo bench --bench exposition -- render` (filter by
//! name), `-- --smoke` (a few runs each: proves the benches work, figures meaningless).
//! Every line prints the series count and the bytes produced. See docs/performance.md.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{measure, ms, report, selected, smoke, Stats};
use dcgm_otel::counters::{CounterSet, MetricKind};
use dcgm_otel::export::prometheus::Renderer;
use dcgm_otel::snapshot::{EntityKind, FieldValue, Snapshot};
use dcgm_otel::telemetry::self_metrics::SelfMetrics;

fn runs(full: usize) -> (usize, usize) {
    if smoke() {
        (1, 3)
    } else {
        (full / 10 + 1, full)
    }
}

struct Case {
    name: String,
    snap: Arc<Snapshot>,
}

fn build_case(
    name: &str,
    scenario: &dcgm_otel::source::sim::Scenario,
    counters: CounterSet,
) -> Case {
    let counters = Arc::new(counters);
    let host = common::host();
    let mut src = common::source(scenario, &counters);
    // A few polls so counters and the load model have moved off their initial values.
    let mut snap = common::snapshot(&mut src, &counters, &host, 1);
    for seq in 2..=3 {
        snap = common::snapshot(&mut src, &counters, &host, seq);
    }
    Case {
        name: name.to_string(),
        snap: Arc::new(snap),
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let (dcp, dcp_origin) = common::dcp_counters();
    for n in [1u32, 8, 64] {
        let sc = common::gpus_scenario(n);
        out.push(build_case(
            &format!("{n} gpu × default csv"),
            &sc,
            common::default_counters(),
        ));
        out.push(build_case(&format!("{n} gpu × dcp csv"), &sc, dcp.clone()));
    }
    out.push(build_case(
        "large (8×H100×7 MIG + NVLinks)",
        &common::large_scenario(),
        common::large_counters(),
    ));
    println!("# dcp csv: {dcp_origin}");
    out
}

// ---- ours ------------------------------------------------------------------------------------------

fn bench_render(cases: &[Case]) -> Vec<(String, Stats)> {
    let mut results = Vec::new();
    let renderer = Renderer::new(common::default_style(), None);
    for c in cases {
        let mut out = String::new();
        let mut series = 0;
        let (w, r) = runs(if c.snap.entities.len() > 32 {
            200
        } else {
            2000
        });
        let st = measure(w, r, || {
            out.clear();
            series = renderer.render_metrics(&c.snap, &mut out);
        });
        report(&format!("render  {}", c.name), &st, series, out.len());
        results.push((c.name.clone(), st));
    }
    results
}

fn bench_publish(large: &Case) {
    let metrics = SelfMetrics::new();
    let renderer = Renderer::new(common::default_style(), Some(metrics));
    let (w, r) = runs(100);
    let mut len = 0;
    let st = measure(w, r, || {
        len = renderer.render_body(&large.snap, true, len).size;
    });
    let b = renderer.render_body(&large.snap, true, len);
    report("body large (render+self+gzip)", &st, b.series, b.size);
    println!(
        "{:<44} gzip bytes {} (ratio {:.1}×)",
        "",
        b.gzip.len(),
        b.size as f64 / b.gzip.len().max(1) as f64
    );
    // A body made for gzip alone keeps no text: the plain one, for the one-pass comparison.
    let text = renderer.render_body(&large.snap, false, len).text;
    let st = measure(w, r, || {
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(text.len() / 8),
            flate2::Compression::fast(),
        );
        let _ = enc.write_all(&text);
        let _ = std::hint::black_box(enc.finish());
    });
    report(
        "gzip (fast) of the large body alone",
        &st,
        b.series,
        text.len(),
    );
}

fn bench_poll() {
    for (name, sc, counters) in [
        (
            "poll    8 gpu × default csv",
            common::gpus_scenario(8),
            common::default_counters(),
        ),
        (
            "poll    large",
            common::large_scenario(),
            common::large_counters(),
        ),
    ] {
        let counters = Arc::new(counters);
        let host = common::host();
        let mut src = common::source(&sc, &counters);
        let mut values = 0;
        let (w, r) = runs(200);
        let mut seq = 0;
        let st = measure(w, r, || {
            seq += 1;
            let s = common::snapshot(&mut src, &counters, &host, seq);
            values = s.numeric_values();
            std::hint::black_box(s);
        });
        report(name, &st, values, 0);
    }
}

// ---- the alternatives -------------------------------------------------------------------------------

/// The label pairs our renderer writes for one entity (same names, same values), for the alternatives.
fn label_pairs(snap: &Snapshot) -> Vec<Vec<(String, String)>> {
    let host = snap.host.hostname.clone().unwrap_or_default();
    snap.entities
        .iter()
        .map(|e| {
            // The benchmark fleets are GPUs only.
            let Some(g) = &e.entity.gpu else {
                return Vec::new();
            };
            let mut v: Vec<(String, String)> = Vec::new();
            let mut p = |k: &str, val: String| v.push((k.to_string(), val));
            match e.entity.kind {
                EntityKind::NvLink => {
                    p("nvlink", e.entity.link.unwrap_or(0).to_string());
                    p("gpu", g.index.to_string());
                    p("gpu_uuid", g.uuid.clone());
                    p("pci_bus_id", g.pci_bus_id.clone());
                    p("device", g.device());
                    p("model_name", g.model.clone());
                }
                _ => {
                    p("gpu", g.index.to_string());
                    p("UUID", g.uuid.clone());
                    p("pci_bus_id", g.pci_bus_id.clone());
                    p("device", g.device());
                    p("modelName", g.model.clone());
                    if let Some(m) = &e.entity.mig {
                        p("GPU_I_PROFILE", m.profile.clone());
                        p("GPU_I_ID", m.gi_id.to_string());
                    }
                }
            }
            p("Hostname", host.clone());
            for (c, val) in e
                .values
                .iter()
                .filter_map(|(row, v)| Some((snap.counters.rows.get(row)?, v)))
            {
                if c.kind == MetricKind::Label {
                    if let Some(t) = val.as_text() {
                        v.push((c.name.clone(), t.to_string()));
                    }
                }
            }
            v
        })
        .collect()
}

/// Families in our output order, first row per name, label rows skipped.
fn families(counters: &CounterSet) -> Vec<usize> {
    let mut order: Vec<usize> = (0..counters.rows.len()).collect();
    order.sort_by_key(|&i| (counters.rows[i].field.id, i));
    let mut seen: Vec<&str> = Vec::new();
    order
        .into_iter()
        .filter(|&i| {
            let r = &counters.rows[i];
            if r.kind == MetricKind::Label || seen.contains(&r.name.as_str()) {
                return false;
            }
            seen.push(&r.name);
            true
        })
        .collect()
}

fn num(v: &FieldValue) -> Option<f64> {
    v.as_f64()
}

/// OTel SDK observable instruments over the snapshot, read through opentelemetry-prometheus into a
/// `prometheus::Registry`, encoded with `prometheus::TextEncoder` (options as in otel-rust-notes §4.4).
fn otel_prometheus(
    snap: &Arc<Snapshot>,
) -> (
    impl FnMut() -> (usize, usize),
    opentelemetry_sdk::metrics::SdkMeterProvider,
) {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry::KeyValue;
    let registry = prometheus::Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .without_units()
        .without_counter_suffixes()
        .without_target_info()
        .scope_info_enabled(false)
        .build()
        .expect("prometheus exporter");
    let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
        .with_reader(exporter)
        .build();
    let meter = provider.meter("dcgm");
    let attrs: Arc<Vec<Vec<KeyValue>>> = Arc::new(
        label_pairs(snap)
            .into_iter()
            .map(|set| set.into_iter().map(|(k, v)| KeyValue::new(k, v)).collect())
            .collect(),
    );
    let mut keep = Vec::new();
    for i in families(&snap.counters) {
        let row = &snap.counters.rows[i];
        let (s, a) = (snap.clone(), attrs.clone());
        match row.kind {
            MetricKind::Counter => keep.push(Box::new(
                meter
                    .f64_observable_counter(row.name.clone())
                    .with_description(row.help.clone())
                    .with_callback(move |o| {
                        for (e, at) in s.entities.iter().zip(a.iter()) {
                            if let Some(v) = e.values.get(i).and_then(num) {
                                o.observe(v, at);
                            }
                        }
                    })
                    .build(),
            ) as Box<dyn std::any::Any>),
            _ => keep.push(Box::new(
                meter
                    .f64_observable_gauge(row.name.clone())
                    .with_description(row.help.clone())
                    .with_callback(move |o| {
                        for (e, at) in s.entities.iter().zip(a.iter()) {
                            if let Some(v) = e.values.get(i).and_then(num) {
                                o.observe(v, at);
                            }
                        }
                    })
                    .build(),
            )),
        }
    }
    let mut out = Vec::new();
    let f = move || {
        let _ = &keep;
        out.clear();
        let mf = registry.gather();
        let _ = prometheus::Encoder::encode(&prometheus::TextEncoder::new(), &mf, &mut out);
        let series = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty() && l[0] != b'#')
            .count();
        (series, out.len())
    };
    (f, provider)
}

#[derive(Debug)]
struct ClientCollector {
    snap: Arc<Snapshot>,
    labels: Vec<Vec<(String, String)>>,
    families: Vec<usize>,
}

impl prometheus_client::collector::Collector for ClientCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        use prometheus_client::metrics::MetricType;
        for &i in &self.families {
            let row = &self.snap.counters.rows[i];
            let counter = row.kind == MetricKind::Counter;
            let ty = if counter {
                MetricType::Counter
            } else {
                MetricType::Gauge
            };
            let mut fam = encoder.encode_descriptor(&row.name, &row.help, None, ty)?;
            for (e, l) in self.snap.entities.iter().zip(&self.labels) {
                let Some(v) = e.values.get(i).and_then(num) else {
                    continue;
                };
                if counter {
                    ConstCounter::new(v).encode(fam.encode_family(l)?)?;
                } else {
                    ConstGauge::new(v).encode(fam.encode_family(l)?)?;
                }
            }
        }
        Ok(())
    }
}

/// prometheus-client with a `Collector` that encodes straight from the snapshot (its cheapest use).
fn prometheus_client_path(snap: &Arc<Snapshot>) -> impl FnMut() -> (usize, usize) {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(ClientCollector {
        snap: snap.clone(),
        labels: label_pairs(snap),
        families: families(&snap.counters),
    }));
    let mut out = String::new();
    move || {
        out.clear();
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        let series = out
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .count();
        (series, out.len())
    }
}

fn bench_compare(cases: &[Case], ours: &[(String, Stats)]) {
    println!("\n# the same snapshot through the alternatives (ratio = their median / ours)");
    for c in cases
        .iter()
        .filter(|c| c.name.contains("8 gpu × default") || c.name.starts_with("large"))
    {
        let our = ours
            .iter()
            .find(|(n, _)| *n == c.name)
            .map(|(_, s)| s.median)
            .unwrap_or_default();
        let (w, r) = runs(if c.name.starts_with("large") { 30 } else { 300 });
        let (mut f, provider) = otel_prometheus(&c.snap);
        let (mut series, mut bytes) = (0, 0);
        let st = measure(w, r, || (series, bytes) = f());
        report(
            &format!("otel-prometheus+TextEncoder {}", c.name),
            &st,
            series,
            bytes,
        );
        println!(
            "{:<44} ratio {:.1}×",
            "",
            st.median.as_secs_f64() / our.as_secs_f64().max(1e-12)
        );
        let _ = provider.shutdown();
        let mut f = prometheus_client_path(&c.snap);
        let st = measure(w, r, || (series, bytes) = f());
        report(&format!("prometheus-client {}", c.name), &st, series, bytes);
        println!(
            "{:<44} ratio {:.1}×",
            "",
            st.median.as_secs_f64() / our.as_secs_f64().max(1e-12)
        );
    }
}

// ---- OTLP: building and encoding requests ------------------------------------------------------------

/// Not the product: how long one OTLP request of the same 10k points takes when built straight from the
/// snapshot with the opentelemetry-proto types (one ResourceMetrics per entity with cached resource
/// attributes, one Metric per row, no SDK aggregation, no regrouping), then prost-encoded and gzipped.
/// A yardstick for the OTLP path's 15 ms target.
fn bench_otlp_direct(large: &Case) {
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{
        any_value, AnyValue, InstrumentationScope, KeyValue,
    };
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
        ResourceMetrics, ScopeMetrics, Sum,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use prost::Message;

    let snap = &large.snap;
    let kv = |k: &str, v: &str| KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    };
    let resources: Vec<Resource> = label_pairs(snap)
        .into_iter()
        .map(|set| Resource {
            attributes: set.iter().map(|(k, v)| kv(k, v)).collect(),
            ..Default::default()
        })
        .collect();
    let fams = families(&snap.counters);
    let scope = InstrumentationScope {
        name: "dcgm-otel".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    };
    let now = 1_763_700_000_000_000_000u64;
    let mut bytes = 0;
    let mut gz = 0;
    let mut points = 0;
    let (w, r) = runs(200);
    let build = |points: &mut usize| -> Vec<u8> {
        let mut req = ExportMetricsServiceRequest::default();
        for (e, res) in snap.entities.iter().zip(&resources) {
            let mut metrics = Vec::new();
            for &i in &fams {
                let row = &snap.counters.rows[i];
                let value = match e.values.get(i) {
                    Some(FieldValue::Int(n)) => number_data_point::Value::AsInt(*n),
                    Some(v) => match v.as_f64() {
                        Some(f) => number_data_point::Value::AsDouble(f),
                        None => continue,
                    },
                    None => continue,
                };
                let dp = vec![NumberDataPoint {
                    start_time_unix_nano: now - 30_000_000_000,
                    time_unix_nano: now,
                    value: Some(value),
                    ..Default::default()
                }];
                *points += 1;
                let data = if row.kind == MetricKind::Counter {
                    metric::Data::Sum(Sum {
                        data_points: dp,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })
                } else {
                    metric::Data::Gauge(Gauge { data_points: dp })
                };
                metrics.push(Metric {
                    name: row.name.clone(),
                    description: row.help.clone(),
                    data: Some(data),
                    ..Default::default()
                });
            }
            req.resource_metrics.push(ResourceMetrics {
                resource: Some(res.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(scope.clone()),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        req.encode_to_vec()
    };
    let st = measure(w, r, || {
        points = 0;
        let body = build(&mut points);
        bytes = body.len();
        std::hint::black_box(body);
    });
    report("otlp direct prototype: build + encode", &st, points, bytes);
    let st = measure(w, r, || {
        points = 0;
        let body = build(&mut points);
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(body.len() / 8),
            flate2::Compression::fast(),
        );
        let _ = enc.write_all(&body);
        gz = enc.finish().map(|v| v.len()).unwrap_or(0);
    });
    report(
        "otlp direct prototype: build + encode + gzip",
        &st,
        points,
        gz,
    );
}

/// Incident log records (`src/export/otel/otlp/log_records.rs`) on the large snapshot with one XID on
/// every GPU and MIG instance: `RecordBuilder::records` (what the collector thread runs in the log
/// consumer for a snapshot with incidents), then grouping and encoding the request (the export thread).
fn bench_otlp_logs(large: &Case) {
    use dcgm_otel::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
    use dcgm_otel::export::otel::otlp::log_records::{request, RecordBuilder};
    use dcgm_otel::snapshot::{Incident, IncidentKind};
    use prost::Message;

    let mut snap = (*large.snap).clone();
    snap.incidents = snap
        .entities
        .iter()
        .filter(|e| matches!(e.entity.kind, EntityKind::Gpu | EntityKind::GpuInstance))
        .map(|e| Incident {
            entity: e.entity.clone(),
            attribution: e.attribution.clone(),
            at: snap.taken_at,
            kind: IncidentKind::Xid { code: 48 },
        })
        .collect();
    let naming = Naming::new(
        OtelAttributeStyle::Otel,
        common::default_style(),
        &snap.counters,
    );
    let split = naming.resource_split(OtelResourceMode::PerEntity);
    let builder = RecordBuilder::new(
        naming,
        split,
        &[
            opentelemetry::KeyValue::new("service.name", "dcgm-otel"),
            opentelemetry::KeyValue::new("host.name", "bench-node-01"),
        ],
    );
    let (w, r) = runs(200);
    let mut n = 0;
    let st = measure(w, r, || {
        let records = builder.records(&snap);
        n = records.len();
        std::hint::black_box(records);
    });
    report("otlp logs: records of a snapshot (collector)", &st, n, 0);
    let none = (*large.snap).clone();
    let st = measure(w, r, || {
        std::hint::black_box(builder.records(&none));
    });
    report("otlp logs: a snapshot without incidents", &st, 0, 0);
    let records = builder.records(&snap);
    let mut bytes = 0;
    let st = measure(w, r, || {
        let body = request(records.clone()).request.encode_to_vec();
        bytes = body.len();
        std::hint::black_box(body);
    });
    report(
        "otlp logs: group + encode the request",
        &st,
        records.len(),
        bytes,
    );
}

/// The product's direct pipeline (`src/export/otel/otlp/request.rs`) on the same
/// snapshot: `DirectBuilder::build` with its per-entity layout cached (as between two exports), then
/// `build_encoded` (what an export runs: the request written from cached templates), the previous
/// prost path it is checked against (`build_encoded_reference`) and gzip, in both resource modes.
/// The first build (layout made) is timed once.
fn bench_otlp_pipeline(large: &Case) {
    use dcgm_otel::export::otel::naming::{Naming, OtelAttributeStyle, OtelResourceMode};
    use dcgm_otel::export::otel::otlp::request::DirectBuilder;
    use opentelemetry_sdk::metrics::Temporality;
    use prost::Message;

    let counters = large.snap.counters.clone();
    let base = [
        opentelemetry::KeyValue::new("service.name", "dcgm-otel"),
        opentelemetry::KeyValue::new("host.name", "bench-node-01"),
    ];
    use dcgm_otel::export::otel::semconv::MetricNames;
    for (mode, style, per_entity, names) in [
        (
            "per-entity",
            OtelAttributeStyle::Otel,
            true,
            MetricNames::Dcgm,
        ),
        ("host", OtelAttributeStyle::Dcgm, false, MetricNames::Dcgm),
        (
            "per-entity, --otel-metric-names semconv",
            OtelAttributeStyle::Otel,
            true,
            MetricNames::Semconv,
        ),
        (
            "per-entity, --otel-metric-names both",
            OtelAttributeStyle::Otel,
            true,
            MetricNames::Both,
        ),
    ] {
        let naming = Naming::new(style, common::default_style(), &counters)
            .with_hw_attributes(names.semconv());
        let split = naming.resource_split(if per_entity {
            OtelResourceMode::PerEntity
        } else {
            OtelResourceMode::Host
        });
        let mut b = DirectBuilder::new(
            naming,
            split,
            &base,
            counters.clone(),
            Temporality::Cumulative,
            std::time::SystemTime::now(),
        )
        .with_metric_names(names);
        let t = Instant::now();
        let first = b.build(&large.snap);
        let cold = t.elapsed();
        let points = first.data_points;
        let bytes = first.request.encode_to_vec().len();
        println!(
            "otlp pipeline direct ({mode}): first build (layout made) {:.1} µs, {} resources",
            cold.as_secs_f64() * 1e6,
            first.request.resource_metrics.len()
        );
        let (w, r) = runs(200);
        let st = measure(w, r, || {
            std::hint::black_box(b.build(&large.snap));
        });
        report(
            &format!("otlp pipeline direct ({mode}): build"),
            &st,
            points,
            bytes,
        );
        let st = measure(w, r, || {
            std::hint::black_box(b.build_encoded(&large.snap).body);
        });
        report(
            &format!("otlp pipeline direct ({mode}): build + encode"),
            &st,
            points,
            bytes,
        );
        // The previous path (proto values encoded by prost), the reference of the same bytes.
        let mut reference = b.build_encoded_reference(&large.snap).body;
        assert_eq!(reference, b.build_encoded(&large.snap).body, "{mode}");
        let st = measure(w, r, || {
            reference = std::hint::black_box(b.build_encoded_reference(&large.snap).body);
        });
        report(
            &format!("otlp pipeline direct ({mode}): prost reference"),
            &st,
            points,
            reference.len(),
        );
        let mut gz = 0;
        let st = measure(w, r, || {
            let body = b.build_encoded(&large.snap).body;
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(body.len() / 8),
                flate2::Compression::fast(),
            );
            let _ = enc.write_all(&body);
            gz = enc.finish().map(|v| v.len()).unwrap_or(0);
        });
        report(
            &format!("otlp pipeline direct ({mode}): + gzip"),
            &st,
            points,
            gz,
        );
    }
}

// ---- serving, through the real binary over loopback ---------------------------------------------------

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Minimal HTTP/1.1 keep-alive GET; returns (status, body length).
fn get(
    stream: &mut TcpStream,
    path: &str,
    gzip: bool,
    buf: &mut Vec<u8>,
) -> std::io::Result<(u16, usize)> {
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: dcgm-otel-bench\r\n{}\r\n",
        if gzip {
            "Accept-Encoding: gzip\r\n"
        } else {
            ""
        }
    );
    stream.write_all(req.as_bytes())?;
    buf.clear();
    let mut chunk = [0u8; 65536];
    let head_end = loop {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok((status, len))
}

fn bench_serve() {
    let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => {
            println!("serve: cannot pick a port: {e}");
            return;
        }
    };
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_dcgm-otel"))
        .args([
            "--simulate=large",
            "-c",
            "1000",
            "-a",
            &format!("127.0.0.1:{port}"),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        println!("serve: cannot start dcgm-otel");
        return;
    };
    let _guard = Exporter(child);
    let mut buf = Vec::new();
    let mut first = None;
    while started.elapsed() < Duration::from_secs(20) {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            if let Ok((200, len)) = get(&mut s, "/metrics", false, &mut buf) {
                if buf.windows(7).any(|w| w == b"DCGM_FI") && len > 0 {
                    first = Some(started.elapsed());
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    match first {
        Some(d) => println!(
            "{:<44} {:>8.1} ms (spawn → first /metrics with GPU series)",
            "start to first /metrics (large)",
            ms(d)
        ),
        None => {
            println!("serve: no /metrics within 20 s");
            return;
        }
    }
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let _ = s.set_nodelay(true);
    for gzip in [true, false] {
        let (w, r) = runs(if gzip { 3000 } else { 500 });
        let mut bytes = 0;
        let mut ok = true;
        let st = measure(w, r, || match get(&mut s, "/metrics", gzip, &mut buf) {
            Ok((200, n)) => bytes = n,
            _ => ok = false,
        });
        let name = if gzip {
            "serve /metrics gzip (1 conn, keep-alive)"
        } else {
            "serve /metrics identity (1 conn)"
        };
        report(name, &st, 0, bytes);
        if !ok {
            println!("serve: some requests failed");
        }
    }
}

/// `--dump DIR`: write what the renderer produces for every case, through a sequence of snapshots that
/// changes attribution, entities and label values between renders (exercising its cache), so two builds
/// of the renderer can be compared byte for byte with `diff -r`.
fn dump(dir: &str, cases: &[Case]) {
    use dcgm_otel::config::{HostnameLabel, LabelStyle};
    use dcgm_otel::enrich::kubernetes::PodRef;
    use dcgm_otel::snapshot::attribution::HPC_JOB;
    use dcgm_otel::snapshot::{Attribute, Attribution};
    let pods = |list: &[PodRef], jobs: &[&str]| {
        let mut a = Attribution::default();
        a.split(&list.iter().map(PodRef::attributes).collect::<Vec<_>>());
        a.split(
            &jobs
                .iter()
                .map(|j| vec![Attribute::new(&HPC_JOB, *j)])
                .collect::<Vec<_>>(),
        );
        a
    };
    let _ = std::fs::create_dir_all(dir);
    let pod = |n: &str| PodRef {
        uid: if n.ends_with('b') {
            String::new()
        } else {
            format!("uid-{n}")
        },
        ..PodRef::new("ml", n, "trainer")
    };
    let styles = [
        ("default", common::default_style()),
        (
            "old",
            LabelStyle {
                use_old_namespace: true,
                replace_blanks_in_model_name: true,
                hostname_label: HostnameLabel::LowerHostname,
            },
        ),
    ];
    for (sname, style) in styles {
        for (ci, c) in cases.iter().enumerate() {
            let r = Renderer::new(style.clone(), None);
            let mut snaps: Vec<Snapshot> = vec![(*c.snap).clone()];
            let mut s2 = (*c.snap).clone();
            if let Some(e) = s2.entities.get_mut(0) {
                e.attribution = Arc::new(pods(&[pod("p-a"), pod("p-b")], &[]));
            }
            if let Some(e) = s2.entities.get_mut(1) {
                e.attribution = Arc::new(pods(&[pod("p-c")], &["42", "7\"x"]));
            }
            snaps.push(s2.clone());
            let mut s3 = s2.clone();
            if s3.entities.len() > 1 {
                s3.entities.remove(0);
            }
            snaps.push(s3.clone());
            let mut s4 = s3.clone();
            let label_rows: Vec<usize> = (0..s4.counters.rows.len())
                .filter(|&i| s4.counters.rows[i].kind == MetricKind::Label)
                .collect();
            if let (Some(e), Some(&row)) = (s4.entities.get_mut(0), label_rows.first()) {
                e.values.set(row, FieldValue::Text("999.1\nnew".into()));
            }
            // Every 7th (entity, row) slot in row order, as the dense layout numbered them.
            let rows = s4.counters.rows.len();
            for (i, e) in s4.entities.iter_mut().enumerate() {
                for row in (0..rows).filter(|row| (i * rows + row) % 7 == 0) {
                    if let Some(&FieldValue::Int(n)) = e.values.get(row) {
                        e.values
                            .set(row, FieldValue::Double(n as f64 * 0.37 - 1e-3));
                    }
                }
            }
            snaps.push(s4);
            snaps.push((*c.snap).clone());
            for (si, s) in snaps.iter().enumerate() {
                let mut out = String::new();
                let n = r.render_metrics(s, &mut out);
                out.push_str(&format!("# samples {n}\n"));
                let _ = std::fs::write(format!("{dir}/{sname}-{ci}-{si}.prom"), out);
            }
        }
    }
    println!("dumped to {dir}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(dir) = args
        .iter()
        .position(|a| a == "--dump")
        .and_then(|i| args.get(i + 1))
    {
        dump(dir, &cases());
        return;
    }
    println!(
        "# dcgm-otel exposition benches{}",
        if smoke() {
            " (smoke: figures meaningless)"
        } else {
            ""
        }
    );
    let cases = cases();
    let mut ours = Vec::new();
    if selected("render") || selected("compare") {
        ours = bench_render(&cases);
    }
    if let Some(large) = cases.iter().find(|c| c.name.starts_with("large")) {
        if selected("publish") {
            bench_publish(large);
        }
    }
    if selected("poll") {
        bench_poll();
    }
    if selected("compare") {
        bench_compare(&cases, &ours);
    }
    if selected("serve") {
        bench_serve();
    }
    if let Some(large) = cases.iter().find(|c| c.name.starts_with("large")) {
        if selected("otlp-direct") {
            bench_otlp_direct(large);
        }
        if selected("otlp-pipeline-direct") {
            bench_otlp_pipeline(large);
        }
        if selected("otlp-logs") {
            bench_otlp_logs(large);
        }
    }
    println!("kubernetes mapping join: see `cargo bench --bench kubernetes_mapping` (issue 5's own bench)");
}
