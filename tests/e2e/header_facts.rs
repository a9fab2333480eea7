//! Reading what NVIDIA's headers say (the files `tests/headers/probe.py` writes: the committed
//! `tests/fixtures/dcgm/dcgm-header-facts.txt`, the NVML facts written at test time) and comparing a
//! Rust type, as `std::any::type_name` spells it, with a canonical C type from those files. Used by
//! `dcgm_header_facts.rs` and `nvml_header_facts.rs`; nothing here is taken from the exporter's own
//! tables.

use std::collections::{BTreeMap, HashMap};

/// One prototype: parameter types and return type, canonical C.
#[derive(Debug, Clone)]
pub struct Proto {
    pub params: Vec<String>,
    pub ret: String,
}

/// One registered DCGM field (`meta` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub type_char: char,
    pub level: i64,
    pub scope: i64,
}

/// Everything a facts file says, by line kind.
#[derive(Debug, Default)]
pub struct Facts {
    /// `define NAME N` and `enumval NAME N`.
    pub values: HashMap<String, i64>,
    /// `internal NAME N`.
    pub internal: HashMap<String, i64>,
    /// `definechar NAME c`.
    pub chars: HashMap<String, char>,
    pub meta: BTreeMap<u16, Meta>,
    pub protos: BTreeMap<String, Proto>,
    /// `typedef NAME TYPE` (function-pointer typedefs).
    pub typedefs: HashMap<String, String>,
    /// `enumtype NAME T`: the integer type behind an enum.
    pub enum_types: HashMap<String, String>,
    /// `sizeof T N`, `offsetof T.m N`, `membersize T.m N`: `"<kind> <name>"` → N.
    pub layout: HashMap<String, u64>,
    /// `membertype T.m TYPE`.
    pub member_types: HashMap<String, String>,
    /// `alias NAME CANONICAL`: another typedef name of a struct, union or enum.
    pub aliases: HashMap<String, String>,
    /// The `#` lines (provenance).
    pub header: Vec<String>,
}

