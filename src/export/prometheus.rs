//! Prometheus text exposition in dcgm-exporter's exact shape, rendered at most once per snapshot.
//!
//! Each series starts with its entity's identity labels and host label, from dcgm-exporter's template
//! for the entity's kind ([`super::entity_labels`]: GPU, MIG, NvLink, NvSwitch, switch link, CPU, CPU
//! core; MIG series carry the parent GPU's identity), then the `label`-type fields sorted by name, then
//! the attributes (`container, hpc_job, namespace, pod, pod_uid`) sorted by name. One `# HELP`/`# TYPE`
//! per family, families by field id. Absent values (blank and not-supported sentinels, errors) are never
//! written, nor are NaN or infinities. An entity gets one series per attribute set it has on :9400
//! (`Attribution::exposition_sets`): a device several pods share is written once, under the pod
//! dcgm-exporter would choose, unless each pod's series is asked for. A field the snapshot gives per attribute set
//! (`Snapshot::per_set`: each sharing pod's own `DCGM_FI_DEV_GPU_UTIL`/`DCGM_FI_DEV_FB_USED`) is written
//! as the device's series without attribution, then each set's series with its own value.
//!
//! The renderer makes a body (plain, and gzip when asked) from a snapshot when
//! [`super::metrics_body`] asks for one: at the first scrape after a collection, not at every
//! collection.
//!
//! The parts: `label_cache` and `cache_refresh` (the strings kept between renders and how they are
//! brought up to date), `values` (how a value is written), `series_writers` and `derived_series` (XID,
//! per-set and derived samples), `body_buffers` (the buffer pool and the gzip stream); this file holds
//! the renderer and its entry points.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;

use crate::config::LabelStyle;
use crate::lock::LockExt;
use crate::snapshot::Snapshot;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

use body_buffers::{pooled_bytes, BufferPool, GzipStream, STREAM_BUFFER};
use label_cache::RenderCache;
use series_writers::{write_per_set, write_xid_samples};
use values::ValueFormatter;

mod body_buffers;
mod cache_refresh;
mod derived_series;
mod label_cache;
mod series_writers;
mod values;

/// A finished /metrics body: its plain text, its gzip copy, or both, each made when first asked for.
#[derive(Debug, Clone, Default)]
pub struct RenderedBody {
    /// The plain body (empty when not made yet: a body made for gzip alone does not keep its text).
    pub text: Bytes,
    /// Whether `text` was made.
    pub text_made: bool,
    /// The same body, gzip-compressed (empty when not made yet or when compression failed; then plain
    /// is served).
    pub gzip: Bytes,
    /// Whether compression was attempted for this body (`gzip` is then the result, empty on failure).
    pub gzip_made: bool,
    /// Size of the body uncompressed, in bytes (known once either encoding is made).
    pub size: usize,
    /// The self-metrics as written in a body made for gzip alone: a text made later from the same
    /// snapshot ends with them, so both encodings carry the same bytes.
    tail: Bytes,
    /// Snapshot sequence number the body was rendered from (0 = nothing collected yet).
    pub seq: u64,
    /// Number of GPU-metric samples (without self-metrics).
    pub series: usize,
}

impl RenderedBody {
    /// Whether this body has what a request asking for gzip (`gzip`) is served: the gzip copy, or the
    /// text when compression failed or gzip was not asked for.
    pub fn serves(&self, gzip: bool) -> bool {
        if gzip && self.gzip_made && !self.gzip.is_empty() {
            return true;
        }
        if gzip && !self.gzip_made {
            return false;
        }
        self.text_made
    }

    /// Whether anything was made for this body's snapshot (a text, or a compression attempt).
    pub fn made_any(&self) -> bool {
        self.text_made || self.gzip_made
    }
}

/// Bodies made for gzip alone in a row after which the spare plain-text buffers are freed (a scraper
/// asking for plain text every few collections still finds one and allocates nothing).
const TEXT_SPARES_KEPT_FOR: u32 = 4;

