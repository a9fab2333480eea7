//! The HTTP server on :9400: `/metrics` (the body of the newest snapshot, made at the first scrape
//! after a collection and then kept, [`MetricsBody`]; gzip when asked), `/health`
//! (liveness: 200 while the process serves, 503 only when the collector is stuck past its restart
//! limit), `/ready` (200 once the first collection is published and while the data is fresh, 503 with
//! the reason otherwise) and a small `/` page. A request never triggers a
//! collection nor waits on DCGM: it renders, at most once per collection, what the collector published.
//!
//! Around [`route`], [`serve_with`] enforces what `--web-config-file` and the `--web-*` flags ask for:
//! TLS ([`tls`]), basic auth ([`auth`]; `/health` and `/ready` too unless `--web-health-auth=false`),
//! extra response headers, caps on open connections, in total and per client address ([`clients`]), and
//! on requests in flight (the excess gets a quick 503, never a queue), header-read / keep-alive-idle and
//! write timeouts ([`io`]), a 16 KiB request-head limit and no request bodies; with `--enable-pprof`,
//! CPU profiles (`pprof`). [`web`] holds the live settings, their SIGHUP reload and the HTTP
//! self-metrics.
//!
//! A request is checked in the order that keeps unauthenticated clients from starving the others: its
//! credentials first (a cached pair or a missing one costs nothing; a bcrypt takes one of two slots or is
//! answered 429 at once), then a slot — `/health` and `/ready` from a budget of their own
//! ([`PROBE_SLOTS`]), everything else from `--web-max-requests` — so wrong passwords never hold a slot
//! an authenticated scrape or a probe needs.

pub mod allocator;
pub mod args;
pub mod auth;
pub mod clients;
pub mod io;
pub mod plan;
#[cfg(feature = "pprof")]
pub mod pprof;
pub mod systemd;
pub mod tls;
pub mod web;

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
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use self::auth::Outcome;
use self::clients::ClientConnections;
use self::io::TimedIo;
pub use self::web::Pprof;
use self::web::{HttpMetrics, WebSecurity};
use crate::telemetry::self_metrics::SelfMetrics;

use crate::export::metrics_body::MetricsBody;
use crate::pipeline::CollectorStatus;

pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    pub body: Arc<MetricsBody>,
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
    let values = req
        .headers()
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok());
    gzip_acceptable(values)
}

/// Whether `Accept-Encoding` lets the body be sent gzip-compressed (RFC 9110 §12.5.3): an explicit
/// `gzip` (or `x-gzip`) entry decides by its weight (`q=0` refuses it even when `*` is also listed);
/// without one, a `*` entry with a non-zero weight accepts it. No header: identity.
fn gzip_acceptable<'a>(values: impl Iterator<Item = &'a str>) -> bool {
    let mut explicit: Option<bool> = None;
    let mut wildcard: Option<bool> = None;
    for entry in values.flat_map(|v| v.split(',')) {
        let mut parts = entry.trim().split(';');
        let name = parts.next().unwrap_or("").trim();
        let weight = parts
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                k.trim()
                    .eq_ignore_ascii_case("q")
                    .then(|| v.trim().parse::<f32>().ok())
                    .flatten()
            })
            .next_back()
            .unwrap_or(1.0);
        let acceptable = weight > 0.0;
        if name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip") {
            // Several explicit entries: a refusal wins.
            explicit = Some(explicit.unwrap_or(true) && acceptable);
        } else if name == "*" {
            wildcard = Some(wildcard.unwrap_or(true) && acceptable);
        }
    }
    explicit.or(wildcard).unwrap_or(false)
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
            let gzip = accepts_gzip(req);
            // Made already by `respond` off the async threads, unless a collection came in between.
            let body = state
                .body
                .ready(gzip)
                .unwrap_or_else(|| state.body.make(gzip));
            let gzip = gzip && !body.gzip.is_empty();
            let bytes = if gzip {
                body.gzip.clone()
            } else {
                body.text.clone()
            };
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
        "/ready" => match state.status.ready() {
            Ok(()) => text(StatusCode::OK, "ready\n"),
            Err(reason) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {reason}\n"),
            ),
        },
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

/// Pending-connection queue asked of the kernel (clamped there to `net.core.somaxconn`, like Go's
/// listener). tokio's default, 128, overflows under a scrape burst and costs clients a 1 s SYN retry.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Bind the first address that works.
pub async fn bind(addrs: &[SocketAddr]) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in addrs {
        let socket = match a {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        };
        let listener = socket.and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(*a)?;
            s.listen(LISTEN_BACKLOG)
        });
        match listener {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no listen address")))
}

/// Limits of the HTTP server (the `--web-*` flags). A zero timeout means none.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time to read a request head. hyper starts this clock whenever it waits for a request, so it also
    /// closes idle keep-alive connections (Go's IdleTimeout falls back to ReadTimeout) and slow-header
    /// clients; it also bounds a TLS handshake.
    pub read_timeout: Duration,
    /// Time to hand one response to the kernel.
    pub write_timeout: Duration,
    /// Open connections at most; more get a quick 503 (plain HTTP) or are closed (TLS).
    pub max_connections: usize,
    /// Requests other than `/health` and `/ready` being handled at once at most; more get 503.
    pub max_requests: usize,
    /// Open connections of one client address at most; more get a quick 503 (plain HTTP) or are closed.
    pub max_client_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_requests: 64,
            max_client_connections: 32,
        }
    }
}

