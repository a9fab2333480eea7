//! `--enable-pprof`: CPU profiles at `/debug/pprof/profile?seconds=N` (default 30, at most 300), as
//! Go's net/http/pprof serves them: the pprof protobuf (profile.proto), gzip-compressed, which
//! `go tool pprof` and `pprof` read; `/debug/pprof/` lists it. It sits behind the same TLS and basic
//! auth as /metrics. Without a web config it is served to anyone who reaches the port, as dcgm-exporter
//! does ([`Pprof::Open`], with a warning at start); with one, only while that config has TLS or basic
//! auth ([`Pprof::WhenProtected`]: a reload that removes both switches profiles off). The other
//! endpoints dcgm-exporter's Go runtime serves (heap, goroutine, trace, ...) are answered 404 with the
//! reason ([`NOT_SERVED`]).
//!
//! The sampler is the `pprof` crate's (SIGPROF at [`FREQUENCY`] Hz, stacks unwound and symbolised in
//! this process); it runs only while a profile is being taken, one at a time, on a blocking thread, so
//! nothing samples and nothing is paid when no one asks. Symbolising parses the binary's symbol and line
//! tables into a cache; that cache is cleared once the profile is encoded, so its memory goes back
//! instead of staying for the life of the process. The protobuf is written here with prost (the crate's
//! own codec would bring a second prost). Heap profiles are not offered: the system allocator keeps no
//! allocation record to read.

use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::UNIX_EPOCH;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::web::{Pprof, WebSecurity};

/// Samples per second (not 100, to stay out of step with periodic work).
pub const FREQUENCY: i32 = 99;
/// Profile length when `seconds` is not given, and the longest allowed.
pub const DEFAULT_SECONDS: u64 = 30;
pub const MAX_SECONDS: u64 = 300;

/// One profile at a time: SIGPROF and its timer are process-wide.
static RUNNING: AtomicBool = AtomicBool::new(false);

/// The `/debug/pprof/` endpoints dcgm-exporter serves (Go's net/http/pprof) that dcgm-otel does not,
/// and why.
pub const NOT_SERVED: [(&str, &str); 9] = [
    ("heap", "a Go heap profile: the allocator dcgm-otel uses keeps no record of allocations to read"),
    ("allocs", "a Go allocation profile: the allocator dcgm-otel uses keeps no record of allocations to read"),
    ("goroutine", "a Go runtime profile (goroutines); dcgm-otel is not a Go program"),
    ("threadcreate", "a Go runtime profile (thread creation); dcgm-otel is not a Go program"),
    ("block", "a Go runtime profile (blocking on channels and locks); dcgm-otel is not a Go program"),
    ("mutex", "a Go runtime profile (lock contention); dcgm-otel is not a Go program"),
    ("trace", "a Go execution trace; dcgm-otel is not a Go program"),
    ("cmdline", "the command line is not served (read it on the node: /proc/<pid>/cmdline)"),
    ("symbol", "not needed: the CPU profile comes with its functions named"),
];

const INDEX_HTML: &str = "<!DOCTYPE html>\n<html><head><title>/debug/pprof/</title></head><body>\
<h1>/debug/pprof/</h1><ul><li><a href=\"profile?seconds=30\">profile</a>: CPU profile \
(seconds=N, 1 to 300; gzip'd profile.proto for go tool pprof)</li></ul>\
<p>Go runtime profiles (heap, allocs, goroutine, threadcreate, block, mutex, trace), cmdline and symbol are \
not served by dcgm-otel.</p></body></html>\n";

/// Answer a `/debug/pprof/...` request, or `None` for a path that is not one (or with profiles off).
/// Credentials were checked before.
pub async fn route(
    mode: Pprof,
    web: &WebSecurity,
    req: &Request<Incoming>,
) -> Option<Response<Full<Bytes>>> {
    let name = req.uri().path().strip_prefix("/debug/pprof")?;
    if mode == Pprof::Off || (!name.is_empty() && !name.starts_with('/')) {
        return None;
    }
    if mode == Pprof::WhenProtected && !web.protected() {
        return Some(text(
            StatusCode::NOT_FOUND,
            "404 CPU profiles are switched off: the web config has neither TLS nor basic auth \
             (--enable-pprof with --web-config-file needs one of them)\n"
                .into(),
        ));
    }
    let name = name.trim_start_matches('/');
    if req.method() != Method::GET {
        return None;
    }
    if name.is_empty() {
        let mut r = Response::new(Full::new(Bytes::from_static(INDEX_HTML.as_bytes())));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        return Some(r);
    }
    if name == "profile" {
        return Some(profile(req.uri().query()).await);
    }
    let (_, why) = NOT_SERVED.iter().find(|(n, _)| *n == name)?;
    Some(text(
        StatusCode::NOT_FOUND,
        format!(
            "404 /debug/pprof/{name} is not served by dcgm-otel: {why}. CPU profiles: /debug/pprof/profile?seconds=N\n"
        ),
    ))
}

