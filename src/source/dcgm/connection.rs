//! Reaching the host engine and building what reads it: the first connection at start-up, every
//! reconnection after an outage, and every rebuild on a running connection (a GPU vanished, GPUs
//! came back, profiling came back, the counters were reloaded) go through the same steps —
//! connect, discover, compare with the node's GPUs, ask about profiling, decide the rows, select,
//! watch ([`DcgmSource::rebuild`]).
//!
//! Start-up does not wait for the host engine: when the first attempt fails the source starts
//! without a connection and the collections try again on the schedule of [`super::reconnect`];
//! until one succeeds `/health` is 200 and `/ready` 503 with the reason (the error of the last
//! attempt). Only bad input stops start-up: a `-d`/`-s`/`-p` that names devices DCGM does not have
//! (exit code 2), checked at the first connection when it succeeds at once and DCGM reports every
//! GPU of the node.

use std::time::Instant;

use super::client::{Connection, DcgmError};
use super::discover;
use super::profiling::{self, Answer};
use super::reconnect::Say;
use super::session::{RowPlan, Session, WatchConfig};
use super::{DcgmSource, Mode};
use crate::config::devices::DeviceError;
use crate::counters::exporter::IncidentReads;
use crate::snapshot::inventory::{Inventory, Selection, Wanted};
use crate::source::SourceError;

/// Why a connection or rebuild did not happen.
pub enum Failed {
    /// DCGM failed (a refused connection, a failed call): tried again later.
    Dcgm(DcgmError),
    /// The first connection found that `-d`/`-s`/`-p` name absent devices: bad input.
    Devices(DeviceError),
}

impl From<DcgmError> for Failed {
    fn from(e: DcgmError) -> Self {
        Failed::Dcgm(e)
    }
}

/// How a selection that names absent devices is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selecting {
    /// At the first connection: an error (exit code 2).
    Strict,
    /// Later (the devices may be gone for good): a warning, the present ones are read.
    Present,
}

impl DcgmSource {
    /// The first attempt, at start-up. `Err` only for bad input; a host engine that does not answer
    /// leaves the source waiting for the collections to try again.
    pub(super) fn first_connection(&mut self) -> Result<(), DeviceError> {
        let now = Instant::now();
        self.retry.lost(now);
        match self.establish(Selecting::Strict) {
            Ok(()) => {
                self.retry.succeeded();
                Ok(())
            }
            Err(Failed::Devices(e)) => Err(e),
            Err(Failed::Dcgm(e)) => {
                self.retry.failed(now, format!("{}: {e}", self.mode));
                tracing::warn!(
                    mode = %self.mode,
                    error = %e,
                    hint = self.mode.hint(),
                    "cannot reach DCGM at start-up; serving /health (200) and /ready (503 with the reason) while retrying (every second at first, then every collection)"
                );
                Ok(())
            }
        }
    }

    /// Connect, then rebuild on the new connection (asking about profiling again).
    fn establish(&mut self, selecting: Selecting) -> Result<(), Failed> {
        let conn = open_connection(&self.lib, &self.mode, self.interval)?;
        self.rebuild(conn, selecting, true)?;
        self.start_bind_watch();
        Ok(())
    }

