//! The NVML source (`--source nvml`, or `auto` without DCGM): reads GPUs through the driver's own
//! library, `libnvidia-ml.so.1`, loaded at run time — for hosts with a driver but no DCGM
//! (workstations, cloud VMs, GeForce cards, CI runners) — and the per-process collector that also
//! runs next to the DCGM source.
//!
//! The counters CSV, metric names, units and labels are DCGM's: every row whose DCGM field NVML can
//! give is read through the NVML call [`fields`] maps it to; the others are absent with reason
//! `unsupported` (counted in `dcgm_otel_absent_values_total`, listed once at start). Discovery
//! ([`discover`]) builds the shared inventory, so entity order and `-d` rules are the DCGM source's.
//! XIDs come from an NVML event set (`nvmlEventTypeXidCriticalError`), drained without waiting at
//! every collection: `DCGM_FI_DEV_XID_ERRORS` is the last XID seen (0 before any), as with DCGM, and
//! every event is an XID incident of the reading (the `DCGM_EXP_XID_*` families, OTLP log records).
//! Clock events are edges of the throttle-reason bitmask (`nvmlDeviceGetCurrentClocksThrottleReasons`,
//! the same bits as DCGM's field 112) sampled once per collection. NVML has no health watches and no
//! P2P status query of DCGM's kind: `DCGM_EXP_GPU_HEALTH_STATUS` and `DCGM_EXP_P2P_STATUS` rows are
//! dropped from the counter set with a warning (absent, never a made-up "healthy").
//!
//! A GPU that falls off the bus (`NVML_ERROR_GPU_IS_LOST`) has its series withdrawn at once (never a
//! stale value), logged once; the GPUs are rediscovered on the next collection, and whenever NVML's
//! device count changes. Modules: `ffi` (C ABI, the module's only `unsafe`), [`client`] (init,
//! errors), [`discover`], [`fields`] (the DCGM → NVML table), [`processes`] (per-process readings),
//! [`rates`] (NvLink throughput in MB/s from NVML's cumulative counters, as DCGM gives it).

pub mod client;
pub mod discover;
pub mod ffi;
pub mod fields;
pub mod processes;
pub mod rates;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use self::client::{Nvml, NvmlError, OpenError};
use self::discover::{Discovered, GpuHandles};
use self::ffi::{nvmlDevice_t, nvmlEventSet_t, nvmlFieldValue_t, nvmlReturn_t, NvmlNumber};
use self::fields::Read;
use super::{Source, SourceError};
use crate::config::devices::{DeviceError, DeviceSelection, Selected};
use crate::counters::exporter::{ExpFamily, IncidentReads};
use crate::counters::CounterSet;
use crate::snapshot::inventory;
use crate::snapshot::inventory::{Selection, Wanted};
use crate::snapshot::{
    Absent, Attribution, ClockSample, Entity, EntityKind, EntityReading, FieldValue, Incident,
    IncidentKind, Reading,
};
use crate::source::incidents::{whole_gpus, Tracker};

/// What the NVML source needs from the configuration.
#[derive(Debug, Clone)]
pub struct NvmlOptions {
    /// `--nvml-library`: a file instead of the soname search.
    pub library: Option<PathBuf>,
    pub devices: DeviceSelection,
    /// Read XIDs and clock events for a consumer of incident occurrences (OTLP log records) even
    /// when no `DCGM_EXP_*` row asks for them.
    pub incident_events: bool,
}

