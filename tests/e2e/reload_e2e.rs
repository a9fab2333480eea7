//! Hot reload of the counters CSV and GPU bind/unbind, end to end through the built binary: the exact
//! Kubernetes ConfigMap update (a `..data` symlink swapped by rename) with a scraper running throughout,
//! a bad new file, SIGHUP on a file whose identity did not change, a reload through libdcgm (the fake)
//! that re-watches, and a GPU unbound and bound again through the fake's bind/unbind event.
//! "Within two intervals" is counted in collections (`dcgm_otel_collects_total`), not in wall time.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::fake_lib::Fake;
use crate::support::otlp::{resources, Receiver};
use common::{scrape, start, terminate};

/// The value of a self-metric line that starts with `prefix` (0 when absent).
fn metric(body: &str, prefix: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit_once(' '))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

fn collects(body: &str) -> f64 {
    metric(body, "dcgm_otel_collects_total{")
}

fn reloads(body: &str, result: &str) -> f64 {
    metric(
        body,
        &format!("dcgm_otel_config_reloads_total{{result=\"{result}\"}} "),
    )
}

fn has_family(body: &str, name: &str) -> bool {
    body.lines().any(|l| l.starts_with(&format!("{name}{{")))
}

/// Scrape until `cond` holds; panics after 30 s.
fn scrape_until(port: u16, what: &str, cond: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = scrape(port);
        if cond(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const V1: &str =
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature.\nDCGM_FI_DEV_POWER_USAGE, gauge, Power.\n";
const V2: &str =
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature.\nDCGM_FI_DEV_SM_CLOCK, gauge, SM clock.\n";

/// A ConfigMap volume as the kubelet lays it out: `<key> -> ..data/<key>`, `..data -> ..<timestamp>`.
struct ConfigMapVolume {
    dir: tempfile::TempDir,
    generation: u32,
}

impl ConfigMapVolume {
    fn new(content: &str) -> ConfigMapVolume {
        let dir = tempfile::tempdir().unwrap();
        let mut v = ConfigMapVolume { dir, generation: 0 };
        let ts = v.write_generation(content);
        std::os::unix::fs::symlink(&ts, v.dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink(
            "..data/default-counters.csv",
            v.dir.path().join("default-counters.csv"),
        )
        .unwrap();
        v
    }

    fn write_generation(&mut self, content: &str) -> String {
        self.generation += 1;
        let ts = format!(
            "..2026_11_24_10_00_0{}.12345678{}",
            self.generation, self.generation
        );
        std::fs::create_dir(self.dir.path().join(&ts)).unwrap();
        std::fs::write(
            self.dir.path().join(&ts).join("default-counters.csv"),
            content,
        )
        .unwrap();
        ts
    }

    /// The kubelet's atomic update: new timestamped directory, `..data_tmp` symlink to it, renamed
    /// over `..data`, old directory removed.
    fn update(&mut self, content: &str) {
        let old = std::fs::read_link(self.dir.path().join("..data")).unwrap();
        let ts = self.write_generation(content);
        let tmp = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&ts, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.path().join("..data")).unwrap();
        std::fs::remove_dir_all(self.dir.path().join(old)).unwrap();
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("default-counters.csv")
    }
}

/// The ConfigMap swap with a scraper running throughout, OTLP on. Returns the exporter's stderr.
fn configmap_case() -> String {
    let mut volume = ConfigMapVolume::new(V1);
    let csv = volume.path().display().to_string();
    let receiver = Receiver::http(0, None);
    let endpoint = format!("http://{}", receiver.addr);
    let args = [
        "--simulate",
        "-c",
        "1000",
        "-f",
        &csv,
        "--otlp-endpoint",
        &endpoint,
        "--otlp-protocol",
        "http/protobuf",
    ];
    let e = start(&args, &[]);
    let family = has_family;
    let before = scrape_until(e.port, "a collection", |b| collects(b) >= 1.0);
    assert!(family(&before, "DCGM_FI_DEV_POWER_USAGE"));
    assert!(!family(&before, "DCGM_FI_DEV_SM_CLOCK"));

    // A scraper runs throughout: every body has data.
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let stop = stop.clone();
        let port = e.port;
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Acquire) {
                let body = scrape(port);
                assert!(
                    body.lines().any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP")),
                    "a scrape without data:\n{body}"
                );
                n += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            n
        })
    };
    let collects_at_swap = collects(&scrape(e.port));
    volume.update(V2);
    let after = scrape_until(e.port, "the new field set", |b| {
        family(b, "DCGM_FI_DEV_SM_CLOCK") && !family(b, "DCGM_FI_DEV_POWER_USAGE")
    });
    stop.store(true, Ordering::Release);
    let scrapes = scraper.join().unwrap();
    assert!(scrapes > 0);
    // The new set arrived within two collections of the swap.
    assert!(
        collects(&after) - collects_at_swap <= 2.0,
        "{} collections after the swap",
        collects(&after) - collects_at_swap
    );
    assert_eq!(reloads(&after, "success"), 1.0);
    assert_eq!(reloads(&after, "failure"), 0.0);
    // OTLP follows: the removed field is no longer pushed, the new one is.
    let sent = receiver.requests().len();
    let req = receiver.nth_or_later(sent + 2);
    let names: std::collections::BTreeSet<String> = resources(&req)
        .into_iter()
        .flat_map(|(_, m)| m.into_keys())
        .collect();
    assert!(names.contains("DCGM_FI_DEV_SM_CLOCK"), "{names:?}");
    assert!(!names.contains("DCGM_FI_DEV_POWER_USAGE"), "{names:?}");
    terminate(e)
}

