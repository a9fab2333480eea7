//! The Kubernetes objects the exporter reads, as typed structs holding only the fields it uses: pods
//! (name, namespace, UID, labels, node), DRA ResourceSlices (driver, pool, node, devices and their string
//! attributes) and ConfigMaps (the counters key). Decoding into them skips everything else of an object
//! (a pod's spec and managed fields are most of its bytes) instead of building it as a JSON tree, so
//! memory follows what is kept, not what the server sends. Every field is optional: a missing one is
//! the parser's to judge (the enricher's `parse_pod`, ...); a field of the wrong type makes
//! the object undecodable, and it is skipped.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::stream::ApiObject;

/// `metadata`, as far as the exporter reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct ObjectMeta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    #[serde(rename = "resourceVersion")]
    pub resource_version: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
}

/// `spec.nodeName`, the one field of a pod's or ResourceSlice's spec read for the node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct NodeSpec {
    #[serde(rename = "nodeName")]
    pub node_name: Option<String>,
}

/// A pod.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub spec: NodeSpec,
}

impl ApiObject for Pod {
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn node_name(&self) -> Option<&str> {
        self.spec.node_name.as_deref()
    }
}

/// A device attribute's value: only strings are read (`{"string": "gpu"}`); ints, bools and versions
/// are skipped.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct DeviceAttribute {
    pub string: Option<String>,
}

/// `resource.k8s.io` v1beta1's `basic` device layout.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct BasicDevice {
    pub attributes: Option<BTreeMap<String, DeviceAttribute>>,
}

/// One device of a ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct SliceDevice {
    pub name: Option<String>,
    pub attributes: Option<BTreeMap<String, DeviceAttribute>>,
    pub basic: Option<BasicDevice>,
}

/// `spec.pool`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct Pool {
    pub name: Option<String>,
}

/// A ResourceSlice's `spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct SliceSpec {
    pub driver: Option<String>,
    pub pool: Option<Pool>,
    #[serde(rename = "nodeName")]
    pub node_name: Option<String>,
    pub devices: Option<Vec<SliceDevice>>,
}

/// A `resource.k8s.io` ResourceSlice.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct ResourceSlice {
    pub metadata: ObjectMeta,
    pub spec: SliceSpec,
}

impl ApiObject for ResourceSlice {
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn node_name(&self) -> Option<&str> {
        self.spec.node_name.as_deref()
    }
}

/// A ConfigMap's `data`, as far as `-m` reads it: the counters key (`metrics`, dcgm-exporter's).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct CountersData {
    pub metrics: Option<String>,
}

/// A ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default)]
pub struct ConfigMap {
    pub metadata: ObjectMeta,
    pub data: Option<CountersData>,
}

impl ApiObject for ConfigMap {
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}
