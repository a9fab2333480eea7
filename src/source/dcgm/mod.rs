//! The libdcgm source: reads real GPUs through NVIDIA's DCGM C library, loaded at run time.
//!
//! Start-up ([`DcgmSource::connect`]): load `libdcgm.so.4` (then `libdcgm.so.3`) through the normal loader
//! search, or the file given with `--dcgm-library` / `DCGM_OTEL_LIBDCGM`; `dcgmInit`; then one attempt
//! to start an embedded host engine, or to connect to a remote nv-hostengine when `-r` /
//! `DCGM_REMOTE_HOSTENGINE_INFO` is set. A missing library is an error (exit code 1); a host engine
//! that does not answer is not: the source starts without a connection and the collections try again
//! (`reconnect`) — `/health` 200, `/ready` 503 with the reason — until it answers.
//!
//! Every connection, the first one and each after an outage, goes through the same steps
//! (`connection`): discover GPUs, MIG instances and (when the CSV reads them) NvLinks, NvSwitches and
//! CPUs; compare the GPUs with the node's ([`node_gpus`]: fewer is a `/ready` 503 and a rediscovery
//! until they are back); ask which profiling fields DCGM serves ([`profiling`]: asked again after
//! every connection and every 5 minutes while unavailable, the DCP rows come and go with the answer
//! and the pipeline learns the new rows through [`Source::counters_changed`]); apply `-d`, `-s`, `-p`;
//! create groups, field groups and watches.
//!
//! A reloaded counters CSV ([`Source::set_counters`]) is applied between polls on the same connection:
//! the current profiling answer filters its DCP rows, the watches of the old set are removed, the
//! inventory is rediscovered (the new set may read other entity kinds) and the new watches get a first
//! sample before the next read. With `--enable-gpu-bind-unbind-watch` a `bind` watcher follows
//! DCGM's GPU bind/unbind event and has the next poll rediscover.
//!
//! Run time ([`Source::poll`], on the collector thread): one `dcgmEntitiesGetLatestValues` call per
//! cycle in the usual case. When the host engine is lost the poll returns [`SourceError::Unavailable`]
//! (the pipeline marks the source down) and every later poll tries to reconnect (at most one attempt
//! per collect interval), rediscover and re-create every watch; a GPU that vanished is gone, a new one
//! appears.
//!
//! Modules: `ffi` (C ABI, the only `unsafe`), [`client`] (safe typed calls, RAII), [`remote`] (`-r`
//! forms and the host label), `discover`, `session` (watches and reads of one connection), `values`
//! (status and blank sentinels → [`FieldValue`](crate::snapshot::FieldValue)).

pub mod args;
mod bind;
pub mod client;
mod connection;
mod discover;
pub mod distributions;
pub mod ffi;
pub mod incidents;
pub mod log;
pub mod node_gpus;
pub mod profiling;
mod reconnect;
pub mod remote;
mod session;
pub mod values;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use remote::{remote_hostname, RemoteAddressError, RemoteTarget};

use self::client::{DcgmError, Library};
use self::distributions::{DistributionState, DistributionWatch};
use self::incidents::{IncidentState, IncidentWatch};
use self::node_gpus::{Blind, NodeDevices};
use self::profiling::Profiling;
use self::reconnect::{Retry, WakeTimer};
use self::session::{RowPlan, Session, Unsupported, WatchConfig};
use super::{Source, SourceError, Waker};
use crate::config::devices::{DeviceError, Selectors};
use crate::counters::exporter::IncidentReads;
use crate::counters::{Counter, CounterSet};
use crate::snapshot::inventory::Wanted;
use crate::snapshot::Reading;
use crate::source::nvml::client::Nvml;

/// How the host engine is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// A host engine inside this process (`dcgmStartEmbedded`), the default.
    Embedded,
    /// A remote nv-hostengine.
    Remote(RemoteTarget),
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Embedded => write!(f, "embedded host engine"),
            Mode::Remote(t) => write!(f, "nv-hostengine at {t}"),
        }
    }
}

