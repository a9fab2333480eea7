//! The one OTLP receiver of the tests, on 127.0.0.1 inside the test: gRPC (`MetricsService` and
//! `LogsService` on one port) or HTTP (`ExportMetricsServiceRequest` and `ExportLogsServiceRequest` by
//! path, gzip or not), optionally over TLS or mTLS. It records what it decoded with how and when it
//! came, answers 404 to any other HTTP path, can fail the first requests retryably and answer a partial
//! success, and stops when dropped (the port closes and open connections are cut). Also the one reader
//! of OTLP attributes ([`text`], [`attrs`]) every test uses.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

/// How long a test waits for what it expects.
pub const WAIT: Duration = Duration::from_secs(20);

/// One decoded request: how (`"grpc"` or `"http"`), on which path, its headers, whether its body was
/// gzip-compressed, and when it arrived.
#[derive(Debug, Clone)]
pub struct Received<R> {
    pub via: &'static str,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub gzip: bool,
    pub at: Instant,
    pub req: R,
}

/// What a receiver got, and how it answers: the first `fail_first` metrics requests fail retryably
/// (gRPC UNAVAILABLE, HTTP 503 with `Retry-After: 1`), later ones succeed, partially when
/// `reject_points` > 0.
#[derive(Default)]
pub struct Got {
    pub metrics: Vec<Received<ExportMetricsServiceRequest>>,
    pub logs: Vec<Received<ExportLogsServiceRequest>>,
    /// HTTP paths answered 404.
    pub unknown: Vec<String>,
    fail_first: usize,
    failed: usize,
    reject_points: i64,
    /// Counting only (a long soak): tell `observer` of each request, keep none.
    count_only: bool,
    observer: Option<Observer>,
}

/// What a counting receiver ([`Receiver::http_counting`]) tells of each HTTP request it accepted.
pub struct Seen {
    /// A logs request (else metrics).
    pub logs: bool,
    /// The body as it came (gzip-compressed or not), and decompressed.
    pub body_bytes: usize,
    pub plain_bytes: usize,
    /// Log records in a logs request.
    pub log_records: usize,
}

pub type Observer = Arc<dyn Fn(&Seen) + Send + Sync>;

pub type Store = Arc<Mutex<Got>>;

fn partial(reject_points: i64) -> Option<ExportMetricsPartialSuccess> {
    (reject_points > 0).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: reject_points,
        error_message: "test receiver rejects some points".into(),
    })
}

fn grpc_headers(metadata: &tonic::metadata::MetadataMap) -> (Vec<(String, String)>, bool) {
    let headers: Vec<(String, String)> = metadata
        .clone()
        .into_headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let gzip = headers
        .iter()
        .any(|(k, v)| k == "grpc-encoding" && v == "gzip");
    (headers, gzip)
}

#[derive(Clone)]
struct Grpc(Store);

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let (headers, gzip) = grpc_headers(request.metadata());
        let mut got = self.0.lock().unwrap();
        if got.failed < got.fail_first {
            got.failed += 1;
            return Err(tonic::Status::unavailable("test receiver warming up"));
        }
        got.metrics.push(Received {
            via: "grpc",
            path: String::new(),
            headers,
            gzip,
            at: Instant::now(),
            req: request.into_inner(),
        });
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: partial(got.reject_points),
        }))
    }
}

#[tonic::async_trait]
impl LogsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let (headers, gzip) = grpc_headers(request.metadata());
        self.0.lock().unwrap().logs.push(Received {
            via: "grpc",
            path: String::new(),
            headers,
            gzip,
            at: Instant::now(),
            req: request.into_inner(),
        });
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

/// Both gRPC services on one server, by the request's path (tonic's router is a feature this crate
/// does not build).
#[derive(Clone)]
struct Both(MetricsServiceServer<Grpc>, LogsServiceServer<Grpc>);

type BoxFut<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for Both {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFut<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        if req
            .uri()
            .path()
            .starts_with("/opentelemetry.proto.collector.logs.")
        {
            Box::pin(self.1.call(req))
        } else {
            Box::pin(self.0.call(req))
        }
    }
}

impl tonic::server::NamedService for Both {
    const NAME: &'static str = "opentelemetry.proto.collector";
}

/// PEM material for a TLS receiver.
#[derive(Clone)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    /// Require client certificates issued by this CA (mTLS).
    pub client_ca_pem: Option<String>,
}

