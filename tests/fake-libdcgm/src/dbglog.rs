//! libdcgm's own log, as far as an exporter can see it: `__DCGM_DBG_FILE` (a path, or `-` for standard
//! output) and `__DCGM_DBG_LVL` (NONE FATAL ERROR WARN INFO DEBUG VERB), read when the embedded host
//! engine starts. At INFO or more verbose, the fake writes one line there, as the real library logs its
//! start; otherwise nothing.

use std::io::Write;

/// The embedded host engine started in `mode`.
pub fn host_engine_started(mode: u32) {
    let level = std::env::var("__DCGM_DBG_LVL").unwrap_or_default();
    if !matches!(level.as_str(), "INFO" | "DEBUG" | "VERB") {
        return;
    }
    let line = format!("fake libdcgm {level}: embedded host engine started (mode {mode})\n");
    match std::env::var("__DCGM_DBG_FILE").ok().as_deref() {
        Some("-") => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
        }
        Some(path) if !path.is_empty() => {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = f.write_all(line.as_bytes());
            }
        }
        _ => {}
    }
}
