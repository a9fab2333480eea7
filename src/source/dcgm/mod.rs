//! The libdcgm source: reads real GPUs through NVIDIA's DCGM C library, loaded at run time.
//!
//! Start-up ([`DcgmSource::connect`]): load `libdcgm.so.4` (then `libdcgm.so.3`) through the normal loader
//! search, or the file given with `--dcgm-library` / `DCGM_OTEL_LIBDCGM`; `dcgmInit`; start an embedded
//! host engine, or connect to a remote nv-hostengine when `-r` / `DCGM_REMOTE_HOSTENGINE_INFO` is set;
//! discover GPUs, MIG instances and (when the CSV reads them) NvLinks, NvSwitches and CPUs; apply `-d`,
//! `-s`, `-p`; probe profiling and drop the DCP rows it cannot serve (one warning); create groups, field
//! groups and watches.
//!
//! A reloaded counters CSV ([`Source::set_counters`]) is applied between polls on the same connection:
//! the profiling answer of start-up filters its DCP rows, the watches of the old set are removed, the
//! inventory is rediscovered (the new set may read other entity kinds) and the new watches get a first
//! sample before the next read. With `--enable-gpu-bind-unbind-watch` a `bind` watcher follows
//! DCGM's GPU bind/unbind event and has the next poll rediscover.
//!
//! Run time ([`Source::poll`], on the collector thread): one `dcgmEntitiesGetLatestValues` call per
//! cycle in the usual case. When the host engine is lost the poll returns [`SourceError::Unavailable`]
//! (the pipeline marks the source down) and every later poll tries to reconnect (at most one attempt
//! per collect interval),
//! rediscover and re-create every watch; a GPU that vanished is gone, a new one appears.
//!
//! Modules: `ffi` (C ABI, the only `unsafe`), [`client`] (safe typed calls, RAII), [`remote`] (`-r`
//! forms and the host label), `discover`, `session` (watches and reads of one connection), `values`
//! (status and blank sentinels → [`FieldValue`](crate::snapshot::FieldValue)).

pub mod args;
mod bind;
pub mod client;
mod discover;
pub mod distributions;
pub mod ffi;
pub mod incidents;
pub mod log;
pub mod remote;
mod session;
pub mod values;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use remote::{remote_hostname, RemoteAddressError, RemoteTarget};

use self::client::{Connection, DcgmError, Library};
use self::distributions::{DistributionState, DistributionWatch};
use self::incidents::{IncidentState, IncidentWatch};
use self::session::{RowPlan, Session, Unsupported, WatchConfig};
use super::{Source, SourceError, Waker};
use crate::config::devices::{DeviceError, Selectors};
use crate::counters::exporter::IncidentReads;
use crate::counters::{Counter, CounterSet};
use crate::retry::Backoff;
use crate::snapshot::inventory::{Inventory, Selection, Wanted};
use crate::snapshot::Reading;

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

/// What start-up learnt about DCGM's profiling module: the DCP field ids it serves, or why none.
#[derive(Debug, Clone)]
enum Profiling {
    /// Not asked (the counters had no DCP row at start).
    Unknown,
    Supported(BTreeSet<u16>),
    Unavailable(String),
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

/// Connection attempts at start-up before giving up (remote mode), and the delays between them: 1 s
/// doubling, with jitter (the delays then add up to 7.5 to 15 s).
const STARTUP_ATTEMPTS: u32 = 5;
const STARTUP_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(8));
/// Longest wait between reconnection attempts, in collect intervals: a host engine that returns is
/// used again within two intervals (the soak's criterion, `tests/soak/`). An attempt on a host engine
/// that is away costs one refused connect, so there is nothing to save by waiting longer (this cap
/// used to be 30 s: after a 30 s outage the series stayed away up to 30 s more).
const RETRY_CAP_INTERVALS: u32 = 1;

/// Reconnection schedule: first attempt on the poll after the loss, then doubling delays up to a cap
/// of [`RETRY_CAP_INTERVALS`] collect intervals (so, with the default cap, one attempt per collection).
/// No jitter: attempts run on the collections, which a few milliseconds would not move.
#[derive(Debug)]
struct Retry {
    next_at: Option<Instant>,
    first: Duration,
    attempts: u32,
    down_since: Option<Instant>,
}

impl Retry {
    fn new(interval: Duration) -> Self {
        Retry {
            next_at: None,
            first: interval,
            attempts: 0,
            down_since: None,
        }
    }

    fn lost(&mut self, now: Instant) {
        self.next_at = Some(now);
        self.attempts = 0;
        self.down_since.get_or_insert(now);
    }

