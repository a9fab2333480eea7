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
//! The directory is read once per collect interval on the collector thread (never on a scrape), so a
//! job that starts or ends shows up within one interval. A missing or unreadable directory is logged
//! once and leaves series without jobs; the exporter keeps running and picks the directory up when it
//! appears.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Enricher;
use crate::snapshot::attribution::{self, Attribute};
use crate::snapshot::{EntityKind, EntityReading};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Largest job file read (bytes); longer files are truncated at this size.
const MAX_FILE_BYTES: u64 = 64 * 1024;

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

/// Job ids of one file's text: trimmed, non-empty, first occurrence kept.
pub fn parse_jobs(text: &str) -> Vec<String> {
    let mut jobs: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !jobs.iter().any(|j| j == line) {
            jobs.push(line.to_string());
        }
    }
    jobs
}

/// Read the directory: jobs by target.
pub fn read_dir(dir: &Path) -> std::io::Result<HashMap<JobTarget, Vec<String>>> {
    use std::io::Read as _;
    let mut out = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(target) = name.to_str().and_then(parse_file_name) else {
            continue;
        };
        let mut text = String::new();
        let read = std::fs::File::open(entry.path())
            .and_then(|f| f.take(MAX_FILE_BYTES).read_to_string(&mut text));
        match read {
            Ok(_) => {
                let jobs = parse_jobs(&text);
                if !jobs.is_empty() {
                    out.insert(target, jobs);
                }
            }
            Err(e) => {
                tracing::debug!(file = %entry.path().display(), error = %e, "HPC job file unreadable; skipped")
            }
        }
    }
    Ok(out)
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
        }
    }
}

impl Enricher for HpcEnricher {
    fn name(&self) -> &'static str {
        "hpc"
    }

    fn enrich(&mut self, entities: &mut [EntityReading]) {
        match read_dir(&self.dir) {
            Ok(jobs) => {
                if self.failing {
                    tracing::info!(dir = %self.dir.display(), "HPC job mapping directory readable; hpc_job labels on");
                    self.failing = false;
                }
                let mut distinct: Vec<&String> = jobs.values().flatten().collect();
                distinct.sort();
                distinct.dedup();
                self.jobs_gauge.set(distinct.len() as f64);
                apply(&jobs, entities);
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
        assert_eq!(parse_jobs(" 42 \n\n43\r\n42\n"), ["42", "43"]);
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
        let jobs = read_dir(dir.path()).unwrap();
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
