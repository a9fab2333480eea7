//! The Kubernetes enricher's own construction (`-k`): on with `-k`, and by itself on a simulated fleet
//! whose scenario has pods (what `docker compose up` and a first try should show; `-k=false` turns it
//! off). Resolved without side effects; started with the self-metrics.

use std::path::{Path, PathBuf};

use crate::enrich::kubernetes::args::KubernetesArgs;
use crate::enrich::kubernetes::simulated::SimulatedCluster;
use crate::enrich::kubernetes::{podresources, KubernetesConfig, KubernetesEnricher, PodSource};
use crate::kubernetes_api::ApiConfig;
use crate::source::sim::pods::ScenarioPod;
use crate::source::sim::Fleet;
use crate::startup::{ResolveContext, StartContext, StartError};

/// What the source's plan answers for the Kubernetes enricher, as a value the wiring builds from it:
/// on a simulated fleet, the scenario's pods, the fleet they run on and the scenario's seed (the
/// simulated cluster plays the kubelet and the API server from them).
#[derive(Clone, Copy)]
pub struct SimulatedPods<'a> {
    pub pods: &'a [ScenarioPod],
    pub fleet: &'a Fleet,
    pub seed: u64,
}

/// `-k`: the enricher's settings and where its pod-resources answers come from.
pub struct KubernetesPlan {
    config: KubernetesConfig,
    /// The scenario's pods on a simulated fleet (no kubelet socket named); else the kubelet.
    simulated: Option<SimulatedCluster>,
}

impl KubernetesPlan {
    /// `None` when Kubernetes is off. `explicit`: `-k` (or its variable) was given, on or off.
    pub fn resolve(
        args: &KubernetesArgs,
        explicit: bool,
        simulated: Option<SimulatedPods<'_>>,
        ctx: &ResolveContext<'_>,
    ) -> Result<Option<KubernetesPlan>, StartError> {
        let pods = simulated.filter(|s| !s.pods.is_empty());
        if !(args.kubernetes || (pods.is_some() && !explicit)) {
            return Ok(None);
        }
        let config = KubernetesConfig::resolve(args, ctx.interval, ctx.host.node_name.clone())
            .map_err(StartError::input)?;
        // A simulated fleet whose scenario has pods plays the cluster, unless a kubelet socket other
        // than the default is named (the tests' fake kubelet).
        let default_socket =
            args.pod_resources_kubelet_socket == Path::new(podresources::DEFAULT_SOCKET);
        let simulated = match pods {
            Some(sim) if default_socket => Some(
                SimulatedCluster::new(sim.pods, sim.fleet, sim.seed)
                    .map_err(|e| StartError::input(format!("simulated cluster: {e}")))?,
            ),
            _ => None,
        };
        Ok(Some(KubernetesPlan { config, simulated }))
    }

    /// The enricher: the kubelet client (or the simulated cluster) and, for pod labels, UIDs and DRA,
    /// the API server.
    pub fn start(
        self,
        proc_root: PathBuf,
        ctx: &StartContext<'_>,
    ) -> Result<KubernetesEnricher, StartError> {
        let env = |k: &str| std::env::var(k).ok();
        let needs_api = self.config.pod_labels.is_some() || self.config.pod_uid || self.config.dra;
        let api = match (&self.simulated, needs_api) {
            (None, true) => ApiConfig::discover(&env).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "Kubernetes API configuration unusable; no pod labels or DRA attribution");
                None
            }),
            _ => None,
        };
        let source = match self.simulated {
            Some(c) => PodSource::Simulated(Box::new(c)),
            None => PodSource::Kubelet,
        };
        let enricher =
            KubernetesEnricher::with_source(self.config, source, api.as_ref(), ctx.self_metrics)
                .map_err(|e| {
                    StartError::environment(format!("cannot start the kubelet client runtime: {e}"))
                })?;
        Ok(enricher.with_proc_root(proc_root))
    }
}

/// The Kubernetes flags given that have no effect without `-k`.
pub fn flags_needing_k(args: &KubernetesArgs) -> Vec<&'static str> {
    [
        (
            args.kubernetes_enable_pod_labels,
            "--kubernetes-enable-pod-labels",
        ),
        (args.kubernetes_virtual_gpus, "--kubernetes-virtual-gpus"),
        (args.kubernetes_enable_dra, "--kubernetes-enable-dra"),
        (
            args.kubernetes_enable_pod_uid,
            "--kubernetes-enable-pod-uid",
        ),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect()
}