/// What the DCGM source needs from the configuration.
#[derive(Debug, Clone, Default)]
pub struct DcgmOptions {
    /// `--dcgm-library`: an explicit libdcgm file instead of the soname search.
    pub library: Option<PathBuf>,
    /// `-r`: remote host-engine address; `None` = embedded.
    pub remote: Option<String>,
    pub interval: Duration,
    /// `-d`, `-s`, `-p`.
    pub selectors: Selectors,
    /// `--enable-gpu-bind-unbind-watch`: how often to look at DCGM's bind/unbind event.
    pub bind_watch: Option<Duration>,
    /// Read XIDs, clock events and health for a consumer of incident occurrences (OTLP log records)
    /// even when no `DCGM_EXP_*` row asks for them.
    pub incident_events: bool,
    /// The fields sampled between collections (`--distribution`).
    pub distributions: Arc<[crate::snapshot::distribution::DistributionSpec]>,
    /// `--dev-root`: where the node's NVIDIA device files are counted.
    pub dev_root: PathBuf,
    /// `--nvml-library`: NVML, for the node's GPU count (searched when `None`; optional).
    pub nvml_library: Option<PathBuf>,
}

impl DcgmOptions {
    /// The DCGM flags with the collection's interval and device selections; `incident_events`: a
    /// consumer needs every incident (see [`DcgmOptions::incident_events`]).
    pub fn new(
        args: &args::DcgmArgs,
        interval: Duration,
        selectors: Selectors,
        incident_events: bool,
    ) -> Self {
        DcgmOptions {
            library: args.dcgm_library.clone(),
            remote: args.remote_hostengine_info.clone(),
            interval,
            selectors,
            bind_watch: args.bind_watch(),
            incident_events,
            distributions: Arc::default(),
            dev_root: args.dev_root.clone(),
            nvml_library: None,
        }
    }

    /// NVML for the node's GPU count, when libnvidia-ml loads (no error when it does not: the device
    /// files still count).
    fn node_nvml(&self) -> Option<Arc<Nvml>> {
        match Nvml::open(self.nvml_library.as_deref()) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::debug!(error = %e, "NVML is not usable; the node's GPUs are counted from its device files");
                None
            }
        }
    }

    /// What incident reads the consumers need beyond the counters' `DCGM_EXP_*` rows.
    fn event_reads(&self) -> IncidentReads {
        if self.incident_events {
            IncidentReads {
                p2p: false,
                ..IncidentReads::all()
            }
        } else {
            IncidentReads::default()
        }
    }
}

/// Why the DCGM source could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// libdcgm is not installed or not usable (exit code 1).
    #[error(
        "{0}; libdcgm (NVIDIA DCGM 4.x) is needed to read GPUs: install datacenter-gpu-manager-4-core \
         (DCGM 3.x's libdcgm.so.3 is used as a fallback), or point --dcgm-library / DCGM_OTEL_LIBDCGM at \
         libdcgm.so.4. Use -r HOST:PORT to read a remote nv-hostengine (the client library is still \
         needed), or --simulate to run on a simulated fleet without GPUs."
    )]
    Library(client::LoadError),
    /// A bad `-r` value (exit code 2).
    #[error(transparent)]
    Address(#[from] RemoteAddressError),
    /// `-d` names GPUs or instances that are not there (exit code 2).
    #[error(transparent)]
    Devices(#[from] DeviceError),
    /// A DCGM call failed during start-up (exit code 1).
    #[error("{step}: {source}")]
    Dcgm {
        step: &'static str,
        #[source]
        source: DcgmError,
    },
}

impl From<client::LoadError> for StartError {
    fn from(e: client::LoadError) -> Self {
        StartError::Library(e)
    }
}

impl StartError {
    /// Bad input (exit code 2) rather than an environment failure (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, StartError::Address(_) | StartError::Devices(_))
    }
}

fn step(step: &'static str) -> impl FnOnce(DcgmError) -> StartError {
    move |source| StartError::Dcgm { step, source }
}

