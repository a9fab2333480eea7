//! The web configuration file (`--web-config-file`), in the Prometheus exporter-toolkit YAML format that
//! dcgm-exporter reads: `tls_server_config`, `http_server_config`, `basic_auth_users`.
//!
//! This module only parses and validates; `server::tls` and `server::auth` turn the result into a TLS
//! acceptor and a basic-auth checker. The file is strict: unknown keys are errors, and so are settings
//! that would weaken the server (TLS below 1.2, client certificates accepted without verification,
//! CBC/RC4/3DES cipher suites, non-bcrypt or low-cost password hashes). Every error is one line naming
//! the file, the key and (where it can be found) the line. Nothing here logs or prints a password hash
//! or an inline private key: the `Debug` forms redact them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::local_file::{read_text, Links, MAX_CONFIG_BYTES};

/// The lowest bcrypt cost accepted (`htpasswd -nBC 10 USER`); lower costs are too cheap to brute-force.
pub const MIN_BCRYPT_COST: u32 = 10;
/// The highest bcrypt cost accepted: each step doubles the CPU a login costs (14 is about a second on
/// one core), and anyone who can reach the port can make the server pay it.
pub const MAX_BCRYPT_COST: u32 = 14;

/// A rejected web configuration file.
#[derive(Debug, thiserror::Error)]
#[error("web config {path}: {}{}{message}", line.map(|l| format!("line {l}: ")).unwrap_or_default(), key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default())]
pub struct WebConfigError {
    pub path: String,
    pub key: Option<String>,
    pub line: Option<usize>,
    pub message: String,
}

/// Where PEM data comes from: a file (`cert_file`) or the YAML itself (`cert`).
#[derive(Clone, PartialEq, Eq)]
pub enum PemSource {
    File(PathBuf),
    Inline(String),
}

impl fmt::Debug for PemSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PemSource::File(p) => write!(f, "File({})", p.display()),
            PemSource::Inline(_) => f.write_str("Inline(<redacted>)"),
        }
    }
}

/// TLS protocol versions a configuration may name (TLS 1.0 and 1.1 are refused before this).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// Client-certificate policy. exporter-toolkit's RequestClientCert and RequireAnyClientCert (accept any
/// certificate without checking it) are refused as weak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    VerifyIfGiven,
    RequireAndVerify,
}

/// TLS 1.2 cipher suites (Go names) that rustls offers. TLS 1.3 suites are always all enabled (as in Go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CipherSuite {
    EcdheEcdsaAes128Gcm,
    EcdheEcdsaAes256Gcm,
    EcdheEcdsaChacha20,
    EcdheRsaAes128Gcm,
    EcdheRsaAes256Gcm,
    EcdheRsaChacha20,
}

/// Key-exchange groups (Go `curve_preferences` names) that rustls with ring offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    X25519,
    P256,
    P384,
}

/// Validated `tls_server_config`.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub cert: PemSource,
    pub key: PemSource,
    pub client_auth: ClientAuth,
    pub client_ca: Option<PemSource>,
    pub min_version: TlsVersion,
    pub max_version: TlsVersion,
    /// Empty: rustls' defaults.
    pub cipher_suites: Vec<CipherSuite>,
    /// Empty: rustls' defaults.
    pub curves: Vec<Curve>,
    pub prefer_server_cipher_suites: bool,
}

/// A user allowed by basic auth and the bcrypt hash of their password.
#[derive(Clone)]
pub struct BasicAuthUser {
    pub name: String,
    pub bcrypt_hash: String,
}

impl fmt::Debug for BasicAuthUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BasicAuthUser({}, <hash redacted>)", self.name)
    }
}

/// A validated web configuration file.
#[derive(Debug, Clone)]
pub struct WebConfig {
    pub path: PathBuf,
    pub tls: Option<TlsSettings>,
    pub users: Vec<BasicAuthUser>,
    /// Extra response headers (`http_server_config.headers`), names as written.
    pub headers: Vec<(String, String)>,
    /// `http_server_config.http2`; only HTTP/1.1 is served either way.
    pub http2: bool,
    /// Accepted but worth a log line (e.g. basic auth over plain HTTP).
    pub warnings: Vec<String>,
}

