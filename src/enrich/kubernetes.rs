//! Kubernetes pod attribution (`-k/--kubernetes`): which pod and container holds each GPU and MIG
//! instance, read from the kubelet's pod-resources v1 API.
//!
//! The kubelet is asked **once per collect interval**, on the collector thread, before the snapshot is
//! published ([`podresources`] is the gRPC client; [`mapping`] matches device ids to entities). Scrapes
//! never reach the kubelet, however many there are (dcgm-exporter 4.x asks it on every scrape and for
//! every entity group). Each call has a deadline of min(collect interval / 2, 10 s).
//!
//! When a call fails the last good mapping is kept for up to [`KEEP_INTERVALS`] more intervals (a kubelet
//! restart does not blank the pod labels), then dropped: series carry no pod labels until the kubelet
//! answers again. Each outage is logged once when it starts, once when the mapping is dropped, and once
//! when it ends. Every call is counted in `dcgm_otel_kubelet_requests_total{result}`.
//!
//! Pod UIDs: the pod-resources v1 API carries none. With `--kubernetes-enable-pod-uid` they come from
//! the Kubernetes API ([`crate::kubernetes_api`]: a watch on this node's pods) when it is configured and knows the pod,
//! else from the kubelet's device-manager checkpoint ([`checkpoint`]); a series whose pod's UID is
//! known in neither has no `pod_uid` label. Pod labels (`--kubernetes-enable-pod-labels`), the shared
//! replica (`--kubernetes-virtual-gpus`) and DRA claims (`--kubernetes-enable-dra`) are added by the
//! same mapping ([`labels`]).
//!
//! Where the pod-resources answers come from is pluggable ([`PodSource`]): the kubelet's socket, or,
//! on a simulated fleet whose scenario has `pods:`, the simulated cluster ([`simulated`]), which also
//! plays the API server (pod UIDs and labels). After the mapping, the cost counters ([`cost`]) are
//! derived from the attributed readings, and with `--kubernetes-virtual-gpus` each pod's own
//! utilization and framebuffer from its processes ([`virtual_gpus`]).

pub mod args;
pub mod cgroup;
pub mod checkpoint;
pub mod cost;
pub mod labels;
pub mod mapping;
pub mod plan;
pub mod podresources;
pub mod processes;
pub mod simulated;
pub mod virtual_gpus;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use args::KubernetesArgs;
pub use mapping::{GpuIdType, Mapping, MatchRules, PodRef};

use super::Enricher;
use crate::counters::CounterSet;
use crate::kubernetes_api as api;
use crate::snapshot::{Attribute, DerivedFamily, EntityReading, PerSetValues, ProcessReading};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};
use cost::{CostAccumulator, CostSettings, EqualShares, ProcessShares};
use labels::{PodLabels, PodMeta};
use mapping::{DeviceKey, MappingExtras};
use simulated::SimulatedCluster;

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
    /// `--kubernetes-enable-pod-uid`.
    pub pod_uid: bool,
    /// `--kubernetes-enable-pod-labels`, with its allowlist.
    pub pod_labels: Option<Arc<PodLabels>>,
    /// `--kubernetes-virtual-gpus`.
    pub virtual_gpus: bool,
    /// `--kubernetes-enable-dra`.
    pub dra: bool,
    /// The cost counters.
    pub cost: CostSettings,
    /// `NODE_NAME`: the API watch selects this node's pods.
    pub node_name: Option<String>,
    /// The collect interval.
    pub interval: Duration,
}

/// Where the pod-resources answers come from.
pub enum PodSource {
    /// The kubelet's pod-resources socket (`--pod-resources-kubelet-socket`).
    Kubelet,
    /// A simulated fleet's scenario pods (no socket); also the pods' UIDs and labels.
    Simulated(Box<SimulatedCluster>),
}

/// The DRA driver whose claims are GPUs.
pub const DRA_GPU_DRIVER: &str = "gpu.nvidia.com";

/// What one DRA device of a ResourceSlice is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DraTarget {
    Gpu {
        uuid: String,
    },
    Mig {
        uuid: String,
        parent_uuid: String,
        profile: String,
    },
}