/// The libdcgm [`Source`].
pub struct DcgmSource {
    // Field order = drop order: the session (groups, then the connection) before the library.
    session: Option<Session>,
    lib: Library,
    mode: Mode,
    interval: Duration,
    selectors: Selectors,
    /// The counters as asked for (the CSV, reloaded ones included).
    full: CounterSet,
    /// What is read: `full` less the DCP rows profiling cannot serve.
    effective: CounterSet,
    /// The rows the pipeline was last given ([`Source::counters_changed`]).
    published: Arc<CounterSet>,
    rows: RowPlan,
    wanted: Wanted,
    profiling: Profiling,
    /// The node's GPUs against DCGM's.
    blind: Blind,
    retry: Retry,
    /// Wakes the collector for an attempt due before the next collection.
    retry_wake: WakeTimer,
    ever_connected: bool,
    /// Connections made so far (names of groups and field groups are unique per connection).
    conn_seq: u64,
    /// (entity key, field) pairs already logged as not supported.
    logged_unsupported: HashSet<(String, u16)>,
    /// A value asked for a rediscovery on the same connection (a GPU was lost).
    rediscover: bool,
    dropped: Vec<Counter>,
    closed: bool,
    /// `--enable-gpu-bind-unbind-watch`: the poll interval, the collector's waker and the watcher of
    /// the current connection.
    bind_every: Option<Duration>,
    waker: Option<Waker>,
    bind: Option<bind::BindWatch>,
    /// What the listed `DCGM_EXP_*` families need read, and the cursor and states that outlive a
    /// connection.
    incident_reads: IncidentReads,
    /// The reads the consumers need whatever the counters say (OTLP log records).
    event_reads: IncidentReads,
    incident_state: IncidentState,
    incident_error_logged: bool,
    /// `dcgm_otel_incident_read_errors_total`, when the application counts it.
    incident_errors: Option<Arc<crate::telemetry::self_metrics::Metric>>,
    /// The sampled fields' accumulator and cursors (`--distribution`), kept across connections.
    distributions: Option<DistributionState>,
    distribution_error_logged: bool,
    /// NVML, opened for the node's GPU count (shared with the per-process collection).
    nvml: Option<Arc<Nvml>>,
}

impl DcgmSource {
    /// Load libdcgm and try the host engine once ([`DcgmSource::open`], then
    /// [`DcgmSource::connect_first`]).
    pub fn connect(opts: DcgmOptions, counters: &mut CounterSet) -> Result<DcgmSource, StartError> {
        let mut source = DcgmSource::open(opts, counters)?;
        source.connect_first(counters)?;
        Ok(source)
    }

    /// Load libdcgm (and NVML, for the node's GPU count) and `dcgmInit`; nothing is connected yet.
    /// Only a missing library and a bad `-r` are errors.
    pub fn open(opts: DcgmOptions, counters: &CounterSet) -> Result<DcgmSource, StartError> {
        let mode = match opts.remote.as_deref() {
            Some(r) => Mode::Remote(remote::parse(r)?),
            None => Mode::Embedded,
        };
        let mut lib = Library::open(opts.library.as_deref())?;
        lib.init().map_err(step("dcgmInit"))?;
        tracing::info!(
            library = lib.path(),
            version = lib.version().unwrap_or("unknown"),
            "loaded libdcgm"
        );
        let nvml = opts.node_nvml();
        let mut source = DcgmSource {
            session: None,
            lib,
            mode,
            interval: opts.interval,
            selectors: opts.selectors.clone(),
            full: counters.clone(),
            effective: counters.clone(),
            published: Arc::new(counters.clone()),
            rows: RowPlan::new(counters),
            wanted: Wanted::from_counters(counters),
            profiling: Profiling::default(),
            blind: Blind::new(
                NodeDevices::new(opts.dev_root.clone(), nvml.clone()),
                opts.interval,
            ),
            retry: Retry::new(opts.interval),
            retry_wake: WakeTimer::default(),
            ever_connected: false,
            conn_seq: 0,
            logged_unsupported: HashSet::new(),
            rediscover: false,
            dropped: Vec::new(),
            closed: false,
            bind_every: opts.bind_watch,
            waker: None,
            bind: None,
            incident_reads: IncidentReads::of(&counters.exporter_rows).union(opts.event_reads()),
            event_reads: opts.event_reads(),
            incident_state: IncidentState::default(),
            incident_error_logged: false,
            incident_errors: None,
            distributions: (!opts.distributions.is_empty())
                .then(|| DistributionState::new(opts.distributions.clone(), opts.interval)),
            distribution_error_logged: false,
            nvml,
        };
        source.apply_counters();
        Ok(source)
    }