impl WebConfig {
    /// No file: plain HTTP, no auth.
    pub fn none() -> WebConfig {
        WebConfig {
            path: PathBuf::new(),
            tls: None,
            users: Vec::new(),
            headers: Vec::new(),
            http2: true,
            warnings: Vec::new(),
        }
    }
}

// ---- the YAML shape ----------------------------------------------------------------------------------

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    tls_server_config: Option<RawTls>,
    #[serde(default)]
    http_server_config: Option<RawHttp>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
    #[serde(default)]
    rate_limit: Option<serde_norway::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    prefer_server_cipher_suites: Option<bool>,
    client_allowed_sans: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// Headers exporter-toolkit lets a web config add, with the only values allowed (empty: any value).
const ALLOWED_HEADERS: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// Read and validate the file.
pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
    let text = read_text(path, MAX_CONFIG_BYTES, Links::Follow).map_err(|e| WebConfigError {
        path: path.display().to_string(),
        key: None,
        line: None,
        message: format!("cannot read: {e}"),
    })?;
    parse(&text, path)
}

/// Validate YAML text; relative file names in it are resolved against `path`'s folder (as
/// exporter-toolkit does).
pub fn parse(text: &str, path: &Path) -> Result<WebConfig, WebConfigError> {
    let err = |key: &[&str], message: String| WebConfigError {
        path: path.display().to_string(),
        key: (!key.is_empty()).then(|| key.join(".")),
        line: line_of(text, key),
        message,
    };
    let raw: RawConfig = if text.trim().is_empty() {
        RawConfig::default()
    } else {
        serde_norway::from_str::<Option<RawConfig>>(text)
            .map_err(|e| yaml_error(text, path, &e))?
            .unwrap_or_default()
    };
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut warnings = Vec::new();

    if raw.rate_limit.is_some() {
        return Err(err(
            &["rate_limit"],
            "not supported by dcgm-otel; use --web-max-requests and --web-max-connections".into(),
        ));
    }

    // ---- basic_auth_users
    let mut users = Vec::new();
    for (name, hash) in raw.basic_auth_users.unwrap_or_default() {
        let key = ["basic_auth_users", name.as_str()];
        if name.is_empty() || name.contains(':') || name.chars().any(char::is_control) {
            return Err(err(
                &["basic_auth_users"],
                "a user name must be non-empty, without ':' or control characters".into(),
            ));
        }
        check_bcrypt_hash(hash.trim()).map_err(|m| err(&key, m))?;
        users.push(BasicAuthUser {
            name,
            bcrypt_hash: hash.trim().to_string(),
        });
    }

    // ---- http_server_config
    let http = raw.http_server_config.unwrap_or_default();
    let mut headers = Vec::new();
    for (name, value) in http.headers.unwrap_or_default() {
        let key = ["http_server_config", "headers", name.as_str()];
        let Some((_, allowed)) = ALLOWED_HEADERS.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = ALLOWED_HEADERS.iter().map(|(n, _)| *n).collect();
            return Err(err(
                &key,
                format!(
                    "this header cannot be configured (allowed: {})",
                    names.join(", ")
                ),
            ));
        };
        if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
            return Err(err(
                &key,
                format!(
                    "'{value}' is not allowed (expected one of: {})",
                    allowed.join(", ")
                ),
            ));
        }
        if value.is_empty() || value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
            return Err(err(
                &key,
                "the value must be non-empty printable text".into(),
            ));
        }
        headers.push((name, value));
    }

    // ---- tls_server_config
    let tls = match raw.tls_server_config {
        None => None,
        Some(t) => parse_tls(t, &dir, &err)?,
    };
    if tls.is_none() && !users.is_empty() {
        warnings.push(
            "basic_auth_users without tls_server_config: passwords cross the network in clear text"
                .to_string(),
        );
    }
    Ok(WebConfig {
        path: path.to_path_buf(),
        tls,
        users,
        headers,
        http2: http.http2.unwrap_or(true),
        warnings,
    })
}

