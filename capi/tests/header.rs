//! `include/dcgm_otel_engine.h` against the Rust side: every exported function with the same C types
//! as its Rust signature in `src/ffi.rs` (and no other), the result struct's fields, the statuses and
//! the ABI version; then the header compiled with the system C compiler into a program that links
//! the built library and runs an engine on the simulated fleet through it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly on purpose

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use regex::Regex;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(crate_dir().join(rel)).unwrap()
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A Rust FFI type as the header must spell it.
fn c_type(rust: &str) -> String {
    let rust = squash(rust);
    let c = match rust.as_str() {
        "" => "void",
        "u32" => "uint32_t",
        "i32" => "int32_t",
        "u64" => "uint64_t",
        "usize" => "size_t",
        "*const u8" => "const uint8_t *",
        "*const *const c_char" => "const char *const *",
        "*mut *mut c_char" => "char **",
        "*mut c_char" => "char *",
        "*const Engine" => "const dcgm_otel_engine *",
        "*mut Engine" => "dcgm_otel_engine *",
        "*mut *mut Engine" => "dcgm_otel_engine **",
        "*mut CollectedC" => "dcgm_otel_collected *",
        "*mut *mut CollectedC" => "dcgm_otel_collected **",
        other => panic!("no C spelling for the Rust type `{other}`: add it to this table"),
    };
    c.to_string()
}

/// A C declarator's type without its name: `const char *const *args` → `const char *const *`.
fn c_param_type(param: &str) -> String {
    let p = squash(param);
    let name = Regex::new(r"\s*\b\w+$").unwrap();
    let t = name.replace(&p, "").to_string();
    // One spelling of pointers: `char **` (a space before the stars, none between them).
    let t = Regex::new(r"\s*\*\s*")
        .unwrap()
        .replace_all(&t, "*")
        .to_string();
    let t = Regex::new(r"(\w)\*")
        .unwrap()
        .replace_all(&t, "$1 *")
        .to_string();
    squash(&t.replace("*const", "*const "))
}

fn normalize(t: &str) -> String {
    c_param_type(&format!("{t} x"))
}

type Signatures = BTreeMap<String, (String, Vec<String>)>;

fn rust_signatures() -> Signatures {
    let src = read("src/ffi.rs");
    let f = Regex::new(
        r#"(?s)pub (?:unsafe )?extern "C" fn (\w+)\(\s*(.*?)\)\s*(?:->\s*([\w ]+?))?\s*\{"#,
    )
    .unwrap();
    f.captures_iter(&src)
        .map(|c| {
            let params: Vec<String> = c[2]
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| normalize(&c_type(p.split_once(':').unwrap().1)))
                .collect();
            let ret = normalize(&c_type(c.get(3).map_or("", |m| m.as_str())));
            (c[1].to_string(), (ret, params))
        })
        .collect()
}

fn header_signatures() -> Signatures {
    let h = read("include/dcgm_otel_engine.h");
    let f = Regex::new(r"(?s)\n(\w[\w ]*?\**)\s*(dcgm_otel_\w+)\(([^)]*)\);").unwrap();
    f.captures_iter(&h)
        .map(|c| {
            let params: Vec<String> = if c[3].trim() == "void" {
                Vec::new()
            } else {
                c[3].split(',').map(c_param_type).collect()
            };
            (c[2].to_string(), (normalize(&c[1]), params))
        })
        .collect()
}

#[test]
fn every_function_of_the_header_has_the_rust_signature() {
    let rust = rust_signatures();
    let header = header_signatures();
    assert_eq!(rust.len(), 9, "{rust:?}");
    assert_eq!(header, rust);
}

