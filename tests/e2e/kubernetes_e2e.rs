//! End to end: the built `dcgm-otel` binary on the simulated fleet with `-k`, talking to the fake kubelet
//! (`support::kubelet`: `v1.PodResourcesLister/List` on a unix socket in a temp dir) and the fake
//! Kubernetes API server (`support::api_server`), scraped over HTTP. Asserts the exposition lines a
//! user sees: which series carry which pod, what happens when the kubelet goes away or answers
//! garbage, and that the kubelet is asked once per collect interval however many scrapes happen. Also the HPC job directory (`--hpc-job-mapping-dir`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::api_server::{self, ApiServer};
use crate::support::fake_lib;
use crate::support::kubelet::{container, pod, pods, Kubelet, Reply};
use dcgm_otel::enrich::kubernetes::labels::reserved;
use dcgm_otel::enrich::kubernetes::podresources::{
    ClaimResource, ContainerResources, DynamicResource,
};
use dcgm_otel::kubernetes_api::{LIST_LIMIT, MAX_CACHE_OBJECTS, MAX_LIST_PAGE, MAX_WATCH_LINE};
use dcgm_otel::source::sim::{Fleet, Scenario};

// ------------------------------------------------------------------------------------------------
// The exporter under test

struct Exporter {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `dcgm-otel --simulate[=scenario] --simulate-seed 1 -c 200 -a 127.0.0.1:0 <extra>` with
/// NODE_NAME=node-a and a clean environment; its log goes to `<dir>/exporter.log`, whose "serving
/// /metrics" line says the port it bound (never a port found free here and bound again there).
fn exporter(dir: &Path, scenario: &str, extra: &[&str]) -> Exporter {
    exporter_env(dir, scenario, extra, &[])
}

/// [`exporter`] with extra environment variables.
fn exporter_env(dir: &Path, scenario: &str, extra: &[&str], env: &[(&str, &str)]) -> Exporter {
    let log = dir.join("exporter.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let simulate = format!("--simulate={scenario}");
    let mut args = vec![
        simulate.as_str(),
        "--simulate-seed",
        "1",
        "-c",
        "200",
        "-a",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_dcgm-otel"))
        .args(&args)
        .env_clear()
        .env("NODE_NAME", "node-a")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .unwrap();
    let mut ex = Exporter {
        child,
        port: 0,
        log,
    };
    let end = Instant::now() + Duration::from_secs(20);
    while ex.port == 0 {
        let text = std::fs::read_to_string(&ex.log).unwrap_or_default();
        ex.port = text
            .lines()
            .filter(|l| l.contains("serving /metrics"))
            .find_map(|l| {
                l.split_once("address=")?
                    .1
                    .split([' ', ':'])
                    .nth(1)?
                    .parse()
                    .ok()
            })
            .unwrap_or(0);
        if ex.port == 0 {
            let exited = ex.child.try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < end,
                "no \"serving /metrics\" address (exit {exited:?}):\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    ex
}

/// GET /metrics with a tiny HTTP/1.1 client; `None` while the exporter is not answering yet.
fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Some(dechunk(body));
    }
    Some(body.to_string())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Scrape until `pred` holds for a body (returns it); panics after 30 s with the last body.
fn scrape_until(port: u16, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let end = Instant::now() + Duration::from_secs(30);
    let mut last = String::new();
    while Instant::now() < end {
        if let Some(body) = scrape(port) {
            if pred(&body) {
                return body;
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for: {what}\nlast body:\n{last}");
}

/// `NAME{labels}` of every sample of `metric` (values dropped; they move with the simulation).
fn series(body: &str, metric: &str) -> Vec<String> {
    let prefix = format!("{metric}{{");
    body.lines()
        .filter(|l| l.starts_with(&prefix))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            value
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("bad value in {l:?}"));
            series.to_string()
        })
        .collect()
}

/// Value of one exact self-metric series, 0 when absent.
fn value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

fn requests(body: &str, result: &str) -> f64 {
    value(
        body,
        &format!("dcgm_otel_kubelet_requests_total{{result=\"{result}\"}}"),
    )
}

/// Failed kubelet calls of any kind (unavailable, timeout, error).
fn failed_requests(body: &str) -> f64 {
    requests(body, "unavailable") + requests(body, "timeout") + requests(body, "error")
}

// ------------------------------------------------------------------------------------------------
// The simulated fleet's identities (deterministic for a seed)

const MODEL: &str = "NVIDIA H100 80GB HBM3";
const BUS: [&str; 8] = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"];

struct Fleet1 {
    gpu_uuid: Vec<String>,
    /// Per GPU: (GPU_I_ID, profile, MIG uuid).
    mig: Vec<Vec<(u32, String, String)>>,
}

fn fleet(scenario: &str) -> Fleet1 {
    let f = Fleet::new(&Scenario::load(scenario).unwrap(), 1, "node-a");
    Fleet1 {
        gpu_uuid: f.gpus().iter().map(|g| g.identity.uuid.clone()).collect(),
        mig: f
            .gpus()
            .iter()
            .map(|g| {
                g.instances
                    .iter()
                    .map(|m| (m.gi_id, m.profile.clone(), m.uuid.clone()))
                    .collect()
            })
            .collect(),
    }
}

/// The GPU_TEMP series of a GPU (`mig = None`) or of one of its instances, with `attrs` appended.
fn temp_line(f: &Fleet1, gpu: usize, mig: Option<usize>, attrs: &str) -> String {
    let mut s = format!(
        "DCGM_FI_DEV_GPU_TEMP{{gpu=\"{gpu}\",UUID=\"{}\",pci_bus_id=\"00000000:{}:00.0\",device=\"nvidia{gpu}\",modelName=\"{MODEL}\"",
        f.gpu_uuid[gpu], BUS[gpu]
    );
    if let Some(i) = mig {
        let (gi, profile, _) = &f.mig[gpu][i];
        s.push_str(&format!(",GPU_I_PROFILE=\"{profile}\",GPU_I_ID=\"{gi}\""));
    }
    s.push_str(",Hostname=\"node-a\",DCGM_FI_DRIVER_VERSION=\"550.144.03\"");
    s.push_str(attrs);
    s.push('}');
    s
}

fn pod_attrs(container: &str, namespace: &str, pod: &str) -> String {
    format!(",container=\"{container}\",namespace=\"{namespace}\",pod=\"{pod}\"")
}

fn socket_in(dir: &Path) -> PathBuf {
    dir.join("kubelet.sock")
}

// ------------------------------------------------------------------------------------------------
// Tests

#[test]
fn whole_gpu_by_uuid_and_mig_slices_by_mig_id() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let mig = &f.mig[1];
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![
            pod(
                "team-a",
                "trainer-0",
                vec![container("cuda", "nvidia.com/gpu", &[&f.gpu_uuid[0]])],
            ),
            // a sidecar without devices, and a non-NVIDIA resource that names GPU 1's UUID: both ignored
            pod(
                "team-b",
                "infer-a",
                vec![
                    ContainerResources {
                        name: "sidecar".into(),
                        devices: vec![],
                        dynamic_resources: vec![],
                    },
                    container("server", "nvidia.com/mig-3g.40gb", &[&mig[0].2]),
                ],
            ),
            pod(
                "team-b",
                "infer-c",
                vec![container("server", "nvidia.com/mig-1g.10gb", &[&mig[2].2])],
            ),
            pod(
                "x",
                "fpga",
                vec![container("c", "example.com/fpga", &[&f.gpu_uuid[1]])],
            ),
        ]),
    );
    let ex = exporter(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
        ],
    );
    let body = scrape_until(ex.port, "pod labels", |b| b.contains("pod=\"trainer-0\""));
    // The GPU UUIDs the test computed are the ones the exporter shows.
    assert!(body.contains(&format!("UUID=\"{}\"", f.gpu_uuid[0])));
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            temp_line(&f, 0, None, &pod_attrs("cuda", "team-a", "trainer-0")),
            temp_line(&f, 1, Some(0), &pod_attrs("server", "team-b", "infer-a")),
            // the 2g.20gb instance has no pod: no pod labels at all
            temp_line(&f, 1, Some(1), ""),
            temp_line(&f, 1, Some(2), &pod_attrs("server", "team-b", "infer-c")),
        ]
    );
    assert!(value(&body, "dcgm_otel_kubernetes_pods") == 3.0, "{body}");
    assert_eq!(requests(&body, "error"), 0.0);
}

#[test]
fn old_namespace_labels_and_device_name_ids_with_gke_mig_forms() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let gi_2g = f.mig[1][1].0;
    let gke_mig = format!("nvidia1/gi{gi_2g}/vgpu0");
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![
            pod(
                "ml",
                "gke-whole",
                vec![container("main", "nvidia.com/gpu", &["nvidia0"])],
            ),
            pod(
                "ml",
                "gke-slice",
                vec![container("main", "nvidia.com/gpu", &[&gke_mig])],
            ),
        ]),
    );
    let ex = exporter(
        dir.path(),
        "default",
        &[
            "-k",
            "--kubernetes-gpu-id-type",
            "device-name",
            "-o",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
        ],
    );
    let body = scrape_until(ex.port, "pod labels", |b| {
        b.contains("pod_name=\"gke-whole\"")
    });
    let old = |line: String| line.replace("UUID=", "uuid=");
    let attrs =
        |pod: &str| format!(",container_name=\"main\",pod_name=\"{pod}\",pod_namespace=\"ml\"");
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            old(temp_line(&f, 0, None, &attrs("gke-whole"))),
            old(temp_line(&f, 1, Some(0), "")),
            old(temp_line(&f, 1, Some(1), &attrs("gke-slice"))),
            old(temp_line(&f, 1, Some(2), "")),
        ]
    );
}