/// `tls_server_config`: None when it sets nothing (plain HTTP). The certificate, the key and the
/// client CAs each from a file (relative to the web config's folder) or inline; client verification
/// only with CAs; TLS 1.2 and up; Go's names of cipher suites and curves.
fn parse_tls(
    t: RawTls,
    dir: &Path,
    err: &dyn Fn(&[&str], String) -> WebConfigError,
) -> Result<Option<TlsSettings>, WebConfigError> {
    let nonempty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let cert_inline = nonempty(t.cert);
    let key_inline = nonempty(t.key);
    let ca_inline = nonempty(t.client_ca);
    let cert_file = nonempty(t.cert_file);
    let key_file = nonempty(t.key_file);
    let ca_file = nonempty(t.client_ca_file);
    let auth_type = nonempty(t.client_auth_type);
    let enabled = cert_inline.is_some()
        || key_inline.is_some()
        || ca_inline.is_some()
        || cert_file.is_some()
        || key_file.is_some()
        || ca_file.is_some()
        || auth_type.is_some();
    if !enabled {
        return Ok(None);
    }
    let pick = |file, inline, fkey, ikey| pem_source(file, inline, (fkey, ikey), dir, err);
    let cert = pick(cert_file, cert_inline, "cert_file", "cert")?
        .ok_or_else(|| err(&[TLS], "missing cert_file (or cert)".into()))?;
    let key = pick(key_file, key_inline, "key_file", "key")?
        .ok_or_else(|| err(&[TLS], "missing key_file (or key)".into()))?;
    let client_ca = pick(ca_file, ca_inline, "client_ca_file", "client_ca")?;
    let client_auth = client_auth(auth_type.as_deref(), client_ca.is_some(), err)?;
    if t.client_allowed_sans.is_some() {
        return Err(err(
            &[TLS, "client_allowed_sans"],
            "not supported by dcgm-otel".into(),
        ));
    }
    let min_version = tls_version(t.min_version, "min_version", TlsVersion::Tls12, err)?;
    let max_version = tls_version(t.max_version, "max_version", TlsVersion::Tls13, err)?;
    if min_version > max_version {
        return Err(err(
            &[TLS, "min_version"],
            "min_version is above max_version".into(),
        ));
    }
    let mut cipher_suites = Vec::new();
    for name in t.cipher_suites.unwrap_or_default() {
        if let Some(cs) = cipher_suite(name.trim()).map_err(|m| err(&[TLS, "cipher_suites"], m))? {
            cipher_suites.push(cs);
        }
    }
    let mut curves = Vec::new();
    for name in t.curve_preferences.unwrap_or_default() {
        curves.push(curve(name.trim()).map_err(|m| err(&[TLS, "curve_preferences"], m))?);
    }
    Ok(Some(TlsSettings {
        cert,
        key,
        client_auth,
        client_ca,
        min_version,
        max_version,
        cipher_suites,
        curves,
        prefer_server_cipher_suites: t.prefer_server_cipher_suites.unwrap_or(true),
    }))
}

/// The web config's section of TLS settings, as errors name it.
const TLS: &str = "tls_server_config";

/// A PEM item given as a file (key `fkey`, relative to `dir`) or inline (key `ikey`), not both.
fn pem_source(
    file: Option<String>,
    inline: Option<String>,
    (fkey, ikey): (&str, &str),
    dir: &Path,
    err: &dyn Fn(&[&str], String) -> WebConfigError,
) -> Result<Option<PemSource>, WebConfigError> {
    match (file, inline) {
        (Some(_), Some(_)) => Err(err(
            &[TLS, fkey],
            format!("set either {fkey} or {ikey}, not both"),
        )),
        (Some(f), None) => {
            let p = PathBuf::from(f);
            Ok(Some(PemSource::File(if p.is_relative() {
                dir.join(p)
            } else {
                p
            })))
        }
        (None, Some(i)) => Ok(Some(PemSource::Inline(i))),
        (None, None) => Ok(None),
    }
}

