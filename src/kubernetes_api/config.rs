//! Where the Kubernetes API server is and how to authenticate: in-cluster (the ServiceAccount token and
//! CA mounted in every pod, `KUBERNETES_SERVICE_HOST`/`_PORT`) or a kubeconfig file named by
//! `KUBECONFIG` (its current context: `server`, `certificate-authority[-data]`, and a `token`,
//! `tokenFile` or `client-certificate[-data]` + `client-key[-data]` user). Exec and auth-provider
//! plugins and `insecure-skip-tls-verify` are not supported: such a kubeconfig is reported, and pod
//! metadata is then unavailable. Neither is a credential (token, token file, client certificate) for an
//! `http://` server: it would go over the network in clear, so such a kubeconfig is refused with one
//! line (`http://` stays for a local `kubectl proxy` without a user). A certificate authority, when
//! given, is the only one trusted (`watch` builds the TLS settings); the system roots only without it.
//! `Debug` of these settings never shows a token or a key.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

/// The in-cluster ServiceAccount directory.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How requests authenticate. `Debug` shows the kind, never the secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    /// A bearer token re-read from this file for every request (projected tokens rotate).
    TokenFile(PathBuf),
    Token(String),
    /// PEM certificate chain and key.
    ClientCert {
        cert: Vec<u8>,
        key: Vec<u8>,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::TokenFile(p) => write!(f, "TokenFile({})", p.display()),
            Auth::Token(_) => f.write_str("Token(<redacted>)"),
            Auth::ClientCert { .. } => f.write_str("ClientCert(<redacted>)"),
        }
    }
}

/// How to reach the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// `https://host:port` (or `http://` for a local proxy without credentials), no trailing slash.
    pub server: String,
    /// PEM CA bundle: the only roots trusted when given (the system roots without it).
    pub ca_pem: Option<Vec<u8>>,
    /// Redacted in `Debug` ([`Auth`]).
    pub auth: Auth,
    /// Where this came from, for logs.
    pub origin: String,
}

/// A configuration that exists but cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("Kubernetes API configuration from {origin}: {message}")]
pub struct ConfigError {
    pub origin: String,
    pub message: String,
}

