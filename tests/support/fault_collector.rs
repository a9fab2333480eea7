//! A fake OTLP collector that misbehaves on a script, as a collector under stress does: it answers a
//! retryable failure slowly (gRPC `DEADLINE_EXCEEDED`, HTTP 429/503 after a delay), throttles (gRPC
//! `RetryInfo`, HTTP `Retry-After` in seconds or as an HTTP-date), answers a partial success, or
//! accepts a request and never answers it. gRPC (HTTP/2 without TLS) or OTLP/HTTP, metrics and logs,
//! on 127.0.0.1 inside the test; stopped when dropped.
//!
//! It records every attempt from its own side — when the request arrived, when (and what) it answered —
//! so a test reads the exporter's retry timing as a collector sees it. Tests assert lower bounds only
//! (an attempt may come later than the schedule says, never earlier): a loaded machine makes things
//! late, never early. The answers are written by hand on hyper (not tonic's server, which would answer
//! a request it holds past the client's `grpc-timeout` itself: a hung collector must not).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use prost::Message;

/// Which OTLP signal a request carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Metrics,
    Logs,
}

/// The delay a throttling answer asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Throttle {
    /// gRPC `RetryInfo` with this delay; over HTTP `Retry-After: <whole seconds, rounded up>`.
    After(Duration),
    /// HTTP `Retry-After: <HTTP-date>`: this long after the answer, rounded up to a whole second
    /// (an HTTP-date has no fractions). The date sent is in [`Attempt::not_before`].
    HttpDate(Duration),
}

/// How the collector answers one attempt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reply {
    /// Success; a partial success when `rejected` > 0 (with `message`).
    Accept {
        rejected: i64,
        message: &'static str,
    },
    /// A failure `after` the request arrived: gRPC status `grpc` or HTTP
    /// `http`, with the delay the collector asks for, if any.
    Fail {
        after: Duration,
        grpc: tonic::Code,
        http: u16,
        throttle: Option<Throttle>,
    },
    /// Read the request and never answer (the connection stays open).
    Hang,
    /// gRPC `UNAVAILABLE` whose `grpc-status-details-bin` is not base64 (a broken or hostile
    /// collector); over HTTP a plain 503.
    BadStatusDetails,
}

impl Reply {
    /// A plain success.
    pub const OK: Reply = Reply::Accept {
        rejected: 0,
        message: "",
    };

    /// A retryable failure `after` the request arrived, asking for no particular delay: gRPC
    /// `DEADLINE_EXCEEDED`, HTTP 503.
    pub fn slow_failure(after: Duration) -> Reply {
        Reply::Fail {
            after,
            grpc: tonic::Code::DeadlineExceeded,
            http: 503,
            throttle: None,
        }
    }

    /// A throttling answer `after` the request arrived: gRPC `RESOURCE_EXHAUSTED` with `RetryInfo`,
    /// HTTP 429 with `Retry-After`.
    pub fn throttle(after: Duration, throttle: Throttle) -> Reply {
        Reply::Fail {
            after,
            grpc: tonic::Code::ResourceExhausted,
            http: 429,
            throttle: Some(throttle),
        }
    }
}

/// One request as the collector saw it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub signal: Signal,
    /// When the request arrived (monotonic, and the wall clock).
    pub arrived: Instant,
    pub arrived_wall: SystemTime,
    /// When the answer went out (`None`: not yet, or never for [`Reply::Hang`]).
    pub answered: Option<Instant>,
    /// The HTTP-date a `Retry-After` named (the earliest moment the collector allows the next try).
    pub not_before: Option<SystemTime>,
    pub reply: Reply,
}

#[derive(Default)]
struct State {
    attempts: Vec<Attempt>,
    metrics: VecDeque<Reply>,
    logs: VecDeque<Reply>,
}

type Shared = Arc<Mutex<State>>;

/// The fake collector, stopped (runtime, connections and all) when dropped.
pub struct FaultCollector {
    state: Shared,
    pub addr: SocketAddr,
    pub grpc: bool,
    _runtime: tokio::runtime::Runtime,
}

