//! The start-up contract between the wiring ([`crate::app`]) and each feature's own plan: the error
//! every plan returns ([`StartError`]: one line and an exit code) and the small contexts the plans
//! receive — what was resolved before them ([`ResolveContext`]) and what exists once start-up has
//! begun ([`StartContext`]).
//!
//! Every feature resolves its own flags into a plan (all checks, no side effect) and starts it
//! (threads, sockets, libraries); `app` only orders the phases.

use std::sync::Arc;
use std::time::Duration;

use crate::config::distributions::DistributionSpec;
use crate::config::host::HostInfo;
use crate::telemetry::self_metrics::SelfMetrics;

/// A start-up failure: the one line to print and the exit code (2: bad input, 1: the environment).
#[derive(Debug)]
pub struct StartError {
    pub code: u8,
    pub message: String,
}

impl StartError {
    /// Bad input: a flag, variable or file the user gave (exit code 2).
    pub fn input(error: impl std::fmt::Display) -> StartError {
        StartError {
            code: 2,
            message: one_line(&error.to_string()),
        }
    }

    /// The environment failed (library missing, host engine down, port taken): exit code 1.
    pub fn environment(error: impl std::fmt::Display) -> StartError {
        StartError {
            code: 1,
            message: one_line(&error.to_string()),
        }
    }

    /// `input` or `environment`, as the error says.
    pub fn classify(bad_input: bool, error: impl std::fmt::Display) -> StartError {
        if bad_input {
            StartError::input(error)
        } else {
            StartError::environment(error)
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Whitespace runs (newlines included) become one space: every start-up error is one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What every plan may read while resolving: settled before any feature is resolved.
pub struct ResolveContext<'a> {
    /// The collect interval (`-c`, or `--config-file`'s).
    pub interval: Duration,
    /// The host label and the node name.
    pub host: &'a HostInfo,
    /// Looks up an environment variable (read once, here, so tests can replace it).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The fields sampled between collections (`--distribution`, or `--config-file`'s), checked.
    pub distributions: Arc<[DistributionSpec]>,
}

/// What every plan may use while starting: the self-metrics registry and the collect interval.
pub struct StartContext<'a> {
    pub interval: Duration,
    pub self_metrics: &'a Arc<SelfMetrics>,
}