/// `client_auth_type` (default NoClientCert): the types that verify a client certificate, and only
/// with client CAs (`has_ca`); none that accepts one unverified; CAs only with verification.
fn client_auth(
    auth_type: Option<&str>,
    has_ca: bool,
    err: &dyn Fn(&[&str], String) -> WebConfigError,
) -> Result<ClientAuth, WebConfigError> {
    let client_auth = match auth_type.unwrap_or("NoClientCert") {
        "NoClientCert" => ClientAuth::None,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
        weak @ ("RequestClientCert" | "RequireAnyClientCert" | "RequireClientCert") => {
            return Err(err(
                &[TLS, "client_auth_type"],
                format!(
                    "{weak} accepts client certificates without verifying them; use RequireAndVerifyClientCert \
                     (or VerifyClientCertIfGiven) with client_ca_file"
                ),
            ))
        }
        other => {
            return Err(err(
                &[TLS, "client_auth_type"],
                format!(
                    "unknown value '{other}' (expected NoClientCert, VerifyClientCertIfGiven or \
                     RequireAndVerifyClientCert)"
                ),
            ))
        }
    };
    match (client_auth, has_ca) {
        (ClientAuth::None, true) => Err(err(
            &[TLS, "client_ca_file"],
            "client CAs are configured but client_auth_type is NoClientCert; set \
             client_auth_type: RequireAndVerifyClientCert"
                .into(),
        )),
        (ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify, false) => Err(err(
            &[TLS, "client_auth_type"],
            "verifying client certificates needs client_ca_file (or client_ca)".into(),
        )),
        (client_auth, _) => Ok(client_auth),
    }
}

/// `min_version` / `max_version` (`key`): TLS12 or TLS13, `default` when unset.
fn tls_version(
    v: Option<String>,
    key: &str,
    default: TlsVersion,
    err: &dyn Fn(&[&str], String) -> WebConfigError,
) -> Result<TlsVersion, WebConfigError> {
    match v.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some("TLS12") => Ok(TlsVersion::Tls12),
        Some("TLS13") => Ok(TlsVersion::Tls13),
        Some(weak @ ("TLS10" | "TLS11")) => Err(err(
            &[TLS, key],
            format!("{weak} is not allowed: the minimum is TLS12"),
        )),
        Some(other) => Err(err(
            &[TLS, key],
            format!("unknown TLS version '{other}' (expected TLS12 or TLS13)"),
        )),
    }
}

/// A Go cipher suite name → the TLS 1.2 suite (None: a TLS 1.3 suite, always on).
fn cipher_suite(name: &str) -> Result<Option<CipherSuite>, String> {
    use CipherSuite::*;
    Ok(Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => EcdheEcdsaAes128Gcm,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => EcdheEcdsaAes256Gcm,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => EcdheEcdsaChacha20,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => EcdheRsaAes128Gcm,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => EcdheRsaAes256Gcm,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            EcdheRsaChacha20
        }
        "TLS_AES_128_GCM_SHA256" | "TLS_AES_256_GCM_SHA384" | "TLS_CHACHA20_POLY1305_SHA256" => {
            return Ok(None)
        }
        weak if weak.starts_with("TLS_")
            && (weak.contains("_CBC_")
                || weak.contains("RC4")
                || weak.contains("3DES")
                || weak.starts_with("TLS_RSA_WITH")) =>
        {
            return Err(format!(
                "{weak} is a weak suite (CBC, RC4, 3DES or RSA key exchange) and is not offered; \
                 use ECDHE with AES-GCM or ChaCha20-Poly1305"
            ))
        }
        other => return Err(format!("unknown cipher suite '{other}'")),
    }))
}

