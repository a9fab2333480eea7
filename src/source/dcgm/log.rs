//! `--enable-dcgm-log` / `--dcgm-log-level`: DCGM's own log. libdcgm reads `__DCGM_DBG_FILE` (a path,
//! or `-` for standard output) and `__DCGM_DBG_LVL` when its embedded host engine starts; dcgm-otel sets
//! them before any thread starts, as dcgm-exporter does, keeping a `__DCGM_DBG_FILE` the user set. With
//! `-r` the log is nv-hostengine's, not this process's.

use clap::ValueEnum;

/// Where libdcgm writes its log.
pub const FILE_VAR: &str = "__DCGM_DBG_FILE";
/// How much libdcgm logs.
pub const LEVEL_VAR: &str = "__DCGM_DBG_LVL";

/// DCGM's log levels, as `__DCGM_DBG_LVL` spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum DcgmLogLevel {
    None,
    Fatal,
    Error,
    Warn,
    Info,
    Debug,
    Verb,
}

impl DcgmLogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            DcgmLogLevel::None => "NONE",
            DcgmLogLevel::Fatal => "FATAL",
            DcgmLogLevel::Error => "ERROR",
            DcgmLogLevel::Warn => "WARN",
            DcgmLogLevel::Info => "INFO",
            DcgmLogLevel::Debug => "DEBUG",
            DcgmLogLevel::Verb => "VERB",
        }
    }
}

/// Set libdcgm's variables for `level` and say where its log goes. Call before any thread starts
/// (the environment is process-wide) and before libdcgm is initialised.
pub fn pass_through(level: DcgmLogLevel) -> String {
    let file = std::env::var(FILE_VAR)
        .ok()
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| {
            std::env::set_var(FILE_VAR, "-");
            "-".to_string()
        });
    std::env::set_var(LEVEL_VAR, level.as_str());
    if file == "-" {
        format!("standard output ({FILE_VAR}=-)")
    } else {
        format!("{file} ({FILE_VAR})")
    }
}
