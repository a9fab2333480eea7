//! The soak's pass criteria and its report: from the 10 s (1 s) process samples, the 250 ms timeline
//! of self-metrics and the schedule of outages, decide whether each outage was visible and healed in
//! time, whether a DCGM value was served while the source was away, and whether fds, threads and RSS
//! stayed bounded; write `samples.csv` and `report.md`.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::load::LoadStats;
use crate::probe::SelfMetrics;
use crate::{Plan, INTERVAL_S, MAX_PENDING};

/// One process sample.
#[derive(Debug, Clone)]
pub struct Sample {
    pub t: f64,
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
    pub cpu_percent: f64,
    pub pending: f64,
    pub dropped: f64,
    pub request_bytes: f64,
    pub health: u16,
    pub open_connections: f64,
    pub series: u64,
    pub otlp_metrics: u64,
    pub otlp_logs: u64,
    pub log_bytes: u64,
    /// Log records the collector received.
    pub log_records: u64,
    /// The exporter's incident log buffer, its pending log requests, the records it dropped.
    pub log_buffered: f64,
    pub log_pending: f64,
    pub log_dropped: f64,
    /// `dcgm_otel_incidents_total`, all kinds.
    pub incidents: f64,
}

/// One reading of the self-metrics timeline.
#[derive(Debug, Clone, Default)]
pub struct Tick {
    pub t: f64,
    pub answered: bool,
    pub source_up: f64,
    pub collect_errors: f64,
    pub dcgm_series: u64,
    pub pod_series: u64,
    pub kubelet_ok: f64,
    pub kubelet_bad: f64,
    pub api_ok: f64,
    pub api_err: f64,
    pub otlp_trouble: f64,
    /// The same for the log exporter (`dcgm_otel_otlp_log_*`), plus records it dropped.
    pub log_trouble: f64,
    pub pending: f64,
    pub csv_reloads: f64,
    pub web_reloads: f64,
    /// Collections the exporter has attempted (`dcgm_otel_collects_total`).
    pub collects: f64,
}

impl Tick {
    pub fn from(t: f64, m: &SelfMetrics) -> Tick {
        let kubelet_all = m.sum("dcgm_otel_kubelet_requests_total", &[]);
        let kubelet_ok = m.sum("dcgm_otel_kubelet_requests_total", &["result=\"ok\""]);
        Tick {
            t,
            answered: true,
            source_up: m.sum("dcgm_otel_source_up", &[]),
            collect_errors: m.sum("dcgm_otel_collect_errors_total", &[]),
            dcgm_series: m.dcgm_series,
            pod_series: m.pod_series,
            kubelet_ok,
            kubelet_bad: kubelet_all - kubelet_ok,
            api_ok: m.sum(
                "dcgm_otel_kubernetes_api_requests_total",
                &["resource=\"pods\"", "result=\"ok\""],
            ),
            api_err: m.sum(
                "dcgm_otel_kubernetes_api_requests_total",
                &["resource=\"pods\"", "result=\"error\""],
            ),
            otlp_trouble: m.sum("dcgm_otel_otlp_retries_total", &[])
                + m.sum("dcgm_otel_otlp_export_failures_total", &[])
                + m.sum("dcgm_otel_otlp_dropped_exports_total", &[]),
            log_trouble: m.sum("dcgm_otel_otlp_log_retries_total", &[])
                + m.sum("dcgm_otel_otlp_log_export_failures_total", &[])
                + m.sum("dcgm_otel_otlp_log_dropped_exports_total", &[])
                + m.sum("dcgm_otel_otlp_log_records_dropped_total", &[]),
            pending: m.sum("dcgm_otel_otlp_pending_exports", &[]),
            csv_reloads: m.sum("dcgm_otel_config_reloads_total", &["result=\"success\""]),
            web_reloads: m.sum(
                "dcgm_otel_web_config_reloads_total",
                &["result=\"success\""],
            ),
            collects: m.sum("dcgm_otel_collects_total", &[]),
        }
    }

    pub fn unanswered(t: f64) -> Tick {
        Tick {
            t,
            ..Tick::default()
        }
    }
}

