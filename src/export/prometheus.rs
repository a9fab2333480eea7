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

use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use bytes::Bytes;

use super::entity_labels::identity_labels;
use crate::config::LabelStyle;
use crate::counters::{CounterSet, MetricKind};
use crate::lock::LockExt;
use crate::snapshot::{
    Attribution, Entity, EntityReading, FieldValue, HostInfo, PerSetValues, Placement, Snapshot,
};
use crate::telemetry::exposition::{
    escape_help, label_names, push_label, whole_f64, write_f64_slow,
};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// A finished /metrics body.
#[derive(Debug, Clone, Default)]
pub struct RenderedBody {
    pub text: Bytes,
    /// The same body, gzip-compressed (empty when not made yet or when compression failed; then plain
    /// is served).
    pub gzip: Bytes,
    /// Whether compression was attempted for this body (`gzip` is then the result, empty on failure).
    pub gzip_made: bool,
    /// Snapshot sequence number the body was rendered from (0 = nothing collected yet).
    pub seq: u64,
    /// Number of GPU-metric samples (without self-metrics).
    pub series: usize,
}

/// The families of a counter set in output order (by field id, then row), the first row of each metric
/// name, label rows left out — with their header text.
fn families(counters: &CounterSet) -> Vec<FamilyLayout> {
    let mut order: Vec<usize> = (0..counters.rows.len()).collect();
    order.sort_by_key(|&i| (counters.rows[i].field.id, i));
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for i in order {
        let row = &counters.rows[i];
        if row.kind == MetricKind::Label || seen.contains(&row.name.as_str()) {
            continue;
        }
        seen.push(&row.name);
        let mut header = String::with_capacity(row.name.len() * 2 + row.help.len() + 24);
        header.push_str("# HELP ");
        header.push_str(&row.name);
        header.push(' ');
        escape_help(&row.help, &mut header);
        header.push_str("\n# TYPE ");
        header.push_str(&row.name);
        header.push(' ');
        header.push_str(row.kind.as_str());
        header.push('\n');
        let mut open = String::with_capacity(row.name.len() + 1);
        open.push_str(&row.name);
        open.push('{');
        out.push(FamilyLayout {
            row: i,
            style: ValueStyle::of(row.field.value_type),
            xid: row.field.id == crate::fields::xid::XID_FIELD_ID,
            header,
            open,
        });
    }
    out
}

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
                "/metrics bodies made: rendered (encoding identity) or compressed (gzip), at most one of each per collection, at the first scrape that asks for it (this body included).",
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

/// Family headers and per-entity label strings of the last render.
#[derive(Default)]
struct RenderCache {
    /// The counter set the families were computed from.
    counters: Option<Arc<CounterSet>>,
    host: Option<Arc<HostInfo>>,
    families: Vec<FamilyLayout>,
    /// Rows of kind `label`, in row order.
    label_rows: Vec<usize>,
    entities: Vec<EntityLabels>,
}

/// One metric family: the row whose values it carries and its ready-made text.
struct FamilyLayout {
    row: usize,
    /// How its values are written: as dcgm-exporter writes the field's DCGM type.
    style: ValueStyle,
    /// `DCGM_FI_DEV_XID_ERRORS` (whatever its CSV name): each sample also carries `err_code` and
    /// `err_msg`, the code's meaning, sorted among the attributes as dcgm-exporter does.
    xid: bool,
    /// `# HELP …\n# TYPE …\n`.
    header: String,
    /// `name{`.
    open: String,
}

/// The label strings of one entity and what they were built from.
struct EntityLabels {
    entity: Arc<Entity>,
    attribution: Arc<Attribution>,
    /// Text of each label row (in `RenderCache::label_rows` order) when the strings were built.
    label_values: Vec<Option<Box<str>>>,
    /// One per attribute set written on :9400 (`Attribution::exposition_sets`; one when unattributed):
    /// `labels} `, ready to follow `name{`.
    sets: Vec<String>,
    /// The index of each of `sets` in `Attribution::sets` (where `PerSetValues` are aligned).
    set_index: Vec<usize>,
    /// The identity part of the sets, and each set's sorted label-class and attribute-class pairs:
    /// for families whose samples add attributes of their own (XID).
    base: String,
    tails: Vec<SetTail>,
    /// The XID family's label strings for the last code seen (`labels} `, one per set): rebuilt only when
    /// the code changes, which is rare.
    xid: Option<(i64, Vec<String>)>,
    /// `labels} ` of the entity's series without attribution, for fields written per attribute set
    /// (`snapshot::PerSetValues`): made when first needed.
    device: Option<String>,
}

