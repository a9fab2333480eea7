//! Not blind: how many GPUs the node has, against how many DCGM reports.
//!
//! A host engine can answer every call and still report no GPU (it started before the driver, it
//! lost them, the container sees another node's engine). Served as is, the exporter is "up" with no
//! GPU series: the worst kind of outage, silent. So after every discovery the source compares DCGM's
//! GPU count with what the node says it has — the NVIDIA device files (`<dev-root>/nvidia0`,
//! `nvidia1`, ...: `--dev-root`, `/dev` by default) and NVML's device count when libnvidia-ml loads —
//! and with the most GPUs DCGM reported before in this process (a GPU that falls off the bus). When
//! DCGM reports fewer, `/ready` answers 503 with the reason, `dcgm_otel_gpus_missing` says how many,
//! `dcgm_otel_discoveries_missing_gpus_total` counts the discoveries that came up short, and the
//! source discovers again ([`Blind::rediscovery_due`]) until the count is whole. A node without
//! device files and without NVML (an exporter reading a remote host engine from a machine without
//! GPUs) compares with DCGM's own past counts only.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::retry::Backoff;
use crate::source::nvml::client::Nvml;
use crate::telemetry::self_metrics::{Metric, SelfMetrics};

/// Rediscovery while GPUs are missing: every collection at first, doubling to once a minute.
const REDISCOVER_CAP: Duration = Duration::from_secs(60);

/// Where the node's own GPU count comes from.
pub struct NodeDevices {
    /// `--dev-root`: the directory holding `nvidia<N>` device files.
    dev_root: PathBuf,
    /// NVML, when libnvidia-ml loaded.
    nvml: Option<Arc<Nvml>>,
}

impl NodeDevices {
    pub fn new(dev_root: PathBuf, nvml: Option<Arc<Nvml>>) -> NodeDevices {
        NodeDevices { dev_root, nvml }
    }

    /// The node's GPUs: the larger of the device-file count and NVML's count, with what said so.
    pub fn count(&self) -> (usize, String) {
        let files = device_files(&self.dev_root);
        let nvml = self
            .nvml
            .as_ref()
            .and_then(|n| n.sym().device_count().ok())
            .map_or(0, |n| n as usize);
        if nvml > files {
            (nvml, format!("NVML counts {nvml}"))
        } else {
            (
                files,
                format!("{files} NVIDIA device files in {}", self.dev_root.display()),
            )
        }
    }
}

/// `nvidia<digits>` entries of `dir` (0 when it cannot be read).
pub fn device_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                n.strip_prefix("nvidia")
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            })
        })
        .count()
}

/// The comparison's state across discoveries.
pub struct Blind {
    devices: NodeDevices,
    /// Most GPUs DCGM reported in this process.
    most_reported: usize,
    /// What the last discovery reported.
    last_reported: Option<usize>,
    /// Why the source is blind (the `/ready` reason), while it is.
    reason: Option<String>,
    interval: Duration,
    rediscover_at: Option<Instant>,
    short_discoveries: u32,
    missing_metric: Option<Arc<Metric>>,
    short_metric: Option<Arc<Metric>>,
}

impl Blind {
    pub fn new(devices: NodeDevices, interval: Duration) -> Blind {
        Blind {
            devices,
            most_reported: 0,
            last_reported: None,
            reason: None,
            interval,
            rediscover_at: None,
            short_discoveries: 0,
            missing_metric: None,
            short_metric: None,
        }
    }

    /// Publish `dcgm_otel_gpus_missing` and `dcgm_otel_discoveries_missing_gpus_total`.
    pub fn count_in(&mut self, metrics: &SelfMetrics) {
        self.missing_metric = Some(metrics.gauge(
            "dcgm_otel_gpus_missing",
            "GPUs the node has (NVIDIA device files, NVML, or DCGM's own earlier count) that DCGM does not report at its last discovery; /ready is 503 while it is above 0.",
            &[("source", "dcgm")],
        ));
        self.short_metric = Some(metrics.counter(
            "dcgm_otel_discoveries_missing_gpus_total",
            "DCGM discoveries that reported fewer GPUs than the node has (each is retried: every collection, doubling to once a minute).",
            &[("source", "dcgm")],
        ));
    }

    /// The GPU count of the last discovery.
    pub fn last_reported(&self) -> Option<usize> {
        self.last_reported
    }