/// An outage (peer away from `start` to `end`) or a reload at `start`, and what the soak saw.
#[derive(Debug, Clone)]
pub struct Event {
    pub what: &'static str,
    pub start: f64,
    pub end: Option<f64>,
    pub visible: bool,
    /// Seconds from the peer's return (or the reload) to the first reading showing it healed.
    pub heal_s: Option<f64>,
    /// Collections the exporter attempted between the peer's return and that reading.
    pub heal_collections: Option<u64>,
    /// Where the heal is counted from when not the return (the host engine was away then).
    pub heal_from: Option<f64>,
    pub note: String,
}

impl Event {
    pub fn outage(what: &'static str, start: f64, end: f64) -> Event {
        Event {
            what,
            start,
            end: Some(end),
            visible: false,
            heal_s: None,
            heal_collections: None,
            heal_from: None,
            note: String::new(),
        }
    }

    pub fn reload(what: &'static str, at: f64) -> Event {
        Event {
            what,
            start: at,
            end: None,
            visible: false,
            heal_s: None,
            heal_collections: None,
            heal_from: None,
            note: String::new(),
        }
    }
}

pub struct Inputs<'a> {
    pub plan: &'a Plan,
    pub samples: &'a [Sample],
    pub ticks: &'a [Tick],
    pub events: Vec<Event>,
    pub collector_first_since: &'a dyn Fn(f64) -> Option<f64>,
    pub collector_first_logs_since: &'a dyn Fn(f64) -> Option<f64>,
    pub received: &'a crate::peers::Received,
    pub load: Option<&'a LoadStats>,
    pub hostile: Option<&'a crate::hostile::HostileStats>,
    /// The exporter's self-metrics at the end (what it counted of the hostile clients).
    pub final_metrics: &'a SelfMetrics,
    pub alive: bool,
    pub crashed: Option<String>,
    pub logs: bool,
    pub faults: &'a str,
}

pub struct Report {
    pub failures: Vec<String>,
    pub markdown: String,
}

/// Healed means seen healthy within two collect intervals of the return, plus the 250 ms the
/// timeline may lag.
pub const HEAL_LIMIT_S: f64 = 2.0 * INTERVAL_S + 0.25;
/// The Kubernetes API watch backs off on purpose (every node of a cluster retries against one API
/// server): up to min(30 s, 10 collect intervals, at least 10 s) between attempts (its jitter only
/// shortens a delay), so it is healed within that plus two intervals.
pub const API_HEAL_LIMIT_S: f64 = 10.0 + HEAL_LIMIT_S;

/// The heal limit of an event, in seconds.
pub fn heal_limit(what: &str) -> f64 {
    if what == "Kubernetes API" {
        API_HEAL_LIMIT_S
    } else {
        HEAL_LIMIT_S
    }
}

/// The same limit counted in the exporter's own collections: "two intervals" means two collections
/// when a collection overruns the interval (a debug build of the `large` fleet on a loaded 2-core
/// machine takes longer than 1 s). One more for the collection already under way at the return.
pub fn heal_limit_collections(what: &str) -> u64 {
    (heal_limit(what) / INTERVAL_S).floor() as u64 + 1
}

/// Healed in time: within the limit in seconds, or within as many of the exporter's collections.
fn healed_in_time(e: &Event) -> bool {
    e.heal_s.is_some_and(|h| h <= heal_limit(e.what))
        || e.heal_collections
            .is_some_and(|c| c <= heal_limit_collections(e.what))
}

/// Slack on fds and threads between the baseline (before the load) and the end (after it).
const FD_SLACK: u64 = 8;
const THREAD_SLACK: u64 = 2;

fn last_before(ticks: &[Tick], t: f64) -> Option<&Tick> {
    ticks.iter().rev().find(|k| k.t <= t && k.answered)
}

fn first_after(ticks: &[Tick], t: f64, ok: impl Fn(&Tick) -> bool) -> Option<&Tick> {
    ticks.iter().find(|k| k.t >= t && k.answered && ok(k))
}

fn during(ticks: &[Tick], from: f64, to: f64) -> impl Iterator<Item = &Tick> {
    ticks
        .iter()
        .filter(move |k| k.t >= from && k.t <= to && k.answered)
}

/// When the collector received its first request after a time: any signal, logs alone.
struct Arrivals<'a> {
    any: &'a dyn Fn(f64) -> Option<f64>,
    logs: &'a dyn Fn(f64) -> Option<f64>,
}

