//! The `DCGM_EXP_*` families' flags (`Incidents` in `--help`): the windows of the two `_COUNT`
//! families, with dcgm-exporter's names, environment variables and defaults (milliseconds).

use clap::Args;

/// The windows of `DCGM_EXP_XID_ERRORS_COUNT` and `DCGM_EXP_CLOCK_EVENTS_COUNT`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Incidents (DCGM_EXP_* rows of the counters CSV)")]
pub struct ExpArgs {
    /// Window of DCGM_EXP_XID_ERRORS_COUNT in milliseconds: XID errors seen within it.
    #[arg(short = 'x', long = "xid-count-window-size", env = "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
          value_name = "MS", default_value_t = 300_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub xid_count_window_size: u64,

    /// Window of DCGM_EXP_CLOCK_EVENTS_COUNT in milliseconds: the clock-event samples within it that
    /// have each reason set (one sample per collect interval).
    #[arg(long = "clock-events-count-window-size", env = "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
          value_name = "MS", default_value_t = 300_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub clock_events_count_window_size: u64,
}
