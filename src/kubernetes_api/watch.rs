//! List + watch of one Kubernetes resource into a [`Cache`] (see the module above for the protocol).
//!
//! Bounded against a hostile or broken API server: a watch request lasts at most its
//! [`Resource::watch_deadline`] whatever the server streams (then it is resumed from the last version);
//! a list lasts at most [`LIST_DEADLINE`] and [`MAX_LIST_PAGES`] pages; the cache (and a list being
//! built) holds at most [`MAX_CACHE_OBJECTS`] objects and [`MAX_CACHE_BYTES`] of their kept text. An
//! object of another node than the one asked for is dropped. Dropped objects are counted in
//! `dcgm_otel_kubernetes_api_objects_dropped_total{resource,reason}`; a list past a bound fails (counted
//! as a failed list, retried with backoff).

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

use super::config::{ApiConfig, Auth};
use super::stream::{self, ApiObject, WatchDecoder, WatchEvent};
use crate::error_chain::error_chain;
use crate::retry::Backoff;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Server-side timeout of one watch request (it then resumes from the last version seen).
pub const WATCH_TIMEOUT_S: u64 = 300;

/// The longest a watch request lasts on this side: the server's timeout and 30 s. A server that keeps
/// streaming past it is cut off, and the watch resumes from the last version seen.
pub const WATCH_DEADLINE: Duration = Duration::from_secs(WATCH_TIMEOUT_S + 30);

/// The longest a whole list (every page) may take.
pub const LIST_DEADLINE: Duration = Duration::from_secs(300);

/// The most pages one list may have: [`stream::LIST_LIMIT`] × 1,000 objects scanned (a field-selected
/// list can answer pages with few or no items); past it the continue tokens are a broken or hostile
/// server's.
pub const MAX_LIST_PAGES: usize = 1_000;

/// The most objects a cache (or a list being built) holds: a node runs at most a few hundred pods.
pub const MAX_CACHE_OBJECTS: usize = 10_000;

/// The most bytes of kept text (keys, names, UIDs, labels) a cache holds, counting
/// [`ENTRY_OVERHEAD`] per object.
pub const MAX_CACHE_BYTES: usize = 32 << 20;

/// Bytes counted per cached object besides its text (map entry, `Arc`, string headers).
pub const ENTRY_OVERHEAD: usize = 128;

/// Retries of a failed list or watch: 1 s doubling to 30 s, with jitter (and never past the moment the
/// cached data goes stale).
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// How long the cache is used after the watch was lost before it is emptied: 10 collect intervals,
/// at least 10 s.
pub fn stale_after(interval: Duration) -> Duration {
    (interval * 10).max(Duration::from_secs(10))
}

/// What is watched and how an object is kept: `O` is the object as decoded, `T` what the cache keeps.
pub struct Resource<O, T> {
    /// `pods`, `resourceslices` (names the self-metrics and logs).
    pub name: &'static str,
    /// Collection path, e.g. `/api/v1/pods`.
    pub path: String,
    /// `fieldSelector`, e.g. `spec.nodeName=node-a`.
    pub field_selector: Option<String>,
    /// The cache key and value of an object; `None` skips it.
    pub parse: fn(O) -> Option<(String, T)>,
    /// The bytes of text a kept value holds (for [`MAX_CACHE_BYTES`]).
    pub weight: fn(&T) -> usize,
    /// Only objects of this node are kept (`ApiObject::node_name`); others are dropped and counted.
    /// `None`: any.
    pub node: Option<String>,
    /// How long the cache is used after the watch was lost before it is emptied.
    pub stale_after: Duration,
    /// The longest one watch request lasts ([`WATCH_DEADLINE`]).
    pub watch_deadline: Duration,
}

/// Objects with their weights, within [`MAX_CACHE_OBJECTS`] and [`MAX_CACHE_BYTES`].
struct Objects<T> {
    map: HashMap<String, (Arc<T>, usize)>,
    bytes: usize,
}

impl<T> Default for Objects<T> {
    fn default() -> Self {
        Objects {
            map: HashMap::new(),
            bytes: 0,
        }
    }
}

impl<T> Objects<T> {
    /// Insert or replace; `false` (and nothing kept under `key`) when the object would pass a bound.
    fn put(&mut self, key: String, value: T, weight: usize) -> bool {
        let weight = weight + key.len() + ENTRY_OVERHEAD;
        let old = self.map.remove(&key).map_or(0, |(_, w)| w);
        self.bytes -= old;
        if self.map.len() >= MAX_CACHE_OBJECTS || self.bytes + weight > MAX_CACHE_BYTES {
            return false;
        }
        self.bytes += weight;
        self.map.insert(key, (Arc::new(value), weight));
        true
    }

