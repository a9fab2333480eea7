//! Prometheus text exposition in dcgm-exporter's exact shape, rendered once per snapshot.
//!
//! Label order for GPU and MIG series is dcgm-exporter's: `gpu, UUID, pci_bus_id, device, modelName,
//! [GPU_I_PROFILE, GPU_I_ID], Hostname`, then the `label`-type fields sorted by name, then the attributes
//! (`container, hpc_job, namespace, pod, pod_uid`) sorted by name. MIG series carry the parent GPU's
//! identity. NvLink series use dcgm-exporter's link spelling (`nvlink, gpu, gpu_uuid, pci_bus_id, device,
//! model_name`). One `# HELP`/`# TYPE` per family, families by field id. Absent values (blank and
//! not-supported sentinels, errors) are never written, nor are NaN or infinities.
//!
//! The renderer runs on the collector thread after each collection and publishes the finished body
//! (plain and gzip) with one atomic swap; the HTTP server only copies those bytes.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;

use super::self_metrics::{Metric, SelfMetrics};
use super::SnapshotConsumer;
use crate::config::counters::MetricKind;
use crate::config::LabelStyle;
use crate::snapshot::{Attribution, EntityKind, EntityReading, FieldValue, HostInfo, Snapshot};

/// A finished /metrics body.
#[derive(Debug, Clone, Default)]
pub struct RenderedBody {
    pub text: Bytes,
    /// The same body, gzip-compressed (empty when compression failed; then plain is served).
    pub gzip: Bytes,
    /// Snapshot sequence number the body was rendered from (0 = nothing collected yet).
    pub seq: u64,
    /// Number of GPU-metric samples (without self-metrics).
    pub series: usize,
}

/// Write a float the way Prometheus reads it: shortest round-trip digits, integers without a dot.
pub fn write_f64(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v != 0.0 && (v.abs() >= 1e21 || v.abs() < 1e-6) {
        let _ = write!(out, "{v:e}");
    } else {
        let _ = write!(out, "{v}");
    }
}

