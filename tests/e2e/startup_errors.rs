//! Every bad input the README describes stops start-up with exactly one line on stderr, naming the
//! input (and the line and column for files), before anything else is printed or started; exit code 2.
//! A failing environment (no libdcgm, a port in use) is one line too, exit code 1. These tests compare
//! the whole stderr, not a fragment of it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;

use common::run_to_exit;

/// Run with `args` and `env`; the exit code and the whole stderr must be exactly these.
fn expect(args: &[&str], env: &[(&str, &str)], code: i32, stderr: &str) {
    let (got_code, got) = run_to_exit(args, env);
    assert_eq!(
        (got_code, got.as_str()),
        (code, format!("dcgm-otel: {stderr}\n").as_str()),
        "args {args:?}, env {env:?}"
    );
}

/// [`expect`] exit code 2 with `stderr`, for a start-up that may instead run: stopped after 20 s
/// (on a port of its own choosing, :0), which fails the test.
fn expect_bounded(args: &[&str], env: &[(&str, &str)], stderr: &str) {
    use std::io::Read as _;
    use std::time::{Duration, Instant};
    let mut cmd = std::process::Command::new(common::binary());
    cmd.args(args)
        .args(["-a", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break -1;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut got = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut got)
        .unwrap();
    assert_eq!(
        (code, got.lines().last().unwrap_or("")),
        (2, format!("dcgm-otel: {stderr}").as_str()),
        "args {args:?}, env {env:?} (-1: still running after 20 s): {got}"
    );
    assert_eq!(got.lines().count(), 1, "one line: {got}");
}

const SDK_REFUSED: &str = "--otlp-pipeline sdk: the OpenTelemetry SDK pipeline is no longer built: it kept the Resource model of dcgm-otel 0.1, which counts a shared device's and a MIG GPU's measurements more than once; drop the flag (the direct pipeline is the only one)";

#[test]
fn bad_flags_and_variables() {
    expect(
        &["--bogus"],
        &[],
        2,
        "unexpected argument '--bogus' found; see --help",
    );
    expect(
        &["--no-hostnam"],
        &[],
        2,
        "unexpected argument '--no-hostnam' found; did you mean '--no-hostname'?; see --help",
    );
    expect(
        &["--kubernetes=yes"],
        &[],
        2,
        "invalid value 'yes' for '--kubernetes[=<BOOL>]': expected one of 1 t T TRUE true True 0 f F FALSE false False; see --help",
    );
    expect(
        &["--simulate"],
        &[("DCGM_EXPORTER_KUBERNETES", "yes")],
        2,
        "invalid value 'yes' in environment variable DCGM_EXPORTER_KUBERNETES (flag --kubernetes): expected one of 1 t T TRUE true True 0 f F FALSE false False; see --help",
    );
    expect(
        &["--simulate"],
        &[("DCGM_EXPORTER_INTERVAL", "soon")],
        2,
        "invalid value 'soon' in environment variable DCGM_EXPORTER_INTERVAL (flag --collect-interval): invalid digit found in string; see --help",
    );
    expect(
        &["--simulate", "-c", "50"],
        &[],
        2,
        "invalid value '50' for '--collect-interval <MS>': 50 is not in 100..=3600000; see --help",
    );
    expect(
        &["--simulate", "-d", "g:0,x"],
        &[],
        2,
        "invalid value 'g:0,x' for '--devices <SELECTION>': invalid device selection 'g:0,x' at character 5: expected a number or a range n-m; see --help",
    );
    expect(
        &["--simulate", "-a", "::1:9400"],
        &[],
        2,
        "invalid --address '::1:9400': an IPv6 address needs brackets, e.g. [::1]:9400",
    );
    expect(
        &["-r", "fd00::1:5555"],
        &[],
        2,
        "invalid --remote-hostengine-info 'fd00::1:5555': an IPv6 address needs brackets, e.g. [::1]:5555",
    );
}

#[test]
fn bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("bad.csv");
    std::fs::write(
        &csv,
        "# ok\nDCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_SM_CLOCK, histogram, x\n",
    )
    .unwrap();
    let csv = csv.display().to_string();
    expect(
        &["--simulate", "-f", &csv],
        &[],
        2,
        &format!("{csv}:3:23: type 'histogram' is not supported for a DCGM field (a DCGM field is one number: use gauge or counter)"),
    );
    expect(
        &["--simulate", "-f", "/nonexistent/counters.csv"],
        &[],
        2,
        "/nonexistent/counters.csv: cannot read counters CSV: No such file or directory (os error 2)",
    );
    let scenario = dir.path().join("lab.yaml");
    std::fs::write(&scenario, "gpus:\n  - model: B300\n").unwrap();
    let scenario = scenario.display().to_string();
    expect(
        &[&format!("--simulate={scenario}")],
        &[],
        2,
        &format!(
            "{scenario}: unknown GPU model 'B300' (known: H100-SXM5-80GB, A100-SXM4-80GB, A30, GH200-96GB, L4)"
        ),
    );
    expect(
        &["--simulate=/nonexistent/lab.yaml"],
        &[],
        2,
        "cannot read scenario file /nonexistent/lab.yaml: No such file or directory (os error 2)",
    );
    expect(
        &["--simulate=nope"],
        &[],
        2,
        "unknown simulation scenario 'nope' (built-in: default, dgx-h100-mig, large, hgx-h100, grace-hopper, incidents, demo; or a path to a .yaml file)",
    );
    expect(
        &["--simulate", "--web-config-file", "/nonexistent/web.yml"],
        &[],
        2,
        "web config /nonexistent/web.yml: cannot read: No such file or directory (os error 2)",
    );
}