/// The GPU devices of one ResourceSlice: (pool, device name, what it is).
pub type DraSlice = Vec<(String, String, DraTarget)>;

/// Longest label key Kubernetes accepts: a DNS-subdomain prefix (253), `/` and a name (63).
pub const MAX_LABEL_KEY: usize = 253 + 1 + 63;
/// Longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE: usize = 63;

/// A pod object's key (`namespace/name`) and metadata. Labels outside Kubernetes' own limits (a key over
/// [`MAX_LABEL_KEY`], a value over [`MAX_LABEL_VALUE`] bytes), which no real API server stores, are left out.
pub fn parse_pod(pod: api::objects::Pod) -> Option<(String, PodMeta)> {
    let m = pod.metadata;
    let (ns, name) = (m.namespace?, m.name?);
    let labels = m
        .labels
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| k.len() <= MAX_LABEL_KEY && v.len() <= MAX_LABEL_VALUE)
        .collect();
    Some((
        format!("{ns}/{name}"),
        PodMeta {
            uid: m.uid.unwrap_or_default(),
            labels,
        },
    ))
}

/// A ResourceSlice's NVIDIA GPU devices (`resource.k8s.io` v1, or v1beta1's `basic` layout).
pub fn parse_resource_slice(slice: api::objects::ResourceSlice) -> Option<(String, DraSlice)> {
    let name = slice.metadata.name?;
    let spec = slice.spec;
    if spec.driver.as_deref()? != DRA_GPU_DRIVER {
        return None;
    }
    let pool = spec.pool?.name?;
    let mut out = Vec::new();
    for d in spec.devices? {
        let Some(dev) = d.name else {
            continue;
        };
        let attrs = d.attributes.or_else(|| d.basic.and_then(|b| b.attributes));
        let attr = |k: &str| -> String {
            attrs
                .as_ref()
                .and_then(|a| a.get(k).or_else(|| a.get(&format!("{DRA_GPU_DRIVER}/{k}"))))
                .and_then(|a| a.string.clone())
                .unwrap_or_default()
        };
        let uuid = attr("uuid");
        let target = match attr("type").as_str() {
            "gpu" if !uuid.is_empty() => DraTarget::Gpu { uuid },
            "mig" if !uuid.is_empty() => DraTarget::Mig {
                uuid,
                parent_uuid: attr("parentUUID"),
                profile: attr("profile"),
            },
            _ => continue,
        };
        out.push((pool.clone(), dev, target));
    }
    Some((name, out))
}

/// The bytes of text a slice's devices hold (the API cache's bound).
fn slice_weight(slice: &DraSlice) -> usize {
    slice
        .iter()
        .map(|(pool, dev, target)| {
            let strings = match target {
                DraTarget::Gpu { uuid } => uuid.len(),
                DraTarget::Mig {
                    uuid,
                    parent_uuid,
                    profile,
                } => uuid.len() + parent_uuid.len() + profile.len(),
            };
            pool.len() + dev.len() + strings + 64
        })
        .sum()
}

