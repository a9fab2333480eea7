//! Kubernetes pod attribution (`-k/--kubernetes`): which pod and container holds each GPU and MIG
//! instance, read from the kubelet's pod-resources v1 API.
//!
//! The kubelet is asked **once per collect interval**, on the collector thread, before the snapshot is
//! published ([`podresources`] is the gRPC client; [`mapping`] matches device ids to entities). Scrapes
//! never reach the kubelet, however many there are (dcgm-exporter 4.x asks it on every scrape and for
//! every entity group). Each call has a deadline of min(collect interval, 10 s).
//!
//! When a call fails the last good mapping is kept for up to [`KEEP_INTERVALS`] more intervals (a kubelet
//! restart does not blank the pod labels), then dropped: series carry no pod labels until the kubelet
//! answers again. Each outage is logged once when it starts, once when the mapping is dropped, and once
//! when it ends. Every call is counted in `dcgm_otel_kubelet_requests_total{result}`.
//!
//! Pod UIDs: the pod-resources v1 API carries none. With `--kubernetes-enable-pod-uid` they are joined in
//! from the kubelet's device-manager checkpoint ([`checkpoint`]); a series whose pod's UID is not
//! known there has no `pod_uid` label.

pub mod args;
pub mod cgroup;
pub mod checkpoint;
pub mod mapping;
pub mod podresources;
pub mod processes;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use args::KubernetesArgs;
pub use mapping::{GpuIdType, Mapping, MatchRules, PodRef};

use super::Enricher;
use crate::snapshot::{Attribute, EntityReading, ProcessReading};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Failed intervals during which the last good mapping is still used.
pub const KEEP_INTERVALS: u32 = 3;

/// Upper bound of the per-call deadline.
pub const MAX_DEADLINE: Duration = Duration::from_secs(10);

/// Settings of the Kubernetes enricher, from the `Kubernetes` flags.
#[derive(Debug, Clone)]
pub struct KubernetesConfig {
    /// `--pod-resources-kubelet-socket`.
    pub socket: PathBuf,
    pub rules: MatchRules,
    /// `--kubernetes-enable-pod-uid`: the kubelet device checkpoint to read pod UIDs from.
    pub pod_uid_checkpoint: Option<PathBuf>,
    /// Deadline of one `List` call.
    pub deadline: Duration,
}

impl KubernetesConfig {
    /// The deadline for a collect interval: min(interval, 10 s).
    pub fn deadline_for(interval: Duration) -> Duration {
        interval.min(MAX_DEADLINE)
    }

    /// The settings the flags give, for a collect interval.
    pub fn from_args(args: &KubernetesArgs, interval: Duration) -> KubernetesConfig {
        KubernetesConfig {
            socket: args.pod_resources_kubelet_socket.clone(),
            rules: MatchRules {
                extra_resource_names: args
                    .nvidia_resource_names
                    .iter()
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty())
                    .collect(),
                id_type: args.kubernetes_gpu_id_type,
            },
            pod_uid_checkpoint: args
                .kubernetes_enable_pod_uid
                .then(|| args.kubelet_device_checkpoint.clone()),
            deadline: KubernetesConfig::deadline_for(interval),
        }
    }
}

struct KubeletMetrics {
    ok: Arc<Metric>,
    unavailable: Arc<Metric>,
    timeout: Arc<Metric>,
    error: Arc<Metric>,
    duration: Arc<Metric>,
    pods: Arc<Metric>,
}

impl KubeletMetrics {
    fn new(registry: &SelfMetrics) -> Self {
        let requests = |result: &str| {
            registry.counter(
                "dcgm_otel_kubelet_requests_total",
                "Kubelet pod-resources List calls, by result (ok, unavailable, timeout, error).",
                &[("result", result)],
            )
        };
        KubeletMetrics {
            ok: requests("ok"),
            unavailable: requests("unavailable"),
            timeout: requests("timeout"),
            error: requests("error"),
            duration: registry.gauge(
                "dcgm_otel_kubelet_request_duration_seconds",
                "Wall time of the last kubelet pod-resources List call (connect, call, decode).",
                &[],
            ),
            pods: registry.gauge(
                "dcgm_otel_kubernetes_pods",
                "Pods holding NVIDIA devices in the pod mapping in use (0 when no mapping).",
                &[],
            ),
        }
    }

    fn failed(&self, result: &str) {
        match result {
            "unavailable" => self.unavailable.inc(),
            "timeout" => self.timeout.inc(),
            _ => self.error.inc(),
        }
    }
}

/// The Kubernetes enricher: one pod-resources `List` per collect interval.
pub struct KubernetesEnricher {
    config: KubernetesConfig,
    runtime: tokio::runtime::Runtime,
    mapping: Option<Arc<Mapping>>,
    /// Consecutive failed calls.
    failures: u32,
    metrics: KubeletMetrics,
    warned_unknown: bool,
    /// The device checkpoint could not be used at the last attempt (logged once per outage).
    checkpoint_failing: bool,
    /// The host's /proc, where a process's cgroup names its pod (`--proc-root`).
    proc_root: PathBuf,
}