/// `/health` and `/ready` requests handled at once at most: their own budget, apart from
/// `--web-max-requests`, so a crowd on `/metrics` never fails a probe.
pub const PROBE_SLOTS: usize = 16;

/// Largest request head (request line and headers) read; hyper answers 431 above it.
pub const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// Connections over the cap being answered 503 at once, at most (each takes up to a second).
pub const REJECTING_MAX: usize = 256;
/// How long open connections get to finish once shutdown begins (main waits 5 s in all).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Everything [`serve_with`] enforces around [`route`].
pub struct ServeOptions {
    pub limits: Limits,
    /// The live web config (swapped by a SIGHUP reload).
    pub web: Arc<ArcSwap<WebSecurity>>,
    pub metrics: Arc<HttpMetrics>,
    /// Whether `/health` and `/ready` need basic auth too (when users are configured).
    pub health_auth: bool,
    /// `--enable-pprof`: serve `/debug/pprof/profile`.
    pub pprof: Pprof,
}

impl ServeOptions {
    /// Plain HTTP, default limits, metrics counted in a registry nobody renders.
    pub fn plain() -> ServeOptions {
        ServeOptions {
            limits: Limits::default(),
            web: Arc::new(ArcSwap::from_pointee(WebSecurity::plain())),
            metrics: Arc::new(HttpMetrics::new(&SelfMetrics::default())),
            health_auth: true,
            pprof: Pprof::Off,
        }
    }
}

struct Shared {
    state: ServerState,
    web: Arc<ArcSwap<WebSecurity>>,
    metrics: Arc<HttpMetrics>,
    health_auth: bool,
    #[cfg_attr(not(feature = "pprof"), allow(dead_code))]
    pprof: Pprof,
    requests: Semaphore,
    probes: Semaphore,
}

impl Shared {
    fn new(state: ServerState, opts: ServeOptions) -> Arc<Shared> {
        Arc::new(Shared {
            state,
            web: opts.web,
            metrics: opts.metrics,
            health_auth: opts.health_auth,
            pprof: opts.pprof,
            requests: Semaphore::new(opts.limits.max_requests.clamp(1, u32::MAX as usize >> 3)),
            probes: Semaphore::new(PROBE_SLOTS),
        })
    }
}

/// The HTTP/1 settings every connection is served with: the request-head limits and the head timeout.
fn http1_builder(limits: &Limits) -> hyper::server::conn::http1::Builder {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout((!limits.read_timeout.is_zero()).then_some(limits.read_timeout))
        .keep_alive(true)
        .max_buf_size(MAX_REQUEST_HEAD)
        .max_headers(100);
    builder
}

/// Serve one connection that is already open (any byte stream, plain HTTP) with the settings and
/// handlers of [`serve_with`], until the peer is done. The seam `fuzz/` feeds raw request heads through.
pub async fn serve_stream<I>(stream: I, state: ServerState, opts: ServeOptions)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let builder = http1_builder(&opts.limits);
    let (_keep, shutdown) = watch::channel(false);
    serve_connection(stream, &builder, Shared::new(state, opts), shutdown).await;
}

/// Serve plain HTTP with default limits until `shutdown` flips to true.
pub async fn serve(listener: TcpListener, state: ServerState, shutdown: watch::Receiver<bool>) {
    serve_with(listener, state, ServeOptions::plain(), shutdown).await
}

