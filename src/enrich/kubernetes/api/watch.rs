//! List + watch of one Kubernetes resource into a [`Cache`] (see the module above for the protocol).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

use super::config::{ApiConfig, Auth};
use super::stream::{self, WatchDecoder, WatchEvent};
use crate::error_chain::error_chain;
use crate::retry::Backoff;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Server-side timeout of one watch request (it then resumes from the last version seen).
pub const WATCH_TIMEOUT_S: u64 = 300;

/// Retries of a failed list or watch: 1 s doubling to 30 s, with jitter (and never past the moment the
/// cached data goes stale).
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// How long the cache is used after the watch was lost before it is emptied: 10 collect intervals,
/// at least 10 s.
pub fn stale_after(interval: Duration) -> Duration {
    (interval * 10).max(Duration::from_secs(10))
}

/// What is watched and how an object is kept.
pub struct Resource<T> {
    /// `pods`, `resourceslices` (names the self-metrics and logs).
    pub name: &'static str,
    /// Collection path, e.g. `/api/v1/pods`.
    pub path: String,
    /// `fieldSelector`, e.g. `spec.nodeName=node-a`.
    pub field_selector: Option<String>,
    /// The cache key and value of an object; `None` skips it.
    pub parse: fn(&Value) -> Option<(String, T)>,
    /// How long the cache is used after the watch was lost before it is emptied.
    pub stale_after: Duration,
}

/// The objects last known, readable from any thread.
pub struct Cache<T> {
    objects: RwLock<HashMap<String, Arc<T>>>,
    synced: AtomicBool,
}

impl<T> Cache<T> {
    fn new() -> Cache<T> {
        Cache {
            objects: RwLock::new(HashMap::new()),
            synced: AtomicBool::new(false),
        }
    }

    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        self.objects.read().ok()?.get(key).cloned()
    }

    /// Every object (for small caches: ResourceSlices).
    pub fn values(&self) -> Vec<Arc<T>> {
        self.objects
            .read()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.objects.read().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A list succeeded and the cache has not been emptied since.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    fn replace(&self, map: HashMap<String, Arc<T>>) {
        if let Ok(mut m) = self.objects.write() {
            *m = map;
        }
        self.synced.store(true, Ordering::Release);
    }

    fn put(&self, key: String, value: Option<Arc<T>>) {
        if let Ok(mut m) = self.objects.write() {
            match value {
                Some(v) => {
                    m.insert(key, v);
                }
                None => {
                    m.remove(&key);
                }
            }
        }
    }

    fn clear(&self) {
        if let Ok(mut m) = self.objects.write() {
            m.clear();
        }
        self.synced.store(false, Ordering::Release);
    }
}

/// Why a request or a stream ended.
#[derive(Debug)]
enum Failure {
    /// 410 Gone: the resource version is too old; list again.
    Gone,
    Http(u16, String),
    Transport(String),
    Decode(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Gone => f.write_str("410 Gone (resource version too old)"),
            Failure::Http(code, body) => write!(f, "HTTP {code}: {body}"),
            Failure::Transport(e) => f.write_str(e),
            Failure::Decode(e) => write!(f, "undecodable answer: {e}"),
        }
    }
}

struct ApiMetrics {
    list_ok: Arc<Metric>,
    list_error: Arc<Metric>,
    watch_ok: Arc<Metric>,
    watch_gone: Arc<Metric>,
    watch_error: Arc<Metric>,
    events: Arc<Metric>,
    objects: Arc<Metric>,
}