fn curve(name: &str) -> Result<Curve, String> {
    match name {
        "X25519" => Ok(Curve::X25519),
        "CurveP256" => Ok(Curve::P256),
        "CurveP384" => Ok(Curve::P384),
        "CurveP521" | "X25519MLKEM768" => Err(format!(
            "{name} is not offered by dcgm-otel's TLS library (rustls with ring); use X25519, CurveP256 or CurveP384"
        )),
        other => Err(format!(
            "unknown curve '{other}' (expected X25519, CurveP256 or CurveP384)"
        )),
    }
}

/// Check a bcrypt hash's shape and cost without verifying anything: `$2a$`, `$2b$` or `$2y$`, a two-digit
/// cost of at least [`MIN_BCRYPT_COST`], then 53 characters of bcrypt base64. The message never contains
/// the hash.
pub fn check_bcrypt_hash(hash: &str) -> Result<u32, String> {
    let b = hash.as_bytes();
    let prefix_ok = b.len() == 60
        && b[0] == b'$'
        && b[1] == b'2'
        && matches!(b[2], b'a' | b'b' | b'y')
        && b[3] == b'$'
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit()
        && b[6] == b'$'
        && b[7..]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'.' || *c == b'/');
    if !prefix_ok {
        return Err(
            "not a bcrypt hash ($2y$/$2b$/$2a$, 60 characters); make one with: htpasswd -nBC 10 USER"
                .into(),
        );
    }
    let cost = u32::from(b[4] - b'0') * 10 + u32::from(b[5] - b'0');
    if !(4..=31).contains(&cost) {
        return Err(format!("bcrypt cost {cost} is out of range 4..31"));
    }
    if cost < MIN_BCRYPT_COST {
        return Err(format!(
            "bcrypt cost {cost} is below the minimum {MIN_BCRYPT_COST}; regenerate with: htpasswd -nBC 10 USER"
        ));
    }
    if cost > MAX_BCRYPT_COST {
        return Err(format!(
            "bcrypt cost {cost} is above the maximum {MAX_BCRYPT_COST} (every login, right or wrong, would cost the server {}x a cost-10 one); regenerate with: htpasswd -nBC 10 USER",
            1u64 << (cost - MIN_BCRYPT_COST)
        ));
    }
    if hash.parse::<bcrypt::HashParts>().is_err() {
        return Err("not a valid bcrypt hash; make one with: htpasswd -nBC 10 USER".into());
    }
    Ok(cost)
}

