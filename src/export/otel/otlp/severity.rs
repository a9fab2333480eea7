//! How severe each incident's log record is: the OTLP severity of an XID by its class (a data table,
//! [`XID_CLASSES`]), of a clock-event reason starting or ending, and of a health-watch transition.
//! Kept apart from the record builder so that the mapping is read (and reviewed) as data.

use crate::snapshot::{HealthResult, IncidentKind};

/// The OTLP severities used (`SeverityNumber`: the first number of each range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Info,
    Warn,
    Error,
    Fatal,
}

impl Severity {
    /// `SEVERITY_NUMBER_INFO` (9), `_WARN` (13), `_ERROR` (17), `_FATAL` (21).
    pub fn number(self) -> i32 {
        match self {
            Severity::Info => 9,
            Severity::Warn => 13,
            Severity::Error => 17,
            Severity::Fatal => 21,
        }
    }
    /// The severity text.
    pub fn text(self) -> &'static str {
        match self {
            Severity::Info => "INFO",
            Severity::Warn => "WARN",
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }
}

/// A class of XID codes and the severity of their records.
#[derive(Debug)]
pub struct XidClass {
    /// The class name, sent as `nvidia.xid.class`.
    pub name: &'static str,
    pub severity: Severity,
    pub codes: &'static [u32],
}

/// The XID classes (codes and meanings: NVIDIA's XID catalogue, `src/fields/xid-catalog.tsv`). A code in
/// no class is [`OTHER_XID`]: mostly application faults (13, 31, 43, 45, ...) that stop one program, not
/// the GPU.
pub const XID_CLASSES: &[XidClass] = &[
    // Uncorrectable memory errors: the data is lost and the GPU needs a reset (or draining).
    XidClass {
        name: "uncorrectable_memory",
        severity: Severity::Fatal,
        codes: &[48, 95, 140, 171, 172],
    },
    // The GPU is gone or never came up.
    XidClass {
        name: "gpu_lost",
        severity: Severity::Fatal,
        codes: &[79, 143],
    },
    // Corrected or contained memory errors and row remapping / page retirement events.
    XidClass {
        name: "memory",
        severity: Severity::Error,
        codes: &[63, 64, 92, 94],
    },
    // NVLink and chip-to-chip link errors.
    XidClass {
        name: "interconnect",
        severity: Severity::Error,
        codes: &[74, 121, 144, 145, 146],
    },
    // The GPU System Processor (firmware) timed out or failed.
    XidClass {
        name: "gsp",
        severity: Severity::Error,
        codes: &[119, 120],
    },
];

/// The class of every code no class lists.
pub const OTHER_XID: XidClass = XidClass {
    name: "other",
    severity: Severity::Warn,
    codes: &[],
};

/// Clock-event reasons that slow the GPU down against the user's will (thermal, power brake, hardware
/// slowdown): WARN when they start. Every other reason (idle, power cap, application clocks, sync
/// boost, display clocks) is INFO, and so is every reason ending.
pub const SLOWDOWN_REASONS: &[&str] =
    &["hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"];

/// The class of an XID code.
pub fn xid_class(code: u32) -> &'static XidClass {
    XID_CLASSES
        .iter()
        .find(|c| c.codes.contains(&code))
        .unwrap_or(&OTHER_XID)
}

/// The severity of an incident's record.
pub fn of(kind: &IncidentKind) -> Severity {
    match kind {
        IncidentKind::Xid { code } => xid_class(*code).severity,
        IncidentKind::ClockEventStarted { reason } if SLOWDOWN_REASONS.contains(reason) => {
            Severity::Warn
        }
        IncidentKind::ClockEventStarted { .. } | IncidentKind::ClockEventEnded { .. } => {
            Severity::Info
        }
        IncidentKind::Health { result, .. } => match result {
            HealthResult::Fail => Severity::Error,
            HealthResult::Warn => Severity::Warn,
            HealthResult::Pass => Severity::Info,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::time::Duration;

    #[test]
    fn classes_are_disjoint_and_the_listed_codes_are_error_or_fatal() {
        let mut seen = HashSet::new();
        for c in XID_CLASSES {
            for code in c.codes {
                assert!(seen.insert(*code), "XID {code} is in two classes");
            }
        }
        for code in [48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 171, 172] {
            let s = of(&IncidentKind::Xid { code });
            assert!(
                matches!(s, Severity::Error | Severity::Fatal),
                "XID {code}: {s:?}"
            );
        }
        assert_eq!(of(&IncidentKind::Xid { code: 48 }), Severity::Fatal);
        assert_eq!(of(&IncidentKind::Xid { code: 31 }), Severity::Warn);
        assert_eq!(xid_class(31).name, "other");
    }

    #[test]
    fn clock_events_and_health() {
        let start = |reason| of(&IncidentKind::ClockEventStarted { reason });
        assert_eq!(start("hw_thermal"), Severity::Warn);
        assert_eq!(start("power_cap"), Severity::Info);
        let end = IncidentKind::ClockEventEnded {
            reason: "hw_thermal",
            duration: Duration::from_secs(3),
        };
        assert_eq!(of(&end), Severity::Info);
        let health = |result| IncidentKind::Health {
            watch: "MEM",
            previous: HealthResult::Pass,
            result,
            error_code: "DCGM_FR_OK".into(),
            message: "".into(),
        };
        assert_eq!(of(&health(HealthResult::Fail)), Severity::Error);
        assert_eq!(of(&health(HealthResult::Warn)), Severity::Warn);
        assert_eq!(of(&health(HealthResult::Pass)), Severity::Info);
    }
}