#[test]
fn settings_from_dcgm_exporter_environment_variables() {
    // The DaemonSet configures the exporter through these variables, not flags.
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![
            pod(
                "ns",
                "by-index",
                vec![container("c", "example.com/gpu", &["nvidia0"])],
            ),
            pod(
                "ns",
                "other",
                vec![container("c", "example.com/fpga", &[&f.mig[1][0].2])],
            ),
            pod(
                "ns",
                "slice",
                vec![container("c", "nvidia.com/a100", &[&f.mig[1][2].2])],
            ),
        ]),
    );
    let ex = exporter_env(
        dir.path(),
        "default",
        &[],
        &[
            ("DCGM_EXPORTER_KUBERNETES", "true"),
            ("DCGM_POD_RESOURCES_KUBELET_SOCKET", sock.to_str().unwrap()),
            ("DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE", "device-name"),
            ("NVIDIA_RESOURCE_NAMES", "example.com/gpu,nvidia.com/a100"),
            ("DCGM_EXPORTER_USE_OLD_NAMESPACE", "false"),
        ],
    );
    let body = scrape_until(ex.port, "pod labels", |b| b.contains("pod=\"by-index\""));
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            temp_line(&f, 0, None, &pod_attrs("c", "ns", "by-index")),
            temp_line(&f, 1, Some(0), ""),
            temp_line(&f, 1, Some(1), ""),
            temp_line(&f, 1, Some(2), &pod_attrs("c", "ns", "slice")),
        ]
    );
}

/// Each id type matches its own ids only: in `uid` mode (the default) a device name (`nvidia0`)
/// names no GPU, and in `device-name` mode a UUID names none. In each mode a second pod, named the
/// mode's way, is the control: its GPU is labelled, so the reply was read.
#[test]
fn uuid_ids_do_not_match_in_device_name_mode_and_vice_versa() {
    let f = fleet("default");
    let gi_2g = f.mig[1][1].0;
    let control_uid = f.mig[1][1].2.clone();
    let control_name = format!("nvidia1/gi{gi_2g}/vgpu0");
    for (mode, foreign, control) in [
        ("uid", "nvidia0".to_string(), control_uid),
        ("device-name", f.gpu_uuid[0].clone(), control_name),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let sock = socket_in(dir.path());
        let _kubelet = Kubelet::start(
            &sock,
            pods(vec![
                pod(
                    "ns",
                    "foreign-id",
                    vec![container("c", "nvidia.com/gpu", &[&foreign])],
                ),
                pod(
                    "ns",
                    "control",
                    vec![container("c", "nvidia.com/gpu", &[&control])],
                ),
            ]),
        );
        let ex = exporter(
            dir.path(),
            "default",
            &[
                "-k",
                "--kubernetes-gpu-id-type",
                mode,
                "--pod-resources-kubelet-socket",
                sock.to_str().unwrap(),
            ],
        );
        let body = scrape_until(ex.port, "the control pod's label", |b| {
            b.contains("pod=\"control\"")
        });
        assert!(!body.contains("pod=\"foreign-id\""), "{mode}: {body}");
        assert_eq!(
            series(&body, "DCGM_FI_DEV_GPU_TEMP"),
            vec![
                temp_line(&f, 0, None, ""),
                temp_line(&f, 1, Some(0), ""),
                temp_line(&f, 1, Some(1), &pod_attrs("c", "ns", "control")),
                temp_line(&f, 1, Some(2), ""),
            ],
            "{mode}"
        );
    }
}

#[test]
fn a_shared_gpu_is_one_series_labelled_with_the_last_pod_listed_and_unallocated_gpus_none() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let u0 = &f.gpu_uuid[0];
    // Time-sliced by two pods: as dcgm-exporter 4.5.3-4.8.2, one series, labelled with the pod whose
    // allocation comes last in the kubelet's reply (replica-1, though replica-0 sorts first).
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![
            pod(
                "a-team",
                "replica-0",
                vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::0")])],
            ),
            pod(
                "b-team",
                "replica-1",
                vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::1")])],
            ),
        ]),
    );
    // The kubelet's device checkpoint knows replica-1's allocation (and an unrelated one).
    let checkpoint = dir.path().join("kubelet_internal_checkpoint");
    std::fs::write(
        &checkpoint,
        format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"7e1c2f4a-0000-4000-8000-00000000000a","ContainerName":"w","ResourceName":"nvidia.com/gpu","DeviceIDs":{{"0":["{u0}::1"]}},"AllocResp":"CgA="}},{{"PodUID":"other","ContainerName":"x","ResourceName":"nvidia.com/gpu","DeviceIDs":["{u0}::7"],"AllocResp":"CgA="}}],"RegisteredDevices":{{"nvidia.com/gpu":["{u0}::0","{u0}::1"]}}}},"Checksum":3141592653}}"#
        ),
    )
    .unwrap();
    let ex = exporter(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
            "--kubernetes-enable-pod-uid",
            "--kubelet-device-checkpoint",
            checkpoint.to_str().unwrap(),
        ],
    );
    let body = scrape_until(ex.port, "pod labels", |b| b.contains("pod=\"replica-1\""));
    let uid1 = ",pod_uid=\"7e1c2f4a-0000-4000-8000-00000000000a\"";
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            temp_line(&f, 0, None, &(pod_attrs("w", "b-team", "replica-1") + uid1)),
            temp_line(&f, 1, Some(0), ""),
            temp_line(&f, 1, Some(1), ""),
            temp_line(&f, 1, Some(2), ""),
        ]
    );
    // Both pods still get their share of the GPU in the per-pod cost counters.
    for pod in ["replica-0", "replica-1"] {
        assert!(
            body.lines()
                .any(|l| l.starts_with("dcgm_otel_pod_gpu_seconds_total{")
                    && l.contains(&format!("pod=\"{pod}\""))),
            "no cost series of {pod} in:\n{body}"
        );
    }
}

#[test]
fn no_pod_uid_without_the_flag_or_without_a_readable_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let checkpoint = dir.path().join("kubelet_internal_checkpoint");
    std::fs::write(
        &checkpoint,
        format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"u-1","ContainerName":"w","ResourceName":"nvidia.com/gpu","DeviceIDs":{{"0":["{}"]}}}}]}},"Checksum":1}}"#,
            f.gpu_uuid[0]
        ),
    )
    .unwrap();
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![pod(
            "ns",
            "p",
            vec![container("w", "nvidia.com/gpu", &[&f.gpu_uuid[0]])],
        )]),
    );
    let sock_arg = sock.to_str().unwrap();
    let ckpt_arg = checkpoint.to_str().unwrap();
    let missing = dir.path().join("missing");
    // the checkpoint is there, but --kubernetes-enable-pod-uid is not given
    let ex = exporter(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock_arg,
            "--kubelet-device-checkpoint",
            ckpt_arg,
        ],
    );
    let body = scrape_until(ex.port, "pod labels", |b| b.contains("pod=\"p\""));
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP")[0],
        temp_line(&f, 0, None, &pod_attrs("w", "ns", "p"))
    );
    drop(ex);
    // the flag is given, the checkpoint is missing: pod labels, no pod_uid, one warning
    let ex = exporter(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock_arg,
            "--kubernetes-enable-pod-uid",
            "--kubelet-device-checkpoint",
            missing.to_str().unwrap(),
        ],
    );
    let body = scrape_until(ex.port, "two kubelet replies", |b| requests(b, "ok") >= 3.0);
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP")[0],
        temp_line(&f, 0, None, &pod_attrs("w", "ns", "p"))
    );
    assert_eq!(log_count(&ex, "pod UIDs unavailable"), 1);
    drop(ex);
    // with both: pod_uid
    let ex = exporter(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock_arg,
            "--kubernetes-enable-pod-uid",
            "--kubelet-device-checkpoint",
            ckpt_arg,
        ],
    );
    let body = scrape_until(ex.port, "pod labels", |b| b.contains("pod=\"p\""));
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP")[0],
        temp_line(
            &f,
            0,
            None,
            &(pod_attrs("w", "ns", "p") + ",pod_uid=\"u-1\"")
        )
    );
}

/// Count of log lines containing `needle`.
fn log_count(ex: &Exporter, needle: &str) -> usize {
    std::fs::read_to_string(&ex.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

#[test]
fn kubelet_down_then_back_and_garbage_replies() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let good = pods(vec![pod(
        "team-a",
        "trainer-0",
        vec![container("cuda", "nvidia.com/gpu", &[&f.gpu_uuid[0]])],
    )]);
    let mut kubelet = Kubelet::start(&sock, good.clone());
    // Every collection's body is also written to `dump` (the debug dump): the keep-then-drop rule is
    // checked on each of them at the end, not only on the bodies a scrape happened to catch.
    let dump = dir.path().join("dump");
    let ex = exporter(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
            "--dump-enabled",
            "--dump-directory",
            dump.to_str().unwrap(),
            "--dump-compression=false",
        ],
    );
    let labelled = temp_line(&f, 0, None, &pod_attrs("cuda", "team-a", "trainer-0"));
    let bare = temp_line(&f, 0, None, "");
    let gpu0 = |b: &str| series(b, "DCGM_FI_DEV_GPU_TEMP")[0].clone();
    scrape_until(ex.port, "pod labels", |b| b.contains("pod=\"trainer-0\""));

    // Phase 1: the kubelet goes away. For 3 failed intervals the last mapping is kept, then dropped.
    kubelet.down();
    let check_outage = |b: &str, base: f64| {
        let failed = failed_requests(b) - base;
        if (1.0..=3.0).contains(&failed) {
            assert_eq!(
                gpu0(b),
                labelled,
                "mapping must be kept for 3 failed intervals ({failed} failed)"
            );
        }
        if failed >= 4.0 {
            assert_eq!(
                gpu0(b),
                bare,
                "mapping must be dropped after 3 failed intervals ({failed} failed)"
            );
        }
        failed >= 4.0
    };
    scrape_until(
        ex.port,
        "pod labels dropped while the kubelet is down",
        |b| check_outage(b, 0.0),
    );

    // Phase 2: the kubelet is back.
    kubelet.up();
    scrape_until(ex.port, "pod labels back", |b| gpu0(b) == labelled);

    // Phase 3: garbage replies: counted as errors, same keep-then-drop rule.
    let before = scrape(ex.port).map(|b| failed_requests(&b)).unwrap_or(0.0);
    assert!(before >= 4.0);
    kubelet.set_reply(Reply::Garbage);
    let body = scrape_until(ex.port, "pod labels dropped on garbage replies", |b| {
        check_outage(b, before)
    });
    assert!(
        requests(&body, "error") >= 4.0,
        "garbage replies count as errors"
    );
    assert!(requests(&body, "ok") >= 2.0);

    // Phase 4: good replies again.
    kubelet.set_reply(good);
    scrape_until(ex.port, "pod labels back after garbage", |b| {
        gpu0(b) == labelled
    });

    // Each outage is logged once when it starts, once when the mapping is dropped, once when it ends.
    assert_eq!(log_count(&ex, "keeping the last pod mapping"), 2);
    assert_eq!(log_count(&ex, "pod mapping dropped"), 2);
    assert_eq!(log_count(&ex, "pod mapping restored"), 2);

    // Every recorded body, in collection order: a kubelet call per collection, so the failures in a
    // row are counted from the bodies' own counters (unknown after a skipped body that mixed a
    // success and a failure). Within 1..=3 failures in a row the mapping is kept, from 4 dropped.
    drop(ex);
    let (mut ok_before, mut failed_before, mut in_a_row) = (0.0, 0.0, Some(0.0));
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for (seq, b) in dumped_bodies(&dump) {
        let (ok, failed) = (requests(&b, "ok"), failed_requests(&b));
        in_a_row = match (ok > ok_before, failed > failed_before) {
            (true, false) => Some(0.0),
            (false, true) => in_a_row.map(|n| n + failed - failed_before),
            (false, false) => in_a_row,
            (true, true) => None,
        };
        (ok_before, failed_before) = (ok, failed);
        match in_a_row {
            Some(n) if (1.0..=3.0).contains(&n) => {
                assert_eq!(gpu0(&b), labelled, "collection {seq}: {n} failed in a row");
                kept.push(n);
            }
            Some(n) if n >= 4.0 => {
                assert_eq!(gpu0(&b), bare, "collection {seq}: {n} failed in a row");
                dropped.push(n);
            }
            _ => {}
        }
    }
    // Both outages recorded in their keeping and their dropping part (bodies skipped by a busy
    // dump writer aside, every collection is there: 3 kept per outage).
    assert!(kept.len() >= 4, "kept: {kept:?}");
    assert!(dropped.len() >= 2, "dropped: {dropped:?}");
}