impl KubernetesConfig {
    /// The deadline for a collect interval: min(interval / 2, 10 s). The call runs on the collector
    /// thread, so a kubelet that accepts and never answers holds each collection up to the deadline: half
    /// the interval leaves the other half for the collection itself, and the next one starts on its tick
    /// (a deadline as long as the interval made every collection overrun its tick, halving the rate;
    /// `tests/e2e/hung_peers_e2e.rs`).
    pub fn deadline_for(interval: Duration) -> Duration {
        (interval / 2).min(MAX_DEADLINE)
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
            pod_uid: args.kubernetes_enable_pod_uid,
            pod_labels: None,
            virtual_gpus: args.kubernetes_virtual_gpus,
            dra: args.kubernetes_enable_dra,
            cost: CostSettings {
                idle_threshold_percent: args.idle_utilization_threshold,
                retention: args.pod_series_retention,
            },
            node_name: None,
            interval,
        }
    }

    /// The settings, with the pod-label allowlist compiled (a bad regex is bad input).
    pub fn resolve(
        args: &KubernetesArgs,
        interval: Duration,
        node_name: Option<String>,
    ) -> Result<KubernetesConfig, labels::AllowlistError> {
        let mut c = KubernetesConfig::from_args(args, interval);
        if args.kubernetes_enable_pod_labels {
            c.pod_labels = Some(Arc::new(PodLabels::new(
                &args.kubernetes_pod_label_allowlist_regex,
            )?));
        }
        c.node_name = node_name;
        Ok(c)
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
    source: PodSource,
    /// Pods of this node from the API server (UIDs, labels).
    pods_api: Option<Arc<api::Cache<PodMeta>>>,
    /// GPU ResourceSlices of this node from the API server (DRA).
    slices_api: Option<Arc<api::Cache<DraSlice>>>,
    cost: CostAccumulator,
    started: Instant,
    warned_dra: bool,
    mapping: Option<Arc<Mapping>>,
    /// Consecutive failed calls.
    failures: u32,
    metrics: KubeletMetrics,
    warned_unknown: bool,
    /// The device checkpoint could not be used at the last attempt (logged once per outage).
    checkpoint_failing: bool,
    /// The host's /proc, where a process's cgroup names its pod (`--proc-root`).
    proc_root: PathBuf,
    /// This collection's processes, as attributed (per-process collection on), for the cost split.
    last_processes: Vec<ProcessReading>,
    /// Whether this collection's processes were read (`last_processes` may be empty: none ran).
    processes_read: bool,
    /// Whether any collection's processes were read (a failed poll is then told from none).
    processes_seen: bool,
}

impl KubernetesEnricher {
    /// Build the enricher and its small single-thread runtime (used only on the collector thread).
    pub fn new(
        config: KubernetesConfig,
        registry: &SelfMetrics,
    ) -> std::io::Result<KubernetesEnricher> {
        KubernetesEnricher::with_source(config, PodSource::Kubelet, None, registry)
    }