    /// Due, with half an interval of slack so that a poll slightly early still tries.
    fn due(&self, now: Instant) -> bool {
        match self.next_at {
            None => true,
            Some(t) => now + self.first / 2 >= t,
        }
    }

    fn failed(&mut self, now: Instant) {
        self.attempts += 1;
        let backoff = Backoff::new(self.first, self.first * RETRY_CAP_INTERVALS);
        self.next_at = Some(now + backoff.delay(self.attempts));
    }

    fn succeeded(&mut self) -> Option<Duration> {
        self.next_at = None;
        self.attempts = 0;
        self.down_since.take().map(|t| t.elapsed())
    }
}

/// The libdcgm [`Source`].
pub struct DcgmSource {
    // Field order = drop order: the session (groups, then the connection) before the library.
    session: Option<Session>,
    lib: Library,
    mode: Mode,
    interval: Duration,
    selectors: Selectors,
    rows: RowPlan,
    wanted: Wanted,
    profiling: Profiling,
    retry: Retry,
    /// Connections made so far (names of groups and field groups are unique per connection).
    conn_seq: u64,
    /// (entity key, field) pairs already logged as not supported.
    logged_unsupported: HashSet<(String, u16)>,
    profiling_watch_logged: bool,
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
}

impl DcgmSource {
    /// Load libdcgm, reach the host engine, discover and select entities, probe profiling, watch.
    ///
    /// Rows DCGM cannot serve (DCP rows without a working profiling module, or profiling fields the
    /// GPU lacks) are removed from `counters` here, before any exporter is built; they are also kept in
    /// [`DcgmSource::dropped_rows`].
    pub fn connect(opts: DcgmOptions, counters: &mut CounterSet) -> Result<DcgmSource, StartError> {
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
        let conn = startup_connection(&lib, &mode, opts.interval)?;
        let wanted = Wanted::from_counters(counters);
        let selectors = opts.selectors.clone();
        tracing::info!(%mode, "discovering GPUs");
        let inv = discover::discover(&conn, wanted).map_err(step("discovering GPUs"))?;
        let selection = inv.select(&selectors, wanted)?;
        log_inventory(&inv, &selection, &selectors);
        if inv.gpus.is_empty() {
            tracing::warn!("DCGM reports no supported GPU; no GPU series will be served");
        }
        let first_gpu = inv.gpus.first().map_or(0, |g| g.identity.index);
        let profiling = probe_profiling(&conn, first_gpu, counters);
        let dropped = filter_profiling(&profiling, counters);
        let mut source = DcgmSource {
            session: None,
            lib,
            mode,
            interval: opts.interval,
            selectors,
            rows: RowPlan::new(counters),
            wanted,
            profiling,
            retry: Retry::new(opts.interval),
            conn_seq: 0,
            logged_unsupported: HashSet::new(),
            profiling_watch_logged: false,
            rediscover: false,
            dropped,
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
        };
        source
            .start_session(conn, &inv, &selection)
            .map_err(step("watching fields"))?;
        source.start_bind_watch();
        Ok(source)
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

    fn start_session(
        &mut self,
        conn: Connection,
        inv: &Inventory,
        selection: &Selection,
    ) -> Result<(), DcgmError> {
        self.conn_seq += 1;
        let cfg = WatchConfig {
            name_prefix: format!("dcgm-otel-{}-{}", std::process::id(), self.conn_seq),
            interval: self.interval,
            group_max_entities: self.lib.group_max_entities(),
        };
        let mut established = Session::establish(conn, inv, selection, &self.rows, &cfg)?;
        let session = &mut established.session;
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
                established.session.incidents = watch;
            }
            Err(e) if e.connection_lost() => return Err(e),
            Err(e) => self.incident_failure(&e),
        }
        self.watch_distributions(&mut established.session, &cfg)?;
        if let Some(e) = established.profiling_watch_error {
            if !self.profiling_watch_logged {
                self.profiling_watch_logged = true;
                tracing::warn!(error = %e, "cannot watch profiling (DCP) fields; they stay absent");
            }
        }
        tracing::debug!(
            entities = established.session.entities().len(),
            "DCGM watches in place"
        );
        self.session = Some(established.session);
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

