//! The `-r` / `DCGM_REMOTE_HOSTENGINE_INFO` address of a remote nv-hostengine, and the host label it
//! implies.
//!
//! Accepted forms (dcgm-exporter 4.8.3): `HOST:PORT`, `HOST` (port 5555), `[IPv6]:PORT`, and the DCGM
//! connection URIs `unix:///path`, `tcp://HOST[:PORT]`, `vsock://CID[:PORT]`. A unix socket is reached
//! with `dcgmConnect_v2` and its unix-socket flag (any DCGM 3.x/4.x); `tcp://` and `vsock://` URIs go
//! through `dcgmConnect_v3` when the library has it (DCGM >= 4.5), and `tcp://` falls back to
//! `dcgmConnect_v2` otherwise.

use std::fmt;
use std::net::IpAddr;

/// A parsed remote host-engine address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteTarget {
    /// `HOST[:PORT]` or `[IPv6]:PORT`, passed to `dcgmConnect_v2` as written (`host` keeps its brackets).
    Tcp { host: String, port: Option<u16> },
    /// `unix:///path`: the socket path.
    Unix { path: String },
    /// `tcp://...` or `vsock://...`: a DCGM v3 connection string, passed verbatim.
    Uri {
        uri: String,
        scheme: &'static str,
        host: String,
    },
}

/// A `-r` value that cannot be used (exit code 2 at start-up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --remote-hostengine-info '{input}': {message}")]
pub struct RemoteAddressError {
    pub input: String,
    pub message: String,
}

impl fmt::Display for RemoteTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteTarget::Tcp {
                host,
                port: Some(p),
            } => write!(f, "{host}:{p}"),
            RemoteTarget::Tcp { host, port: None } => write!(f, "{host}"),
            RemoteTarget::Unix { path } => write!(f, "unix://{path}"),
            RemoteTarget::Uri { uri, .. } => write!(f, "{uri}"),
        }
    }
}

impl RemoteTarget {
    /// The string handed to `dcgmConnect_v2` (`host:port`, or the socket path).
    pub fn v2_address(&self) -> String {
        match self {
            RemoteTarget::Tcp {
                host,
                port: Some(p),
            } => format!("{host}:{p}"),
            RemoteTarget::Tcp { host, port: None } => host.clone(),
            RemoteTarget::Unix { path } => path.clone(),
            RemoteTarget::Uri { host, .. } => host.clone(),
        }
    }

    /// The host part, without IPv6 brackets, or `None` for local transports (unix socket, vsock).
    fn host(&self) -> Option<&str> {
        match self {
            RemoteTarget::Tcp { host, .. } => Some(strip_brackets(host)),
            RemoteTarget::Uri {
                scheme: "tcp",
                host,
                ..
            } => {
                let h = split_port(host).0;
                Some(strip_brackets(h))
            }
            _ => None,
        }
    }
}

fn strip_brackets(h: &str) -> &str {
    h.strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(h)
}

/// Split `host:port` / `[v6]:port` / `host` into host and optional port text.
fn split_port(s: &str) -> (&str, Option<&str>) {
    if s.starts_with('[') {
        match s.find(']') {
            Some(end) => {
                let rest = &s[end + 1..];
                (&s[..=end], rest.strip_prefix(':'))
            }
            None => (s, None),
        }
    } else if s.matches(':').count() == 1 {
        let (h, p) = s.split_once(':').unwrap_or((s, ""));
        (h, Some(p))
    } else {
        (s, None)
    }
}

