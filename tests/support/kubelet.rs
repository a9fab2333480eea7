//! The fake kubelet: a tonic gRPC server answering `v1.PodResourcesLister/List` on a unix socket, the
//! one the end-to-end tests, the soak and the measurement benches talk to. It can go away (the socket
//! is removed, open connections are cut) and come back on the same path, answer a reply that is not a
//! `ListPodResourcesResponse`, and count the `List` calls it answered.

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use dcgm_otel::enrich::kubernetes::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse,
    NumaNode, PodResources, TopologyInfo, LIST_PATH,
};

/// What the fake kubelet answers to `List`.
#[derive(Clone)]
pub enum Reply {
    Pods(ListPodResourcesResponse),
    /// A well-framed gRPC reply whose protobuf is not a `ListPodResourcesResponse` (field 1 as a varint).
    Garbage,
}

/// Not a `ListPodResourcesResponse`: field 1 with the wrong wire type.
#[derive(Clone, PartialEq, ::prost::Message)]
struct GarbageReply {
    #[prost(uint64, tag = "1")]
    x: u64,
}

struct State {
    reply: Reply,
    calls: u64,
}

#[derive(Clone)]
struct Service(Arc<Mutex<State>>);

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for Service {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFut<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != LIST_PATH {
                return Ok(tonic::Status::unimplemented("fake kubelet: List only").into_http());
            }
            let reply = {
                let mut s = state.lock().unwrap();
                s.calls += 1;
                s.reply.clone()
            };
            Ok(match reply {
                Reply::Pods(pods) => {
                    let codec = tonic_prost::ProstCodec::<
                        ListPodResourcesResponse,
                        ListPodResourcesRequest,
                    >::default();
                    let svc =
                        tower::service_fn(move |_: tonic::Request<ListPodResourcesRequest>| {
                            let pods = pods.clone();
                            async move { Ok::<_, tonic::Status>(tonic::Response::new(pods)) }
                        });
                    tonic::server::Grpc::new(codec).unary(svc, req).await
                }
                Reply::Garbage => {
                    let codec =
                        tonic_prost::ProstCodec::<GarbageReply, ListPodResourcesRequest>::default();
                    let svc =
                        tower::service_fn(|_: tonic::Request<ListPodResourcesRequest>| async {
                            Ok::<_, tonic::Status>(tonic::Response::new(GarbageReply { x: 7 }))
                        });
                    tonic::server::Grpc::new(codec).unary(svc, req).await
                }
            })
        })
    }
}

/// A fake kubelet on a unix socket; stopped on drop.
pub struct Kubelet {
    /// The runtime serving while up: shutting it down ends the server and every open connection.
    runtime: Option<tokio::runtime::Runtime>,
    socket: PathBuf,
    state: Arc<Mutex<State>>,
}

impl Kubelet {
    /// Serve `reply` on `socket` (a stale socket file there is replaced).
    pub fn start(socket: &Path, reply: Reply) -> Kubelet {
        let mut k = Kubelet {
            runtime: None,
            socket: socket.to_path_buf(),
            state: Arc::new(Mutex::new(State { reply, calls: 0 })),
        };
        k.up();
        k
    }

    /// Serve again on the same path (after [`Kubelet::down`]).
    pub fn up(&mut self) {
        self.down();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        {
            let _guard = runtime.enter();
            let listener = tokio::net::UnixListener::bind(&self.socket).unwrap();
            let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
            let svc = Service(self.state.clone());
            runtime.spawn(async move {
                let _ = tonic::transport::Server::builder()
                    .serve_with_incoming(svc, incoming)
                    .await;
            });
        }
        self.runtime = Some(runtime);
    }

    /// Stop serving, cut every open connection and remove the socket (the kubelet is down).
    pub fn down(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(Duration::from_secs(5));
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// What later `List` calls get.
    pub fn set_reply(&self, reply: Reply) {
        self.state.lock().unwrap().reply = reply;
    }

    /// `List` calls answered so far.
    pub fn calls(&self) -> u64 {
        self.state.lock().unwrap().calls
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.down();
    }
}

/// A container holding the devices `ids` of the device plugin resource `resource` (NUMA node 0).
pub fn container(name: &str, resource: &str, ids: &[&str]) -> ContainerResources {
    ContainerResources {
        name: name.into(),
        devices: vec![ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
            topology: Some(TopologyInfo {
                nodes: vec![NumaNode { id: 0 }],
            }),
        }],
        dynamic_resources: vec![],
    }
}

pub fn pod(namespace: &str, name: &str, containers: Vec<ContainerResources>) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: namespace.into(),
        containers,
    }
}

/// The reply listing `list`.
pub fn pods(list: Vec<PodResources>) -> Reply {
    Reply::Pods(ListPodResourcesResponse {
        pod_resources: list,
    })
}
