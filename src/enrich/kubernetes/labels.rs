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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use crate::lock::LockExt;
use crate::snapshot::{Attribute, AttributeKey, Placement};

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
    /// Key → its attribute key, or `None` when the allowlist rejects it. Cleared when it grows past
    /// [`KEY_CACHE`] entries.
    keys: Mutex<HashMap<String, Option<Arc<AttributeKey>>>>,
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
        })
    }

    fn key(&self, label: &str) -> Option<Arc<AttributeKey>> {
        let mut keys = self.keys.lock_unpoisoned();
        if let Some(k) = keys.get(label) {
            return k.clone();
        }
        let allowed = self.allow.is_empty() || self.allow.iter().any(|r| r.is_match(label));
        let key = allowed.then(|| {
            AttributeKey::new(
                sanitize(label),
                format!("k8s.pod.label.{label}"),
                Placement::Labels,
            )
        });
        if keys.len() >= KEY_CACHE {
            keys.clear();
        }
        keys.insert(label.to_string(), key.clone());
        key
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
}
