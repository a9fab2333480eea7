//! The attributes the Kubernetes enricher adds beyond pod, namespace, container and pod UID: pod labels
//! (`--kubernetes-enable-pod-labels`, filtered by `--kubernetes-pod-label-allowlist-regex`), the shared
//! replica (`vgpu`, `--kubernetes-virtual-gpus`) and the DRA claim (`dra_*`, `--kubernetes-enable-dra`),
//! with their names per exporter.
//!
//! Pod labels are written as dcgm-exporter writes them: the key with every character outside
//! `[a-zA-Z0-9_]` replaced by `_` (`app.kubernetes.io/name` → `app_kubernetes_io_name`), among the
//! `label`-type fields ([`Placement::Labels`]); on OTLP as `k8s.pod.label.<key>` with the key unchanged
//! (the semantic-convention form). The allowlist regexes are matched against the unchanged key (any
//! match keeps the label; no regex keeps all). Two keys that sanitize to the same name: the one that
//! sorts last wins.
//!
//! A pod's labels are its owner's to choose, so they never stand in for what dcgm-otel writes itself: a
//! label whose sanitized name is [`reserved`] (the pod's identity `pod`, `namespace`, `container`,
//! `pod_uid`; every entity identity label `gpu`, `UUID`, `Hostname`...; every other label the exporter
//! writes; Prometheus' own `job`, `instance`, `le`, `quantile`, `__*` and the `exported_*` names its
//! `honor_labels: false` renames make) is left out, on `:9400` and OTLP alike, counted in
//! `dcgm_otel_kubernetes_pod_labels_refused_total` (each label key once, when first seen) and logged once.
//! dcgm-exporter deletes only the pod labels named like its pod attributes and writes the others, so a
//! pod label `gpu` repeats a label (a scrape Prometheus rejects) and `job` or `instance` replace the
//! scrape target's under `honorLabels: true`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use crate::lock::LockExt;
use crate::snapshot::{Attribute, AttributeKey, Placement};
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Label names dcgm-otel writes itself (every spelling, with `-o` too) and Prometheus' own: a pod label
/// of one of these names is left out. Prefixes: [`RESERVED_PREFIXES`].
pub const RESERVED: &[&str] = &[
    // the pod's own identity (and dcgm-exporter 1.x's spellings under -o)
    "pod",
    "namespace",
    "container",
    "pod_uid",
    "pod_name",
    "pod_namespace",
    "container_name",
    "container_id",
    "vgpu",
    "hpc_job",
    // entity identity labels (export/entity_labels.rs) and the host label
    "gpu",
    "UUID",
    "uuid",
    "pci_bus_id",
    "device",
    "modelName",
    "model_name",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "Hostname",
    "hostname",
    "nvlink",
    "nvswitch",
    "gpu_uuid",
    "cpu",
    "cpucore",
    "cpu_serial",
    // labels of particular series: XIDs, health, clock events, P2P, DCGM_EXP_*, processes
    "err_code",
    "err_msg",
    "xid",
    "window_size_in_ms",
    "health_watch",
    "health_error_code",
    "clock_event",
    "peer_gpu",
    "link_status",
    "pid",
    "process_name",
    // Prometheus: target labels, histogram and summary buckets
    "job",
    "instance",
    "le",
    "quantile",
];

/// Name prefixes reserved the same way: Prometheus' internal `__`, the names `honor_labels: false` gives
/// a clashing label (`exported_pod`, read by consumers of dcgm-exporter data), the `label`-type DCGM
/// fields (`DCGM_FI_DRIVER_VERSION`) and the DRA claim labels (`dra_*`).
pub const RESERVED_PREFIXES: &[&str] = &["__", "exported_", "DCGM_", "dra_"];