    /// Why the source is blind, while it is (the `/ready` reason).
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// A discovery found `reported` GPUs: compare, count, log on a change, schedule the next try.
    pub fn discovered(&mut self, reported: usize, now: Instant) {
        let (on_node, said) = self.devices.count();
        let expected = on_node.max(self.most_reported);
        self.most_reported = self.most_reported.max(reported);
        self.last_reported = Some(reported);
        let missing = expected.saturating_sub(reported);
        if let Some(m) = &self.missing_metric {
            m.set(missing as f64);
        }
        if missing == 0 {
            if self.reason.take().is_some() {
                tracing::info!(gpus = reported, "DCGM reports every GPU of the node again");
            }
            self.rediscover_at = None;
            self.short_discoveries = 0;
            return;
        }
        if let Some(m) = &self.short_metric {
            m.inc();
        }
        self.short_discoveries += 1;
        let reason = if on_node >= expected {
            format!(
                "DCGM reports {reported} GPUs but the node has {expected} ({said}); rediscovering"
            )
        } else {
            format!("DCGM reports {reported} GPUs, {expected} before; rediscovering")
        };
        if self.reason.as_deref() != Some(reason.as_str()) {
            tracing::error!(
                reported,
                expected,
                "{reason}: the missing GPUs have no series and /ready answers 503 until DCGM reports them"
            );
        }
        self.reason = Some(reason);
        let backoff = Backoff::new(self.interval, REDISCOVER_CAP.max(self.interval));
        self.rediscover_at = Some(now + backoff.delay(self.short_discoveries));
    }

    /// GPUs were unbound or bound on purpose (DCGM's bind/unbind event): DCGM's earlier count is no
    /// longer what the node should have.
    pub fn forget_earlier_count(&mut self) {
        self.most_reported = 0;
    }

    /// Whether a discovery should be tried again now (GPUs are missing and the time has come), with
    /// half a collect interval of slack so that a poll slightly early still tries.
    pub fn rediscovery_due(&self, now: Instant) -> bool {
        self.rediscover_at
            .is_some_and(|t| now + self.interval / 2 >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev_dir(names: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for n in names {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        dir
    }

    #[test]
    fn only_numbered_nvidia_files_count() {
        let dir = dev_dir(&[
            "nvidia0",
            "nvidia1",
            "nvidia12",
            "nvidiactl",
            "nvidia-uvm",
            "nvidia-caps",
            "nvidia",
            "null",
        ]);
        assert_eq!(device_files(dir.path()), 3);
        assert_eq!(device_files(Path::new("/nonexistent/dev")), 0);
    }

    #[test]
    fn missing_gpus_make_a_reason_and_clear_when_back() {
        let dir = dev_dir(&["nvidia0", "nvidia1"]);
        let metrics = SelfMetrics::new();
        let mut b = Blind::new(
            NodeDevices::new(dir.path().to_path_buf(), None),
            Duration::from_secs(1),
        );
        b.count_in(&metrics);
        let now = Instant::now();
        b.discovered(0, now);
        assert_eq!(
            b.reason(),
            Some(
                format!(
                    "DCGM reports 0 GPUs but the node has 2 (2 NVIDIA device files in {}); rediscovering",
                    dir.path().display()
                )
                .as_str()
            )
        );
        assert!(b.rediscovery_due(now + Duration::from_secs(1)));
        b.discovered(2, now);
        assert_eq!(b.reason(), None);
        assert!(!b.rediscovery_due(now + Duration::from_secs(3600)));
        // Fewer than before, whatever the device files say.
        b.discovered(1, now);
        let reason = b.reason().unwrap_or_default().to_string();
        assert!(
            reason.starts_with("DCGM reports 1 GPUs but the node has 2"),
            "{reason}"
        );
        let mut body = String::new();
        metrics.render(&mut body);
        assert!(
            body.contains("dcgm_otel_gpus_missing{source=\"dcgm\"} 1\n"),
            "{body}"
        );
        assert!(
            body.contains("dcgm_otel_discoveries_missing_gpus_total{source=\"dcgm\"} 2\n"),
            "{body}"
        );
    }

    #[test]
    fn without_devices_only_earlier_counts_compare() {
        let dir = dev_dir(&[]);
        let mut b = Blind::new(
            NodeDevices::new(dir.path().to_path_buf(), None),
            Duration::from_secs(1),
        );
        let now = Instant::now();
        b.discovered(0, now);
        assert_eq!(b.reason(), None, "no device files, no earlier count");
        b.discovered(4, now);
        b.discovered(3, now);
        assert_eq!(
            b.reason(),
            Some("DCGM reports 3 GPUs, 4 before; rediscovering")
        );
        b.forget_earlier_count();
        b.discovered(3, now);
        assert_eq!(b.reason(), None);
        // Rediscovery backs off: 1 s, 2 s, 4 s ... capped at a minute.
        b.discovered(2, now);
        b.discovered(1, now);
        assert!(!b.rediscovery_due(now + Duration::from_millis(1400)));
        assert!(b.rediscovery_due(now + Duration::from_millis(1600)));
    }
}