/// Answer `GET /debug/pprof/profile?<query>`.
pub async fn profile(query: Option<&str>) -> Response<Full<Bytes>> {
    let seconds = match seconds(query) {
        Ok(s) => s,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    if RUNNING
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return text(
            StatusCode::CONFLICT,
            "a CPU profile is already being taken; retry when it is done\n".into(),
        );
    }
    // Released by the sampling thread when it is done, even if the client went away meanwhile (the
    // request future is then dropped, but the sampler runs to its end).
    let taken = tokio::task::spawn_blocking(move || {
        let _release = Release;
        take(seconds)
    })
    .await;
    match taken {
        Ok(Ok(body)) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            h.insert(
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"profile\""),
            );
            r
        }
        Ok(Err(e)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot take a CPU profile: {e}\n"),
        ),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the profiling thread failed: {e}\n"),
        ),
    }
}

/// Lets the next profile start when dropped (also when sampling panicked).
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        RUNNING.store(false, Ordering::Release);
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// `seconds=N` from the query: 1..=MAX_SECONDS, default DEFAULT_SECONDS.
fn seconds(query: Option<&str>) -> Result<u64, String> {
    let given = query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "seconds")
        .map(|(_, v)| v);
    match given {
        None => Ok(DEFAULT_SECONDS),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|s| (1..=MAX_SECONDS).contains(s))
            .ok_or_else(|| {
                format!("seconds '{v}': expected a whole number in 1..={MAX_SECONDS}\n")
            }),
    }
}

/// Sample for `seconds`, then encode and compress the profile.
fn take(seconds: u64) -> Result<Vec<u8>, String> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY)
        // Unwinding through these from a signal handler is unsafe or useless.
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| e.to_string())?;
    std::thread::sleep(std::time::Duration::from_secs(seconds));
    let report = guard.report().build();
    drop(guard);
    let encoded = report.map(|r| encode(&r));
    // Symbolising filled the symbolizer's cache (the binary's symbol and line tables, mapped and
    // parsed): let it go now rather than keep it for the life of the process, and hand the pages its
    // many small allocations leave free back to the system.
    backtrace::clear_symbol_cache();
    let mut out = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let body = out
        .write_all(&encoded.map_err(|e| e.to_string())?)
        .and_then(|()| out.finish())
        .map_err(|e| e.to_string());
    super::allocator::release_free_memory();
    body
}

/// profile.proto (github.com/google/pprof/proto/profile.proto), the parts written here.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// The string table: index 0 is "", every string once.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut s = Strings::default();
        s.id("");
        s
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The report as a pprof Profile: two values per sample (samples/count and cpu/nanoseconds), one
/// location per distinct (function, file, line), one function per distinct (name, file), each stack
/// from its leaf, and the thread as a label.
fn encode(report: &pprof::Report) -> Vec<u8> {
    use prost::Message;
    let mut strings = Strings::new();
    let mut functions: HashMap<(i64, i64), u64> = HashMap::new();
    let mut locations: HashMap<(u64, i64), u64> = HashMap::new();
    let mut profile = proto::Profile::default();
    let period = 1_000_000_000 / i64::from(FREQUENCY);
    let thread_key = strings.id("thread");
    for (frames, count) in &report.data {
        let mut location_id = Vec::new();
        for symbol in frames.frames.iter().flatten() {
            let name = strings.id(&symbol.name());
            let system_name = strings.id(&symbol.sys_name());
            let file = strings.id(&symbol.filename());
            let line = i64::from(symbol.lineno());
            let next_function = profile.function.len() as u64 + 1;
            let function = *functions.entry((name, file)).or_insert_with(|| {
                profile.function.push(proto::Function {
                    id: next_function,
                    name,
                    system_name,
                    filename: file,
                });
                next_function
            });
            let next_location = profile.location.len() as u64 + 1;
            let location = *locations.entry((function, line)).or_insert_with(|| {
                profile.location.push(proto::Location {
                    id: next_location,
                    line: vec![proto::Line {
                        function_id: function,
                        line,
                    }],
                });
                next_location
            });
            location_id.push(location);
        }
        let count = *count as i64;
        profile.sample.push(proto::Sample {
            location_id,
            value: vec![count, count * period],
            label: vec![proto::Label {
                key: thread_key,
                str: strings.id(&frames.thread_name_or_id()),
            }],
        });
    }
    let samples = proto::ValueType {
        r#type: strings.id("samples"),
        unit: strings.id("count"),
    };
    let cpu = proto::ValueType {
        r#type: strings.id("cpu"),
        unit: strings.id("nanoseconds"),
    };
    profile.sample_type = vec![samples, cpu.clone()];
    profile.period_type = Some(cpu);
    profile.period = period;
    profile.time_nanos = report
        .timing
        .start_time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    profile.duration_nanos = report.timing.duration.as_nanos() as i64;
    profile.string_table = strings.table;
    profile.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_from_the_query() {
        assert_eq!(seconds(None), Ok(30));
        assert_eq!(seconds(Some("seconds=5")), Ok(5));
        assert_eq!(seconds(Some("debug=1&seconds=300")), Ok(300));
        assert!(seconds(Some("seconds=0")).is_err());
        assert!(seconds(Some("seconds=301")).is_err());
        assert!(seconds(Some("seconds=1s")).is_err());
    }
}