/// Why the NVML source could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// libnvidia-ml missing or not initialisable (exit code 1).
    #[error("{0}; NVML comes with the NVIDIA driver (libnvidia-ml.so.1): install the driver, or point --nvml-library / DCGM_OTEL_LIBNVML at the library, or use --simulate to run on a simulated fleet without GPUs")]
    Open(#[from] OpenError),
    /// Counting the GPUs failed (exit code 1).
    #[error("NVML: {0}")]
    Nvml(#[from] NvmlError),
    /// `-d` names GPUs or instances that are not there (exit code 2).
    #[error(transparent)]
    Devices(#[from] DeviceError),
}

impl StartError {
    pub fn is_bad_input(&self) -> bool {
        matches!(self, StartError::Devices(_))
    }
}

/// How often a GPU NVML counts but cannot read is looked for again.
const UNUSABLE_RETRY: Duration = Duration::from_secs(30);

/// One XID event read from the event set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XidEvent {
    pub gpu: u32,
    /// The GPU instance it is attributed to, on MIG.
    pub gi_id: Option<u32>,
    pub code: i64,
}

/// How each counter row is read.
#[derive(Debug, Clone, Copy)]
struct RowPlan {
    field: u16,
    read: Option<Read>,
    on_gpus: bool,
    on_links: bool,
    text: bool,
}

/// The NVML [`Source`].
pub struct NvmlSource {
    nvml: Arc<Nvml>,
    devices: DeviceSelection,
    rows: Vec<RowPlan>,
    want_links: bool,
    discovered: Option<Discovered>,
    entities: Vec<Arc<Entity>>,
    no_attribution: Arc<Attribution>,
    events: Option<nvmlEventSet_t>,
    /// Last XID per (GPU index, GPU instance id or u32::MAX for the GPU).
    last_xid: HashMap<(u32, u32), i64>,
    recent_xids: Vec<XidEvent>,
    /// What the incident consumers need (rows and `incident_events`), and what `incident_events` adds.
    incident_reads: IncidentReads,
    event_reads: IncidentReads,
    /// Clock-event edges across collections.
    tracker: Tracker,
    /// GPUs logged as lost (by UUID), until they come back.
    lost_logged: HashSet<String>,
    /// Rows that returned NOT_SUPPORTED, logged once per (field, entity kind, entity id).
    logged_not_supported: HashSet<(u16, EntityKind, u32)>,
    field_buf: Vec<nvmlFieldValue_t>,
    /// NVML calls made by the last poll.
    calls: usize,
    /// When the GPUs were last discovered.
    discovered_at: Instant,
    /// NvLink data counters' last readings, for their rates.
    rates: rates::Rates,
}

impl NvmlSource {
    /// Load and initialise NVML, discover, apply `-d` (absent ids are an error, as with DCGM), list
    /// the counter rows NVML cannot give, and register for XID events.
    /// `DCGM_EXP_*` rows NVML cannot feed leave `counters` here, before any exporter is built.
    pub fn open(opts: NvmlOptions, counters: &mut CounterSet) -> Result<NvmlSource, StartError> {
        let nvml = Nvml::open(opts.library.as_deref())?;
        let mut source = Self::with_library(nvml, opts.devices, counters)?;
        if opts.incident_events {
            source.event_reads = IncidentReads {
                xids: true,
                clock_events: true,
                ..IncidentReads::default()
            };
            source.incident_reads = source.incident_reads.union(source.event_reads);
            source.register_xid_events();
        }
        Ok(source)
    }

    /// [`NvmlSource::open`] over an already opened library (shared with the process collector).
    pub fn with_library(
        nvml: Arc<Nvml>,
        devices: DeviceSelection,
        counters: &mut CounterSet,
    ) -> Result<NvmlSource, StartError> {
        drop_dcgm_only_families(counters, "");
        let rows = plan_rows(counters);
        let want_links = wants_links(&rows);
        let found = discover::discover(&nvml, want_links)?;
        let selected = devices.select(&found.inventory.slots())?;
        let unsupported: Vec<&str> = counters
            .rows
            .iter()
            .zip(&rows)
            .filter(|(_, p)| p.read.is_none())
            .map(|(c, _)| c.name.as_str())
            .collect();
        tracing::info!(
            library = nvml.path(),
            driver = found
                .inventory
                .driver_version
                .as_deref()
                .unwrap_or("unknown"),
            gpus = found.gpus.len(),
            monitored_gpus = selected.gpus.len(),
            monitored_instances = selected.instances.len(),
            "NVML source: reading GPUs through the driver's NVML library"
        );
        for g in &found.gpus {
            tracing::info!(
                gpu = g.identity.index,
                uuid = %g.identity.uuid,
                model = %g.identity.model,
                pci_bus_id = %g.identity.pci_bus_id,
                mig_instances = g.instances.len(),
                nvlinks_up = g.links.len(),
                "found GPU"
            );
        }
        for (index, e) in &found.unusable {
            tracing::warn!(gpu = index, error = %e, "NVML counts this GPU but cannot read it; it is left out");
        }
        if !unsupported.is_empty() {
            tracing::warn!(
                fields = %unsupported.join(","),
                "these counters have no NVML equivalent (DCGM-only); they stay absent and are counted in dcgm_otel_absent_values_total{{reason=\"unsupported\"}}"
            );
        }
        let mut source = NvmlSource {
            nvml,
            devices,
            rows,
            want_links,
            discovered: None,
            entities: Vec::new(),
            no_attribution: Arc::new(Attribution::default()),
            events: None,
            last_xid: HashMap::new(),
            recent_xids: Vec::new(),
            incident_reads: nvml_incident_reads(counters),
            event_reads: IncidentReads::default(),
            tracker: Tracker::default(),
            lost_logged: HashSet::new(),
            logged_not_supported: HashSet::new(),
            field_buf: Vec::new(),
            calls: 0,
            discovered_at: Instant::now(),
            rates: rates::Rates::default(),
        };
        source.adopt(found, &selected);
        Ok(source)
    }

    /// The shared library handle (for the process collector).
    pub fn library(&self) -> Arc<Nvml> {
        self.nvml.clone()
    }

    /// NVML calls made by the last poll.
    pub fn calls_last_poll(&self) -> usize {
        self.calls
    }

    /// The XID events read during the last poll.
    pub fn recent_xids(&self) -> &[XidEvent] {
        &self.recent_xids
    }

    /// Whether anything reads XID events: the `DCGM_FI_DEV_XID_ERRORS` row or an incident consumer.
    fn wants_xid_events(&self) -> bool {
        self.incident_reads.xids || self.rows.iter().any(|r| r.read == Some(Read::Xid))
    }

    /// Take a discovery: entities in output order and a fresh XID event set on its GPUs.
    fn adopt(&mut self, found: Discovered, selected: &Selected) {
        // NVML sees GPUs only: no NvSwitch or CPU selection applies.
        let selection = Selection {
            gpus: selected.clone(),
            wanted: Wanted {
                nvlinks: self.want_links,
                ..Wanted::default()
            },
            ..Selection::default()
        };
        self.entities = found.inventory.entities(&selection);
        self.discovered = Some(found);
        self.register_xid_events();
    }

    /// A fresh XID event set on the discovered GPUs (none when nothing reads XIDs).
    fn register_xid_events(&mut self) {
        if let Some(set) = self.events.take() {
            self.nvml.sym().event_set_free(set);
        }
        let Some(found) = self.discovered.as_ref() else {
            return;
        };
        if self.wants_xid_events() {
            match self.nvml.sym().event_set_create() {
                Ok(set) => {
                    for g in &found.gpus {
                        if let Err(rc) = self.nvml.sym().register_events(
                            g.handle,
                            ffi::nvmlEventTypeXidCriticalError,
                            set,
                        ) {
                            tracing::info!(gpu = g.identity.index, error = %self.nvml.error("nvmlDeviceRegisterEvents", rc), "no XID events from this GPU; DCGM_FI_DEV_XID_ERRORS stays absent there");
                        }
                    }
                    self.events = Some(set);
                }
                Err(rc) => {
                    tracing::warn!(error = %self.nvml.error("nvmlEventSetCreate", rc), "no XID events; DCGM_FI_DEV_XID_ERRORS stays absent")
                }
            }
        }
    }

    /// The incidents of this collection: every XID event drained, and the clock-event edges of each
    /// monitored GPU (one throttle-reason read per GPU, also handed over as the collection's clock
    /// sample), all at `now` (NVML events carry no time).
    fn incidents(
        &mut self,
        found: &Discovered,
        now: SystemTime,
    ) -> (Vec<Incident>, Vec<ClockSample>) {
        let gpus = whole_gpus(&self.entities);
        let none = self.no_attribution.clone();
        let incident = |entity: Arc<Entity>, kind: IncidentKind| Incident {
            entity,
            attribution: none.clone(),
            at: now,
            kind,
        };
        let mut out = Vec::new();
        let mut samples = Vec::new();
        if self.incident_reads.xids {
            for x in &self.recent_xids {
                let (Ok(code), Some(whole)) = (
                    u32::try_from(x.code),
                    gpus.iter().find(|g| g.entity_id == x.gpu),
                ) else {
                    continue;
                };
                if code == 0 {
                    continue;
                }
                // The MIG instance it names (monitored or not), else the GPU.
                let hit = x
                    .gi_id
                    .and_then(|gi| {
                        let g = found.gpus.iter().find(|g| g.identity.index == x.gpu)?;
                        let (mig, _) = g.instances.iter().find(|(m, _)| m.gi_id == gi)?;
                        Some(
                            self.entities
                                .iter()
                                .find(|e| {
                                    e.mig.as_ref().is_some_and(|m| m.entity_id == mig.entity_id)
                                })
                                .cloned()
                                .unwrap_or_else(|| {
                                    Arc::new(Entity::instance(g.identity.clone(), mig.clone()))
                                }),
                        )
                    })
                    .unwrap_or_else(|| whole.clone());
                out.push(incident(hit, IncidentKind::Xid { code }));
            }
        }
        if self.incident_reads.clock_events {
            for whole in &gpus {
                let Some(g) = found
                    .gpus
                    .iter()
                    .find(|g| g.identity.index == whole.entity_id)
                else {
                    continue;
                };
                self.calls += 1;
                // A GPU that does not answer keeps its last mask: no edge is made up.
                if let Ok(mask) = self.nvml.sym().clocks_throttle_reasons(g.handle) {
                    for kind in self.tracker.clock_sample(whole.entity_id, mask, now) {
                        out.push(incident(whole.clone(), kind));
                    }
                    samples.push(ClockSample {
                        gpu: whole.clone(),
                        at: now,
                        mask,
                    });
                }
            }
        }
        (out, samples)
    }

    /// Rediscover (at run time: ids that vanished are skipped).
    fn rediscover(&mut self) -> Result<(), SourceError> {
        let found = discover::discover(&self.nvml, self.want_links)
            .map_err(|e| SourceError::Unavailable(e.to_string()))?;
        let (selected, missing) =
            inventory::select_present(&self.devices, &found.inventory.slots());
        if !missing.is_empty() {
            tracing::warn!(missing = %missing.join(", "), "devices selected with -d are no longer present");
        }
        let before = self
            .discovered
            .as_ref()
            .map(|d| (d.gpus.len(), d.unusable.len()));
        if before != Some((found.gpus.len(), found.unusable.len())) {
            tracing::info!(
                gpus = found.gpus.len(),
                unusable = found.unusable.len(),
                "NVML GPUs rediscovered"
            );
        }
        self.discovered_at = Instant::now();
        // A GPU that came back may be another one under the same index: its counters start afresh.
        self.rates.clear();
        self.adopt(found, &selected);
        Ok(())
    }

    /// Drain the XID events that arrived since the last poll.
    fn drain_events(&mut self) {
        self.recent_xids.clear();
        let (Some(set), Some(found)) = (self.events, self.discovered.as_ref()) else {
            return;
        };
        // Bounded: an event storm is read over several collections.
        for _ in 0..256 {
            self.calls += 1;
            match self.nvml.sym().event_set_wait(set, 0) {
                Ok(ev) => {
                    if ev.eventType & ffi::nvmlEventTypeXidCriticalError == 0 {
                        continue;
                    }
                    let Some(g) = found.gpus.iter().find(|g| g.handle == ev.device) else {
                        continue;
                    };
                    let code = i64::try_from(ev.eventData).unwrap_or(i64::MAX);
                    let gi =
                        (ev.gpuInstanceId != ffi::NVML_NO_INSTANCE).then_some(ev.gpuInstanceId);
                    self.last_xid.insert((g.identity.index, u32::MAX), code);
                    if let Some(gi) = gi {
                        self.last_xid.insert((g.identity.index, gi), code);
                    }
                    self.recent_xids.push(XidEvent {
                        gpu: g.identity.index,
                        gi_id: gi,
                        code,
                    });
                }
                Err(_) => break,
            }
        }
    }
}

/// An NVML code as an absent value.
fn absent_of(rc: nvmlReturn_t) -> Absent {
    match rc {
        ffi::NVML_ERROR_NOT_SUPPORTED | ffi::NVML_ERROR_FUNCTION_NOT_FOUND => Absent::NotSupported,
        ffi::NVML_ERROR_NO_PERMISSION => Absent::NotPermissioned,
        ffi::NVML_ERROR_NOT_FOUND => Absent::NotFound,
        ffi::NVML_ERROR_NO_DATA => Absent::Blank,
        _ => Absent::Error,
    }
}

/// The reads of one device during one poll, each NVML call made at most once.
struct DeviceReads<'a> {
    nvml: &'a Nvml,
    handle: nvmlDevice_t,
    util: Option<Result<ffi::nvmlUtilization_t, nvmlReturn_t>>,
    memory: Option<Result<ffi::nvmlMemory_v2_t, nvmlReturn_t>>,
    /// Values already read from this device in this poll (the GPU's are shared by its instances).
    done: HashMap<Read, FieldValue>,
    calls: usize,
    lost: bool,
}

