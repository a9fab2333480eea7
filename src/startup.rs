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

// The error lives below every feature (the counters' plan, below this module, returns it too).
pub use crate::start_error::StartError;

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
