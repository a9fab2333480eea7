//! dcgm-otel beside NVIDIA's dcgm-exporter (release 4.5.3-4.8.2) on the same fake libdcgm fleets, with
//! the same counters CSV files and flags, with and without the same fake kubelet: their `/metrics`
//! bodies compared series by series (`support::exposition_diff`: HELP/TYPE, label names and order,
//! label values, value text, absent values, which series exist). Every difference must be covered by
//! an entry of the deliberate-difference list (`tests/fixtures/dcgm-exporter/differences.yaml`, shown in
//! docs/metrics.md), and every entry must still occur.
//!
//! The oracle is a live dcgm-exporter when there is a binary (`DCGM_EXPORTER_BIN`, or the pinned build
//! `tests/run-all.sh` makes when the Go module proxy serves it), else the committed captures
//! `tests/golden/dcgm-exporter/<case>.prom`; the test says which. With a live one, each capture must
//! still be what it writes (`UPDATE_GOLDEN=1` re-records them: `tests/peers/dcgm-exporter/record.sh`).
//!
//! Both exporters read the same values: the fake's `stop_at_collection` fault stops the simulated
//! fleet at a given collection, so dcgm-exporter (one DCGM read per scrape) and dcgm-otel (one per
//! collect interval) end up on the same state however often each polled. `DCGM_EXPORTER_LOG=1` prints
//! dcgm-exporter's log of each case, `DCGM_EXPORTER_DIFFS=1` every difference and the entry covering it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::common::{get, in_ci};
use crate::support::dcgm_exporter::{self, Oracle};
use crate::support::exposition_diff::{compare, Body, Difference, DifferenceList};
use crate::support::fake_lib::Fake;
use crate::support::kubelet::{container, pod, pods, Kubelet, Reply};
use dcgm_otel::source::sim::{Fleet, Scenario};

/// `NODE_NAME` of both exporters and both fakes: the fleet's UUIDs derive from it (and the seed).
const NODE: &str = "golden-host";

/// The collect interval both exporters run with (the fleet's step; it is stopped anyway).
const INTERVAL_MS: &str = "200";

/// The counters file a case gives both exporters.
#[derive(Clone, Copy)]
enum Counters {
    /// Each exporter's own default: dcgm-exporter's shipped `default-counters.csv` of the release (what
    /// its image loads), dcgm-otel's built-in one (no `-f`).
    Defaults,
    /// This file (repository path) for both.
    File(&'static str),
}

/// What the fake kubelet serves in a case.
#[derive(Clone, Copy)]
enum Pods {
    None,
    /// GPU 0 time-sliced by two pods (`<uuid>::0`, `<uuid>::1`), two of GPU 1's MIG instances each held
    /// by a pod (by MIG UUID), GPU 1's third instance free.
    SharedAndMig,
}

#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    what: &'static str,
    /// `FAKE_DCGM_SCENARIO`: a built-in name, or a repository path.
    scenario: &'static str,
    counters: Counters,
    args: &'static [&'static str],
    pods: Pods,
    /// The collection the fleet stops at (1: the first poll).
    collection: u64,
}

const DEFAULT_CSV: &str = "tests/fixtures/dcgm/dcgm-exporter-csv/4.5.3-4.8.2/default-counters.csv";
const DCP_CSV: &str = "tests/fixtures/dcgm/dcgm-exporter-csv/4.5.3-4.8.2/dcp-metrics-included.csv";
const COMPAT_CSV: &str =
    "tests/fixtures/dcgm/dcgm-exporter-csv/4.5.3-4.8.2/1.x-compatibility-metrics.csv";
const OWN_CSV: &str = "src/counters/default-counters.csv";
const ENTITIES_CSV: &str = "tests/fixtures/dcgm-exporter/counters/entities.csv";
const INCIDENTS_CSV: &str = "tests/fixtures/dcgm-exporter/counters/incidents.csv";

