//! `-m namespace:name` / `DCGM_EXPORTER_CONFIGMAP_DATA`: the counters CSV from the `metrics` key of a
//! ConfigMap, read through the Kubernetes API client of `kubernetes_api` (in-cluster service
//! account or `KUBECONFIG`), as dcgm-exporter reads it. At start one GET must find the ConfigMap, the key
//! and a valid CSV, else the exporter does not start (exit 2, one line). Then a list + watch of that one
//! ConfigMap (field selector `metadata.name`) keeps its latest `metrics` text; [`ConfigMapFollower`] hands
//! a changed text to the counters reloader, which parses it like a changed file: a bad update keeps the
//! running set (logged, counted in the reload failures). A ConfigMap that disappears or loses the key at
//! run time also keeps the running set.

use std::sync::Arc;
use std::time::Duration;

use super::{parse, CounterSet};
use crate::kubernetes_api::objects::ConfigMap;
use crate::kubernetes_api::{self as api, ApiConfig, Watcher};
use crate::telemetry::self_metrics::SelfMetrics;

/// The ConfigMap key holding the CSV (dcgm-exporter's).
pub const KEY: &str = "metrics";

/// How long the start-up GET may take.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Which ConfigMap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigMapRef {
    pub namespace: String,
    pub name: String,
}

impl ConfigMapRef {
    /// `namespace:name`; `None` for dcgm-exporter's "none" and the empty string (no ConfigMap).
    pub fn parse(spec: &str) -> Result<Option<ConfigMapRef>, String> {
        let spec = spec.trim();
        if spec.is_empty() || spec == "none" {
            return Ok(None);
        }
        let valid = |s: &str| {
            !s.is_empty()
                && s.len() <= 253
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        };
        match spec.split_once(':') {
            Some((ns, name)) if valid(ns) && valid(name) => Ok(Some(ConfigMapRef {
                namespace: ns.to_string(),
                name: name.to_string(),
            })),
            _ => Err(format!(
                "invalid value '{spec}' for '--configmap-data': expected NAMESPACE:NAME of a ConfigMap (lowercase DNS names), or none"
            )),
        }
    }

    /// Where the rows came from, for the counters' origin and logs.
    pub fn origin(&self) -> String {
        format!("ConfigMap {}/{} key {KEY}", self.namespace, self.name)
    }
}

/// The `metrics` text of a ConfigMap object, if it has one.
fn metrics_of(object: ConfigMap) -> Option<String> {
    object.data.and_then(|d| d.metrics)
}

/// Read the counters from the ConfigMap now: absent, without the key, or not a valid CSV is an error
/// naming the ConfigMap (and the line and column for the CSV). Also returns the text, which the follower
/// compares updates with.
pub fn load(cfg: &ApiConfig, r: &ConfigMapRef) -> Result<(CounterSet, String), String> {
    let path = format!("/api/v1/namespaces/{}/configmaps/{}", r.namespace, r.name);
    let object: ConfigMap = api::get_object(cfg, &path, START_TIMEOUT)
        .map_err(|e| {
            format!(
                "cannot read {} from the Kubernetes API ({}): {e}",
                r.origin(),
                cfg.origin
            )
        })?
        .ok_or_else(|| {
            format!(
                "ConfigMap {}/{} (--configmap-data) does not exist ({})",
                r.namespace, r.name, cfg.server
            )
        })?;
    let text = metrics_of(object).ok_or_else(|| {
        format!(
            "ConfigMap {}/{} (--configmap-data) has no key '{KEY}' with the counters CSV",
            r.namespace, r.name
        )
    })?;
    let set = parse(&text, &r.origin()).map_err(|e| e.to_string())?;
    Ok((set, text))
}

/// The ConfigMap followed through a list + watch: its latest `metrics` text.
pub struct ConfigMapFollower {
    r: ConfigMapRef,
    watcher: Watcher<Option<String>>,
    /// The text of the running set (or of the last update reported).
    last: String,
}

impl std::fmt::Debug for ConfigMapFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapFollower")
            .field("r", &self.r)
            .finish()
    }
}

impl ConfigMapFollower {
    /// Start watching `r`; `text` is what [`load`] read.
    pub fn start(
        cfg: &ApiConfig,
        r: ConfigMapRef,
        text: String,
        interval: Duration,
        registry: &SelfMetrics,
    ) -> Result<ConfigMapFollower, String> {
        let resource = api::Resource {
            name: "configmaps",
            path: format!("/api/v1/namespaces/{}/configmaps", r.namespace),
            field_selector: Some(format!("metadata.name={}", r.name)),
            parse: |object: ConfigMap| {
                let name = object.metadata.name.clone()?;
                Some((name, metrics_of(object)))
            },
            weight: |text: &Option<String>| text.as_ref().map_or(0, String::len),
            node: None,
            stale_after: api::stale_after(interval),
            watch_deadline: api::WATCH_DEADLINE,
        };
        let watcher = api::watch::start(cfg, resource, registry)?;
        Ok(ConfigMapFollower {
            r,
            watcher,
            last: text,
        })
    }

    pub fn origin(&self) -> String {
        self.r.origin()
    }

    /// The new text when the ConfigMap's `metrics` changed since the last call (or start); nothing
    /// while it is unchanged, absent, without the key or the API is unreachable.
    pub fn changed(&mut self) -> Option<String> {
        let current: Arc<Option<String>> = self.watcher.cache.get(&self.r.name)?;
        let text = current.as_ref().as_ref()?;
        if *text == self.last {
            return None;
        }
        self.last = text.clone();
        Some(text.clone())
    }

    /// The text last seen (SIGHUP parses it again).
    pub fn current(&self) -> &str {
        &self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_and_name() {
        assert_eq!(
            ConfigMapRef::parse("gpu-monitoring:exporter-metrics-config-map"),
            Ok(Some(ConfigMapRef {
                namespace: "gpu-monitoring".into(),
                name: "exporter-metrics-config-map".into()
            }))
        );
        assert_eq!(ConfigMapRef::parse("none"), Ok(None));
        assert_eq!(ConfigMapRef::parse(""), Ok(None));
        for bad in ["default", "default:", ":name", "Default:x", "a:b:c"] {
            assert!(ConfigMapRef::parse(bad).is_err(), "{bad}");
        }
    }
}
