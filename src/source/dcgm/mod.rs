//! The libdcgm source: reads real GPUs through NVIDIA's DCGM C library, loaded at run time.
//!
//! Start-up ([`DcgmSource::connect`]): load `libdcgm.so.4` (then `libdcgm.so.3`) through the normal loader
//! search, or the file given with `--dcgm-library` / `DCGM_OTEL_LIBDCGM`; `dcgmInit`; start an embedded
//! host engine, or connect to a remote nv-hostengine when `-r` / `DCGM_REMOTE_HOSTENGINE_INFO` is set;
//! discover GPUs, MIG instances and (when the CSV has link fields) NvLinks; apply `-d`; probe profiling
//! and drop the DCP rows it cannot serve (one warning); create groups, field groups and watches.
//!
//! Run time ([`Source::poll`], on the collector thread): one `dcgmEntitiesGetLatestValues` call per
//! cycle in the usual case. When the host engine is lost the poll returns [`SourceError::Unavailable`]
//! (the pipeline marks the source down) and later polls reconnect with capped exponential backoff,
//! rediscover and re-create every watch; a GPU that vanished is gone, a new one appears.
//!
//! Modules: `ffi` (C ABI, the only `unsafe`), [`client`] (safe typed calls, RAII), [`remote`] (`-r`
//! forms and the host label), `discover`, `session` (watches and reads of one connection), `values`
//! (status and blank sentinels → [`FieldValue`](crate::snapshot::FieldValue)).

pub mod args;
pub mod client;
mod discover;
pub mod ffi;
pub mod remote;
mod session;
mod values;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use remote::{remote_hostname, RemoteAddressError, RemoteTarget};

use self::client::{Connection, DcgmError, Library};
use self::session::{RowPlan, Session, Unsupported, WatchConfig};
use super::{Source, SourceError};
use crate::config::devices::{DeviceError, DeviceSelection, Selected};
use crate::counters::{Counter, CounterSet};
use crate::snapshot::inventory::{self, Inventory};
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
#[derive(Debug, Clone)]
pub struct DcgmOptions {
    /// `--dcgm-library`: an explicit libdcgm file instead of the soname search.
    pub library: Option<PathBuf>,
    /// `-r`: remote host-engine address; `None` = embedded.
    pub remote: Option<String>,
    pub interval: Duration,
    pub devices: DeviceSelection,
}

impl DcgmOptions {
    /// The DCGM flags with the collection's interval and device selection.
    pub fn new(args: &args::DcgmArgs, interval: Duration, devices: DeviceSelection) -> Self {
        DcgmOptions {
            library: args.dcgm_library.clone(),
            remote: args.remote_hostengine_info.clone(),
            interval,
            devices,
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

/// Connection attempts at start-up before giving up (remote mode), and the first delay between them.
const STARTUP_ATTEMPTS: u32 = 5;
const STARTUP_FIRST_DELAY: Duration = Duration::from_millis(500);
/// Longest wait between reconnection attempts.
const RETRY_CAP: Duration = Duration::from_secs(30);

/// Reconnection schedule: first attempt on the poll after the loss, then doubling delays up to a cap.
#[derive(Debug)]
struct Retry {
    next_at: Option<Instant>,
    delay: Duration,
    first: Duration,
    attempts: u32,
    down_since: Option<Instant>,
}

impl Retry {
    fn new(interval: Duration) -> Self {
        Retry {
            next_at: None,
            delay: interval,
            first: interval,
            attempts: 0,
            down_since: None,
        }
    }

    fn lost(&mut self, now: Instant) {
        self.next_at = Some(now);
        self.delay = self.first;
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
        self.next_at = Some(now + self.delay);
        self.delay = (self.delay * 2).min(RETRY_CAP.max(self.first));
    }

    fn succeeded(&mut self) -> Option<Duration> {
        self.next_at = None;
        self.delay = self.first;
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
    devices: DeviceSelection,
    rows: RowPlan,
    want_links: bool,
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
        let want_links = counters
            .rows
            .iter()
            .any(|c| c.field.level.applies_to_links());
        tracing::info!(%mode, "discovering GPUs");
        let inv = discover::discover(&conn, want_links).map_err(step("discovering GPUs"))?;
        let selected = opts.devices.select(&inv.slots())?;
        log_inventory(&inv, &selected, &opts.devices);
        if inv.gpus.is_empty() {
            tracing::warn!("DCGM reports no supported GPU; no GPU series will be served");
        }
        let dropped = probe_profiling(&conn, &inv, counters);
        let mut source = DcgmSource {
            session: None,
            lib,
            mode,
            interval: opts.interval,
            devices: opts.devices,
            rows: RowPlan::new(&counters.rows),
            want_links,
            retry: Retry::new(opts.interval),
            conn_seq: 0,
            logged_unsupported: HashSet::new(),
            profiling_watch_logged: false,
            rediscover: false,
            dropped,
            closed: false,
        };
        source
            .start_session(conn, &inv, &selected)
            .map_err(step("watching fields"))?;
        Ok(source)
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
        self.session.as_ref().map_or(0, |s| s.last_calls)
    }

    /// Wall time the last successful poll spent inside libdcgm (the rest is this exporter's work).
    pub fn dcgm_time_last_poll(&self) -> Duration {
        self.session
            .as_ref()
            .map_or(Duration::ZERO, |s| s.last_dcgm_time)
    }

    fn start_session(
        &mut self,
        conn: Connection,
        inv: &Inventory,
        selected: &Selected,
    ) -> Result<(), DcgmError> {
        self.conn_seq += 1;
        let cfg = WatchConfig {
            name_prefix: format!("dcgm-otel-{}-{}", std::process::id(), self.conn_seq),
            interval: self.interval,
            group_max_entities: self.lib.group_max_entities(),
        };
        let established = Session::establish(conn, inv, selected, &self.rows, &cfg)?;
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
                    tracing::warn!(mode = %self.mode, error = %e, "cannot reconnect to DCGM; retrying with backoff");
                } else {
                    tracing::debug!(mode = %self.mode, error = %e, attempt = self.retry.attempts, "reconnection failed");
                }
                Err(SourceError::Unavailable(format!("{}: {e}", self.mode)))
            }
        }
    }