const CASES: &[Case] = &[
    Case {
        name: "defaults",
        what: "each exporter's default counters on 2x H100 (GPU 1 split into 3 MIG instances)",
        scenario: "default",
        counters: Counters::Defaults,
        args: &[],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "dcgm-otel-counters",
        what: "dcgm-otel's built-in default-counters.csv given to both",
        scenario: "default",
        counters: Counters::File(OWN_CSV),
        args: &[],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "dcp-metrics",
        what: "dcgm-exporter's dcp-metrics-included.csv (the GPU Operator's choice)",
        scenario: "default",
        counters: Counters::File(DCP_CSV),
        args: &[],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "compat-1x",
        what: "dcgm-exporter's 1.x-compatibility-metrics.csv with the 1.x namespace (-o)",
        scenario: "default",
        counters: Counters::File(COMPAT_CSV),
        args: &["-o"],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "remote-host-engine",
        what: "the default counters through a remote host engine (-r gpu-node-7:5555)",
        scenario: "default",
        counters: Counters::File(DEFAULT_CSV),
        args: &["-r", "gpu-node-7:5555"],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "remote-loopback",
        what: "a host engine on the same node reached through -r localhost:5555",
        scenario: "default",
        counters: Counters::File(DCP_CSV),
        args: &["-r", "localhost:5555"],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "hgx-h100",
        what: "8x H100 with NvLinks and 4 NvSwitches (switch and port fields)",
        scenario: "hgx-h100",
        counters: Counters::File(ENTITIES_CSV),
        args: &[],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "nvlink-pair",
        what: "two GPUs' NvLinks, per-link fields (tests/fixtures/scenarios/nvlink-pair.yaml)",
        scenario: "tests/fixtures/scenarios/nvlink-pair.yaml",
        counters: Counters::File(ENTITIES_CSV),
        args: &[],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "grace-hopper",
        what: "2x GH200 with their Grace CPUs and CPU cores",
        scenario: "grace-hopper",
        counters: Counters::File(ENTITIES_CSV),
        args: &[],
        pods: Pods::None,
        collection: 1,
    },
    Case {
        name: "incidents",
        what:
            "XIDs, clock events and health incidents after 31 collections (the incidents scenario)",
        scenario: "incidents",
        counters: Counters::File(INCIDENTS_CSV),
        args: &[],
        pods: Pods::None,
        collection: 31,
    },
    Case {
        name: "kubernetes",
        what: "-k: GPU 0 time-sliced by two pods, MIG instances of GPU 1 held by pods",
        scenario: "default",
        counters: Counters::File(DEFAULT_CSV),
        args: &["-k"],
        pods: Pods::SharedAndMig,
        collection: 1,
    },
    Case {
        name: "kubernetes-virtual-gpus",
        what: "-k --kubernetes-virtual-gpus on the same pods",
        scenario: "default",
        counters: Counters::File(DEFAULT_CSV),
        args: &["-k", "--kubernetes-virtual-gpus"],
        pods: Pods::SharedAndMig,
        collection: 1,
    },
];

