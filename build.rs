//! Records the git commit for `--version`.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=DCGM_OTEL_GIT_COMMIT={commit}");
    // Re-run when HEAD moves. The files are asked from git, so that a worktree (where `.git` is a file)
    // or a checkout without git does not make every build re-run this script and rebuild the crate.
    println!("cargo:rerun-if-changed=build.rs");
    let branch_ref =
        git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r]));
    for path in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        branch_ref,
        git(&["rev-parse", "--git-path", "packed-refs"]),
    ]
    .into_iter()
    .flatten()
    {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