impl<'a> DeviceReads<'a> {
    fn new(nvml: &'a Nvml, handle: nvmlDevice_t) -> Self {
        DeviceReads {
            nvml,
            handle,
            util: None,
            memory: None,
            done: HashMap::new(),
            calls: 0,
            lost: false,
        }
    }

    fn note<T>(&mut self, r: Result<T, nvmlReturn_t>) -> Result<T, nvmlReturn_t> {
        self.calls += 1;
        if r.as_ref().err() == Some(&ffi::NVML_ERROR_GPU_IS_LOST) {
            self.lost = true;
        }
        r
    }

    /// One NVML call on this device, noted.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&ffi::Symbols, nvmlDevice_t) -> Result<T, nvmlReturn_t>,
    ) -> Result<T, nvmlReturn_t> {
        let r = f(self.nvml.sym(), self.handle);
        self.note(r)
    }

    fn utilization(&mut self) -> Result<ffi::nvmlUtilization_t, nvmlReturn_t> {
        if self.util.is_none() {
            let r = self.nvml.sym().utilization_rates(self.handle);
            self.util = Some(self.note(r));
        }
        self.util.unwrap_or(Err(ffi::NVML_ERROR_UNKNOWN))
    }

    fn memory(&mut self) -> Result<ffi::nvmlMemory_v2_t, nvmlReturn_t> {
        if self.memory.is_none() {
            let r = self.nvml.sym().memory_info(self.handle);
            self.memory = Some(self.note(r));
        }
        self.memory.unwrap_or(Err(ffi::NVML_ERROR_UNKNOWN))
    }
}

