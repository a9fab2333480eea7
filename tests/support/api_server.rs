//! The fake Kubernetes API server, the one the end-to-end tests and the soak talk to: HTTPS/1.1 on
//! 127.0.0.1 with a certificate of a throwaway test CA ([`Pki`]), named by a kubeconfig with that CA and a
//! bearer token (a request without it gets 401; the exporter never sends a token over plain HTTP). It
//! serves what the exporter asks of a cluster:
//!
//! - pods (`/api/v1/pods`): list, and watch with an event log, so that a watch from a resourceVersion
//!   replays what came after it; a 410 Gone after "compaction"; dropped watch connections;
//! - GPU ResourceSlices (`/apis/resource.k8s.io/v1/resourceslices`): list, and a watch that stays open;
//! - ConfigMaps: GET of one (404 when absent), list and watch of a namespace's by `metadata.name`.
//!
//! Two kinds of outage: [`ApiServer::set_mute`] (the port stays open, requests are closed without an
//! answer) and [`ApiServer::down`] / [`ApiServer::up`] (the port is closed, connections are refused,
//! then it listens again on the same port). Both cut every open watch.
//!
//! Hostile servers of the tests build on [`accept_tls`] (a connection of [`Pki::shared`]'s server
//! certificate), [`read_head`] and [`kubeconfig`] / [`kubeconfig_with`].

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;

/// The bearer token of [`kubeconfig`]; the server answers 401 to a request without it.
pub const TOKEN: &str = "t0k3n";

/// A throwaway CA and a server certificate for 127.0.0.1 / localhost signed by it.
pub struct Pki {
    /// The CA certificate (PEM).
    pub ca_pem: String,
    /// TLS settings serving the server certificate.
    pub server: Arc<rustls::ServerConfig>,
}

impl Pki {
    /// A new CA and server certificate.
    pub fn new(name: &str) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, name);
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, "localhost");
        let cert = p.signed_by(&key, &ca).unwrap();
        let chain = vec![cert.der().clone()];
        let key: rustls::pki_types::PrivateKeyDer<'static> =
            rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()).into();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        Pki {
            ca_pem: ca.pem(),
            server: Arc::new(server),
        }
    }

    /// The one the fake API servers of a test process use.
    pub fn shared() -> &'static Pki {
        static PKI: LazyLock<Pki> = LazyLock::new(|| Pki::new("dcgm-otel test cluster CA"));
        &PKI
    }
}

/// A TLS connection of the fake API server.
pub type Conn = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

/// Serve TLS on an accepted connection with `pki`'s certificate (blocking, a 10 s read timeout); the
/// handshake happens at the first read.
pub fn accept_tls_with(pki: &Pki, tcp: TcpStream) -> Option<Conn> {
    tcp.set_nonblocking(false).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let conn = rustls::ServerConnection::new(pki.server.clone()).ok()?;
    Some(rustls::StreamOwned::new(conn, tcp))
}

/// [`accept_tls_with`] the shared [`Pki`].
pub fn accept_tls(tcp: TcpStream) -> Option<Conn> {
    accept_tls_with(Pki::shared(), tcp)
}

const SLICES: &str = "/apis/resource.k8s.io/v1/resourceslices";

#[derive(Default)]
struct State {
    /// Current pods as JSON, by `namespace/name`.
    pods: BTreeMap<String, String>,
    slices: Vec<String>,
    /// ConfigMap `data` (JSON) by (namespace, name).
    configmaps: BTreeMap<(String, String), String>,
    /// (resourceVersion, event JSON line) of every pod change.
    log: Vec<(u64, String)>,
    rv: u64,
    /// Pod watches from a version below this get a 410 ERROR event.
    compacted: u64,
    /// Senders to the open watches; dropping them ends those streams abruptly.
    pod_watchers: Vec<Sender<String>>,
    slice_watchers: Vec<Sender<String>>,
    configmap_watchers: Vec<((String, String), Sender<String>)>,
    /// Requests are closed without an answer.
    muted: bool,
    /// The listener of this generation accepts; a later one replaces it (or none, while down).
    generation: u64,
    listening: bool,
    lists: u64,
    watches: u64,
    requests: Vec<String>,
}

impl State {
    fn cut_watches(&mut self) {
        self.pod_watchers.clear();
        self.slice_watchers.clear();
        self.configmap_watchers.clear();
    }
}

/// A fake Kubernetes API server whose pods run on `node`; stopped on drop.
pub struct ApiServer {
    pub port: u16,
    node: String,
    state: Arc<Mutex<State>>,
}

fn pod_json(
    node: &str,
    ns: &str,
    name: &str,
    uid: &str,
    rv: u64,
    labels: &[(&str, &str)],
) -> String {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("\"{k}\":\"{v}\""))
        .collect();
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","uid":"{uid}","resourceVersion":"{rv}","labels":{{{}}}}},"spec":{{"nodeName":"{node}"}}}}"#,
        labels.join(",")
    )
}

fn configmap_json(ns: &str, name: &str, data: &str, rv: u64) -> String {
    format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}},"data":{data}}}"#
    )
}

