//! The documentation tested against the binary and the repository (README.md, docs/*.md,
//! deploy/kubernetes/README.md):
//!
//! - every shell block marked `<!-- doc-test: runnable -->` runs: each command (`dcgm-otel …` or
//!   `cargo run --release -- …`, optionally after `VAR=value` assignments) is started on a spare loopback
//!   port and must serve `/metrics` without an error line on stderr;
//! - a YAML block marked `<!-- doc-test: scenario ARGS -->` is a scenario file that loads: it is written
//!   to a file and run with `--simulate=FILE ARGS`;
//! - a block marked `<!-- doc-test: lines of PATH -->` is lines of that file, in order (`…` stands for
//!   any text within a line, a line `...` for any lines); `<!-- doc-test: output of COMMAND -->`: lines
//!   of what that command serves at its first collection;
//! - every repository path the pages name (in backticks or as a link) exists, and every relative link
//!   (`](path)`, `](path#anchor)`, `](#anchor)`) leads to a file of the repository and, with an anchor, to
//!   a heading of that page;
//! - every row of a flag table (`| Flag | Env | Default |`) names a flag `--help` has, with that
//!   variable, and the default `--help` shows when the table gives one in backticks.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests and benches fail loudly on purpose

use crate::support::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{binary, get, run_to_exit, wait_ready};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages, as (repository path, text).
fn pages() -> Vec<(String, String)> {
    let mut names = vec![
        "README.md".to_string(),
        "deploy/kubernetes/README.md".to_string(),
    ];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| format!("docs/{}", p.file_name().unwrap().to_string_lossy()))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(root().join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

/// A fenced block after a `<!-- doc-test: … -->` marker: (page, line of the fence, marker text, body).
struct Marked {
    page: String,
    line: usize,
    marker: String,
    body: Vec<String>,
}

fn marked_blocks() -> Vec<Marked> {
    let mut out = Vec::new();
    for (page, text) in pages() {
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let Some(marker) = l
                .trim()
                .strip_prefix("<!-- doc-test:")
                .and_then(|m| m.strip_suffix("-->"))
            else {
                continue;
            };
            let fence = lines
                .get(i + 1)
                .filter(|f| f.starts_with("```"))
                .unwrap_or_else(|| {
                    panic!("{page}:{}: a doc-test marker needs a fence below", i + 1)
                });
            assert!(fence.starts_with("```"));
            let body: Vec<String> = lines[i + 2..]
                .iter()
                .take_while(|l| !l.starts_with("```"))
                .map(|l| l.to_string())
                .collect();
            out.push(Marked {
                page: page.clone(),
                line: i + 2,
                marker: marker.trim().to_string(),
                body,
            });
        }
    }
    out
}

/// Shell words of one command line (double and single quotes; no expansion).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '#') if !any => break,
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            (_, c) => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(cur);
    }
    out
}