    fn remove(&mut self, key: &str) {
        if let Some((_, w)) = self.map.remove(key) {
            self.bytes -= w;
        }
    }
}

/// The objects last known, readable from any thread.
pub struct Cache<T> {
    objects: RwLock<Objects<T>>,
    synced: AtomicBool,
}

impl<T> Cache<T> {
    fn new() -> Cache<T> {
        Cache {
            objects: RwLock::new(Objects::default()),
            synced: AtomicBool::new(false),
        }
    }

    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        self.objects
            .read()
            .ok()?
            .map
            .get(key)
            .map(|(v, _)| v.clone())
    }

    /// Every object (for small caches: ResourceSlices).
    pub fn values(&self) -> Vec<Arc<T>> {
        self.objects
            .read()
            .map(|m| m.map.values().map(|(v, _)| v.clone()).collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.objects.read().map(|m| m.map.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A list succeeded and the cache has not been emptied since.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    fn replace(&self, objects: Objects<T>) {
        if let Ok(mut m) = self.objects.write() {
            *m = objects;
        }
        self.synced.store(true, Ordering::Release);
    }

    /// Keep `value` under `key` (`None`: forget it); `false` when the cache is full.
    fn put(&self, key: String, value: Option<(T, usize)>) -> bool {
        let Ok(mut m) = self.objects.write() else {
            return false;
        };
        match value {
            Some((v, weight)) => m.put(key, v, weight),
            None => {
                m.remove(&key);
                true
            }
        }
    }

    fn clear(&self) {
        if let Ok(mut m) = self.objects.write() {
            *m = Objects::default();
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
    /// A list past one of its bounds (objects, bytes, pages, time).
    Bound(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Gone => f.write_str("410 Gone (resource version too old)"),
            Failure::Http(code, body) => write!(f, "HTTP {code}: {body}"),
            Failure::Transport(e) => f.write_str(e),
            Failure::Decode(e) => write!(f, "undecodable answer: {e}"),
            Failure::Bound(e) => write!(f, "list refused: {e}"),
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
    other_node: Arc<Metric>,
    cache_full: Arc<Metric>,
    undecodable: Arc<Metric>,
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
        let dropped = |reason: &str| {
            registry.counter(
                "dcgm_otel_kubernetes_api_objects_dropped_total",
                "Objects from the Kubernetes API not kept, by resource and reason (other_node: of another node than NODE_NAME; cache_full: past the cache's bounds; undecodable: not an object of the resource).",
                &[("resource", resource), ("reason", reason)],
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
            other_node: dropped("other_node"),
            cache_full: dropped("cache_full"),
            undecodable: dropped("undecodable"),
        }
    }
}

/// A running list + watch; the thread ends when the [`Watcher`] and every cache reference are gone.
pub struct Watcher<T> {
    pub cache: Arc<Cache<T>>,
}

type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// The TLS client settings: the cluster's CA alone when the configuration gives one (the system roots
/// only without it), and the client certificate when the user has one.
fn tls_config(cfg: &ApiConfig) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &cfg.ca_pem {
        Some(pem) => {
            for c in CertificateDer::pem_slice_iter(pem) {
                let c = c.map_err(|e| format!("CA certificate: {e}"))?;
                roots.add(c).map_err(|e| format!("CA certificate: {e}"))?;
            }
            if roots.is_empty() {
                return Err("CA certificate: no certificate in the PEM data".into());
            }
        }
        None => {
            for c in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(c);
            }
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

/// A GET of `uri` with the configuration's bearer token (if any). A token never goes to an `http://`
/// URI: the configuration refuses that pairing ([`ApiConfig::from_kubeconfig`]), and this refuses it
/// again.
fn authorized_get(cfg: &ApiConfig, uri: String) -> Result<http::Request<Empty<Bytes>>, String> {
    let token = match &cfg.auth {
        Auth::Token(t) => Some(t.clone()),
        Auth::TokenFile(p) => std::fs::read_to_string(p)
            .ok()
            .map(|t| t.trim().to_string()),
        _ => None,
    };
    if token.is_some() && !uri.starts_with("https://") {
        return Err(format!(
            "{}: a bearer token is never sent over plain http",
            cfg.server
        ));
    }
    let mut b = http::Request::get(uri).header("Accept", "application/json");
    if let Some(t) = token {
        b = b.header("Authorization", format!("Bearer {t}"));
    }
    b.body(Empty::new()).map_err(|e| e.to_string())
}

/// One GET of a single object (`path`, e.g. `/api/v1/namespaces/ns/configmaps/name`), answered within
/// `timeout` and at most [`stream::MAX_WATCH_LINE`] bytes (one object): the object, `Ok(None)` for 404,
/// else the reason. Blocks the calling thread (start-up).
pub fn get_object<O: ApiObject>(
    cfg: &ApiConfig,
    path: &str,
    timeout: Duration,
) -> Result<Option<O>, String> {
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
            let limited = http_body_util::Limited::new(resp.into_body(), stream::MAX_WATCH_LINE);
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
pub fn start<O, T>(
    cfg: &ApiConfig,
    resource: Resource<O, T>,
    registry: &SelfMetrics,
) -> Result<Watcher<T>, String>
where
    O: ApiObject + Send + 'static,
    T: Send + Sync + 'static,
{
    let connector = connector(cfg)?;
    let cache = Arc::new(Cache::new());
    let run = Run {
        cfg: cfg.clone(),
        metrics: ApiMetrics::new(registry, resource.name),
        resource,
        cache: Arc::downgrade(&cache),
        connector,
        full_logged: AtomicBool::new(false),
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

struct Run<O, T> {
    cfg: ApiConfig,
    resource: Resource<O, T>,
    metrics: ApiMetrics,
    cache: std::sync::Weak<Cache<T>>,
    connector: hyper_rustls::HttpsConnector<HttpConnector>,
    /// The cache filled up once (logged once).
    full_logged: AtomicBool,
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

/// What became of one object from the server.
enum Kept<T> {
    /// Parsed: its key and value (with its weight).
    Object(String, T, usize),
    /// Skipped by the resource's parser.
    Skipped,
    /// Of another node.
    OtherNode,
}

impl<O, T> Run<O, T>
where
    O: ApiObject + Send + 'static,
    T: Send + Sync + 'static,
{
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

    /// An object from the server, through the node filter and the parser (counted when dropped).
    fn keep(&self, object: O) -> Kept<T> {
        if let Some(node) = &self.resource.node {
            if object.node_name() != Some(node.as_str()) {
                self.metrics.other_node.inc();
                return Kept::OtherNode;
            }
        }
        match (self.resource.parse)(object) {
            Some((k, v)) => {
                let w = (self.resource.weight)(&v);
                Kept::Object(k, v, w)
            }
            None => Kept::Skipped,
        }
    }

    /// An object refused for the cache's bounds: counted, and logged the first time.
    fn full(&self, objects: usize) {
        self.metrics.cache_full.inc();
        if !self.full_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                resource = self.resource.name,
                objects,
                max_objects = MAX_CACHE_OBJECTS,
                max_bytes = MAX_CACHE_BYTES,
                "Kubernetes API cache full: further objects are dropped (counted in dcgm_otel_kubernetes_api_objects_dropped_total)"
            );
        }
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

    /// One list page (`continue` token `cont`), decoded, within `deadline`.
    async fn page(
        &self,
        client: &HttpClient,
        cont: Option<&str>,
        deadline: tokio::time::Instant,
    ) -> Result<stream::ListPage<O>, Failure> {
        let mut query = format!("limit={}", stream::LIST_LIMIT);
        if let Some(c) = cont {
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
            stream::decode_list_page::<O>(&body).map_err(|e| Failure::Decode(e.to_string()))
        };
        tokio::time::timeout_at(deadline, got)
            .await
            .map_err(|_| Failure::Bound(format!("not done within {LIST_DEADLINE:?}")))?
    }

    /// List every object (pages of [`stream::LIST_LIMIT`]), replace the cache; the list's resource
    /// version. Past [`MAX_LIST_PAGES`], [`LIST_DEADLINE`] or the cache's bounds the list fails and the
    /// cache keeps what it had.
    async fn list(&self, client: &HttpClient, cache: &Cache<T>) -> Result<String, Failure> {
        let deadline = tokio::time::Instant::now() + LIST_DEADLINE;
        let mut objects = Objects::default();
        let mut cont: Option<String> = None;
        for _ in 0..MAX_LIST_PAGES {
            let list = match self.page(client, cont.as_deref(), deadline).await {
                Ok(l) => {
                    self.metrics.list_ok.inc();
                    l
                }
                Err(e) => {
                    self.metrics.list_error.inc();
                    return Err(e);
                }
            };
            self.metrics.undecodable.add(list.skipped as f64);
            for item in list.items {
                if let Kept::Object(k, v, w) = self.keep(item) {
                    if !objects.put(k, v, w) {
                        self.metrics.list_error.inc();
                        return Err(Failure::Bound(format!(
                            "more than {MAX_CACHE_OBJECTS} objects or {MAX_CACHE_BYTES} bytes"
                        )));
                    }
                }
            }
            cont = list.continue_token;
            if cont.is_none() {
                let version = list.version;
                cache.replace(objects);
                tracing::debug!(resource = self.resource.name, objects = cache.len(), version = %version, "Kubernetes API list");
                return Ok(version);
            }
        }
        self.metrics.list_error.inc();
        Err(Failure::Bound(format!(
            "more than {MAX_LIST_PAGES} pages of continue tokens"
        )))
    }

    /// Watch from `version` until the server ends the stream or the watch deadline passes; the last
    /// version seen.
    async fn watch(
        &self,
        client: &HttpClient,
        cache: &Cache<T>,
        version: &str,
    ) -> Result<Option<String>, Failure> {
        let deadline = tokio::time::Instant::now() + self.resource.watch_deadline;
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
        let mut decoder = WatchDecoder::<O>::new();
        let mut last = None;
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => {
                    tracing::debug!(
                        resource = self.resource.name,
                        "watch: deadline passed; resuming"
                    );
                    return Ok(last);
                }
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
            let skipped = decoder.skipped;
            let events = decoder.push(&data);
            self.metrics
                .undecodable
                .add((decoder.skipped - skipped) as f64);
            for event in events {
                // A line past stream::MAX_WATCH_LINE or one that is not an event cuts the watch
                // (counted as a failed watch) instead of growing a buffer.
                let event = event.map_err(|e| {
                    self.metrics.watch_error.inc();
                    Failure::Decode(e.to_string())
                })?;
                self.metrics.events.inc();
                let version = event.resource_version();
                match event {
                    WatchEvent::Put(object) => {
                        if let Kept::Object(k, v, w) = self.keep(object) {
                            if !cache.put(k, Some((v, w))) {
                                self.full(cache.len());
                            }
                        }
                        self.metrics.objects.set(cache.len() as f64);
                    }
                    WatchEvent::Delete(object) => {
                        if let Kept::Object(k, _, _) = self.keep(object) {
                            cache.put(k, None);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enrich::kubernetes::labels::PodMeta;
    use crate::kubernetes_api::objects::Pod;
    use std::io::{Read, Write};
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn objects_are_bounded_in_count_and_bytes() {
        let mut o: Objects<()> = Objects::default();
        for i in 0..MAX_CACHE_OBJECTS {
            assert!(o.put(format!("k{i}"), (), 0), "{i}");
        }
        assert!(!o.put("one-more".into(), (), 0));
        // Replacing an object already kept is no growth.
        assert!(o.put("k0".into(), (), 10));
        let mut o: Objects<()> = Objects::default();
        assert!(!o.put("huge".into(), (), MAX_CACHE_BYTES));
        assert!(o.put("a".into(), (), MAX_CACHE_BYTES / 2));
        assert!(!o.put("b".into(), (), MAX_CACHE_BYTES / 2));
        o.remove("a");
        assert_eq!(o.bytes, 0);
        assert!(o.put("b".into(), (), MAX_CACHE_BYTES / 2));
    }

    /// Issue 35: a watch the server streams forever (bookmarks every 50 ms here) was never ended on
    /// this side. It is cut at its deadline and resumed: the server sees a second watch request.
    #[test]
    fn a_watch_that_never_ends_is_cut_at_its_deadline() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let watches = Arc::new(AtomicUsize::new(0));
        let seen = watches.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if conn.read(&mut byte).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    if !String::from_utf8_lossy(&head).contains("watch=1") {
                        let body = r#"{"metadata":{"resourceVersion":"1"},"items":[]}"#;
                        let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                        return;
                    }
                    seen.fetch_add(1, Ordering::SeqCst);
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    );
                    let line = "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"2\"}}}\n";
                    while write!(conn, "{:x}\r\n{line}\r\n", line.len()).is_ok() {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                });
            }
        });
        let cfg = ApiConfig {
            server: format!("http://127.0.0.1:{port}"),
            ca_pem: None,
            auth: Auth::None,
            origin: "test".into(),
        };
        let resource: Resource<Pod, PodMeta> = Resource {
            name: "pods",
            path: "/api/v1/pods".into(),
            field_selector: None,
            parse: crate::enrich::kubernetes::parse_pod,
            weight: PodMeta::weight,
            node: None,
            stale_after: Duration::from_secs(60),
            watch_deadline: Duration::from_secs(1),
        };
        let registry = SelfMetrics::new();
        let _watcher = start(&cfg, resource, &registry).unwrap();
        let end = Instant::now() + Duration::from_secs(30);
        while watches.load(Ordering::SeqCst) < 2 {
            assert!(Instant::now() < end, "the endless watch was never cut");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