impl ApiServer {
    /// An API server without objects on a free port.
    pub fn start(node: &str) -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let api = ApiServer {
            port: listener.local_addr().unwrap().port(),
            node: node.to_string(),
            state: Arc::new(Mutex::new(State {
                rv: 100,
                listening: true,
                ..State::default()
            })),
        };
        api.accept(listener);
        api
    }

    /// Accept on `listener` until the generation changes (then it is dropped: the port is closed).
    fn accept(&self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        let state = self.state.clone();
        let mine = state.lock().unwrap().generation;
        std::thread::spawn(move || {
            while state.lock().unwrap().generation == mine {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let state = state.clone();
                        std::thread::spawn(move || {
                            if let Some(conn) = accept_tls(conn) {
                                serve(&state, conn);
                            }
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
    }

    /// Close the port (connections are refused) and cut every open watch.
    pub fn down(&self) {
        let mut s = self.state.lock().unwrap();
        s.generation += 1;
        s.listening = false;
        s.cut_watches();
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
        self.state.lock().unwrap().listening = true;
        self.accept(listener);
    }

    /// Muted, the port stays open but every request is closed without an answer, and every open watch
    /// is cut.
    pub fn set_mute(&self, muted: bool) {
        let mut s = self.state.lock().unwrap();
        s.muted = muted;
        if muted {
            s.cut_watches();
        }
    }

    /// Add or change a pod (an ADDED or MODIFIED event to every pod watch).
    pub fn put_pod(&self, ns: &str, name: &str, uid: &str, labels: &[(&str, &str)]) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let rv = s.rv;
        let key = format!("{ns}/{name}");
        let kind = if s.pods.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        let obj = pod_json(&self.node, ns, name, uid, rv, labels);
        s.pods.insert(key, obj.clone());
        let line = format!(r#"{{"type":"{kind}","object":{obj}}}"#);
        s.log.push((rv, line.clone()));
        s.pod_watchers.retain(|w| w.send(line.clone()).is_ok());
    }

    /// Add a ResourceSlice (its JSON); slices do not change once watched.
    pub fn add_slice(&self, json: String) {
        self.state.lock().unwrap().slices.push(json);
    }

    /// Create or change the ConfigMap `ns/name` with `data` (its `data` object as JSON): a MODIFIED
    /// event to every watch of it.
    pub fn put_configmap(&self, ns: &str, name: &str, data: String) {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let key = (ns.to_string(), name.to_string());
        let line = format!(
            r#"{{"type":"MODIFIED","object":{}}}"#,
            configmap_json(ns, name, &data, s.rv)
        );
        s.configmaps.insert(key.clone(), data);
        s.configmap_watchers
            .retain(|(k, w)| *k != key || w.send(line.clone()).is_ok());
    }

    /// Whether a watch of the ConfigMap `ns/name` is open.
    pub fn watches_configmap(&self, ns: &str, name: &str) -> bool {
        let key = (ns.to_string(), name.to_string());
        let s = self.state.lock().unwrap();
        s.configmap_watchers.iter().any(|(k, _)| *k == key)
    }

    /// Close every open pod watch abruptly.
    pub fn drop_watches(&self) {
        self.state.lock().unwrap().pod_watchers.clear();
    }

    /// Forget history: pod watches from an older version get 410 Gone; open ones are told so now.
    pub fn compact(&self) {
        let mut s = self.state.lock().unwrap();
        s.compacted = s.rv + 1;
        let gone = r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old resource version"}}"#;
        s.pod_watchers.retain(|w| w.send(gone.to_string()).is_ok());
        s.pod_watchers.clear();
    }

    /// (lists, watches) of pods and ResourceSlices answered so far.
    pub fn counts(&self) -> (u64, u64) {
        let s = self.state.lock().unwrap();
        (s.lists, s.watches)
    }

    /// The request targets (path and query) of every request answered or refused so far.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    /// A kubeconfig naming this server, written to `<dir>/kubeconfig`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        kubeconfig(dir, self.port)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.down();
    }
}

/// A kubeconfig naming a server on https://127.0.0.1:`port` (the shared [`Pki`]'s CA, bearer
/// [`TOKEN`]), written to `<dir>/kubeconfig`.
pub fn kubeconfig(dir: &Path, port: u16) -> PathBuf {
    kubeconfig_with(
        dir,
        &format!("https://127.0.0.1:{port}"),
        Some(&Pki::shared().ca_pem),
        Some(TOKEN),
    )
}

/// A kubeconfig naming `server`, with `ca_pem` as its certificate authority and `token` as its user's
/// bearer token (each when given), written to `<dir>/kubeconfig`.
pub fn kubeconfig_with(
    dir: &Path,
    server: &str,
    ca_pem: Option<&str>,
    token: Option<&str>,
) -> PathBuf {
    let path = dir.join("kubeconfig");
    let ca = ca_pem
        .map(|pem| {
            format!(
                ", certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    let user = token
        .map(|t| format!("{{token: {t}}}"))
        .unwrap_or("{}".into());
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: test\nclusters:\n- name: c\n  cluster: {{server: '{server}'{ca}}}\ncontexts:\n- name: test\n  context: {{cluster: c, user: u}}\nusers:\n- name: u\n  user: {user}\n"
        ),
    )
    .unwrap();
    path
}

/// Read a request head; `None` when the connection ends first (or its TLS handshake fails).
pub fn read_head(conn: &mut impl Read) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

fn reply(conn: &mut impl Write, status: &str, body: &str) {
    let _ = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// Write one watch event line as a chunk; false once the connection is gone.
fn chunk(conn: &mut impl Write, line: &str) -> bool {
    let line = format!("{line}\n");
    write!(conn, "{:x}\r\n{line}\r\n", line.len()).is_ok() && conn.flush().is_ok()
}

/// Start a chunked watch body and stream what `rx` sends (after `replay`) until the sender is dropped:
/// then the connection is closed without a final chunk.
fn stream(mut conn: Conn, replay: Vec<String>, rx: std::sync::mpsc::Receiver<String>) {
    let _ = write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let _ = conn.flush();
    for line in replay {
        if !chunk(&mut conn, &line) {
            return;
        }
    }
    while let Ok(line) = rx.recv() {
        if !chunk(&mut conn, &line) {
            return;
        }
    }
    let _ = conn.sock.shutdown(std::net::Shutdown::Both);
}

fn serve(state: &Mutex<State>, mut conn: Conn) {
    let Some(head) = read_head(&mut conn) else {
        return;
    };
    let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let param = |k: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
    };
    let mut s = state.lock().unwrap();
    if s.muted || !s.listening {
        return; // connection closed without an answer
    }
    s.requests.push(target.clone());
    let authorized = head.lines().any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("authorization") && v.trim() == format!("Bearer {TOKEN}")
        })
    });
    if !authorized {
        drop(s);
        let body = r#"{"kind":"Status","code":401,"reason":"Unauthorized"}"#;
        return reply(&mut conn, "401 Unauthorized", body);
    }
    let watch = param("watch").is_some();
    if path == "/api/v1/pods" || path == SLICES {
        let slices = path == SLICES;
        if !watch {
            s.lists += 1;
            let items: Vec<String> = if slices {
                s.slices.clone()
            } else {
                s.pods.values().cloned().collect()
            };
            let body = format!(
                r#"{{"kind":"List","metadata":{{"resourceVersion":"{}"}},"items":[{}]}}"#,
                s.rv,
                items.join(",")
            );
            drop(s);
            return reply(&mut conn, "200 OK", &body);
        }
        s.watches += 1;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        if slices {
            s.slice_watchers.push(tx);
            drop(s);
            return stream(conn, vec![], rx);
        }
        let from: u64 = param("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if from < s.compacted {
            drop(s);
            let gone = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#;
            // One ERROR event, then the end of the body.
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            chunk(&mut conn, gone);
            let _ = write!(conn, "0\r\n\r\n");
            return;
        }
        let replay = s
            .log
            .iter()
            .filter(|(rv, _)| *rv > from)
            .map(|(_, l)| l.clone())
            .collect();
        s.pod_watchers.push(tx);
        drop(s);
        return stream(conn, replay, rx);
    }
    configmaps(s, conn, path, watch, param("fieldSelector"));
}