/// Serve until `shutdown` flips to true; then stop accepting, give open connections
/// [`SHUTDOWN_GRACE`] to finish their current request, and return.
pub async fn serve_with(
    listener: TcpListener,
    state: ServerState,
    opts: ServeOptions,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = opts.limits;
    let builder = Arc::new(http1_builder(&limits));
    let handshake_timeout = if limits.read_timeout.is_zero() {
        Duration::from_secs(10)
    } else {
        limits.read_timeout
    };
    let max_connections = limits.max_connections.clamp(1, u32::MAX as usize >> 3);
    let connection_slots = Arc::new(Semaphore::new(max_connections));
    let clients = ClientConnections::new(limits.max_client_connections);
    let rejecting = Arc::new(Semaphore::new(REJECTING_MAX));
    let shared = Shared::new(state, opts);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let web = shared.web.load_full();
        let client = clients.try_open(peer.ip());
        let slot = match &client {
            None => Err(&shared.metrics.rejected_max_client_connections),
            Some(_) => connection_slots
                .clone()
                .try_acquire_owned()
                .map_err(|_| &shared.metrics.rejected_max_connections),
        };
        let slot = match slot {
            Ok(slot) => slot,
            Err(counter) => {
                counter.inc();
                drop(client);
                // The 503 answers are bounded too: past REJECTING_MAX at once, excess sockets just close.
                if let Ok(answering) = rejecting.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        io::reject_busy(stream, web.tls.is_none()).await;
                        drop(answering);
                    });
                }
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let builder = builder.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slots = (slot, client);
            shared.metrics.open_connections.add(1.0);
            let stream = TimedIo::new(stream, limits.write_timeout);
            match &web.tls {
                None => serve_connection(stream, &builder, shared.clone(), conn_shutdown).await,
                Some(acceptor) => {
                    let handshake = tokio::select! {
                        r = tokio::time::timeout(handshake_timeout, acceptor.accept(stream)) => r,
                        _ = conn_shutdown.changed() => {
                            shared.metrics.open_connections.add(-1.0);
                            return;
                        }
                    };
                    match handshake {
                        Ok(Ok(tls)) => {
                            serve_connection(tls, &builder, shared.clone(), conn_shutdown).await
                        }
                        Ok(Err(e)) => {
                            shared.metrics.tls_handshake_failures.inc();
                            tracing::debug!(error = %e, "TLS handshake failed");
                        }
                        Err(_) => {
                            shared.metrics.tls_handshake_failures.inc();
                            tracing::debug!("TLS handshake timed out");
                        }
                    }
                }
            }
            shared.metrics.open_connections.add(-1.0);
        });
    }
    drop(listener);
    // Every slot back = every connection closed; bounded so shutdown never hangs on a slow client.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(
        SHUTDOWN_GRACE + Duration::from_millis(500),
        connection_slots.acquire_many(all),
    )
    .await;
}

async fn serve_connection<I>(
    stream: I,
    builder: &hyper::server::conn::http1::Builder,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(shared, req).await) }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    tokio::select! {
        res = conn.as_mut() => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = shutdown.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
        }
    }
}

fn has_body(req: &Request<Incoming>) -> bool {
    let h = req.headers();
    h.contains_key(header::TRANSFER_ENCODING)
        || h.get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

fn add_headers(web: &WebSecurity, resp: &mut Response<Full<Bytes>>) {
    for (name, value) in &web.headers {
        resp.headers_mut().insert(name.clone(), value.clone());
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let resp = respond(&shared, req).await;
    shared.metrics.count_response(resp.status());
    resp
}

/// A response that turns the client away for now: `status`, `Retry-After: 1`.
fn retry_later(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = text(status, body);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn respond(shared: &Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if has_body(&req) {
        let mut r = text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "413 request bodies are not accepted\n",
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    let web = shared.web.load_full();
    let path = req.uri().path();
    let probe = path == "/health" || path == "/ready";
    // Credentials before any slot: a missing, malformed or cached one costs nothing, and a bcrypt has
    // slots of its own (busy: 429 at once), so unauthenticated clients never hold a request slot.
    if let Some(auth) = web.auth.as_ref().filter(|_| shared.health_auth || !probe) {
        let credentials = req.headers().get(header::AUTHORIZATION).cloned();
        let outcome = auth.check(credentials.as_ref()).await;
        if outcome != Outcome::Allowed {
            shared.metrics.count_auth_failure(outcome);
            let mut r = if outcome == Outcome::Busy {
                retry_later(
                    StatusCode::TOO_MANY_REQUESTS,
                    "429 too many logins being checked, retry later\n",
                )
            } else {
                let mut r = text(StatusCode::UNAUTHORIZED, "401 Unauthorized\n");
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"dcgm-otel\""),
                );
                r
            };
            add_headers(&web, &mut r);
            return r;
        }
    }
    let (slots, rejected) = if probe {
        (&shared.probes, &shared.metrics.rejected_max_probes)
    } else {
        (&shared.requests, &shared.metrics.rejected_max_requests)
    };
    let Ok(_in_flight) = slots.try_acquire() else {
        rejected.inc();
        return retry_later(
            StatusCode::SERVICE_UNAVAILABLE,
            "503 too many requests in flight, retry later\n",
        );
    };
    #[cfg(feature = "pprof")]
    if let Some(mut resp) = pprof::route(shared.pprof, &web, &req).await {
        add_headers(&web, &mut resp);
        return resp;
    }
    let mut resp = route(&shared.state, &req);
    add_headers(&web, &mut resp);
    resp
}

#[cfg(test)]
mod tests {
    use super::gzip_acceptable;

    #[test]
    fn accept_encoding_weights_follow_rfc_9110() {
        let ok = |v: &str| gzip_acceptable(std::iter::once(v));
        assert!(ok("gzip"));
        assert!(ok("GZIP;q=0.5, identity"));
        assert!(ok("x-gzip"));
        assert!(ok("*"));
        assert!(ok("br, *;q=0.1"));
        assert!(!ok("gzip;q=0, *"));
        assert!(!ok("*, gzip;q=0"));
        assert!(!ok("gzip; q=0.000"));
        assert!(!ok("*;q=0"));
        assert!(!ok("identity"));
        assert!(!ok(""));
        assert!(!gzip_acceptable(std::iter::empty()));
        assert!(!gzip_acceptable(["gzip", "gzip;q=0"].into_iter()));
    }
}