/// Whether a (sanitized) label name is one a pod label may not take.
pub fn reserved(name: &str) -> bool {
    RESERVED.contains(&name) || RESERVED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// `vgpu` (the shared replica), `nvidia.vgpu.replica`.
pub static VGPU: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| AttributeKey::new("vgpu", "nvidia.gpu.replica", Placement::Attributes));
/// `dra_claim_name`.
pub static DRA_CLAIM_NAME: LazyLock<Arc<AttributeKey>> = LazyLock::new(|| {
    AttributeKey::new(
        "dra_claim_name",
        "nvidia.dra.claim.name",
        Placement::Attributes,
    )
});
/// `dra_claim_namespace`.
pub static DRA_CLAIM_NAMESPACE: LazyLock<Arc<AttributeKey>> = LazyLock::new(|| {
    AttributeKey::new(
        "dra_claim_namespace",
        "nvidia.dra.claim.namespace",
        Placement::Attributes,
    )
});
/// `dra_driver_name`.
pub static DRA_DRIVER_NAME: LazyLock<Arc<AttributeKey>> = LazyLock::new(|| {
    AttributeKey::new(
        "dra_driver_name",
        "nvidia.dra.driver",
        Placement::Attributes,
    )
});
/// `dra_pool_name`.
pub static DRA_POOL_NAME: LazyLock<Arc<AttributeKey>> =
    LazyLock::new(|| AttributeKey::new("dra_pool_name", "nvidia.dra.pool", Placement::Attributes));
/// `dra_device_name`.
pub static DRA_DEVICE_NAME: LazyLock<Arc<AttributeKey>> = LazyLock::new(|| {
    AttributeKey::new(
        "dra_device_name",
        "nvidia.dra.device",
        Placement::Attributes,
    )
});
/// `dra_mig_profile`.
pub static DRA_MIG_PROFILE: LazyLock<Arc<AttributeKey>> = LazyLock::new(|| {
    AttributeKey::new(
        "dra_mig_profile",
        "nvidia.dra.mig.profile",
        Placement::Attributes,
    )
});
/// `dra_mig_device_uuid`.
pub static DRA_MIG_DEVICE_UUID: LazyLock<Arc<AttributeKey>> = LazyLock::new(|| {
    AttributeKey::new(
        "dra_mig_device_uuid",
        "nvidia.dra.mig.uuid",
        Placement::Attributes,
    )
});

/// What the API server (or the simulated cluster) says about a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMeta {
    pub uid: String,
    pub labels: BTreeMap<String, String>,
}

impl PodMeta {
    /// The bytes of text it holds, with a map node's overhead per label (the API cache's bound).
    pub fn weight(&self) -> usize {
        self.uid.len()
            + self
                .labels
                .iter()
                .map(|(k, v)| k.len() + v.len() + 64)
                .sum::<usize>()
    }
}

/// `[^a-zA-Z0-9_]` → `_`, as dcgm-exporter sanitizes label names; a name that would begin with a digit
/// (or be empty) gets a leading `_` (dcgm-exporter writes it as is, an invalid Prometheus label name).
pub fn sanitize(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 1);
    if key.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

/// A bad `--kubernetes-pod-label-allowlist-regex`.
#[derive(Debug, thiserror::Error)]
#[error("--kubernetes-pod-label-allowlist-regex: '{pattern}' is not a valid regular expression: {message}")]
pub struct AllowlistError {
    pub pattern: String,
    pub message: String,
}

/// Which pod labels become attributes, and their keys (made once per label key).
#[derive(Debug)]
pub struct PodLabels {
    allow: Vec<regex::Regex>,
    /// Key → its attribute key, or `None` when the allowlist rejects it or its name is [`reserved`].
    /// Cleared when it grows past [`KEY_CACHE`] entries.
    keys: Mutex<HashMap<String, Option<Arc<AttributeKey>>>>,
    /// `dcgm_otel_kubernetes_pod_labels_refused_total`, once the enricher starts.
    refused: OnceLock<Arc<Metric>>,
}

/// Label keys remembered (accepted or rejected) before the cache starts over.
const KEY_CACHE: usize = 10_000;

