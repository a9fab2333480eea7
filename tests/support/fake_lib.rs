//! The fake GPU libraries (`tests/fake-libdcgm`, `tests/fake-libnvml`): built on demand, then linked
//! under the real libraries' names (`libdcgm.so.4`, `libnvidia-ml.so.1`) in a private directory that
//! also holds the fake libdcgm's call log.
//!
//! On demand, because `cargo test` and `cargo nextest run` build the package's test targets, not the
//! workspace's `cdylib`s: the first use in a test process runs `$CARGO build -p fake-libdcgm -p
//! fake-libnvml` into the same target directory and profile as the binary under test, when a library is
//! missing or older than a file its dep-info (`libfake_*.d`) names. Cargo's own lock on the target
//! directory serialises test processes that do so at once (nextest runs one per test); a `OnceLock`
//! makes it once per process. A build script could not do it: it would call cargo inside cargo's lock.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

use super::common::{self, start, Exporter};

const LIBS: [&str; 2] = ["libfake_libdcgm.so", "libfake_libnvml.so"];

/// `target/<profile>/<name>` (`libfake_libdcgm.so` or `libfake_libnvml.so`), built first if needed.
pub fn built(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let bin = common::binary();
    let dir = bin.parent().expect("binary has a directory");
    if let Err(e) = BUILT.get_or_init(|| build_if_stale(dir)) {
        panic!("{e}");
    }
    let lib = dir.join(name);
    assert!(
        lib.exists(),
        "{} is missing after building it",
        lib.display()
    );
    lib
}

/// Link the built fake `built` as `dir/soname`; its path as a string.
pub fn link(dir: &Path, built_name: &str, soname: &str) -> String {
    let link = dir.join(soname);
    std::os::unix::fs::symlink(built(built_name), &link).unwrap();
    link.display().to_string()
}

fn mtime(p: &Path) -> Option<SystemTime> {
    p.metadata().and_then(|m| m.modified()).ok()
}

/// A library is fresh when it exists and no input its dep-info file lists is newer.
fn fresh(dir: &Path, lib: &str) -> bool {
    let (Some(built_at), Ok(dep_info)) = (
        mtime(&dir.join(lib)),
        std::fs::read_to_string(dir.join(lib.replace(".so", ".d"))),
    ) else {
        return false;
    };
    let Some((_, inputs)) = dep_info.split_once(": ") else {
        return false;
    };
    inputs
        .replace("\\ ", "\u{0}")
        .split_whitespace()
        .map(|p| PathBuf::from(p.replace('\u{0}', " ")))
        .all(|p| mtime(&p).is_some_and(|t| t <= built_at))
}

fn build_if_stale(dir: &Path) -> Result<(), String> {
    if LIBS.iter().all(|lib| fresh(dir, lib)) {
        return Ok(());
    }
    // target/<profile> (`debug` is the `dev` profile).
    let (Some(target), Some(profile)) = (dir.parent(), dir.file_name().and_then(|p| p.to_str()))
    else {
        return Err(format!("{}: not target/<profile>", dir.display()));
    };
    let profile = if profile == "debug" { "dev" } else { profile };
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    eprintln!("building the fake libraries: cargo build -p fake-libdcgm -p fake-libnvml --profile {profile}");
    let mut cmd = Command::new(&cargo);
    // Not the variables cargo sets for running this test (CARGO_MANIFEST_DIR, CARGO_PKG_NAME ...): some
    // build scripts (ring's) watch them, and seeing them here would make the next `cargo test` rebuild.
    for (var, _) in std::env::vars_os() {
        let name = var.to_string_lossy();
        if name == "OUT_DIR"
            || name.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&name.as_ref())
        {
            cmd.env_remove(&var);
        }
    }
    let status = cmd
        .args([
            "build",
            "--quiet",
            "-p",
            "fake-libdcgm",
            "-p",
            "fake-libnvml",
        ])
        .args(["--profile", profile, "--manifest-path", manifest])
        .arg("--target-dir")
        .arg(target)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !status.success() {
        return Err(format!(
            "cargo build -p fake-libdcgm -p fake-libnvml failed ({status})"
        ));
    }
    Ok(())
}

/// A private directory holding `libdcgm.so.4` and `libnvidia-ml.so.1` (symlinks to the fakes) and
/// the fake libdcgm's call log.
pub struct Fake {
    pub dir: tempfile::TempDir,
}

impl Fake {
    pub fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        link(dir.path(), "libfake_libdcgm.so", "libdcgm.so.4");
        link(dir.path(), "libfake_libnvml.so", "libnvidia-ml.so.1");
        Fake { dir }
    }

    /// The directory, for `LD_LIBRARY_PATH`.
    pub fn lib_dir(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// `libdcgm.so.4`, for `--dcgm-library`.
    pub fn lib_path(&self) -> String {
        self.dir.path().join("libdcgm.so.4").display().to_string()
    }

    /// `libnvidia-ml.so.1`, for `--nvml-library`.
    pub fn nvml_path(&self) -> String {
        self.dir
            .path()
            .join("libnvidia-ml.so.1")
            .display()
            .to_string()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("calls.log")
    }

    /// Environment for the exporter: the call log, plus `extra` (FAKE_DCGM_*, LD_LIBRARY_PATH...).
    pub fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env = vec![(
            "FAKE_DCGM_CALL_LOG".to_string(),
            self.log_path().display().to_string(),
        )];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    /// Environment with the fake found through LD_LIBRARY_PATH.
    pub fn ld_env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env = self.env(extra);
        env.push(("LD_LIBRARY_PATH".to_string(), self.lib_dir()));
        env
    }

    /// Start the exporter with the fake found through LD_LIBRARY_PATH and its call log on.
    pub fn start(&self, args: &[&str], env: &[(&str, &str)]) -> Exporter {
        let lib_dir = self.lib_dir();
        let log = self.log_path().display().to_string();
        let mut all = vec![
            ("LD_LIBRARY_PATH", lib_dir.as_str()),
            ("FAKE_DCGM_CALL_LOG", log.as_str()),
        ];
        all.extend_from_slice(env);
        start(args, &all)
    }

    /// The fake libdcgm's call log, a line per call.
    pub fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}