/// What follows the identity labels in one series: the `label` fields with the label-class attributes
/// (pod labels), sorted by name; then the attribute-class ones (pod, namespace, hpc_job, ...), sorted.
#[derive(Debug, Clone, Default)]
struct SetTail {
    labels: Vec<(Box<str>, Box<str>)>,
    attributes: Vec<(Box<str>, Box<str>)>,
}

impl SetTail {
    fn write(&self, out: &mut String, first: &mut bool, extra: &[(&str, &str)]) {
        for (k, v) in &self.labels {
            push_label(out, first, k, v);
        }
        if extra.is_empty() {
            for (k, v) in &self.attributes {
                push_label(out, first, k, v);
            }
            return;
        }
        let mut all: Vec<(&str, &str)> = self
            .attributes
            .iter()
            .map(|(k, v)| (&**k, &**v))
            .filter(|(k, _)| !extra.iter().any(|(e, _)| e == k))
            .chain(extra.iter().copied())
            .collect();
        all.sort();
        for (k, v) in all {
            push_label(out, first, k, v);
        }
    }
}

impl EntityLabels {
    fn matches(&self, e: &EntityReading, label_rows: &[usize]) -> bool {
        (Arc::ptr_eq(&self.entity, &e.entity) || self.entity == e.entity)
            && (Arc::ptr_eq(&self.attribution, &e.attribution) || self.attribution == e.attribution)
            && label_rows.len() == self.label_values.len()
            && label_rows
                .iter()
                .zip(&self.label_values)
                .all(|(&i, old)| e.values.get(i).and_then(FieldValue::as_text) == old.as_deref())
    }
}

/// Spare body buffers. A body's bytes return here when the last `Bytes` referring to them is dropped
/// (the next render usually, or a slow scrape finishing), so steady-state renders do not allocate.
#[derive(Default)]
struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

/// Spare buffers kept per pool: the published body and one a slow scraper may still hold.
const POOL_SPARES: usize = 2;

impl BufferPool {
    fn take(&self, min_capacity: usize) -> Vec<u8> {
        let buf = self.free.lock_unpoisoned().pop();
        let mut buf = buf.unwrap_or_default();
        buf.clear();
        buf.reserve(min_capacity);
        buf
    }

    fn give(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut free = self.free.lock_unpoisoned();
        if free.len() < POOL_SPARES {
            free.push(buf);
        }
    }
}

/// A body buffer on loan to `Bytes`; goes back to its pool when dropped.
struct Pooled {
    buf: Vec<u8>,
    pool: Weak<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

fn pooled_bytes(buf: Vec<u8>, pool: &Arc<BufferPool>) -> Bytes {
    Bytes::from_owner(Pooled {
        buf,
        pool: Arc::downgrade(pool),
    })
}

/// Gzip (RFC 1952: the header `GzEncoder` writes at the fast level, raw deflate, CRC-32 and size) of a
/// body while it is being written: each chunk is compressed as soon as it is complete, while it is still
/// in cache, with a reused compressor.
struct GzipStream<'a> {
    deflate: &'a mut flate2::Compress,
    crc: flate2::Crc,
    out: Vec<u8>,
    /// Bytes of the text compressed so far.
    fed: usize,
    ok: bool,
}

/// Text is handed to the compressor in pieces of about this size.
const GZIP_CHUNK: usize = 64 * 1024;

