//! The counters CSV: which DCGM fields to export, as what Prometheus type, with which help text.
//!
//! Parsing follows dcgm-exporter exactly (its `counter_config.go`, by way of Go's `encoding/csv`):
//! lines whose first character is `#` are comments, blank lines are skipped, fields follow RFC 4180
//! quoting, each field is trimmed of spaces (not tabs), and every record has exactly three fields:
//! `DCGM field name, type, help`. Types are `gauge`, `counter` or `label`; `histogram` and `summary`
//! are rejected here (dcgm-exporter would render them as invalid exposition). Names resolve through the
//! field catalog, including deprecated aliases and 1.x lowercase names; `DCGM_EXP_*` names (the Go
//! exporter's synthesized metrics) become [`exporter::ExpRow`]s (an unknown `DCGM_EXP_*` name is set
//! aside with a warning, as before). Every error names the file, line and column.

pub mod configmap;
pub mod exporter;
pub mod plan;
pub mod reload;
pub mod watch_groups;

use std::path::Path;

use crate::fields::{catalog, FieldInfo};
use crate::local_file::{self, Links};

/// How a row is exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    Gauge,
    Counter,
    /// Not a metric: the field's string value becomes a label on the entity's other series.
    Label,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
            MetricKind::Label => "label",
        }
    }
}

/// One accepted CSV row.
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    /// The metric name: column 1 verbatim (so `dcgm_gpu_temp` stays `dcgm_gpu_temp`).
    pub name: String,
    pub kind: MetricKind,
    pub help: String,
    pub field: FieldInfo,
    /// 1-based line number in the CSV, for messages.
    pub line: usize,
}

/// The accepted rows of a counters CSV, in file order, plus what was set aside.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CounterSet {
    /// Where the rows came from (a path, or `built-in default`).
    pub origin: String,
    pub rows: Vec<Counter>,
    /// `DCGM_EXP_*` rows dcgm-otel exports (the families of [`exporter::ExpFamily`]), in file order.
    pub exporter_rows: Vec<exporter::ExpRow>,
    /// `DCGM_EXP_*` rows naming no family dcgm-exporter has: skipped with a warning.
    pub unsupported_exporter_fields: Vec<(usize, String)>,
    /// Fields watched at their own interval (`--config-file` watch groups), resolved against the rows.
    pub watch_groups: Vec<watch_groups::WatchGroup>,
}

impl CounterSet {
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Drop the rows for which `keep` is false (DCP rows when profiling is unavailable, say).
    /// Returns the dropped rows.
    pub fn retain(&mut self, mut keep: impl FnMut(&Counter) -> bool) -> Vec<Counter> {
        let (kept, dropped): (Vec<_>, Vec<_>) = self.rows.drain(..).partition(|c| keep(c));
        self.rows = kept;
        dropped
    }
}

/// A CSV that cannot be used, with its position (`origin:line:column: message`; a file that cannot be
/// read at all has no position: `origin: message`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{}", self.describe())]
pub struct CsvError {
    pub origin: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl CsvError {
    fn describe(&self) -> String {
        if self.line == 0 {
            format!("{}: {}", self.origin, self.message)
        } else {
            format!(
                "{}:{}:{}: {}",
                self.origin, self.line, self.column, self.message
            )
        }
    }
}

/// The project's default counters (same fields and types as dcgm-exporter's default-counters.csv).
pub const DEFAULT_COUNTERS_CSV: &str = include_str!("default-counters.csv");

/// Where dcgm-exporter's packages and images install the counters CSV (the `-f` default).
pub const DEFAULT_COLLECTORS: &str = "/etc/dcgm-exporter/default-counters.csv";

/// The counters of `-f PATH`: the file; but the built-in defaults when `path` is the default path,
/// was not given explicitly and does not exist (a machine without dcgm-exporter's package).
pub fn load(path: &Path, explicitly_set: bool) -> Result<CounterSet, CsvError> {
    if !explicitly_set && path == Path::new(DEFAULT_COLLECTORS) && !path.exists() {
        return parse(DEFAULT_COUNTERS_CSV, "built-in default counters");
    }
    load_file(path)
}

/// Read and parse a counters CSV file.
pub fn load_file(path: &Path) -> Result<CounterSet, CsvError> {
    let origin = path.display().to_string();
    let text =
        local_file::read(path, local_file::MAX_CONFIG_BYTES, Links::Follow).map_err(|e| {
            CsvError {
                origin: origin.clone(),
                line: 0,
                column: 0,
                message: format!("cannot read counters CSV: {e}"),
            }
        })?;
    let text = String::from_utf8(text).map_err(|e| CsvError {
        origin: origin.clone(),
        line: 0,
        column: 0,
        message: format!("not UTF-8 text: {e}"),
    })?;
    parse(&text, &origin)
}

/// One record with the position where each field starts.
struct Record {
    line: usize,
    fields: Vec<(String, usize)>,
}

/// Split `text` into records following Go's encoding/csv rules (Comment='#', no lazy quotes).
fn records(text: &str, origin: &str) -> Result<Vec<Record>, CsvError> {
    let mut cursor = Cursor {
        text,
        origin,
        chars: text.char_indices().peekable(),
        line: 1,
        line_start: 0,
    };
    let mut out = Vec::new();
    while cursor.chars.peek().is_some() {
        let line = cursor.line;
        let rest = &text[cursor.pos()..];
        if rest.starts_with('#') || rest.starts_with('\n') || rest.starts_with("\r\n") {
            cursor.skip_line();
            continue;
        }
        let fields = cursor.record()?;
        cursor.next_line();
        out.push(Record { line, fields });
    }
    Ok(out)
}

/// Where [`records`] is in the text: the next character, its line and where that line starts.
struct Cursor<'t> {
    text: &'t str,
    origin: &'t str,
    chars: std::iter::Peekable<std::str::CharIndices<'t>>,
    line: usize,
    line_start: usize,
}

