//! The samples of the families written beside the plain ones: XID errors (with `err_code` and
//! `err_msg`), and fields the snapshot gives per attribute set (the device's series, then each
//! set's own).

use super::label_cache::{EntityLabels, FamilyLayout};
use super::values::ValueFormatter;
use crate::snapshot::{FieldValue, PerSetValues};

/// The XID family's samples for one entity: each set's attributes plus `err_code` (the value) and
/// `err_msg` (its meaning in NVIDIA's catalogue), sorted by name as dcgm-exporter sorts them. The label
/// strings are cached per code.
pub(super) fn write_xid_samples(
    out: &mut String,
    fam: &FamilyLayout,
    labels: &mut EntityLabels,
    v: &FieldValue,
    value: &str,
) {
    let code = match v {
        FieldValue::Int(i) => *i,
        FieldValue::Double(d) => *d as i64,
        _ => return,
    };
    if labels.xid.as_ref().is_none_or(|(c, _)| *c != code) {
        let code_text = code.to_string();
        let extra = [
            ("err_code", code_text.as_str()),
            ("err_msg", crate::fields::xid::meaning(code)),
        ];
        let sets = labels
            .tails
            .iter()
            .map(|tail| {
                let mut s = labels.base.clone();
                let mut first = s.is_empty();
                tail.write(&mut s, &mut first, &extra);
                s.push_str("} ");
                s
            })
            .collect();
        labels.xid = Some((code, sets));
    }
    if let Some((_, sets)) = &labels.xid {
        for set in sets {
            out.push_str(&fam.open);
            out.push_str(set);
            out.push_str(value);
            out.push('\n');
        }
    }
}

/// The attribute sets' series of a field written per set (`snapshot::PerSetValues`), each with its own value
/// (the device's series without attribution is written before). Returns the samples written.
pub(super) fn write_per_set(
    out: &mut String,
    fam: &FamilyLayout,
    labels: &EntityLabels,
    per_set: &PerSetValues,
    fmt: &mut ValueFormatter,
) -> usize {
    let mut samples = 0;
    for (set, &i) in labels.sets.iter().zip(&labels.set_index) {
        let Some(value) = per_set
            .per_set
            .get(i)
            .and_then(|v| fmt.format(v, fam.style))
        else {
            continue;
        };
        out.push_str(&fam.open);
        out.push_str(set);
        out.push_str(value);
        out.push('\n');
        samples += 1;
    }
    samples
}