impl<'a> GzipStream<'a> {
    fn new(deflate: &'a mut flate2::Compress, mut out: Vec<u8>) -> GzipStream<'a> {
        deflate.reset();
        out.clear();
        out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255]);
        GzipStream {
            deflate,
            crc: flate2::Crc::new(),
            out,
            fed: 0,
            ok: true,
        }
    }

    /// Compress what `text` (the whole body so far) has beyond what was fed already.
    fn feed(&mut self, text: &[u8]) {
        let Some(chunk) = text.get(self.fed..) else {
            self.ok = false;
            return;
        };
        self.crc.update(chunk);
        self.fed = text.len();
        self.ok = self.ok
            && deflate_into(
                self.deflate,
                chunk,
                &mut self.out,
                flate2::FlushCompress::None,
            );
    }

    /// Compress the rest and close the stream; `None` when deflate failed on the way.
    fn finish(mut self, text: &[u8]) -> Option<Vec<u8>> {
        self.feed(text);
        if !(self.ok
            && deflate_into(
                self.deflate,
                &[],
                &mut self.out,
                flate2::FlushCompress::Finish,
            ))
        {
            return None;
        }
        self.out.extend_from_slice(&self.crc.sum().to_le_bytes());
        self.out.extend_from_slice(&(self.fed as u32).to_le_bytes());
        Some(self.out)
    }
}

/// Run deflate over all of `input` (and, with `Finish`, to the end of the stream), growing `out` as
/// needed. False when deflate fails or stops making progress.
fn deflate_into(
    deflate: &mut flate2::Compress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    flush: flate2::FlushCompress,
) -> bool {
    let finish = flush == flate2::FlushCompress::Finish;
    loop {
        if out.capacity() - out.len() < 4096 {
            out.reserve(out.capacity().max(64 * 1024));
        }
        let (in_before, out_before) = (deflate.total_in(), out.len());
        let status = match deflate.compress_vec(input, out, flush) {
            Ok(s) => s,
            Err(_) => return false,
        };
        let consumed = (deflate.total_in() - in_before) as usize;
        input = input.get(consumed..).unwrap_or_default();
        if (finish && status == flate2::Status::StreamEnd) || (!finish && input.is_empty()) {
            return true;
        }
        if consumed == 0 && out.len() == out_before && out.capacity() - out.len() >= 4096 {
            return false;
        }
    }
}

/// How a family's values are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ValueStyle {
    /// Integers as integers, other numbers in shortest round-trip form (DCGM int64 fields, as Go's
    /// `%d` writes them; the derived families).
    Shortest,
    /// Six decimals, as dcgm-exporter writes DCGM double fields (Go's `%f`: `596.753000`).
    SixDecimals,
}

impl ValueStyle {
    fn of(t: crate::fields::ValueType) -> ValueStyle {
        match t {
            crate::fields::ValueType::Double => ValueStyle::SixDecimals,
            _ => ValueStyle::Shortest,
        }
    }
}

/// Formats one sample value without allocating.
#[derive(Default)]
struct ValueFormatter {
    int: itoa::Buffer,
    slow: String,
}

impl ValueFormatter {
    /// The value's text, or `None` for values that are never written (text, absent, NaN, ±Inf).
    fn format<'a>(&'a mut self, v: &FieldValue, style: ValueStyle) -> Option<&'a str> {
        match (v, style) {
            (FieldValue::Int(n), ValueStyle::Shortest) => Some(self.int.format(*n)),
            (FieldValue::Double(d), ValueStyle::Shortest) if d.is_finite() => {
                Some(match whole_f64(*d) {
                    Some(i) => self.int.format(i),
                    None => {
                        self.slow.clear();
                        write_f64_slow(&mut self.slow, *d);
                        &self.slow
                    }
                })
            }
            (FieldValue::Int(n), ValueStyle::SixDecimals) => {
                self.slow.clear();
                self.slow.push_str(self.int.format(*n));
                self.slow.push_str(".000000");
                Some(&self.slow)
            }
            (FieldValue::Double(d), ValueStyle::SixDecimals) if d.is_finite() => {
                use std::fmt::Write as _;
                self.slow.clear();
                // Correctly rounded to six decimals, ties to even: what Go's `%f` writes.
                let _ = write!(self.slow, "{d:.6}");
                Some(&self.slow)
            }
            _ => None,
        }
    }
}

