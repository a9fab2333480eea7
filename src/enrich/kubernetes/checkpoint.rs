//! Pod UIDs for `--kubernetes-enable-pod-uid`, from the kubelet's device-manager checkpoint.
//!
//! The pod-resources v1 API names pods but carries no UID. The kubelet's device manager records every
//! device allocation, with the pod's UID, in a JSON checkpoint file
//! (`/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`):
//! `{"Data":{"PodDeviceEntries":[{"PodUID","ContainerName","ResourceName","DeviceIDs",...}],...},...}`.
//! An allocation is identified by its resource, its device ids and its container, so joining those to the
//! `List` reply gives each listed container its pod's UID without asking the API server.
//!
//! The file is the kubelet's internal state, not an API: `DeviceIDs` is an object of device ids per NUMA
//! node since Kubernetes 1.20 and a plain list before; both are read, anything else is ignored. When the
//! file is missing or unreadable, series simply carry no `pod_uid` (logged once by the enricher).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

/// Default location of the checkpoint file.
pub const DEFAULT_CHECKPOINT: &str = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint";

/// Largest checkpoint read (the file holds one entry per allocation; a few KiB each with the
/// allocation response).
const MAX_BYTES: u64 = 32 * 1024 * 1024;

#[derive(Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "PodDeviceEntries", default)]
    entries: Option<Vec<Entry>>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "PodUID", default)]
    pod_uid: String,
    #[serde(rename = "ContainerName", default)]
    container: String,
    #[serde(rename = "ResourceName", default)]
    resource: String,
    #[serde(rename = "DeviceIDs", default)]
    device_ids: Option<DeviceIds>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum DeviceIds {
    /// Kubernetes 1.20+: device ids per NUMA node.
    PerNuma(BTreeMap<String, Vec<String>>),
    /// Before 1.20.
    Flat(Vec<String>),
}

/// Pod UID by (resource name, device id, container name).
#[derive(Debug, Default, Clone)]
pub struct UidIndex {
    by_device: HashMap<(String, String, String), String>,
}

/// Why the checkpoint could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read kubelet device checkpoint {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("kubelet device checkpoint {path} is not in a known format: {message}")]
    Format { path: String, message: String },
}

impl UidIndex {
    /// Parse a checkpoint's text.
    pub fn parse(text: &str, origin: &str) -> Result<UidIndex, CheckpointError> {
        let file: File = serde_json::from_str(text).map_err(|e| CheckpointError::Format {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        let mut index = UidIndex::default();
        for e in file.data.entries.unwrap_or_default() {
            if e.pod_uid.is_empty() {
                continue;
            }
            let ids: Vec<String> = match e.device_ids {
                Some(DeviceIds::PerNuma(m)) => m.into_values().flatten().collect(),
                Some(DeviceIds::Flat(v)) => v,
                None => Vec::new(),
            };
            for id in ids {
                index.by_device.insert(
                    (e.resource.clone(), id, e.container.clone()),
                    e.pod_uid.clone(),
                );
            }
        }
        Ok(index)
    }

    /// Read and parse the checkpoint file.
    pub fn read(path: &Path) -> Result<UidIndex, CheckpointError> {
        use std::io::Read as _;
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_BYTES).read_to_string(&mut text))
            .map_err(|source| CheckpointError::Read {
                path: path.display().to_string(),
                source,
            })?;
        UidIndex::parse(&text, &path.display().to_string())
    }

    /// The UID of the pod whose `container` was allocated `device_id` of `resource`.
    pub fn uid(&self, resource: &str, device_id: &str, container: &str) -> Option<&str> {
        self.by_device
            .get(&(
                resource.to_string(),
                device_id.to_string(),
                container.to_string(),
            ))
            .map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_device.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_device.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_device_id_layouts() {
        let text = r#"{"Data":{"PodDeviceEntries":[
            {"PodUID":"uid-a","ContainerName":"c","ResourceName":"nvidia.com/gpu","DeviceIDs":{"0":["GPU-1"],"1":["GPU-2"]},"AllocResp":"CiAKFk5WSURJQQ=="},
            {"PodUID":"uid-b","ContainerName":"d","ResourceName":"nvidia.com/mig-1g.10gb","DeviceIDs":["MIG-9"],"AllocResp":null},
            {"PodUID":"","ContainerName":"e","ResourceName":"x","DeviceIDs":["y"]}
          ],"RegisteredDevices":{"nvidia.com/gpu":["GPU-1","GPU-2"]}},"Checksum":1234}"#;
        let idx = UidIndex::parse(text, "test").unwrap();
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.uid("nvidia.com/gpu", "GPU-2", "c"), Some("uid-a"));
        assert_eq!(
            idx.uid("nvidia.com/mig-1g.10gb", "MIG-9", "d"),
            Some("uid-b")
        );
        assert_eq!(idx.uid("nvidia.com/gpu", "GPU-2", "other"), None);
    }

    #[test]
    fn empty_and_bad_files() {
        assert!(
            UidIndex::parse(r#"{"Data":{"PodDeviceEntries":null},"Checksum":1}"#, "t")
                .unwrap()
                .is_empty()
        );
        assert!(UidIndex::parse("[1,2]", "t").is_err());
        assert!(UidIndex::parse("", "t").is_err());
        // serde_json names the position of what it could not read.
        let e = UidIndex::parse("{\"Data\":\n  {\"PodDeviceEntries\": 7}}", "cp").unwrap_err();
        assert_eq!(
            e.to_string(),
            "kubelet device checkpoint cp is not in a known format: invalid type: integer `7`, expected a sequence at line 2 column 24"
        );
    }
}
