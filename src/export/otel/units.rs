//! UCUM units for OTel instruments, in one declarative table.
//!
//! DCGM declares a unit for some fields (`W`, `C`, `mJ`, `MB/s`, `KB/s`, `BER`, and `#` meaning "a
//! number"); the counters CSV help text often says the unit in words ("in MHz", "in MiB", "Percent of
//! time"). [`unit_for`] takes DCGM's unit when it is a real one, else the first help-text phrase that
//! matches, else no unit (empty string: OTel's "unknown"). Both tables are data; add a row, not a branch.

use crate::counters::Counter;

/// DCGM's declared unit → UCUM. `#` (a plain count or an enum) says nothing, so it falls through.
const DCGM_UNITS: &[(&str, &str)] = &[
    ("W", "W"),
    ("C", "Cel"),
    ("mJ", "mJ"),
    ("MB/s", "MBy/s"),
    ("KB/s", "kBy/s"),
    ("BER", "1"),
];

/// Help-text phrases (matched case-insensitively, in this order) → UCUM.
const HELP_UNITS: &[(&str, &str)] = &[
    ("in mhz", "MHz"),
    ("(mhz)", "MHz"),
    ("in mib", "MiB"),
    ("in mb", "MiB"),
    ("(mib)", "MiB"),
    ("in bytes per second", "By/s"),
    ("bytes per second", "By/s"),
    ("in b/s", "By/s"),
    ("in bytes", "By"),
    ("in degrees celsius", "Cel"),
    ("in celsius", "Cel"),
    ("in c)", "Cel"),
    ("in millijoules", "mJ"),
    ("in mj", "mJ"),
    ("in joules", "J"),
    ("in watts", "W"),
    ("in w)", "W"),
    ("in microseconds", "us"),
    ("in us)", "us"),
    ("in milliseconds", "ms"),
    ("in ms)", "ms"),
    ("in seconds", "s"),
    ("in percent", "%"),
    ("percent", "%"),
    ("(in %)", "%"),
    ("%", "%"),
    ("ratio of ", "1"),
];

/// The UCUM unit of a field's declared DCGM unit, when it has a real one.
pub fn field_unit(field: &crate::fields::FieldInfo) -> Option<&'static str> {
    let u = field.unit?;
    DCGM_UNITS
        .iter()
        .find(|(d, _)| *d == u)
        .map(|(_, ucum)| *ucum)
}

/// The UCUM unit of a counters row (empty when unknown).
pub fn unit_for(row: &Counter) -> &'static str {
    if let Some(ucum) = field_unit(&row.field) {
        return ucum;
    }
    let help = row.help.to_ascii_lowercase();
    HELP_UNITS
        .iter()
        .find(|(phrase, _)| help.contains(phrase))
        .map(|(_, ucum)| *ucum)
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters;

    #[test]
    fn default_counters_get_ucum_units() {
        let set = counters::parse(counters::DEFAULT_COUNTERS_CSV, "default").unwrap();
        let unit = |name: &str| unit_for(set.rows.iter().find(|r| r.name == name).unwrap());
        assert_eq!(unit("DCGM_FI_DEV_SM_CLOCK"), "MHz");
        assert_eq!(unit("DCGM_FI_DEV_GPU_TEMP"), "Cel");
        assert_eq!(unit("DCGM_FI_DEV_POWER_USAGE"), "W");
        assert_eq!(unit("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"), "mJ");
        assert_eq!(unit("DCGM_FI_DEV_GPU_UTIL"), "%");
        assert_eq!(unit("DCGM_FI_DEV_ENC_UTIL"), "%");
        assert_eq!(unit("DCGM_FI_DEV_FB_FREE"), "MiB");
        assert_eq!(unit("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"), "MBy/s");
        assert_eq!(unit("DCGM_FI_PROF_PCIE_TX_BYTES"), "By/s");
        assert_eq!(unit("DCGM_FI_PROF_DRAM_ACTIVE"), "1");
        assert_eq!(unit("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"), "");
        assert_eq!(unit("DCGM_FI_DEV_XID_ERRORS"), "");
    }
}