    /// Reconnect (when due), rediscover and rebuild the watches.
    pub(super) fn reconnect(&mut self) -> Result<(), SourceError> {
        let now = Instant::now();
        if !self.retry.due(now) {
            self.arm_retry();
            return Err(SourceError::Unavailable(self.retry.waiting(now)));
        }
        match self.establish(Selecting::Present) {
            Ok(()) => {
                let down = self.retry.succeeded();
                tracing::info!(
                    mode = %self.mode,
                    down_s = down.map_or(0.0, |d| d.as_secs_f64()),
                    entities = self.session.as_ref().map_or(0, |s| s.entities().len()),
                    "DCGM connection established"
                );
                Ok(())
            }
            Err(Failed::Devices(e)) => Err(SourceError::Failed(e.to_string())),
            Err(Failed::Dcgm(e)) => {
                let message = format!("{}: {e}", self.mode);
                match self.retry.failed(now, message.clone()) {
                    Say::First => {
                        tracing::warn!(mode = %self.mode, error = %e, hint = self.mode.hint(), "cannot reach DCGM; retrying (every second at first, then every collection)")
                    }
                    Say::Reminder => tracing::warn!(
                        mode = %self.mode,
                        error = %e,
                        attempts = self.retry.attempts,
                        down_s = self.retry.down_for(now).as_secs(),
                        "still cannot reach DCGM; retrying at every collection"
                    ),
                    Say::Quiet => {
                        tracing::debug!(mode = %self.mode, error = %e, attempt = self.retry.attempts, "connection attempt failed")
                    }
                }
                self.arm_retry();
                Err(SourceError::Unavailable(message))
            }
        }
    }

    /// Discover on `conn` and build a new session (the old one must already be gone): compare the
    /// GPUs with the node's, ask about profiling (`reprobe`: always; otherwise only while no answer
    /// was had: pending, or never asked because the previous counters had no DCP row), decide the rows, select, watch. A DCP watch DCGM refuses takes the DCP rows out
    /// and the session is built again without them.
    pub(super) fn rebuild(
        &mut self,
        conn: Connection,
        selecting: Selecting,
        reprobe: bool,
    ) -> Result<(), Failed> {
        let inv = discover::discover(&conn, Wanted::from_counters(&self.full))?;
        self.blind.discovered(inv.gpus.len(), Instant::now());
        if reprobe || matches!(self.profiling.answer(), Answer::Pending | Answer::NotAsked) {
            let first_gpu = inv.gpus.first().map(|g| g.identity.index);
            self.profiling.probe(&conn, first_gpu, &self.full);
        }
        self.apply_counters();
        // A selection of absent devices is bad input at start-up, unless DCGM is missing GPUs the
        // node has (then the devices may yet come).
        let selecting = match self.blind.reason() {
            Some(_) => Selecting::Present,
            None => selecting,
        };
        let selection = self.select(&inv, selecting)?;
        if !self.ever_connected {
            self.ever_connected = true;
            log_inventory(&inv, &selection, &self.selectors);
        }
        if let Some(e) = self.start_session(conn, &inv, &selection)? {
            self.profiling.watch_failed(&e);
            self.apply_counters();
            if let Some(s) = self.session.take() {
                let conn = s.connection().clone();
                drop(s);
                self.start_session(conn, &inv, &selection)?;
            }
        }
        Ok(())
    }

    fn select(&self, inv: &Inventory, selecting: Selecting) -> Result<Selection, Failed> {
        match selecting {
            Selecting::Strict => inv
                .select(&self.selectors, self.wanted)
                .map_err(Failed::Devices),
            Selecting::Present => {
                let (selection, missing) = inv.select_present(&self.selectors, self.wanted);
                if !missing.is_empty() {
                    tracing::warn!(missing = %missing.join(", "), "devices selected with -d, -s or -p are not present");
                }
                Ok(selection)
            }
        }
    }

    /// The rows read from now on: the full counters less what profiling cannot serve (one warning
    /// per change of the rows left out).
    pub(super) fn apply_counters(&mut self) {
        let (set, dropped) = self.profiling.filter(&self.full);
        if profiling::names(&dropped) != profiling::names(&self.dropped) && !dropped.is_empty() {
            match self.profiling.answer() {
                Answer::Unavailable { detail, .. } => tracing::warn!(
                    skipped = %profiling::names(&dropped),
                    "Not collecting DCP metrics: {detail}; asking again after every reconnection and every {} minutes",
                    profiling::REPROBE_EVERY.as_secs() / 60
                ),
                _ => {
                    tracing::warn!(skipped = %profiling::names(&dropped), "profiling (DCP) metrics not supported by this GPU; rows skipped")
                }
            }
        }
        self.dropped = dropped;
        self.incident_reads = IncidentReads::of(&set.exporter_rows).union(self.event_reads);
        self.rows = RowPlan::new(&set);
        self.wanted = Wanted::from_counters(&set);
        self.effective = set;
    }

