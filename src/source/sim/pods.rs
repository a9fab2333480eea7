//! The simulated cluster of a scenario (`pods:`): which Kubernetes pods hold which simulated GPUs and
//! MIG instances, with their labels and, for churn, the collections they exist in. `-k` on a simulated
//! fleet answers pod-resources from this list instead of a kubelet (see
//! `enrich::kubernetes::simulated`), so pod labels, cost counters and OTLP `k8s.*` resources appear as
//! they would on a cluster.
//!
//! ```yaml
//! pods:
//!   - { namespace: training, pod: llm-0, container: trainer, labels: {team: research}, devices: [{gpu: 0}] }
//!   - { namespace: inference, pod: chat-a, devices: [{gpu: 1, gpu_i_id: 1}], from_collection: 5, until_collection: 60 }
//! ```
//! A GPU listed by several pods is shared (time slicing): each gets a replica of it.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One pod of a scenario.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScenarioPod {
    pub namespace: String,
    pub pod: String,
    #[serde(default = "default_container")]
    pub container: String,
    /// The pod's labels (what the API server would say; shown with --kubernetes-enable-pod-labels).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub devices: Vec<PodDevice>,
    /// First collection (1-based) the pod exists in; default 1.
    #[serde(default)]
    pub from_collection: Option<u64>,
    /// Last collection the pod exists in; default: forever.
    #[serde(default)]
    pub until_collection: Option<u64>,
}

fn default_container() -> String {
    "main".to_string()
}

/// A device a pod holds: a whole GPU by index, or one of its MIG instances by GPU-instance id.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PodDevice {
    pub gpu: u32,
    #[serde(default)]
    pub gpu_i_id: Option<u32>,
}

impl ScenarioPod {
    /// Whether the pod exists at collection `n` (1-based).
    pub fn active_at(&self, n: u64) -> bool {
        self.from_collection.is_none_or(|f| n >= f) && self.until_collection.is_none_or(|u| n <= u)
    }

    /// Problems with the pod itself (devices are checked against the fleet by the simulated cluster).
    pub fn check(&self) -> Result<(), String> {
        let who = format!("pod {}/{}", self.namespace, self.pod);
        if self.namespace.is_empty() || self.pod.is_empty() {
            return Err("a pod needs a namespace and a pod name".into());
        }
        if self.devices.is_empty() {
            return Err(format!("{who} holds no devices"));
        }
        if let (Some(f), Some(u)) = (self.from_collection, self.until_collection) {
            if u < f {
                return Err(format!(
                    "{who}: until_collection {u} is before from_collection {f}"
                ));
            }
        }
        Ok(())
    }
}