/// Renders snapshots into dcgm-exporter-shaped text.
///
/// The work that depends only on the inventory — family headers, and each entity's label strings — is
/// kept between renders in a `RenderCache` and redone only for what changed (a new counter set, host,
/// entity, attribution or label-field value). A render then copies cached strings and formats numbers
/// on the stack; the body buffers come back to a small pool when the last reader drops them.
pub struct Renderer {
    style: LabelStyle,
    self_metrics: Option<Arc<SelfMetrics>>,
    metrics: Option<BodyMetrics>,
    cache: Mutex<RenderCache>,
    text_pool: Arc<BufferPool>,
    gzip_pool: Arc<BufferPool>,
    /// The small buffers a body made for gzip alone streams its text through (kept with the body
    /// afterwards, holding its self-metrics).
    stream_pool: Arc<BufferPool>,
    /// Bodies made for gzip alone since the last plain text: after [`TEXT_SPARES_KEPT_FOR`] of them
    /// the spare text buffers (megabytes) are freed, so one plain scrape does not hold them forever.
    gzip_only_run: AtomicU32,
    /// The deflate state (a few hundred KiB of tables), reset and reused for every body.
    deflate: Mutex<Option<flate2::Compress>>,
}

/// The self-metrics describing the bodies made.
struct BodyMetrics {
    render_seconds: Arc<Metric>,
    body_bytes: Arc<Metric>,
    series: Arc<Metric>,
    made_identity: Arc<Metric>,
    made_gzip: Arc<Metric>,
}

impl BodyMetrics {
    fn new(m: &SelfMetrics) -> BodyMetrics {
        let made = |encoding: &str| {
            m.counter(
                "dcgm_otel_bodies_made_total",
                "/metrics bodies made: the plain text (encoding identity) or the gzip copy (gzip), at most one of each per collection, at the first scrape that asks for it; a body carries the counts as of the first of its encodings made (that one included).",
                &[("encoding", encoding)],
            )
        };
        BodyMetrics {
            render_seconds: m.gauge(
                "dcgm_otel_render_duration_seconds",
                "Time spent rendering the last /metrics body.",
                &[],
            ),
            body_bytes: m.gauge(
                "dcgm_otel_exposition_bytes",
                "Size of the previous /metrics body (uncompressed), in bytes.",
                &[],
            ),
            series: m.gauge(
                "dcgm_otel_series",
                "GPU series in the previous /metrics body.",
                &[],
            ),
            made_identity: made("identity"),
            made_gzip: made("gzip"),
        }
    }
}

impl Renderer {
    /// `self_metrics`: appended to every body when given (`--no-self-metrics` passes `None`).
    pub fn new(style: LabelStyle, self_metrics: Option<Arc<SelfMetrics>>) -> Renderer {
        Renderer {
            style,
            metrics: self_metrics.as_deref().map(BodyMetrics::new),
            self_metrics,
            cache: Mutex::new(RenderCache::default()),
            text_pool: Arc::new(BufferPool::default()),
            gzip_pool: Arc::new(BufferPool::default()),
            stream_pool: Arc::new(BufferPool::default()),
            gzip_only_run: AtomicU32::new(0),
            deflate: Mutex::new(None),
        }
    }

    /// Render a snapshot's GPU metrics (without self-metrics) into `out`. Returns the sample count.
    pub fn render_metrics(&self, snap: &Snapshot, out: &mut String) -> usize {
        self.render_into(snap, out, None)
    }