/// When the host engine is back if it is away at `t` or goes away before a heal could be seen
/// (its outages follow the wall clock, so one may cover another peer's return).
fn engine_back_after(engine: &[(f64, f64)], t: f64) -> Option<f64> {
    engine
        .iter()
        .find(|&&(from, to)| from <= t + HEAL_LIMIT_S && t < to)
        .map(|&(_, to)| to)
}

fn judge_event(e: &mut Event, ticks: &[Tick], arrivals: &Arrivals<'_>, engine: &[(f64, f64)]) {
    let limit = e.end.unwrap_or(e.start) + 10.0 * HEAL_LIMIT_S + 30.0;
    // Pod labels ride on DCGM series and exports and incident records on what the source reads: when
    // the host engine is away at such a peer's return (or leaves before a heal could be seen), a heal
    // that comes only after the engine's return is counted from there.
    let engine_back = if matches!(
        e.what,
        "kubelet" | "OTLP collector" | "OTLP collector (logs)"
    ) {
        e.end.and_then(|t| engine_back_after(engine, t))
    } else {
        None
    };
    // The heal at `healed_at`, counted from the return or, when it came after it, the engine's return.
    let mut reference = |healed_at: f64, returned: f64| -> f64 {
        match engine_back {
            Some(back) if healed_at >= back => {
                let _ = write!(
                    e.note,
                    "host engine away until {back:.1} s: healed counted from there; "
                );
                e.heal_from = Some(back);
                healed_at - back
            }
            _ => healed_at - returned,
        }
    };
    match (e.what, e.end) {
        ("host engine", Some(end)) => {
            let before = last_before(ticks, e.start).map_or(0.0, |k| k.collect_errors);
            e.visible = during(ticks, e.start, end)
                .any(|k| k.source_up == 0.0 && k.collect_errors > before);
            e.heal_s = first_after(ticks, end, |k| k.source_up == 1.0 && k.dcgm_series > 0)
                .filter(|k| k.t <= limit)
                .map(|k| k.t - end);
        }
        ("kubelet", Some(end)) => {
            let before = last_before(ticks, e.start).map_or(0.0, |k| k.kubelet_bad);
            let visible = during(ticks, e.start, end).any(|k| k.kubelet_bad > before);
            let at_end = last_before(ticks, end).map_or(0.0, |k| k.kubelet_ok);
            let healed = first_after(ticks, end, |k| k.kubelet_ok > at_end && k.pod_series > 0)
                .filter(|k| k.t <= limit)
                .map(|k| k.t);
            e.heal_s = healed.map(|t| reference(t, end));
            e.visible = visible;
        }
        ("Kubernetes API", Some(end)) => {
            let before = last_before(ticks, e.start).map_or(0.0, |k| k.api_err);
            e.visible = during(ticks, e.start, end).any(|k| k.api_err > before);
            let at_end = last_before(ticks, end).map_or(0.0, |k| k.api_ok);
            e.heal_s = first_after(ticks, end, |k| k.api_ok > at_end)
                .filter(|k| k.t <= limit)
                .map(|k| k.t - end);
        }
        ("OTLP collector", Some(end)) => {
            let before = last_before(ticks, e.start).map_or(0.0, |k| k.otlp_trouble);
            let peak = during(ticks, e.start, end)
                .map(|k| k.pending)
                .fold(0.0, f64::max);
            let visible = during(ticks, e.start, end).any(|k| k.otlp_trouble > before);
            let healed = (arrivals.any)(end).filter(|&t| t <= limit);
            e.heal_s = healed.map(|t| reference(t, end));
            e.visible = visible;
            let _ = write!(e.note, "pending peaked at {peak}");
        }
        ("OTLP collector (logs)", Some(end)) => {
            let before = last_before(ticks, e.start).map_or(0.0, |k| k.log_trouble);
            let visible = during(ticks, e.start, end).any(|k| k.log_trouble > before);
            let healed = (arrivals.logs)(end).filter(|&t| t <= limit);
            e.heal_s = healed.map(|t| reference(t, end));
            e.visible = visible;
            let at_end = last_before(ticks, end).map_or(0.0, |k| k.log_trouble);
            let _ = write!(
                e.note,
                "log records dropped or retried during it: {}",
                at_end - before
            );
        }
        ("counters CSV swap", None) => {
            let before = last_before(ticks, e.start).map_or(0.0, |k| k.csv_reloads);
            let seen = first_after(ticks, e.start, |k| k.csv_reloads > before);
            e.visible = seen.is_some();
            e.heal_s = seen.filter(|k| k.t <= limit).map(|k| k.t - e.start);
        }
        ("SIGHUP web config", None) => {
            let before = last_before(ticks, e.start).map_or(0.0, |k| k.web_reloads);
            let seen = first_after(ticks, e.start, |k| k.web_reloads > before);
            e.visible = seen.is_some();
            e.heal_s = seen.filter(|k| k.t <= limit).map(|k| k.t - e.start);
        }
        _ => {}
    }
    // The same heal counted in collections: from the last reading before the return (or reload)
    // to the first reading at or after the heal.
    let heal_from = e.heal_from.or(e.end).unwrap_or(e.start);
    if let (Some(h), Some(before)) = (e.heal_s, last_before(ticks, heal_from)) {
        let healed_at = heal_from + h;
        e.heal_collections = ticks
            .iter()
            .find(|k| k.answered && k.t >= healed_at)
            .map(|k| (k.collects - before.collects).max(0.0) as u64);
    }
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    f64::from(sorted[i]) / 1000.0
}