/// The XID family's samples for one entity: each set's attributes plus `err_code` (the value) and
/// `err_msg` (its meaning in NVIDIA's catalogue), sorted by name as dcgm-exporter sorts them. The label
/// strings are cached per code.
fn write_xid_samples(
    out: &mut String,
    fam: &FamilyLayout,
    labels: &mut EntityLabels,
    v: &FieldValue,
    value: &str,
) {
    let code = match v {
        FieldValue::Int(i) => *i,
        FieldValue::Double(d) => *d as i64,
        _ => return,
    };
    if labels.xid.as_ref().is_none_or(|(c, _)| *c != code) {
        let code_text = code.to_string();
        let extra = [
            ("err_code", code_text.as_str()),
            ("err_msg", crate::fields::xid::meaning(code)),
        ];
        let sets = labels
            .tails
            .iter()
            .map(|tail| {
                let mut s = labels.base.clone();
                let mut first = s.is_empty();
                tail.write(&mut s, &mut first, &extra);
                s.push_str("} ");
                s
            })
            .collect();
        labels.xid = Some((code, sets));
    }
    if let Some((_, sets)) = &labels.xid {
        for set in sets {
            out.push_str(&fam.open);
            out.push_str(set);
            out.push_str(value);
            out.push('\n');
        }
    }
}