/// The commands of a shell block: continuation lines joined, comments dropped.
fn commands(body: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in body {
        let l = l.split(" #").next().unwrap_or_default().trim_end();
        if l.trim_start().starts_with('#') || l.trim().is_empty() {
            continue;
        }
        if let Some(part) = l.strip_suffix('\\') {
            cur.push_str(part);
            cur.push(' ');
        } else {
            cur.push_str(l);
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

/// Run `args` with `env` on a port the exporter picks (:0, read from its log) until /metrics
/// answers; its stderr and first body.
fn serve(args: &[String], env: &[(String, String)], cwd: &Path, what: &str) -> (String, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .args(["-a", "127.0.0.1:0"])
        .current_dir(cwd)
        .env_remove("DCGM_EXPORTER_KUBERNETES")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let e = common::spawn_on_port_it_reports(cmd, Duration::from_secs(20));
    wait_ready(&e, Duration::from_secs(20));
    let r = get(e.port, "/metrics").unwrap();
    assert_eq!(r.status, 200, "{what}");
    let body = r.text();
    assert!(body.contains("DCGM_FI_"), "{what}: no DCGM series");
    let err = common::terminate(e);
    // The simulation's own banners are the only warnings an example may give (no "has no effect").
    assert!(
        !err.lines()
            .any(|l| l.contains("ERROR") || (l.contains("WARN") && !l.contains("WARN SIMULATED "))),
        "{what}: error or warning lines on stderr:\n{err}"
    );
    (err, body)
}

/// A documented command: its variables and the binary's arguments.
fn parse_command(c: &str, what: &str) -> (Vec<(String, String)>, Vec<String>) {
    let mut w = words(c);
    let mut env = Vec::new();
    while let Some((k, v)) = w.first().and_then(|x| x.split_once('=')) {
        if !k
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        {
            break;
        }
        env.push((k.to_string(), v.to_string()));
        w.remove(0);
    }
    let args: Vec<String> = match w.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["dcgm-otel", ..] => w[1..].to_vec(),
        ["cargo", "run", "--release", "--", ..] => w[4..].to_vec(),
        _ => panic!("{what}: a runnable example starts with dcgm-otel or cargo run --release --"),
    };
    assert!(
        args.iter().any(|a| a.starts_with("--simulate"))
            || env.iter().any(|(k, _)| k == "DCGM_OTEL_SIMULATE"),
        "{what}: runnable examples use --simulate"
    );
    (env, args)
}

#[test]
fn runnable_examples_run() {
    let mut ran = 0;
    for m in marked_blocks().iter().filter(|m| m.marker == "runnable") {
        for c in commands(&m.body) {
            let what = format!("{}:{}: {c}", m.page, m.line);
            let (env, args) = parse_command(&c, &what);
            serve(&args, &env, &root(), &what);
            ran += 1;
        }
    }
    assert!(ran >= 3, "only {ran} runnable examples");
}

#[test]
fn scenario_examples_load() {
    let blocks: Vec<Marked> = marked_blocks()
        .into_iter()
        .filter(|m| m.marker.starts_with("scenario"))
        .collect();
    assert!(!blocks.is_empty());
    for m in blocks {
        let what = format!("{}:{}", m.page, m.line);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("scenario.yaml");
        std::fs::write(&file, m.body.join("\n")).unwrap();
        let mut args = vec![format!("--simulate={}", file.display())];
        args.extend(words(m.marker.trim_start_matches("scenario")));
        serve(&args, &[], &root(), &what);
    }
}

/// `pattern` (a documented line, `…` for any text) matches `line`.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split('…').collect();
    let mut rest = line;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p) && rest.len() >= p.len();
        } else {
            let Some(at) = rest.find(p) else {
                return false;
            };
            rest = &rest[at + p.len()..];
        }
    }
    rest.is_empty()
}

#[test]
fn documented_output_is_lines_of_its_golden_file_or_command() {
    let blocks: Vec<Marked> = marked_blocks()
        .into_iter()
        .filter(|m| m.marker.starts_with("lines of ") || m.marker.starts_with("output of "))
        .collect();
    assert!(blocks.len() >= 2);
    for m in blocks {
        let (path, file) = if let Some(c) = m.marker.strip_prefix("output of ") {
            // What the documented command serves at its first collection.
            let what = format!("{}:{}: {c}", m.page, m.line);
            let (env, args) = parse_command(c, &what);
            (c.to_string(), serve(&args, &env, &root(), &what).1)
        } else {
            let path = m.marker.trim_start_matches("lines of ").trim();
            (
                path.to_string(),
                std::fs::read_to_string(root().join(path)).unwrap(),
            )
        };
        let mut lines = file.lines();
        for want in m.body.iter().filter(|l| l.as_str() != "...") {
            assert!(
                lines.any(|l| line_matches(want, l)),
                "{}:{}: not a line of {path} (in order): {want}",
                m.page,
                m.line
            );
        }
    }
}

