//! Device selection end to end through libdcgm: the built binary reads the fake libdcgm
//! (`tests/fake-libdcgm`) with each form the `-d` grammar has (`f`, `g`, `i`, `g:<ids>`, `i:<ids>` with
//! lists and ranges, `g+i`, `g:<ids>+i:<ids>`, the `DCGM_EXPORTER_DEVICES_STR` spelling) and with `-s` /
//! `-p` for NvSwitches and CPUs. For each, the exact set of entities the series belong to is compared
//! (present and absent), and the fake's call log must show that only the selected entities were put into
//! a watched group and read at each collection: a selection that filtered the output but still watched
//! every GPU (work DCGM does on every collection) fails here. Discovery's live reads (`flags=1`: the MIG
//! profile names of every instance) are not watches and are not counted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use crate::support::common::{run_to_exit, scrape, terminate};
use crate::support::fake_lib::Fake;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// `dcgm_field_entity_group_t` of the call log.
const FE_GPU: u32 = 1;
const FE_SWITCH: u32 = 3;

/// A `DCGM_FE_LINK` entity id: the packed `dcgm_link_t` of port `port` of GPU / switch `owner`.
fn link(owner_group: u32, owner: u32, port: u32) -> String {
    format!("6:{}", owner_group | (port << 8) | (owner << 24))
}

/// The identity labels of a series line, e.g. `gpu=1,GPU_I_ID=3` or `nvswitch=nvswitch1,nvlink=0`.
fn identity(line: &str) -> Option<String> {
    let (_, rest) = line.split_once('{')?;
    let (labels, _) = rest.rsplit_once('}')?;
    let mut found: BTreeMap<&str, &str> = BTreeMap::new();
    for pair in labels.split("\",") {
        let Some((k, v)) = pair.split_once("=\"") else {
            continue;
        };
        found.insert(k, v.trim_end_matches('"'));
    }
    let keys = ["gpu", "GPU_I_ID", "nvswitch", "cpu", "nvlink", "cpucore"];
    let parts: Vec<String> = keys
        .iter()
        .filter_map(|k| found.get(k).map(|v| format!("{k}={v}")))
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// The entities the `DCGM_FI_*` series of a body belong to.
fn identities(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with("DCGM_FI_"))
        .filter_map(identity)
        .collect()
}

/// Parse `key=value` words of a call-log line.
fn kv(line: &str) -> BTreeMap<&str, &str> {
    line.split(' ').filter_map(|w| w.split_once('=')).collect()
}

/// What the call log says was watched and read: (entities added to a group, entities read by a
/// collection's latest-values calls), each as `entityGroup:entity`.
fn watched_and_read(calls: &[String]) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut added = BTreeSet::new();
    let mut read = BTreeSet::new();
    for c in calls {
        let f = kv(c);
        if c.starts_with("dcgmGroupAddEntity ") {
            assert_eq!(f["rc"], "0", "{c}");
            added.insert(format!("{}:{}", f["entityGroup"], f["entity"]));
        } else if c.starts_with("dcgmEntitiesGetLatestValues ") && f["flags"] == "0" {
            read.extend(f["entities"].split(',').map(str::to_string));
        } else if c.starts_with("dcgmEntityGetLatestValues ") {
            read.insert(format!("{}:{}", f["entityGroup"], f["entity"]));
        }
        // No watch on one of DCGM's special "all entities" groups (ids 0x7fffffff and up).
        if c.starts_with("dcgmWatchFields ") {
            let group: u64 = f["group"].parse().unwrap();
            assert!(group < 0x7fff_fff0, "a watch of a special group: {c}");
        }
    }
    (added, read)
}

/// One selection: the flags, the entities expected in the call log and the series' identities.
struct Case {
    scenario: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    entities: BTreeSet<String>,
    series: BTreeSet<String>,
}

fn set<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> BTreeSet<String> {
    items.into_iter().map(Into::into).collect()
}

fn case(args: &[&str], entities: &[&str], series: &[&str]) -> Case {
    Case {
        scenario: "default",
        args: args.iter().map(|a| a.to_string()).collect(),
        env: Vec::new(),
        entities: set(entities.iter().copied()),
        series: set(series.iter().copied()),
    }
}

fn scenario_counters(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("src/source/sim/scenarios/{name}-counters.csv"))
        .display()
        .to_string()
}

/// Run the exporter on the fake with `c`, compare its series and its call log with the case.
fn check(c: &Case) {
    let fake = Fake::new();
    let mut args: Vec<&str> = vec!["-c", "60000"];
    args.extend(c.args.iter().map(String::as_str));
    let mut env: Vec<(&str, &str)> = vec![("FAKE_DCGM_SCENARIO", c.scenario)];
    env.extend(c.env.iter().map(|(k, v)| (*k, v.as_str())));
    let e = fake.start(&args, &env);
    let body = scrape(e.port);
    let what = format!("{} {:?} {:?}", c.scenario, c.args, c.env);
    assert_eq!(
        identities(&body),
        c.series,
        "{what}: the series belong to other entities than selected"
    );
    terminate(e);
    let calls = fake.calls();
    let (added, read) = watched_and_read(&calls);
    assert_eq!(
        added, c.entities,
        "{what}: entities put into watched groups"
    );
    assert_eq!(read, c.entities, "{what}: entities read by the collection");
}