impl ApiConfig {
    /// In-cluster first, then `KUBECONFIG`; `Ok(None)` when neither exists.
    pub fn discover(
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<ApiConfig>, ConfigError> {
        if let (Some(host), Some(port)) = (
            env("KUBERNETES_SERVICE_HOST"),
            env("KUBERNETES_SERVICE_PORT"),
        ) {
            let dir = Path::new(SERVICE_ACCOUNT_DIR);
            let token = dir.join("token");
            if token.exists() {
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host
                };
                return Ok(Some(ApiConfig {
                    server: format!("https://{host}:{port}"),
                    ca_pem: std::fs::read(dir.join("ca.crt")).ok(),
                    auth: Auth::TokenFile(token),
                    origin: "in-cluster service account".into(),
                }));
            }
        }
        match env("KUBECONFIG").filter(|k| !k.trim().is_empty()) {
            Some(list) => {
                let first = list.split(':').find(|p| !p.is_empty()).unwrap_or_default();
                ApiConfig::from_kubeconfig(Path::new(first)).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The current context of a kubeconfig file.
    pub fn from_kubeconfig(path: &Path) -> Result<ApiConfig, ConfigError> {
        let origin = format!("KUBECONFIG {}", path.display());
        let err = |message: String| ConfigError {
            origin: origin.clone(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let file: KubeConfig = serde_norway::from_str(&text).map_err(|e| err(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let context_name = file
            .current_context
            .clone()
            .or_else(|| file.contexts.first().map(|c| c.name.clone()))
            .ok_or_else(|| err("no current-context".into()))?;
        let context = file
            .contexts
            .iter()
            .find(|c| c.name == context_name)
            .ok_or_else(|| err(format!("context '{context_name}' not found")))?;
        let cluster = file
            .clusters
            .iter()
            .find(|c| c.name == context.context.cluster)
            .ok_or_else(|| err(format!("cluster '{}' not found", context.context.cluster)))?;
        let c = &cluster.cluster;
        if c.insecure_skip_tls_verify {
            return Err(err(
                "insecure-skip-tls-verify is not supported; give certificate-authority".into(),
            ));
        }
        let read = |file: &Option<String>,
                    data: &Option<String>,
                    what: &str|
         -> Result<Option<Vec<u8>>, ConfigError> {
            if let Some(d) = data {
                return base64::engine::general_purpose::STANDARD
                    .decode(d.trim())
                    .map(Some)
                    .map_err(|e| err(format!("{what}-data: {e}")));
            }
            match file {
                Some(f) => {
                    let p = base.join(f);
                    std::fs::read(&p)
                        .map(Some)
                        .map_err(|e| err(format!("{what} {}: {e}", p.display())))
                }
                None => Ok(None),
            }
        };
        let ca_pem = read(
            &c.certificate_authority,
            &c.certificate_authority_data,
            "certificate-authority",
        )?;
        let user = context
            .context
            .user
            .as_ref()
            .and_then(|u| file.users.iter().find(|x| &x.name == u))
            .map(|u| &u.user);
        let auth = match user {
            None => Auth::None,
            Some(u) if u.exec.is_some() || u.auth_provider.is_some() => {
                return Err(err("exec and auth-provider credential plugins are not supported; use a token or a client certificate".into()))
            }
            Some(u) => {
                if let Some(t) = &u.token {
                    Auth::Token(t.trim().to_string())
                } else if let Some(f) = &u.token_file {
                    Auth::TokenFile(base.join(f))
                } else {
                    let cert = read(&u.client_certificate, &u.client_certificate_data, "client-certificate")?;
                    let key = read(&u.client_key, &u.client_key_data, "client-key")?;
                    match (cert, key) {
                        (Some(cert), Some(key)) => Auth::ClientCert { cert, key },
                        (None, None) => Auth::None,
                        _ => return Err(err("client-certificate and client-key go together".into())),
                    }
                }
            }
        };
        let server = c.server.trim_end_matches('/').to_string();
        if !(server.starts_with("https://") || server.starts_with("http://")) {
            return Err(err(format!("server '{server}' is not an http(s) URL")));
        }
        if server.starts_with("http://") && auth != Auth::None {
            return Err(err(format!(
                "server '{server}' is plain http: a bearer token or client certificate is never sent without TLS; use https:// (or a kubectl proxy without a user)"
            )));
        }
        Ok(ApiConfig {
            server,
            ca_pem,
            auth,
            origin,
        })
    }
}

#[derive(Deserialize)]
struct KubeConfig {
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(rename = "current-context", default)]
    current_context: Option<String>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    cluster: T,
}

#[derive(Deserialize)]
struct Cluster {
    server: String,
    #[serde(rename = "certificate-authority", default)]
    certificate_authority: Option<String>,
    #[serde(rename = "certificate-authority-data", default)]
    certificate_authority_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify", default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: User,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    token: Option<String>,
    #[serde(rename = "tokenFile", default)]
    token_file: Option<String>,
    #[serde(rename = "client-certificate", default)]
    client_certificate: Option<String>,
    #[serde(rename = "client-certificate-data", default)]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key", default)]
    client_key: Option<String>,
    #[serde(rename = "client-key-data", default)]
    client_key_data: Option<String>,
    #[serde(default)]
    exec: Option<serde_norway::Value>,
    #[serde(rename = "auth-provider", default)]
    auth_provider: Option<serde_norway::Value>,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: Context,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_current_context() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: b\nclusters:\n- name: c1\n  cluster: {server: 'https://10.0.0.1:6443/', certificate-authority-data: aGVsbG8=}\n- name: c2\n  cluster: {server: 'https://127.0.0.1:8001'}\ncontexts:\n- {name: a, context: {cluster: c1, user: u1}}\n- {name: b, context: {cluster: c2, user: u2}}\nusers:\n- {name: u1, user: {token: abc}}\n- {name: u2, user: {tokenFile: tok}}\n",
        )
        .unwrap();
        let c = ApiConfig::from_kubeconfig(&path).unwrap();
        assert_eq!(c.server, "https://127.0.0.1:8001");
        assert_eq!(c.auth, Auth::TokenFile(dir.path().join("tok")));
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("current-context: b", "current-context: a");
        std::fs::write(&path, text).unwrap();
        let c = ApiConfig::from_kubeconfig(&path).unwrap();
        assert_eq!(c.server, "https://10.0.0.1:6443");
        assert_eq!(c.ca_pem.as_deref(), Some(&b"hello"[..]));
        assert_eq!(c.auth, Auth::Token("abc".into()));
    }

    /// Issue 35: a kubeconfig naming an `http://` server with a token sent the token in clear.
    #[test]
    fn a_credential_is_never_for_a_plain_http_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        let write = |user: &str| {
            std::fs::write(
                &path,
                format!("apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster: {{server: 'http://10.0.0.1:8080'}}\ncontexts:\n- {{name: a, context: {{cluster: c, user: u}}}}\nusers:\n- {{name: u, user: {user}}}\n"),
            )
            .unwrap();
        };
        for user in ["{token: abc}", "{tokenFile: tok}"] {
            write(user);
            let e = ApiConfig::from_kubeconfig(&path).unwrap_err().to_string();
            assert!(
                e.contains("server 'http://10.0.0.1:8080' is plain http: a bearer token or client certificate is never sent without TLS"),
                "{e}"
            );
        }
        // A local proxy without a user stays possible.
        write("{}");
        assert_eq!(ApiConfig::from_kubeconfig(&path).unwrap().auth, Auth::None);
    }

    /// Issue 35: `Debug` of the settings printed the token and the client key.
    #[test]
    fn debug_never_shows_a_secret() {
        let c = ApiConfig {
            server: "https://k".into(),
            ca_pem: None,
            auth: Auth::Token("s3cr3t-t0ken".into()),
            origin: "test".into(),
        };
        let text = format!("{c:?}");
        assert!(
            !text.contains("s3cr3t") && text.contains("Token(<redacted>)"),
            "{text}"
        );
        let cert = Auth::ClientCert {
            cert: b"CERTDATA".to_vec(),
            key: b"PRIVATEKEYDATA".to_vec(),
        };
        let text = format!("{cert:?}");
        assert!(
            !text.contains("PRIVATEKEY") && !text.contains("CERTDATA"),
            "{text}"
        );
        // The byte values of a Vec<u8> would show too.
        assert!(!text.contains("80, 82"), "{text}");
    }
}