pub fn judge(mut i: Inputs<'_>) -> Report {
    let mut failures = Vec::new();
    if let Some(c) = &i.crashed {
        // Nothing after a crash means anything: say only that.
        return Report {
            failures: vec![c.clone()],
            markdown: format!("Verdict: **fail**: {c}\n"),
        };
    }
    if !i.alive {
        failures.push("the exporter was not running at the end".into());
    }

    // Outages and reloads.
    let engine: Vec<(f64, f64)> = i
        .events
        .iter()
        .filter(|e| e.what == "host engine")
        .filter_map(|e| e.end.map(|end| (e.start, end)))
        .collect();
    for e in &mut i.events {
        let arrivals = Arrivals {
            any: i.collector_first_since,
            logs: i.collector_first_logs_since,
        };
        judge_event(e, i.ticks, &arrivals, &engine);
        if !e.visible {
            failures.push(format!(
                "{} at t={:.1}s: not visible in the self-metrics",
                e.what, e.start
            ));
        }
        match e.heal_s {
            None => failures.push(format!("{} at t={:.1}s: never healed", e.what, e.start)),
            Some(h) if !healed_in_time(e) => failures.push(format!(
                "{} at t={:.1}s: healed after {h:.2}s and {} collections (limit {:.2}s or {} collections)",
                e.what,
                e.end.unwrap_or(e.start),
                e.heal_collections.map_or("?".into(), |c| c.to_string()),
                heal_limit(e.what),
                heal_limit_collections(e.what)
            )),
            _ => {}
        }
    }

    // No DCGM value while the source is down; none while the host engine is away (after the
    // exporter's next collection noticed: one interval, plus one for the fake's own poll).
    let stale: Vec<f64> = i
        .ticks
        .iter()
        .filter(|k| k.answered && k.source_up == 0.0 && k.dcgm_series > 0)
        .map(|k| k.t)
        .collect();
    if !stale.is_empty() {
        failures.push(format!(
            "{} readings served DCGM series with dcgm_otel_source_up 0 (first at t={:.1}s)",
            stale.len(),
            stale[0]
        ));
    }
    // Both counted as in the heal rule: a reading is late only when it is past the time and past as
    // many of the exporter's own collections.
    let collects_at = |t: f64| last_before(i.ticks, t).map_or(0.0, |k| k.collects);
    for e in i.events.iter().filter(|e| e.what == "host engine") {
        let end = e.end.unwrap_or(e.start);
        let first = collects_at(e.start);
        let served = during(i.ticks, e.start + 2.0 * INTERVAL_S + 0.3, end - 0.3)
            .filter(|k| k.collects >= first + 3.0)
            .filter(|k| k.dcgm_series > 0)
            .count();
        if served > 0 {
            failures.push(format!(
                "host engine away t={:.1}..{end:.1}s: {served} readings still served DCGM series",
                e.start
            ));
        }
    }

    // No stale pod: the last kubelet mapping is kept for KEEP_INTERVALS failed kubelet calls, then
    // dropped. The calls are counted, not seconds: while the host engine is away no collection asks
    // the kubelet. A reading is stale when it still names pods after more failed calls than that (one
    // more for the snapshot being published) and after as many intervals.
    for e in i.events.iter().filter(|e| e.what == "kubelet") {
        let end = e.end.unwrap_or(e.start);
        let keep = f64::from(dcgm_otel::enrich::kubernetes::KEEP_INTERVALS);
        let bad_before = last_before(i.ticks, e.start).map_or(0.0, |k| k.kubelet_bad);
        let served = during(
            i.ticks,
            e.start + keep * INTERVAL_S + 2.0 * INTERVAL_S + 0.3,
            end - 0.3,
        )
        .filter(|k| k.kubelet_bad - bad_before > keep + 1.0)
        .filter(|k| k.pod_series > 0)
        .count();
        if served > 0 {
            failures.push(format!(
                "kubelet away t={:.1}..{end:.1}s: {served} readings still named pods after {keep:.0} failed calls",
                e.start
            ));
        }
    }

    // Resources: baseline before the load, the end after it settled.
    let baseline = i
        .samples
        .iter()
        .rev()
        .find(|s| s.t < i.plan.load_from)
        .cloned();
    let last = i.samples.last().cloned();
    let steady: Vec<u64> = {
        let mut v: Vec<u64> = i
            .samples
            .iter()
            .filter(|s| s.t > i.plan.load_from + 2.0 && s.t < i.plan.collector.0)
            .map(|s| s.rss_kib)
            .collect();
        v.sort_unstable();
        v
    };
    // Steady: the most the process held under the load, the reloads and the other outages, before
    // the collector outage (the one fault that holds memory: the pending requests).
    let steady_kib = steady.last().copied().unwrap_or(0);
    let request_bytes = i
        .samples
        .iter()
        .map(|s| s.request_bytes)
        .fold(0.0, f64::max);
    // The metrics queue: the pending requests and the one in flight. The logs: as many log requests,
    // plus the record buffer at its bound, a record held in memory taken as 4× its encoded size (its
    // attribute strings and vectors are separate allocations).
    let metrics_queue = (MAX_PENDING + 1) as f64 * request_bytes;
    let logs_queue = if i.logs {
        let max_request = i.received.max_log_request.load(Ordering::Relaxed) as f64;
        let records = i.received.log_records.load(Ordering::Relaxed).max(1) as f64;
        let record_bytes = i.received.log_bytes.load(Ordering::Relaxed) as f64 / records;
        (MAX_PENDING + 1) as f64 * max_request
            + dcgm_otel::export::otel::otlp::logs::MAX_PENDING_RECORDS as f64 * 4.0 * record_bytes
    } else {
        0.0
    };
    let queue_kib = ((metrics_queue + logs_queue) / 1024.0) as u64;
    let slack_kib = (steady_kib / 4).max(32 * 1024);
    let bound_kib = steady_kib + queue_kib + slack_kib;
    let max_rss = i.samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    if let (Some(b), Some(l)) = (&baseline, &last) {
        if l.fds > b.fds + FD_SLACK {
            failures.push(format!(
                "open fds grew: {} before the load, {} at the end",
                b.fds, l.fds
            ));
        }
        if l.threads > b.threads + THREAD_SLACK {
            failures.push(format!(
                "threads grew: {} before the load, {} at the end",
                b.threads, l.threads
            ));
        }
    } else {
        failures.push("no baseline or final sample".into());
    }
    if steady_kib == 0 || max_rss > bound_kib {
        failures.push(format!(
            "RSS {max_rss} KiB over its bound {bound_kib} KiB (steady {steady_kib} + queue {queue_kib} + slack {slack_kib})"
        ));
    }
    // Beside the hostile clients, every authenticated scrape and every probe is answered 200.
    if let Some(l) = i.load {
        let scrapes = l.scrapes_failed.load(Ordering::Relaxed);
        let probes = l.probes_failed.load(Ordering::Relaxed);
        if scrapes > 0 || probes > 0 {
            failures.push(format!(
                "{scrapes} authenticated scrapes and {probes} /health probes not answered 200: {:?}",
                l.failures.lock().unwrap()
            ));
        }
    }

    // ---- the report
    let mut md = String::new();
    let p = i.plan;
    let _ = writeln!(
        md,
        "### Soak: {:.0} s, samples every {:.0} s\n",
        p.total, p.sample_every
    );
    let _ = writeln!(
        md,
        "Fake libdcgm `large` (8 H100 × 7 MIG) with an XID storm (24 XIDs a collection) and recurring \
         clock and health events, `DCGM_EXP_*` rows in its counters, `-c 1000`, faults `{}`; OTLP/HTTP metrics{}; \
         {} scrapes/s from 8 clients + {} slowloris connections from t={:.0}s to t={:.0}s.\n",
        i.faults,
        if i.logs {
            " and logs"
        } else {
            " (no --otlp-logs in this build)"
        },
        crate::SCRAPES_PER_S,
        crate::SLOWLORIS,
        p.load_from,
        p.load_until
    );
    let _ = writeln!(
        md,
        "| event | peer away (s) | visible in self-metrics | healed after (s) | collections | limit (s / collections) | note |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for e in &i.events {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {:.2} / {} | {} |",
            e.what,
            e.end
                .map_or(format!("reload at {:.0}", e.start), |end| format!(
                    "{:.1}–{end:.1}",
                    e.start
                )),
            if e.visible { "yes" } else { "**no**" },
            e.heal_s.map_or("**never**".into(), |h| format!("{h:.2}")),
            e.heal_collections.map_or("–".into(), |c| c.to_string()),
            heal_limit(e.what),
            heal_limit_collections(e.what),
            e.note.trim_end_matches("; ")
        );
    }
    if let Some(l) = i.load {
        let mut lat = l.latencies_us.lock().unwrap().clone();
        lat.sort_unstable();
        let _ = writeln!(
            md,
            "\nScrapes: {} answered 200, {} failed; latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms. \
             Slowloris connections closed by the exporter and reopened: {}.",
            l.scrapes_ok.load(Ordering::Relaxed),
            l.scrapes_failed.load(Ordering::Relaxed),
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            percentile(&lat, 1.0),
            l.slowloris_reopened.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            md,
            "\n/health probes (no credentials, twice a second): {} answered 200, {} failed.",
            l.probes_ok.load(Ordering::Relaxed),
            l.probes_failed.load(Ordering::Relaxed),
        );
    }
    if let Some(h) = i.hostile {
        let m = i.final_metrics;
        let _ = writeln!(
            md,
            "\nHostile clients beside them: {} wrong passwords sent hit-and-run from {} addresses (the exporter \
             turned {:.0} away at once with 429, its two bcrypt slots busy; the others' bcrypt ran to its end \
             after the client had gone, {:.0} answered 401 before it did); {} idle connections held from one \
             address, {} opened in all (refused over the per-client cap: {:.0}).",
            h.wrong_sent.load(Ordering::Relaxed),
            crate::hostile::WRONG_CLIENTS,
            m.get("dcgm_otel_http_rejected_connections_total{reason=\"auth_busy\"}"),
            m.get("dcgm_otel_http_auth_failures_total{reason=\"wrong\"}"),
            crate::hostile::IDLE,
            h.idle_opened.load(Ordering::Relaxed),
            m.get("dcgm_otel_http_rejected_connections_total{reason=\"max_client_connections\"}"),
        );
    }
    if let (Some(b), Some(l)) = (&baseline, &last) {
        let _ = writeln!(
            md,
            "\nfds {} → {} (max {}), threads {} → {} (max {}) from before the load to the end. \
             RSS: steady {:.1} MiB, max {:.1} MiB, end {:.1} MiB; bound {:.1} MiB = steady + \
             metrics queue ({MAX_PENDING} pending + 1 in flight) × {:.0} KiB request + logs {:.1} MiB \
             (as many log requests of at most {:.0} KiB, and the 10,000-record buffer at 4 × {:.0} B a record) + \
             max(32 MiB, steady/4). Exporter log: {} bytes. OTLP requests received: {} metrics, {} logs.",
            b.fds,
            l.fds,
            i.samples.iter().map(|s| s.fds).max().unwrap_or(0),
            b.threads,
            l.threads,
            i.samples.iter().map(|s| s.threads).max().unwrap_or(0),
            steady_kib as f64 / 1024.0,
            max_rss as f64 / 1024.0,
            l.rss_kib as f64 / 1024.0,
            bound_kib as f64 / 1024.0,
            request_bytes / 1024.0,
            logs_queue / 1024.0 / 1024.0,
            i.received.max_log_request.load(Ordering::Relaxed) as f64 / 1024.0,
            i.received.log_bytes.load(Ordering::Relaxed) as f64
                / i.received.log_records.load(Ordering::Relaxed).max(1) as f64,
            l.log_bytes,
            l.otlp_metrics,
            l.otlp_logs
        );
        if i.logs {
            let peak = i.samples.iter().map(|s| s.log_buffered).fold(0.0, f64::max);
            let _ = writeln!(
                md,
                "\nIncidents: {} counted by the exporter (`dcgm_otel_incidents_total`); log records: {} \
                 received by the collector, {} dropped and counted \
                 (`dcgm_otel_otlp_log_records_dropped_total`), {} still buffered at the end; the buffer \
                 peaked at {peak} records (bound 10,000).",
                l.incidents,
                l.log_records,
                l.log_dropped,
                l.log_buffered
            );
        }
    }
    let _ = writeln!(
        md,
        "\n| t (s) | RSS (MiB) | fds | threads | CPU % | OTLP pending | OTLP dropped | log buffer | log pending | /ready | open conns | DCGM series |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|");
    let step = (i.samples.len() / 40).max(1);
    for s in i.samples.iter().step_by(step) {
        let _ = writeln!(
            md,
            "| {:.0} | {:.1} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            s.t,
            s.rss_kib as f64 / 1024.0,
            s.fds,
            s.threads,
            s.cpu_percent,
            s.pending + 0.0,
            s.dropped + 0.0,
            s.log_buffered + 0.0,
            s.log_pending + 0.0,
            s.health,
            s.open_connections,
            s.series
        );
    }
    let _ = writeln!(
        md,
        "\nVerdict: {}",
        if failures.is_empty() {
            "**pass**".to_string()
        } else {
            format!("**fail**\n\n- {}", failures.join("\n- "))
        }
    );
    Report {
        failures,
        markdown: md,
    }
}