#[test]
fn configmap_symlink_swap_reloads_without_a_gap() {
    let err = configmap_case();
    assert_eq!(err.matches("counters reloaded").count(), 1, "{err}");
    assert!(
        err.contains("trigger=\"the counters file changed\""),
        "{err}"
    );
}

#[test]
fn a_bad_new_file_keeps_the_running_set_and_is_reported_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.csv");
    std::fs::write(&path, V1).unwrap();
    let csv = path.display().to_string();
    let e = start(&["--simulate", "-c", "500", "-f", &csv], &[]);
    scrape_until(e.port, "a collection", |b| collects(b) >= 1.0);
    // Replaced (by rename, as editors and config tools do) with a file whose line 2 names no field.
    let tmp = dir.path().join("counters.csv.tmp");
    std::fs::write(
        &tmp,
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_NOPE, gauge, x\n",
    )
    .unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let body = scrape_until(e.port, "the failed reload", |b| {
        reloads(b, "failure") == 1.0
    });
    assert!(
        has_family(&body, "DCGM_FI_DEV_POWER_USAGE"),
        "old set gone:\n{body}"
    );
    // Several more collections: still one failure, still the old set.
    let c = collects(&body);
    let body = scrape_until(e.port, "three more collections", |b| collects(b) >= c + 3.0);
    assert_eq!(reloads(&body, "failure"), 1.0);
    assert!(has_family(&body, "DCGM_FI_DEV_POWER_USAGE"));
    // A good file after the bad one is applied.
    std::fs::write(&tmp, V2).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    scrape_until(e.port, "the good file", |b| {
        has_family(b, "DCGM_FI_DEV_SM_CLOCK")
    });
    let err = terminate(e);
    let errors: Vec<&str> = err.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains(&format!(
            "{csv}:2:1: unknown DCGM field 'DCGM_FI_DEV_NOPE'; keeping the running counters"
        )),
        "{err}"
    );
}