/// A YAML/shape error as one line: serde_norway's message (which names the key path), with its line, or
/// for an unknown top-level key the line where that key is written.
fn yaml_error(text: &str, path: &Path, e: &serde_norway::Error) -> WebConfigError {
    let mut message = e.to_string().replace('\n', " ");
    let mut line = e.location().map(|l| l.line());
    if let Some(l) = e.location() {
        let suffix = format!(" at line {} column {}", l.line(), l.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
    }
    if line.is_none() {
        if let Some(rest) = message.split("unknown field `").nth(1) {
            if let Some(name) = rest.split('`').next() {
                line = line_of(text, &[name]);
            }
        }
    }
    WebConfigError {
        path: path.display().to_string(),
        key: None,
        line,
        message,
    }
}

/// Best-effort line number (1-based) of a key path such as `tls_server_config.min_version`: each segment
/// is looked for (as `segment:`) on a line after the previous one's.
fn line_of(text: &str, key: &[&str]) -> Option<usize> {
    if key.is_empty() {
        return None;
    }
    let mut start = 0usize;
    let mut found = None;
    let lines: Vec<&str> = text.lines().collect();
    for seg in key {
        let plain = format!("{seg}:");
        let dq = format!("\"{seg}\":");
        let sq = format!("'{seg}':");
        let idx = lines
            .iter()
            .enumerate()
            .skip(start)
            .find(|(_, l)| {
                let t = l.trim_start().trim_start_matches("- ");
                t.starts_with(&plain) || t.starts_with(&dq) || t.starts_with(&sq)
            })
            .map(|(i, _)| i)?;
        found = Some(idx + 1);
        start = idx + 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$2y$10$A77zPQHRo65V/e4wnkWD6.9WnvhvF8e4EgIVidn.dXqtB.6TNpC32";

    fn p(text: &str) -> Result<WebConfig, WebConfigError> {
        parse(text, Path::new("/etc/dcgm/web.yml"))
    }

    fn msg(text: &str) -> String {
        p(text).unwrap_err().to_string()
    }

    #[test]
    fn empty_file_is_plain_http() {
        let c = p("").unwrap();
        assert!(c.tls.is_none() && c.users.is_empty() && c.headers.is_empty());
        let c = p("# nothing\n").unwrap();
        assert!(c.tls.is_none());
    }

    #[test]
    fn full_file() {
        let c = p(&format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: /k/server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\n  \
             cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n  \
             curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: false\n\
             http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  prom: {HASH}\n"
        ))
        .unwrap();
        let t = c.tls.unwrap();
        assert_eq!(
            t.cert,
            PemSource::File(PathBuf::from("/etc/dcgm/server.crt"))
        );
        assert_eq!(t.key, PemSource::File(PathBuf::from("/k/server.key")));
        assert_eq!(
            t.client_ca,
            Some(PemSource::File(PathBuf::from("/etc/dcgm/ca.crt")))
        );
        assert_eq!(t.client_auth, ClientAuth::RequireAndVerify);
        assert_eq!(t.min_version, TlsVersion::Tls13);
        assert_eq!(t.cipher_suites, vec![CipherSuite::EcdheRsaAes128Gcm]);
        assert_eq!(t.curves, vec![Curve::X25519, Curve::P256]);
        assert!(!t.prefer_server_cipher_suites);
        assert_eq!(c.users.len(), 1);
        assert_eq!(
            c.headers,
            vec![("X-Frame-Options".to_string(), "deny".to_string())]
        );
        assert!(!c.http2);
        assert!(!format!("{:?}", c.users).contains("$2y$"));
    }

    #[test]
    fn unknown_keys_name_key_and_line() {
        let m = msg("tls_server_config:\n  cert_file: a\n  key_file: b\n  bogus: 1\n");
        assert!(m.starts_with("web config /etc/dcgm/web.yml: "), "{m}");
        assert!(m.contains("bogus") && m.contains("line 4"), "{m}");
        let m = msg("basic_auth_user:\n  a: b\n");
        assert!(m.contains("basic_auth_user") && m.contains("line 1"), "{m}");
    }

    #[test]
    fn weak_settings_are_refused() {
        let tls = "tls_server_config:\n  cert_file: a\n  key_file: b\n";
        let m = msg(&format!("{tls}  min_version: TLS10\n"));
        assert!(
            m.contains("line 4: tls_server_config.min_version: TLS10 is not allowed"),
            "{m}"
        );
        assert!(msg(&format!("{tls}  max_version: TLS11\n")).contains("max_version"));
        let m = msg(&format!("{tls}  client_auth_type: RequireAnyClientCert\n"));
        assert!(m.contains("without verifying"), "{m}");
        let m = msg(&format!(
            "{tls}  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n"
        ));
        assert!(m.contains("weak suite"), "{m}");
        let m = msg(&format!("{tls}  curve_preferences: [CurveP521]\n"));
        assert!(m.contains("not offered"), "{m}");
        let m = msg(&format!(
            "{tls}  client_auth_type: RequireAndVerifyClientCert\n"
        ));
        assert!(m.contains("needs client_ca_file"), "{m}");
        let m = msg(&format!("{tls}  client_ca_file: ca.pem\n"));
        assert!(m.contains("NoClientCert"), "{m}");
        let m = msg("tls_server_config:\n  cert_file: a\n");
        assert!(m.contains("missing key_file"), "{m}");
    }

    #[test]
    fn weak_hashes_are_refused_without_echoing_them() {
        let low = "$2y$05$D2a6THJ2zuiqq1RwT2vExuTHVDxsH3Orhl.p2lquShOL1/bMV7W5S";
        let m = msg(&format!("basic_auth_users:\n  prom: {low}\n"));
        assert!(
            m.contains("line 2: basic_auth_users.prom: bcrypt cost 5 is below the minimum 10"),
            "{m}"
        );
        assert!(!m.contains(low));
        let m = msg("basic_auth_users:\n  prom: plaintext-password\n");
        assert!(
            m.contains("not a bcrypt hash") && !m.contains("plaintext-password"),
            "{m}"
        );
        let m = msg("basic_auth_users:\n  prom: '{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g='\n");
        assert!(m.contains("not a bcrypt hash"), "{m}");
        let m = msg(&format!("basic_auth_users:\n  'a:b': {HASH}\n"));
        assert!(m.contains("user name"), "{m}");
    }

    #[test]
    fn costs_above_14_are_refused_naming_the_user() {
        let at = |cost: &str| HASH.replace("$10$", &format!("${cost}$"));
        assert!(p(&format!("basic_auth_users:\n  prom: {}\n", at("14"))).is_ok());
        let m = msg(&format!(
            "basic_auth_users:\n  prom: {HASH}\n  slow: {}\n",
            at("15")
        ));
        assert!(
            m.contains("line 3: basic_auth_users.slow: bcrypt cost 15 is above the maximum 14"),
            "{m}"
        );
        let m = msg(&format!("basic_auth_users:\n  prom: {}\n", at("31")));
        assert!(m.contains("bcrypt cost 31 is above the maximum 14"), "{m}");
        assert!(!m.contains(&at("31")), "{m}");
    }

    #[test]
    fn header_rules() {
        let m = msg("http_server_config:\n  headers:\n    Server: x\n");
        assert!(
            m.contains(
                "line 3: http_server_config.headers.Server: this header cannot be configured"
            ),
            "{m}"
        );
        let m = msg("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n");
        assert!(m.contains("nosniff"), "{m}");
        assert!(p(
            "http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n"
        )
        .is_ok());
    }

    #[test]
    fn plaintext_basic_auth_warns() {
        let c = p(&format!("basic_auth_users:\n  prom: {HASH}\n")).unwrap();
        assert_eq!(c.warnings.len(), 1);
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        const KEYS: &[&str] = &[
            "tls_server_config:",
            "  cert_file: a.pem",
            "  key_file: b.pem",
            "  client_auth_type: ",
            "  client_ca_file: c.pem",
            "  min_version: ",
            "  max_version: ",
            "  cipher_suites: [",
            "  curve_preferences: [",
            "basic_auth_users:",
            "  u: ",
            "http_server_config:",
            "  headers:",
            "    X-Frame-Options: ",
            "  http2: ",
            "rate_limit:",
            "- ",
            "{",
            "}",
            "]",
            "\"",
            "'",
            ": ",
            "\n",
            "TLS12",
            "TLS10",
            "X25519",
            "$2y$10$",
            "RequireAndVerifyClientCert",
            "true",
            "~",
            "&a",
            "*a",
        ];

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            #[test]
            fn arbitrary_text_never_panics(s in "\\PC{0,400}") {
                let _ = parse(&s, Path::new("/x/web.yml"));
            }

            #[test]
            fn token_soup_never_panics(parts in proptest::collection::vec(0..KEYS.len(), 0..40)) {
                let mut s = String::new();
                for i in parts {
                    s.push_str(KEYS[i]);
                    if i % 3 == 0 { s.push('\n'); }
                }
                if let Err(e) = parse(&s, Path::new("/x/web.yml")) {
                    let line = e.to_string();
                    prop_assert!(line.starts_with("web config /x/web.yml: "));
                    prop_assert!(!line.contains('\n'));
                }
            }
        }
    }
}
