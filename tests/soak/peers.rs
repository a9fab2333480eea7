//! The soak's peers, each one able to go away and come back on the same address: a kubelet
//! (pod-resources `List` over gRPC on a unix socket), a Kubernetes API server (pod list + watch over
//! plain HTTP) and an OTLP/HTTP collector accepting `/v1/metrics` and `/v1/logs` and counting both.
//! "Away" means what a user sees when a peer dies: the socket or port is closed (connections refused)
//! and every open connection is cut.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::support::otlp;
use dcgm_otel::enrich::kubernetes::podresources::{
    ContainerDevices, ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources, LIST_PATH,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

// ------------------------------------------------------------------------------------------------
// kubelet

#[derive(Clone)]
struct KubeletService(Arc<ListPodResourcesResponse>);

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for KubeletService {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFut<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let pods = self.0.clone();
        Box::pin(async move {
            if req.uri().path() != LIST_PATH {
                return Ok(tonic::Status::unimplemented("List only").into_http());
            }
            let codec =
                tonic_prost::ProstCodec::<ListPodResourcesResponse, ListPodResourcesRequest>::default();
            let svc = tower::service_fn(move |_: tonic::Request<ListPodResourcesRequest>| {
                let pods = (*pods).clone();
                async move { Ok::<_, tonic::Status>(tonic::Response::new(pods)) }
            });
            Ok(tonic::server::Grpc::new(codec).unary(svc, req).await)
        })
    }
}

/// One pod per device (`soak/job-<i>`, container `cuda`), by GPU or MIG device UUID.
pub fn pods_for(gpu_uuids: &[String]) -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: gpu_uuids
            .iter()
            .enumerate()
            .map(|(i, uuid)| PodResources {
                name: format!("job-{i}"),
                namespace: "soak".into(),
                containers: vec![ContainerResources {
                    name: "cuda".into(),
                    devices: vec![ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec![uuid.clone()],
                        topology: None,
                    }],
                    dynamic_resources: vec![],
                }],
            })
            .collect(),
    }
}