impl PodLabels {
    /// Compile the allowlist; empty patterns are ignored, a bad one is an error (exit code 2).
    pub fn new(patterns: &[String]) -> Result<PodLabels, AllowlistError> {
        let allow = patterns
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
            .map(|p| {
                regex::Regex::new(p).map_err(|e| AllowlistError {
                    pattern: p.to_string(),
                    message: e
                        .to_string()
                        .lines()
                        .last()
                        .unwrap_or_default()
                        .trim()
                        .trim_start_matches("error: ")
                        .to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PodLabels {
            allow,
            keys: Mutex::new(HashMap::new()),
            refused: OnceLock::new(),
        })
    }

    /// Count the labels left out for a reserved name in `registry`.
    pub fn count_refused_in(&self, registry: &SelfMetrics) {
        let _ = self.refused.set(registry.counter(
            "dcgm_otel_kubernetes_pod_labels_refused_total",
            "Pod label keys left out because their name is one dcgm-otel or Prometheus writes itself (pod, namespace, gpu, job, le, exported_*, ...), each key counted when first seen.",
            &[],
        ));
    }

    fn key(&self, label: &str) -> Option<Arc<AttributeKey>> {
        let mut keys = self.keys.lock_unpoisoned();
        if let Some(k) = keys.get(label) {
            return k.clone();
        }
        let allowed = self.allow.is_empty() || self.allow.iter().any(|r| r.is_match(label));
        let name = sanitize(label);
        let key = if !allowed {
            None
        } else if reserved(&name) {
            self.refuse(label, &name);
            None
        } else {
            Some(AttributeKey::new(
                name,
                format!("k8s.pod.label.{label}"),
                Placement::Labels,
            ))
        };
        if keys.len() >= KEY_CACHE {
            keys.clear();
        }
        keys.insert(label.to_string(), key.clone());
        key
    }

    /// A label left out for its name: counted, and the first one logged.
    fn refuse(&self, label: &str, name: &str) {
        static LOGGED: std::sync::Once = std::sync::Once::new();
        LOGGED.call_once(|| {
            tracing::warn!(
                label,
                name,
                "pod label left out: its name is one dcgm-otel or Prometheus writes itself (a pod's labels never replace its identity or a reserved label); further ones are counted in dcgm_otel_kubernetes_pod_labels_refused_total"
            );
        });
        if let Some(m) = self.refused.get() {
            m.inc();
        }
    }

    /// The attributes of a pod's labels that the allowlist keeps, in key order.
    pub fn attributes(&self, meta: &PodMeta) -> Vec<Attribute> {
        meta.labels
            .iter()
            .filter_map(|(k, v)| self.key(k).map(|key| Attribute::new(&key, v.as_str())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitized_and_filtered() {
        assert_eq!(sanitize("app.kubernetes.io/name"), "app_kubernetes_io_name");
        // Valid Prometheus label names only: never a leading digit, never empty.
        assert_eq!(sanitize("3scale.net/tier"), "_3scale_net_tier");
        assert_eq!(sanitize(""), "_");
        let meta = PodMeta {
            uid: "u".into(),
            labels: [
                ("app.kubernetes.io/name", "llm"),
                ("team", "a"),
                ("tier", "x"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let all = PodLabels::new(&[]).unwrap().attributes(&meta);
        let names: Vec<(&str, &str)> = all
            .iter()
            .map(|a| (&*a.key.prometheus, &*a.key.otel))
            .collect();
        assert_eq!(
            names,
            [
                (
                    "app_kubernetes_io_name",
                    "k8s.pod.label.app.kubernetes.io/name"
                ),
                ("team", "k8s.pod.label.team"),
                ("tier", "k8s.pod.label.tier")
            ]
        );
        let some = PodLabels::new(&["^team$".into(), "kubernetes\\.io".into()])
            .unwrap()
            .attributes(&meta);
        assert_eq!(some.len(), 2);
        assert!(PodLabels::new(&["(".into()]).is_err());
    }

    /// A pod's labels never replace its identity, an identity label of the entity or a label
    /// Prometheus gives a meaning to.
    #[test]
    fn reserved_names_are_left_out() {
        let meta = PodMeta {
            uid: "u".into(),
            labels: [
                ("pod", "victim-pod"),
                ("namespace", "team-b"),
                ("pod-uid", "x"),
                ("UUID", "GPU-x"),
                ("job", "j"),
                ("instance", "i"),
                ("le", "1"),
                ("quantile", "0.5"),
                ("exported_pod", "victim-pod"),
                ("exported.namespace", "team-b"),
                ("DCGM_FI_DRIVER_VERSION", "1"),
                ("dra-claim-name", "c"),
                ("team", "a"),
                ("podium", "p"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        };
        let kept: Vec<String> = PodLabels::new(&[])
            .unwrap()
            .attributes(&meta)
            .iter()
            .map(|a| a.key.prometheus.to_string())
            .collect();
        assert_eq!(kept, ["podium", "team"]);
        for name in ["__name__", "__meta_x", "Hostname", "hostname", "gpu", "pid"] {
            assert!(reserved(name), "{name}");
        }
        assert!(!reserved("app_kubernetes_io_name"));
    }
}