    /// The enricher over a pod source; `api`: the Kubernetes API server, when configured (pod UIDs and
    /// labels, DRA ResourceSlices).
    pub fn with_source(
        mut config: KubernetesConfig,
        source: PodSource,
        api: Option<&api::ApiConfig>,
        registry: &SelfMetrics,
    ) -> std::io::Result<KubernetesEnricher> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        match &source {
            PodSource::Kubelet => tracing::info!(
                socket = %config.socket.display(),
                gpu_id_type = ?config.rules.id_type,
                extra_resource_names = ?config.rules.extra_resource_names,
                deadline_ms = config.deadline.as_millis() as u64,
                "Kubernetes pod mapping on: the kubelet's pod-resources API is asked once per collect interval"
            ),
            PodSource::Simulated(c) => tracing::warn!(
                pods = c.pods(),
                "SIMULATED KUBERNETES: pod-resources answers and pod labels come from the scenario's pods, not a kubelet"
            ),
        }
        let simulated = matches!(source, PodSource::Simulated(_));
        if let Some(labels) = &config.pod_labels {
            labels.count_refused_in(registry);
        }
        let wants_pods = config.pod_labels.is_some() || config.pod_uid;
        let (mut pods_api, mut slices_api) = (None, None);
        match api.filter(|_| !simulated) {
            Some(cfg) => {
                if wants_pods {
                    let node = config.node_name.clone();
                    if node.is_none() {
                        tracing::warn!("NODE_NAME is not set: watching the pods of the whole cluster for their labels and UIDs");
                    }
                    let resource = api::Resource {
                        name: "pods",
                        path: "/api/v1/pods".into(),
                        field_selector: node.as_ref().map(|n| format!("spec.nodeName={n}")),
                        parse: parse_pod,
                        weight: PodMeta::weight,
                        node,
                        stale_after: api::stale_after(config.interval),
                        watch_deadline: api::WATCH_DEADLINE,
                    };
                    match api::watch::start(cfg, resource, registry) {
                        Ok(w) => {
                            tracing::info!(server = %cfg.server, origin = %cfg.origin, "pod labels and UIDs from the Kubernetes API (a watch on this node's pods)");
                            pods_api = Some(w.cache);
                        }
                        Err(e) => tracing::warn!(error = %e, "Kubernetes API client not started; no pod labels, UIDs from the kubelet checkpoint only"),
                    }
                }
                if config.dra {
                    let mut selector = format!("spec.driver={DRA_GPU_DRIVER}");
                    if let Some(n) = &config.node_name {
                        selector = format!("spec.nodeName={n},{selector}");
                    }
                    let resource = api::Resource {
                        name: "resourceslices",
                        path: "/apis/resource.k8s.io/v1/resourceslices".into(),
                        field_selector: Some(selector),
                        parse: parse_resource_slice,
                        weight: slice_weight,
                        node: config.node_name.clone(),
                        stale_after: api::stale_after(config.interval),
                        watch_deadline: api::WATCH_DEADLINE,
                    };
                    match api::watch::start(cfg, resource, registry) {
                        Ok(w) => slices_api = Some(w.cache),
                        Err(e) => tracing::warn!(error = %e, "Kubernetes API client not started; DRA claims are not attributed"),
                    }
                }
            }
            None if !simulated && (wants_pods || config.dra) => tracing::warn!(
                "no Kubernetes API configuration (in-cluster service account or KUBECONFIG): no pod labels, no DRA attribution; pod UIDs from the kubelet checkpoint only"
            ),
            None => {}
        }
        // UIDs from the API: the checkpoint only where it is (the manifests do not mount its directory).
        if pods_api.is_some()
            && config
                .pod_uid_checkpoint
                .as_ref()
                .is_some_and(|p| p == Path::new(checkpoint::DEFAULT_CHECKPOINT) && !p.exists())
        {
            tracing::info!("pod UIDs from the Kubernetes API (no kubelet device checkpoint at its default path)");
            config.pod_uid_checkpoint = None;
        }
        let cost = CostAccumulator::new(config.cost, registry);
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
            source,
            pods_api,
            slices_api,
            cost,
            started: Instant::now(),
            warned_dra: false,
            mapping: None,
            failures: 0,
            warned_unknown: false,
            checkpoint_failing: false,
            proc_root: PathBuf::from("/proc"),
            last_processes: Vec::new(),
            processes_read: false,
            processes_seen: false,
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
        let result = match &mut self.source {
            PodSource::Kubelet => self.runtime.block_on(podresources::list(
                &self.config.socket,
                self.config.deadline,
            )),
            PodSource::Simulated(c) => Ok(c.list()),
        };
        self.metrics.duration.set(started.elapsed().as_secs_f64());
        match result {
            Ok(reply) => {
                self.metrics.ok.inc();
                let uids = self.pod_uids();
                let mapping = self.build_mapping(&reply, uids.as_ref());
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
    /// Index a reply with everything the flags ask to join to it.
    fn build_mapping(
        &mut self,
        reply: &podresources::ListPodResourcesResponse,
        uids: Option<&checkpoint::UidIndex>,
    ) -> Mapping {
        let simulated = match &self.source {
            PodSource::Simulated(c) => Some(&**c),
            PodSource::Kubelet => None,
        };
        let pods_api = self.pods_api.clone();
        let metadata = move |ns: &str, name: &str| -> Option<Arc<PodMeta>> {
            match simulated {
                Some(c) => c.metadata(ns, name),
                None => pods_api.as_ref()?.get(&format!("{ns}/{name}")),
            }
        };
        let pod_labels = self.config.pod_labels.clone();
        let label_attrs = move |m: &PodMeta| -> Vec<Attribute> {
            pod_labels
                .as_ref()
                .map(|l| l.attributes(m))
                .unwrap_or_default()
        };
        let slices = self.slices_api.as_ref().map(|c| c.values());
        let dra_seen = std::cell::Cell::new(false);
        let dra = |driver: &str, pool: &str, device: &str| -> Option<(DeviceKey, Vec<Attribute>)> {
            if driver != DRA_GPU_DRIVER {
                return None;
            }
            dra_seen.set(true);
            let target = slices.as_ref()?.iter().find_map(|s| {
                s.iter()
                    .find(|(p, d, _)| p == pool && d == device)
                    .map(|(_, _, t)| t.clone())
            })?;
            Some(dra_key(driver, pool, device, &target))
        };
        let extras = MappingExtras {
            uids,
            metadata: Some(&metadata),
            pod_uid: self.config.pod_uid,
            pod_labels: self
                .config
                .pod_labels
                .is_some()
                .then_some(&label_attrs as _),
            virtual_gpus: self.config.virtual_gpus,
            dra: self.config.dra.then_some(&dra as _),
        };
        let m = Mapping::build_with(reply, &self.config.rules, &extras);
        if dra_seen.get()
            && self.slices_api.as_ref().is_none_or(|c| !c.synced())
            && !self.warned_dra
        {
            tracing::warn!("the kubelet reports DRA claims of gpu.nvidia.com, but no ResourceSlices are known (Kubernetes API unavailable or not listed yet): they are not attributed (logged once)");
            self.warned_dra = true;
        }
        m
    }

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
                    tracing::warn!(error = %e, "pod UIDs unavailable from the kubelet device checkpoint: series whose pod the Kubernetes API does not give carry no pod_uid label until it can be read");
                    self.checkpoint_failing = true;
                }
                None
            }
        }
    }
}