impl Facts {
    /// The canonical name of a struct, union or enum typedef name.
    pub fn canonical<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases.get(name).map_or(name, String::as_str)
    }

    pub fn parse(text: &str, what: &str) -> Facts {
        let mut f = Facts::default();
        for (n, line) in text.lines().enumerate() {
            if let Some(comment) = line.strip_prefix('#') {
                f.header.push(comment.trim().to_string());
                continue;
            }
            let here = format!("{what}:{}: cannot read {line:?}", n + 1);
            let here = here.as_str();
            let (kind, rest) = line.split_once(' ').expect(here);
            let (name, value) = rest.split_once(' ').expect(here);
            let int = || value.parse::<i64>().expect(here);
            match kind {
                "define" | "enumval" => {
                    f.values.insert(name.to_string(), int());
                }
                "internal" => {
                    f.internal.insert(name.to_string(), int());
                }
                "definechar" => {
                    f.chars
                        .insert(name.to_string(), value.chars().next().expect(here));
                }
                "meta" => {
                    let id: u16 = name.parse().expect(here);
                    let cols: Vec<&str> = value.split(' ').collect();
                    let num =
                        |i: usize| -> i64 { cols.get(i).and_then(|c| c.parse().ok()).expect(here) };
                    let type_char = cols.first().and_then(|c| c.chars().next());
                    f.meta.insert(
                        id,
                        Meta {
                            type_char: type_char.expect(here),
                            level: num(1),
                            scope: num(2),
                        },
                    );
                }
                "metacount" => {
                    let n = usize::try_from(int()).expect(here);
                    assert_eq!(f.meta.len(), n, "{here}: {} meta lines", f.meta.len());
                }
                "proto" => {
                    let (params, ret) = value.rsplit_once(") -> ").expect(here);
                    let params = params.strip_prefix('(').expect(here);
                    let params = if params.is_empty() {
                        Vec::new()
                    } else {
                        params.split("; ").map(str::to_string).collect()
                    };
                    f.protos.insert(
                        name.to_string(),
                        Proto {
                            params,
                            ret: ret.to_string(),
                        },
                    );
                }
                "typedef" => {
                    f.typedefs.insert(name.to_string(), value.to_string());
                }
                "enumtype" => {
                    f.enum_types.insert(name.to_string(), value.to_string());
                }
                "sizeof" | "offsetof" | "membersize" => {
                    f.layout
                        .insert(format!("{kind} {name}"), value.parse().expect(here));
                }
                "alias" => {
                    f.aliases.insert(name.to_string(), value.to_string());
                }
                "membertype" => {
                    f.member_types.insert(name.to_string(), value.to_string());
                }
                _ => panic!("{here}"),
            }
        }
        f
    }

    /// Whether a canonical C type (`T`, `const T`, `T *`, `R (*)(A, B)`) is the Rust type `rust`
    /// (`type_name` spelling, paths shortened by [`shorten`]). `None` when they agree, else why not.
    pub fn c_vs_rust(&self, c: &str, rust: &str) -> Option<String> {
        if self.matches(c.trim(), rust.trim()) {
            None
        } else {
            Some(format!("C `{c}` is not Rust `{rust}`"))
        }
    }

    fn matches(&self, c: &str, rust: &str) -> bool {
        if let Some((ret, params)) = split_c_fn_pointer(c) {
            let inner = rust
                .strip_prefix("Option<")
                .and_then(|r| r.strip_suffix('>'))
                .unwrap_or(rust);
            let Some((rparams, rret)) = split_rust_fn(inner) else {
                return false;
            };
            return rparams.len() == params.len()
                && self.matches(&ret, &rret)
                && params.iter().zip(&rparams).all(|(c, r)| self.matches(c, r));
        }
        if let Some((elem, len)) = c
            .strip_suffix(']')
            .and_then(|c| c.rsplit_once('['))
            .filter(|(_, n)| !n.is_empty())
        {
            // A member array `T[N]` is `[R; N]`.
            return rust
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|r| r.rsplit_once("; "))
                .is_some_and(|(r, n)| n == len && self.matches(elem, r));
        }
        if let Some(pointee) = c.strip_suffix(" *").or_else(|| c.strip_suffix(" * const")) {
            let pointee = pointee.trim();
            // A pointer to an opaque struct (no layout in the facts) is a handle the binding keeps
            // as an integer of pointer width.
            let bare = pointee.trim_start_matches("const ");
            if bare.starts_with("struct ")
                && !self.layout.contains_key(&format!("sizeof {bare}"))
                && rust == "usize"
            {
                return true;
            }
            return match pointee.strip_prefix("const ") {
                Some(p) => rust
                    .strip_prefix("*const ")
                    .is_some_and(|r| self.matches(p, r)),
                None => rust
                    .strip_prefix("*mut ")
                    .is_some_and(|r| self.matches(pointee, r)),
            };
        }
        let c = c.strip_prefix("const ").unwrap_or(c);
        if let Some(base) = self.enum_types.get(c) {
            return self.matches(base, rust);
        }
        let scalar: &[&str] = match c {
            "void" => &["()", "c_void"],
            "char" => &["i8", "u8"],
            "signed char" => &["i8"],
            "unsigned char" => &["u8"],
            "short" => &["i16"],
            "unsigned short" => &["u16"],
            "int" => &["i32"],
            "unsigned int" => &["u32"],
            // LP64: long and long long are both 64 bits; usize/isize are pointer width.
            "long" | "long long" => &["i64", "isize"],
            "unsigned long" | "unsigned long long" => &["u64", "usize"],
            "float" => &["f32"],
            "double" => &["f64"],
            // A struct, union or typedef-defined aggregate: the Rust type of the same name, or of
            // another typedef name of it.
            other => return other == rust || self.aliases.get(rust).is_some_and(|a| a == other),
        };
        scalar.contains(&rust)
    }
}

/// `R (*)(A, B)` → (`R`, [`A`, `B`]).
fn split_c_fn_pointer(c: &str) -> Option<(String, Vec<String>)> {
    let at = c.find(" (*)(")?;
    let ret = c[..at].to_string();
    let inner = c[at + 5..].strip_suffix(')')?;
    let params = split_top_level(inner, ", ");
    let params = if params == ["void"] {
        Vec::new()
    } else {
        params
    };
    Some((ret, params))
}