/// The attribute sets' series of a field written per set (`snapshot::PerSetValues`), each with its own value
/// (the device's series without attribution is written before). Returns the samples written.
fn write_per_set(
    out: &mut String,
    fam: &FamilyLayout,
    labels: &EntityLabels,
    per_set: &PerSetValues,
    fmt: &mut ValueFormatter,
) -> usize {
    let mut samples = 0;
    for (set, &i) in labels.sets.iter().zip(&labels.set_index) {
        let Some(value) = per_set
            .per_set
            .get(i)
            .and_then(|v| fmt.format(v, fam.style))
        else {
            continue;
        };
        out.push_str(&fam.open);
        out.push_str(set);
        out.push_str(value);
        out.push('\n');
        samples += 1;
    }
    samples
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
                if out.len() - g.fed >= GZIP_CHUNK {
                    g.feed(out.as_bytes());
                }
            }
        }
        // Per-process families (`--collect-processes`), after the DCGM ones.
        samples += super::process_series::render(snap, &self.style, out);
        samples += super::distribution_series::render(
            snap,
            |i| entities.get(i).map_or(&[], |l| &l.sets[..]),
            out,
        );
        drop(cache);
        samples + self.render_derived(snap, out, &mut fmt)
    }

    /// The derived families (per-pod cost counters) after the DCGM families: one `# HELP`/`# TYPE`
    /// each, every sample with its entity's identity labels, then its attributes placed and sorted as
    /// on DCGM series (label-class first, then attribute-class; on a name clash the attribute wins).
    fn render_derived(&self, snap: &Snapshot, out: &mut String, fmt: &mut ValueFormatter) -> usize {
        let mut identities: std::collections::HashMap<&Entity, (String, Vec<Box<str>>)> =
            std::collections::HashMap::new();
        let old = self.style.use_old_namespace;
        let hostname = snap.host.hostname.as_deref();
        let mut samples = 0;
        for fam in &snap.derived {
            let info = &*fam.info;
            let mut wrote_header = false;
            for s in &fam.samples {
                let Some(value) = fmt.format(&FieldValue::Double(s.value), ValueStyle::Shortest)
                else {
                    continue;
                };
                if !wrote_header {
                    out.push_str("# HELP ");
                    out.push_str(info.name);
                    out.push(' ');
                    escape_help(&info.help, out);
                    out.push_str("\n# TYPE ");
                    out.push_str(info.name);
                    out.push(' ');
                    out.push_str(info.kind.as_str());
                    out.push('\n');
                    wrote_header = true;
                }
                // The entity's identity labels and their names (made once per entity and render):
                // never a second label of an identity label's name (a pod label `gpu`).
                let (base, identity) = identities.entry(&*s.entity).or_insert_with(|| {
                    let base = identity_labels(&self.style, &s.entity, hostname);
                    let names = label_names(&base).into_iter().map(Box::from).collect();
                    (base, names)
                });
                let base = base.as_str();
                let identity: &[Box<str>] = identity;
                let mut attributes: Vec<(&str, &str)> = s
                    .attributes
                    .iter()
                    .filter(|a| a.key.placement == Placement::Attributes)
                    .map(|a| (a.key.prometheus_name(old), &*a.value))
                    .filter(|(k, _)| !identity.iter().any(|n| &**n == *k))
                    .collect();
                attributes.sort();
                let mut labels: Vec<(&str, &str)> = s
                    .attributes
                    .iter()
                    .filter(|a| a.key.placement == Placement::Labels)
                    .map(|a| (a.key.prometheus_name(old), &*a.value))
                    .chain(s.labels.iter().map(|l| (&*l.prometheus, &*l.value)))
                    .filter(|(k, _)| !attributes.iter().any(|(a, _)| a == k))
                    .filter(|(k, _)| !identity.iter().any(|n| &**n == *k))
                    .collect();
                labels.sort();
                labels.dedup_by(|a, b| a.0 == b.0);
                out.push_str(info.name);
                out.push('{');
                out.push_str(base);
                let mut first = base.is_empty();
                for (k, v) in labels.iter().chain(&attributes) {
                    push_label(out, &mut first, k, v);
                }
                out.push_str("} ");
                out.push_str(value);
                out.push('\n');
                samples += 1;
            }
        }
        samples
    }

    /// Bring the cache in line with `snap`: rebuild what its counters, host and entities changed.
    fn refresh(&self, cache: &mut RenderCache, snap: &Snapshot) {
        let same_counters = cache
            .counters
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, &snap.counters) || **c == *snap.counters);
        if !same_counters {
            cache.families = families(&snap.counters);
            cache.label_rows = (0..snap.counters.rows.len())
                .filter(|&i| snap.counters.rows[i].kind == MetricKind::Label)
                .collect();
            cache.counters = Some(snap.counters.clone());
            cache.entities.clear();
        }
        let same_host = cache
            .host
            .as_ref()
            .is_some_and(|h| Arc::ptr_eq(h, &snap.host) || **h == *snap.host);
        if !same_host {
            cache.host = Some(snap.host.clone());
            cache.entities.clear();
        }
        cache.entities.truncate(snap.entities.len());
        for (i, e) in snap.entities.iter().enumerate() {
            if cache
                .entities
                .get(i)
                .is_some_and(|c| c.matches(e, &cache.label_rows))
            {
                continue;
            }
            let (base, tails) = self.labels_of(e, &snap.host, snap);
            let sets = tails
                .iter()
                .map(|tail| {
                    let mut s = base.clone();
                    let mut first = s.is_empty();
                    tail.write(&mut s, &mut first, &[]);
                    s.push_str("} ");
                    s
                })
                .collect();
            let built = EntityLabels {
                entity: e.entity.clone(),
                attribution: e.attribution.clone(),
                set_index: e.attribution.exposition_sets().map(|(i, _)| i).collect(),
                label_values: cache
                    .label_rows
                    .iter()
                    .map(|&r| e.values.get(r).and_then(FieldValue::as_text).map(Box::from))
                    .collect(),
                sets,
                base,
                tails,
                xid: None,
                device: None,
            };
            if i < cache.entities.len() {
                cache.entities[i] = built;
            } else {
                cache.entities.push(built);
            }
        }
    }

    /// The labels of one entity: its identity and host label, and per attribute set (one when
    /// unattributed) what follows them.
    fn labels_of(
        &self,
        e: &EntityReading,
        host: &HostInfo,
        snap: &Snapshot,
    ) -> (String, Vec<SetTail>) {
        let base = identity_labels(&self.style, &e.entity, host.hostname.as_deref());
        self.tails_of(e, base, snap)
    }

    /// `labels} ` of an entity's series without attribution: its identity labels (`base`) and
    /// `label`-type fields.
    fn device_labels(&self, e: &EntityReading, base: &str, snap: &Snapshot) -> String {
        let bare = EntityReading {
            entity: e.entity.clone(),
            values: e.values.clone(),
            attribution: Arc::default(),
        };
        let (mut s, tails) = self.tails_of(&bare, base.to_string(), snap);
        let mut first = s.is_empty();
        if let Some(tail) = tails.first() {
            tail.write(&mut s, &mut first, &[]);
        }
        s.push_str("} ");
        s
    }

    /// Per attribute set of an entity written on :9400, what follows its identity labels.
    fn tails_of(&self, e: &EntityReading, base: String, snap: &Snapshot) -> (String, Vec<SetTail>) {
        // label-type fields (first row per name)
        let rows = &snap.counters.rows;
        let mut label_fields: Vec<(&str, &str)> = e
            .values
            .iter()
            .filter_map(|(row, v)| Some((rows.get(row)?, v)))
            .filter(|(c, _)| c.kind == MetricKind::Label)
            .filter_map(|(c, v)| v.as_text().map(|t| (c.name.as_str(), t)))
            .collect();
        label_fields.sort();
        label_fields.dedup_by(|a, b| a.0 == b.0);
        let old = self.style.use_old_namespace;
        // An attribute or label of an identity label's name (a pod label `gpu`, `device`, `Hostname`)
        // is left out: a second label of the same name makes Prometheus reject the whole scrape.
        let identity = label_names(&base);
        let tails = e
            .attribution
            .exposition_sets()
            .map(|(_, set)| {
                let mut attributes: Vec<(Box<str>, Box<str>)> = set
                    .iter()
                    .filter(|a| a.key.placement == Placement::Attributes)
                    .map(|a| (a.key.prometheus_name(old).into(), (*a.value).into()))
                    .filter(|(k, _): &(Box<str>, Box<str>)| !identity.contains(&&**k))
                    .collect();
                attributes.sort();
                // A label-class name equal to an attribute's: the attribute wins, as in dcgm-exporter.
                let taken =
                    |k: &str| attributes.iter().any(|(a, _)| &**a == k) || identity.contains(&k);
                let mut labels: Vec<(Box<str>, Box<str>)> = label_fields
                    .iter()
                    .map(|(k, v)| (Box::from(*k), Box::from(*v)))
                    .chain(
                        set.iter()
                            .filter(|a| a.key.placement == Placement::Labels)
                            .map(|a| (a.key.prometheus_name(old).into(), (*a.value).into())),
                    )
                    .filter(|(k, _)| !taken(k))
                    .collect();
                labels.sort();
                labels.dedup_by(|a, b| a.0 == b.0);
                SetTail { labels, attributes }
            })
            .collect();
        (base, tails)
    }

    /// Render a full body (metrics + self-metrics) of `snap`, compressed too when `gzip`.
    /// `previous_len`: the size of the previous body, to size the buffer.
    pub fn render_body(&self, snap: &Snapshot, gzip: bool, previous_len: usize) -> RenderedBody {
        let started = Instant::now();
        if let Some(m) = &self.metrics {
            m.made_identity.inc();
            if gzip {
                m.made_gzip.inc();
            }
        }
        // A pooled buffer is empty, so this conversion checks nothing and keeps its capacity.
        let mut text =
            String::from_utf8(self.text_pool.take(previous_len + 4096)).unwrap_or_default();
        let (series, gzip) = if gzip {
            let mut deflate = self.deflate.lock_unpoisoned();
            let deflate = deflate
                .get_or_insert_with(|| flate2::Compress::new(flate2::Compression::fast(), false));
            let mut stream = GzipStream::new(deflate, self.gzip_pool.take(previous_len / 16));
            let series = self.render_into(snap, &mut text, Some(&mut stream));
            self.finish_text(&mut text, series);
            let gzip = stream.finish(text.as_bytes());
            (series, Some(gzip))
        } else {
            let series = self.render_into(snap, &mut text, None);
            self.finish_text(&mut text, series);
            (series, None)
        };
        let gzip_made = gzip.is_some();
        let body = RenderedBody {
            text: pooled_bytes(text.into_bytes(), &self.text_pool),
            gzip: gzip
                .flatten()
                .map_or_else(Bytes::new, |buf| pooled_bytes(buf, &self.gzip_pool)),
            gzip_made,
            seq: snap.seq,
            series,
        };
        if let Some(m) = &self.metrics {
            m.render_seconds.set(started.elapsed().as_secs_f64());
        }
        body
    }

    /// `body` with its gzip copy made now (from its text).
    pub fn add_gzip(&self, body: &RenderedBody) -> RenderedBody {
        if let Some(m) = &self.metrics {
            m.made_gzip.inc();
        }
        let mut deflate = self.deflate.lock_unpoisoned();
        let deflate = deflate
            .get_or_insert_with(|| flate2::Compress::new(flate2::Compression::fast(), false));
        let stream = GzipStream::new(deflate, self.gzip_pool.take(body.text.len() / 16));
        let gzip = stream.finish(&body.text);
        RenderedBody {
            text: body.text.clone(),
            gzip: gzip.map_or_else(Bytes::new, |buf| pooled_bytes(buf, &self.gzip_pool)),
            gzip_made: true,
            seq: body.seq,
            series: body.series,
        }
    }

    /// The self-metrics after the GPU metrics, and the gauges describing the body.
    fn finish_text(&self, text: &mut String, series: usize) {
        if let Some(m) = &self.metrics {
            m.series.set(series as f64);
        }
        if let Some(m) = &self.self_metrics {
            m.render(text);
        }
        if let Some(m) = &self.metrics {
            m.body_bytes.set(text.len() as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_body_decodes_to_the_text() {
        use std::io::Read as _;
        let mut deflate = flate2::Compress::new(flate2::Compression::fast(), false);
        let mut text = String::new();
        for i in 0..50_000 {
            text.push_str(&format!(
                "DCGM_FI_DEV_SM_CLOCK{{gpu=\"{}\"}} {}\n",
                i % 8,
                i * 7
            ));
        }
        for input in [&b""[..], b"x", text.as_bytes()] {
            // fed in uneven pieces, as the renderer does
            let mut g = GzipStream::new(&mut deflate, Vec::new());
            let mut end = 0;
            while end < input.len() {
                end = (end + 70_001).min(input.len());
                g.feed(&input[..end]);
            }
            let out = g.finish(input).unwrap();
            let mut back = Vec::new();
            flate2::read::GzDecoder::new(&out[..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, input);
        }
    }

    /// DCGM double fields are written as dcgm-exporter writes them (Go's `%f`), ties to even
    /// included; the expected texts are Go 1.26's `fmt.Sprintf("%f", v)` of each value.
    #[test]
    fn double_fields_have_six_decimals_like_go() {
        let mut f = ValueFormatter::default();
        for (v, go) in [
            (0.0078125, "0.007812"),
            (0.0234375, "0.023438"),
            (0.5, "0.500000"),
            (2.5e-7, "0.000000"),
            (0.0000005, "0.000000"),
            (123.4567895, "123.456789"),
            (596.753, "596.753000"),
            (1e21, "1000000000000000000000.000000"),
            (5e-324, "0.000000"),
            (0.1234565, "0.123456"),
            (9.9999995, "9.999999"),
            (-371.113, "-371.113000"),
        ] {
            assert_eq!(
                f.format(&FieldValue::Double(v), ValueStyle::SixDecimals),
                Some(go),
                "{v}"
            );
        }
        assert_eq!(
            f.format(&FieldValue::Int(250), ValueStyle::SixDecimals),
            Some("250.000000")
        );
        assert_eq!(
            f.format(&FieldValue::Double(f64::NAN), ValueStyle::SixDecimals),
            None
        );
        assert_eq!(
            f.format(&FieldValue::Int(7), ValueStyle::Shortest),
            Some("7")
        );
    }

    /// The fast path (itoa for whole numbers) writes exactly what the reference `{}` / `{:e}` formatting writes.
    #[test]
    fn fast_float_paths_match_the_reference() {
        let check = |v: f64| {
            let (mut fast, mut slow) = (String::new(), String::new());
            crate::telemetry::exposition::write_f64(&mut fast, v);
            write_f64_slow(&mut slow, v);
            assert_eq!(fast, slow, "bits {:#x}", v.to_bits());
            let mut f = ValueFormatter::default();
            assert_eq!(
                f.format(&FieldValue::Double(v), ValueStyle::Shortest)
                    .unwrap_or("NaN/Inf"),
                if v.is_finite() {
                    slow.as_str()
                } else {
                    "NaN/Inf"
                }
            );
        };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let r = next();
            // any bit pattern
            check(f64::from_bits(r));
            // values around the switch points and the sim's rounded decimals
            let m = (r >> 11) as f64 / (1u64 << 53) as f64;
            let e = (r % 48) as i32 - 24;
            check(m * 10f64.powi(e));
            check(-(m * 10f64.powi(e)));
            check(((m * 1e6).round()) / 1e6);
            check(((m * 1e9).round()) / 1e3);
            check((r % 100_000_000) as f64 / 1000.0);
        }
        for v in [
            1e-5,
            9.999_999_999e-6,
            1e-6,
            0.1,
            0.3,
            2f64.powi(52) - 0.5,
            2f64.powi(53),
            2f64.powi(53) - 1.0,
            1e16,
            1e21,
            1e22,
            123.456,
            f64::MIN_POSITIVE,
            f64::MAX,
            5e-324,
        ] {
            check(v);
            check(-v);
        }
    }
}