#[test]
fn bad_devices_on_the_simulated_fleet() {
    expect(
        &["--simulate", "-d", "g:7"],
        &[],
        2,
        "device selection asks for GPU 7, which does not exist (present: 0,1)",
    );
}

#[test]
fn bad_otlp_settings() {
    expect(
        &["--simulate", "--otlp-endpoint", "ftp://collector"],
        &[],
        2,
        "--otlp-endpoint: 'ftp://collector': the URL needs an http:// or https:// scheme",
    );
    expect(
        &["--simulate", "--otlp-endpoint", "http://:4317"],
        &[],
        2,
        "--otlp-endpoint: 'http://:4317': the URL has no host",
    );
    expect(
        &[
            "--simulate",
            "--otlp-protocol",
            "http/protobuf",
            "--otlp-endpoint",
            "http://collector:4318/v1/metrics",
        ],
        &[],
        2,
        "--otlp-endpoint: 'http://collector:4318/v1/metrics': a base URL, to which /v1/metrics is appended; it already ends in /v1/metrics: give the base (e.g. http://collector:4318) or set OTEL_EXPORTER_OTLP_METRICS_ENDPOINT to the full URL",
    );
    // The same endpoint over gRPC (the default protocol) is refused too.
    expect(
        &["--simulate", "--otlp-endpoint", "http://collector:4317/v1/metrics"],
        &[],
        2,
        "--otlp-endpoint: 'http://collector:4317/v1/metrics': ends in /v1/metrics, an OTLP/HTTP path; a gRPC endpoint is the collector's address (e.g. http://collector:4317), or use --otlp-protocol http/protobuf",
    );
    expect(
        &["--simulate", "--otlp-protocol", "http/json", "--otlp"],
        &[],
        2,
        "--otlp-protocol: unsupported protocol 'http/json' (use grpc or http/protobuf)",
    );
    expect(
        &["--simulate", "--otlp"],
        &[("OTEL_RESOURCE_ATTRIBUTES", "team")],
        2,
        "OTEL_RESOURCE_ATTRIBUTES: entry 1 'team': expected key=value",
    );
    // The OpenTelemetry SDK paths of 0.1 are no longer built: naming them is one line, exit 2.
    expect(
        &["--simulate", "--prometheus-format", "otel"],
        &[],
        2,
        "--prometheus-format otel: the OpenTelemetry Prometheus bridge is no longer built; /metrics is dcgm-exporter's format (for OTel-style names in Prometheus, push OTLP to a collector with a prometheus exporter)",
    );
    expect(
        &["--simulate", "--otlp", "--otlp-pipeline", "sdk"],
        &[],
        2,
        SDK_REFUSED,
    );
    // Refused whether OTLP is on or not, by flag or variable (it was accepted silently with OTLP off,
    // and the exporter ran: bounded here, so that a regression fails instead of hanging).
    expect_bounded(&["--simulate", "--otlp-pipeline", "sdk"], &[], SDK_REFUSED);
    for otlp in [None, Some(("DCGM_OTEL_OTLP", "true"))] {
        let env: Vec<(&str, &str)> = [("DCGM_OTEL_OTLP_PIPELINE", "sdk")]
            .into_iter()
            .chain(otlp)
            .collect();
        expect_bounded(&["--simulate"], &env, SDK_REFUSED);
    }
}

