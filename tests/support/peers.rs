//! Programs outside the repository that some tests drive (rotel, promtool): where they are, and the
//! rule when one is missing. `tests/run-all.sh` installs them all, so under the test command every
//! such test runs for real; in CI (any non-empty `CI`) a missing peer fails the test; elsewhere (a
//! fresh clone's `cargo test`) the test prints `SKIP: <why>` and passes without checking anything.

use std::path::{Path, PathBuf};

use super::common::in_ci;

/// The peer `what`: the file named by the environment variable `env` if set, else `program` on `PATH`.
/// `None` (after printing why) when it is missing outside CI; panics when it is missing in CI.
pub fn find(what: &str, env: Option<&str>, program: &str) -> Option<PathBuf> {
    let from_env = env.and_then(std::env::var_os).map(PathBuf::from);
    let found = match &from_env {
        Some(p) => p.is_file().then(|| p.clone()),
        None => on_path(program),
    };
    if found.is_none() {
        let how = match env {
            Some(var) => format!("set {var} or put {program} on PATH"),
            None => format!("put {program} on PATH"),
        };
        let how = match (&from_env, env) {
            (Some(p), Some(var)) => format!("{var}={} is not a file", p.display()),
            _ => how,
        };
        assert!(
            !in_ci(),
            "{what} is required in CI: {how} (tests/run-all.sh installs it)"
        );
        eprintln!("SKIP: {what} not found: {how} (tests/run-all.sh installs it)");
    }
    found
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(program))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// rotel, a real OTLP collector (`ROTEL_BIN`; tests/run-all.sh installs it into `.venv`).
pub fn rotel() -> Option<PathBuf> {
    find("rotel", Some("ROTEL_BIN"), "rotel-agent")
}

/// Prometheus' promtool (the `prometheus` Debian package).
pub fn promtool() -> Option<PathBuf> {
    find("promtool", None, "promtool")
}

/// Whether every program in `programs` is on `PATH` (the [`find`] rule for each missing one).
pub fn have(programs: &[&str]) -> bool {
    programs
        .iter()
        .filter(|p| find(p, None, p).is_none())
        .count()
        == 0
}