    /// [`Renderer::render_metrics`], feeding each finished family to `gzip` once a chunk's worth is
    /// written.
    fn render_into(
        &self,
        snap: &Snapshot,
        out: &mut String,
        mut gzip: Option<&mut GzipStream>,
    ) -> usize {
        let mut cache = self.cache.lock_unpoisoned();
        self.refresh(&mut cache, snap);
        let RenderCache {
            families, entities, ..
        } = &mut *cache;
        let mut fmt = ValueFormatter::default();
        let mut samples = 0;
        for fam in families.iter() {
            let mut wrote_any = false;
            // Fields written per attribute set are rare (two rows, with --kubernetes-virtual-gpus):
            // looked for per entity only in a family that has some.
            let fam_per_set = snap.per_set.iter().any(|p| p.row == fam.row);
            for (i, (e, labels)) in snap.entities.iter().zip(entities.iter_mut()).enumerate() {
                let Some(v) = e.values.get(fam.row) else {
                    continue;
                };
                let Some(value) = fmt.format(v, fam.style) else {
                    continue;
                };
                if !wrote_any {
                    out.push_str(&fam.header);
                    wrote_any = true;
                }
                let per_set = fam_per_set
                    .then(|| {
                        snap.per_set
                            .iter()
                            .find(|p| p.entity == i && p.row == fam.row)
                    })
                    .flatten();
                if let Some(per_set) = per_set {
                    let device = labels
                        .device
                        .get_or_insert_with(|| self.device_labels(e, &labels.base, snap));
                    out.push_str(&fam.open);
                    out.push_str(device);
                    out.push_str(value);
                    out.push('\n');
                    samples += 1 + write_per_set(out, fam, labels, per_set, &mut fmt);
                } else if fam.xid {
                    write_xid_samples(out, fam, labels, v, value);
                } else {
                    for set in &labels.sets {
                        out.push_str(&fam.open);
                        out.push_str(set);
                        out.push_str(value);
                        out.push('\n');
                    }
                }
                if per_set.is_none() {
                    samples += labels.sets.len();
                }
            }
            if let Some(g) = gzip.as_deref_mut() {
                g.feed_chunk(out);
            }
        }
        // Per-process families (`--collect-processes`), after the DCGM ones.
        samples += super::process_series::render(snap, &self.style, out);
        if let Some(g) = gzip.as_deref_mut() {
            g.feed_chunk(out);
        }
        samples += super::distribution_series::render(
            snap,
            |i| entities.get(i).map_or(&[], |l| &l.sets[..]),
            out,
        );
        drop(cache);
        if let Some(g) = gzip {
            g.feed_chunk(out);
        }
        samples + self.render_derived(snap, out, &mut fmt)
    }

    /// Render a full body (metrics + self-metrics) of `snap`: its plain text, or when `gzip` its gzip
    /// copy alone (the text streamed through a small buffer into the compressor, not kept).
    /// `previous_len`: the size of the previous body, to size the buffers.
    pub fn render_body(&self, snap: &Snapshot, gzip: bool, previous_len: usize) -> RenderedBody {
        let started = Instant::now();
        let body = if gzip {
            self.render_gzip(snap, previous_len)
        } else {
            self.render_text(snap, previous_len)
        };
        if let Some(m) = &self.metrics {
            m.render_seconds.set(started.elapsed().as_secs_f64());
        }
        body
    }

    fn render_text(&self, snap: &Snapshot, previous_len: usize) -> RenderedBody {
        if let Some(m) = &self.metrics {
            m.made_identity.inc();
        }
        self.gzip_only_run.store(0, Ordering::Relaxed);
        // A pooled buffer is empty, so this conversion checks nothing and keeps its capacity.
        let mut text =
            String::from_utf8(self.text_pool.take(previous_len + 4096)).unwrap_or_default();
        let series = self.render_into(snap, &mut text, None);
        self.finish_text(&mut text, series, 0);
        RenderedBody {
            size: text.len(),
            text: pooled_bytes(text.into_bytes(), &self.text_pool),
            text_made: true,
            seq: snap.seq,
            series,
            ..RenderedBody::default()
        }
    }