    /// Reconnect (when due), rediscover and rebuild the watches.
    fn reconnect(&mut self) -> Result<(), SourceError> {
        let now = Instant::now();
        if !self.retry.due(now) {
            return Err(SourceError::Unavailable(format!(
                "{} unreachable; next reconnection attempt in {:.1}s",
                self.mode,
                self.retry
                    .next_at
                    .map_or(0.0, |t| t.saturating_duration_since(now).as_secs_f64())
            )));
        }
        match self.try_establish() {
            Ok(()) => {
                let down = self.retry.succeeded();
                tracing::info!(
                    mode = %self.mode,
                    down_s = down.map_or(0.0, |d| d.as_secs_f64()),
                    entities = self.session.as_ref().map_or(0, |s| s.entities().len()),
                    "DCGM connection re-established"
                );
                Ok(())
            }
            Err(e) => {
                self.retry.failed(now);
                if self.retry.attempts <= 1 {
                    tracing::warn!(mode = %self.mode, error = %e, "cannot reconnect to DCGM; retrying at every collection");
                } else {
                    tracing::debug!(mode = %self.mode, error = %e, attempt = self.retry.attempts, "reconnection failed");
                }
                Err(SourceError::Unavailable(format!("{}: {e}", self.mode)))
            }
        }
    }

    fn try_establish(&mut self) -> Result<(), DcgmError> {
        let conn = open_connection(&self.lib, &self.mode, self.interval)?;
        self.rebuild(conn)?;
        self.start_bind_watch();
        Ok(())
    }

    /// Discover on `conn` and build a new session (the old one must already be gone).
    fn rebuild(&mut self, conn: Connection) -> Result<(), DcgmError> {
        let inv = discover::discover(&conn, self.wanted)?;
        let (selection, missing) = inv.select_present(&self.selectors, self.wanted);
        if !missing.is_empty() {
            tracing::warn!(missing = %missing.join(", "), "devices selected with -d, -s or -p are no longer present");
        }
        self.start_session(conn, &inv, &selection)
    }

    /// The host engine is gone: forget every DCGM object (their ids died with it) and schedule
    /// reconnection.
    fn lose(&mut self, e: &DcgmError) -> SourceError {
        if let Some(s) = self.session.take() {
            s.connection().mark_lost();
        }
        self.bind = None;
        self.retry.lost(Instant::now());
        tracing::warn!(mode = %self.mode, error = %e, "lost the DCGM host engine; series removed until it is back");
        SourceError::Unavailable(format!("{}: {e}", self.mode))
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
        if self.bind.as_ref().is_some_and(|b| b.take_event()) {
            tracing::info!("GPU bind/unbind event: rediscovering the GPUs");
            self.rediscover = true;
        }
        if self.rediscover {
            self.rediscover = false;
            if let Some(s) = self.session.take() {
                let conn = s.connection().clone();
                drop(s);
                tracing::info!("an entity vanished or a read failed; rebuilding the DCGM watches from a fresh discovery");
                if let Err(e) = self.rebuild(conn) {
                    return Err(if e.connection_lost() {
                        self.lose(&e)
                    } else {
                        self.retry.lost(Instant::now());
                        SourceError::Unavailable(e.to_string())
                    });
                }
            }
        }
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
        let mut set = (*counters).clone();
        // The first DCP rows since start-up: ask DCGM now which it serves.
        if let (Profiling::Unknown, Some(session)) = (&self.profiling, self.session.as_ref()) {
            let gpu = session
                .entities()
                .iter()
                .find_map(|e| e.gpu_index())
                .unwrap_or(0);
            self.profiling = probe_profiling(session.connection(), gpu, &set);
        }
        let dropped = filter_profiling(&self.profiling, &mut set);
        self.incident_reads = IncidentReads::of(&set.exporter_rows).union(self.event_reads);
        let rows = RowPlan::new(&set);
        let wanted = Wanted::from_counters(&set);
        let previous = (
            std::mem::replace(&mut self.rows, rows),
            std::mem::replace(&mut self.wanted, wanted),
        );
        // The old watches go with the old session; the same connection gets the new ones.
        let conn = match self.session.take() {
            Some(s) => {
                let conn = s.connection().clone();
                drop(s);
                Some(conn)
            }
            None => None,
        };
        if let Some(conn) = conn {
            if let Err(e) = self.rebuild(conn.clone()) {
                if e.connection_lost() {
                    (self.rows, self.wanted) = previous;
                    return Err(self.lose(&e));
                }
                // Put the previous set back; the next poll reads it again.
                (self.rows, self.wanted) = previous;
                if let Err(e2) = self.rebuild(conn) {
                    tracing::warn!(error = %e2, "cannot restore the previous DCGM watches; rediscovering on the next poll");
                    self.retry.lost(Instant::now());
                }
                return Err(SourceError::Failed(format!(
                    "cannot watch the new counters: {e}"
                )));
            }
        }
        // Not connected: the new plan applies when the connection is back.
        self.logged_unsupported.clear();
        self.dropped = dropped;
        Ok(Arc::new(set))
    }