/// Same bytes count, same inode, modification time put back: only SIGHUP can tell the file changed.
fn rewrite_unnoticed(path: &Path, content: &str) {
    let modified = std::fs::metadata(path).unwrap().modified().unwrap();
    assert_eq!(
        std::fs::metadata(path).unwrap().len() as usize,
        content.len()
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    use std::io::Write as _;
    (&f).write_all(content.as_bytes()).unwrap();
    f.set_modified(modified).unwrap();
}

#[test]
fn sighup_rereads_the_csv() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counters.csv");
    // Two sets of the same length.
    let a = "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_POWER_USAGE, gauge, p\n";
    let b = "DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_SM_CLOCK, gauge, s...\n";
    assert_eq!(a.len(), b.len());
    std::fs::write(&path, a).unwrap();
    let csv = path.display().to_string();
    let e = start(&["--simulate", "-c", "300", "-f", &csv], &[]);
    scrape_until(e.port, "a collection", |body| collects(body) >= 1.0);
    rewrite_unnoticed(&path, b);
    let body = scrape_until(e.port, "two collections", |body| collects(body) >= 3.0);
    assert!(
        has_family(&body, "DCGM_FI_DEV_POWER_USAGE"),
        "reloaded without SIGHUP"
    );
    common::signal(&e, "-HUP");
    let body = scrape_until(e.port, "the SIGHUP reload", |body| {
        has_family(body, "DCGM_FI_DEV_SM_CLOCK")
    });
    assert!(!has_family(&body, "DCGM_FI_DEV_POWER_USAGE"));
    assert_eq!(reloads(&body, "success"), 1.0);
    let err = terminate(e);
    assert!(err.contains("SIGHUP: re-reading the counters CSV"), "{err}");
    assert!(err.contains("trigger=\"SIGHUP\""), "{err}");
}

// ---- through libdcgm (the fake) ------------------------------------------------------------------

#[test]
fn reload_through_libdcgm_rewatches_without_a_restart() {
    let fake = Fake::new();
    let path = fake.dir.path().join("counters.csv");
    std::fs::write(&path, V1).unwrap();
    let csv = path.display().to_string();
    let e = fake.start(&["-c", "500", "-f", &csv], &[]);
    scrape_until(e.port, "a collection", |b| {
        has_family(b, "DCGM_FI_DEV_POWER_USAGE")
    });
    let tmp = fake.dir.path().join("counters.csv.tmp");
    std::fs::write(&tmp, V2).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let body = scrape_until(e.port, "the new field set", |b| {
        has_family(b, "DCGM_FI_DEV_SM_CLOCK") && !has_family(b, "DCGM_FI_DEV_POWER_USAGE")
    });
    assert_eq!(reloads(&body, "success"), 1.0);
    assert!(body.contains("dcgm_otel_source_up{source=\"dcgm\"} 1"));
    drop(e);
    let calls = fake.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("dcgmStartEmbedded"))
            .count(),
        1,
        "the host engine was restarted"
    );
    // The old field group was unwatched, the new one (GPU temp 150, SM clock 100) watched.
    assert!(calls
        .iter()
        .any(|c| c.starts_with("dcgmFieldGroupCreate") && c.contains("fields=150,155 ")));
    let new_group = calls
        .iter()
        .position(|c| c.starts_with("dcgmFieldGroupCreate") && c.contains("fields=150,100 "))
        .expect("a field group for the new set");
    assert!(calls[..new_group]
        .iter()
        .any(|c| c.starts_with("dcgmUnwatchFields")));
    assert!(calls[new_group..]
        .iter()
        .any(|c| c.starts_with("dcgmWatchFields")));
}

/// GPU 0 is unbound after the 4th poll and bound again after the 10th.
const BIND_FAULTS: &str = "unbind_gpu=0@4,bind_gpu=0@10";