/// `unsafe extern "C" fn(A, B) -> R` → ([`A`, `B`], `R`); no `->` is `()`.
pub fn split_rust_fn(rust: &str) -> Option<(Vec<String>, String)> {
    let rest = rust
        .strip_prefix("unsafe extern \"C\" fn(")
        .or_else(|| rust.strip_prefix("extern \"C\" fn("))?;
    let mut depth = 0usize;
    let mut close = None;
    let mut previous = ' ';
    for (i, ch) in rest.char_indices() {
        match ch {
            '(' | '<' | '[' => depth += 1,
            ')' if depth == 0 => {
                close = Some(i);
                break;
            }
            '>' if previous == '-' => {}
            ')' | '>' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        previous = ch;
    }
    let close = close?;
    let params = split_top_level(&rest[..close], ", ");
    let ret = rest[close + 1..]
        .trim()
        .strip_prefix("-> ")
        .unwrap_or("()")
        .to_string();
    Some((params, ret))
}

/// Split on `sep` outside brackets; an empty input is no item.
fn split_top_level(s: &str, sep: &str) -> Vec<String> {
    if s.trim().is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < s.len() {
        match bytes[i] {
            b'(' | b'<' | b'[' => depth += 1,
            b')' | b'>' | b']' => depth -= 1,
            _ => {}
        }
        // `->` is not a closing bracket.
        if bytes[i] == b'>' && i > 0 && bytes[i - 1] == b'-' {
            depth += 1;
        }
        if depth == 0 && s[i..].starts_with(sep) {
            out.push(s[start..i].trim().to_string());
            i += sep.len();
            start = i;
            continue;
        }
        i += 1;
    }
    out.push(s[start..].trim().to_string());
    out
}

/// `type_name` with every path cut to its last segment:
/// `*mut dcgm_otel::source::dcgm::ffi::dcgmFoo_v1` → `*mut dcgmFoo_v1`, `core::ffi::c_void` → `c_void`.
pub fn shorten(rust: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    for ch in rust.chars().chain(std::iter::once('\0')) {
        if ch.is_alphanumeric() || ch == '_' || ch == ':' {
            word.push(ch);
        } else {
            out.push_str(word.rsplit("::").next().unwrap_or(&word));
            word.clear();
            if ch != '\0' {
                out.push(ch);
            }
        }
    }
    out
}

/// The names declared `pub type NAME` inside `pub mod fn_types { ... }` of an FFI source file.
pub fn fn_type_names(source: &str) -> Vec<String> {
    let start = source
        .find("pub mod fn_types {")
        .expect("ffi.rs has a `pub mod fn_types` block");
    let body = &source[start..];
    let end = body.find("\n}\n").expect("the fn_types block ends");
    body[..end]
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub type "))
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// Compare one Rust function type with a prototype; every difference as a line.
pub fn check_fn(facts: &Facts, name: &str, rust_type_name: &str, errors: &mut Vec<String>) {
    let Some(proto) = facts.protos.get(name) else {
        errors.push(format!("{name}: no such function in the headers"));
        return;
    };
    let rust = shorten(rust_type_name);
    let Some((params, ret)) = split_rust_fn(&rust) else {
        errors.push(format!("{name}: `{rust}` is not an extern \"C\" fn type"));
        return;
    };
    if params.len() != proto.params.len() {
        errors.push(format!(
            "{name}: the header has {} parameters ({}), Rust {} ({})",
            proto.params.len(),
            proto.params.join("; "),
            params.len(),
            params.join(", ")
        ));
        return;
    }
    for (i, (c, r)) in proto.params.iter().zip(&params).enumerate() {
        if let Some(why) = facts.c_vs_rust(c, r) {
            errors.push(format!("{name}: parameter {}: {why}", i + 1));
        }
    }
    if let Some(why) = facts.c_vs_rust(&proto.ret, &ret) {
        errors.push(format!("{name}: return type: {why}"));
    }
}

#[test]
fn c_types_map_to_rust_strictly() {
    let mut f = Facts::parse(
        "enumtype ret_t int\nsizeof known_t 8\nproto f (const char *; known_t *; unsigned long; int (*)(unsigned int, void *)) -> ret_t\n",
        "inline",
    );
    f.layout.insert("sizeof struct known_st".into(), 8);
    let good = "unsafe extern \"C\" fn(*const i8, *mut known_t, usize, Option<unsafe extern \"C\" fn(u32, *mut c_void) -> i32>) -> i32";
    let mut errors = Vec::new();
    check_fn(&f, "f", good, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    for bad in [
        // constness of the pointee
        "unsafe extern \"C\" fn(*mut i8, *mut known_t, usize, Option<unsafe extern \"C\" fn(u32, *mut c_void) -> i32>) -> i32",
        // the return's signedness
        "unsafe extern \"C\" fn(*const i8, *mut known_t, usize, Option<unsafe extern \"C\" fn(u32, *mut c_void) -> i32>) -> u32",
        // a narrower integer
        "unsafe extern \"C\" fn(*const i8, *mut known_t, u32, Option<unsafe extern \"C\" fn(u32, *mut c_void) -> i32>) -> i32",
        // another struct
        "unsafe extern \"C\" fn(*const i8, *mut other_t, usize, Option<unsafe extern \"C\" fn(u32, *mut c_void) -> i32>) -> i32",
        // a parameter of the callback
        "unsafe extern \"C\" fn(*const i8, *mut known_t, usize, Option<unsafe extern \"C\" fn(i32, *mut c_void) -> i32>) -> i32",
        // one parameter fewer
        "unsafe extern \"C\" fn(*const i8, *mut known_t, usize) -> i32",
    ] {
        let mut errors = Vec::new();
        check_fn(&f, "f", bad, &mut errors);
        assert!(!errors.is_empty(), "accepted {bad}");
    }
}
