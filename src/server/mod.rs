//! The HTTP server on :9400: `/metrics` (the cached, pre-rendered body; gzip when asked), `/health`
//! (200 when the last collection succeeded and is fresh, 503 with the reason otherwise), `/ready`
//! (200 once the first collection is published) and a small `/` page. A request never triggers a
//! collection: the handler copies bytes that the collector thread rendered.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::export::prometheus::RenderedBody;
use crate::pipeline::CollectorStatus;

pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    pub body: Arc<ArcSwap<RenderedBody>>,
    pub status: Arc<CollectorStatus>,
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

const INDEX_HTML: &str = "<!DOCTYPE html>\n<html><head><title>dcgm-otel</title></head><body>\
<h1>dcgm-otel</h1><p>NVIDIA GPU metrics read through DCGM.</p>\
<ul><li><a href=\"./metrics\">metrics</a></li><li><a href=\"./health\">health</a></li>\
<li><a href=\"./ready\">ready</a></li></ul></body></html>\n";

fn accepts_gzip(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|enc| {
            let mut parts = enc.trim().split(';');
            let name = parts.next().unwrap_or("").trim();
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !q_zero
        })
}

/// Route one request.
pub fn route(state: &ServerState, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let known = matches!(path, "/" | "/metrics" | "/health" | "/ready");
    if !known {
        return text(StatusCode::NOT_FOUND, "404 page not found\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let mut resp = match path {
        "/metrics" => {
            let body = state.body.load();
            let gzip = accepts_gzip(req) && !body.gzip.is_empty();
            let bytes = if gzip { body.gzip.clone() } else { body.text.clone() };
            let mut r = Response::new(Full::new(bytes));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(METRICS_CONTENT_TYPE),
            );
            if gzip {
                r.headers_mut()
                    .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            r.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            r
        }
        "/health" => match state.status.health() {
            Ok(()) => text(StatusCode::OK, "OK\n"),
            Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("KO: {reason}\n")),
        },
        "/ready" => {
            if state.status.ready() {
                text(StatusCode::OK, "ready\n")
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "not ready: first collection pending\n")
            }
        }
        _ => {
            let mut r = Response::new(Full::new(Bytes::from_static(INDEX_HTML.as_bytes())));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            r
        }
    };
    if req.method() == Method::HEAD {
        *resp.body_mut() = Full::new(Bytes::new());
    }
    resp
}

/// Bind the first address that works.
pub async fn bind(addrs: &[SocketAddr]) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in addrs {
        match TcpListener::bind(a).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no listen address")))
}

/// Serve until `shutdown` flips to true; then stop accepting and let open requests finish.
pub async fn serve(listener: TcpListener, state: ServerState, mut shutdown: watch::Receiver<bool>) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(std::time::Duration::from_secs(10))
        .keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => break,
        };
        let (stream, _peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let builder = builder.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let resp = route(&state, &req);
                async move { Ok::<_, Infallible>(resp) }
            });
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                res = conn.as_mut() => {
                    if let Err(e) = res {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                }
                _ = conn_shutdown.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}