/// The bodies `--dump-enabled --dump-compression=false` wrote into `dir`
/// (`metrics-<time>-<collection>.prom`), in collection order.
fn dumped_bodies(dir: &Path) -> Vec<(u64, String)> {
    let mut bodies: Vec<(u64, String)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            let seq = name
                .strip_prefix("metrics-")?
                .strip_suffix(".prom")?
                .rsplit('-')
                .next()?
                .parse()
                .ok()?;
            Some((seq, std::fs::read_to_string(e.path()).ok()?))
        })
        .collect();
    bodies.sort();
    bodies
}

#[test]
fn kubelet_is_asked_once_per_interval_however_many_scrapes() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("dgx-h100-mig");
    let sock = socket_in(dir.path());
    // 4 whole GPUs to 4 pods, the 28 MIG slices to 28 pods.
    let mut list = Vec::new();
    for g in 0..4 {
        list.push(pod(
            "train",
            &format!("t-{g}"),
            vec![container("c", "nvidia.com/gpu", &[&f.gpu_uuid[g]])],
        ));
    }
    for (g, slices) in f.mig.iter().enumerate() {
        for (i, (_, _, uuid)) in slices.iter().enumerate() {
            list.push(pod(
                "infer",
                &format!("i-{g}-{i}"),
                vec![container("c", "nvidia.com/mig-1g.10gb", &[uuid])],
            ));
        }
    }
    let kubelet = Kubelet::start(&sock, pods(list));
    let ex = exporter(
        dir.path(),
        "dgx-h100-mig",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
        ],
    );
    let first = scrape_until(ex.port, "pod labels", |b| b.contains("pod=\"i-7-6\""));
    assert_eq!(value(&first, "dcgm_otel_kubernetes_pods"), 32.0);
    let calls_before = kubelet.calls();
    let collects_before = value(&first, "dcgm_otel_collects_total{source=\"simulated\"}");
    // 3 scrapers, each about every 20 ms (up to 30 scrapes per 200 ms interval), until at least 5
    // collections went by with more than 3 scrapes each (a condition, not a time: a loaded machine
    // takes longer to get there).
    let port = ex.port;
    let collects_of = |x: &str| value(x, "dcgm_otel_collects_total{source=\"simulated\"}");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraped = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let newest = Arc::new(Mutex::new(first.clone()));
    let scrapers: Vec<_> = (0..3)
        .map(|_| {
            let (stop, scraped, newest) = (stop.clone(), scraped.clone(), newest.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(b) = scrape(port) {
                        scraped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let mut n = newest.lock().unwrap();
                        if collects_of(&b) > collects_of(&n) {
                            *n = b;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let collects = collects_of(&newest.lock().unwrap()) - collects_before;
        let scrapes = f64::from(scraped.load(std::sync::atomic::Ordering::Relaxed));
        if collects >= 5.0 && scrapes > 3.0 * collects {
            break;
        }
        assert!(
            Instant::now() < end,
            "{scrapes} scrapes for {collects} collections in 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in scrapers {
        s.join().unwrap();
    }
    let scrapes = scraped.load(std::sync::atomic::Ordering::Relaxed);
    // the newest body (highest collection count) any scraper saw
    let last = newest.lock().unwrap().clone();
    let calls = kubelet.calls() - calls_before;
    let collects = value(&last, "dcgm_otel_collects_total{source=\"simulated\"}") - collects_before;
    assert!(collects >= 5.0, "collections went on: {collects}");
    assert!(
        f64::from(scrapes) > 2.0 * collects,
        "scrapes {scrapes}, collections {collects}"
    );
    // In one body, the exporter's own count of kubelet calls moves exactly with its collections ...
    assert_eq!(
        requests(&last, "ok") - requests(&first, "ok"),
        collects,
        "kubelet calls per collection, {scrapes} scrapes"
    );
    // ... and so does what the kubelet saw (read a few ms apart from the bodies: allow a call or two).
    assert!(
        (calls as f64 - collects).abs() <= 2.0,
        "{calls} List calls for {collects} collections and {scrapes} scrapes"
    );
    // Every MIG series carries its pod.
    let attributed = series(&last, "DCGM_FI_DEV_GPU_TEMP")
        .iter()
        .filter(|l| l.contains("pod=\""))
        .count();
    assert_eq!(attributed, 32);
}

#[test]
fn hpc_job_files_become_hpc_job_labels() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let jobs = dir.path().join("jobs");
    let gi_1g = f.mig[1][2].0;
    let ex = exporter(
        dir.path(),
        "default",
        &["-k=false", "--hpc-job-mapping-dir", jobs.to_str().unwrap()],
    );
    // The directory does not exist yet: no job labels, the exporter keeps serving.
    let body = scrape_until(ex.port, "first body", |b| {
        b.contains("DCGM_FI_DEV_GPU_TEMP")
    });
    assert!(!body.contains("hpc_job="));
    std::fs::create_dir(&jobs).unwrap();
    std::fs::write(jobs.join("0"), "1001\n1002\n").unwrap();
    std::fs::write(jobs.join(format!("1.{gi_1g}")), "2001\n").unwrap();
    std::fs::write(jobs.join("README"), "not a job file\n").unwrap();
    let body = scrape_until(ex.port, "job labels", |b| b.contains("hpc_job=\"2001\""));
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            temp_line(&f, 0, None, ",hpc_job=\"1001\""),
            temp_line(&f, 0, None, ",hpc_job=\"1002\""),
            temp_line(&f, 1, Some(0), ""),
            temp_line(&f, 1, Some(1), ""),
            temp_line(&f, 1, Some(2), ",hpc_job=\"2001\""),
        ]
    );
    // A job ends: its file goes, and so do its labels.
    std::fs::remove_file(jobs.join("0")).unwrap();
    let body = scrape_until(ex.port, "job labels gone", |b| {
        !b.contains("hpc_job=\"1001\"")
    });
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP")[0],
        temp_line(&f, 0, None, "")
    );
    assert_eq!(log_count(&ex, "not a readable directory"), 1);
}

