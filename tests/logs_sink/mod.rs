//! OTLP receivers for the incident log tests, on 127.0.0.1 inside the test: a tonic gRPC `LogsService`
//! and an HTTP server decoding `ExportLogsServiceRequest` and `ExportMetricsServiceRequest` by path.
//! They record what they decoded, answer 404 to any other path, and stop when dropped.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;

/// How long a test waits for what it expects.
pub const WAIT: Duration = Duration::from_secs(20);

/// What a receiver got: (how and where, the decoded request).
#[derive(Default)]
pub struct Got {
    pub logs: Vec<(String, ExportLogsServiceRequest)>,
    pub metrics: Vec<(String, ExportMetricsServiceRequest)>,
    /// Paths answered 404.
    pub unknown: Vec<String>,
}

pub type Store = Arc<Mutex<Got>>;

struct Grpc(Store);

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let mut got = self.0.lock().unwrap();
        got.logs.push(("grpc".into(), request.into_inner()));
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

/// A receiver on 127.0.0.1, stopped on drop: gRPC `LogsService`, or HTTP taking logs on `logs_path`
/// and metrics on `metrics_path`.
pub struct Sink {
    _runtime: tokio::runtime::Runtime,
    pub store: Store,
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

impl Sink {
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    pub fn grpc() -> Sink {
        let runtime = Self::runtime();
        let store: Store = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let logs = LogsServiceServer::new(Grpc(store.clone()));
        runtime.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(logs, incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        Sink {
            _runtime: runtime,
            store,
            addr,
            stop: Some(tx),
        }
    }

    pub fn http(logs_path: &'static str, metrics_path: &'static str) -> Sink {
        Self::http_on(0, logs_path, metrics_path)
    }

    pub fn http_on(port: u16, logs_path: &'static str, metrics_path: &'static str) -> Sink {
        let runtime = Self::runtime();
        let store: Store = Arc::default();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let st = store.clone();
        runtime.spawn(async move {
            loop {
                let conn = tokio::select! {
                    c = listener.accept() => c,
                    _ = &mut rx => break,
                };
                let Ok((tcp, _)) = conn else { continue };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        handle_http(st.clone(), (logs_path, metrics_path), req)
                    });
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        });
        Sink {
            _runtime: runtime,
            store,
            addr,
            stop: Some(tx),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The log records received so far, with their resource's attributes, once at least `n` arrived.
    pub fn wait_for_records(&self, n: usize) -> Vec<(BTreeMap<String, String>, LogRecord)> {
        let deadline = Instant::now() + WAIT;
        loop {
            let records: Vec<_> = self
                .store
                .lock()
                .unwrap()
                .logs
                .iter()
                .flat_map(|(_, req)| req.resource_logs.iter())
                .flat_map(|rl| {
                    let res = attrs(&rl.resource.as_ref().unwrap().attributes);
                    rl.scope_logs
                        .iter()
                        .flat_map(|sl| sl.log_records.iter())
                        .map(move |r| (res.clone(), r.clone()))
                })
                .collect();
            if records.len() >= n {
                return records;
            }
            assert!(
                Instant::now() < deadline,
                "receiver on {} got {} log records, wanted {n}",
                self.addr,
                records.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn wait_for_metrics(&self) -> Vec<String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let got: Vec<String> = self
                .store
                .lock()
                .unwrap()
                .metrics
                .iter()
                .map(|(via, _)| via.clone())
                .collect();
            if !got.is_empty() {
                return got;
            }
            assert!(Instant::now() < deadline, "no metrics on {}", self.addr);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub async fn handle_http(
    store: Store,
    (logs_path, metrics_path): (&'static str, &'static str),
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt;
    let path = req.uri().path().to_string();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let status = {
        let mut got = store.lock().unwrap();
        if path == logs_path {
            match ExportLogsServiceRequest::decode(&body[..]) {
                Ok(r) => {
                    got.logs.push((format!("http {path}"), r));
                    200
                }
                Err(_) => 400,
            }
        } else if path == metrics_path {
            match ExportMetricsServiceRequest::decode(&body[..]) {
                Ok(r) => {
                    got.metrics.push((format!("http {path}"), r));
                    200
                }
                Err(_) => 400,
            }
        } else {
            got.unknown.push(path);
            404
        }
    };
    Ok(hyper::Response::builder()
        .status(status)
        .header("content-type", "application/x-protobuf")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap())
}

pub fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => format!("int:{i}"),
        Some(any_value::Value::DoubleValue(d)) => format!("double:{d}"),
        other => format!("{other:?}"),
    }
}

pub fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(kv))).collect()
}

pub fn body(r: &LogRecord) -> String {
    match r.body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => format!("{other:?}"),
    }
}