#[test]
fn the_result_struct_statuses_and_version_are_the_rusts() {
    let lib = read("src/lib.rs");
    let h = read("include/dcgm_otel_engine.h");
    let rust_fields = Regex::new(r"(?s)pub struct CollectedC \{(.*?)\}")
        .unwrap()
        .captures(&lib)
        .unwrap()[1]
        .split(',')
        .filter_map(|f| f.trim().strip_prefix("pub "))
        .map(|f| {
            let (name, t) = f.split_once(':').unwrap();
            (name.trim().to_string(), normalize(&c_type(t)))
        })
        .collect::<Vec<_>>();
    let c_fields = Regex::new(r"(?s)typedef struct dcgm_otel_collected \{(.*?)\}")
        .unwrap()
        .captures(&h)
        .unwrap()[1]
        .lines()
        .map(|l| l.split("/*").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let decl = l.trim_end_matches(';');
            let name = decl.rsplit([' ', '*']).next().unwrap().to_string();
            (name, c_param_type(decl))
        })
        .collect::<Vec<_>>();
    assert_eq!(c_fields, rust_fields);

    let statuses: Vec<(String, i32)> = Regex::new(r"(?m)^\s+(\w+) = (\d+),")
        .unwrap()
        .captures_iter(
            lib.split("pub enum Status")
                .nth(1)
                .unwrap()
                .split('}')
                .next()
                .unwrap(),
        )
        .map(|c| {
            let snake = Regex::new(r"([a-z])([A-Z])")
                .unwrap()
                .replace_all(&c[1], "${1}_$2");
            (
                format!("DCGM_OTEL_{}", snake.to_uppercase()),
                c[2].parse().unwrap(),
            )
        })
        .collect();
    let defines: Vec<(String, i32)> = Regex::new(r"(?m)^#define (DCGM_OTEL_\w+) (\d+)")
        .unwrap()
        .captures_iter(&h)
        .filter(|c| &c[1] != "DCGM_OTEL_ABI_VERSION")
        .map(|c| (c[1].to_string(), c[2].parse().unwrap()))
        .collect();
    assert_eq!(defines, statuses);
    assert!(h.contains(&format!(
        "#define DCGM_OTEL_ABI_VERSION {}",
        dcgm_otel_engine::ABI_VERSION
    )));
}

/// The built library next to this test binary (target/<profile>/deps/header-<hash>).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let so = dir.join("libdcgm_otel_engine.so");
    assert!(so.exists(), "{} not built", so.display());
    so
}

const PROGRAM: &str = r#"
#include <stdio.h>
#include <string.h>
#include "dcgm_otel_engine.h"

int main(void) {
    if (dcgm_otel_abi_version() != DCGM_OTEL_ABI_VERSION) { puts("abi"); return 1; }
    char *msg = NULL;
    dcgm_otel_engine *e = NULL;
    const char *bad[] = {"--simulate", "--otlp-endpoint", "http://127.0.0.1:4317"};
    int32_t rc = dcgm_otel_engine_start(bad, 3, &e, &msg);
    printf("bad options: %d %s\n", rc, msg ? msg : "(none)");
    dcgm_otel_string_free(msg);
    msg = NULL;
    const char *args[] = {"--simulate", "-c", "200"};
    rc = dcgm_otel_engine_start(args, 3, &e, &msg);
    if (rc != DCGM_OTEL_OK) { printf("start: %d %s\n", rc, msg); return 1; }
    dcgm_otel_collected *c = NULL;
    rc = dcgm_otel_engine_collect(e, 10000, &c, &msg);
    if (rc != DCGM_OTEL_OK) { printf("collect: %d %s\n", rc, msg); return 1; }
    printf("collected: seq=%llu points=%llu bytes=%s\n", (unsigned long long)c->seq,
           (unsigned long long)c->data_points, c->metrics_len > 0 ? "some" : "none");
    dcgm_otel_collected_free(c);
    rc = dcgm_otel_engine_reload(e, &msg);
    printf("reload: %d %s\n", rc, msg ? msg : "(none)");
    dcgm_otel_string_free(msg);
    msg = NULL;
    rc = dcgm_otel_engine_stop(e, 5000, &msg);
    printf("stop: %d\n", rc);
    dcgm_otel_engine_free(e);
    rc = dcgm_otel_engine_collect(NULL, 0, &c, &msg);
    printf("null handle: %d %s\n", rc, msg);
    dcgm_otel_string_free(msg);
    return 0;
}
"#;

#[test]
fn a_c_program_runs_the_engine_through_the_header() {
    let so = built_library();
    let dir = std::env::temp_dir().join(format!("dcgm-otel-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("main.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join("main");
    let lib_dir = so.parent().unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let built = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", crate_dir().join("include").display()))
        .arg(format!("-L{}", lib_dir.display()))
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-ldcgm_otel_engine")
        .output();
    let built = match built {
        Ok(b) => b,
        Err(e) if std::env::var_os("CI").is_none() => {
            println!("SKIP: no C compiler ({cc}: {e})");
            return;
        }
        Err(e) => panic!("{cc}: {e}"),
    };
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe)
        .env_remove("DCGM_OTEL_TEST_PANIC")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert_eq!(
        lines[0],
        "bad options: 2 --otlp-endpoint: not an option of the engine library: the caller sends the requests the engine builds"
    );
    // The first collection, with data points (how many is the simulated fleet's business).
    assert!(
        lines[1].starts_with("collected: seq=1 points=")
            && lines[1].ends_with(" bytes=some")
            && !lines[1].contains("points=0 "),
        "{stdout}"
    );
    assert_eq!(
        lines[2..],
        [
            "reload: 7 nothing to reload: the counters did not come from a file or ConfigMap",
            "stop: 0",
            "null handle: 1 the engine handle is null",
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}