fn escape_label_value(v: &str, out: &mut String) {
    if !v.contains(['\\', '"', '\n']) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn push_label(out: &mut String, first: &mut bool, name: &str, value: &str) {
    if !*first {
        out.push(',');
    }
    *first = false;
    out.push_str(name);
    out.push_str("=\"");
    escape_label_value(value, out);
    out.push('"');
}

/// Renders snapshots into dcgm-exporter-shaped text.
pub struct Renderer {
    style: LabelStyle,
    self_metrics: Option<Arc<SelfMetrics>>,
    body: Arc<ArcSwap<RenderedBody>>,
    render_seconds: Option<Arc<Metric>>,
    body_bytes: Option<Arc<Metric>>,
    series_gauge: Option<Arc<Metric>>,
}

impl Renderer {
    /// `self_metrics`: appended to every body when given (`--no-self-metrics` passes `None`).
    pub fn new(style: LabelStyle, self_metrics: Option<Arc<SelfMetrics>>) -> Renderer {
        let (render_seconds, body_bytes, series_gauge) = match &self_metrics {
            Some(m) => (
                Some(m.gauge(
                    "dcgm_otel_render_duration_seconds",
                    "Time spent rendering the last /metrics body.",
                    &[],
                )),
                Some(m.gauge(
                    "dcgm_otel_exposition_bytes",
                    "Size of the previous /metrics body (uncompressed), in bytes.",
                    &[],
                )),
                Some(m.gauge(
                    "dcgm_otel_series",
                    "GPU series in the previous /metrics body.",
                    &[],
                )),
            ),
            None => (None, None, None),
        };
        Renderer {
            style,
            self_metrics,
            body: Arc::new(ArcSwap::from_pointee(RenderedBody::default())),
            render_seconds,
            body_bytes,
            series_gauge,
        }
    }

    /// The cell the HTTP server reads bodies from.
    pub fn body(&self) -> Arc<ArcSwap<RenderedBody>> {
        self.body.clone()
    }

    /// Render a snapshot's GPU metrics (without self-metrics) into `out`. Returns the sample count.
    pub fn render_metrics(&self, snap: &Snapshot, out: &mut String) -> usize {
        let prefixes: Vec<Vec<String>> = snap
            .entities
            .iter()
            .map(|e| self.label_sets(e, &snap.host, snap))
            .collect();
        let mut order: Vec<usize> = (0..snap.counters.rows.len()).collect();
        order.sort_by_key(|&i| (snap.counters.rows[i].field.id, i));
        let mut seen_names: Vec<&str> = Vec::new();
        let mut samples = 0;
        for i in order {
            let row = &snap.counters.rows[i];
            if row.kind == MetricKind::Label || seen_names.contains(&row.name.as_str()) {
                continue;
            }
            seen_names.push(&row.name);
            let start = out.len();
            let mut wrote_any = false;
            for (e, sets) in snap.entities.iter().zip(&prefixes) {
                let Some(v) = e.values.get(i) else { continue };
                let mut value = String::new();
                match v {
                    FieldValue::Int(n) => {
                        let _ = write!(value, "{n}");
                    }
                    FieldValue::Double(d) if d.is_finite() => write_f64(&mut value, *d),
                    _ => continue,
                }
                if !wrote_any {
                    out.push_str("# HELP ");
                    out.push_str(&row.name);
                    out.push(' ');
                    escape_help(&row.help, out);
                    out.push_str("\n# TYPE ");
                    out.push_str(&row.name);
                    out.push(' ');
                    out.push_str(row.kind.as_str());
                    out.push('\n');
                    wrote_any = true;
                }
                for labels in sets {
                    out.push_str(&row.name);
                    out.push('{');
                    out.push_str(labels);
                    out.push_str("} ");
                    out.push_str(&value);
                    out.push('\n');
                    samples += 1;
                }
            }
            if !wrote_any {
                out.truncate(start);
            }
        }
        samples
    }

    /// The label strings of one entity: one per (pod × job) combination, or one when unattributed.
    fn label_sets(&self, e: &EntityReading, host: &HostInfo, snap: &Snapshot) -> Vec<String> {
        let mut base = String::with_capacity(256);
        let mut first = true;
        let gpu = &e.entity.gpu;
        let model = self.style.model_name(&gpu.model);
        let host_label = self.style.hostname_label.as_str();
        match e.entity.kind {
            EntityKind::NvLink => {
                let link = e.entity.link.unwrap_or(0).to_string();
                push_label(&mut base, &mut first, "nvlink", &link);
                push_label(&mut base, &mut first, "gpu", &gpu.index.to_string());
                push_label(&mut base, &mut first, "gpu_uuid", &gpu.uuid);
                push_label(&mut base, &mut first, "pci_bus_id", &gpu.pci_bus_id);
                push_label(&mut base, &mut first, "device", &gpu.device());
                push_label(&mut base, &mut first, "model_name", &model);
            }
            EntityKind::Gpu | EntityKind::GpuInstance => {
                push_label(&mut base, &mut first, "gpu", &gpu.index.to_string());
                let uuid_name = if self.style.use_old_namespace { "uuid" } else { "UUID" };
                push_label(&mut base, &mut first, uuid_name, &gpu.uuid);
                push_label(&mut base, &mut first, "pci_bus_id", &gpu.pci_bus_id);
                push_label(&mut base, &mut first, "device", &gpu.device());
                push_label(&mut base, &mut first, "modelName", &model);
                if let Some(m) = &e.entity.mig {
                    push_label(&mut base, &mut first, "GPU_I_PROFILE", &m.profile);
                    push_label(&mut base, &mut first, "GPU_I_ID", &m.gi_id.to_string());
                }
            }
        }
        if let Some(h) = host.hostname.as_deref().filter(|h| !h.is_empty()) {
            push_label(&mut base, &mut first, host_label, h);
        }
        // label-type fields, sorted by name
        let mut label_fields: Vec<(&str, &str)> = snap
            .counters
            .rows
            .iter()
            .zip(&e.values)
            .filter(|(c, _)| c.kind == MetricKind::Label)
            .filter_map(|(c, v)| v.as_text().map(|t| (c.name.as_str(), t)))
            .collect();
        label_fields.sort();
        label_fields.dedup_by(|a, b| a.0 == b.0);
        for (k, v) in label_fields {
            push_label(&mut base, &mut first, k, v);
        }
        self.attribute_sets(&e.attribution, base, first)
    }

    fn attribute_sets(&self, attr: &Attribution, base: String, first: bool) -> Vec<String> {
        if attr.is_empty() {
            return vec![base];
        }
        let old = self.style.use_old_namespace;
        let pods: Vec<Option<&crate::snapshot::PodRef>> = if attr.pods.is_empty() {
            vec![None]
        } else {
            attr.pods.iter().map(Some).collect()
        };
        let jobs: Vec<Option<&str>> = if attr.hpc_jobs.is_empty() {
            vec![None]
        } else {
            attr.hpc_jobs.iter().map(|j| Some(j.as_str())).collect()
        };
        let mut out = Vec::with_capacity(pods.len() * jobs.len());
        for pod in &pods {
            for job in &jobs {
                let mut attrs: Vec<(&str, &str)> = Vec::new();
                if let Some(p) = pod {
                    attrs.push((if old { "container_name" } else { "container" }, &p.container));
                    attrs.push((if old { "pod_namespace" } else { "namespace" }, &p.namespace));
                    attrs.push((if old { "pod_name" } else { "pod" }, &p.name));
                    if !p.uid.is_empty() {
                        attrs.push(("pod_uid", &p.uid));
                    }
                }
                if let Some(j) = job {
                    attrs.push(("hpc_job", j));
                }
                attrs.sort();
                let mut s = base.clone();
                let mut f = first;
                for (k, v) in attrs {
                    push_label(&mut s, &mut f, k, v);
                }
                out.push(s);
            }
        }
        out
    }

    /// Render a full body (metrics + self-metrics) and publish it.
    pub fn publish(&self, snap: &Snapshot) {
        let started = Instant::now();
        let mut text = String::with_capacity(self.body.load().text.len() + 4096);
        let series = self.render_metrics(snap, &mut text);
        if let Some(s) = &self.series_gauge {
            s.set(series as f64);
        }
        if let Some(m) = &self.self_metrics {
            m.render(&mut text);
        }
        let gzip = {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(text.len() / 4),
                flate2::Compression::fast(),
            );
            match enc.write_all(text.as_bytes()).and_then(|_| enc.finish()) {
                Ok(v) => Bytes::from(v),
                Err(_) => Bytes::new(),
            }
        };
        if let Some(b) = &self.body_bytes {
            b.set(text.len() as f64);
        }
        self.body.store(Arc::new(RenderedBody {
            text: Bytes::from(text),
            gzip,
            seq: snap.seq,
            series,
        }));
        if let Some(r) = &self.render_seconds {
            r.set(started.elapsed().as_secs_f64());
        }
    }
}

impl SnapshotConsumer for Renderer {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>) {
        self.publish(snapshot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_are_prometheus_friendly() {
        let f = |v: f64| {
            let mut s = String::new();
            write_f64(&mut s, v);
            s
        };
        assert_eq!(f(30.982), "30.982");
        assert_eq!(f(42.0), "42");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(1.5e22), "1.5e22");
        assert_eq!(f(2.5e-9), "2.5e-9");
    }
}