#[test]
fn failing_environment_is_one_line_and_exit_1() {
    expect(
        &["--dcgm-library", "/nonexistent/libdcgm.so.4"],
        &[],
        1,
        "cannot load libdcgm (tried /nonexistent/libdcgm.so.4): /nonexistent/libdcgm.so.4: cannot open shared object file: No such file or directory; libdcgm (NVIDIA DCGM 4.x) is needed to read GPUs: install datacenter-gpu-manager-4-core (DCGM 3.x's libdcgm.so.3 is used as a fallback), or point --dcgm-library / DCGM_OTEL_LIBDCGM at libdcgm.so.4. Use -r HOST:PORT to read a remote nv-hostengine (the client library is still needed), or --simulate to run on a simulated fleet without GPUs.",
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    expect(
        &["--simulate", "-a", &addr],
        &[],
        1,
        &format!("cannot listen on {addr}: Address already in use (os error 98)"),
    );
    // The port is taken before anything else starts: not one OTLP export goes out first.
    let collector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", collector.local_addr().unwrap());
    expect(
        &[
            "--simulate",
            "-a",
            &addr,
            "--otlp",
            "--otlp-protocol",
            "http/protobuf",
            "--otlp-endpoint",
            &endpoint,
        ],
        &[],
        1,
        &format!("cannot listen on {addr}: Address already in use (os error 98)"),
    );
    collector.set_nonblocking(true).unwrap();
    assert!(
        matches!(collector.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the exporter reached the collector before failing on the port"
    );
}

#[test]
fn no_gpu_library_at_all_with_source_auto_or_nvml() {
    expect(
        &[
            "--source",
            "auto",
            "--dcgm-library",
            "/nonexistent/libdcgm.so.4",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
            "-a",
            "127.0.0.1:0",
        ],
        &[],
        1,
        "--source auto: neither DCGM nor NVML is usable: DCGM: cannot load libdcgm (tried /nonexistent/libdcgm.so.4): /nonexistent/libdcgm.so.4: cannot open shared object file: No such file or directory; NVML: cannot load NVML (tried /nonexistent/libnvidia-ml.so.1): /nonexistent/libnvidia-ml.so.1: cannot open shared object file: No such file or directory; install the NVIDIA driver (it brings libnvidia-ml.so.1) and, for all fields, DCGM 4.x (datacenter-gpu-manager-4-core), or run with --simulate",
    );
    expect(
        &[
            "--source",
            "nvml",
            "--nvml-library",
            "/nonexistent/libnvidia-ml.so.1",
            "-a",
            "127.0.0.1:0",
        ],
        &[],
        1,
        "cannot load NVML (tried /nonexistent/libnvidia-ml.so.1): /nonexistent/libnvidia-ml.so.1: cannot open shared object file: No such file or directory; NVML comes with the NVIDIA driver (libnvidia-ml.so.1): install the driver, or point --nvml-library / DCGM_OTEL_LIBNVML at the library, or use --simulate to run on a simulated fleet without GPUs",
    );
    expect(
        &[
            "--collect-processes",
            "--dcgm-library",
            "/nonexistent/libdcgm.so.4",
            "-a",
            "127.0.0.1:0",
        ],
        &[("DCGM_OTEL_SOURCE", "bogus")],
        2,
        "invalid value 'bogus' in environment variable DCGM_OTEL_SOURCE (flag --source); see --help",
    );
    expect(
        &["--source", "nvml", "-r", "gpu-node:5555"],
        &[],
        2,
        "--remote-hostengine-info reads a DCGM host engine; it cannot be combined with --source nvml",
    );
}

#[test]
fn bad_kubernetes_inputs() {
    expect(
        &["--simulate", "-k", "--kubernetes-enable-pod-labels", "--kubernetes-pod-label-allowlist-regex", "^team$,("],
        &[],
        2,
        "--kubernetes-pod-label-allowlist-regex: '(' is not a valid regular expression: unclosed group",
    );
    expect(
        &["--simulate", "-k", "--idle-utilization-threshold", "150"],
        &[],
        2,
        "invalid value '150' for '--idle-utilization-threshold <PERCENT>': '150' is not a percentage from 0 to 100; see --help",
    );
    expect(
        &["--simulate", "-k"],
        &[("DCGM_OTEL_POD_SERIES_RETENTION", "0")],
        2,
        "invalid value '0' in environment variable DCGM_OTEL_POD_SERIES_RETENTION (flag --pod-series-retention): the retention must be positive (e.g. 10m); see --help",
    );
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("pods.yaml");
    std::fs::write(
        &scenario,
        "gpus:\n  - { model: H100-SXM5-80GB, count: 2 }\npods:\n  - { namespace: a, pod: b, devices: [{ gpu: 1, gpu_i_id: 5 }] }\n",
    )
    .unwrap();
    let arg = format!("--simulate={}", scenario.display());
    expect(
        &[&arg, "-k"],
        &[],
        2,
        "simulated cluster: pod a/b: GPU 1 has no MIG instance with GPU_I_ID 5 (it has: none)",
    );
    std::fs::write(
        &scenario,
        "gpus:\n  - { model: H100-SXM5-80GB, count: 2 }\npods:\n  - { namespace: a, pod: b, devices: [{ gpu: 2 }] }\n",
    )
    .unwrap();
    expect(
        &[&arg],
        &[],
        2,
        &format!(
            "{}: pod a/b holds GPU 2; the scenario has GPUs 0 to 1",
            scenario.display()
        ),
    );
}

#[test]
fn bad_distributions() {
    expect(
        &["--simulate", "--distribution", "DCGM_FI_DEV_POWER_USAGE"],
        &[],
        2,
        "invalid value 'DCGM_FI_DEV_POWER_USAGE' for '--distribution <FIELD@INTERVAL>': expected FIELD@INTERVAL, e.g. DCGM_FI_DEV_POWER_USAGE@100ms; see --help",
    );
    expect(
        &["--simulate"],
        &[(
            "DCGM_OTEL_DISTRIBUTIONS",
            "DCGM_FI_DEV_POWER_USAGE@100ms,DCGM_FI_DEV_NAME@1s",
        )],
        2,
        "invalid value 'DCGM_FI_DEV_NAME@1s' in environment variable DCGM_OTEL_DISTRIBUTIONS (flag --distribution): DCGM_FI_DEV_NAME is not a numeric field; only numbers have a distribution; see --help",
    );
    expect(
        &["--simulate", "--distribution", "DCGM_FI_DEV_GPU_UTIL@1ms"],
        &[],
        2,
        "invalid value 'DCGM_FI_DEV_GPU_UTIL@1ms' for '--distribution <FIELD@INTERVAL>': sample interval 1ms is below the 10ms minimum; see --help",
    );
    expect(
        &[
            "--simulate",
            "-c",
            "1000",
            "--distribution",
            "DCGM_FI_DEV_POWER_USAGE@100ms",
            "--distribution",
            "DCGM_FI_DEV_GPU_UTIL@2s",
        ],
        &[],
        2,
        "--distribution DCGM_FI_DEV_GPU_UTIL@2s (value 2): the sample interval must be shorter than the collect interval (1s)",
    );
    expect(
        &["--simulate"],
        &[(
            "DCGM_OTEL_DISTRIBUTIONS",
            "DCGM_FI_DEV_POWER_USAGE@100ms,DCGM_FI_DEV_POWER_USAGE@250ms",
        )],
        2,
        "DCGM_OTEL_DISTRIBUTIONS DCGM_FI_DEV_POWER_USAGE@250ms (value 2): DCGM_FI_DEV_POWER_USAGE is already sampled by DCGM_OTEL_DISTRIBUTIONS DCGM_FI_DEV_POWER_USAGE@100ms (value 1); a field has one sample interval",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.yaml");
    std::fs::write(
        &config,
        "version: 1\ncollection:\n  interval: 1s\n  distributions:\n    - DCGM_FI_DEV_POWER_USAGE@100ms\n    - DCGM_FI_DEV_NOPE@100ms\n",
    )
    .unwrap();
    let config = config.display().to_string();
    expect(
        &["--simulate", "--config-file", &config],
        &[],
        2,
        &format!(
            "{config}:6:5: collection.distributions[1]: unknown DCGM field 'DCGM_FI_DEV_NOPE'"
        ),
    );
    std::fs::write(
        dir.path().join("c.yaml"),
        "version: 1\ncollection:\n  interval: 1s\n  distributions:\n    - DCGM_FI_DEV_POWER_USAGE@1s\n",
    )
    .unwrap();
    expect(
        &["--simulate", "--config-file", &config],
        &[],
        2,
        &format!("{config}:5:5: collection.distributions[0] DCGM_FI_DEV_POWER_USAGE@1s: the sample interval must be shorter than the collect interval (1s)"),
    );
}

/// `run_to_exit` (every test above) fails instead of hanging when the binary does not exit: here a
/// serving exporter (the situation a bad input that stopped being fatal would cause) is killed after
/// the limit, and the failure names the arguments and shows the output so far.
#[test]
fn run_to_exit_kills_a_binary_that_keeps_running_and_fails() {
    let args = ["--simulate", "-a", "127.0.0.1:0", "-c", "200"];
    let failure = std::panic::catch_unwind(|| {
        common::run_to_exit_within(&args, &[], std::time::Duration::from_secs(2))
    })
    .expect_err("run_to_exit returned although the exporter was still serving");
    let message = failure
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("did not exit within 2s: killed")
            && message.contains("\"--simulate\", \"-a\", \"127.0.0.1:0\""),
        "{message}"
    );
}