fn repo(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The fleet a case's scenario makes (seed 1, node `NODE`): its GPU UUIDs and, per GPU, its MIG instances' UUIDs.
fn fleet_uuids(scenario: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let name = if scenario.contains('/') {
        repo(scenario).display().to_string()
    } else {
        scenario.to_string()
    };
    let f = Fleet::new(&Scenario::load(&name).unwrap(), 1, NODE);
    let gpus = f.gpus().iter().map(|g| g.identity.uuid.clone()).collect();
    let migs = f
        .gpus()
        .iter()
        .map(|g| g.instances.iter().map(|m| m.uuid.clone()).collect())
        .collect();
    (gpus, migs)
}

fn kubelet_reply(case: &Case) -> Option<Reply> {
    match case.pods {
        Pods::None => None,
        Pods::SharedAndMig => {
            let (gpus, migs) = fleet_uuids(case.scenario);
            let u0 = &gpus[0];
            Some(pods(vec![
                pod(
                    "team-a",
                    "trainer-0",
                    vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::0")])],
                ),
                pod(
                    "team-b",
                    "trainer-1",
                    vec![container("w", "nvidia.com/gpu", &[&format!("{u0}::1")])],
                ),
                pod(
                    "serving",
                    "llm-0",
                    vec![container(
                        "server",
                        "nvidia.com/mig-3g.40gb",
                        &[&migs[1][0]],
                    )],
                ),
                pod(
                    "serving",
                    "embed-0",
                    vec![container(
                        "server",
                        "nvidia.com/mig-2g.20gb",
                        &[&migs[1][1]],
                    )],
                ),
            ]))
        }
    }
}

/// The scenario as the fakes take it (a fixture as its absolute path).
fn scenario_value(case: &Case) -> String {
    if case.scenario.contains('/') {
        repo(case.scenario).display().to_string()
    } else {
        case.scenario.to_string()
    }
}

/// The fake fleet's environment (both fakes, both exporters).
fn fleet_env(case: &Case) -> Vec<(String, String)> {
    let scenario = scenario_value(case);
    [
        ("NODE_NAME", NODE.to_string()),
        ("FAKE_DCGM_SCENARIO", scenario.clone()),
        ("FAKE_DCGM_SEED", "1".to_string()),
        (
            "FAKE_DCGM_FAULTS",
            format!("stop_at_collection={}", case.collection),
        ),
        ("FAKE_NVML_SCENARIO", scenario),
        ("FAKE_NVML_SEED", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The flags both exporters get (`socket`: the fake kubelet's, for a case with pods). dcgm-exporter's
/// defaults case names its shipped file, which is what it loads from its image.
fn flags(case: &Case, exporter: bool, socket: Option<&Path>) -> Vec<String> {
    let mut args = vec!["-c".to_string(), INTERVAL_MS.to_string()];
    match case.counters {
        Counters::File(path) => args.extend(["-f".into(), repo(path).display().to_string()]),
        Counters::Defaults if exporter => {
            args.extend(["-f".into(), repo(DEFAULT_CSV).display().to_string()])
        }
        Counters::Defaults => {}
    }
    args.extend(case.args.iter().map(|a| a.to_string()));
    if let Some(s) = socket {
        // dcgm-exporter (grpc-go) sends the socket path as the HTTP/2 :authority, which the fake
        // kubelet's server refuses when it holds a '/': it runs in the socket's directory and gets
        // the bare file name.
        let s = if exporter {
            s.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        } else {
            s.display().to_string()
        };
        args.extend(["--pod-resources-kubelet-socket".into(), s]);
    }
    args
}

fn stopped(fake: &Fake) -> bool {
    fake.calls()
        .iter()
        .any(|c| c.starts_with("fleet stopped at collection"))
}

/// `/metrics` once the fleet has stopped and a whole poll cycle ran after: `poll_again` makes one
/// (a scrape for dcgm-exporter; for dcgm-otel, waiting for its next collection).
fn settled_body(fake: &Fake, what: &str, mut poll: impl FnMut() -> String) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !stopped(fake) {
        assert!(
            Instant::now() < deadline,
            "{what}: the fake fleet never stopped"
        );
        poll();
    }
    poll()
}

fn scrape(port: u16) -> String {
    let r = get(port, "/metrics").unwrap();
    assert_eq!(r.status, 200, "/metrics answered {}", r.status);
    r.text()
}

/// dcgm-otel's `dcgm_otel_collects_total`.
fn collects(body: &str) -> u64 {
    body.lines()
        .find(|l| l.starts_with("dcgm_otel_collects_total"))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

fn run_otel(case: &Case, socket: Option<&Path>) -> String {
    let fake = Fake::new();
    let args = flags(case, false, socket);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = fleet_env(case);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let e = fake.start(&args, &env);
    settled_body(&fake, case.name, || {
        // The next collection after this body's.
        let seen = collects(&scrape(e.port));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let body = scrape(e.port);
            if collects(&body) > seen {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{}: dcgm-otel stopped collecting",
                case.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

fn run_exporter(bin: &Path, case: &Case, dir: &Path, socket: Option<&Path>) -> String {
    let fake = Fake::new();
    let mut env = fake.ld_env(&[]);
    env.extend(fleet_env(case));
    let args = flags(case, true, socket);
    let ex = dcgm_exporter::start(bin, &args, &env, dir);
    let body = settled_body(&fake, case.name, || match get(ex.port, "/metrics") {
        Ok(r) if r.status == 200 => r.text(),
        other => panic!(
            "{}: dcgm-exporter's /metrics failed ({:?}); its log:\n{}",
            case.name,
            other.map(|r| r.status),
            ex.log()
        ),
    });
    if std::env::var_os("DCGM_EXPORTER_LOG").is_some() {
        eprintln!("---- {} dcgm-exporter log:\n{}", case.name, ex.log());
    }
    body
}

/// The capture's provenance lines and the body.
fn capture_text(case: &Case, body: &str) -> String {
    let env: Vec<String> = fleet_env(case)
        .iter()
        .filter(|(k, _)| !k.starts_with("FAKE_NVML"))
        .map(|(k, v)| format!("{k}={}", v.replace(env!("CARGO_MANIFEST_DIR"), ".")))
        .collect();
    let flags: Vec<String> = flags(case, true, None)
        .iter()
        .map(|a| a.replace(env!("CARGO_MANIFEST_DIR"), "."))
        .collect();
    let pods = match case.pods {
        Pods::None => String::new(),
        Pods::SharedAndMig => {
            " --pod-resources-kubelet-socket <fake kubelet: GPU 0 shared by team-a/trainer-0 and \
             team-b/trainer-1 (::0, ::1), GPU 1's 3g.40gb held by serving/llm-0, its 2g.20gb by serving/embed-0>"
                .to_string()
        }
    };
    format!(
        "# dcgm-exporter {} (NVIDIA/dcgm-exporter {}, go-dcgm {}) on the fake libdcgm (tests/fake-libdcgm)\n\
         # case {}: {}\n\
         # environment: {}\n\
         # flags: --disable-startup-validate {}{pods}\n\
         # the body of a scrape after the fleet stopped; recorded by tests/peers/dcgm-exporter/record.sh, \
         compared by tests/e2e/dcgm_exporter_diff.rs\n{body}",
        dcgm_exporter::RELEASE,
        dcgm_exporter::COMMIT,
        dcgm_exporter::GO_DCGM_COMMIT,
        case.name,
        case.what,
        env.join(" "),
        flags.join(" "),
    )
}

/// dcgm-exporter's body for a case: live (checked against, or re-recorded as, the capture) or the capture.
fn exporter_body(oracle: &Oracle, case: &Case, dir: &Path, socket: Option<&Path>) -> String {
    let path = dcgm_exporter::capture_path(case.name);
    let Oracle::Live(bin) = oracle else {
        return std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (record it with a dcgm-exporter binary: tests/peers/dcgm-exporter/record.sh)",
                path.display()
            )
        });
    };
    let body = run_exporter(bin, case, dir, socket);
    // The same release on the same fleet: the capture must still be what it writes (family order
    // aside, which dcgm-exporter does not keep).
    let stale = std::fs::read_to_string(&path).map(|captured| {
        compare(
            &Body::parse(&captured).unwrap(),
            &Body::parse(&body).unwrap(),
        )
    });
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        assert!(!in_ci(), "UPDATE_GOLDEN is set in CI");
        // Rewritten only when it differs (a re-record would otherwise reorder every file).
        if stale.as_ref().map_or(true, |d| !d.is_empty()) {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, capture_text(case, &body)).unwrap();
            eprintln!("recorded {}", path.display());
        }
    } else if let Ok(stale) = stale {
        assert!(
            stale.is_empty(),
            "{}: the live dcgm-exporter no longer writes the capture (UPDATE_GOLDEN=1 re-records it; \
             below, \"dcgm-exporter\" is the capture and \"dcgm-otel\" the live run):\n{}",
            path.display(),
            stale
                .iter()
                .take(10)
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    body
}

/// Both bodies of a case.
fn run_case(oracle: &Oracle, case: &Case) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let _kubelet = kubelet_reply(case).map(|r| Kubelet::start(&socket, r));
    let socket = _kubelet.as_ref().map(|_| socket.as_path());
    let exporter = exporter_body(oracle, case, dir.path(), socket);
    let otel = run_otel(case, socket);
    (exporter, otel)
}

fn difference_list() -> DifferenceList {
    let path = repo("tests/fixtures/dcgm-exporter/differences.yaml");
    DifferenceList::parse(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_difference_from_dcgm_exporter_is_on_the_list_and_every_entry_occurs() {
    let oracle = dcgm_exporter::oracle();
    eprintln!("{}", dcgm_exporter::describe(&oracle));
    let list = difference_list();
    for entry in &list.0 {
        for case in &entry.cases {
            assert!(
                CASES.iter().any(|c| c.name == case),
                "differences.yaml entry {}: no case {case:?}",
                entry.id
            );
        }
    }
    // Two cases at a time (each runs two exporters).
    let results: Vec<(&Case, Vec<Difference>)> = CASES
        .chunks(2)
        .flat_map(|pair| {
            let handles: Vec<_> = pair
                .iter()
                .map(|case| {
                    let oracle = oracle.clone();
                    std::thread::spawn(move || run_case(&oracle, case))
                })
                .collect();
            pair.iter()
                .zip(handles)
                .map(|(case, h)| {
                    let (exp, otel) = h.join().unwrap();
                    let exp = Body::parse(&exp).unwrap();
                    let otel = Body::parse(&otel).unwrap();
                    assert!(
                        !exp.families.is_empty() && !otel.families.is_empty(),
                        "{}: an empty body",
                        case.name
                    );
                    (case, compare(&exp, &otel))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    // DCGM_EXPORTER_DIFFS=1: every difference with the entry that covers it (for reviewing the list).
    let show_all = std::env::var_os("DCGM_EXPORTER_DIFFS").is_some();
    let mut unlisted = Vec::new();
    for (case, diffs) in &results {
        eprintln!("case {}: {} difference(s)", case.name, diffs.len());
        for d in diffs {
            let entry = list.covering(case.name, d);
            if show_all {
                eprintln!("  [{}] {d}", entry.map_or("NOT LISTED", |e| e.id.as_str()));
            }
            if entry.is_none() {
                unlisted.push(format!("  {}: {d}", case.name));
            }
        }
    }
    let gone: Vec<String> = list
        .0
        .iter()
        .filter(|e| {
            !results
                .iter()
                .any(|(case, diffs)| diffs.iter().any(|d| e.covers(case.name, d)))
        })
        .map(|e| format!("  {}: {}", e.id, e.what))
        .collect();
    assert!(
        unlisted.is_empty() && gone.is_empty(),
        "{}\ndifferences not on tests/fixtures/dcgm-exporter/differences.yaml ({}):\n{}\n\
         entries that no longer occur (remove them):\n{}",
        dcgm_exporter::describe(&oracle),
        unlisted.len(),
        unlisted
            .iter()
            .take(400)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        gone.join("\n")
    );
}

/// docs/metrics.md shows the list as it is (between its two markers; `UPDATE_GOLDEN=1` rewrites it).
#[test]
fn docs_metrics_renders_the_difference_list() {
    let page = std::fs::read_to_string(repo("docs/metrics.md")).unwrap();
    let begin = "<!-- differences: tests/fixtures/dcgm-exporter/differences.yaml -->\n";
    let end = "<!-- end of differences -->";
    let start = page
        .find(begin)
        .expect("docs/metrics.md lacks the differences marker")
        + begin.len();
    let stop = start
        + page[start..]
            .find(end)
            .expect("docs/metrics.md lacks the end marker");
    let expected = difference_list().markdown();
    if std::env::var_os("UPDATE_GOLDEN").is_some() && !in_ci() {
        let page = format!("{}{expected}{}", &page[..start], &page[stop..]);
        std::fs::write(repo("docs/metrics.md"), page).unwrap();
        eprintln!("rewrote the differences table of docs/metrics.md (UPDATE_GOLDEN)");
        return;
    }
    assert_eq!(
        &page[start..stop],
        expected,
        "docs/metrics.md's table differs from differences.yaml; it should read:\n{expected}"
    );
}

/// Every capture names the release and commit it came from, and parses.
#[test]
fn captures_carry_their_provenance() {
    for case in CASES {
        let path = dcgm_exporter::capture_path(case.name);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            text.starts_with(&format!(
                "# dcgm-exporter {} (NVIDIA/dcgm-exporter {}",
                dcgm_exporter::RELEASE,
                dcgm_exporter::COMMIT
            )),
            "{}: no provenance header",
            path.display()
        );
        let body = Body::parse(&text).unwrap();
        assert!(!body.families.is_empty(), "{}: no family", path.display());
    }
}
