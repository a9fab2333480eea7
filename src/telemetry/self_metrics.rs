//! The exporter's own metrics (`dcgm_otel_*`): collection time and health, absent values per field,
//! errors, export results. A tiny registry: any module registers the series it owns once, updates them
//! with atomics, and the Prometheus renderer appends them to each rendered body. `--no-self-metrics`
//! leaves them out of /metrics (they are still counted).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::exposition::{escape_label_value, write_f64};
use crate::lock::LockExt;

/// Prometheus type of a self-metric family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One series: a float stored as bits, updated lock-free.
#[derive(Debug, Default)]
pub struct Metric(AtomicU64);

impl Metric {
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
    pub fn set(&self, v: f64) {
        self.0.store(v.to_bits(), Ordering::Relaxed);
    }
    pub fn add(&self, v: f64) {
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(cur) + v).to_bits();
            match self
                .0
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
    pub fn inc(&self) {
        self.add(1.0);
    }
}

struct Family {
    name: String,
    help: String,
    kind: Kind,
    series: Vec<(String, Arc<Metric>)>,
}

/// The registry of self-metrics.
#[derive(Default)]
pub struct SelfMetrics {
    families: Mutex<Vec<Family>>,
}

impl SelfMetrics {
    /// `dcgm_otel_build_info`: always 1, labelled with the version and the commit.
    pub fn build_info(&self) {
        self.gauge(
            "dcgm_otel_build_info",
            "Build of the running exporter; always 1.",
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("commit", env!("DCGM_OTEL_GIT_COMMIT")),
            ],
        )
        .set(1.0);
    }

    pub fn new() -> Arc<SelfMetrics> {
        Arc::new(SelfMetrics::default())
    }

    /// Get or create the series `name{labels}`. Registering the same series twice returns the same handle.
    pub fn register(
        &self,
        name: &str,
        help: &str,
        kind: Kind,
        labels: &[(&str, &str)],
    ) -> Arc<Metric> {
        let mut label_text = String::new();
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                label_text.push(',');
            }
            label_text.push_str(k);
            label_text.push_str("=\"");
            escape_label_value(v, &mut label_text);
            label_text.push('"');
        }
        let mut families = self.families.lock_unpoisoned();
        let idx = match families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                families.push(Family {
                    name: name.to_string(),
                    help: help.to_string(),
                    kind,
                    series: Vec::new(),
                });
                families.sort_by(|a, b| a.name.cmp(&b.name));
                families.iter().position(|f| f.name == name).unwrap_or(0)
            }
        };
        let fam = &mut families[idx];
        if let Some((_, m)) = fam.series.iter().find(|(l, _)| *l == label_text) {
            return m.clone();
        }
        let m = Arc::new(Metric::default());
        fam.series.push((label_text, m.clone()));
        m
    }

    pub fn counter(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Arc<Metric> {
        self.register(name, help, Kind::Counter, labels)
    }

    pub fn gauge(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Arc<Metric> {
        self.register(name, help, Kind::Gauge, labels)
    }

    /// A gauge that is the only series of its family: the family's other series are dropped (a state
    /// whose labels change, e.g. `dcgm_otel_profiling_available{reason}`).
    pub fn sole_gauge(&self, name: &str, help: &str, labels: &[(&str, &str)]) -> Arc<Metric> {
        self.clear(name);
        self.gauge(name, help, labels)
    }

    /// Drop every series of family `name` (the family is no longer rendered).
    pub fn clear(&self, name: &str) {
        let mut families = self.families.lock_unpoisoned();
        if let Some(f) = families.iter_mut().find(|f| f.name == name) {
            f.series.clear();
        }
    }

    /// Append every family in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let families = self.families.lock_unpoisoned();
        for f in families.iter().filter(|f| !f.series.is_empty()) {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(
                out,
                "# TYPE {} {}",
                f.name,
                match f.kind {
                    Kind::Counter => "counter",
                    Kind::Gauge => "gauge",
                }
            );
            for (labels, m) in &f.series {
                out.push_str(&f.name);
                if !labels.is_empty() {
                    out.push('{');
                    out.push_str(labels);
                    out.push('}');
                }
                out.push(' ');
                write_f64(out, m.get());
                out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_sorted_families() {
        let r = SelfMetrics::default();
        r.counter("dcgm_otel_b_total", "B.", &[("field", "X\"y")])
            .add(2.0);
        r.gauge("dcgm_otel_a", "A.", &[]).set(1.5);
        let again = r.counter("dcgm_otel_b_total", "B.", &[("field", "X\"y")]);
        again.inc();
        let mut s = String::new();
        r.render(&mut s);
        assert_eq!(
            s,
            "# HELP dcgm_otel_a A.\n# TYPE dcgm_otel_a gauge\ndcgm_otel_a 1.5\n\
             # HELP dcgm_otel_b_total B.\n# TYPE dcgm_otel_b_total counter\ndcgm_otel_b_total{field=\"X\\\"y\"} 3\n"
        );
    }

    #[test]
    fn a_sole_gauge_replaces_its_family_and_a_cleared_family_is_not_rendered() {
        let r = SelfMetrics::default();
        r.sole_gauge("dcgm_otel_s", "S.", &[("reason", "a")])
            .set(0.0);
        r.sole_gauge("dcgm_otel_s", "S.", &[]).set(1.0);
        let mut s = String::new();
        r.render(&mut s);
        assert_eq!(
            s,
            "# HELP dcgm_otel_s S.\n# TYPE dcgm_otel_s gauge\ndcgm_otel_s 1\n"
        );
        r.clear("dcgm_otel_s");
        s.clear();
        r.render(&mut s);
        assert_eq!(s, "");
    }
}