/// Repository paths a page names: backticked words and link targets that start with a top-level
/// folder or file of the repository.
fn named_paths(page: &str, text: &str) -> Vec<String> {
    let tops: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    let mut out = Vec::new();
    let mut candidates: Vec<String> = Vec::new();
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 1 {
            candidates.extend(part.split_whitespace().map(str::to_string));
        }
    }
    for link in text.split("](").skip(1) {
        if let Some(end) = link.find(')') {
            candidates.push(link[..end].to_string());
        }
    }
    let dir = Path::new(page).parent().unwrap_or(Path::new(""));
    for c in candidates {
        let c = c.split('#').next().unwrap_or_default();
        let c = c
            .trim_end_matches([',', '.', ':', ';', ')'])
            .trim_start_matches('(');
        // Build outputs (`target/soak/report.md`) are not in the repository.
        if c.is_empty()
            || c.starts_with("target/")
            || c.contains('…')
            || c.contains('<')
            || c.contains("://")
            || c.contains('$')
        {
            continue;
        }
        // A link is relative to its page; a backticked path to the repository root.
        let joined = dir.join(c);
        let from_page = normalize(&joined);
        let first = c.split('/').next().unwrap_or_default();
        if c.contains('/') && tops.iter().any(|t| t == first) {
            out.push(c.to_string());
        } else if c.starts_with("../") || (c.ends_with(".md") && !c.contains(' ')) {
            out.push(from_page);
        }
    }
    out.sort();
    out.dedup();
    out
}

fn normalize(p: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir if parts.pop().is_none() => parts.push("..".into()),
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    parts.join("/")
}

/// Whether a documented path exists (`*` matches within one name).
fn exists(path: &str) -> bool {
    if !path.contains('*') {
        return root().join(path).exists();
    }
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    if dir.contains('*') {
        return false;
    }
    let parts: Vec<&str> = name.split('*').collect();
    std::fs::read_dir(root().join(dir))
        .map(|entries| {
            entries.filter_map(|e| e.ok()).any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                let mut rest = n.as_str();
                parts.iter().enumerate().all(|(i, p)| {
                    if i == 0 {
                        rest.strip_prefix(p).map(|r| rest = r).is_some()
                    } else if i == parts.len() - 1 {
                        rest.ends_with(p)
                    } else {
                        rest.find(p)
                            .map(|at| rest = &rest[at + p.len()..])
                            .is_some()
                    }
                })
            })
        })
        .unwrap_or(false)
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        for p in named_paths(&page, &text) {
            checked += 1;
            if p.starts_with("..") {
                missing.push(format!("{page}: {p} (outside the repository)"));
            } else if !exists(&p) {
                missing.push(format!("{page}: {p}"));
            }
        }
    }
    assert!(checked > 50, "only {checked} paths found");
    assert!(missing.is_empty(), "missing:\n{}", missing.join("\n"));
}

/// GitHub's anchor of a heading: lower case, punctuation dropped (`-` and `_` kept), spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown page's headings (outside fenced blocks); repeated ones get `-1`, `-2`, ….
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for l in text.lines() {
        if l.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = l.chars().take_while(|&c| c == '#').count();
        if fenced || hashes == 0 || !l[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(&l[hashes..]);
        let n = out
            .iter()
            .filter(|a| {
                **a == s
                    || a.strip_prefix(&format!("{s}-"))
                        .is_some_and(|r| r.parse::<u32>().is_ok())
            })
            .count();
        out.push(if n == 0 { s } else { format!("{s}-{n}") });
    }
    out
}

/// The link targets of a page outside fenced blocks, with their line numbers.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, l) in text.lines().enumerate() {
        if l.starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        for part in l.split("](").skip(1) {
            if let Some(end) = part.find(')') {
                out.push((n + 1, part[..end].to_string()));
            }
        }
    }
    out
}