impl ApiMetrics {
    fn new(registry: &SelfMetrics, resource: &str) -> ApiMetrics {
        let req = |verb: &str, result: &str| {
            registry.counter(
                "dcgm_otel_kubernetes_api_requests_total",
                "Kubernetes API requests, by resource, verb (list, watch) and result (ok, gone: 410, error).",
                &[("resource", resource), ("verb", verb), ("result", result)],
            )
        };
        ApiMetrics {
            list_ok: req("list", "ok"),
            list_error: req("list", "error"),
            watch_ok: req("watch", "ok"),
            watch_gone: req("watch", "gone"),
            watch_error: req("watch", "error"),
            events: registry.counter(
                "dcgm_otel_kubernetes_api_watch_events_total",
                "Watch events received from the Kubernetes API, by resource.",
                &[("resource", resource)],
            ),
            objects: registry.gauge(
                "dcgm_otel_kubernetes_api_objects",
                "Objects in the watch cache, by resource (0 when emptied after the API was lost).",
                &[("resource", resource)],
            ),
        }
    }
}

/// A running list + watch; the thread ends when the [`Watcher`] and every cache reference are gone.
pub struct Watcher<T> {
    pub cache: Arc<Cache<T>>,
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

fn tls_config(cfg: &ApiConfig) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(c);
    }
    if let Some(pem) = &cfg.ca_pem {
        for c in CertificateDer::pem_slice_iter(pem) {
            let c = c.map_err(|e| format!("CA certificate: {e}"))?;
            roots.add(c).map_err(|e| format!("CA certificate: {e}"))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    match &cfg.auth {
        Auth::ClientCert { cert, key } => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("client key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate/key: {e}"))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

fn connector(cfg: &ApiConfig) -> Result<hyper_rustls::HttpsConnector<HttpConnector>, String> {
    let tls = tls_config(cfg)?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// A GET of `uri` with the configuration's bearer token (if any).
fn authorized_get(cfg: &ApiConfig, uri: String) -> Result<http::Request<Empty<Bytes>>, String> {
    let mut b = http::Request::get(uri).header("Accept", "application/json");
    let token = match &cfg.auth {
        Auth::Token(t) => Some(t.clone()),
        Auth::TokenFile(p) => std::fs::read_to_string(p)
            .ok()
            .map(|t| t.trim().to_string()),
        _ => None,
    };
    if let Some(t) = token {
        b = b.header("Authorization", format!("Bearer {t}"));
    }
    b.body(Empty::new()).map_err(|e| e.to_string())
}

/// One GET of a single object (`path`, e.g. `/api/v1/namespaces/ns/configmaps/name`), answered within
/// `timeout`: the object, `Ok(None)` for 404, else the reason. Blocks the calling thread (start-up).
pub fn get_object(cfg: &ApiConfig, path: &str, timeout: Duration) -> Result<Option<Value>, String> {
    let client: HttpClient =
        Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector(cfg)?);
    let req = authorized_get(cfg, format!("{}{path}", cfg.server))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(async {
        let got = async {
            let resp = client.request(req).await.map_err(|e| error_chain(&e))?;
            let status = resp.status().as_u16();
            let limited = http_body_util::Limited::new(resp.into_body(), stream::MAX_LIST_PAGE);
            let body = limited
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, got)
            .await
            .map_err(|_| format!("no answer from {} within {timeout:?}", cfg.server))??;
        match status {
            200 => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| format!("undecodable answer: {e}")),
            404 => Ok(None),
            _ => {
                let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
                Err(format!("HTTP {status}: {text}"))
            }
        }
    })
}

/// Start listing and watching `resource` on its own thread.
pub fn start<T: Send + Sync + 'static>(
    cfg: &ApiConfig,
    resource: Resource<T>,
    registry: &SelfMetrics,
) -> Result<Watcher<T>, String> {
    let connector = connector(cfg)?;
    let cache = Arc::new(Cache::new());
    let run = Run {
        cfg: cfg.clone(),
        metrics: ApiMetrics::new(registry, resource.name),
        resource,
        cache: Arc::downgrade(&cache),
        connector,
    };
    std::thread::Builder::new()
        .name("k8s-api-watch".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the Kubernetes API watch runtime; pod metadata unavailable");
                    return;
                }
            };
            runtime.block_on(run.run());
        })
        .map_err(|e| format!("cannot start the Kubernetes API watch thread: {e}"))?;
    Ok(Watcher { cache })
}