impl FaultCollector {
    /// gRPC (HTTP/2 with prior knowledge, no TLS) on a free port.
    pub fn grpc() -> FaultCollector {
        Self::start(true)
    }

    /// OTLP/HTTP (`/v1/metrics`, `/v1/logs`) on a free port.
    pub fn http() -> FaultCollector {
        Self::start(false)
    }

    /// `http://127.0.0.1:<port>`: the `--otlp-endpoint` of either kind.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The `--otlp-protocol` that talks to this collector.
    pub fn protocol(&self) -> &'static str {
        if self.grpc {
            "grpc"
        } else {
            "http/protobuf"
        }
    }

    /// Answer the next requests of `signal` with `replies`, in order; then accept everything.
    pub fn script(&self, signal: Signal, replies: impl IntoIterator<Item = Reply>) {
        let mut s = self.state.lock().unwrap();
        let q = match signal {
            Signal::Metrics => &mut s.metrics,
            Signal::Logs => &mut s.logs,
        };
        q.extend(replies);
    }

    /// Every attempt so far, in arrival order.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.state.lock().unwrap().attempts.clone()
    }

    /// The attempts of `signal` once at least `n` arrived; panics after `limit`.
    pub fn wait_for(&self, signal: Signal, n: usize, limit: Duration) -> Vec<Attempt> {
        let deadline = Instant::now() + limit;
        loop {
            let got: Vec<Attempt> = self
                .attempts()
                .into_iter()
                .filter(|a| a.signal == signal)
                .collect();
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "fault collector on {} ({}) got {} {signal:?} attempts, wanted {n}, within {limit:?}: {got:#?}",
                self.addr,
                self.protocol(),
                got.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn start(grpc: bool) -> FaultCollector {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let state: Shared = Arc::default();
        let st = state.clone();
        runtime.spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let svc = hyper::service::service_fn(move |req| answer(st.clone(), grpc, req));
                    if grpc {
                        let _ = hyper::server::conn::http2::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        )
                        .serve_connection(io, svc)
                        .await;
                    } else {
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, svc)
                            .await;
                    }
                });
            }
        });
        FaultCollector {
            state,
            addr,
            grpc,
            _runtime: runtime,
        }
    }
}

type Body = BoxBody<Bytes, Infallible>;