impl Cursor<'_> {
    fn err(&self, line: usize, column: usize, message: String) -> CsvError {
        CsvError {
            origin: self.origin.to_string(),
            line,
            column,
            message,
        }
    }

    /// The byte index of the next character (the text's length at its end).
    fn pos(&mut self) -> usize {
        self.chars.peek().map_or(self.text.len(), |(i, _)| *i)
    }

    fn peek_char(&mut self) -> Option<char> {
        self.chars.peek().map(|(_, c)| *c)
    }

    /// The column (from 1, in characters) of byte `idx` on the current line.
    fn column(&self, idx: usize) -> usize {
        self.text[self.line_start..idx].chars().count() + 1
    }

    /// The next line starts at the next character.
    fn next_line(&mut self) {
        self.line += 1;
        self.line_start = self.pos();
    }

    /// Past a comment or blank line.
    fn skip_line(&mut self) {
        for (_, c) in self.chars.by_ref() {
            if c == '\n' {
                break;
            }
        }
        self.next_line();
    }

    /// The fields of one record, each with the column where it starts.
    fn record(&mut self) -> Result<Vec<(String, usize)>, CsvError> {
        let mut fields = Vec::new();
        loop {
            let start = self.pos();
            let column = self.column(start);
            let (value, end_of_record) = if self.peek_char() == Some('"') {
                self.chars.next();
                self.quoted(column)?
            } else {
                self.bare()?
            };
            fields.push((value, column));
            if end_of_record {
                return Ok(fields);
            }
        }
    }

    /// A quoted field after its opening quote (at `column`): `""` is a quote, line breaks are part
    /// of the value. Its value, and whether the record ends with it.
    fn quoted(&mut self, column: usize) -> Result<(String, bool), CsvError> {
        let quote_line = self.line;
        let mut value = String::new();
        loop {
            match self.chars.next() {
                None => {
                    return Err(self.err(quote_line, column, "quoted field is never closed".into()))
                }
                Some((_, '"')) => match self.peek_char() {
                    Some('"') => {
                        self.chars.next();
                        value.push('"');
                    }
                    Some(',') => {
                        self.chars.next();
                        return Ok((value, false));
                    }
                    // The record ends at `\n`, `\r\n`, a `\r` ending the file, or the end; a lone
                    // `\r` before more text is an extraneous character (as in Go), not a line break
                    // that no editor shows.
                    Some('\n') | None => {
                        self.chars.next();
                        return Ok((value, true));
                    }
                    Some('\r') if self.lone_cr_ends_line() => {
                        self.chars.next();
                        if self.peek_char() == Some('\n') {
                            self.chars.next();
                        }
                        return Ok((value, true));
                    }
                    Some(_) => {
                        let idx = self.pos();
                        return Err(self.err(
                            self.line,
                            self.column(idx),
                            "extraneous character after closing quote".into(),
                        ));
                    }
                },
                Some((i, '\n')) => {
                    value.push('\n');
                    self.line += 1;
                    self.line_start = i + 1;
                }
                Some((_, c)) => value.push(c),
            }
        }
    }

    /// Whether the next character (a `\r`) ends the text or comes before a `\n`.
    fn lone_cr_ends_line(&mut self) -> bool {
        let text = self.text;
        self.chars
            .peek()
            .is_some_and(|(i, _)| text[i + 1..].is_empty() || text[i + 1..].starts_with('\n'))
    }

    /// A field without quotes, up to `,` or the line's end (a `\r` before `\n` left out). Its
    /// value, and whether the record ends with it.
    fn bare(&mut self) -> Result<(String, bool), CsvError> {
        let text = self.text;
        let mut value = String::new();
        loop {
            match self.chars.peek().map(|(i, c)| (*i, *c)) {
                None => return Ok((value, true)),
                Some((_, ',')) => {
                    self.chars.next();
                    return Ok((value, false));
                }
                Some((_, '\n')) => {
                    self.chars.next();
                    return Ok((value, true));
                }
                Some((i, '\r')) if text[i + 1..].starts_with('\n') => {
                    self.chars.next();
                }
                Some((i, '"')) => {
                    return Err(self.err(self.line, self.column(i), "bare \" in non-quoted field (quote the whole field, with no space before the opening quote)".into()));
                }
                Some((_, c)) => {
                    self.chars.next();
                    value.push(c);
                }
            }
        }
    }
}