#[test]
fn pod_labels_and_uid_from_the_api_watch_through_changes_410_drops_and_outages() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![pod(
            "team-a",
            "trainer-0",
            vec![container("cuda", "nvidia.com/gpu", &[&f.gpu_uuid[0]])],
        )]),
    );
    let api = ApiServer::start("node-a");
    let uid = "5b0c1f3e-0000-4000-8000-000000000001";
    api.put_pod(
        "team-a",
        "trainer-0",
        uid,
        &[
            ("app.kubernetes.io/name", "llm"),
            ("team", "a"),
            ("secret", "x"),
        ],
    );
    let kubeconfig = api.kubeconfig(dir.path());
    let ex = exporter_env(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
            "--kubernetes-enable-pod-labels",
            "--kubernetes-pod-label-allowlist-regex",
            "^app\\.kubernetes\\.io/,^team$",
            "--kubernetes-enable-pod-uid",
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    let gpu0 = |b: &str| {
        series(b, "DCGM_FI_DEV_GPU_TEMP")
            .first()
            .cloned()
            .unwrap_or_default()
    };
    let with = |team: Option<&str>| {
        let labels = match team {
            Some(t) => format!(",app_kubernetes_io_name=\"llm\",team=\"{t}\""),
            None => String::new(),
        };
        temp_line(
            &f,
            0,
            None,
            &format!(
                "{labels}{},pod_uid=\"{uid}\"",
                pod_attrs("cuda", "team-a", "trainer-0")
            ),
        )
    };
    // Labels (allowlisted, sanitized) and the UID from the API appear.
    scrape_until(ex.port, "labels from the API", |b| {
        gpu0(b) == with(Some("a"))
    });
    // The watch asks for this node's pods only.
    let queries = api.requests();
    assert!(
        queries
            .iter()
            .all(|q| q.contains("fieldSelector=spec.nodeName%3Dnode-a")),
        "{queries:?}"
    );
    assert!(queries.iter().any(|q| q.contains("watch=1")), "{queries:?}");
    // A label changes: the watch event updates the series.
    api.put_pod(
        "team-a",
        "trainer-0",
        uid,
        &[("app.kubernetes.io/name", "llm"), ("team", "b")],
    );
    scrape_until(ex.port, "changed label", |b| gpu0(b) == with(Some("b")));
    // The watch connection drops; a change meanwhile arrives through the resumed watch (replayed).
    let (lists_before, _) = api.counts();
    api.drop_watches();
    api.put_pod(
        "team-a",
        "trainer-0",
        uid,
        &[("app.kubernetes.io/name", "llm"), ("team", "c")],
    );
    scrape_until(ex.port, "change after a dropped watch", |b| {
        gpu0(b) == with(Some("c"))
    });
    assert_eq!(
        api.counts().0,
        lists_before,
        "a dropped watch resumes without a new list"
    );
    // History compacted: 410 Gone makes the exporter list again.
    api.compact();
    api.put_pod(
        "team-a",
        "trainer-0",
        uid,
        &[("app.kubernetes.io/name", "llm"), ("team", "d")],
    );
    scrape_until(ex.port, "change after 410 Gone", |b| {
        gpu0(b) == with(Some("d"))
    });
    assert!(
        api.counts().0 > lists_before,
        "410 Gone is followed by a new list"
    );
    // Labels removed: they vanish from the series.
    api.put_pod("team-a", "trainer-0", uid, &[]);
    scrape_until(ex.port, "labels gone", |b| gpu0(b) == with(None));
    api.put_pod("team-a", "trainer-0", uid, &[("team", "e")]);
    let team_e = temp_line(
        &f,
        0,
        None,
        &format!(
            ",team=\"e\"{},pod_uid=\"{uid}\"",
            pod_attrs("cuda", "team-a", "trainer-0")
        ),
    );
    scrape_until(ex.port, "label back", |b| gpu0(b) == team_e);
    // The API goes down: collections go on with the last known labels, then (10 intervals, at least
    // 10 s) without them and without the API's UID; the kubelet mapping stays.
    api.set_mute(true);
    let collects = |b: &str| value(b, "dcgm_otel_collects_total{source=\"simulated\"}");
    let c0 = collects(&scrape(ex.port).unwrap());
    let b = scrape_until(ex.port, "collections while the API is down", |b| {
        collects(b) >= c0 + 5.0
    });
    assert_eq!(gpu0(&b), team_e, "last known labels while the API is down");
    scrape_until(ex.port, "labels dropped after the API stayed down", |b| {
        gpu0(b) == temp_line(&f, 0, None, &pod_attrs("cuda", "team-a", "trainer-0"))
    });
    // Back: a new list restores them.
    api.set_mute(false);
    scrape_until(ex.port, "labels back with the API", |b| gpu0(b) == team_e);
    assert_eq!(log_count(&ex, "Kubernetes API request failed"), 1);
    assert_eq!(log_count(&ex, "Kubernetes API still unreachable"), 1);
    assert_eq!(log_count(&ex, "Kubernetes API answers again"), 1);
    // The UIDs come from the API: no kubelet checkpoint is looked for where there is none (the
    // manifests mount none of its directory).
    assert_eq!(log_count(&ex, "pod UIDs from the Kubernetes API"), 1);
    assert_eq!(log_count(&ex, "pod UIDs unavailable"), 0);
}

#[test]
fn shared_gpu_pods_get_the_vgpu_label_and_dra_claims_their_device() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let u0 = &f.gpu_uuid[0];
    let (gi, profile, mig_uuid) = f.mig[1][1].clone();
    let mut dra_pod = pod("ml", "dra-consumer", vec![]);
    dra_pod.containers.push(ContainerResources {
        name: "main".into(),
        devices: vec![],
        dynamic_resources: vec![DynamicResource {
            claim_name: "slice-claim".into(),
            claim_namespace: "ml".into(),
            claim_resources: vec![
                ClaimResource {
                    driver_name: "gpu.nvidia.com".into(),
                    pool_name: "node-a".into(),
                    device_name: "mig-1-3".into(),
                },
                // another driver's device: ignored
                ClaimResource {
                    driver_name: "example.com/fpga".into(),
                    pool_name: "node-a".into(),
                    device_name: "fpga-0".into(),
                },
            ],
        }],
    });
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![
            pod(
                "a",
                "replica-0",
                vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::0")])],
            ),
            pod(
                "b",
                "replica-1",
                vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::1")])],
            ),
            dra_pod,
        ]),
    );
    let api = ApiServer::start("node-a");
    api.add_slice(format!(
        r#"{{"metadata":{{"name":"node-a-gpu.nvidia.com-x"}},"spec":{{"driver":"gpu.nvidia.com","nodeName":"node-a","pool":{{"name":"node-a","generation":1,"resourceSliceCount":1}},"devices":[{{"name":"gpu-0","attributes":{{"type":{{"string":"gpu"}},"uuid":{{"string":"{u0}"}}}}}},{{"name":"mig-1-3","attributes":{{"type":{{"string":"mig"}},"uuid":{{"string":"{mig_uuid}"}},"parentUUID":{{"string":"{}"}},"profile":{{"string":"{profile}"}}}}}}]}}}}"#,
        f.gpu_uuid[1]
    ));
    let kubeconfig = api.kubeconfig(dir.path());
    let ex = exporter_env(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
            "--kubernetes-virtual-gpus",
            "--kubernetes-enable-dra",
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    let body = scrape_until(ex.port, "DRA claim and GPU 0's time", |b| {
        b.contains("dra_claim_name")
            && b.lines()
                .filter(|l| {
                    l.starts_with("dcgm_otel_pod_gpu_seconds_total{gpu=\"0\"") && !l.ends_with(" 0")
                })
                .count()
                == 2
    });
    let dra = format!(
        ",container=\"main\",dra_claim_name=\"slice-claim\",dra_claim_namespace=\"ml\",dra_device_name=\"mig-1-3\",dra_driver_name=\"gpu.nvidia.com\",dra_mig_device_uuid=\"{mig_uuid}\",dra_mig_profile=\"{profile}\",dra_pool_name=\"node-a\",namespace=\"ml\",pod=\"dra-consumer\""
    );
    assert_eq!(gi, f.mig[1][1].0);
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            temp_line(
                &f,
                0,
                None,
                &(pod_attrs("w", "a", "replica-0") + ",vgpu=\"0\"")
            ),
            temp_line(
                &f,
                0,
                None,
                &(pod_attrs("w", "b", "replica-1") + ",vgpu=\"1\"")
            ),
            temp_line(&f, 1, Some(0), ""),
            temp_line(&f, 1, Some(1), &dra),
            temp_line(&f, 1, Some(2), ""),
        ]
    );
    // The per-device values are the device's, repeated on each sharing pod's series.
    let power: Vec<String> = body
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\""))
        .map(|l| l.rsplit_once(' ').unwrap().1.to_string())
        .collect();
    assert_eq!(power.len(), 2);
    assert_eq!(power[0], power[1]);
    // Cost counters: each sharing pod has half of GPU 0 (equal halves, in one body).
    let secs: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("dcgm_otel_pod_gpu_seconds_total{gpu=\"0\""))
        .map(|l| l.rsplit_once(' ').unwrap().1)
        .collect();
    assert_eq!(secs.len(), 2, "{body}");
    assert_eq!(secs[0], secs[1], "halves of GPU 0's seconds:\n{body}");
    assert!(secs[0].parse::<f64>().unwrap() > 0.0, "{body}");
}

#[test]
fn simulated_cluster_serves_pods_labels_and_cost_counters_without_a_kubelet() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let ex = exporter(
        dir.path(),
        "default",
        &["-k", "--kubernetes-enable-pod-labels"],
    );
    // The batch job of the scenario appears at collection 3.
    let body = scrape_until(ex.port, "the simulated batch job", |b| {
        series(b, "dcgm_otel_pod_gpu_energy_joules_total").len() == 5
            && series(b, "dcgm_otel_pod_gpu_idle_seconds_total").len() == 5
    });
    let labels = |app: &str, team: &str| format!(",app=\"{app}\",team=\"{team}\"");
    // GPU 0, time-sliced by llm-finetune-0 and notebook-alice, is one series under the pod listed last.
    assert_eq!(
        series(&body, "DCGM_FI_DEV_GPU_TEMP"),
        vec![
            temp_line(
                &f,
                0,
                None,
                &(labels("notebook", "research")
                    + &pod_attrs("jupyter", "research", "notebook-alice"))
            ),
            temp_line(
                &f,
                1,
                Some(0),
                &(labels("chat-api", "product")
                    + &pod_attrs("server", "inference", "chat-api-7d9f4"))
            ),
            temp_line(
                &f,
                1,
                Some(1),
                &(labels("embedder", "product")
                    + &pod_attrs("server", "inference", "embedder-5c2b8"))
            ),
            temp_line(
                &f,
                1,
                Some(2),
                &(labels("eval", "research") + &pod_attrs("eval", "batch", "eval-job-1"))
            ),
        ]
    );
    for family in [
        "dcgm_otel_pod_gpu_seconds_total",
        "dcgm_otel_pod_gpu_energy_joules_total",
        "dcgm_otel_pod_gpu_idle_seconds_total",
    ] {
        assert!(
            body.contains(&format!("# TYPE {family} counter")),
            "{family}"
        );
        assert_eq!(
            series(&body, family).len(),
            5,
            "{family}: one per pod and device"
        );
    }
    assert_eq!(log_count(&ex, "SIMULATED KUBERNETES"), 1);
}