    /// The gzip body alone: the text goes through one small buffer, compressed a chunk at a time; the
    /// self-metrics at its end are kept (`tail`) for a text made later.
    fn render_gzip(&self, snap: &Snapshot, previous_len: usize) -> RenderedBody {
        if let Some(m) = &self.metrics {
            m.made_gzip.inc();
        }
        if self.gzip_only_run.fetch_add(1, Ordering::Relaxed) + 1 == TEXT_SPARES_KEPT_FOR {
            self.text_pool.release_spares();
        }
        let mut text = String::from_utf8(self.stream_pool.take(STREAM_BUFFER)).unwrap_or_default();
        let (series, metrics_len, gzip) = self.with_deflate(|deflate| {
            let mut stream = GzipStream::new(deflate, self.gzip_pool.take(previous_len / 16), true);
            let series = self.render_into(snap, &mut text, Some(&mut stream));
            stream.drain(&mut text);
            let metrics_len = stream.len();
            self.finish_text(&mut text, series, metrics_len);
            (series, metrics_len, stream.finish(text.as_bytes()))
        });
        RenderedBody {
            size: metrics_len + text.len(),
            gzip: gzip.map_or_else(Bytes::new, |buf| pooled_bytes(buf, &self.gzip_pool)),
            gzip_made: true,
            tail: pooled_bytes(text.into_bytes(), &self.stream_pool),
            seq: snap.seq,
            series,
            ..RenderedBody::default()
        }
    }

    /// `body` (made for gzip alone from `snap`) with its plain text made now: the metrics rendered
    /// again (a render depends only on the snapshot), then the self-metrics the gzip copy carries.
    pub fn add_text(&self, snap: &Snapshot, body: &RenderedBody) -> RenderedBody {
        let started = Instant::now();
        if let Some(m) = &self.metrics {
            m.made_identity.inc();
        }
        self.gzip_only_run.store(0, Ordering::Relaxed);
        let mut text = String::from_utf8(self.text_pool.take(body.size + 4096)).unwrap_or_default();
        let series = self.render_into(snap, &mut text, None);
        let mut text = text.into_bytes();
        text.extend_from_slice(&body.tail);
        if let Some(m) = &self.metrics {
            m.render_seconds.set(started.elapsed().as_secs_f64());
        }
        RenderedBody {
            size: text.len(),
            text: pooled_bytes(text, &self.text_pool),
            text_made: true,
            gzip: body.gzip.clone(),
            gzip_made: body.gzip_made,
            tail: body.tail.clone(),
            seq: body.seq,
            series,
        }
    }

    /// `f` with the deflate state, made at the first body and reset and reused for every one after.
    fn with_deflate<R>(&self, f: impl FnOnce(&mut flate2::Compress) -> R) -> R {
        let mut deflate = self.deflate.lock_unpoisoned();
        f(
            deflate
                .get_or_insert_with(|| flate2::Compress::new(flate2::Compression::fast(), false)),
        )
    }

    /// `body` with its gzip copy made now (from its text).
    pub fn add_gzip(&self, body: &RenderedBody) -> RenderedBody {
        if let Some(m) = &self.metrics {
            m.made_gzip.inc();
        }
        let gzip = self.with_deflate(|deflate| {
            GzipStream::new(deflate, self.gzip_pool.take(body.text.len() / 16), false)
                .finish(&body.text)
        });
        RenderedBody {
            gzip: gzip.map_or_else(Bytes::new, |buf| pooled_bytes(buf, &self.gzip_pool)),
            gzip_made: true,
            ..body.clone()
        }
    }

    /// The self-metrics after the GPU metrics, and the gauges describing the body. `streamed`: bytes
    /// of the body already compressed and dropped from `text`.
    fn finish_text(&self, text: &mut String, series: usize, streamed: usize) {
        if let Some(m) = &self.metrics {
            m.series.set(series as f64);
        }
        if let Some(m) = &self.self_metrics {
            m.render(text);
        }
        if let Some(m) = &self.metrics {
            m.body_bytes.set((streamed + text.len()) as f64);
        }
    }
}