/// A receiver on 127.0.0.1, stopped on drop.
pub struct Receiver {
    _runtime: tokio::runtime::Runtime,
    pub store: Store,
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

impl Receiver {
    fn new_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    /// gRPC on `port` (0: any free one), metrics and logs services.
    pub fn grpc(port: u16, tls: Option<ServerTls>) -> Receiver {
        let runtime = Self::new_runtime();
        let listener = bind(&runtime, port);
        Self::grpc_with(runtime, listener, tls)
    }

    /// gRPC on a listener the test bound (and kept) beforehand: a port that refused connections
    /// until now starts answering, never free for another process in between.
    pub fn grpc_on(listener: std::net::TcpListener, tls: Option<ServerTls>) -> Receiver {
        let runtime = Self::new_runtime();
        let listener = Self::adopt(&runtime, listener);
        Self::grpc_with(runtime, listener, tls)
    }

    fn grpc_with(
        runtime: tokio::runtime::Runtime,
        listener: tokio::net::TcpListener,
        tls: Option<ServerTls>,
    ) -> Receiver {
        let store: Store = Arc::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let addr = listener.local_addr().unwrap();
        let metrics = MetricsServiceServer::new(Grpc(store.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        let logs = LogsServiceServer::new(Grpc(store.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        let mut builder = tonic::transport::Server::builder();
        if let Some(t) = tls {
            let mut cfg = tonic::transport::ServerTlsConfig::new().identity(
                tonic::transport::Identity::from_pem(&t.cert_pem, &t.key_pem),
            );
            if let Some(ca) = &t.client_ca_pem {
                cfg = cfg.client_ca_root(tonic::transport::Certificate::from_pem(ca));
            }
            builder = builder.tls_config(cfg).unwrap();
        }
        let both = Both(metrics, logs);
        runtime.spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = builder
                .serve_with_incoming_shutdown(both, incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        Receiver {
            _runtime: runtime,
            store,
            addr,
            stop: Some(tx),
        }
    }

    /// HTTP on `port` (0: any free one): metrics on `/v1/metrics`, logs on `/v1/logs`.
    pub fn http(port: u16, tls: Option<ServerTls>) -> Receiver {
        Self::http_paths(port, tls, "/v1/logs", "/v1/metrics")
    }

    /// HTTP on `port` (`/v1/metrics`, `/v1/logs`) that keeps no request but tells `observer` of each:
    /// for a long run. `port` may have been this receiver's a moment ago (waits up to 10 s for it).
    pub fn http_counting(port: u16, observer: Observer) -> Receiver {
        let r = Self::http(port, None);
        let mut got = r.store.lock().unwrap();
        got.count_only = true;
        got.observer = Some(observer);
        drop(got);
        r
    }

    /// HTTP on `port`, logs on `logs_path` and metrics on `metrics_path`.
    pub fn http_paths(
        port: u16,
        tls: Option<ServerTls>,
        logs_path: &'static str,
        metrics_path: &'static str,
    ) -> Receiver {
        let runtime = Self::new_runtime();
        let listener = bind(&runtime, port);
        Self::http_with(runtime, listener, tls, (logs_path, metrics_path))
    }

    /// HTTP (`/v1/metrics`, `/v1/logs`) on a listener the test bound (and kept) beforehand: a port
    /// that refused connections until now starts answering, never free for another process in
    /// between.
    pub fn http_on(listener: std::net::TcpListener, tls: Option<ServerTls>) -> Receiver {
        let runtime = Self::new_runtime();
        let listener = Self::adopt(&runtime, listener);
        Self::http_with(runtime, listener, tls, ("/v1/logs", "/v1/metrics"))
    }

    /// `listener` on `runtime`'s reactor.
    fn adopt(
        runtime: &tokio::runtime::Runtime,
        listener: std::net::TcpListener,
    ) -> tokio::net::TcpListener {
        listener.set_nonblocking(true).unwrap();
        let _entered = runtime.enter();
        tokio::net::TcpListener::from_std(listener).unwrap()
    }

    fn http_with(
        runtime: tokio::runtime::Runtime,
        listener: tokio::net::TcpListener,
        tls: Option<ServerTls>,
        (logs_path, metrics_path): (&'static str, &'static str),
    ) -> Receiver {
        let store: Store = Arc::default();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let addr = listener.local_addr().unwrap();
        let acceptor =
            tls.map(|t| tokio_rustls::TlsAcceptor::from(Arc::new(rustls_server_config(&t))));
        let st = store.clone();
        runtime.spawn(async move {
            loop {
                let conn = tokio::select! {
                    c = listener.accept() => c,
                    _ = &mut rx => break,
                };
                let Ok((tcp, _)) = conn else { continue };
                let st = st.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        handle_http(st.clone(), (logs_path, metrics_path), req)
                    });
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(tcp).await {
                                let io = hyper_util::rt::TokioIo::new(tls);
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(io, svc)
                                    .await;
                            }
                        }
                        None => {
                            let io = hyper_util::rt::TokioIo::new(tcp);
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, svc)
                                .await;
                        }
                    }
                });
            }
        });
        Receiver {
            _runtime: runtime,
            store,
            addr,
            stop: Some(tx),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Fail the first `n` metrics requests retryably; then reject `points` data points of each request.
    pub fn behave(&self, fail_first: usize, reject_points: i64) {
        let mut s = self.store.lock().unwrap();
        s.fail_first = fail_first;
        s.reject_points = reject_points;
    }

    /// The metrics requests received so far.
    pub fn received(&self) -> Vec<Received<ExportMetricsServiceRequest>> {
        self.store.lock().unwrap().metrics.clone()
    }

    /// The decoded metrics requests received so far.
    pub fn requests(&self) -> Vec<ExportMetricsServiceRequest> {
        self.received().into_iter().map(|r| r.req).collect()
    }

    /// Wait until at least `n` metrics requests arrived; panics after `limit`.
    pub fn wait_for(
        &self,
        n: usize,
        limit: Duration,
    ) -> Vec<Received<ExportMetricsServiceRequest>> {
        self.wait_until(limit, "requests", n, || self.received())
    }

    /// Poll `get` until it returns at least `n` items; panics after `limit`, naming `what`.
    fn wait_until<T>(
        &self,
        limit: Duration,
        what: &str,
        n: usize,
        get: impl Fn() -> Vec<T>,
    ) -> Vec<T> {
        let deadline = Instant::now() + limit;
        loop {
            let got = get();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "receiver on {} got {} {what}, wanted {n}, within {limit:?}",
                self.addr,
                got.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The first metrics request, waiting up to 30 s.
    pub fn first(&self) -> ExportMetricsServiceRequest {
        self.wait_for(1, Duration::from_secs(30))[0].req.clone()
    }

    /// The newest metrics request, waiting until at least `n` arrived (30 s at most).
    pub fn nth_or_later(&self, n: usize) -> ExportMetricsServiceRequest {
        let got = self.wait_for(n, Duration::from_secs(30));
        got[got.len() - 1].req.clone()
    }

    /// How each metrics request came (`"grpc"`, or `"http <path>"`), once at least one arrived.
    pub fn wait_for_metrics(&self) -> Vec<String> {
        self.wait_for(1, WAIT)
            .iter()
            .map(|r| match r.via {
                "http" => format!("http {}", r.path),
                via => via.to_string(),
            })
            .collect()
    }

    /// The log records received so far, with their resource's attributes, once at least `n` arrived.
    pub fn wait_for_records(&self, n: usize) -> Vec<(BTreeMap<String, String>, LogRecord)> {
        self.wait_until(WAIT, "log records", n, || {
            self.store
                .lock()
                .unwrap()
                .logs
                .iter()
                .flat_map(|r| r.req.resource_logs.iter())
                .flat_map(|rl| {
                    let res = attrs(&rl.resource.as_ref().unwrap().attributes);
                    rl.scope_logs
                        .iter()
                        .flat_map(|sl| sl.log_records.iter())
                        .map(move |r| (res.clone(), r.clone()))
                })
                .collect()
        })
    }
}

/// A listener on 127.0.0.1:`port`; a given port is retried for 10 s (a receiver coming back).
fn bind(runtime: &tokio::runtime::Runtime, port: u16) -> tokio::net::TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", port))) {
            Ok(l) => return l,
            Err(e) if port == 0 || Instant::now() > deadline => {
                panic!("cannot bind 127.0.0.1:{port}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

async fn handle_http(
    store: Store,
    (logs_path, metrics_path): (&'static str, &'static str),
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt;
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let path = req.uri().path().to_string();
    let post = req.method() == hyper::Method::POST;
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let reply = |status: u16, body: Vec<u8>| {
        Ok(hyper::Response::builder()
            .status(status)
            .header("content-type", "application/x-protobuf")
            .body(http_body_util::Full::new(bytes::Bytes::from(body)))
            .unwrap())
    };
    if !post || (path != logs_path && path != metrics_path) {
        store.lock().unwrap().unknown.push(path);
        return reply(404, Vec::new());
    }
    let gzip = headers
        .iter()
        .any(|(k, v)| k == "content-encoding" && v == "gzip");
    let raw = if gzip {
        let mut out = Vec::new();
        if flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .is_err()
        {
            return reply(400, Vec::new());
        }
        out
    } else {
        body.to_vec()
    };
    let at = Instant::now();
    if path == logs_path {
        let Ok(decoded) = ExportLogsServiceRequest::decode(&raw[..]) else {
            return reply(400, Vec::new());
        };
        let mut got = store.lock().unwrap();
        if let Some(observer) = &got.observer {
            observer(&Seen {
                logs: true,
                body_bytes: body.len(),
                plain_bytes: raw.len(),
                log_records: decoded
                    .resource_logs
                    .iter()
                    .flat_map(|r| &r.scope_logs)
                    .map(|s| s.log_records.len())
                    .sum(),
            });
        }
        if got.count_only {
            return reply(200, ExportLogsServiceResponse::default().encode_to_vec());
        }
        got.logs.push(Received {
            via: "http",
            path,
            headers,
            gzip,
            at,
            req: decoded,
        });
        return reply(200, ExportLogsServiceResponse::default().encode_to_vec());
    }
    let Ok(decoded) = ExportMetricsServiceRequest::decode(&raw[..]) else {
        return reply(400, Vec::new());
    };
    let mut got = store.lock().unwrap();
    if got.failed < got.fail_first {
        got.failed += 1;
        return Ok(hyper::Response::builder()
            .status(503)
            .header("retry-after", "1")
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .unwrap());
    }
    if let Some(observer) = &got.observer {
        observer(&Seen {
            logs: false,
            body_bytes: body.len(),
            plain_bytes: raw.len(),
            log_records: 0,
        });
    }
    if !got.count_only {
        got.metrics.push(Received {
            via: "http",
            path,
            headers,
            gzip,
            at,
            req: decoded,
        });
    }
    reply(
        200,
        ExportMetricsServiceResponse {
            partial_success: partial(got.reject_points),
        }
        .encode_to_vec(),
    )
}

fn rustls_server_config(t: &ServerTls) -> rustls::ServerConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(t.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(t.key_pem.as_bytes()).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match &t.client_ca_pem {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(c.unwrap()).unwrap();
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    builder.with_single_cert(certs, key).unwrap()
}

// ---- reading requests -----------------------------------------------------------------------------

/// An attribute's value as text: a string as it is, an int, double or bool in Rust's `Display` (48,
/// 2.5, true). Where a test asserts the type too, it reads [`value`].
pub fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

/// Attribute key → [`text`] of its value.
pub fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(kv))).collect()
}

/// The typed value of the attribute `key`.
pub fn value<'a>(kvs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    kvs.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

/// A log record's body as text.
pub fn body(r: &LogRecord) -> String {
    match r.body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// Per resource (its attributes): metric name → the data points' attribute sets.
pub type Resources = Vec<(
    BTreeMap<String, String>,
    BTreeMap<String, Vec<BTreeMap<String, String>>>,
)>;

pub fn resources(req: &ExportMetricsServiceRequest) -> Resources {
    req.resource_metrics
        .iter()
        .map(|rm| {
            let mut metrics: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    let points = match &m.data {
                        Some(Data::Gauge(g)) => {
                            g.data_points.iter().map(|p| attrs(&p.attributes)).collect()
                        }
                        Some(Data::Sum(s)) => {
                            s.data_points.iter().map(|p| attrs(&p.attributes)).collect()
                        }
                        _ => Vec::new(),
                    };
                    metrics.entry(m.name.clone()).or_default().extend(points);
                }
            }
            (attrs(&rm.resource.as_ref().unwrap().attributes), metrics)
        })
        .collect()
}