/// `/api/v1/namespaces/<ns>/configmaps/<name>` (GET one) and `/api/v1/namespaces/<ns>/configmaps`
/// with `fieldSelector=metadata.name=<name>` (list, watch); anything else is 404.
fn configmaps(
    mut s: std::sync::MutexGuard<'_, State>,
    mut conn: Conn,
    path: &str,
    watch: bool,
    selector: Option<String>,
) {
    let rest = path.strip_prefix("/api/v1/namespaces/").unwrap_or("");
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        [ns, "configmaps", name] => {
            let key = (ns.to_string(), name.to_string());
            match s.configmaps.get(&key) {
                Some(d) => {
                    let body = configmap_json(ns, name, d, s.rv);
                    drop(s);
                    reply(&mut conn, "200 OK", &body);
                }
                None => {
                    drop(s);
                    reply(
                        &mut conn,
                        "404 Not Found",
                        r#"{"kind":"Status","code":404,"reason":"NotFound"}"#,
                    );
                }
            }
        }
        [ns, "configmaps"] => {
            let Some(name) = selector
                .as_deref()
                .and_then(|f| f.strip_prefix("metadata.name%3D"))
            else {
                drop(s);
                return reply(&mut conn, "404 Not Found", "{}");
            };
            let key = (ns.to_string(), name.to_string());
            if !watch {
                let items = s
                    .configmaps
                    .get(&key)
                    .map(|d| configmap_json(ns, name, d, s.rv))
                    .unwrap_or_default();
                let body = format!(
                    r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"{}"}},"items":[{items}]}}"#,
                    s.rv
                );
                drop(s);
                return reply(&mut conn, "200 OK", &body);
            }
            let (tx, rx) = std::sync::mpsc::channel::<String>();
            s.configmap_watchers.push((key, tx));
            drop(s);
            stream(conn, vec![], rx);
        }
        _ => {
            drop(s);
            reply(&mut conn, "404 Not Found", "{}");
        }
    }
}