#[test]
fn unbound_gpu_disappears_and_a_bound_one_appears_without_a_restart() {
    let fake = Fake::new();
    let receiver = Receiver::http(0, None);
    let endpoint = format!("http://{}", receiver.addr);
    let e = fake.start(
        &[
            "-c",
            "300",
            "--enable-gpu-bind-unbind-watch",
            "--gpu-bind-unbind-poll-interval",
            "100ms",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-protocol",
            "http/protobuf",
        ],
        &[("FAKE_DCGM_FAULTS", BIND_FAULTS)],
    );
    let gpu0 = |b: &str| {
        b.lines()
            .any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""))
    };
    // GPU 0's OTLP resource: `nvidia.gpu.index` 0, not a MIG instance.
    let otlp_gpu0 = |n: usize| {
        resources(&receiver.nth_or_later(n)).iter().any(|(a, _)| {
            a.get("nvidia.gpu.index").map(String::as_str) == Some("0")
                && !a.contains_key("nvidia.mig.profile")
        })
    };
    scrape_until(e.port, "GPU 0", gpu0);
    assert!(otlp_gpu0(1), "no OTLP resource for GPU 0 at start");
    let gone = scrape_until(e.port, "GPU 0 unbound", |b| !gpu0(b));
    // Cleanly: the other GPU's series stay, the source stays up, and OTLP has no GPU 0 either.
    assert!(gone.contains("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""), "{gone}");
    assert!(gone.contains("dcgm_otel_source_up{source=\"dcgm\"} 1"));
    let sent = receiver.requests().len();
    assert!(
        !otlp_gpu0(sent + 2),
        "GPU 0 still pushed after it was unbound"
    );
    let back = scrape_until(e.port, "GPU 0 bound again", gpu0);
    assert!(back.contains("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""));
    let sent = receiver.requests().len();
    assert!(otlp_gpu0(sent + 2), "GPU 0 not pushed after it was bound");
    let err = terminate(e);
    assert!(err.contains("watching GPU bind/unbind events"), "{err}");
    assert!(
        err.matches("GPU bind/unbind event: rediscovering the GPUs")
            .count()
            >= 2,
        "{err}"
    );
    let calls = fake.calls();
    assert_eq!(
        calls
            .iter()
            .filter(|c| c.starts_with("dcgmStartEmbedded"))
            .count(),
        1,
        "the host engine was restarted"
    );
    // The event field (6) is watched on all GPUs at the poll interval.
    assert!(
        calls
            .iter()
            .any(|c| c.starts_with("dcgmWatchFields group=2147483647 ")
                && c.contains("freq=100000 ")),
        "{calls:#?}"
    );
}

/// Without the watch nothing says the unbind was deliberate: DCGM reports fewer GPUs than before, so
/// `/ready` is 503 with the reason and the GPUs are rediscovered until GPU 0 is back (issue 39).
#[test]
fn without_the_watch_an_unbound_gpu_is_missing_until_rediscovered() {
    let fake = Fake::new();
    let e = fake.start(&["-c", "300"], &[("FAKE_DCGM_FAULTS", BIND_FAULTS)]);
    let gpu0 = |b: &str| {
        b.lines()
            .any(|l| l.starts_with("DCGM_FI_DEV_GPU_TEMP{gpu=\"0\""))
    };
    // Unbinding is noticed (its reads say "not found"); binding by the rediscovery of missing GPUs.
    let gone = scrape_until(e.port, "GPU 0 unbound", |b| {
        !gpu0(b) && b.contains("dcgm_otel_gpus_missing{source=\"dcgm\"} 1\n")
    });
    assert!(gone.contains("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""), "{gone}");
    let body = scrape_until(e.port, "GPU 0 rediscovered once bound", |b| {
        gpu0(b) && b.contains("dcgm_otel_gpus_missing{source=\"dcgm\"} 0\n")
    });
    assert!(
        body.contains("dcgm_otel_discoveries_missing_gpus_total{source=\"dcgm\"}"),
        "{body}"
    );
    drop(e);
    assert!(fake
        .calls()
        .iter()
        .any(|c| c.starts_with("bind event") && c.contains("bound=0")));
}
