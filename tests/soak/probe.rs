//! What the soak reads from the exporter: its process in `/proc/<pid>/` (RSS, open fds, threads, CPU
//! time) and its own `/metrics` and `/ready` (with the soak's basic-auth credentials), parsed into the
//! few self-metrics the verdict needs.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One reading of the process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Proc {
    pub rss_kib: u64,
    pub threads: u64,
    pub fds: u64,
    /// utime + stime, seconds.
    pub cpu_s: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const TICKS: f64 = 100.0;

pub fn proc(pid: u32) -> Option<Proc> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: f64 = rest.get(11)?.parse().ok()?;
    let stime: f64 = rest.get(12)?.parse().ok()?;
    Some(Proc {
        rss_kib: field("VmRSS:")?,
        threads: field("Threads:")?,
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64,
        cpu_s: (utime + stime) / TICKS,
    })
}

/// GET `path` with the soak's credentials; (status, body). `None` when the exporter does not answer at
/// all.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    get_as(port, path, Some(crate::AUTHORIZATION))
}

/// GET `path` with `authorization` (none: as a kubelet probe asks).
pub fn get_as(port: u16, path: &str, authorization: Option<&str>) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: soak-probe\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((status, body))
}

fn dechunk(mut b: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = b.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        b = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The self-metrics of one /metrics body: `name{labels}` → value (only `dcgm_otel_*` lines), and how
/// many DCGM series it holds.
#[derive(Debug, Default, Clone)]
pub struct SelfMetrics {
    pub values: BTreeMap<String, f64>,
    pub dcgm_series: u64,
    /// DCGM series carrying a `pod=` label.
    pub pod_series: u64,
}

impl SelfMetrics {
    pub fn parse(body: &str) -> SelfMetrics {
        let mut m = SelfMetrics::default();
        for line in body.lines() {
            if line.starts_with("DCGM_FI_") {
                m.dcgm_series += 1;
                if line.contains(",pod=\"") || line.contains("{pod=\"") {
                    m.pod_series += 1;
                }
            } else if line.starts_with("dcgm_otel_") {
                if let Some((series, value)) = line.rsplit_once(' ') {
                    if let Ok(v) = value.parse::<f64>() {
                        m.values.insert(series.to_string(), v);
                    }
                }
            }
        }
        m
    }

    /// The value of a series written exactly (`name` or `name{labels}`), 0 when absent.
    pub fn get(&self, series: &str) -> f64 {
        self.values.get(series).copied().unwrap_or(0.0)
    }

    /// The sum over every series of a family whose labels contain all of `having`.
    pub fn sum(&self, family: &str, having: &[&str]) -> f64 {
        self.values
            .iter()
            .filter(|(k, _)| {
                (k.as_str() == family || k.starts_with(&format!("{family}{{")))
                    && having.iter().all(|h| k.contains(h))
            })
            .map(|(_, v)| v)
            .sum()
    }
}