/// The default scenario: GPU 0 whole, GPU 1 split into MIG instances with DCGM entity ids 8, 9, 10
/// (GPU instance ids 1, 3, 7).
#[test]
fn gpu_and_mig_selection_watches_and_serves_only_what_is_selected() {
    let gpu0 = "gpu=0";
    let gpu1 = "gpu=1";
    let [gi8, gi9, gi10] = ["gpu=1,GPU_I_ID=1", "gpu=1,GPU_I_ID=3", "gpu=1,GPU_I_ID=7"];
    let cases = [
        // Flex (the default): a GPU with MIG instances is monitored through them.
        case(&[], &["1:0", "4:8", "4:9", "4:10"], &[gpu0, gi8, gi9, gi10]),
        case(
            &["-d", "f"],
            &["1:0", "4:8", "4:9", "4:10"],
            &[gpu0, gi8, gi9, gi10],
        ),
        // Every GPU as a whole, the MIG GPU included; no instance.
        case(&["-d", "g"], &["1:0", "1:1"], &[gpu0, gpu1]),
        case(&["-d", "i"], &["4:8", "4:9", "4:10"], &[gi8, gi9, gi10]),
        case(&["-d", "g:0"], &["1:0"], &[gpu0]),
        case(&["--devices", "g:1"], &["1:1"], &[gpu1]),
        // `i` takes DCGM entity ids, not GPU instance ids (entity 9 is GPU instance 3).
        case(&["-d", "i:9"], &["4:9"], &[gi9]),
        case(&["-d", "i:8-9"], &["4:8", "4:9"], &[gi8, gi9]),
        case(&["-d", "i:8,10"], &["4:8", "4:10"], &[gi8, gi10]),
        case(&["-d", "g:0+i:10"], &["1:0", "4:10"], &[gpu0, gi10]),
        case(
            &["-d", "g+i"],
            &["1:0", "1:1", "4:8", "4:9", "4:10"],
            &[gpu0, gpu1, gi8, gi9, gi10],
        ),
        case(
            &["-d", "g:0,1+i:9"],
            &["1:0", "1:1", "4:9"],
            &[gpu0, gpu1, gi9],
        ),
        Case {
            env: vec![("DCGM_EXPORTER_DEVICES_STR", "i:10".into())],
            ..case(&[], &["4:10"], &[gi10])
        },
    ];
    for c in &cases {
        check(c);
    }
}

/// An id that does not exist stops start-up with one line and exit 2, through libdcgm too.
#[test]
fn absent_mig_entity_id_is_refused_through_libdcgm() {
    let fake = Fake::new();
    let env = fake.ld_env(&[]);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, err) = run_to_exit(&["-d", "i:11"], &env);
    assert_eq!(code, 2, "{err}");
    // Start-up's own progress lines come first (the library loaded, discovery); then the one error.
    let errors: Vec<&str> = err.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(
        errors,
        ["dcgm-otel: device selection asks for GPU instance (DCGM entity id) 11, which does not exist (present: 8,9,10)"],
        "{err}"
    );
}

/// hgx-h100 (8 GPUs with 18 NvLinks each, 4 NvSwitches with 18 ports up): `-d` picks the GPUs and
/// with them their NvLinks, `-s` the switches and the ports of the selected switches.
#[test]
fn switch_selection_watches_only_the_selected_switches_and_ports() {
    let csv = scenario_counters("hgx-h100");
    let gpu_links = |gpu: u32| (0..18).map(move |p| link(FE_GPU, gpu, p));
    let switch_ports =
        |sw: u32, ports: std::ops::Range<u32>| ports.map(move |p| link(FE_SWITCH, sw, p));
    // GPU 2 with its links; switch 1 with ports 0-2.
    let mut entities = set(["1:2", "3:1"]);
    entities.extend(gpu_links(2));
    entities.extend(switch_ports(1, 0..3));
    let series = set([
        "gpu=2",
        "nvswitch=nvswitch1",
        "nvswitch=nvswitch1,nvlink=0",
        "nvswitch=nvswitch1,nvlink=1",
        "nvswitch=nvswitch1,nvlink=2",
    ]);
    check(&Case {
        scenario: "hgx-h100",
        args: ["-f", &csv, "-d", "g:2", "-s", "g:1+i:0-2"]
            .map(String::from)
            .to_vec(),
        env: Vec::new(),
        entities,
        series,
    });
    // `-s g`: every switch, none of their ports; `-d i` on GPUs without MIG: no GPU, no GPU link.
    check(&Case {
        scenario: "hgx-h100",
        args: ["-f", &csv, "-d", "i", "-s", "g"]
            .map(String::from)
            .to_vec(),
        env: Vec::new(),
        entities: set(["3:0", "3:1", "3:2", "3:3"]),
        series: set((0..4).map(|s| format!("nvswitch=nvswitch{s}"))),
    });
}

/// grace-hopper (2 GH200, 2 Grace CPUs of 72 cores): `-p g:1+i:72,73` is CPU 1 and two of its cores.
#[test]
fn cpu_selection_watches_only_the_selected_cpus_and_cores() {
    let csv = scenario_counters("grace-hopper");
    check(&Case {
        scenario: "grace-hopper",
        args: ["-f", &csv, "-d", "g:0", "-p", "g:1+i:72,73"]
            .map(String::from)
            .to_vec(),
        env: Vec::new(),
        entities: set(["1:0", "7:1", "8:72", "8:73"]),
        series: set(["gpu=0", "cpu=1", "cpu=1,cpucore=72", "cpu=1,cpucore=73"]),
    });
}
