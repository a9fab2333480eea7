//! The enrichers' construction, in the order they run: the `DCGM_EXP_*` stage first (its families
//! follow the DCGM ones, as in dcgm-exporter), then Kubernetes (`-k`), HPC jobs (`--hpc-job-mapping-dir`)
//! and containers (`--container-labels`), then the MIG roll-up (always: one utilization per GPU in MIG
//! mode, after every stage that attributes). Resolved from their flags without side effects; started
//! with the self-metrics.

use std::path::PathBuf;

use crate::enrich::containers::{ContainerArgs, ContainerEnricher};
use crate::enrich::exp::args::ExpArgs;
use crate::enrich::exp::ExpStage;
use crate::enrich::hpc::{HpcArgs, HpcEnricher};
use crate::enrich::kubernetes::args::KubernetesArgs;
use crate::enrich::kubernetes::plan::{flags_needing_k, KubernetesPlan, SimulatedPods};
use crate::enrich::mig_rollup::MigRollup;
use crate::enrich::Enricher;
use crate::startup::{ResolveContext, StartContext, StartError};

/// The flag groups the enrichers are resolved from.
pub struct EnrichFlags<'a> {
    pub exp: &'a ExpArgs,
    pub kubernetes: &'a KubernetesArgs,
    /// `-k` (or its variable) was given explicitly, on or off.
    pub kubernetes_explicit: bool,
    pub hpc: &'a HpcArgs,
    pub containers: &'a ContainerArgs,
    /// `--proc-root`: the host's /proc (processes' pods and containers from their cgroup).
    pub proc_root: &'a std::path::Path,
}

/// The enrichers, resolved and not started.
pub struct EnrichPlan {
    exp: ExpArgs,
    kubernetes: Option<KubernetesPlan>,
    /// Kubernetes flags given without `-k` (said once at start).
    ignored_kubernetes_flags: Vec<&'static str>,
    hpc: Option<PathBuf>,
    /// `--container-labels`' socket, and whether `-k` overrides it.
    containers: Option<(PathBuf, bool)>,
    proc_root: PathBuf,
}

impl EnrichPlan {
    pub fn resolve(
        flags: &EnrichFlags<'_>,
        simulated: Option<SimulatedPods<'_>>,
        ctx: &ResolveContext<'_>,
    ) -> Result<EnrichPlan, StartError> {
        let containers = flags
            .containers
            .socket()
            .map_err(StartError::input)?
            .map(|s| (s.to_path_buf(), flags.kubernetes.kubernetes));
        let kubernetes =
            KubernetesPlan::resolve(flags.kubernetes, flags.kubernetes_explicit, simulated, ctx)?;
        let ignored_kubernetes_flags = match kubernetes {
            Some(_) => Vec::new(),
            None => flags_needing_k(flags.kubernetes),
        };
        Ok(EnrichPlan {
            exp: flags.exp.clone(),
            kubernetes,
            ignored_kubernetes_flags,
            hpc: flags.hpc.dir().map(|d| d.to_path_buf()),
            containers,
            proc_root: flags.proc_root.to_path_buf(),
        })
    }

    /// The enrichers in the order they run.
    pub fn start(self, ctx: &StartContext<'_>) -> Result<Vec<Box<dyn Enricher>>, StartError> {
        if !self.ignored_kubernetes_flags.is_empty() {
            tracing::warn!(flags = %self.ignored_kubernetes_flags.join(" "), "these Kubernetes flags have no effect without -k/--kubernetes");
        }
        let mut enrichers: Vec<Box<dyn Enricher>> = Vec::new();
        // It counts the incidents and writes the families the counters CSV lists (none: it writes
        // nothing).
        enrichers.push(Box::new(ExpStage::new(&self.exp, ctx.self_metrics)));
        if let Some(k) = self.kubernetes {
            enrichers.push(Box::new(k.start(self.proc_root.clone(), ctx)?));
        }
        if let Some(dir) = self.hpc {
            enrichers.push(Box::new(HpcEnricher::new(dir, ctx.self_metrics)));
        }
        match self.containers {
            Some((_, true)) => tracing::warn!("--container-labels is ignored with -k/--kubernetes: pods and containers come from the kubelet"),
            Some((socket, false)) => {
                let containers = ContainerEnricher::new(socket, self.proc_root, ctx.self_metrics)
                    .map_err(|e| {
                        StartError::environment(format!(
                            "cannot start the container-runtime thread: {e}"
                        ))
                    })?;
                enrichers.push(Box::new(containers));
            }
            None => {}
        }
        enrichers.push(Box::new(MigRollup));
        Ok(enrichers)
    }
}
