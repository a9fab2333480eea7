//! A test in a child process of its own: for tests that load the fake libdcgm into the test process
//! (its engine is process-global and reads its environment once) or set environment variables. The
//! test re-runs its own binary filtered to itself; the child runs the body, the parent checks its exit.
//! This works the same under `cargo test` (tests are threads of one process) and `cargo nextest run`.

use std::process::Command;

const CHILD: &str = "DCGM_OTEL_TEST_OWN_PROCESS";

/// Run `body` in a child process running only the test `path` (`module_path!()` + `::name`).
pub fn run(path: &str, body: impl FnOnce()) {
    // The libtest name of a test has no crate prefix.
    let name = path.split_once("::").map_or(path, |(_, rest)| rest);
    if std::env::var(CHILD).as_deref() == Ok(name) {
        body();
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .output()
        .expect("cannot re-run the test binary");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name} in its own process failed ({}):\n{text}",
        out.status
    );
}