    fn attach_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
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

/// Open a connection at start-up: embedded once; remote with a few retries (nv-hostengine may still
/// be starting), logging what it waits for.
fn startup_connection(
    lib: &Library,
    mode: &Mode,
    interval: Duration,
) -> Result<Connection, StartError> {
    let mut attempt = 1;
    loop {
        match open_connection(lib, mode, interval) {
            Ok(c) => return Ok(c),
            Err(e) if matches!(mode, Mode::Remote(_)) && attempt < STARTUP_ATTEMPTS && e.connection_lost() => {
                tracing::warn!(%mode, error = %e, attempt, "waiting for nv-hostengine");
                std::thread::sleep(STARTUP_BACKOFF.jittered(attempt));
                attempt += 1;
            }
            Err(e) => {
                return Err(StartError::Dcgm {
                    step: match mode {
                        Mode::Embedded => "starting the embedded host engine (needs the NVIDIA driver and root access to /dev/nvidia*)",
                        Mode::Remote(_) => "connecting to nv-hostengine",
                    },
                    source: e,
                })
            }
        }
    }
}

fn open_connection(
    lib: &Library,
    mode: &Mode,
    interval: Duration,
) -> Result<Connection, DcgmError> {
    match mode {
        Mode::Embedded => lib.start_embedded(),
        Mode::Remote(target) => lib.connect(
            target,
            interval.clamp(Duration::from_secs(1), Duration::from_secs(5)),
        ),
    }
}

fn log_inventory(inv: &Inventory, selection: &Selection, selectors: &Selectors) {
    for g in &inv.gpus {
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
    for s in &inv.switches {
        tracing::info!(
            nvswitch = s.id,
            nvlinks_up = s.links.len(),
            "found NvSwitch"
        );
    }
    for c in &inv.cpus {
        tracing::info!(
            cpu = c.identity.index,
            cores = c.cores.len(),
            serial = c.identity.serial.as_deref().unwrap_or(""),
            "found CPU"
        );
    }
    tracing::info!(
        gpus = inv.gpus.len(),
        nvswitches = inv.switches.len(),
        cpus = inv.cpus.len(),
        driver = inv.driver_version.as_deref().unwrap_or("unknown"),
        devices = %selectors.devices,
        switch_devices = %selectors.switches,
        cpu_devices = %selectors.cpus,
        monitored_gpus = selection.gpus.gpus.len(),
        monitored_instances = selection.gpus.instances.len(),
        monitored_nvswitches = selection.switches.majors.len(),
        monitored_cpus = selection.cpus.majors.len(),
        "DCGM inventory"
    );
}

/// Ask DCGM which profiling metrics the first GPU supports (only when the counters have DCP rows).
fn probe_profiling(conn: &Connection, gpu: u32, counters: &CounterSet) -> Profiling {
    if !counters.rows.iter().any(|c| c.field.is_profiling()) {
        return Profiling::Unknown;
    }
    match conn.profiling_fields(gpu) {
        Ok(supported) => Profiling::Supported(supported),
        Err(e) => {
            let hint = match e.code {
                ffi::DCGM_ST_MODULE_NOT_LOADED => {
                    "the profiling module is not loaded: install datacenter-gpu-manager-4-proprietary (needed for DCP on Ampere and older), and avoid a second host engine on this node"
                }
                ffi::DCGM_ST_REQUIRES_ROOT | ffi::DCGM_ST_NO_PERMISSION => {
                    "profiling needs root and CAP_SYS_ADMIN (containers: --cap-add SYS_ADMIN)"
                }
                ffi::DCGM_ST_PROFILING_NOT_SUPPORTED => "this GPU does not support profiling metrics",
                _ => "profiling metrics are unavailable",
            };
            Profiling::Unavailable(format!("{e}: {hint}"))
        }
    }
}

/// Remove the DCP rows DCGM cannot serve, with one warning. Returns the removed rows. A set reloaded
/// after start-up is filtered with start-up's answer (dcgm-exporter does not re-ask either).
fn filter_profiling(profiling: &Profiling, counters: &mut CounterSet) -> Vec<Counter> {
    let names = |rows: &[Counter]| {
        rows.iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    match profiling {
        Profiling::Unknown => Vec::new(),
        Profiling::Supported(supported) => {
            let dropped =
                counters.retain(|c| !c.field.is_profiling() || supported.contains(&c.field.id));
            if !dropped.is_empty() {
                tracing::warn!(skipped = %names(&dropped), "profiling (DCP) metrics not supported by this GPU; rows skipped");
            }
            dropped
        }
        Profiling::Unavailable(why) => {
            let dropped = counters.retain(|c| !c.field.is_profiling());
            if !dropped.is_empty() {
                tracing::warn!(skipped = %names(&dropped), "Not collecting DCP metrics: {why}");
            }
            dropped
        }
    }
}