struct Run<T> {
    cfg: ApiConfig,
    resource: Resource<T>,
    metrics: ApiMetrics,
    cache: std::sync::Weak<Cache<T>>,
    connector: hyper_rustls::HttpsConnector<HttpConnector>,
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl<T: Send + Sync + 'static> Run<T> {
    fn client(&self) -> HttpClient {
        Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(1)
            .build(self.connector.clone())
    }

    fn request(&self, query: &str) -> Result<http::Request<Empty<Bytes>>, Failure> {
        let mut uri = format!("{}{}?{query}", self.cfg.server, self.resource.path);
        if let Some(fs) = &self.resource.field_selector {
            uri.push_str("&fieldSelector=");
            uri.push_str(&encode(fs));
        }
        authorized_get(&self.cfg, uri).map_err(Failure::Transport)
    }

    async fn run(self) {
        let client = self.client();
        let mut version: Option<String> = None;
        let mut failures = 0u32;
        let mut failing_since: Option<Instant> = None;
        let mut logged_down = false;
        loop {
            let Some(cache) = self.cache.upgrade() else {
                return;
            };
            let started = Instant::now();
            let watching = version.is_some();
            let result = match &version {
                None => self.list(&client, &cache).await.map(Some),
                Some(v) => self.watch(&client, &cache, v).await,
            };
            if watching && result.is_ok() && started.elapsed() < Duration::from_secs(1) {
                // A watch the server ended at once: do not spin.
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            match result {
                Ok(next) => {
                    if logged_down {
                        tracing::info!(
                            resource = self.resource.name,
                            objects = cache.len(),
                            "Kubernetes API answers again; pod metadata current"
                        );
                        logged_down = false;
                    }
                    failing_since = None;
                    failures = 0;
                    if let Some(v) = next {
                        version = Some(v);
                    }
                    self.metrics.objects.set(cache.len() as f64);
                    continue;
                }
                Err(Failure::Gone) => {
                    tracing::debug!(
                        resource = self.resource.name,
                        "watch: 410 Gone; listing again"
                    );
                    version = None;
                    continue;
                }
                Err(e) => {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if !logged_down {
                        tracing::warn!(resource = self.resource.name, server = %self.cfg.server, error = %e, "Kubernetes API request failed; using what was last known, retrying with backoff");
                        logged_down = true;
                    }
                    if since.elapsed() > self.resource.stale_after && cache.synced() {
                        tracing::warn!(
                            resource = self.resource.name,
                            after_s = self.resource.stale_after.as_secs_f64(),
                            "Kubernetes API still unreachable; its data dropped until it answers"
                        );
                        cache.clear();
                        self.metrics.objects.set(0.0);
                        version = None;
                    }
                }
            }
            drop(cache);
            failures += 1;
            // Never sleep past the moment the stale data must go.
            let cap = self.resource.stale_after.max(Duration::from_millis(500));
            tokio::time::sleep(RETRY.jittered(failures).min(cap)).await;
        }
    }

    async fn send(
        &self,
        client: &HttpClient,
        query: &str,
        timeout: Duration,
    ) -> Result<http::Response<hyper::body::Incoming>, Failure> {
        let req = self.request(query)?;
        let resp = tokio::time::timeout(timeout, client.request(req))
            .await
            .map_err(|_| Failure::Transport(format!("no answer within {timeout:?}")))?
            .map_err(|e| Failure::Transport(error_chain(&e)))?;
        let status = resp.status().as_u16();
        if status == 410 {
            return Err(Failure::Gone);
        }
        if status != 200 {
            let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|b| {
                    String::from_utf8_lossy(&b.to_bytes())
                        .chars()
                        .take(200)
                        .collect()
                })
                .unwrap_or_default();
            return Err(Failure::Http(status, body));
        }
        Ok(resp)
    }