    /// The first attempt to reach the host engine: discover and select entities, probe profiling,
    /// watch. A host engine that does not answer is tried again by the collections (see the module
    /// doc); only bad input (`-d`, `-s`, `-p` naming absent devices) is an error.
    ///
    /// Rows DCGM cannot serve (DCP rows without a working profiling module, or profiling fields the
    /// GPU lacks) are removed from `counters` here, before any exporter reads them; they are also kept
    /// in [`DcgmSource::dropped_rows`]. When the answer changes later, the pipeline is told through
    /// [`Source::counters_changed`].
    pub fn connect_first(&mut self, counters: &mut CounterSet) -> Result<(), StartError> {
        self.first_connection()?;
        *counters = self.effective.clone();
        self.published = Arc::new(self.effective.clone());
        Ok(())
    }

    /// Count in the self-metrics: profiling's state, the GPUs DCGM misses, failed incident reads and
    /// dropped samples.
    pub fn count_in(&mut self, metrics: &Arc<crate::telemetry::self_metrics::SelfMetrics>) {
        self.profiling.count_in(metrics);
        self.blind.count_in(metrics);
        self.count_incident_errors(metrics);
        self.count_distribution_drops(metrics);
    }

    /// The NVML the source opened (for the node's GPU count), to share.
    pub fn nvml(&self) -> Option<Arc<Nvml>> {
        self.nvml.clone()
    }

    /// Whether the first attempt reached the host engine.
    pub fn connected(&self) -> bool {
        self.session.is_some()
    }

    /// Start following DCGM's bind/unbind event on the current connection (when asked to).
    fn start_bind_watch(&mut self) {
        let (Some(every), Some(session)) = (self.bind_every, self.session.as_ref()) else {
            return;
        };
        self.bind = bind::BindWatch::start(
            session.connection().clone(),
            every,
            &format!("dcgm-otel-{}-{}-bind", std::process::id(), self.conn_seq),
            self.waker.clone(),
        );
    }

    /// Counter rows removed at start-up because DCGM cannot serve them here.
    pub fn dropped_rows(&self) -> &[Counter] {
        &self.dropped
    }

    /// How the host engine is reached.
    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// `dcgmEntitiesGetLatestValues` calls made by the last successful poll.
    pub fn calls_last_poll(&self) -> usize {
        self.session.as_ref().map_or(0, |s| {
            s.last_calls
                + s.incidents.as_ref().map_or(0, |w| w.last_calls)
                + s.distributions.as_ref().map_or(0, |w| w.last_calls)
        })
    }

    /// Wall time the last successful poll spent inside libdcgm (the rest is this exporter's work).
    pub fn dcgm_time_last_poll(&self) -> Duration {
        self.session.as_ref().map_or(Duration::ZERO, |s| {
            s.last_dcgm_time
                + s.incidents.as_ref().map_or(Duration::ZERO, |w| w.last_time)
                + s.distributions
                    .as_ref()
                    .map_or(Duration::ZERO, |w| w.last_time)
        })
    }

