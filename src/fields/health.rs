//! DCGM health watches: the watch systems (`DCGM_HEALTH_WATCH_*` bits) with the names dcgm-exporter
//! writes in `health_watch`, and the `DCGM_FR_*` error codes of a health incident (data:
//! `dcgm-fr.tsv`) with dcgm-exporter's spelling of an unknown one, `DCGM_FR_UNKNOWN(<n>)`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;

/// `DCGM_HEALTH_WATCH_ALL`: every system (what `dcgmHealthSet` is given).
pub const WATCH_ALL: u32 = 0xFFFF_FFFF;

/// The GPU watch systems dcgm-exporter reports, (bit, `health_watch` name), in its order; `ALL` (the
/// GPU's overall result) follows them.
pub const WATCHES: [(u32, &str); 10] = [
    (0x1, "PCIE"),
    (0x2, "NVLINK"),
    (0x4, "PMU"),
    (0x8, "MCU"),
    (0x10, "MEM"),
    (0x20, "SM"),
    (0x40, "INFOROM"),
    (0x80, "THERMAL"),
    (0x100, "POWER"),
    (0x200, "DRIVER"),
];

/// The `health_watch` value of the GPU's overall result.
pub const ALL_NAME: &str = "ALL";

/// The name of a watch-system bit (`None` for the NvSwitch / ConnectX systems, not GPU watches).
pub fn watch_name(bit: u32) -> Option<&'static str> {
    WATCHES.iter().find(|(b, _)| *b == bit).map(|(_, n)| *n)
}

/// The bit of a watch name (`MEM` → 0x10).
pub fn watch_bit(name: &str) -> Option<u32> {
    WATCHES.iter().find(|(_, n)| *n == name).map(|(b, _)| *b)
}

/// `DCGM_FR_OK`.
pub const OK_CODE: &str = "DCGM_FR_OK";

struct Codes {
    by_number: HashMap<u32, &'static str>,
    by_name: HashMap<&'static str, u32>,
}

static CODES: LazyLock<Codes> = LazyLock::new(|| {
    let mut codes = Codes {
        by_number: HashMap::new(),
        by_name: HashMap::new(),
    };
    for line in include_str!("dcgm-fr.tsv").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((n, name)) = line.split_once('\t') else {
            continue;
        };
        if let Ok(n) = n.trim().parse::<u32>() {
            codes.by_number.insert(n, name.trim());
            codes.by_name.insert(name.trim(), n);
        }
    }
    codes
});

/// The `health_error_code` of a `DCGM_FR_*` number: its name, or `DCGM_FR_UNKNOWN(<n>)`.
pub fn error_code_name(code: u32) -> Cow<'static, str> {
    match CODES.by_number.get(&code) {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(format!("DCGM_FR_UNKNOWN({code})")),
    }
}

/// The number of a `DCGM_FR_*` name.
pub fn error_code_number(name: &str) -> Option<u32> {
    CODES.by_name.get(name).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_both_ways() {
        assert_eq!(error_code_name(0), "DCGM_FR_OK");
        assert_eq!(error_code_name(101), "DCGM_FR_XID_ERROR");
        assert_eq!(error_code_name(4242), "DCGM_FR_UNKNOWN(4242)");
        assert_eq!(error_code_number("DCGM_FR_FAULTY_MEMORY"), Some(52));
        assert_eq!(watch_bit("MEM"), Some(0x10));
        assert_eq!(watch_name(0x400), None);
    }
}
