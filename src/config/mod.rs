//! Configuration: flags and environment ([`cli`]), the counters CSV ([`counters`]) and device selection
//! ([`devices`]), resolved once at start-up into a [`Config`]. Any bad input stops start-up with one
//! line naming the input and position, and exit code 2.

pub mod cli;
pub mod counters;
pub mod devices;
pub mod duration;
pub mod web_config;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

pub use cli::{Cli, HostnameLabel, LogFormat};
use counters::CounterSet;

/// A start-up error in the configuration (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Csv(#[from] counters::CsvError),
    #[error("invalid --address '{input}': {message}")]
    Address { input: String, message: String },
    #[error("{0}")]
    Other(String),
}

/// Where the counters come from.
pub fn load_counters(cli: &Cli, explicitly_set: bool) -> Result<CounterSet, ConfigError> {
    let path = cli.collectors.as_path();
    if !explicitly_set && path == Path::new(cli::DEFAULT_COLLECTORS) && !path.exists() {
        return Ok(counters::parse(
            counters::DEFAULT_COUNTERS_CSV,
            "built-in default counters",
        )?);
    }
    Ok(counters::load_file(path)?)
}

/// Resolve a Go-style listen address (`:9400`, `host:9400`, `[::]:9400`) into socket addresses to try.
pub fn listen_addresses(input: &str) -> Result<Vec<SocketAddr>, ConfigError> {
    let bad = |message: &str| ConfigError::Address {
        input: input.to_string(),
        message: message.to_string(),
    };
    if let Some(port) = input.strip_prefix(':').filter(|p| !p.contains(':')) {
        let port: u16 = port
            .parse()
            .map_err(|_| bad("port is not a number in 0..65535"))?;
        // All interfaces: IPv6 any (dual stack on Linux), then IPv4 any as a fallback.
        return Ok(vec![
            SocketAddr::from(([0u16; 8], port)),
            SocketAddr::from(([0u8; 4], port)),
        ]);
    }
    if let Ok(addr) = input.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let (host, port) = input
        .rsplit_once(':')
        .ok_or_else(|| bad("expected HOST:PORT, :PORT or [IPv6]:PORT"))?;
    if host.contains(':') && !host.starts_with('[') {
        return Err(bad("an IPv6 address needs brackets, e.g. [::1]:9400"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad("port is not a number in 0..65535"))?;
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| bad(&format!("cannot resolve host: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(bad("host resolves to no address"));
    }
    Ok(addrs)
}

/// The local host name: `NODE_NAME` when set (Kubernetes), else the kernel's host name.
pub fn local_hostname() -> String {
    match std::env::var("NODE_NAME") {
        Ok(n) if !n.trim().is_empty() => n.trim().to_string(),
        _ => gethostname::gethostname().to_string_lossy().into_owned(),
    }
}

/// Labels and identity choices shared by all exporters.
#[derive(Debug, Clone)]
pub struct LabelStyle {
    pub use_old_namespace: bool,
    pub replace_blanks_in_model_name: bool,
    pub hostname_label: HostnameLabel,
}

impl LabelStyle {
    pub fn from_cli(cli: &Cli) -> Self {
        LabelStyle {
            use_old_namespace: cli.use_old_namespace,
            replace_blanks_in_model_name: cli.replace_blanks_in_model_name,
            hostname_label: cli.hostname_label,
        }
    }

    /// The model name as it is written in labels.
    pub fn model_name(&self, model: &str) -> String {
        if self.replace_blanks_in_model_name {
            model.split_whitespace().collect::<Vec<_>>().join("-")
        } else {
            model.to_string()
        }
    }
}

/// Collect interval as a duration.
pub fn collect_interval(cli: &Cli) -> Duration {
    Duration::from_millis(cli.collect_interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_address_forms() {
        assert_eq!(listen_addresses(":9400").unwrap().len(), 2);
        assert_eq!(
            listen_addresses("127.0.0.1:9401").unwrap(),
            vec!["127.0.0.1:9401".parse().unwrap()]
        );
        assert_eq!(
            listen_addresses("[::1]:9400").unwrap(),
            vec!["[::1]:9400".parse().unwrap()]
        );
        assert!(listen_addresses("::1:9400").is_err());
        assert!(listen_addresses(":x").is_err());
        assert!(listen_addresses("9400").is_err());
    }
}
