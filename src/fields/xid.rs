//! NVIDIA's XID catalogue: the short meaning of each XID error code, as dcgm-exporter writes it in the
//! `err_msg` label of `DCGM_FI_DEV_XID_ERRORS`. The catalogue is data (`xid-catalog.tsv`, embedded),
//! indexed once on first use; codes beyond it read "Unknown Error".

use std::sync::LazyLock;

const CATALOG_TSV: &str = include_str!("xid-catalog.tsv");

/// The field whose value is an XID code (`DCGM_FI_DEV_XID_ERRORS`).
pub const XID_FIELD_ID: super::FieldId = 230;

/// The meaning written for codes the catalogue does not list.
pub const UNKNOWN: &str = "Unknown Error";

static MEANINGS: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut out: Vec<&'static str> = Vec::new();
    for line in CATALOG_TSV.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((code, meaning)) = line.split_once('\t') else {
            continue;
        };
        let Ok(code) = code.trim().parse::<usize>() else {
            continue;
        };
        if out.len() <= code {
            out.resize(code + 1, UNKNOWN);
        }
        out[code] = meaning.trim();
    }
    out
});

/// The meaning of an XID code: "No Error" for 0, the catalogue's text, or "Unknown Error".
pub fn meaning(code: i64) -> &'static str {
    usize::try_from(code)
        .ok()
        .and_then(|c| MEANINGS.get(c).copied())
        .unwrap_or(UNKNOWN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_unknown_and_negative_codes() {
        assert_eq!(meaning(0), "No Error");
        assert_eq!(meaning(13), "Graphics Engine Exception");
        assert_eq!(meaning(172), "Uncorrectable SRAM Error");
        assert_eq!(meaning(173), UNKNOWN);
        assert_eq!(meaning(-1), UNKNOWN);
        assert_eq!(meaning(i64::MAX), UNKNOWN);
    }
}