    fn try_establish(&mut self) -> Result<(), DcgmError> {
        let conn = open_connection(&self.lib, &self.mode, self.interval)?;
        self.rebuild(conn)
    }

    /// Discover on `conn` and build a new session (the old one must already be gone).
    fn rebuild(&mut self, conn: Connection) -> Result<(), DcgmError> {
        let inv = discover::discover(&conn, self.want_links)?;
        let (selected, missing) = inventory::select_present(&self.devices, &inv.slots());
        if !missing.is_empty() {
            tracing::warn!(missing = %missing.join(", "), "devices selected with -d are no longer present");
        }
        self.start_session(conn, &inv, &selected)
    }

    /// The host engine is gone: forget every DCGM object (their ids died with it) and schedule
    /// reconnection.
    fn lose(&mut self, e: &DcgmError) -> SourceError {
        if let Some(s) = self.session.take() {
            s.connection().mark_lost();
        }
        self.retry.lost(Instant::now());
        tracing::warn!(mode = %self.mode, error = %e, "lost the DCGM host engine; series removed until it is back");
        SourceError::Unavailable(format!("{}: {e}", self.mode))
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
                self.rediscover = read.topology_changed;
                self.log_unsupported(newly);
                Ok(Reading {
                    entities: read.entities,
                    driver_version,
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

    fn shutdown(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        // Destroy field groups and groups, then stop the engine / disconnect, then dcgmShutdown.
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
    let mut delay = STARTUP_FIRST_DELAY;
    let mut attempt = 1;
    loop {
        match open_connection(lib, mode, interval) {
            Ok(c) => return Ok(c),
            Err(e) if matches!(mode, Mode::Remote(_)) && attempt < STARTUP_ATTEMPTS && e.connection_lost() => {
                tracing::warn!(%mode, error = %e, attempt, "waiting for nv-hostengine");
                std::thread::sleep(delay);
                delay *= 2;
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

fn log_inventory(inv: &Inventory, selected: &Selected, devices: &DeviceSelection) {
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
    tracing::info!(
        gpus = inv.gpus.len(),
        driver = inv.driver_version.as_deref().unwrap_or("unknown"),
        selection = %devices,
        monitored_gpus = selected.gpus.len(),
        monitored_instances = selected.instances.len(),
        "DCGM inventory"
    );
}

/// Ask DCGM which profiling metrics the first GPU supports; remove the DCP rows it cannot serve, with
/// one warning. Returns the removed rows.
fn probe_profiling(conn: &Connection, inv: &Inventory, counters: &mut CounterSet) -> Vec<Counter> {
    if !counters.rows.iter().any(|c| c.field.is_profiling()) {
        return Vec::new();
    }
    let gpu = inv.gpus.first().map_or(0, |g| g.identity.index);
    let names = |rows: &[Counter]| {
        rows.iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    match conn.profiling_fields(gpu) {
        Ok(supported) => {
            let dropped =
                counters.retain(|c| !c.field.is_profiling() || supported.contains(&c.field.id));
            if !dropped.is_empty() {
                tracing::warn!(skipped = %names(&dropped), "profiling (DCP) metrics not supported by this GPU; rows skipped");
            }
            dropped
        }
        Err(e) => {
            let dropped = counters.retain(|c| !c.field.is_profiling());
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
            tracing::warn!(error = %e, skipped = %names(&dropped), "Not collecting DCP metrics: {hint}");
            dropped
        }
    }
}