/// Per-process pods (issue 16): two pods share GPU 0 (time-slicing); the fake libnvidia-ml reports
/// their processes (and a host process), the cgroup fixture tree under tests/fixtures/nvml/proc says
/// which pod each belongs to, the kubelet and its checkpoint name the pods. Each process series carries
/// its own pod, and each pod's split utilization is the sum of its processes' (also on its
/// `DCGM_FI_DEV_GPU_UTIL`/`FB_USED` series, with `--kubernetes-virtual-gpus`).
#[test]
fn processes_get_their_pod_from_the_cgroup_and_a_shared_gpu_splits_per_pod() {
    let dir = tempfile::tempdir().unwrap();
    let f = fleet("default");
    let sock = socket_in(dir.path());
    let u0 = &f.gpu_uuid[0];
    let _kubelet = Kubelet::start(
        &sock,
        pods(vec![
            pod(
                "a-team",
                "replica-0",
                vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::0")])],
            ),
            pod(
                "b-team",
                "replica-1",
                vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::1")])],
            ),
        ]),
    );
    let checkpoint = dir.path().join("kubelet_internal_checkpoint");
    std::fs::write(
        &checkpoint,
        format!(
            r#"{{"Data":{{"PodDeviceEntries":[{{"PodUID":"7e1c2f4a-0000-4000-8000-00000000000a","ContainerName":"w","ResourceName":"nvidia.com/gpu","DeviceIDs":{{"0":["{u0}::0"]}}}},{{"PodUID":"7e1c2f4a-0000-4000-8000-00000000000b","ContainerName":"w","ResourceName":"nvidia.com/gpu","DeviceIDs":{{"0":["{u0}::1"]}}}}]}},"Checksum":1}}"#
        ),
    )
    .unwrap();
    // The simulated GPUs without the scenario's own processes: processes come from NVML.
    let scenario = dir.path().join("gpus.yaml");
    std::fs::write(
        &scenario,
        "gpus:\n  - { model: H100-SXM5-80GB, load: training }\n  - { model: H100-SXM5-80GB, mig: [3g.40gb, 2g.20gb, 1g.10gb], load: inference }\n",
    )
    .unwrap();
    let lib = dir.path().join("libnvidia-ml.so.1");
    std::os::unix::fs::symlink(fake_lib::built("libfake_libnvml.so"), &lib).unwrap();
    let proc_root = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nvml/proc");
    let ex = exporter(
        dir.path(),
        scenario.to_str().unwrap(),
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
            "--kubernetes-enable-pod-uid",
            "--kubelet-device-checkpoint",
            checkpoint.to_str().unwrap(),
            "--collect-processes",
            "--nvml-library",
            lib.to_str().unwrap(),
            "--proc-root",
            proc_root,
            "--kubernetes-virtual-gpus",
        ],
    );
    let body = scrape_until(ex.port, "process pods", |b| {
        b.contains("pod=\"replica-1\",pod_uid=\"7e1c2f4a-0000-4000-8000-00000000000b\"} ")
    });
    let dev = format!(
        "gpu=\"0\",UUID=\"{u0}\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"{MODEL}\",Hostname=\"node-a\""
    );
    let mem: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("dcgm_otel_process_gpu_memory_bytes{gpu=\"0\""))
        .collect();
    assert_eq!(
        mem,
        vec![
            format!("dcgm_otel_process_gpu_memory_bytes{{{dev},pid=\"4242\",process_name=\"python3\",container=\"w\",namespace=\"a-team\",pod=\"replica-0\",pod_uid=\"7e1c2f4a-0000-4000-8000-00000000000a\"}} 32212254720"),
            format!("dcgm_otel_process_gpu_memory_bytes{{{dev},pid=\"4377\",process_name=\"python3\",container=\"w\",namespace=\"b-team\",pod=\"replica-1\",pod_uid=\"7e1c2f4a-0000-4000-8000-00000000000b\"}} 12884901888"),
            format!("dcgm_otel_process_gpu_memory_bytes{{{dev},pid=\"5120\",process_name=\"nvidia-smi\"}} 67108864"),
        ]
    );
    // The shared GPU's per-pod utilization is the sum of each pod's processes (55 and 25), not the
    // device's utilization repeated; power splits by SM share (55 and 25 of the 80 % all processes use).
    let util: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("dcgm_otel_pod_gpu_utilization_percent{"))
        .collect();
    assert_eq!(
        util,
        vec![
            format!("dcgm_otel_pod_gpu_utilization_percent{{{dev},namespace=\"a-team\",pod=\"replica-0\"}} 55"),
            format!("dcgm_otel_pod_gpu_utilization_percent{{{dev},namespace=\"b-team\",pod=\"replica-1\"}} 25"),
        ]
    );
    let power = |pod: &str| {
        value(
            &body,
            &format!(
                "dcgm_otel_pod_gpu_power_watts{{{dev},namespace=\"{}\",pod=\"{pod}\"}}",
                if pod == "replica-0" {
                    "a-team"
                } else {
                    "b-team"
                }
            ),
        )
    };
    let device_power = body
        .lines()
        .find(|l| l.starts_with(&format!("DCGM_FI_DEV_POWER_USAGE{{{dev}")))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v.parse::<f64>().unwrap())
        .unwrap();
    assert!((power("replica-0") - device_power * 55.0 / 80.0).abs() < 1e-6);
    assert!((power("replica-1") - device_power * 25.0 / 80.0).abs() < 1e-6);
    // A process in a pod on a MIG instance nobody lists: its pod_uid from the cgroup only.
    assert!(body.contains("pid=\"6001\",process_name=\"tritonserver\",pod_uid=\"7e1c2f4a-0000-4000-8000-00000000000c\"} 21474836480"), "{body}");
    // With --kubernetes-virtual-gpus, each pod's DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_GPU_UTIL are its
    // processes' (found by the pod UIDs of the cgroups and the checkpoint), the device's value on a
    // series without pod labels.
    let drv = ",DCGM_FI_DRIVER_VERSION=\"550.144.03\"";
    for (metric, own) in [
        ("DCGM_FI_DEV_FB_USED", ["30720", "12288"]),
        ("DCGM_FI_DEV_GPU_UTIL", ["55", "25"]),
    ] {
        let got: Vec<&str> = body
            .lines()
            .filter(|l| l.starts_with(&format!("{metric}{{{dev}")))
            .collect();
        let device = got[0].rsplit_once(' ').unwrap().1;
        assert_eq!(
            got,
            vec![
                format!("{metric}{{{dev}{drv}}} {device}"),
                format!("{metric}{{{dev}{drv},container=\"w\",namespace=\"a-team\",pod=\"replica-0\",pod_uid=\"7e1c2f4a-0000-4000-8000-00000000000a\",vgpu=\"0\"}} {}", own[0]),
                format!("{metric}{{{dev}{drv},container=\"w\",namespace=\"b-team\",pod=\"replica-1\",pod_uid=\"7e1c2f4a-0000-4000-8000-00000000000b\",vgpu=\"1\"}} {}", own[1]),
            ],
            "{body}"
        );
    }
}

/// A hostile API server on 127.0.0.1 (HTTPS with the shared test CA): `answer(head, conn)` answers each
/// request. Returns its port and the request heads it received.
fn hostile_api(
    answer: impl Fn(&str, &mut api_server::Conn) + Send + Sync + 'static,
) -> (u16, Arc<Mutex<Vec<String>>>) {
    hostile_api_with(api_server::Pki::shared(), answer)
}

/// [`hostile_api`] serving a certificate of `pki`.
fn hostile_api_with(
    pki: &'static api_server::Pki,
    answer: impl Fn(&str, &mut api_server::Conn) + Send + Sync + 'static,
) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = heads.clone();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (seen, answer) = (seen.clone(), answer.clone());
            std::thread::spawn(move || {
                let Some(mut conn) = api_server::accept_tls_with(pki, conn) else {
                    return;
                };
                let Some(head) = api_server::read_head(&mut conn) else {
                    return;
                };
                seen.lock().unwrap().push(head.clone());
                answer(&head, &mut conn);
            });
        }
    });
    (port, heads)
}

/// Answer a request with a JSON body (`Connection: close`).
fn json_reply(conn: &mut api_server::Conn, body: &str) {
    let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    let _ = conn.write_all(body.as_bytes());
    let _ = conn.flush();
}

/// A pod of `node` as the API server writes it.
fn pod_object(node: &str, name: &str, rv: usize) -> String {
    format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"{rv}","labels":{{"team":"a"}}}},"spec":{{"nodeName":"{node}"}}}}"#
    )
}

/// An API server whose pod list (`watch = false`) or pod watch (`watch = true`) is one endless body
/// without a newline; returns the kubeconfig naming it and where the bytes the exporter accepted
/// before it closed the first such connection will be.
fn endless_api(dir: &Path, watch: bool) -> (PathBuf, Arc<Mutex<Option<usize>>>) {
    let accepted: Arc<Mutex<Option<usize>>> = Arc::default();
    let got = accepted.clone();
    let (port, _) = hostile_api(move |head, conn| {
        if head.contains("watch=") != watch {
            json_reply(
                conn,
                r#"{"kind":"List","metadata":{"resourceVersion":"5"},"items":[]}"#,
            );
            return;
        }
        let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0usize;
        // 4 times the larger bound: the old exporter read all of it.
        while sent < 4 * MAX_LIST_PAGE {
            if write!(conn, "{:x}\r\n", chunk.len()).is_err()
                || conn.write_all(&chunk).is_err()
                || conn.write_all(b"\r\n").is_err()
            {
                break;
            }
            sent += chunk.len();
        }
        got.lock().unwrap().get_or_insert(sent);
    });
    let kubeconfig = api_server::kubeconfig(dir, port);
    (kubeconfig, accepted)
}