    /// Watch the incident history on the new session (when the counters or consumers need it); a
    /// failure other than a lost connection is counted and logged once.
    fn watch_incidents(
        &mut self,
        session: &mut Session,
        cfg: &WatchConfig,
    ) -> Result<(), DcgmError> {
        match IncidentWatch::establish(
            session.connection(),
            session.entities(),
            self.incident_reads,
            &cfg.name_prefix,
            self.interval,
            &mut self.incident_state,
        ) {
            Ok(mut watch) => {
                for e in watch
                    .as_mut()
                    .map(|w| std::mem::take(&mut w.setup_errors))
                    .unwrap_or_default()
                {
                    self.incident_failure(&e);
                }
                session.incidents = watch;
            }
            Err(e) if e.connection_lost() => return Err(e),
            Err(e) => self.incident_failure(&e),
        }
        Ok(())
    }

    /// Watch the sampled fields on the new session (`--distribution`); a failure other than a lost
    /// connection leaves them out on this connection, logged once.
    fn watch_distributions(
        &mut self,
        session: &mut Session,
        cfg: &WatchConfig,
    ) -> Result<(), DcgmError> {
        let Some(state) = self.distributions.as_mut() else {
            return Ok(());
        };
        match DistributionWatch::establish(
            session.connection(),
            session.entities(),
            state,
            &cfg.name_prefix,
            cfg.group_max_entities,
        ) {
            Ok(mut watch) => {
                for e in watch
                    .as_mut()
                    .map(|w| std::mem::take(&mut w.setup_errors))
                    .unwrap_or_default()
                {
                    self.distribution_failure(&e);
                }
                session.distributions = watch;
            }
            Err(e) if e.connection_lost() => return Err(e),
            Err(e) => self.distribution_failure(&e),
        }
        Ok(())
    }

    /// Sampled fields cannot be watched or read: logged once; the last values are still served.
    fn distribution_failure(&mut self, e: &DcgmError) {
        if !self.distribution_error_logged {
            self.distribution_error_logged = true;
            tracing::warn!(error = %e, "cannot read the sampled fields' history (--distribution) from DCGM; their distributions are left out");
        }
    }

    /// Count samples over the per-interval cap in `dcgm_otel_distribution_samples_dropped_total`.
    pub fn count_distribution_drops(
        &mut self,
        metrics: &crate::telemetry::self_metrics::SelfMetrics,
    ) {
        if let Some(state) = self.distributions.as_mut() {
            state.count_dropped(crate::source::sim::sampling::dropped_metric(metrics));
        }
    }

    /// The sampled fields' samples since the previous collection, folded (empty without
    /// `--distribution`). What was read before a failed call is kept; a lost host engine is
    /// reconnected on the next poll, from the same cursors.
    fn read_distributions(&mut self) -> crate::snapshot::distribution::Distributions {
        let Some(state) = self.distributions.as_mut() else {
            return Default::default();
        };
        let read = self
            .session
            .as_mut()
            .and_then(|s| s.distributions.as_mut())
            .map_or(Ok(()), |w| w.read(state));
        let folded = state.finish();
        match read {
            Err(e) if e.connection_lost() => {
                let _ = self.lose(&e);
            }
            Err(e) => {
                if let Some(s) = self.session.as_mut() {
                    s.distributions = None;
                }
                self.distribution_failure(&e);
            }
            Ok(()) => {}
        }
        folded
    }

    /// While the host engine is away: have the collector run when the next attempt is due.
    fn arm_retry(&mut self) {
        if let (Some(at), Some(waker)) = (self.retry.next_at(), self.waker.as_ref()) {
            if self.session.is_none() {
                self.retry_wake.arm(at, waker);
            }
        }
    }

    /// Before a read: rebuild on the running connection when something asks for it (a bind/unbind
    /// event, a vanished entity, GPUs missing and a discovery finding a different count, profiling
    /// answering differently when asked again).
    fn rebuild_if_needed(&mut self) -> Result<(), SourceError> {
        let now = Instant::now();
        if self.bind.as_ref().is_some_and(|b| b.take_event()) {
            tracing::info!("GPU bind/unbind event: rediscovering the GPUs");
            // Unbound on purpose: fewer GPUs than before is not a GPU missing.
            self.blind.forget_earlier_count();
            return self.rebuild_in_place("a GPU was bound or unbound");
        }
        if std::mem::take(&mut self.rediscover) {
            return self.rebuild_in_place("an entity vanished or a read failed");
        }
        if self.session.is_some() && self.blind.rediscovery_due(now) {
            self.retry_discovery(now)?;
        }
        if self.session.is_some() && self.profiling.reprobe_due(now) {
            self.reprobe_profiling()?;
        }
        Ok(())
    }