/// Parse a `-r` value.
pub fn parse(input: &str) -> Result<RemoteTarget, RemoteAddressError> {
    let bad = |message: &str| RemoteAddressError {
        input: input.to_string(),
        message: message.to_string(),
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(bad(
            "empty address; expected HOST:PORT, [IPv6]:PORT or unix:///path",
        ));
    }
    if let Some(path) = s.strip_prefix("unix://") {
        if !path.starts_with('/') {
            return Err(bad(
                "a unix socket URI needs an absolute path: unix:///path/to/socket",
            ));
        }
        return Ok(RemoteTarget::Unix {
            path: path.to_string(),
        });
    }
    for scheme in ["tcp", "vsock"] {
        if let Some(rest) = s.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) {
            if rest.is_empty() {
                return Err(bad("missing host after the scheme"));
            }
            let (host, port) = split_port(rest);
            if let Some(p) = port {
                p.parse::<u16>()
                    .map_err(|_| bad("port is not a number in 0..65535"))?;
            }
            if host.is_empty() {
                return Err(bad("missing host after the scheme"));
            }
            return Ok(RemoteTarget::Uri {
                uri: s.to_string(),
                scheme: if scheme == "tcp" { "tcp" } else { "vsock" },
                host: rest.to_string(),
            });
        }
    }
    if s.contains("://") {
        return Err(bad("unknown scheme; expected unix://, tcp:// or vsock://"));
    }
    if s.contains(char::is_whitespace) {
        return Err(bad("address contains whitespace"));
    }
    if !s.starts_with('[') && s.matches(':').count() > 1 {
        return Err(bad("an IPv6 address needs brackets, e.g. [::1]:5555"));
    }
    let (host, port) = split_port(s);
    if host.starts_with('[') && !host.ends_with(']') {
        return Err(bad("unclosed '[' in IPv6 address"));
    }
    if host.starts_with('[') && strip_brackets(host).parse::<std::net::Ipv6Addr>().is_err() {
        return Err(bad("not an IPv6 address inside [ ]"));
    }
    if host.is_empty() || host == "[]" {
        return Err(bad("missing host before ':'"));
    }
    if s.starts_with('[') && port.is_none() && s.len() != host.len() {
        return Err(bad("expected ':' and a port after ']'"));
    }
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .map_err(|_| bad("port is not a number in 0..65535"))?,
        ),
    };
    Ok(RemoteTarget::Tcp {
        host: host.to_string(),
        port,
    })
}

/// The host label for a remote host engine, like dcgm-exporter 4.8.3: the host part of `-r`; `None`
/// (meaning: use the local host name) for loopback addresses, `localhost`, unix sockets, vsock and
/// unparsable input.
pub fn remote_hostname(input: &str) -> Option<String> {
    let target = parse(input).ok()?;
    let host = target.host()?;
    if host.is_empty() || host.eq_ignore_ascii_case("localhost") {
        return None;
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        if ip.is_loopback() || ip.is_unspecified() {
            return None;
        }
    }
    Some(host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(
            parse("gpu-node:5555").unwrap(),
            RemoteTarget::Tcp {
                host: "gpu-node".into(),
                port: Some(5555)
            }
        );
        assert_eq!(
            parse("gpu-node").unwrap(),
            RemoteTarget::Tcp {
                host: "gpu-node".into(),
                port: None
            }
        );
        assert_eq!(
            parse("[fd00::1]:5555").unwrap(),
            RemoteTarget::Tcp {
                host: "[fd00::1]".into(),
                port: Some(5555)
            }
        );
        assert_eq!(
            parse("unix:///run/nv-hostengine").unwrap(),
            RemoteTarget::Unix {
                path: "/run/nv-hostengine".into()
            }
        );
        assert_eq!(
            parse("[fd00::1]:5555").unwrap().v2_address(),
            "[fd00::1]:5555"
        );
        assert!(matches!(
            parse("tcp://h:1").unwrap(),
            RemoteTarget::Uri { scheme: "tcp", .. }
        ));
        assert!(matches!(
            parse("vsock://3:5555").unwrap(),
            RemoteTarget::Uri {
                scheme: "vsock",
                ..
            }
        ));
    }

    #[test]
    fn bad_input() {
        for s in [
            "",
            "fd00::1:5555",
            "h:x",
            "h:70000",
            "unix://rel",
            "ftp://x",
            "[fd00::1",
            "[zz]:1",
            ":5555",
            "tcp://",
        ] {
            assert!(parse(s).is_err(), "{s} should be rejected");
        }
        let e = parse("fd00::1:5555").unwrap_err();
        assert_eq!(e.to_string(), "invalid --remote-hostengine-info 'fd00::1:5555': an IPv6 address needs brackets, e.g. [::1]:5555");
    }

    #[test]
    fn hostname_follows_dcgm_exporter_4_8_3() {
        assert_eq!(
            remote_hostname("gpu-node:5555").as_deref(),
            Some("gpu-node")
        );
        assert_eq!(
            remote_hostname("10.0.0.7:5555").as_deref(),
            Some("10.0.0.7")
        );
        assert_eq!(
            remote_hostname("[fd00::1]:5555").as_deref(),
            Some("fd00::1")
        );
        assert_eq!(
            remote_hostname("tcp://gpu-node:5555").as_deref(),
            Some("gpu-node")
        );
        assert_eq!(remote_hostname("localhost:5555"), None);
        assert_eq!(remote_hostname("127.0.0.1:5555"), None);
        assert_eq!(remote_hostname("[::1]:5555"), None);
        assert_eq!(remote_hostname("unix:///tmp/nv-hostengine"), None);
        assert_eq!(remote_hostname("vsock://3:5555"), None);
    }
}
