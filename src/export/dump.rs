//! `--dump-*`: dcgm-exporter's debug dump, what a user collects from a misbehaving node. With
//! `--dump-enabled`, every collection's /metrics body (`metrics-<UTC time>-<seq>.prom`) and, whenever it
//! changes, the discovered inventory (`inventory-<UTC time>-<seq>.json`: every monitored entity's
//! identity, the driver, the host) are written into `--dump-directory`, gzip-compressed (`.gz`) unless
//! `--dump-compression=false`. Dump files older than `--dump-retention` hours are removed, at start and
//! hourly (0 keeps them); other files in the directory are never touched.
//!
//! Files are written on a thread of their own, each through a temporary name and a rename, so a reader
//! never sees half a file and a slow disk never delays a collection: a snapshot that arrives while the
//! previous one is still being written is skipped and counted. Off, none of this exists.
//!
//! The directory is private to the exporter's user ([`DumpDir`]: 0700, refused when it is a link, someone
//! else's, or writable by others; files 0600, made exclusively; the sweep removes only its own names and
//! files). The default is [`DEFAULT_DIRECTORY`], not dcgm-exporter's `/tmp/dcgm-exporter-debug`: a fixed
//! name in a world-writable directory is one any local user can take first.

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use clap::{ArgAction, Args};
use serde_json::{json, Value};

use super::dump_dir::DumpDir;
use super::metrics_body::MetricsBody;
use super::prometheus::RenderedBody;
use super::SnapshotConsumer;
use crate::config::flags::parse_go_bool;
use crate::snapshot::Snapshot;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// `--dump-directory`'s default: below the systemd unit's `StateDirectory=dcgm-otel`.
pub const DEFAULT_DIRECTORY: &str = "/var/lib/dcgm-otel/dump";

/// How often old dump files are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// The `--dump-*` flags (dcgm-exporter's names, variables and defaults).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Troubleshooting")]
pub struct DumpArgs {
    /// Write each collection's /metrics body and the discovered inventory as files in --dump-directory.
    #[arg(long = "dump-enabled", env = "DCGM_EXPORTER_DUMP_ENABLED", action = ArgAction::SetTrue)]
    pub dump_enabled: bool,

    /// Where --dump-enabled writes: created with mode 0700 if missing; an existing one must be a directory
    /// (not a symbolic link) of this process's user, not writable by group or others.
    #[arg(
        long = "dump-directory",
        env = "DCGM_EXPORTER_DUMP_DIRECTORY",
        value_name = "DIR",
        default_value = DEFAULT_DIRECTORY
    )]
    pub dump_directory: PathBuf,

    /// Hours a dump file is kept (checked at start and hourly); 0 keeps them all.
    #[arg(
        long = "dump-retention",
        env = "DCGM_EXPORTER_DUMP_RETENTION",
        value_name = "HOURS",
        default_value_t = 24
    )]
    pub dump_retention: u64,

    /// Gzip the dump files.
    #[arg(long = "dump-compression", env = "DCGM_EXPORTER_DUMP_COMPRESSION", value_name = "BOOL",
          default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true,
          value_parser = parse_go_bool)]
    pub dump_compression: bool,
}

/// The dump directory cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("--dump-directory '{path}': {message}")]
pub struct DumpError {
    pub path: String,
    pub message: String,
}

/// One collection to write.
struct Job {
    snapshot: Arc<Snapshot>,
    body: Arc<RenderedBody>,
}

/// The consumer: hands snapshots to the writer thread.
pub struct DumpWriter {
    body: Arc<MetricsBody>,
    compress: bool,
    jobs: SyncSender<Job>,
    skipped: Arc<Metric>,
}

impl DumpWriter {
    /// Create the directory, sweep old files and start the writer thread. `body` makes the /metrics
    /// body (it consumes each snapshot before this writer does).
    pub fn start(
        args: &DumpArgs,
        body: Arc<MetricsBody>,
        self_metrics: &SelfMetrics,
    ) -> Result<DumpWriter, DumpError> {
        let dir = args.dump_directory.clone();
        let shown = dir.display().to_string();
        let fail = |message: String| DumpError {
            path: shown.clone(),
            message,
        };
        let dir = DumpDir::open(&dir).map_err(fail)?;
        dir.probe()
            .map_err(|e| fail(format!("cannot write in it: {e}")))?;
        let files = self_metrics.counter(
            "dcgm_otel_dump_files_total",
            "Debug dump files written (--dump-enabled).",
            &[],
        );
        let errors = self_metrics.counter(
            "dcgm_otel_dump_errors_total",
            "Debug dump files that could not be written or removed.",
            &[],
        );
        let skipped = self_metrics.counter(
            "dcgm_otel_dump_skipped_total",
            "Collections not dumped because the previous one was still being written.",
            &[],
        );
        let writer = Writer {
            dir,
            shown: shown.clone(),
            compress: args.dump_compression,
            retention: (args.dump_retention > 0)
                .then(|| Duration::from_secs(args.dump_retention.saturating_mul(3600))),
            files,
            errors,
            last_inventory: None,
            warned: false,
        };
        let (jobs, rx) = sync_channel(1);
        std::thread::Builder::new()
            .name("dump".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| fail(format!("cannot start its writer thread: {e}")))?;
        tracing::info!(directory = %args.dump_directory.display(), compression = args.dump_compression, retention_hours = args.dump_retention, "debug dump on: every collection's /metrics body and the inventory are written as files");
        Ok(DumpWriter {
            body,
            compress: args.dump_compression,
            jobs,
            skipped,
        })
    }
}