#[test]
fn headings_give_github_anchors() {
    assert_eq!(
        slug(" GPU incidents (`DCGM_EXP_*`)"),
        "gpu-incidents-dcgm_exp_"
    );
    assert_eq!(slug(" GPU bind/unbind"), "gpu-bindunbind");
    assert_eq!(
        anchors("# A\n## Run\n```\n# not a heading\n```\n### Run\n"),
        ["a", "run", "run-1"]
    );
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for (page, text) in pages() {
        let dir = Path::new(&page).parent().unwrap_or(Path::new(""));
        for (line, target) in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                normalize(&dir.join(path))
            };
            if file.starts_with("..") || !root().join(&file).exists() {
                broken.push(format!("{page}:{line}: {target} (no file {file})"));
                continue;
            }
            if !anchor.is_empty() {
                let target_text = std::fs::read_to_string(root().join(&file)).unwrap_or_default();
                if !anchors(&target_text).iter().any(|a| a == anchor) {
                    broken.push(format!(
                        "{page}:{line}: {target} (no heading #{anchor} in {file})"
                    ));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// One `--help` option: long flag, `[env: …]`, `[default: …]`, its whole text.
type HelpOption = (String, Option<String>, Option<String>, String);

/// `--help`'s options.
fn help_options() -> Vec<HelpOption> {
    let (code, help) = run_to_exit(&["--help"], &[]);
    assert_eq!(code, 0);
    let mut out: Vec<HelpOption> = Vec::new();
    for l in help.lines() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        if (2..=6).contains(&indent) && t.starts_with('-') {
            if let Some(long) = t
                .split([',', ' ', '[', '<', '='])
                .find(|w| w.starts_with("--"))
            {
                out.push((long.to_string(), None, None, String::new()));
            }
        } else if let Some(last) = out.last_mut() {
            last.3.push_str(t);
            last.3.push(' ');
            if let Some(v) = t.strip_prefix("[env: ") {
                last.1 = Some(v.trim_end_matches(']').trim_end_matches('=').to_string());
            } else if let Some(v) = t.strip_prefix("[default: ") {
                last.2 = Some(v.trim_end_matches(']').to_string());
            }
        }
    }
    out
}

#[test]
fn flag_tables_agree_with_help() {
    let options = help_options();
    let mut rows = 0;
    let mut wrong = Vec::new();
    for (page, text) in pages() {
        let mut in_table = false;
        for l in text.lines() {
            if l.starts_with("| Flag | Env") {
                in_table = true;
                continue;
            }
            if !l.starts_with('|') {
                in_table = false;
                continue;
            }
            if !in_table || l.starts_with("|---") {
                continue;
            }
            let l = l.replace("\\|", "\u{1}");
            let cells: Vec<String> = l
                .split('|')
                .map(|c| c.trim().replace('\u{1}', "|"))
                .collect();
            let (flag_cell, env_cell, default_cell) =
                (cells[1].as_str(), cells[2].as_str(), cells[3].as_str());
            let ticked = |cell: &str| -> Vec<String> {
                cell.split('`')
                    .enumerate()
                    .filter(|(i, _)| i % 2 == 1)
                    .map(|(_, s)| s.to_string())
                    .collect()
            };
            let Some(long) = ticked(flag_cell)
                .iter()
                .flat_map(|t| {
                    t.split([',', ' ', '[', '='])
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .find(|w| w.starts_with("--"))
            else {
                continue;
            };
            // Rows naming a group ("`--otlp` and `--otel-*`", "and the other … flags") are pointers.
            if flag_cell.contains(" and ") {
                continue;
            }
            rows += 1;
            let Some((_, env, default, text)) = options.iter().find(|(f, _, _, _)| *f == long)
            else {
                wrong.push(format!("{page}: {long} is not in --help"));
                continue;
            };
            let envs = ticked(env_cell);
            if let Some(want) = envs
                .first()
                .filter(|e| !e.contains(' ') && !e.contains('*'))
            {
                // A flag that reads several variables names them in its text instead.
                let text: String = text.split_whitespace().collect();
                let named = env.as_deref() == Some(want.as_str())
                    || (env.is_none() && text.contains(want.as_str()));
                if !named {
                    wrong.push(format!(
                        "{page}: {long}: table says {want}, --help says {env:?}"
                    ));
                }
            }
            if let (Some(d), Some(want)) = (default, ticked(default_cell).first()) {
                if d != want && !default_cell.contains(' ') {
                    wrong.push(format!(
                        "{page}: {long}: default {want} in the table, {d} in --help"
                    ));
                }
            }
        }
    }
    assert!(rows > 30, "only {rows} flag rows");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn shell_words_and_lines() {
    assert_eq!(
        words(r#"A=1 dcgm-otel --x "a b" 'c' # note"#),
        ["A=1", "dcgm-otel", "--x", "a b", "c"]
    );
    assert_eq!(
        commands(&["a \\".into(), "  b # c".into(), "# d".into(), "e".into()]),
        ["a    b", "e"]
    );
    assert!(line_matches(
        "X{a=\"1\",…,b=\"2\"} 3",
        "X{a=\"1\",z=\"9\",b=\"2\"} 3"
    ));
    assert!(!line_matches(
        "X{a=\"1\",…,b=\"2\"} 3",
        "X{a=\"1\",b=\"2\"} 4"
    ));
}

/// The pages are for users: no project-history references (issue numbers) and no folder beside the
/// checkout (the development notes' `shared` folder); history belongs in the commit log.
#[test]
fn pages_name_no_issue_and_nothing_outside_the_repository() {
    let mut found = Vec::new();
    for (page, text) in pages() {
        for (n, l) in text.lines().enumerate() {
            let lower = l.to_ascii_lowercase();
            let issue = lower.match_indices("issue ").any(|(i, m)| {
                lower[i + m.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            });
            let beside = ["..", "shared"].join("/");
            if issue || l.contains(&beside) || l.contains("shared/reference") {
                found.push(format!("{page}:{}: {l}", n + 1));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// docs/otlp.md: "the default CSV has the six `DCGM_EXP_*` rows commented out".
#[test]
fn the_default_csv_carries_every_exp_row_commented() {
    let csv = std::fs::read_to_string(root().join("src/counters/default-counters.csv")).unwrap();
    for family in [
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_EXP_XID_ERRORS_TOTAL",
        "DCGM_EXP_CLOCK_EVENTS_COUNT",
        "DCGM_EXP_CLOCK_EVENTS_TOTAL",
        "DCGM_EXP_GPU_HEALTH_STATUS",
        "DCGM_EXP_P2P_STATUS",
    ] {
        assert!(
            csv.lines().any(|l| l.starts_with(&format!("# {family},"))),
            "no commented {family} row"
        );
    }
}

/// Every counters file the pages say the container image has under /etc/dcgm-otel/ is installed
/// there by the Dockerfile (the config.yaml of the error examples is the user's own).
#[test]
fn image_paths_the_readme_names_are_installed() {
    let readme: String = pages().into_iter().map(|(_, text)| text).collect();
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let named: Vec<&str> = readme
        .split(['`', ' ', '\n', ')'])
        .filter(|w| w.starts_with("/etc/dcgm-otel/") && w.ends_with(".csv"))
        .collect();
    assert!(!named.is_empty());
    for path in named {
        assert!(
            dockerfile.contains(&format!("/out{path}")),
            "README names {path}; the Dockerfile does not install it"
        );
    }
}

/// docs/performance.md's body sizes of `--simulate=large` are what the binary serves (with a
/// two-letter host name, as the page says).
#[test]
fn the_documented_large_body_size_is_what_the_binary_serves() {
    let page = std::fs::read_to_string(root().join("docs/performance.md")).unwrap();
    let figure = |after: &str| -> usize {
        let at = page
            .find(after)
            .unwrap_or_else(|| panic!("no '{after}' in the page"));
        page[..at]
            .rsplit(|c: char| !(c.is_ascii_digit() || c == ','))
            .find(|w| !w.is_empty())
            .unwrap()
            .replace(',', "")
            .parse()
            .unwrap()
    };
    let text = figure(" bytes with a two-letter host name");
    let gzip = figure(" bytes) |");
    let e = common::start(
        &["--simulate=large", "-c", "60000", "--no-self-metrics"],
        &[("NODE_NAME", "vm")],
    );
    let plain = get(e.port, "/metrics").unwrap();
    let zipped = common::get_with(e.port, "/metrics", &[("Accept-Encoding", "gzip")]).unwrap();
    assert_eq!(zipped.header("Content-Encoding"), Some("gzip"));
    assert_eq!((plain.body.len(), zipped.body.len()), (text, gzip));
}

/// docs/sources.md "Per-process GPU use": NVML gives no per-process utilization on MIG GPUs, but the simulator
/// serves a scenario's processes as written, so `--simulate --collect-processes` shows it on MIG
/// instances too.
#[test]
fn the_simulator_serves_process_utilization_on_mig_instances_as_documented() {
    let e = common::start(&["--simulate", "--collect-processes", "-c", "60000"], &[]);
    let body = get(e.port, "/metrics").unwrap().text();
    assert!(
        body.lines().any(
            |l| l.starts_with("dcgm_otel_process_sm_utilization_percent{")
                && l.contains("GPU_I_ID=")
        ),
        "{body}"
    );
}