/// The fake kubelet.
pub struct Kubelet {
    runtime: tokio::runtime::Runtime,
    socket: PathBuf,
    reply: Arc<ListPodResourcesResponse>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Kubelet {
    pub fn start(socket: &Path, reply: ListPodResourcesResponse) -> Kubelet {
        let mut k = Kubelet {
            runtime: runtime(),
            socket: socket.to_path_buf(),
            reply: Arc::new(reply),
            stop: None,
        };
        k.up();
        k
    }

    pub fn up(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _guard = self.runtime.enter();
        let listener = tokio::net::UnixListener::bind(&self.socket).unwrap();
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let svc = KubeletService(self.reply.clone());
        self.runtime.spawn(async move {
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(svc, incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        self.stop = Some(tx);
    }

    pub fn down(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

// ------------------------------------------------------------------------------------------------
// Kubernetes API server

/// A Kubernetes API server with a fixed set of pods: `list` answers them, `watch` stays open without
/// events (until the server goes away, which cuts it).
pub struct ApiServer {
    pub port: u16,
    up: Arc<AtomicBool>,
    generation: Arc<AtomicU64>,
    pods_json: Arc<String>,
}

impl ApiServer {
    pub fn start(pod_names: &[String], node: &str) -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let items: Vec<String> = pod_names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                format!(
                    r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"soak","uid":"00000000-0000-4000-8000-{i:012}","resourceVersion":"10","labels":{{"team":"soak"}}}},"spec":{{"nodeName":"{node}"}}}}"#
                )
            })
            .collect();
        let api = ApiServer {
            port,
            up: Arc::new(AtomicBool::new(true)),
            generation: Arc::new(AtomicU64::new(0)),
            pods_json: Arc::new(items.join(",")),
        };
        api.serve(listener);
        api
    }

    fn serve(&self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        let (up, generation, pods) = (
            self.up.clone(),
            self.generation.clone(),
            self.pods_json.clone(),
        );
        let mine = generation.load(Ordering::SeqCst);
        std::thread::spawn(move || {
            // Accept until this generation ends: then the listener is dropped (port closed).
            while generation.load(Ordering::SeqCst) == mine {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (up, generation, pods) = (up.clone(), generation.clone(), pods.clone());
                        std::thread::spawn(move || answer(conn, &up, &generation, mine, &pods));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
    }

    /// Close the port and cut every open watch.
    pub fn down(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Listen again on the same port.
    pub fn up(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(l) => break l,
                Err(e) if Instant::now() > deadline => panic!("API server cannot rebind: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        self.up.store(true, Ordering::SeqCst);
        self.serve(listener);
    }

    /// A kubeconfig naming this server.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: soak\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{}'}}\ncontexts:\n- name: soak\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user: {{token: soak}}\n",
                self.port
            ),
        )
        .unwrap();
        path
    }
}

fn answer(mut conn: TcpStream, up: &AtomicBool, generation: &AtomicU64, mine: u64, pods: &str) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    if !up.load(Ordering::SeqCst) {
        return;
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
    let slices = target.starts_with("/apis/resource.k8s.io/");
    if !target.contains("watch=") {
        let items = if slices { "" } else { pods };
        let body =
            format!(r#"{{"kind":"List","metadata":{{"resourceVersion":"10"}},"items":[{items}]}}"#);
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return;
    }
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let _ = conn.flush();
    // Hold the watch open (no events) until the server goes away.
    while generation.load(Ordering::SeqCst) == mine {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

// ------------------------------------------------------------------------------------------------
// OTLP collector

/// Requests a collector received, by signal.
#[derive(Default)]
pub struct Received {
    pub metrics: AtomicU64,
    pub logs: AtomicU64,
    pub bytes: AtomicU64,
    /// Log records in the `/v1/logs` requests, and their encoded bytes (after gzip, if any).
    pub log_records: AtomicU64,
    pub log_bytes: AtomicU64,
    /// The largest `/v1/logs` request, encoded bytes.
    pub max_log_request: AtomicU64,
    /// Arrival times (seconds since the soak began) of the requests of any signal (a few per second;
    /// the oldest beyond a day's worth are forgotten).
    pub recent: Mutex<VecDeque<f64>>,
    /// The same for `/v1/logs` requests alone.
    pub recent_logs: Mutex<VecDeque<f64>>,
}

impl Received {
    fn arrived(&self, at: f64, logs: bool) {
        let lists = [Some(&self.recent), logs.then_some(&self.recent_logs)];
        for list in lists.into_iter().flatten() {
            let mut recent = list.lock().unwrap();
            recent.push_back(at);
            if recent.len() > 200_000 {
                recent.pop_front();
            }
        }
    }

    fn count(&self, seen: &otlp::Seen, at: f64) {
        let counter = if seen.logs { &self.logs } else { &self.metrics };
        counter.fetch_add(1, Ordering::SeqCst);
        self.bytes
            .fetch_add(seen.body_bytes as u64, Ordering::SeqCst);
        if seen.logs {
            self.log_records
                .fetch_add(seen.log_records as u64, Ordering::SeqCst);
            self.log_bytes
                .fetch_add(seen.plain_bytes as u64, Ordering::SeqCst);
            self.max_log_request
                .fetch_max(seen.plain_bytes as u64, Ordering::SeqCst);
        }
        self.arrived(at, seen.logs);
    }
}

/// An OTLP/HTTP collector on 127.0.0.1 taking `/v1/metrics` and `/v1/logs`: the tests' one receiver
/// (`support::otlp`), counting what it gets; down means the receiver is dropped (port closed, open
/// connections cut), up a new one on the same port.
pub struct Collector {
    pub port: u16,
    pub received: Arc<Received>,
    receiver: Option<otlp::Receiver>,
    epoch: Instant,
}

impl Collector {
    pub fn start(epoch: Instant) -> Collector {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut c = Collector {
            port,
            received: Arc::default(),
            receiver: None,
            epoch,
        };
        c.up();
        c
    }

    pub fn up(&mut self) {
        let (received, epoch) = (self.received.clone(), self.epoch);
        self.receiver = Some(otlp::Receiver::http_counting(
            self.port,
            Arc::new(move |seen: &otlp::Seen| received.count(seen, epoch.elapsed().as_secs_f64())),
        ));
    }

    pub fn down(&mut self) {
        self.receiver = None;
        // Let the accept loop and the connections see it before the port is reused.
        std::thread::sleep(Duration::from_millis(100));
    }

    /// The first request received at or after `t` (seconds since the soak began).
    pub fn first_since(&self, t: f64) -> Option<f64> {
        first_at_or_after(&self.received.recent, t)
    }

    /// The first `/v1/logs` request received at or after `t`.
    pub fn first_logs_since(&self, t: f64) -> Option<f64> {
        first_at_or_after(&self.received.recent_logs, t)
    }
}

fn first_at_or_after(times: &Mutex<VecDeque<f64>>, t: f64) -> Option<f64> {
    times.lock().unwrap().iter().copied().find(|&at| at >= t)
}