    /// GPUs are missing: discover again; rebuild when DCGM's count changed.
    fn retry_discovery(&mut self, now: Instant) -> Result<(), SourceError> {
        let Some(conn) = self.session.as_ref().map(|s| s.connection().clone()) else {
            return Ok(());
        };
        match discover::discover(&conn, Wanted::from_counters(&self.full)) {
            Ok(inv) if Some(inv.gpus.len()) != self.blind.last_reported() => {
                self.rebuild_in_place("DCGM reports a different number of GPUs")
            }
            Ok(inv) => {
                self.blind.discovered(inv.gpus.len(), now);
                Ok(())
            }
            Err(e) if e.connection_lost() => Err(self.lose(&e)),
            Err(e) => {
                // Nothing learnt: the same count again, and the next try later.
                tracing::debug!(error = %e, "rediscovery failed");
                self.blind
                    .discovered(self.blind.last_reported().unwrap_or(0), now);
                Ok(())
            }
        }
    }

    /// Profiling was unavailable: ask again on the running connection; rebuild when the answer
    /// changed (the DCP rows come back).
    fn reprobe_profiling(&mut self) -> Result<(), SourceError> {
        let Some(session) = self.session.as_ref() else {
            return Ok(());
        };
        let conn = session.connection().clone();
        let gpu = session.entities().iter().find_map(|e| e.gpu_index());
        let before = self.profiling.answer().clone();
        self.profiling.probe(&conn, gpu, &self.full);
        if *self.profiling.answer() == before {
            return Ok(());
        }
        self.rebuild_in_place("the profiling module answers differently")
    }

    /// Count failed incident reads in `dcgm_otel_incident_read_errors_total`.
    pub fn count_incident_errors(&mut self, metrics: &crate::telemetry::self_metrics::SelfMetrics) {
        self.incident_errors = Some(metrics.counter(
            "dcgm_otel_incident_read_errors_total",
            "Failed DCGM incident reads (values-since, health group or check, P2P status); the DCGM fields are still served.",
            &[],
        ));
    }

    /// Incidents cannot be read (an older libdcgm, a failing call): logged once, counted; the DCGM
    /// fields are still served and the `DCGM_EXP_*` families keep their last counts.
    fn incident_failure(&mut self, e: &DcgmError) {
        if let Some(m) = &self.incident_errors {
            m.inc();
        }
        if !self.incident_error_logged {
            self.incident_error_logged = true;
            tracing::warn!(error = %e, "cannot read GPU incidents (XID / clock-event history, health, P2P) from DCGM; DCGM_EXP_* families are not updated");
        }
    }

    /// One log line per field (listing the entities), each (entity, field) pair only once per process.
    fn log_unsupported(&mut self, list: Vec<Unsupported>) {
        let mut by_field: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        for u in list {
            let key = u.entity.key();
            if self.logged_unsupported.insert((key.clone(), u.field)) {
                by_field.entry(u.field).or_default().push(key);
            }
        }
        for (field, entities) in by_field {
            let name = crate::fields::catalog()
                .by_id(field)
                .map_or("unknown field", |f| f.name);
            tracing::info!(
                field,
                name,
                entities = %entities.join(","),
                "DCGM reports this field not supported on these entities; no longer asking for it there"
            );
        }
    }
}