/// Parse counters CSV text. `origin` names the input in errors.
pub fn parse(text: &str, origin: &str) -> Result<CounterSet, CsvError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let err = |line: usize, column: usize, message: String| CsvError {
        origin: origin.to_string(),
        line,
        column,
        message,
    };
    let mut set = CounterSet {
        origin: origin.to_string(),
        ..CounterSet::default()
    };
    for rec in records(text, origin)? {
        if rec.fields.len() != 3 {
            let column = rec.fields.last().map(|f| f.1).unwrap_or(1);
            return Err(err(
                rec.line,
                column,
                format!(
                    "expected 3 fields (DCGM field, type, help), found {}",
                    rec.fields.len()
                ),
            ));
        }
        // Column of a field's first non-space character, for messages.
        let col = |i: usize| {
            let (text, start) = &rec.fields[i];
            start + (text.len() - text.trim_start_matches(' ').len())
        };
        let name = rec.fields[0].0.trim_matches(' ');
        let kind_text = rec.fields[1].0.trim_matches(' ');
        let help = rec.fields[2].0.trim_matches(' ');
        if name.starts_with("DCGM_EXP_") {
            let Some(family) = exporter::ExpFamily::by_name(name) else {
                set.unsupported_exporter_fields
                    .push((rec.line, name.to_string()));
                continue;
            };
            let kind = match kind_text {
                "gauge" => MetricKind::Gauge,
                "counter" => MetricKind::Counter,
                other => {
                    return Err(err(
                        rec.line,
                        col(1),
                        format!(
                            "type '{other}' is not supported for {name} (use gauge or counter)"
                        ),
                    ))
                }
            };
            if !set.exporter_rows.iter().any(|r| r.family == family) {
                set.exporter_rows.push(exporter::ExpRow {
                    family,
                    kind,
                    help: help.to_string(),
                    line: rec.line,
                });
            }
            continue;
        }
        let Some(field) = catalog().by_name(name) else {
            return Err(err(
                rec.line,
                col(0),
                format!("unknown DCGM field '{name}'"),
            ));
        };
        let kind = match kind_text {
            "gauge" => MetricKind::Gauge,
            "counter" => MetricKind::Counter,
            "label" => MetricKind::Label,
            "histogram" | "summary" => {
                return Err(err(
                    rec.line,
                    col(1),
                    format!("type '{kind_text}' is not supported for a DCGM field (a DCGM field is one number: use gauge or counter)"),
                ))
            }
            other => {
                return Err(err(
                    rec.line,
                    col(1),
                    format!("unknown metric type '{other}' (expected gauge, counter or label)"),
                ))
            }
        };
        if !field.value_type.is_numeric() && kind != MetricKind::Label {
            return Err(err(
                rec.line,
                col(1),
                format!(
                    "field '{name}' holds {}, not a number: use type label",
                    match field.value_type {
                        crate::fields::ValueType::String => "text",
                        _ => "binary data",
                    }
                ),
            ));
        }
        if is_valid_metric_name(name).is_err() {
            return Err(err(
                rec.line,
                col(0),
                format!("'{name}' is not a valid Prometheus metric name"),
            ));
        }
        set.rows.push(Counter {
            name: name.to_string(),
            kind,
            help: help.to_string(),
            field: field.clone(),
            line: rec.line,
        });
    }
    Ok(set)
}