impl KubernetesEnricher {
    /// Build the enricher and its small single-thread runtime (used only on the collector thread).
    pub fn new(
        config: KubernetesConfig,
        registry: &SelfMetrics,
    ) -> std::io::Result<KubernetesEnricher> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        tracing::info!(
            socket = %config.socket.display(),
            gpu_id_type = ?config.rules.id_type,
            extra_resource_names = ?config.rules.extra_resource_names,
            deadline_ms = config.deadline.as_millis() as u64,
            "Kubernetes pod mapping on: the kubelet's pod-resources API is asked once per collect interval"
        );
        if let Some(path) = &config.pod_uid_checkpoint {
            tracing::info!(
                checkpoint = %path.display(),
                "pod_uid on: pod UIDs are read from the kubelet's device checkpoint once per collect interval"
            );
        }
        Ok(KubernetesEnricher {
            metrics: KubeletMetrics::new(registry),
            config,
            runtime,
            mapping: None,
            failures: 0,
            warned_unknown: false,
            checkpoint_failing: false,
            proc_root: PathBuf::from("/proc"),
        })
    }

    /// Where process cgroups are read for per-process pod attribution (default `/proc`).
    pub fn with_proc_root(mut self, root: PathBuf) -> KubernetesEnricher {
        self.proc_root = root;
        self
    }

    /// Ask the kubelet and update the mapping in use (kept, replaced or dropped).
    fn refresh(&mut self) {
        let started = Instant::now();
        let result = self.runtime.block_on(podresources::list(
            &self.config.socket,
            self.config.deadline,
        ));
        self.metrics.duration.set(started.elapsed().as_secs_f64());
        match result {
            Ok(reply) => {
                self.metrics.ok.inc();
                let uids = self.pod_uids();
                let mapping = Mapping::build(&reply, &self.config.rules, uids.as_ref());
                if !mapping.unknown_ids.is_empty() && !self.warned_unknown {
                    tracing::warn!(ids = ?mapping.unknown_ids, "kubelet reports NVIDIA device ids of an unknown form; they are not attributed (logged once)");
                    self.warned_unknown = true;
                }
                if self.failures > 0 {
                    tracing::info!(
                        failed_calls = self.failures,
                        "kubelet pod-resources API answers again; pod mapping restored"
                    );
                }
                self.failures = 0;
                self.mapping = Some(Arc::new(mapping));
            }
            Err(err) => {
                self.metrics.failed(err.result_label());
                self.failures = self.failures.saturating_add(1);
                if self.failures == 1 {
                    if self.mapping.is_some() {
                        tracing::warn!(error = %err, keep_intervals = KEEP_INTERVALS, "kubelet pod-resources List failed; keeping the last pod mapping for up to {KEEP_INTERVALS} collect intervals");
                    } else {
                        tracing::warn!(error = %err, "kubelet pod-resources List failed; series carry no pod labels until it answers");
                    }
                } else {
                    tracing::debug!(error = %err, failures = self.failures, "kubelet pod-resources List failed again");
                }
                if self.failures > KEEP_INTERVALS && self.mapping.take().is_some() {
                    tracing::warn!(
                        failed_calls = self.failures,
                        "kubelet pod-resources API still failing; pod mapping dropped, series carry no pod labels until it answers"
                    );
                }
            }
        }
        self.metrics
            .pods
            .set(self.mapping.as_ref().map_or(0.0, |m| m.pods as f64));
    }
}

impl KubernetesEnricher {
    /// Pod UIDs from the device checkpoint, when `--kubernetes-enable-pod-uid` asks for them.
    fn pod_uids(&mut self) -> Option<checkpoint::UidIndex> {
        let path = self.config.pod_uid_checkpoint.as_ref()?;
        match checkpoint::UidIndex::read(path) {
            Ok(index) => {
                if self.checkpoint_failing {
                    tracing::info!(checkpoint = %path.display(), "kubelet device checkpoint readable again; pod_uid labels back");
                    self.checkpoint_failing = false;
                }
                Some(index)
            }
            Err(e) => {
                if !self.checkpoint_failing {
                    tracing::warn!(error = %e, "pod UIDs unavailable: series carry no pod_uid label until the kubelet device checkpoint can be read (mount /var/lib/kubelet/device-plugins read-only)");
                    self.checkpoint_failing = true;
                }
                None
            }
        }
    }
}

/// Attribute entities from a mapping: each entity gets the pods of its device, one series per pod
/// when several share it.
pub fn apply(mapping: &Mapping, id_type: GpuIdType, entities: &mut [EntityReading]) {
    for e in entities {
        let pods = mapping.pods_for(&e.entity, id_type);
        if pods.is_empty() {
            continue;
        }
        let alternatives: Vec<Vec<Attribute>> = pods.iter().map(PodRef::attributes).collect();
        Arc::make_mut(&mut e.attribution).split(&alternatives);
    }
}

impl Enricher for KubernetesEnricher {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn enrich(&mut self, entities: &mut [EntityReading]) {
        self.refresh();
        if let Some(m) = &self.mapping {
            apply(m, self.config.rules.id_type, entities);
        }
    }

    fn enrich_processes(&mut self, processes: &mut [ProcessReading]) {
        processes::attribute(
            self.mapping.as_deref(),
            self.config.rules.id_type,
            &self.proc_root,
            processes,
        );
    }
}