fn int(r: Result<u32, nvmlReturn_t>) -> FieldValue {
    match r {
        Ok(v) => FieldValue::Int(i64::from(v)),
        Err(rc) => FieldValue::Absent(absent_of(rc)),
    }
}

fn text(r: Result<String, nvmlReturn_t>) -> FieldValue {
    match r {
        Ok(s) if !s.is_empty() => FieldValue::Text(s.into()),
        Ok(_) => FieldValue::Absent(Absent::Blank),
        Err(rc) => FieldValue::Absent(absent_of(rc)),
    }
}

/// NVML fields of the whole GPU that DCGM does not report on a GPU instance.
fn gpu_only(nvml_field: u32) -> bool {
    matches!(
        nvml_field,
        ffi::NVML_FI_DEV_REMAPPED_COR
            | ffi::NVML_FI_DEV_REMAPPED_UNC
            | ffi::NVML_FI_DEV_REMAPPED_PENDING
            | ffi::NVML_FI_DEV_REMAPPED_FAILURE
            | ffi::NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL
            | ffi::NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL
            | ffi::NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL
            | ffi::NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL
    )
}

/// Bytes → MiB.
fn mib(r: Result<u64, nvmlReturn_t>) -> FieldValue {
    match r {
        Ok(bytes) => FieldValue::Int(i64::try_from(bytes >> 20).unwrap_or(i64::MAX)),
        Err(rc) => FieldValue::Absent(absent_of(rc)),
    }
}

/// mW → W.
fn watts(r: Result<u32, nvmlReturn_t>) -> FieldValue {
    match r {
        Ok(mw) => FieldValue::Double(f64::from(mw) / 1000.0),
        Err(rc) => FieldValue::Absent(absent_of(rc)),
    }
}

