//! The settings resolved from flags and variables as a user gives them: precedence, paths, schemes,
//! and the error naming the flag or variable of each bad value.

use super::*;
use clap::Parser;

#[derive(Parser)]
struct Only {
    #[command(flatten)]
    otlp: OtlpArgs,
}

fn cli(args: &[&str]) -> OtlpArgs {
    let mut v = vec!["dcgm-otel"];
    v.extend_from_slice(args);
    Only::try_parse_from(v).unwrap().otlp
}

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

const C: Duration = Duration::from_millis(1000);

/// Issue 35: `Debug` of the settings printed the headers, which carry API keys.
#[test]
fn debug_never_shows_a_header_value() {
    let args = cli(&["--otlp", "--otlp-headers", "authorization=Bearer%20s3cr3t"]);
    let text = format!("{args:?}");
    assert!(!text.contains("s3cr3t"), "{text}");
    let c = resolve(&args, C, &env_of(&[])).unwrap().unwrap();
    let text = format!("{c:?}");
    assert!(
        !text.contains("s3cr3t") && text.contains("authorization=<redacted>"),
        "{text}"
    );
}

#[test]
fn off_unless_enabled_or_endpoint_set() {
    assert!(resolve(&cli(&[]), C, &env_of(&[])).unwrap().is_none());
    let c = resolve(&cli(&["--otlp"]), C, &env_of(&[]))
        .unwrap()
        .unwrap();
    assert_eq!(c.endpoint, "http://localhost:4317");
    assert_eq!(c.protocol, Protocol::Grpc);
    assert_eq!(c.interval, C);
    let c = resolve(
        &cli(&["--otlp", "--otlp-protocol", "http/protobuf"]),
        C,
        &env_of(&[]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(c.endpoint, "http://localhost:4318/v1/metrics");
}

#[test]
fn env_precedence_and_http_paths() {
    let env = env_of(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318/"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b,X-Tenant=t1"),
        ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2500"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "100"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "5000"),
        ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta"),
    ]);
    let c = resolve(&cli(&[]), C, &env).unwrap().unwrap();
    assert_eq!(c.endpoint, "http://generic:4318/v1/metrics");
    assert_eq!(
        c.headers,
        vec![
            ("api-key".into(), "a b".into()),
            ("x-tenant".into(), "t1".into())
        ]
    );
    assert_eq!(c.timeout, Duration::from_millis(2500));
    assert!(c.gzip);
    assert_eq!(c.interval, Duration::from_secs(5));
    assert_eq!(c.temporality, Temporality::Delta);
    let env = env_of(&[
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "https://collector:9999/custom/path",
        ),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
    ]);
    let c = resolve(&cli(&[]), C, &env).unwrap().unwrap();
    assert_eq!(c.endpoint, "https://collector:9999/custom/path");
    assert!(c.is_tls());
    let c = resolve(
        &cli(&[
            "--otlp-endpoint",
            "http://flag:1234",
            "--otlp-protocol",
            "grpc",
        ]),
        C,
        &env,
    )
    .unwrap()
    .unwrap();
    assert_eq!(c.endpoint, "http://flag:1234");
    assert_eq!(c.protocol, Protocol::Grpc);
}

