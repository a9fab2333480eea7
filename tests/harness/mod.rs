//! Helpers of the entity and reload end-to-end tests: the fake libdcgm in a private directory (with
//! its call log) and an OTLP/HTTP receiver on 127.0.0.1.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;

use super::common::{self, start, Exporter};

/// `libdcgm.so.4` → the fake, in a private directory.
pub struct Fake {
    pub dir: tempfile::TempDir,
}

impl Fake {
    pub fn new() -> Fake {
        let bin = common::binary();
        let lib = bin.parent().unwrap().join("libfake_libdcgm.so");
        assert!(
            lib.exists(),
            "{} is missing: cargo build --workspace",
            lib.display()
        );
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(lib, dir.path().join("libdcgm.so.4")).unwrap();
        Fake { dir }
    }

    pub fn start(&self, args: &[&str], env: &[(&str, &str)]) -> Exporter {
        let lib_dir = self.dir.path().display().to_string();
        let log = self.dir.path().join("calls.log").display().to_string();
        let mut all = vec![
            ("LD_LIBRARY_PATH", lib_dir.as_str()),
            ("FAKE_DCGM_CALL_LOG", log.as_str()),
        ];
        all.extend_from_slice(env);
        start(args, &all)
    }

    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// An OTLP/HTTP receiver on 127.0.0.1 keeping every request; stopped on drop.
pub struct Receiver {
    _runtime: tokio::runtime::Runtime,
    pub got: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    pub addr: std::net::SocketAddr,
}

impl Receiver {
    pub fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let got: Arc<Mutex<Vec<ExportMetricsServiceRequest>>> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let store = got.clone();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let store = store.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let store = store.clone();
                            async move {
                                use http_body_util::BodyExt;
                                let body = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                if let Ok(r) = ExportMetricsServiceRequest::decode(&body[..]) {
                                    store.lock().unwrap().push(r);
                                }
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::new()),
                                ))
                            }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        });
        Receiver {
            _runtime: runtime,
            got,
            addr,
        }
    }

    /// The first request with at least one data point, waiting up to 30 s.
    pub fn first(&self) -> ExportMetricsServiceRequest {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(r) = self.got.lock().unwrap().first() {
                return r.clone();
            }
            assert!(Instant::now() < deadline, "no OTLP request received");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(kv))).collect()
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

impl Receiver {
    /// The newest request, waiting until at least `n` arrived (30 s at most).
    pub fn nth_or_later(&self, n: usize) -> ExportMetricsServiceRequest {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            {
                let got = self.got.lock().unwrap();
                if got.len() >= n {
                    return got[got.len() - 1].clone();
                }
            }
            assert!(
                Instant::now() < deadline,
                "fewer than {n} OTLP requests received"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