    /// List every object (pages of 500), replace the cache; the list's resource version.
    async fn list(&self, client: &HttpClient, cache: &Cache<T>) -> Result<String, Failure> {
        let mut map = HashMap::new();
        let mut cont: Option<String> = None;
        loop {
            let mut query = "limit=500".to_string();
            if let Some(c) = &cont {
                query.push_str("&continue=");
                query.push_str(&encode(c));
            }
            let got = async {
                let resp = self.send(client, &query, Duration::from_secs(30)).await?;
                let limited = http_body_util::Limited::new(resp.into_body(), stream::MAX_LIST_PAGE);
                let body = tokio::time::timeout(Duration::from_secs(30), limited.collect())
                    .await
                    .map_err(|_| Failure::Transport("list body timed out".into()))?
                    .map_err(|e| Failure::Transport(format!("list page: {e}")))?
                    .to_bytes();
                stream::decode_list_page(&body).map_err(|e| Failure::Decode(e.to_string()))
            }
            .await;
            let list = match got {
                Ok(l) => {
                    self.metrics.list_ok.inc();
                    l
                }
                Err(e) => {
                    self.metrics.list_error.inc();
                    return Err(e);
                }
            };
            for item in &list.items {
                if let Some((k, v)) = (self.resource.parse)(item) {
                    map.insert(k, Arc::new(v));
                }
            }
            cont = list.continue_token;
            if cont.is_none() {
                let version = list.version;
                cache.replace(map);
                tracing::debug!(resource = self.resource.name, objects = cache.len(), version = %version, "Kubernetes API list");
                return Ok(version);
            }
        }
    }

    /// Watch from `version` until the server ends the stream; the last version seen.
    async fn watch(
        &self,
        client: &HttpClient,
        cache: &Cache<T>,
        version: &str,
    ) -> Result<Option<String>, Failure> {
        let query = format!(
            "watch=1&allowWatchBookmarks=true&timeoutSeconds={WATCH_TIMEOUT_S}&resourceVersion={}",
            encode(version)
        );
        let resp = match self.send(client, &query, Duration::from_secs(30)).await {
            Ok(r) => {
                self.metrics.watch_ok.inc();
                r
            }
            Err(Failure::Gone) => {
                self.metrics.watch_gone.inc();
                return Err(Failure::Gone);
            }
            Err(e) => {
                self.metrics.watch_error.inc();
                return Err(e);
            }
        };
        let mut body = resp.into_body();
        let mut decoder = WatchDecoder::new();
        let mut last = None;
        let limit = Duration::from_secs(WATCH_TIMEOUT_S + 30);
        loop {
            let frame = match tokio::time::timeout(limit, body.frame()).await {
                Err(_) => return Ok(last),
                Ok(None) => return Ok(last),
                Ok(Some(Err(e))) => {
                    // A dropped connection: resume from the last version seen.
                    tracing::debug!(resource = self.resource.name, error = %e, "watch stream broken");
                    return match last {
                        Some(v) => Ok(Some(v)),
                        None => Err(Failure::Transport(format!("watch stream broken: {e}"))),
                    };
                }
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            for event in decoder.push(&data) {
                // A line past stream::MAX_WATCH_LINE or one that is not an event cuts the watch
                // (counted as a failed watch) instead of growing a buffer.
                let event = event.map_err(|e| {
                    self.metrics.watch_error.inc();
                    Failure::Decode(e.to_string())
                })?;
                self.metrics.events.inc();
                let version = event.resource_version();
                match event {
                    WatchEvent::Put(ref object) | WatchEvent::Delete(ref object) => {
                        let deleted = matches!(event, WatchEvent::Delete(_));
                        if let Some((k, v)) = (self.resource.parse)(object) {
                            cache.put(k, (!deleted).then(|| Arc::new(v)));
                        }
                        self.metrics.objects.set(cache.len() as f64);
                    }
                    WatchEvent::Bookmark(_) => {}
                    WatchEvent::Gone => {
                        self.metrics.watch_gone.inc();
                        return Err(Failure::Gone);
                    }
                    WatchEvent::Error(code, message) => return Err(Failure::Http(code, message)),
                }
                if version.is_some() {
                    last = version;
                }
            }
        }
    }
}
