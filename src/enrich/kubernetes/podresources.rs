//! The kubelet pod-resources v1 API: the few messages dcgm-otel needs, written by hand with
//! `prost` derives (no `protoc` at build time), and a minimal gRPC client for
//! `v1.PodResourcesLister/List` over the kubelet's unix socket.
//!
//! Field numbers follow `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto` (`package v1`). Fields this
//! exporter does not read (`cpu_ids`, `memory`, CDI device names) are left out: protobuf decoding
//! skips unknown fields, so replies from newer kubelets decode unchanged. `dynamic_resources` (Dynamic
//! Resource Allocation, Kubernetes 1.31+: which driver, pool and device each ResourceClaim of a
//! container was given) is read for `--kubernetes-enable-dra`. The message types are public
//! so that tests can serve them from a fake kubelet.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::uri::PathAndQuery;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Endpoint, Uri};

use crate::error_chain::error_chain;

/// Full gRPC path of the one call used.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";

/// The kubelet's default socket (dcgm-exporter's `--pod-resources-kubelet-socket` default).
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// Largest reply accepted (a node with hundreds of pods stays far below this).
const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// `ListPodResourcesRequest{}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse{pod_resources = 1}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `PodResources{name = 1, namespace = 2, containers = 3}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `ContainerResources{name = 1, devices = 2, dynamic_resources = 5}` (cpu_ids = 3, memory = 4 unused).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// `DynamicResource{claim_name = 2, claim_namespace = 3, claim_resources = 4}` (1 was `class_name`,
/// removed in Kubernetes 1.31).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct DynamicResource {
    #[prost(string, tag = "2")]
    pub claim_name: String,
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// `ClaimResource{cdi_devices = 1 (unused), driver_name = 2, pool_name = 3, device_name = 4}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ClaimResource {
    #[prost(string, tag = "2")]
    pub driver_name: String,
    #[prost(string, tag = "3")]
    pub pool_name: String,
    #[prost(string, tag = "4")]
    pub device_name: String,
}

/// `ContainerDevices{resource_name = 1, device_ids = 2, topology = 3}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// `TopologyInfo{nodes = 1}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct TopologyInfo {
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// `NUMANode{ID = 1}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NumaNode {
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// Why a `List` call produced no reply.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The socket is missing or refuses connections (kubelet down, wrong path, not mounted).
    #[error("kubelet pod-resources socket {path}: {message}")]
    Unavailable { path: PathBuf, message: String },
    /// No complete reply within the deadline.
    #[error("kubelet pod-resources List timed out after {0:?}")]
    Timeout(Duration),
    /// The kubelet answered with a gRPC error, or with bytes that are not a `ListPodResourcesResponse`.
    #[error("kubelet pod-resources List failed: {0}")]
    Failed(String),
}

impl ListError {
    /// The `result` label of `dcgm_otel_kubelet_requests_total`.
    pub fn result_label(&self) -> &'static str {
        match self {
            ListError::Unavailable { .. } => "unavailable",
            ListError::Timeout(_) => "timeout",
            ListError::Failed(_) => "error",
        }
    }
}

/// Call `v1.PodResourcesLister/List` on the unix socket `socket`, all within `deadline`.
///
/// A fresh connection is made for every call and closed afterwards (as the kubelet's own clients do):
/// one call per collect interval costs a unix connect and an HTTP/2 handshake, and a kubelet restart
/// never leaves a dead connection behind.
pub async fn list(
    socket: &Path,
    deadline: Duration,
) -> Result<ListPodResourcesResponse, ListError> {
    match tokio::time::timeout(deadline, list_inner(socket)).await {
        Ok(r) => r,
        Err(_) => Err(ListError::Timeout(deadline)),
    }
}

async fn list_inner(socket: &Path) -> Result<ListPodResourcesResponse, ListError> {
    let unavailable = |message: String| ListError::Unavailable {
        path: socket.to_path_buf(),
        message,
    };
    // The URI only fills the HTTP/2 :authority; the connector below ignores it.
    let endpoint = Endpoint::from_static("http://localhost");
    let path = socket.to_path_buf();
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| unavailable(error_chain(&e)))?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_REPLY_BYTES);
    grpc.ready()
        .await
        .map_err(|e| unavailable(error_chain(&e)))?;
    let codec =
        tonic_prost::ProstCodec::<ListPodResourcesRequest, ListPodResourcesResponse>::default();
    let reply = grpc
        .unary(
            tonic::Request::new(ListPodResourcesRequest {}),
            PathAndQuery::from_static(LIST_PATH),
            codec,
        )
        .await
        .map_err(|status| {
            ListError::Failed(format!("{:?}: {}", status.code(), status.message()))
        })?;
    Ok(reply.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn wire_format_matches_the_v1_proto_field_numbers() {
        let reply = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "p".into(),
                namespace: "n".into(),
                containers: vec![ContainerResources {
                    name: "c".into(),
                    devices: vec![ContainerDevices {
                        resource_name: "r".into(),
                        device_ids: vec!["d".into()],
                        topology: None,
                    }],
                    dynamic_resources: vec![],
                }],
            }],
        };
        let bytes = reply.encode_to_vec();
        // pod_resources (1, LEN) { name (1) "p", namespace (2) "n", containers (3) { name (1) "c",
        // devices (2) { resource_name (1) "r", device_ids (2) "d" } } }
        assert_eq!(
            bytes,
            [
                0x0a, 19, 0x0a, 1, b'p', 0x12, 1, b'n', 0x1a, 11, 0x0a, 1, b'c', 0x12, 6, 0x0a, 1,
                b'r', 0x12, 1, b'd'
            ]
        );
        assert_eq!(ListPodResourcesResponse::decode(&bytes[..]).unwrap(), reply);
    }

    #[test]
    fn unknown_fields_from_newer_kubelets_are_skipped() {
        // ContainerResources with cpu_ids (3, packed int64) and a device: cpu_ids must not break decoding.
        let mut c = Vec::new();
        c.extend_from_slice(&[0x0a, 1, b'c']); // name
        c.extend_from_slice(&[0x1a, 2, 4, 5]); // cpu_ids = [4, 5]
        c.extend_from_slice(&[0x12, 3, 0x0a, 1, b'r']); // devices { resource_name: "r" }
        let decoded = ContainerResources::decode(&c[..]).unwrap();
        assert_eq!(decoded.name, "c");
        assert_eq!(decoded.devices.len(), 1);
        assert_eq!(decoded.devices[0].resource_name, "r");
    }
}