/// Answer one request as the script says, recording it.
async fn answer(
    state: Shared,
    grpc: bool,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<Body>, Infallible> {
    let arrived = Instant::now();
    let arrived_wall = SystemTime::now();
    let path = req.uri().path().to_string();
    let signal = if path.contains("logs") {
        Signal::Logs
    } else {
        Signal::Metrics
    };
    // The whole request is read before anything is decided (as a collector does).
    let _ = req.into_body().collect().await;
    let (index, reply) = {
        let mut s = state.lock().unwrap();
        let reply = match signal {
            Signal::Metrics => s.metrics.pop_front(),
            Signal::Logs => s.logs.pop_front(),
        }
        .unwrap_or(Reply::OK);
        s.attempts.push(Attempt {
            signal,
            arrived,
            arrived_wall,
            answered: None,
            not_before: None,
            reply,
        });
        (s.attempts.len() - 1, reply)
    };
    let (response, not_before) = match reply {
        Reply::Hang => std::future::pending().await,
        Reply::BadStatusDetails if grpc => (bad_status_details(), None),
        Reply::BadStatusDetails => fail(false, tonic::Code::Unavailable, 503, None),
        Reply::Accept { rejected, message } => (accept(grpc, signal, rejected, message), None),
        Reply::Fail {
            after,
            grpc: code,
            http,
            throttle,
        } => {
            tokio::time::sleep(after).await;
            fail(grpc, code, http, throttle)
        }
    };
    let mut s = state.lock().unwrap();
    if let Some(a) = s.attempts.get_mut(index) {
        a.answered = Some(Instant::now());
        a.not_before = not_before;
    }
    Ok(response)
}

fn accept(grpc: bool, signal: Signal, rejected: i64, message: &str) -> hyper::Response<Body> {
    let body = match signal {
        Signal::Metrics => ExportMetricsServiceResponse {
            partial_success: (rejected > 0).then(|| ExportMetricsPartialSuccess {
                rejected_data_points: rejected,
                error_message: message.into(),
            }),
        }
        .encode_to_vec(),
        Signal::Logs => ExportLogsServiceResponse {
            partial_success: (rejected > 0).then(|| ExportLogsPartialSuccess {
                rejected_log_records: rejected,
                error_message: message.into(),
            }),
        }
        .encode_to_vec(),
    };
    if !grpc {
        return hyper::Response::builder()
            .status(200)
            .header("content-type", "application/x-protobuf")
            .body(Full::new(Bytes::from(body)).boxed())
            .unwrap();
    }
    // One length-prefixed message (uncompressed), then the trailers.
    let mut framed = Vec::with_capacity(body.len() + 5);
    framed.push(0);
    framed.extend((body.len() as u32).to_be_bytes());
    framed.extend(body);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let frames = [
        Ok::<_, Infallible>(Frame::data(Bytes::from(framed))),
        Ok(Frame::trailers(trailers)),
    ];
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(BodyExt::boxed(StreamBody::new(tokio_stream::iter(frames))))
        .unwrap()
}

/// A failure: gRPC as a trailers-only response (status, message and `RetryInfo` details in the
/// headers), HTTP with `Retry-After`. Returns the HTTP-date sent, if any.
fn fail(
    grpc: bool,
    code: tonic::Code,
    http: u16,
    throttle: Option<Throttle>,
) -> (hyper::Response<Body>, Option<SystemTime>) {
    if grpc {
        let details = match throttle {
            Some(Throttle::After(d)) | Some(Throttle::HttpDate(d)) => retry_info_details(code, d),
            None => Vec::new(),
        };
        let status = tonic::Status::with_details(code, "fault collector", details.into());
        let response = status.into_http::<Body>();
        return (response, None);
    }
    let mut builder = hyper::Response::builder()
        .status(http)
        .header("content-type", "text/plain");
    let mut not_before = None;
    match throttle {
        Some(Throttle::After(d)) => {
            let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
            builder = builder.header("retry-after", secs.to_string());
        }
        Some(Throttle::HttpDate(d)) => {
            let at = SystemTime::now() + d;
            let secs = at.duration_since(UNIX_EPOCH).unwrap();
            let whole = UNIX_EPOCH
                + Duration::from_secs(secs.as_secs() + u64::from(secs.subsec_nanos() > 0));
            builder = builder.header("retry-after", httpdate::fmt_http_date(whole));
            not_before = Some(whole);
        }
        None => {}
    }
    let response = builder
        .body(Full::new(Bytes::from_static(b"fault collector")).boxed())
        .unwrap();
    (response, not_before)
}

/// A trailers-only gRPC failure whose status details header is not base64.
fn bad_status_details() -> hyper::Response<Body> {
    hyper::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", "14")
        .header("grpc-message", "fault collector")
        .header("grpc-status-details-bin", "%%% not base64 %%%")
        .body(Full::new(Bytes::new()).boxed())
        .unwrap()
}

/// `google.rpc.Status` with one `google.rpc.RetryInfo` detail, encoded.
fn retry_info_details(code: tonic::Code, delay: Duration) -> Vec<u8> {
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
        #[prost(message, repeated, tag = "3")]
        details: Vec<ProtoAny>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct ProtoAny {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        value: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        retry_delay: Option<ProtoDuration>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct ProtoDuration {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }
    let info = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: delay.as_secs() as i64,
            nanos: delay.subsec_nanos() as i32,
        }),
    };
    RpcStatus {
        code: code as i32,
        message: "fault collector".into(),
        details: vec![ProtoAny {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: info.encode_to_vec(),
        }],
    }
    .encode_to_vec()
}