fn int64(r: Result<u64, nvmlReturn_t>) -> FieldValue {
    match r {
        Ok(v) => FieldValue::Int(i64::try_from(v).unwrap_or(i64::MAX)),
        Err(rc) => FieldValue::Absent(absent_of(rc)),
    }
}

/// A device's name; on a MIG instance with a profile, the profile part of it (`1g.10gb`).
fn name(r: Result<String, nvmlReturn_t>, e: &Entity) -> FieldValue {
    match (r, &e.mig) {
        (Ok(n), Some(m)) if !m.profile.is_empty() && !n.is_empty() => {
            FieldValue::Text(discover::profile_of(&n).into())
        }
        (r, _) => text(r),
    }
}

/// The NVML scope of an NvLink entity: its link number from 0.
fn link_scope(e: &Entity) -> u32 {
    e.link.unwrap_or(1).saturating_sub(1)
}

/// The sum of per-link values; absent when any is.
fn sum(a: FieldValue, b: FieldValue) -> FieldValue {
    match (a, b) {
        (FieldValue::Int(x), FieldValue::Int(y)) => FieldValue::Int(x.saturating_add(y)),
        (FieldValue::Absent(a), _) | (_, FieldValue::Absent(a)) => FieldValue::Absent(a),
        _ => FieldValue::Absent(Absent::Error),
    }
}

/// NVML's cumulative NvLink data counters (KiB), transmitted and received.
const DATA_COUNTERS: [u32; 2] = [
    ffi::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    ffi::NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
];

/// The data counters of `links` summed (KiB): transmitted (`tx`), received (`rx`) or both; not
/// supported without links.
fn data_kib(
    batch: &HashMap<(u32, u32), Result<NvmlNumber, nvmlReturn_t>>,
    links: &[u32],
    tx: bool,
    rx: bool,
) -> FieldValue {
    let ids = DATA_COUNTERS
        .iter()
        .zip([tx, rx])
        .filter(|(_, on)| *on)
        .map(|(id, _)| *id);
    links
        .iter()
        .flat_map(|&l| ids.clone().map(move |id| (id, l)))
        .map(|key| number(batch.get(&key)))
        .reduce(sum)
        .unwrap_or(FieldValue::Absent(Absent::NotSupported))
}

fn number(n: Option<&Result<NvmlNumber, nvmlReturn_t>>) -> FieldValue {
    match n {
        Some(Ok(NvmlNumber::Int(i))) => FieldValue::Int(*i),
        Some(Ok(NvmlNumber::Double(d))) => FieldValue::Double(*d),
        Some(Err(rc)) => FieldValue::Absent(absent_of(*rc)),
        None => FieldValue::Absent(Absent::Error),
    }
}

