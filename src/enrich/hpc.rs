//! HPC job attribution (`--hpc-job-mapping-dir`): a batch scheduler's prolog/epilog writes, for each
//! GPU in use, a file named after the GPU, one job id per line; series of that GPU get one `hpc_job`
//! label per job, as dcgm-exporter does.
//!
//! File names are `<gpu index>` (a whole GPU) or `<gpu index>.<GPU_I_ID>` (one MIG instance); anything
//! else in the directory is ignored. A MIG instance takes the jobs of its own file, or, when it has
//! none, those of its GPU's file (a job given a whole MIG-partitioned GPU uses all its instances).
//! NvLink series take the jobs of their GPU's file. Job ids are trimmed; blank lines and duplicates are
//! skipped.
//!
//! Whoever can write the directory decides labels on the unauthenticated `/metrics`, so what is read is
//! bounded ([`crate::local_file`]): a job file is opened without following a symbolic link and
//! without blocking, and read only when it is a regular file of at most [`MAX_FILE_BYTES`] (a link to a
//! root-only file, a FIFO or a device is refused, never read); a job id is 1 to [`MAX_JOB_ID_BYTES`]
//! characters of [`job_id_ok`]'s set, at most [`MAX_JOBS_PER_FILE`] per file; at most
//! [`MAX_FILES`] job files are read per interval. What is refused is counted
//! (`dcgm_otel_hpc_job_files_refused_total`, `dcgm_otel_hpc_job_ids_refused_total`) and its first
//! occurrence logged.
//!
//! The directory is read once per collect interval on the collector thread (never on a scrape), so a
//! job that starts or ends shows up within one interval. A missing or unreadable directory is logged
//! once and leaves series without jobs; the exporter keeps running and picks the directory up when it
//! appears.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Enricher;
use crate::local_file::{self, Links, LocalFileError};
use crate::snapshot::attribution::{self, Attribute};
use crate::snapshot::{EntityKind, EntityReading};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Largest job file read (bytes); a larger file is refused.
pub const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Longest job id (bytes).
pub const MAX_JOB_ID_BYTES: usize = 64;
/// Job ids read from one file at most; later ones are refused.
pub const MAX_JOBS_PER_FILE: usize = 32;
/// Job files read per interval at most (names that parse as a GPU or MIG target).
pub const MAX_FILES: usize = 1024;

/// A job file's target: a GPU index and, for a MIG instance, its GPU-instance id.
pub type JobTarget = (u32, Option<u32>);

/// Parse a job file name: `^\d+(\.\d+)?$`.
pub fn parse_file_name(name: &str) -> Option<JobTarget> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match name.split_once('.') {
        None if digits(name) => name.parse().ok().map(|g| (g, None)),
        Some((g, i)) if digits(g) && digits(i) => Some((g.parse().ok()?, Some(i.parse().ok()?))),
        _ => None,
    }
}

/// Whether `id` may become an `hpc_job` value: 1 to [`MAX_JOB_ID_BYTES`] bytes of ASCII letters, digits
/// and `_ . - + : @ [ ]` (Slurm `123_4` and `123+0`, PBS `123.server`, LSF `123[4]`).
pub fn job_id_ok(id: &str) -> bool {
    (1..=MAX_JOB_ID_BYTES).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-+:@[]".contains(&b))
}

/// Job ids of one file's text: trimmed, non-empty, first occurrence kept; ids outside [`job_id_ok`] or
/// past [`MAX_JOBS_PER_FILE`] are left out and counted in the second value.
pub fn parse_jobs(text: &str) -> (Vec<String>, u64) {
    let mut jobs: Vec<String> = Vec::new();
    let mut refused = 0u64;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if jobs.iter().any(|j| j == line) {
            continue;
        }
        if !job_id_ok(line) || jobs.len() >= MAX_JOBS_PER_FILE {
            refused += 1;
            continue;
        }
        jobs.push(line.to_string());
    }
    (jobs, refused)
}

/// One read of the directory.
#[derive(Debug, Default)]
pub struct JobFiles {
    pub jobs: HashMap<JobTarget, Vec<String>>,
    /// Files not read: a link, not a regular file, too large, unreadable, or past [`MAX_FILES`].
    pub files_refused: u64,
    /// Job ids left out ([`parse_jobs`]).
    pub ids_refused: u64,
    /// The first refused file and why, for the log.
    pub first_refusal: Option<String>,
}

/// Read the directory: jobs by target.
pub fn read_dir(dir: &Path) -> std::io::Result<JobFiles> {
    let mut out = JobFiles::default();
    let mut read = 0usize;
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(target) = name.to_str().and_then(parse_file_name) else {
            continue;
        };
        let path = entry.path();
        if read >= MAX_FILES {
            out.refuse(&path, &format!("more than {MAX_FILES} job files"));
            continue;
        }
        read += 1;
        match local_file::read_text(&path, MAX_FILE_BYTES, Links::Refuse) {
            Ok(text) => {
                let (jobs, refused) = parse_jobs(&text);
                out.ids_refused += refused;
                if !jobs.is_empty() {
                    out.jobs.insert(target, jobs);
                }
            }
            Err(LocalFileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => out.refuse(&path, &e.to_string()),
        }
    }
    Ok(out)
}