/// How a device several pods hold is written on :9400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedDevices {
    /// One series, labelled with the pod dcgm-exporter chooses ([`Mapping::holder_for`]); the other
    /// pods are co-holders (OTLP, the per-pod families). dcgm-exporter's default.
    OneSeries,
    /// One series per pod (`--kubernetes-virtual-gpus`).
    SeriesPerPod,
}

/// Attribute entities from a mapping: each entity gets the pods of its device; when several share
/// it, `shared` says whether :9400 writes it once (under its holder) or once per pod.
pub fn apply(
    mapping: &Mapping,
    id_type: GpuIdType,
    shared: SharedDevices,
    entities: &mut [EntityReading],
) {
    for e in entities {
        let pods = mapping.pods_for(&e.entity, id_type);
        if pods.is_empty() {
            continue;
        }
        let alternatives: Vec<Vec<Attribute>> = pods.iter().map(PodRef::attributes).collect();
        let attribution = Arc::make_mut(&mut e.attribution);
        match shared {
            SharedDevices::SeriesPerPod => attribution.split(&alternatives),
            SharedDevices::OneSeries => {
                let holder = mapping
                    .holder_for(&e.entity, id_type)
                    .and_then(|h| pods.iter().position(|p| *p == h))
                    .unwrap_or(pods.len() - 1);
                attribution.share(&alternatives, holder);
            }
        }
    }
}

/// The device key and `dra_*` attributes of a DRA device.
pub fn dra_key(
    driver: &str,
    pool: &str,
    device: &str,
    target: &DraTarget,
) -> (DeviceKey, Vec<Attribute>) {
    let mut attrs = vec![
        Attribute::new(&labels::DRA_DRIVER_NAME, driver),
        Attribute::new(&labels::DRA_POOL_NAME, pool),
        Attribute::new(&labels::DRA_DEVICE_NAME, device),
    ];
    let key = match target {
        DraTarget::Gpu { uuid } => DeviceKey::GpuUuid(uuid.to_ascii_lowercase()),
        DraTarget::Mig { uuid, profile, .. } => {
            attrs.push(Attribute::new(&labels::DRA_MIG_PROFILE, profile.as_str()));
            attrs.push(Attribute::new(&labels::DRA_MIG_DEVICE_UUID, uuid.as_str()));
            DeviceKey::MigUuid(uuid.to_ascii_lowercase())
        }
    };
    (key, attrs)
}

impl Enricher for KubernetesEnricher {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    fn enrich(&mut self, entities: &mut [EntityReading]) {
        // Processes of an earlier collection never split this one's devices.
        self.last_processes.clear();
        self.processes_read = false;
        self.refresh();
        if let Some(m) = &self.mapping {
            let shared = if self.config.virtual_gpus {
                SharedDevices::SeriesPerPod
            } else {
                SharedDevices::OneSeries
            };
            apply(m, self.config.rules.id_type, shared, entities);
        }
    }