impl Source for DcgmSource {
    fn name(&self) -> &'static str {
        "dcgm"
    }

    fn poll(&mut self) -> Result<Reading, SourceError> {
        if self.closed {
            return Err(SourceError::Failed("the DCGM source is shut down".into()));
        }
        self.rebuild_if_needed()?;
        if self.session.is_none() {
            self.reconnect()?;
        }
        let Some(session) = self.session.as_mut() else {
            return Err(SourceError::Unavailable(format!(
                "{} not connected",
                self.mode
            )));
        };
        let mut newly = Vec::new();
        match session.read(&self.rows, &mut newly) {
            Ok(read) => {
                let driver_version = session.driver_version().map(str::to_string);
                let found = session
                    .incidents
                    .as_mut()
                    .map(|w| w.read(&mut self.incident_state))
                    .unwrap_or_default();
                match &found.error {
                    // The readings and incidents of this collection are kept; the next poll
                    // reconnects.
                    Some(e) if e.connection_lost() => {
                        let _ = self.lose(e);
                    }
                    Some(e) => self.incident_failure(e),
                    None => {}
                }
                let (incidents, clock_samples, p2p) =
                    (found.incidents, found.clock_samples, found.p2p);
                let distributions = self.read_distributions();
                self.rediscover = read.topology_changed;
                self.log_unsupported(newly);
                Ok(Reading {
                    entities: read.entities,
                    driver_version,
                    incidents,
                    clock_samples,
                    p2p,
                    distributions,
                })
            }
            Err(e) if e.connection_lost() => Err(self.lose(&e)),
            Err(e) => {
                // Rebuild groups and watches from a fresh discovery before the next read.
                self.rediscover = true;
                Err(SourceError::Failed(e.to_string()))
            }
        }
    }

    fn set_counters(&mut self, counters: Arc<CounterSet>) -> Result<Arc<CounterSet>, SourceError> {
        let previous = std::mem::replace(&mut self.full, (*counters).clone());
        self.apply_counters();
        // The old watches go with the old session; the same connection gets the new ones (and is
        // asked about profiling when the new rows are the first DCP rows).
        if let Some(s) = self.session.take() {
            let conn = s.connection().clone();
            drop(s);
            if let Err(e) = self.rebuild(conn.clone(), connection::Selecting::Present, false) {
                // Put the previous set back; the next poll reads it again.
                self.full = previous;
                self.apply_counters();
                let e = match e {
                    connection::Failed::Dcgm(e) if e.connection_lost() => return Err(self.lose(&e)),
                    connection::Failed::Dcgm(e) => e.to_string(),
                    connection::Failed::Devices(e) => e.to_string(),
                };
                if self
                    .rebuild(conn, connection::Selecting::Present, false)
                    .is_err()
                {
                    tracing::warn!(
                        "cannot restore the previous DCGM watches; rediscovering on the next poll"
                    );
                    self.retry.lost(Instant::now());
                }
                return Err(SourceError::Failed(format!(
                    "cannot watch the new counters: {e}"
                )));
            }
        }
        // Not connected: the new plan applies when the connection is back.
        self.logged_unsupported.clear();
        self.published = Arc::new(self.effective.clone());
        Ok(self.published.clone())
    }

    fn counters_changed(&mut self) -> Option<Arc<CounterSet>> {
        if same_rows(&self.effective, &self.published) {
            return None;
        }
        self.published = Arc::new(self.effective.clone());
        Some(self.published.clone())
    }

    fn not_ready(&self) -> Option<String> {
        self.session
            .as_ref()
            .and(self.blind.reason())
            .map(str::to_string)
    }

    fn attach_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
        self.arm_retry();
        // The watcher of the first connection started before the waker existed: restart it (the old
        // one first: its field group's name must be free again).
        if self.bind.take().is_some() {
            self.start_bind_watch();
        }
    }

    fn shutdown(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        // Destroy field groups and groups, then stop the engine / disconnect, then dcgmShutdown.
        self.bind = None;
        self.session = None;
        self.lib.shutdown();
        tracing::info!("DCGM source shut down");
    }
}

/// Whether two counter sets read the same rows.
fn same_rows(a: &CounterSet, b: &CounterSet) -> bool {
    a.rows.len() == b.rows.len()
        && a.rows
            .iter()
            .zip(&b.rows)
            .all(|(x, y)| x.field.id == y.field.id && x.name == y.name)
}