#[test]
fn the_flag_is_a_base_url_like_the_generic_variable() {
    let http = |endpoint: &str| {
        resolve(
            &cli(&[
                "--otlp-endpoint",
                endpoint,
                "--otlp-protocol",
                "http/protobuf",
            ]),
            C,
            &env_of(&[]),
        )
    };
    let c = http("http://h:4318/prefix/").unwrap().unwrap();
    assert_eq!(c.endpoint, "http://h:4318/prefix/v1/metrics");
    let e = http("http://h:4318/v1/metrics").unwrap_err();
    assert_eq!(
        e.to_string(),
        "--otlp-endpoint: 'http://h:4318/v1/metrics': a base URL, to which /v1/metrics is appended; \
         it already ends in /v1/metrics: give the base (e.g. http://h:4318) or set \
         OTEL_EXPORTER_OTLP_METRICS_ENDPOINT to the full URL"
    );
    // The signal variable is a full URL, used as it is.
    let c = resolve(
        &cli(&["--otlp-protocol", "http/protobuf"]),
        C,
        &env_of(&[(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://h:4318/v1/metrics",
        )]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(c.endpoint, "http://h:4318/v1/metrics");
    for no_host in ["http://:4317", "http://[]:4317"] {
        let e = resolve(&cli(&["--otlp-endpoint", no_host]), C, &env_of(&[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("--otlp-endpoint: '{no_host}': the URL has no host")
        );
    }
}

#[test]
fn bad_values_name_their_source() {
    let e = resolve(
        &cli(&[]),
        C,
        &env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ]),
    )
    .unwrap_err();
    assert_eq!(e.source_name, "OTEL_EXPORTER_OTLP_ENDPOINT");
    let e = resolve(
        &cli(&[]),
        C,
        &env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
            ("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "yes"),
        ]),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "OTEL_EXPORTER_OTLP_METRICS_INSECURE: 'yes' is not true or false"
    );
    let e = resolve(
        &cli(&["--otlp", "--otlp-protocol", "http/json"]),
        C,
        &env_of(&[]),
    )
    .unwrap_err();
    assert_eq!(e.source_name, "--otlp-protocol");
    let e = resolve(
        &cli(&["--otlp"]),
        C,
        &env_of(&[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")]),
    )
    .unwrap_err();
    assert_eq!(e.source_name, "OTEL_EXPORTER_OTLP_HEADERS");
    let e = resolve(
        &cli(&["--otlp", "--otlp-certificate", "/nonexistent/ca.pem"]),
        C,
        &env_of(&[]),
    )
    .unwrap_err();
    assert_eq!(e.source_name, "--otlp-certificate");
    let e = resolve(
        &cli(&["--otlp"]),
        C,
        &env_of(&[("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/x.pem")]),
    )
    .unwrap_err();
    assert_eq!(e.source_name, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    let e = resolve(
        &cli(&["--otlp", "--otlp-compression", "zstd"]),
        C,
        &env_of(&[]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("zstd"));
}

fn logs(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> OtlpConfig {
    resolve_signal(&cli(args), Signal::Logs, C, env)
        .unwrap()
        .unwrap()
}

#[test]
fn each_signal_reads_its_own_variables_before_the_generic_ones() {
    let env = env_of(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318/base"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "tenant=generic"),
        ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "tenant=logs"),
        ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2500"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "700"),
        ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gzip"),
    ]);
    let m = resolve(&cli(&[]), C, &env).unwrap().unwrap();
    let l = logs(&[], &env);
    assert_eq!(m.signal, Signal::Metrics);
    assert_eq!(l.signal, Signal::Logs);
    // The generic endpoint is a base URL: each signal appends its own path.
    assert_eq!(m.endpoint, "http://generic:4318/base/v1/metrics");
    assert_eq!(l.endpoint, "http://generic:4318/base/v1/logs");
    assert_eq!(m.headers, vec![("tenant".into(), "generic".into())]);
    assert_eq!(l.headers, vec![("tenant".into(), "logs".into())]);
    assert_eq!(m.timeout, Duration::from_millis(2500));
    assert_eq!(l.timeout, Duration::from_millis(700));
    assert!(!m.gzip);
    assert!(l.gzip);
    // A signal endpoint is used as it is, whatever its path; the other signal keeps the generic one.
    let env = env_of(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://generic:4318"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        (
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
            "http://logs:9000/ingest",
        ),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
    ]);
    let m = resolve(&cli(&[]), C, &env).unwrap().unwrap();
    let l = logs(&[], &env);
    assert_eq!(
        (m.protocol, m.endpoint.as_str()),
        (Protocol::Grpc, "http://generic:4318")
    );
    assert_eq!(
        (l.protocol, l.endpoint.as_str()),
        (Protocol::HttpProtobuf, "http://logs:9000/ingest")
    );
    // The flag wins over every variable, as a base URL for both signals.
    let l = logs(
        &[
            "--otlp-endpoint",
            "http://flag:4318",
            "--otlp-headers",
            "a=b",
        ],
        &env,
    );
    assert_eq!(l.endpoint, "http://flag:4318/v1/logs");
    assert_eq!(l.headers, vec![("a".into(), "b".into())]);
    // A logs endpoint alone does not turn OTLP on.
    let only_logs = env_of(&[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://logs:4317")]);
    assert!(resolve_signal(&cli(&[]), Signal::Logs, C, &only_logs)
        .unwrap()
        .is_none());
    assert_eq!(logs(&["--otlp"], &only_logs).endpoint, "http://logs:4317");
    // Only the metrics variable: the log records have no endpoint the user gave, and are not sent
    // (not to localhost:4317); with --otlp the defaults are what the user asked for.
    let only_metrics = env_of(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:4317")]);
    assert!(resolve(&cli(&[]), C, &only_metrics).unwrap().is_some());
    assert!(resolve_signal(&cli(&[]), Signal::Logs, C, &only_metrics)
        .unwrap()
        .is_none());
    assert_eq!(
        logs(&["--otlp"], &only_metrics).endpoint,
        "http://localhost:4317"
    );
    // gRPC refuses a signal path too, whichever way the endpoint is given.
    for (args, vars) in [
        (
            &["--otlp-endpoint", "http://h:4317/v1/metrics"][..],
            &[][..],
        ),
        (
            &[][..],
            &[(
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://h:4317/v1/metrics",
            )][..],
        ),
    ] {
        let e = resolve(&cli(args), C, &env_of(vars)).unwrap_err();
        assert!(
            e.to_string().ends_with(
                "'http://h:4317/v1/metrics': ends in /v1/metrics, an OTLP/HTTP path; a gRPC \
                 endpoint is the collector's address (e.g. http://h:4317), or use \
                 --otlp-protocol http/protobuf"
            ),
            "{e}"
        );
    }
    // A base URL ending in a signal path names the signal's own variable.
    let e = resolve_signal(
        &cli(&[
            "--otlp-endpoint",
            "http://h:4318/v1/logs",
            "--otlp-protocol",
            "http/protobuf",
        ]),
        Signal::Logs,
        C,
        &env_of(&[]),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "--otlp-endpoint: 'http://h:4318/v1/logs': a base URL, to which /v1/logs is appended; \
         it already ends in /v1/logs: give the base (e.g. http://h:4318) or set \
         OTEL_EXPORTER_OTLP_LOGS_ENDPOINT to the full URL"
    );
}

#[test]
fn otlp_logs_is_on_unless_turned_off_like_a_go_boolean() {
    assert!(cli(&[]).otlp_logs);
    assert!(cli(&["--otlp-logs"]).otlp_logs);
    assert!(!cli(&["--otlp-logs=false"]).otlp_logs);
    assert!(!cli(&["--otlp-logs=0"]).otlp_logs);
    assert!(Only::try_parse_from(["dcgm-otel", "--otlp-logs=no"]).is_err());
}

#[test]
fn insecure_picks_the_scheme_of_a_grpc_endpoint_without_one() {
    let grpc = |pairs: &'static [(&'static str, &'static str)]| {
        resolve(&cli(&[]), C, &env_of(pairs))
            .unwrap()
            .unwrap()
            .endpoint
    };
    assert_eq!(
        grpc(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]),
        "https://collector:4317"
    );
    assert_eq!(
        grpc(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
            ("OTEL_EXPORTER_OTLP_INSECURE", "TRUE"),
        ]),
        "http://collector:4317"
    );
    // The signal's variable wins over the generic one.
    assert_eq!(
        grpc(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
            ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
            ("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "false"),
        ]),
        "https://collector:4317"
    );
    // A scheme says it all: INSECURE does not change it.
    assert_eq!(
        grpc(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
            ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
        ]),
        "https://collector:4317"
    );
    let l = logs(
        &["--otlp-endpoint", "collector:4317"],
        &env_of(&[("OTEL_EXPORTER_OTLP_LOGS_INSECURE", "true")]),
    );
    assert_eq!(l.endpoint, "http://collector:4317");
    assert!(!l.is_tls());
}