impl JobFiles {
    fn refuse(&mut self, path: &Path, why: &str) {
        self.files_refused += 1;
        if self.first_refusal.is_none() {
            self.first_refusal = Some(format!("{}: {why}", path.display()));
        }
    }
}

/// Attribute entities from a job map: one series per job of the entity's GPU (or MIG instance).
pub fn apply(jobs: &HashMap<JobTarget, Vec<String>>, entities: &mut [EntityReading]) {
    for e in entities {
        // NvSwitches and CPUs belong to no job.
        let Some(gpu) = e.entity.gpu_index() else {
            continue;
        };
        let found = match (e.entity.kind, &e.entity.mig) {
            (EntityKind::GpuInstance, Some(m)) => jobs
                .get(&(gpu, Some(m.gi_id)))
                .or_else(|| jobs.get(&(gpu, None))),
            _ => jobs.get(&(gpu, None)),
        };
        if let Some(list) = found.filter(|l| !l.is_empty()) {
            let alternatives: Vec<Vec<Attribute>> = list
                .iter()
                .map(|job| vec![Attribute::new(&attribution::HPC_JOB, job.as_str())])
                .collect();
            Arc::make_mut(&mut e.attribution).split(&alternatives);
        }
    }
}

/// The HPC job flag (`Kubernetes` in `--help`, as dcgm-exporter groups it).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Kubernetes")]
// The field docs are --help text, not rustdoc: `<gpu>` is meant literally.
#[allow(rustdoc::invalid_html_tags)]
pub struct HpcArgs {
    /// Directory of HPC job files named <gpu> or <gpu>.<GPU_I_ID>, one job id per line (hpc_job label).
    #[arg(
        long = "hpc-job-mapping-dir",
        env = "DCGM_HPC_JOB_MAPPING_DIR",
        value_name = "DIR"
    )]
    pub hpc_job_mapping_dir: Option<PathBuf>,
}

impl HpcArgs {
    /// The directory, when one is given (empty means none).
    pub fn dir(&self) -> Option<&Path> {
        self.hpc_job_mapping_dir
            .as_deref()
            .filter(|d| !d.as_os_str().is_empty())
    }
}

/// The HPC job enricher.
pub struct HpcEnricher {
    dir: PathBuf,
    /// The directory could not be read at the last attempt (logged once per outage).
    failing: bool,
    errors: Arc<Metric>,
    jobs_gauge: Arc<Metric>,
    files_refused: Arc<Metric>,
    ids_refused: Arc<Metric>,
    /// Whether a refused file or job id was logged at warn level (later ones go to debug).
    warned: bool,
}

impl HpcEnricher {
    pub fn new(dir: PathBuf, registry: &SelfMetrics) -> HpcEnricher {
        if !dir.is_dir() {
            tracing::warn!(dir = %dir.display(), "--hpc-job-mapping-dir is not a readable directory (yet); series carry no hpc_job label until it is");
        } else {
            tracing::info!(dir = %dir.display(), "HPC job mapping on: the directory is read once per collect interval");
        }
        HpcEnricher {
            failing: !dir.is_dir(),
            dir,
            errors: registry.counter(
                "dcgm_otel_hpc_job_dir_errors_total",
                "Collect intervals in which the --hpc-job-mapping-dir directory could not be read.",
                &[],
            ),
            jobs_gauge: registry.gauge(
                "dcgm_otel_hpc_jobs",
                "Distinct HPC job ids found in the job mapping directory at the last read.",
                &[],
            ),
            files_refused: registry.counter(
                "dcgm_otel_hpc_job_files_refused_total",
                "HPC job files not read (a symbolic link, not a regular file, over 64 KiB, unreadable, or past 1024 files), per read of the directory.",
                &[],
            ),
            ids_refused: registry.counter(
                "dcgm_otel_hpc_job_ids_refused_total",
                "HPC job ids left out (characters outside A-Z a-z 0-9 _ . - + : @ [ ], longer than 64, or past 32 per file), per read of the directory.",
                &[],
            ),
            warned: false,
        }
    }
}

