//! `FAKE_DCGM_CALL_LOG=path`: one line per C call, `<function> key=value ... rc=<code>`, appended and
//! written with one `write` per line (no buffering), so a test can read the file while the exporter runs.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{LazyLock, Mutex};

static LOG: LazyLock<Mutex<Option<File>>> = LazyLock::new(|| {
    let file = std::env::var_os("FAKE_DCGM_CALL_LOG")
        .filter(|p| !p.is_empty())
        .and_then(|p| OpenOptions::new().create(true).append(true).open(p).ok());
    Mutex::new(file)
});

/// Append one line (a trailing newline is added). Spaces inside values must already be escaped.
pub fn line(text: &str) {
    let mut guard = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = guard.as_mut() {
        let mut buf = String::with_capacity(text.len() + 1);
        buf.push_str(text);
        buf.push('\n');
        // A failing log write must not change what the fake answers.
        let _ = f.write_all(buf.as_bytes());
        let _ = f.flush();
    }
}

/// A value safe for a space-separated line: whitespace becomes `_`, an empty value `""`.
pub fn word(s: &str) -> String {
    if s.is_empty() {
        return "\"\"".to_string();
    }
    s.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}
