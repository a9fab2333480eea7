//! dcgm-exporter's synthesized families (`DCGM_EXP_*`): the six names a counters CSV may list besides
//! DCGM fields, and the row that enables each. They are not DCGM fields: a source reads the history
//! they need (XID and clock-event samples, health checks, NvLink P2P status) only when a row lists
//! them, and the `enrich::exp` stage counts them.

use super::MetricKind;

/// One `DCGM_EXP_*` family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExpFamily {
    /// XID errors within the `-x` window, per `xid`.
    XidErrorsCount,
    /// Clock events within the `--clock-events-count-window-size` window, per `clock_event`.
    ClockEventsCount,
    /// Health per watch system, from `dcgmHealthCheck`.
    GpuHealthStatus,
    /// NvLink P2P status per GPU pair.
    P2pStatus,
    /// XID errors since start, per `xid`.
    XidErrorsTotal,
    /// Clock-event starts since start, per `clock_event`.
    ClockEventsTotal,
}

impl ExpFamily {
    /// Every family, in dcgm-exporter's pseudo field-id order (9001…9006): its output order.
    pub const ALL: [ExpFamily; 6] = [
        ExpFamily::XidErrorsCount,
        ExpFamily::ClockEventsCount,
        ExpFamily::GpuHealthStatus,
        ExpFamily::P2pStatus,
        ExpFamily::XidErrorsTotal,
        ExpFamily::ClockEventsTotal,
    ];

    /// The metric name.
    pub fn name(self) -> &'static str {
        match self {
            ExpFamily::XidErrorsCount => "DCGM_EXP_XID_ERRORS_COUNT",
            ExpFamily::ClockEventsCount => "DCGM_EXP_CLOCK_EVENTS_COUNT",
            ExpFamily::GpuHealthStatus => "DCGM_EXP_GPU_HEALTH_STATUS",
            ExpFamily::P2pStatus => "DCGM_EXP_P2P_STATUS",
            ExpFamily::XidErrorsTotal => "DCGM_EXP_XID_ERRORS_TOTAL",
            ExpFamily::ClockEventsTotal => "DCGM_EXP_CLOCK_EVENTS_TOTAL",
        }
    }

    pub fn by_name(name: &str) -> Option<ExpFamily> {
        ExpFamily::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether the family needs the XID history (`DCGM_FI_DEV_XID_ERRORS` samples since the last read).
    pub fn reads_xids(self) -> bool {
        matches!(self, ExpFamily::XidErrorsCount | ExpFamily::XidErrorsTotal)
    }

    /// Whether the family needs the clock-event history.
    pub fn reads_clock_events(self) -> bool {
        matches!(
            self,
            ExpFamily::ClockEventsCount | ExpFamily::ClockEventsTotal
        )
    }
}

/// One accepted `DCGM_EXP_*` row: the family, the `# TYPE` and `# HELP` the CSV gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpRow {
    pub family: ExpFamily,
    pub kind: MetricKind,
    pub help: String,
    /// 1-based line in the CSV.
    pub line: usize,
}

/// What a source must read for the listed families.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IncidentReads {
    /// XID samples since the last collection (`dcgmGetValuesSince_v2` on field 230).
    pub xids: bool,
    /// Clock-event samples since the last collection (field 112).
    pub clock_events: bool,
    /// `dcgmHealthCheck` of a private health group, once per collection.
    pub health: bool,
    /// `dcgmGetNvLinkP2PStatus`, once per collection.
    pub p2p: bool,
}

impl IncidentReads {
    /// What the rows need.
    pub fn of(rows: &[ExpRow]) -> IncidentReads {
        let any = |f: fn(ExpFamily) -> bool| rows.iter().any(|r| f(r.family));
        IncidentReads {
            xids: any(ExpFamily::reads_xids),
            clock_events: any(ExpFamily::reads_clock_events),
            health: any(|f| f == ExpFamily::GpuHealthStatus),
            p2p: any(|f| f == ExpFamily::P2pStatus),
        }
    }

    /// Whether anything is read at all.
    pub fn any(self) -> bool {
        self.xids || self.clock_events || self.health || self.p2p
    }

    /// Everything (what a consumer of incidents that counts nothing itself, e.g. OTLP log records,
    /// may ask for).
    pub fn all() -> IncidentReads {
        IncidentReads {
            xids: true,
            clock_events: true,
            health: true,
            p2p: true,
        }
    }

    /// Both needs together.
    pub fn union(self, other: IncidentReads) -> IncidentReads {
        IncidentReads {
            xids: self.xids || other.xids,
            clock_events: self.clock_events || other.clock_events,
            health: self.health || other.health,
            p2p: self.p2p || other.p2p,
        }
    }
}