impl NvmlSource {
    /// One batched `nvmlDeviceGetFieldValues` for everything this GPU's entities need.
    fn field_batch(
        &mut self,
        g: &GpuHandles,
        entities: &[Arc<Entity>],
        reads: &mut DeviceReads,
    ) -> HashMap<(u32, u32), Result<NvmlNumber, nvmlReturn_t>> {
        let mut wanted: BTreeMap<(u32, u32), ()> = BTreeMap::new();
        for e in entities {
            for r in &self.rows {
                match (e.kind, r.read) {
                    (EntityKind::Gpu | EntityKind::GpuInstance, Some(Read::Field(id)))
                        if r.on_gpus =>
                    {
                        wanted.insert((id, 0), ());
                    }
                    (EntityKind::NvLink, Some(Read::LinkField(id))) if r.on_links => {
                        let link = link_scope(e);
                        wanted.insert((id, link), ());
                    }
                    (EntityKind::NvLink, Some(Read::LinkRate { .. })) if r.on_links => {
                        for id in DATA_COUNTERS {
                            wanted.insert((id, link_scope(e)), ());
                        }
                    }
                    (EntityKind::Gpu, Some(Read::LinkRate { .. })) if r.on_gpus => {
                        for &link in &g.links {
                            for id in DATA_COUNTERS {
                                wanted.insert((id, link), ());
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut out = HashMap::new();
        if wanted.is_empty() {
            return out;
        }
        self.field_buf.clear();
        self.field_buf
            .extend(wanted.keys().map(|&(id, scope)| nvmlFieldValue_t {
                fieldId: id,
                scopeId: scope,
                ..Default::default()
            }));
        let rc = self.nvml.sym().field_values(g.handle, &mut self.field_buf);
        let rc = reads.note(rc);
        for v in &self.field_buf {
            let r = match rc {
                Ok(()) if v.nvmlReturn == ffi::NVML_SUCCESS => {
                    v.value.read(v.valueType).ok_or(ffi::NVML_ERROR_UNKNOWN)
                }
                Ok(()) => Err(v.nvmlReturn),
                Err(rc) => Err(rc),
            };
            if r.as_ref().err() == Some(&ffi::NVML_ERROR_GPU_IS_LOST) {
                reads.lost = true;
            }
            out.insert((v.fieldId, v.scopeId), r);
        }
        out
    }

    /// The value of one row on one entity: whether it applies, then the device that answers it
    /// (an instance's own, or its GPU's), each device's answer read once a poll.
    #[allow(clippy::too_many_arguments)]
    fn value<'n>(
        &self,
        plan: &RowPlan,
        e: &Entity,
        g: &GpuHandles,
        gpu: &mut DeviceReads<'n>,
        mig: Option<&mut DeviceReads<'n>>,
        batch: &HashMap<(u32, u32), Result<NvmlNumber, nvmlReturn_t>>,
        driver: Option<&str>,
    ) -> FieldValue {
        let applies = match e.kind {
            EntityKind::NvLink => plan.on_links,
            _ => plan.on_gpus,
        };
        if !applies {
            return FieldValue::Absent(Absent::NotApplicable);
        }
        let Some(read) = plan.read else {
            return FieldValue::Absent(Absent::Unsupported);
        };
        // NOT_SUPPORTED once on an entity: not asked again there (as the DCGM source does).
        if self
            .logged_not_supported
            .contains(&(plan.field, e.kind, e.entity_id))
        {
            return FieldValue::Absent(Absent::NotSupported);
        }
        let dev: &mut DeviceReads<'n> = match mig {
            Some(m) if fields::per_instance(read) => m,
            _ => gpu,
        };
        let cacheable = !matches!(
            read,
            Read::Xid | Read::Field(_) | Read::LinkField(_) | Read::LinkRate { .. } | Read::Name
        );
        if cacheable {
            if let Some(v) = dev.done.get(&read) {
                return v.clone();
            }
        }
        let v = match self.answer(read, e, g, dev, batch, driver) {
            FieldValue::Text(_) if !plan.text => FieldValue::Absent(Absent::Error),
            v => v,
        };
        if cacheable {
            dev.done.insert(read, v.clone());
        }
        v
    }

    /// What one NVML read answers on one entity: a row of the mapping from `Read` to its call.
    fn answer(
        &self,
        read: Read,
        e: &Entity,
        g: &GpuHandles,
        dev: &mut DeviceReads<'_>,
        batch: &HashMap<(u32, u32), Result<NvmlNumber, nvmlReturn_t>>,
        driver: Option<&str>,
    ) -> FieldValue {
        match read {
            Read::DriverVersion => match driver {
                Some(d) => FieldValue::Text(d.into()),
                None => FieldValue::Absent(Absent::Blank),
            },
            Read::Name => name(dev.call(|s, h| s.name(h)), e),
            Read::Serial => text(dev.call(|s, h| s.serial(h))),
            Read::Uuid => text(dev.call(|s, h| s.uuid(h))),
            Read::PciBusId => FieldValue::Text(g.identity.pci_bus_id.as_str().into()),
            Read::VbiosVersion => text(dev.call(|s, h| s.vbios_version(h))),
            Read::Index => FieldValue::Int(i64::from(g.identity.index)),
            Read::MigMode => int(dev.call(|s, h| s.mig_mode(h).map(|(current, _)| current))),
            Read::Clock(t) => int(dev.call(|s, h| s.clock_info(h, t))),
            Read::MaxClock(t) => int(dev.call(|s, h| s.max_clock_info(h, t))),
            Read::GpuTemp => int(dev.call(|s, h| s.temperature(h, ffi::NVML_TEMPERATURE_GPU))),
            Read::Power => watts(dev.call(|s, h| s.power_usage(h))),
            Read::PowerLimit => watts(dev.call(|s, h| s.power_limit(h))),
            Read::Energy => int64(dev.call(|s, h| s.total_energy(h))),
            Read::Pstate => int(dev.call(|s, h| s.performance_state(h))),
            Read::FanSpeed => int(dev.call(|s, h| s.fan_speed(h))),
            Read::Pcie(c) => int(dev.call(|s, h| s.pcie_throughput(h, c))),
            Read::PcieLinkGen => int(dev.call(|s, h| s.pcie_link_generation(h))),
            Read::PcieLinkWidth => int(dev.call(|s, h| s.pcie_link_width(h))),
            Read::GpuUtil => int(dev.utilization().map(|u| u.gpu)),
            Read::MemUtil => int(dev.utilization().map(|u| u.memory)),
            Read::EncUtil => int(dev.call(|s, h| s.encoder_utilization(h))),
            Read::DecUtil => int(dev.call(|s, h| s.decoder_utilization(h))),
            Read::Xid => self.last_xid(e, g),
            Read::FbTotal => mib(dev.memory().map(|m| m.total)),
            Read::FbFree => mib(dev.memory().map(|m| m.free)),
            Read::FbUsed => mib(dev.memory().map(|m| m.used)),
            Read::FbReserved => mib(dev.memory().map(|m| m.reserved)),
            Read::ThrottleReasons => int64(dev.call(|s, h| s.clocks_throttle_reasons(h))),
            // Row remapping and NvLink counters belong to the whole GPU: not on its MIG instances
            // (as DCGM reports them).
            Read::Field(id) if e.kind == EntityKind::GpuInstance && gpu_only(id) => {
                FieldValue::Absent(Absent::NotSupported)
            }
            Read::Field(id) => number(batch.get(&(id, 0))),
            Read::LinkState => FieldValue::Int(1),
            Read::LinkField(id) => number(batch.get(&(id, link_scope(e)))),
            // The cumulative data counters (KiB) the rate is made of, in `read_gpu`.
            Read::LinkRate { .. } if e.kind == EntityKind::GpuInstance => {
                FieldValue::Absent(Absent::NotSupported)
            }
            Read::LinkRate { tx, rx } => {
                let links: &[u32] = match e.kind {
                    EntityKind::NvLink => &[link_scope(e)],
                    _ => &g.links,
                };
                data_kib(batch, links, tx, rx)
            }
        }
    }

    /// The last XID the event set reported on the GPU (or instance) of `e`: 0 when none since
    /// start, not supported without an event set.
    fn last_xid(&self, e: &Entity, g: &GpuHandles) -> FieldValue {
        if self.events.is_none() {
            return FieldValue::Absent(Absent::NotSupported);
        }
        let key = (
            g.identity.index,
            e.mig.as_ref().map_or(u32::MAX, |m| m.gi_id),
        );
        FieldValue::Int(self.last_xid.get(&key).copied().unwrap_or(0))
    }

    /// Discover again when the GPU count changed (or a lost GPU is to be asked for again), or, with
    /// unusable GPUs, every [`UNUSABLE_RETRY`].
    fn discover_if_stale(&mut self) -> Result<(), SourceError> {
        let count = self
            .nvml
            .check("nvmlDeviceGetCount_v2", self.nvml.sym().device_count())
            .map_err(|e| SourceError::Unavailable(e.to_string()))?;
        let stale = match &self.discovered {
            None => true,
            Some(d) => {
                d.count != count
                    || (!d.unusable.is_empty() && self.discovered_at.elapsed() >= UNUSABLE_RETRY)
            }
        };
        if stale {
            self.rediscover()?;
        }
        Ok(())
    }

    /// The readings of one GPU's entities (`mine`: the GPU, its instances and links), each NVML call
    /// made once; the (field, entity) pairs newly not supported into `newly_unsupported`. Whether
    /// the GPU was lost meanwhile.
    fn read_gpu(
        &mut self,
        g: &GpuHandles,
        mine: &[Arc<Entity>],
        driver: Option<&str>,
        newly_unsupported: &mut Vec<(u16, Arc<Entity>)>,
    ) -> (Vec<EntityReading>, bool) {
        let nvml = self.nvml.clone();
        let mut gpu_reads = DeviceReads::new(&nvml, g.handle);
        let batch = self.field_batch(g, mine, &mut gpu_reads);
        let mut readings = Vec::with_capacity(mine.len());
        let mut lost = gpu_reads.lost;
        let now = Instant::now();
        for e in mine {
            let mut mig_reads = e.mig.as_ref().and_then(|m| {
                g.instances
                    .iter()
                    .find(|(id, _)| id.entity_id == m.entity_id)
                    .map(|(_, h)| DeviceReads::new(&nvml, *h))
            });
            let values: Vec<FieldValue> = self
                .rows
                .iter()
                .map(|plan| {
                    let v = self.value(
                        plan,
                        e,
                        g,
                        &mut gpu_reads,
                        mig_reads.as_mut(),
                        &batch,
                        driver,
                    );
                    if v == FieldValue::Absent(Absent::NotSupported)
                        && !self
                            .logged_not_supported
                            .contains(&(plan.field, e.kind, e.entity_id))
                    {
                        newly_unsupported.push((plan.field, e.clone()));
                    }
                    v
                })
                .collect();
            let mut values = values;
            for (plan, v) in self.rows.iter().zip(values.iter_mut()) {
                if matches!(plan.read, Some(Read::LinkRate { .. })) {
                    let counter = std::mem::replace(v, FieldValue::Absent(Absent::Blank));
                    *v = self
                        .rates
                        .rate((plan.field, e.kind, e.entity_id), counter, now);
                }
            }
            if let Some(m) = &mig_reads {
                self.calls += m.calls;
                lost |= m.lost;
            }
            readings.push(EntityReading {
                entity: e.clone(),
                values: values.into(),
                attribution: self.no_attribution.clone(),
            });
        }
        self.calls += gpu_reads.calls;
        lost |= gpu_reads.lost;
        (readings, lost)
    }

    fn log_not_supported(&mut self, newly: Vec<(u16, Arc<Entity>)>) {
        let mut by_field: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        for (field, e) in newly {
            if self
                .logged_not_supported
                .insert((field, e.kind, e.entity_id))
            {
                by_field.entry(field).or_default().push(e.key());
            }
        }
        for (field, entities) in by_field {
            let name = crate::fields::catalog()
                .by_id(field)
                .map_or("unknown field", |f| f.name);
            tracing::info!(field, name, entities = %entities.join(","), "NVML reports this field not supported on these entities");
        }
    }
}

/// How each counter row is read through NVML (index-aligned with the rows).
/// Whether NVML can feed a `DCGM_EXP_*` family (XIDs and clock events; not DCGM's health watches
/// or P2P status).
fn nvml_feeds(family: ExpFamily) -> bool {
    !matches!(family, ExpFamily::GpuHealthStatus | ExpFamily::P2pStatus)
}

/// The incident reads the counters' `DCGM_EXP_*` rows need (after [`drop_dcgm_only_families`]).
fn nvml_incident_reads(counters: &CounterSet) -> IncidentReads {
    IncidentReads {
        health: false,
        p2p: false,
        ..IncidentReads::of(&counters.exporter_rows)
    }
}

/// Take out the `DCGM_EXP_*` rows only DCGM can feed, with one warning naming them.
fn drop_dcgm_only_families(counters: &mut CounterSet, what: &str) {
    let dropped: Vec<String> = counters
        .exporter_rows
        .iter()
        .filter(|r| !nvml_feeds(r.family))
        .map(|r| r.family.name().to_string())
        .collect();
    if dropped.is_empty() {
        return;
    }
    counters.exporter_rows.retain(|r| nvml_feeds(r.family));
    tracing::warn!(
        rows = %dropped.join(","),
        "these {what}DCGM_EXP_* rows need DCGM (health watches, P2P status); NVML cannot feed them, so they are not exported"
    );
}

/// Whether discovery must find the GPUs' NvLinks: for link rows, or for a GPU row summed over them
/// (NvLink bandwidth).
fn wants_links(rows: &[RowPlan]) -> bool {
    rows.iter()
        .any(|r| r.on_links || (r.on_gpus && matches!(r.read, Some(Read::LinkRate { .. }))))
}

fn plan_rows(counters: &CounterSet) -> Vec<RowPlan> {
    counters
        .rows
        .iter()
        .map(|c| RowPlan {
            field: c.field.id,
            read: fields::read_for(c.field.id),
            on_gpus: c.field.level.applies_to_gpus(),
            on_links: c.field.level.applies_to_links(),
            text: matches!(
                c.field.value_type,
                crate::fields::ValueType::String | crate::fields::ValueType::Binary
            ),
        })
        .collect()
}

impl Source for NvmlSource {
    fn name(&self) -> &'static str {
        "nvml"
    }

    /// A reloaded counters CSV: re-plan the rows; when links come into (or go out of) play, rediscover.
    fn set_counters(
        &mut self,
        mut counters: Arc<CounterSet>,
    ) -> Result<Arc<CounterSet>, SourceError> {
        if counters.exporter_rows.iter().any(|r| !nvml_feeds(r.family)) {
            drop_dcgm_only_families(Arc::make_mut(&mut counters), "reloaded ");
        }
        let rows = plan_rows(&counters);
        let want_links = wants_links(&rows);
        let unsupported: Vec<&str> = counters
            .rows
            .iter()
            .zip(&rows)
            .filter(|(_, p)| p.read.is_none())
            .map(|(c, _)| c.name.as_str())
            .collect();
        if !unsupported.is_empty() {
            tracing::warn!(
                fields = %unsupported.join(","),
                "these reloaded counters have no NVML equivalent (DCGM-only); they stay absent"
            );
        }
        let relink = want_links != self.want_links;
        let had_xid_events = self.wants_xid_events();
        self.rows = rows;
        self.want_links = want_links;
        self.incident_reads = nvml_incident_reads(&counters).union(self.event_reads);
        self.logged_not_supported.clear();
        if relink {
            self.rediscover()?;
        } else if had_xid_events != self.wants_xid_events() {
            self.register_xid_events();
        }
        Ok(counters)
    }

    fn poll(&mut self) -> Result<Reading, SourceError> {
        self.calls = 1;
        self.discover_if_stale()?;
        self.drain_events();
        let Some(found) = self.discovered.clone() else {
            return Err(SourceError::Unavailable("NVML not discovered".into()));
        };
        let driver = found.inventory.driver_version.clone();
        let mut out: Vec<EntityReading> = Vec::with_capacity(self.entities.len());
        let mut any_lost = false;
        let mut newly_unsupported: Vec<(u16, Arc<Entity>)> = Vec::new();
        let entities = self.entities.clone();
        for g in &found.gpus {
            let mine: Vec<Arc<Entity>> = entities
                .iter()
                .filter(|e| e.gpu_index() == Some(g.identity.index))
                .cloned()
                .collect();
            if mine.is_empty() {
                continue;
            }
            let (readings, lost) =
                self.read_gpu(g, &mine, driver.as_deref(), &mut newly_unsupported);
            if lost {
                any_lost = true;
                if self.lost_logged.insert(g.identity.uuid.clone()) {
                    tracing::error!(gpu = g.identity.index, uuid = %g.identity.uuid, "NVML: GPU is lost (fallen off the bus or inaccessible); its series are withdrawn and the GPUs rediscovered");
                }
                continue;
            }
            if self.lost_logged.remove(&g.identity.uuid) {
                tracing::info!(gpu = g.identity.index, "NVML: GPU readable again");
            }
            out.extend(readings);
        }
        if !newly_unsupported.is_empty() {
            self.log_not_supported(newly_unsupported);
        }
        if any_lost {
            // Ask again from scratch next time: the lost GPU is left out until it answers.
            if let Some(d) = self.discovered.as_mut() {
                d.count = u32::MAX;
            }
        }
        let (incidents, clock_samples) = self.incidents(&found, SystemTime::now());
        Ok(Reading {
            entities: out,
            driver_version: driver,
            incidents,
            clock_samples,
            p2p: Vec::new(),
            distributions: Default::default(),
        })
    }

    fn shutdown(&mut self) {
        if let Some(set) = self.events.take() {
            self.nvml.sym().event_set_free(set);
        }
        tracing::info!("NVML source shut down");
    }
}