/// Start the exporter against [`endless_api`], wait for the failure counter `verb`/`error`, and return
/// the bytes the exporter accepted before it cut the connection.
fn cut_after(watch: bool) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let sock = socket_in(dir.path());
    let _kubelet = Kubelet::start(&sock, pods(vec![]));
    let (kubeconfig, accepted) = endless_api(dir.path(), watch);
    let ex = exporter_env(
        dir.path(),
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
            "--kubernetes-enable-pod-labels",
        ],
        &[("KUBECONFIG", kubeconfig.to_str().unwrap())],
    );
    let verb = if watch { "watch" } else { "list" };
    let failed = format!(
        "dcgm_otel_kubernetes_api_requests_total{{resource=\"pods\",verb=\"{verb}\",result=\"error\"}}"
    );
    let body = scrape_until(ex.port, &format!("a failed pods {verb}"), |b| {
        value(b, &failed) >= 1.0
    });
    assert!(
        body.contains("DCGM_FI_DEV_GPU_TEMP{"),
        "still serving:\n{body}"
    );
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(n) = *accepted.lock().unwrap() {
            return n;
        }
        assert!(Instant::now() < end, "the {verb} body was never cut");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Regression (soak bounds, issue 18): a watch event that never ends (an API server or proxy streaming
/// one line without a newline) used to be buffered without limit. The exporter now cuts the stream
/// after `MAX_WATCH_LINE`, counts it as a failed watch and keeps serving.
#[test]
fn endless_watch_event_is_cut_not_buffered() {
    let sent = cut_after(true);
    // Socket buffers on both sides hold a few MiB beyond what the exporter read.
    assert!(
        sent < 8 * MAX_WATCH_LINE,
        "{sent} bytes of one watch event accepted (bound {MAX_WATCH_LINE})"
    );
}

/// Regression (soak bounds, issue 18): a list page was read whole, however large. Past
/// `MAX_LIST_PAGE` the list now fails (counted) and the exporter keeps serving.
#[test]
fn endless_list_page_is_cut_not_buffered() {
    let sent = cut_after(false);
    assert!(
        sent < 2 * MAX_LIST_PAGE,
        "{sent} bytes of one list page accepted (bound {MAX_LIST_PAGE})"
    );
}

/// The exporter with `-k`, pod labels and an empty fake kubelet, against the API server `kubeconfig`
/// names; `env`: more variables.
fn against_api(dir: &Path, kubeconfig: &Path, env: &[(&str, &str)]) -> (Exporter, Kubelet) {
    let sock = socket_in(dir);
    let kubelet = Kubelet::start(&sock, pods(vec![]));
    let mut all = vec![("KUBECONFIG", kubeconfig.to_str().unwrap())];
    all.extend_from_slice(env);
    let ex = exporter_env(
        dir,
        "default",
        &[
            "-k",
            "--pod-resources-kubelet-socket",
            sock.to_str().unwrap(),
            "--kubernetes-enable-pod-labels",
        ],
        &all,
    );
    (ex, kubelet)
}

/// The exporter's peak resident memory (`VmHWM`), MiB.
fn peak_rss_mib(ex: &Exporter) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", ex.child.id())).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024.0
}

/// Wait (30 s at most) until the exporter's log has a line with `needle`; how many it has.
fn logged(ex: &Exporter, needle: &str) -> usize {
    let end = Instant::now() + Duration::from_secs(30);
    while log_count(ex, needle) == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    log_count(ex, needle)
}

fn api_self_metric(body: &str, name: &str, labels: &str) -> f64 {
    value(body, &format!("{name}{{resource=\"pods\",{labels}}}"))
}

/// Write watch event lines as one chunk each; false once the connection is gone.
fn events(conn: &mut api_server::Conn, lines: impl Iterator<Item = String>) -> bool {
    for line in lines {
        let line = format!("{line}\n");
        if write!(conn, "{:x}\r\n{line}\r\n", line.len()).is_err() {
            return false;
        }
    }
    conn.flush().is_ok()
}

/// Keep a watch open with a bookmark a second until the exporter goes.
fn hold(conn: &mut api_server::Conn) {
    let bookmark = r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"1"}}}"#;
    while events(conn, std::iter::once(bookmark.to_string())) {
        std::thread::sleep(Duration::from_secs(1));
    }
}

const CHUNKED: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";