impl SnapshotConsumer for DumpWriter {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>) {
        let job = Job {
            snapshot: snapshot.clone(),
            // Every collection is dumped: its body is made here, on the collector thread.
            body: self.body.make(self.compress),
        };
        match self.jobs.try_send(job) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => self.skipped.inc(),
        }
    }
}

struct Writer {
    dir: DumpDir,
    /// The directory as given, for log lines.
    shown: String,
    compress: bool,
    retention: Option<Duration>,
    files: Arc<Metric>,
    errors: Arc<Metric>,
    /// The inventory last written, to write it again only when it changes.
    last_inventory: Option<Value>,
    /// Whether a failure was logged at warn level (later ones go to debug).
    warned: bool,
}

impl Writer {
    fn run(mut self, jobs: Receiver<Job>) {
        let mut next_sweep = Instant::now();
        while let Ok(job) = jobs.recv() {
            if let Some(keep) = self.retention {
                if Instant::now() >= next_sweep {
                    self.sweep(keep);
                    next_sweep = Instant::now() + SWEEP_EVERY;
                }
            }
            self.write(&job);
        }
    }

    fn write(&mut self, job: &Job) {
        let stamp = utc_stamp(job.snapshot.taken_at);
        let seq = job.snapshot.seq;
        // The gzip copy was made with the body; empty only when compressing failed.
        let (metrics, gzipped) = if self.compress && !job.body.gzip.is_empty() {
            (job.body.gzip.to_vec(), true)
        } else {
            (job.body.text.to_vec(), false)
        };
        let name = format!(
            "metrics-{stamp}-{seq}.prom{}",
            if gzipped { ".gz" } else { "" }
        );
        self.put(&name, &metrics);
        let inventory = inventory(&job.snapshot);
        if self.last_inventory.as_ref() != Some(&inventory) {
            let mut text = serde_json::to_vec_pretty(&inventory).unwrap_or_default();
            text.push(b'\n');
            let name = format!("inventory-{stamp}-{seq}.json");
            if self.compress {
                match gzip(&text) {
                    Ok(z) => self.put(&format!("{name}.gz"), &z),
                    Err(e) => self.failed(&name, &e),
                }
            } else {
                self.put(&name, &text);
            }
            self.last_inventory = Some(inventory);
        }
    }

    /// Write `name` through a temporary file and a rename.
    fn put(&mut self, name: &str, bytes: &[u8]) {
        match self.dir.put(name, bytes) {
            Ok(()) => self.files.inc(),
            Err(e) => self.failed(name, &e),
        }
    }

    fn failed(&mut self, name: &str, e: &std::io::Error) {
        self.errors.inc();
        if self.warned {
            tracing::debug!(file = name, error = %e, "debug dump: cannot write");
        } else {
            self.warned = true;
            tracing::warn!(directory = %self.shown, file = name, error = %e, "debug dump: cannot write (counted in dcgm_otel_dump_errors_total; further failures are logged at debug level)");
        }
    }

    /// Remove dump files (by name, regular files of this user) last modified more than `keep` ago.
    fn sweep(&mut self, keep: Duration) {
        for (name, e) in self.dir.sweep(keep) {
            self.failed(&name, &e);
        }
    }
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(bytes)?;
    z.finish()
}

/// What the source found: the host, the driver, every monitored entity's identity and who uses it.
fn inventory(s: &Snapshot) -> Value {
    let entities: Vec<Value> = s
        .entities
        .iter()
        .map(|r| {
            let e = &r.entity;
            let mut v = json!({ "kind": format!("{:?}", e.kind), "entity_id": e.entity_id });
            if let Some(g) = &e.gpu {
                v["gpu"] = json!({
                    "index": g.index, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id,
                    "model": g.model, "serial": g.serial, "vbios": g.vbios,
                });
            }
            if let Some(m) = &e.mig {
                v["mig"] = json!({
                    "entity_id": m.entity_id, "gi_id": m.gi_id, "profile": m.profile, "uuid": m.uuid,
                });
            }
            if let Some(link) = e.link {
                v["link"] = json!(link);
            }
            if let Some(switch) = e.nvswitch {
                v["nvswitch"] = json!(switch);
            }
            if let Some(c) = &e.cpu {
                v["cpu"] = json!({ "index": c.index, "serial": c.serial });
            }
            v
        })
        .collect();
    json!({
        "hostname": s.host.hostname,
        "driver_version": s.driver_version,
        "entities": entities,
    })
}

/// `YYYYMMDD-HHMMSS` in UTC.
fn utc_stamp(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_date(days);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (era arithmetic: 400-year cycles of 146,097
/// days, years counted from March so that the leap day ends the year).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468; // days since 0000-03-01
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_utc_calendar_times() {
        let at = |s: u64| utc_stamp(SystemTime::UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "19700101-000000");
        assert_eq!(at(951_782_400), "20000229-000000");
        assert_eq!(at(1_709_210_096), "20240229-123456");
        assert_eq!(at(4_102_444_799), "20991231-235959");
    }
}