pub fn write(out: &Path, samples: &[Sample], report: &Report) {
    let mut csv = String::from(
        "t_s,rss_kib,fds,threads,cpu_percent,otlp_pending,otlp_dropped,otlp_request_bytes,health,open_connections,dcgm_series,otlp_metrics_received,otlp_logs_received,log_bytes,log_records_received,log_buffered,log_pending,log_dropped,incidents\n",
    );
    for s in samples {
        let _ = writeln!(
            csv,
            "{:.1},{},{},{},{:.1},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            s.t,
            s.rss_kib,
            s.fds,
            s.threads,
            s.cpu_percent,
            s.pending,
            s.dropped,
            s.request_bytes,
            s.health,
            s.open_connections,
            s.series,
            s.otlp_metrics,
            s.otlp_logs,
            s.log_bytes,
            s.log_records,
            s.log_buffered,
            s.log_pending,
            s.log_dropped,
            s.incidents
        );
    }
    std::fs::write(out.join("samples.csv"), csv).unwrap();
    std::fs::write(out.join("report.md"), &report.markdown).unwrap();
}

/// The 250 ms self-metrics timeline (`timeline.csv`), for looking into a failed run.
pub fn write_timeline(out: &Path, ticks: &[Tick]) {
    let mut csv = String::from(
        "t_s,answered,source_up,collect_errors,dcgm_series,pod_series,kubelet_ok,kubelet_bad,api_ok,api_err,otlp_trouble,otlp_pending,csv_reloads,web_reloads\n",
    );
    for k in ticks {
        let _ = writeln!(
            csv,
            "{:.2},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            k.t,
            u8::from(k.answered),
            k.source_up,
            k.collect_errors,
            k.dcgm_series,
            k.pod_series,
            k.kubelet_ok,
            k.kubelet_bad,
            k.api_ok,
            k.api_err,
            k.otlp_trouble,
            k.pending,
            k.csv_reloads,
            k.web_reloads
        );
    }
    std::fs::write(out.join("timeline.csv"), csv).unwrap();
}