/// Issue 35: a watch streaming pods without end (4.5 GB in 21 s) grew the cache without bound, and kept
/// pods of other nodes. Now at most `MAX_CACHE_OBJECTS` are kept, other nodes' pods are dropped, both
/// counted, and memory stays small.
#[test]
fn an_endless_watch_is_held_to_the_cache_bounds_and_this_node() {
    let dir = tempfile::tempdir().unwrap();
    let n = 3 * MAX_CACHE_OBJECTS;
    let (port, _) = hostile_api(move |head, conn| {
        if !head.contains("watch=") {
            return json_reply(conn, r#"{"metadata":{"resourceVersion":"1"},"items":[]}"#);
        }
        let _ = write!(conn, "{CHUNKED}");
        let lines = (0..n).map(|i| {
            let node = if i % 4 == 0 { "node-b" } else { "node-a" };
            let pod = pod_object(node, &format!("p{i}"), i + 2);
            format!(r#"{{"type":"ADDED","object":{pod}}}"#)
        });
        if events(conn, lines) {
            hold(conn);
        }
    });
    let kubeconfig = api_server::kubeconfig(dir.path(), port);
    let (ex, _kubelet) = against_api(dir.path(), &kubeconfig, &[]);
    let dropped = "dcgm_otel_kubernetes_api_objects_dropped_total";
    let body = scrape_until(ex.port, "every event handled, the drops counted", |b| {
        value(
            b,
            "dcgm_otel_kubernetes_api_watch_events_total{resource=\"pods\"}",
        ) >= n as f64
            && api_self_metric(b, dropped, "reason=\"cache_full\"") >= 1.0
    });
    let objects = value(&body, "dcgm_otel_kubernetes_api_objects{resource=\"pods\"}");
    assert_eq!(objects, MAX_CACHE_OBJECTS as f64, "objects kept");
    assert_eq!(
        api_self_metric(&body, dropped, "reason=\"other_node\""),
        (n / 4) as f64
    );
    assert_eq!(
        api_self_metric(&body, dropped, "reason=\"cache_full\""),
        (n - n / 4 - MAX_CACHE_OBJECTS) as f64
    );
    assert_eq!(logged(&ex, "Kubernetes API cache full"), 1);
    let peak = peak_rss_mib(&ex);
    eprintln!("endless watch: peak RSS {peak:.1} MiB");
    assert!(peak < 256.0, "peak RSS {peak:.1} MiB");
}

/// Issue 35: continue tokens without end (2.6 GB) grew the list being built without bound. A list past
/// `MAX_CACHE_OBJECTS` objects is refused (counted as a failed list) and nothing of it is kept.
#[test]
fn endless_continue_tokens_are_refused_at_the_cache_bound() {
    let dir = tempfile::tempdir().unwrap();
    // Bounded here so that the unbounded exporter of before finished too (and failed the test).
    let pages = 3 * MAX_CACHE_OBJECTS / LIST_LIMIT;
    let (port, heads) = hostile_api(move |head, conn| {
        if head.contains("watch=") {
            let _ = write!(conn, "{CHUNKED}");
            return hold(conn);
        }
        let page: usize = head
            .split("continue=p")
            .nth(1)
            .and_then(|r| r.split(['&', ' ']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let items: Vec<String> = (0..LIST_LIMIT)
            .map(|i| pod_object("node-a", &format!("p{page}-{i}"), 1))
            .collect();
        let cont = if page + 1 < pages {
            format!(r#","continue":"p{}""#, page + 1)
        } else {
            String::new()
        };
        json_reply(
            conn,
            &format!(
                r#"{{"metadata":{{"resourceVersion":"1"{cont}}},"items":[{}]}}"#,
                items.join(",")
            ),
        );
    });
    let kubeconfig = api_server::kubeconfig(dir.path(), port);
    let (ex, _kubelet) = against_api(dir.path(), &kubeconfig, &[]);
    let requests = "dcgm_otel_kubernetes_api_requests_total";
    let body = scrape_until(ex.port, "the list refused", |b| {
        api_self_metric(b, requests, "verb=\"list\",result=\"error\"") >= 1.0
    });
    assert_eq!(
        value(&body, "dcgm_otel_kubernetes_api_objects{resource=\"pods\"}"),
        0.0
    );
    // Each list stopped at the page that passed the bound.
    let heads = heads.lock().unwrap().clone();
    let pages = heads.iter().filter(|h| !h.contains("watch=")).count();
    let lists = heads
        .iter()
        .filter(|h| !h.contains("watch=") && !h.contains("continue="))
        .count();
    assert!(
        pages <= lists * (MAX_CACHE_OBJECTS / LIST_LIMIT + 1),
        "{pages} pages in {lists} lists"
    );
    assert_eq!(
        logged(
            &ex,
            "list refused: more than 10000 objects or 33554432 bytes"
        ),
        1
    );
    let peak = peak_rss_mib(&ex);
    eprintln!("endless continue tokens: peak RSS {peak:.1} MiB");
    assert!(peak < 256.0, "peak RSS {peak:.1} MiB");
}

/// Issue 35: a 60 MiB list page (below the old 64 MiB bound) was read and turned into a JSON tree: 714
/// MiB at the peak. Past `MAX_LIST_PAGE` (16 MiB) a page is refused, and what is read is never a tree.
#[test]
fn a_huge_list_page_is_refused_with_memory_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let labels: Vec<String> = (0..24)
        .map(|i| format!(r#""label-{i}":"{}""#, "v".repeat(60)))
        .collect();
    let labels = labels.join(",");
    let mut page = String::from(r#"{"metadata":{"resourceVersion":"1"},"items":["#);
    let mut i = 0;
    while page.len() < 60 << 20 {
        if i > 0 {
            page.push(',');
        }
        page.push_str(&format!(
            r#"{{"metadata":{{"name":"p{i}","namespace":"ns","uid":"u{i}","labels":{{{labels}}}}},"spec":{{"nodeName":"node-a"}}}}"#
        ));
        i += 1;
    }
    page.push_str("]}");
    let page = Arc::new(page);
    let (port, _) = hostile_api(move |head, conn| {
        if head.contains("watch=") {
            let _ = write!(conn, "{CHUNKED}");
            return hold(conn);
        }
        json_reply(conn, &page);
    });
    let kubeconfig = api_server::kubeconfig(dir.path(), port);
    let (ex, _kubelet) = against_api(dir.path(), &kubeconfig, &[]);
    let requests = "dcgm_otel_kubernetes_api_requests_total";
    let body = scrape_until(ex.port, "the huge page refused", |b| {
        api_self_metric(b, requests, "verb=\"list\",result=\"error\"") >= 1.0
    });
    assert_eq!(
        value(&body, "dcgm_otel_kubernetes_api_objects{resource=\"pods\"}"),
        0.0
    );
    let peak = peak_rss_mib(&ex);
    eprintln!("60 MiB list page: peak RSS {peak:.1} MiB");
    assert!(peak < 128.0, "peak RSS {peak:.1} MiB");
}

/// Issue 35: a kubeconfig naming a plain `http://` server with a token sent the token in clear. It is
/// refused with one line; no request reaches the server, collections go on without pod metadata.
#[test]
fn a_token_is_never_sent_over_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = heads.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            if let Some(head) = api_server::read_head(&mut conn) {
                seen.lock().unwrap().push(head);
            }
        }
    });
    let kubeconfig = api_server::kubeconfig_with(
        dir.path(),
        &format!("http://127.0.0.1:{port}"),
        None,
        Some(api_server::TOKEN),
    );
    let (ex, _kubelet) = against_api(dir.path(), &kubeconfig, &[]);
    let collects = |b: &str| value(b, "dcgm_otel_collects_total{source=\"simulated\"}");
    scrape_until(ex.port, "five collections", |b| collects(b) >= 5.0);
    assert!(
        heads.lock().unwrap().is_empty(),
        "{:?}",
        heads.lock().unwrap()
    );
    assert_eq!(
        logged(
            &ex,
            "is plain http: a bearer token or client certificate is never sent without TLS"
        ),
        1
    );
}

/// Issue 35: the client trusted the system roots beside the cluster's CA, so any certificate of a
/// public CA (here one named by `SSL_CERT_FILE`, which the system roots honour) passed for the API
/// server. With a CA in the kubeconfig that CA alone is trusted: no request, hence no token, reaches a
/// server of another CA. Without one, the system roots are used.
#[test]
fn the_clusters_ca_alone_is_trusted_when_given() {
    let dir = tempfile::tempdir().unwrap();
    let other: &'static api_server::Pki = Box::leak(Box::new(api_server::Pki::new("a public CA")));
    let system_roots = dir.path().join("system-roots.pem");
    std::fs::write(&system_roots, &other.ca_pem).unwrap();
    let (port, heads) = hostile_api_with(other, |head, conn| {
        if head.contains("watch=") {
            let _ = write!(conn, "{CHUNKED}");
            return hold(conn);
        }
        json_reply(conn, r#"{"metadata":{"resourceVersion":"1"},"items":[]}"#);
    });
    let server = format!("https://127.0.0.1:{port}");
    let env = [("SSL_CERT_FILE", system_roots.to_str().unwrap())];
    let requests = "dcgm_otel_kubernetes_api_requests_total";
    {
        let kubeconfig = api_server::kubeconfig_with(
            dir.path(),
            &server,
            Some(&api_server::Pki::shared().ca_pem),
            Some(api_server::TOKEN),
        );
        let (ex, _kubelet) = against_api(dir.path(), &kubeconfig, &env);
        scrape_until(ex.port, "a failed list", |b| {
            api_self_metric(b, requests, "verb=\"list\",result=\"error\"") >= 1.0
        });
        assert!(
            heads.lock().unwrap().is_empty(),
            "{:?}",
            heads.lock().unwrap()
        );
    }
    // Without a CA in the kubeconfig the system roots apply (and reach this server).
    let kubeconfig =
        api_server::kubeconfig_with(dir.path(), &server, None, Some(api_server::TOKEN));
    let (ex, _kubelet) = against_api(dir.path(), &kubeconfig, &env);
    scrape_until(ex.port, "a list through the system roots", |b| {
        api_self_metric(b, requests, "verb=\"list\",result=\"ok\"") >= 1.0
    });
    assert!(heads.lock().unwrap()[0].contains("Bearer t0k3n"));
}

/// Pod labels whose names clash with an identity label (`gpu`, `device`, `Hostname`, `pid`) or begin
/// with a digit: a second label of one name makes Prometheus reject the whole scrape, and a name that
/// begins with a digit is not a label name. The clashing ones are left out, the other gets a leading `_`.
#[test]
fn pod_labels_never_repeat_an_identity_label_or_begin_with_a_digit() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("clash.yaml");
    std::fs::write(
        &scenario,
        "gpus:\n  - model: H100-SXM5-80GB\n\
         pods:\n  - { namespace: ml, pod: train-0, container: main, labels: { gpu: \"true\", device: x, Hostname: y, pid: \"1\", 3scale.net/tier: gold, team: a }, devices: [{ gpu: 0 }] }\n\
         processes:\n  - { pid: 4242, name: python3, gpu: 0, memory_mib: 1024, sm_utilization: 50, pod: \"ml/train-0\" }\n",
    )
    .unwrap();
    let ex = exporter(
        dir.path(),
        scenario.to_str().unwrap(),
        &[
            "-k",
            "--kubernetes-enable-pod-labels",
            "--collect-processes",
        ],
    );
    let body = scrape_until(ex.port, "pod-labelled series", |b| {
        b.contains("_3scale_net_tier=\"gold\"") && b.contains("dcgm_otel_process_gpu_memory_bytes{")
    });
    let mut checked = 0;
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("team=\"a\""))
    {
        let labels = &line[line.find('{').unwrap() + 1..line.rfind('}').unwrap()];
        let mut names: Vec<&str> = labels
            .split("\",")
            .map(|kv| kv.split_once('=').unwrap().0)
            .collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a label name repeats in {line}");
        assert!(line.contains("_3scale_net_tier=\"gold\""), "{line}");
        assert!(
            !line.contains("gpu=\"true\"")
                && !line.contains("device=\"x\"")
                && !line.contains("pid=\"1\""),
            "{line}"
        );
        checked += 1;
    }
    assert!(checked > 10, "{body}");
    // The pod label `pid` is a label the exporter writes itself (on the process series): left out.
    let process = series(&body, "dcgm_otel_process_gpu_memory_bytes");
    assert_eq!(process.len(), 1, "{body}");
    assert!(
        process[0].contains("pid=\"4242\"") && !process[0].contains("pid=\"1\""),
        "{process:?}"
    );
}

/// Issue 35: a pod labelled `pod: victim-pod, namespace: team-b` (and `job`, `instance`, `le`,
/// `quantile`, `exported_pod`) wrote its GPU series and its cost counters as team-b's victim-pod, and
/// passed Prometheus' own labels through. Such labels are left out (counted): every series of the pod,
/// the cost counters included, keeps its own pod and namespace, and the victim's counters are its own.
#[test]
fn a_pods_labels_never_replace_its_identity_or_reserved_labels() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("hijack.yaml");
    std::fs::write(
        &scenario,
        "gpus:\n  - model: H100-SXM5-80GB\n  - model: H100-SXM5-80GB\n\
         pods:\n  - { namespace: ml, pod: train-0, container: main, labels: { pod: victim-pod, namespace: team-b, job: hijack, instance: x, le: \"1\", quantile: \"0.5\", exported_pod: victim-pod, team: a }, devices: [{ gpu: 0 }] }\n\
         \x20 - { namespace: team-b, pod: victim-pod, container: main, devices: [{ gpu: 1 }] }\n",
    )
    .unwrap();
    let ex = exporter(
        dir.path(),
        scenario.to_str().unwrap(),
        &["-k", "--kubernetes-enable-pod-labels"],
    );
    let cost = [
        "dcgm_otel_pod_gpu_seconds_total",
        "dcgm_otel_pod_gpu_energy_joules_total",
    ];
    let body = scrape_until(ex.port, "cost counters of both pods", |b| {
        cost.iter().all(|f| series(b, f).len() == 2)
    });
    let temp = series(&body, "DCGM_FI_DEV_GPU_TEMP");
    assert_eq!(temp.len(), 2, "{temp:?}");
    assert!(
        temp[0].ends_with(",team=\"a\",container=\"main\",namespace=\"ml\",pod=\"train-0\"}"),
        "{}",
        temp[0]
    );
    for family in cost {
        let s = series(&body, family);
        let (attacker, victim): (Vec<&String>, Vec<&String>) =
            s.iter().partition(|l| l.contains("team=\"a\""));
        assert_eq!(attacker.len(), 1, "{s:?}");
        assert!(
            attacker[0].contains(",namespace=\"ml\",pod=\"train-0\""),
            "{}",
            attacker[0]
        );
        assert_eq!(victim.len(), 1, "{s:?}");
        assert!(
            victim[0].contains("namespace=\"team-b\",pod=\"victim-pod\"")
                && victim[0].contains("gpu=\"1\""),
            "the victim's counter is its own GPU's: {}",
            victim[0]
        );
    }
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let labels = line.split_once('{').map_or("", |(_, rest)| rest);
        for name in ["job", "instance", "le", "quantile", "exported_pod"] {
            assert!(
                !labels.starts_with(&format!("{name}=")) && !labels.contains(&format!(",{name}=")),
                "{name} in {line}"
            );
        }
    }
    assert_eq!(
        value(&body, "dcgm_otel_kubernetes_pod_labels_refused_total"),
        7.0
    );
    assert_eq!(log_count(&ex, "pod label left out"), 1);
}

/// Every label name dcgm-otel writes (those of the golden files) is one a pod label cannot take.
#[test]
fn every_label_the_exporter_writes_is_reserved_from_pod_labels() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let mut names = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "prom") {
            continue;
        }
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let Some((_, rest)) = line.split_once('{') else {
                continue;
            };
            if line.starts_with('#') {
                continue;
            }
            for kv in rest.split("\",") {
                if let Some((name, _)) = kv.split_once("=\"") {
                    names.insert(name.trim_start_matches(',').to_string());
                }
            }
        }
    }
    assert!(names.len() > 20, "{names:?}");
    let free: Vec<&String> = names.iter().filter(|n| !reserved(n)).collect();
    assert!(
        free.is_empty(),
        "label names a pod label could take: {free:?}"
    );
}

/// Go-style booleans as dcgm-exporter's manifests write them: `--kubernetes=true`,
/// `DCGM_EXPORTER_KUBERNETES=1` or `T` turn Kubernetes on (the simulated cluster's pods appear);
/// `-k=false` turns it off even when the variable says on (a flag beats its variable).
#[test]
fn kubernetes_on_and_off_with_go_style_booleans() {
    let dir = tempfile::tempdir().unwrap();
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], bool);
    let cases: [Case; 5] = [
        (&["--kubernetes=true"], &[], true),
        (&[], &[("DCGM_EXPORTER_KUBERNETES", "1")], true),
        (&[], &[("DCGM_EXPORTER_KUBERNETES", "T")], true),
        (&["-k=false"], &[("DCGM_EXPORTER_KUBERNETES", "1")], false),
        (&[], &[("DCGM_EXPORTER_KUBERNETES", "0")], false),
    ];
    for (args, env, on) in cases {
        let ex = exporter_env(dir.path(), "default", args, env);
        let body = scrape_until(ex.port, "GPU series", |b| {
            b.contains("DCGM_FI_DEV_GPU_TEMP{")
        });
        assert_eq!(
            body.contains("pod=\"llm-finetune-0\""),
            on,
            "{args:?} {env:?}:\n{}",
            series(&body, "DCGM_FI_DEV_GPU_TEMP").join("\n")
        );
    }
}