    /// Watch `selection` on `conn`: the session with its incident and distribution watches. Returns
    /// the error of a DCP watch DCGM refused, if one was.
    fn start_session(
        &mut self,
        conn: Connection,
        inv: &Inventory,
        selection: &Selection,
    ) -> Result<Option<DcgmError>, DcgmError> {
        self.conn_seq += 1;
        let cfg = WatchConfig {
            name_prefix: format!("dcgm-otel-{}-{}", std::process::id(), self.conn_seq),
            interval: self.interval,
            group_max_entities: self.lib.group_max_entities(),
        };
        let mut established = Session::establish(conn, inv, selection, &self.rows, &cfg)?;
        self.watch_incidents(&mut established.session, &cfg)?;
        self.watch_distributions(&mut established.session, &cfg)?;
        if let Some(e) = &established.profiling_watch_error {
            tracing::debug!(error = %e, "cannot watch profiling (DCP) fields");
        }
        tracing::debug!(
            entities = established.session.entities().len(),
            "DCGM watches in place"
        );
        self.session = Some(established.session);
        Ok(established.profiling_watch_error)
    }

    /// The host engine is gone: forget every DCGM object (their ids died with it) and schedule
    /// reconnection.
    pub(super) fn lose(&mut self, e: &DcgmError) -> SourceError {
        if let Some(s) = self.session.take() {
            s.connection().mark_lost();
        }
        self.bind = None;
        self.profiling.disconnected();
        self.retry.lost(Instant::now());
        tracing::warn!(mode = %self.mode, error = %e, "lost the DCGM host engine; series removed until it is back");
        SourceError::Unavailable(format!("{}: {e}", self.mode))
    }

    /// Rebuild on the running connection (an entity vanished, GPUs may have come back, profiling
    /// answers differently): `Err` is what the poll returns.
    pub(super) fn rebuild_in_place(&mut self, why: &str) -> Result<(), SourceError> {
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        let conn = s.connection().clone();
        drop(s);
        tracing::info!("{why}; rebuilding the DCGM watches from a fresh discovery");
        match self.rebuild(conn, Selecting::Present, false) {
            Ok(()) => Ok(()),
            Err(Failed::Dcgm(e)) if e.connection_lost() => Err(self.lose(&e)),
            Err(Failed::Dcgm(e)) => {
                self.retry.lost(Instant::now());
                Err(SourceError::Unavailable(e.to_string()))
            }
            Err(Failed::Devices(e)) => Err(SourceError::Failed(e.to_string())),
        }
    }
}

impl Mode {
    /// What a failing connection usually needs.
    fn hint(&self) -> &'static str {
        match self {
            Mode::Embedded => "the embedded host engine needs the NVIDIA driver loaded and root access to /dev/nvidia*",
            Mode::Remote(_) => "is nv-hostengine (the nvidia-dcgm service or pod) running and listening there?",
        }
    }
}

fn open_connection(
    lib: &super::client::Library,
    mode: &Mode,
    interval: std::time::Duration,
) -> Result<Connection, DcgmError> {
    match mode {
        Mode::Embedded => lib.start_embedded(),
        Mode::Remote(target) => lib.connect(
            target,
            interval.clamp(
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(5),
            ),
        ),
    }
}

fn log_inventory(
    inv: &Inventory,
    selection: &Selection,
    selectors: &crate::config::devices::Selectors,
) {
    if inv.gpus.is_empty() {
        tracing::warn!("DCGM reports no supported GPU; no GPU series will be served");
    }
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