    fn enrich_processes(&mut self, processes: &mut [ProcessReading]) {
        processes::attribute(
            self.mapping.as_deref(),
            self.config.rules.id_type,
            &self.proc_root,
            processes,
        );
        // The cost counters split shared devices by these processes' SM use (`derive`, next).
        self.last_processes = processes.to_vec();
        self.processes_read = true;
        self.processes_seen = true;
    }

    fn derive(
        &mut self,
        entities: &[EntityReading],
        counters: &CounterSet,
        out: &mut Vec<DerivedFamily>,
    ) {
        let now = self.started.elapsed().as_secs_f64();
        let collected = if self.last_processes.is_empty() {
            self.cost.collect(entities, counters, now, &EqualShares)
        } else {
            let shares = ProcessShares {
                processes: &self.last_processes,
            };
            self.cost.collect(entities, counters, now, &shares)
        };
        out.extend(collected);
    }

    fn per_set_values(
        &mut self,
        entities: &[EntityReading],
        counters: &CounterSet,
        out: &mut Vec<PerSetValues>,
    ) {
        let Some(mapping) = self.mapping.as_deref().filter(|_| self.config.virtual_gpus) else {
            return;
        };
        let processes = if self.processes_read {
            virtual_gpus::Processes::Read(&self.last_processes)
        } else if self.processes_seen {
            virtual_gpus::Processes::Failed
        } else {
            virtual_gpus::Processes::None
        };
        virtual_gpus::per_set_values(
            mapping,
            self.config.rules.id_type,
            entities,
            counters,
            processes,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_and_resource_slices_from_api_objects() {
        let long_value = "v".repeat(MAX_LABEL_VALUE + 1);
        let pod: api::objects::Pod = serde_json::from_str(&format!(
            r#"{{"metadata":{{"name":"p","namespace":"n","uid":"u-1","labels":{{"team":"a","n":"1","big":"{long_value}"}}}},"spec":{{"nodeName":"node-a","containers":[{{"name":"c"}}]}}}}"#,
        ))
        .unwrap();
        assert_eq!(api::stream::ApiObject::node_name(&pod), Some("node-a"));
        let (key, meta) = parse_pod(pod).unwrap();
        assert_eq!(key, "n/p");
        assert_eq!(meta.uid, "u-1");
        // Kubernetes' own limits: a value over 63 bytes is no label an API server stores.
        assert_eq!(meta.labels.len(), 2);
        // v1 (attributes on the device) and v1beta1 (under `basic`), qualified or not; other drivers
        // and unknown types are skipped.
        let v1: api::objects::ResourceSlice = serde_json::from_str(
            r#"{"metadata":{"name":"s"},"spec":{"driver":"gpu.nvidia.com","pool":{"name":"node-a"},"devices":[
                {"name":"gpu-0","attributes":{"type":{"string":"gpu"},"uuid":{"string":"GPU-1"}}},
                {"name":"mig-0","basic":{"attributes":{"gpu.nvidia.com/type":{"string":"mig"},"uuid":{"string":"MIG-2"},"profile":{"string":"1g.10gb"},"parentUUID":{"string":"GPU-1"}}}},
                {"name":"odd","attributes":{"type":{"string":"vfio"}}}]}}"#,
        )
        .unwrap();
        let (name, devices) = parse_resource_slice(v1).unwrap();
        assert_eq!(name, "s");
        assert_eq!(
            devices,
            vec![
                (
                    "node-a".into(),
                    "gpu-0".into(),
                    DraTarget::Gpu {
                        uuid: "GPU-1".into()
                    }
                ),
                (
                    "node-a".into(),
                    "mig-0".into(),
                    DraTarget::Mig {
                        uuid: "MIG-2".into(),
                        parent_uuid: "GPU-1".into(),
                        profile: "1g.10gb".into()
                    }
                ),
            ]
        );
        let other: api::objects::ResourceSlice = serde_json::from_str(
            r#"{"metadata":{"name":"s"},"spec":{"driver":"x","pool":{"name":"p"},"devices":[]}}"#,
        )
        .unwrap();
        assert!(parse_resource_slice(other).is_none());
    }
}