impl HpcEnricher {
    /// Count what one read refused; the first refusal is a warning, later ones debug lines.
    fn count_refusals(&mut self, found: &JobFiles) {
        self.files_refused.add(found.files_refused as f64);
        self.ids_refused.add(found.ids_refused as f64);
        if found.files_refused == 0 && found.ids_refused == 0 {
            return;
        }
        let file = found.first_refusal.as_deref().unwrap_or("-");
        if self.warned {
            tracing::debug!(
                files = found.files_refused,
                job_ids = found.ids_refused,
                first = file,
                "HPC job files or ids refused"
            );
        } else {
            self.warned = true;
            tracing::warn!(dir = %self.dir.display(), files = found.files_refused, job_ids = found.ids_refused, first = file, "HPC job files or ids refused: only regular files (no symbolic link, FIFO or device) of at most 64 KiB are read, job ids are 1-64 characters of A-Z a-z 0-9 _ . - + : @ [ ], at most 32 per file (counted in dcgm_otel_hpc_job_files_refused_total and dcgm_otel_hpc_job_ids_refused_total; further refusals are logged at debug level)");
        }
    }
}

impl Enricher for HpcEnricher {
    fn name(&self) -> &'static str {
        "hpc"
    }

    fn enrich(&mut self, entities: &mut [EntityReading]) {
        match read_dir(&self.dir) {
            Ok(found) => {
                if self.failing {
                    tracing::info!(dir = %self.dir.display(), "HPC job mapping directory readable; hpc_job labels on");
                    self.failing = false;
                }
                self.count_refusals(&found);
                let mut distinct: Vec<&String> = found.jobs.values().flatten().collect();
                distinct.sort();
                distinct.dedup();
                self.jobs_gauge.set(distinct.len() as f64);
                apply(&found.jobs, entities);
            }
            Err(e) => {
                self.errors.inc();
                self.jobs_gauge.set(0.0);
                if !self.failing {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "HPC job mapping directory unreadable; series carry no hpc_job label until it is back");
                    self.failing = true;
                }
                apply(&HashMap::new(), entities);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Attribution, Entity, GpuIdentity, MigIdentity};

    #[test]
    fn file_names() {
        assert_eq!(parse_file_name("0"), Some((0, None)));
        assert_eq!(parse_file_name("12.3"), Some((12, Some(3))));
        for bad in [
            "",
            "a",
            "1.",
            ".1",
            "1.2.3",
            "1a",
            "-1",
            "1.x",
            "99999999999",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn jobs_are_trimmed_and_deduplicated() {
        assert_eq!(
            parse_jobs(" 42 \n\n43\r\n42\n"),
            (vec!["42".to_string(), "43".to_string()], 0)
        );
    }

    #[test]
    fn job_ids_keep_to_a_safe_set_and_length() {
        for ok in [
            "12345",
            "123_4",
            "123+0",
            "123.pbs-server",
            "1234[5]",
            "a@b:c",
        ] {
            assert!(job_id_ok(ok), "{ok}");
        }
        let long = "9".repeat(MAX_JOB_ID_BYTES + 1);
        for bad in ["", "a b", "x\"y", "job}", "é", "a\u{7f}", long.as_str()] {
            assert!(!job_id_ok(bad), "{bad:?}");
        }
        let many: String = (0..40).map(|i| format!("{i}\n")).collect();
        let (jobs, refused) = parse_jobs(&many);
        assert_eq!((jobs.len(), refused), (MAX_JOBS_PER_FILE, 8));
        assert_eq!(parse_jobs("ok\nnot ok\n").1, 1);
    }

    fn reading(entity: Entity) -> EntityReading {
        EntityReading {
            entity: Arc::new(entity),
            values: crate::snapshot::EntityValues::none(),
            attribution: Arc::new(Attribution::default()),
        }
    }

    #[test]
    fn directory_to_entities() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("0"), "job-a\njob-b\n").unwrap();
        std::fs::write(dir.path().join("1.3"), "job-c\n").unwrap();
        std::fs::write(dir.path().join("2"), "job-d\n").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored\n").unwrap();
        let jobs = read_dir(dir.path()).unwrap().jobs;
        let gpu = |index: u32| Arc::new(GpuIdentity::bare(index));
        let mig = |gi: u32| {
            Arc::new(MigIdentity {
                entity_id: gi,
                gi_id: gi,
                profile: "p".into(),
                uuid: "MIG-x".into(),
            })
        };
        let mut entities = vec![
            reading(Entity::gpu(gpu(0))),
            reading(Entity::nvlink(gpu(0), 0, 1)),
            reading(Entity::instance(gpu(1), mig(3))),
            reading(Entity::instance(gpu(1), mig(4))),
            reading(Entity::instance(gpu(2), mig(1))),
            reading(Entity::gpu(gpu(3))),
        ];
        apply(&jobs, &mut entities);
        let got: Vec<Vec<String>> = entities
            .iter()
            .map(|e| {
                e.attribution
                    .sets()
                    .flat_map(|set| set.iter().map(|a| a.value.to_string()))
                    .collect()
            })
            .collect();
        assert_eq!(
            got,
            vec![
                vec!["job-a".to_string(), "job-b".to_string()],
                vec!["job-a".to_string(), "job-b".to_string()],
                vec!["job-c".to_string()],
                vec![],
                vec!["job-d".to_string()],
                vec![],
            ]
        );
    }
}