fn is_valid_metric_name(name: &str) -> Result<(), ()> {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':' => {}
        _ => return Err(()),
    }
    if chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_default() {
        let set = parse(DEFAULT_COUNTERS_CSV, "default").unwrap();
        assert!(set.rows.iter().any(|c| c.name == "DCGM_FI_DEV_GPU_TEMP"));
        let drv = set
            .rows
            .iter()
            .find(|c| c.name == "DCGM_FI_DRIVER_VERSION")
            .unwrap();
        assert_eq!(drv.kind, MetricKind::Label);
    }

    #[test]
    fn trims_spaces_and_keeps_help() {
        let set = parse(
            "DCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n",
            "t",
        )
        .unwrap();
        assert_eq!(set.rows[0].name, "DCGM_FI_DEV_DEC_UTIL");
        assert_eq!(set.rows[0].help, "Decoder utilization (in %).");
    }

    #[test]
    fn quoted_help_with_commas() {
        let set = parse(
            "DCGM_FI_DEV_GPU_TEMP,gauge,\"Temp, in C, \"\"core\"\"\"\n",
            "t",
        )
        .unwrap();
        assert_eq!(set.rows[0].help, "Temp, in C, \"core\"");
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse(
            "# c\nDCGM_FI_DEV_GPU_TEMP, gauge, ok\nDCGM_FI_NOPE, gauge, x\n",
            "f.csv",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "f.csv:3:1: unknown DCGM field 'DCGM_FI_NOPE'"
        );
        let e = parse("DCGM_FI_DEV_GPU_TEMP, histogram, x\n", "f.csv").unwrap_err();
        assert_eq!((e.line, e.column), (1, 23));
        let e = parse("DCGM_FI_DEV_GPU_TEMP, gauge\n", "f.csv").unwrap_err();
        assert!(
            e.to_string().starts_with("f.csv:1:22: expected 3 fields"),
            "{e}"
        );
        let e = parse("DCGM_FI_DEV_GPU_TEMP, gauge, \"x\"\n", "f.csv").unwrap_err();
        assert_eq!((e.line, e.column), (1, 30));
    }

    #[test]
    fn a_lone_carriage_return_after_a_quote_is_not_a_line_break() {
        // Found by fuzz/ (counters_csv): `"t"\r` ended the record and counted a line no editor shows,
        // so later errors named the wrong line. Go's encoding/csv rejects it; a final `\r` is fine.
        let e = parse(
            "DCGM_FI_DEV_GPU_TEMP, gauge,\"t\"\rDCGM_FI_DEV_POWER_USAGE, gauge, p\n",
            "c.csv",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.csv:1:32: extraneous character after closing quote"
        );
        let ok = parse(
            "DCGM_FI_DEV_GPU_TEMP, gauge,\"t\"\r\nDCGM_FI_DEV_POWER_USAGE, gauge,\"p\"\r",
            "c.csv",
        )
        .unwrap();
        assert_eq!(ok.rows.len(), 2);
        assert_eq!(ok.rows[1].line, 2);
    }

    #[test]
    fn exporter_rows_are_kept_apart() {
        let set = parse(
            "DCGM_EXP_XID_ERRORS_COUNT, gauge, x\nDCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_EXP_NOPE, gauge, n\n",
            "t",
        )
        .unwrap();
        assert_eq!(set.rows.len(), 1);
        assert_eq!(
            set.exporter_rows,
            vec![exporter::ExpRow {
                family: exporter::ExpFamily::XidErrorsCount,
                kind: MetricKind::Gauge,
                help: "x".into(),
                line: 1
            }]
        );
        assert_eq!(
            set.unsupported_exporter_fields,
            vec![(3, "DCGM_EXP_NOPE".to_string())]
        );
        let e = parse("DCGM_EXP_P2P_STATUS, label, x\n", "f.csv").unwrap_err();
        assert_eq!((e.line, e.column), (1, 22));
    }

    #[test]
    fn text_field_must_be_label() {
        let e = parse("DCGM_FI_DRIVER_VERSION, gauge, x\n", "t").unwrap_err();
        assert!(e.message.contains("use type label"), "{e}");
    }

    proptest::proptest! {
        #[test]
        fn random_input_never_panics(s in "\\PC*") {
            let _ = parse(&s, "fuzz");
        }

        #[test]
        fn csv_like_input_never_panics(s in "[A-Z_#\",\\n\\r a-z]{0,200}") {
            let _ = parse(&s, "fuzz");
        }
    }
}