/// `--kubernetes-virtual-gpus` with per-process readings (issue 23), as dcgm-exporter ≥ 4.5: on a device
/// pods hold, `DCGM_FI_DEV_GPU_UTIL` and `DCGM_FI_DEV_FB_USED` keep the device's value on a series
/// without pod labels, and each pod's series carries the sum over its own processes (SM %, MiB), 0 for a
/// pod with none; every other family repeats the device's value on each pod. The simulated cluster:
/// GPU 0 time-sliced by three pods (two with processes, one idle, and a host process), GPU 1 held whole
/// by a pod without processes, a MIG instance of GPU 2 held by a pod with one process.
#[test]
fn virtual_gpus_write_each_pods_own_utilization_and_framebuffer() {
    let dir = tempfile::tempdir().unwrap();
    let gpus = "gpus:\n  - { model: H100-SXM5-80GB, load: training }\n  - { model: H100-SXM5-80GB, load: inference }\n  - { model: H100-SXM5-80GB, mig: [3g.40gb, 2g.20gb, 1g.10gb], load: inference }\n";
    let scenario = dir.path().join("shared.yaml");
    std::fs::write(&scenario, gpus).unwrap();
    let f = fleet(scenario.to_str().unwrap());
    let (gi, _, _) = f.mig[2][0].clone();
    std::fs::write(
        &scenario,
        format!(
            "{gpus}pods:\n\
             \x20 - {{ namespace: a-team, pod: train-0, container: main, devices: [{{ gpu: 0 }}] }}\n\
             \x20 - {{ namespace: b-team, pod: train-1, container: main, devices: [{{ gpu: 0 }}] }}\n\
             \x20 - {{ namespace: c-team, pod: idle-0, container: main, devices: [{{ gpu: 0 }}] }}\n\
             \x20 - {{ namespace: d-team, pod: whole-0, container: main, devices: [{{ gpu: 1 }}] }}\n\
             \x20 - {{ namespace: e-team, pod: mig-0, container: main, devices: [{{ gpu: 2, gpu_i_id: {gi} }}] }}\n\
             processes:\n\
             \x20 - {{ pid: 4242, name: python3, gpu: 0, memory_mib: 30720, sm_utilization: 40, pod: a-team/train-0 }}\n\
             \x20 - {{ pid: 4243, name: python3, gpu: 0, memory_mib: 2048, sm_utilization: 15, pod: a-team/train-0 }}\n\
             \x20 - {{ pid: 4377, name: python3, gpu: 0, memory_mib: 12288, sm_utilization: 25, pod: b-team/train-1 }}\n\
             \x20 - {{ pid: 5120, name: nvidia-smi, gpu: 0, memory_mib: 64, sm_utilization: 5 }}\n\
             \x20 - {{ pid: 6001, name: tritonserver, gpu: 2, gpu_i_id: {gi}, memory_mib: 20480, sm_utilization: 30, pod: e-team/mig-0 }}\n"
        ),
    )
    .unwrap();
    // No cgroup of a real process on this machine may re-attribute the scenario's pids.
    let proc_root = dir.path().join("proc");
    std::fs::create_dir(&proc_root).unwrap();
    let ex = exporter(
        dir.path(),
        scenario.to_str().unwrap(),
        &[
            "-k",
            "--kubernetes-virtual-gpus",
            "--collect-processes",
            "--proc-root",
            proc_root.to_str().unwrap(),
        ],
    );
    let body = scrape_until(ex.port, "per-pod framebuffer", |b| {
        b.contains("pod=\"mig-0\"} 20480") && b.contains("dcgm_otel_process_gpu_memory_bytes{")
    });
    let labels = |gpu: usize, mig: Option<usize>| {
        temp_line(&f, gpu, mig, "")
            .trim_start_matches("DCGM_FI_DEV_GPU_TEMP{")
            .trim_end_matches('}')
            .to_string()
    };
    let pods0 = [
        pod_attrs("main", "a-team", "train-0") + ",vgpu=\"0\"",
        pod_attrs("main", "b-team", "train-1") + ",vgpu=\"1\"",
        pod_attrs("main", "c-team", "idle-0") + ",vgpu=\"2\"",
    ];
    let whole = pod_attrs("main", "d-team", "whole-0");
    let mig = pod_attrs("main", "e-team", "mig-0");
    let lines = |metric: &str, gpu: usize, mig: Option<usize>| -> Vec<String> {
        let prefix = format!("{metric}{{{},", labels(gpu, mig));
        let exact = format!("{metric}{{{}}} ", labels(gpu, mig));
        body.lines()
            .filter(|l| l.starts_with(&prefix) || l.starts_with(&exact))
            .map(str::to_string)
            .collect()
    };
    // The device's own value, read from its series without pod labels.
    let device = |metric: &str, gpu: usize, mig: Option<usize>| -> String {
        let exact = format!("{metric}{{{}}} ", labels(gpu, mig));
        body.lines()
            .find_map(|l| l.strip_prefix(&exact))
            .unwrap_or_else(|| panic!("no device-level {metric} on GPU {gpu}\n{body}"))
            .to_string()
    };
    let line = |metric: &str, gpu: usize, mig: Option<usize>, attrs: &str, v: &str| {
        format!("{metric}{{{}{attrs}}} {v}", labels(gpu, mig))
    };
    for (metric, own) in [
        ("DCGM_FI_DEV_FB_USED", ["32768", "12288", "0"]),
        ("DCGM_FI_DEV_GPU_UTIL", ["55", "25", "0"]),
    ] {
        let dev = device(metric, 0, None);
        let mut want = vec![line(metric, 0, None, "", &dev)];
        want.extend(
            pods0
                .iter()
                .zip(own)
                .map(|(p, v)| line(metric, 0, None, p, v)),
        );
        assert_eq!(lines(metric, 0, None), want, "{body}");
        // A whole GPU one pod holds, the pod without processes.
        let dev = device(metric, 1, None);
        assert_eq!(
            lines(metric, 1, None),
            vec![
                line(metric, 1, None, "", &dev),
                line(metric, 1, None, &whole, "0")
            ]
        );
    }
    // MIG: the instance's framebuffer, the pod's process on it.
    let dev = device("DCGM_FI_DEV_FB_USED", 2, Some(0));
    assert_eq!(
        lines("DCGM_FI_DEV_FB_USED", 2, Some(0)),
        vec![
            line("DCGM_FI_DEV_FB_USED", 2, Some(0), "", &dev),
            line("DCGM_FI_DEV_FB_USED", 2, Some(0), &mig, "20480"),
        ]
    );
    // Every other family: the device's value on each pod's series, no series without pod labels.
    for metric in ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"] {
        let got = lines(metric, 0, None);
        let v = got[0].rsplit_once(' ').unwrap().1;
        let want: Vec<String> = pods0.iter().map(|p| line(metric, 0, None, p, v)).collect();
        assert_eq!(got, want, "{body}");
    }
    // `sum by (pod)` of the framebuffer is each pod's processes' memory.
    let pod_of = |l: &str| -> String {
        l.split("pod=\"")
            .nth(1)
            .map(|r| r.split('"').next().unwrap().to_string())
            .unwrap_or_default()
    };
    let mut fb: std::collections::BTreeMap<String, f64> = Default::default();
    for l in body
        .lines()
        .filter(|l| l.starts_with("DCGM_FI_DEV_FB_USED{"))
    {
        let pod = pod_of(l);
        if !pod.is_empty() {
            *fb.entry(pod).or_default() += l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap();
        }
    }
    let mut procs: std::collections::BTreeMap<String, f64> = Default::default();
    for l in body
        .lines()
        .filter(|l| l.starts_with("dcgm_otel_process_gpu_memory_bytes{"))
    {
        let pod = pod_of(l);
        if !pod.is_empty() {
            *procs.entry(pod).or_default() +=
                l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap() / 1048576.0;
        }
    }
    for pod in ["idle-0", "whole-0"] {
        procs.insert(pod.into(), 0.0);
    }
    assert_eq!(fb, procs);
    assert_eq!(fb["train-0"], 32768.0);
}

/// Every family written with a shared device's labels is written once for it, as its DCGM fields are:
/// the `DCGM_EXP_*` families (XID and clock-event counts, health, P2P) of the `demo` scenario's GPU 0,
/// which two pods share, have one series per label set of their own, under one pod.
#[test]
fn dcgm_exp_families_of_a_shared_gpu_are_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let ex = exporter(dir.path(), "demo", &["-k"]);
    let body = scrape_until(ex.port, "the incident families with pods", |b| {
        b.contains("DCGM_EXP_GPU_HEALTH_STATUS{gpu=\"0\"") && b.contains("pod=\"")
    });
    let mut seen = std::collections::BTreeMap::new();
    let mut pods = std::collections::BTreeSet::new();
    for line in body
        .lines()
        .filter(|l| l.starts_with("DCGM_EXP_") && l.contains("{gpu=\"0\","))
    {
        let (series, _) = line.rsplit_once(' ').unwrap();
        // The series without its pod: two pods' copies of one reading would collide here.
        let mut without_pod = String::new();
        for label in series.split(',') {
            match label.split_once('=') {
                Some(("pod", v)) => {
                    pods.insert(v.to_string());
                }
                Some(("namespace" | "container", _)) => {}
                _ => without_pod.push_str(label),
            }
        }
        *seen.entry(without_pod).or_insert(0) += 1;
    }
    assert!(seen.len() >= 3, "{body}");
    assert!(seen.values().all(|n| *n == 1), "{seen:#?}");
    assert_eq!(pods.len(), 1, "{pods:?}");
}
