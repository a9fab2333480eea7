//! Go `flag` syntax on top of clap, as dcgm-exporter's command line (urfave/cli over Go's `flag`) takes
//! it: long names with one dash (`-collectors`, `-rbmn`), booleans as Go reads them (`--kubernetes=true`,
//! `-k=false`, and `1`/`t`/`TRUE`/`0`/... from variables), and a bad flag reported as one line that
//! names the flag or the variable it came from, never clap's usage listing of every flag.

use std::ffi::OsString;

use clap::ArgAction;

/// What Go's `strconv.ParseBool` accepts, and so what dcgm-exporter's flags and variables accept.
pub const GO_BOOL_VALUES: [&str; 12] = [
    "1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False",
];

/// Parse a boolean as Go's `strconv.ParseBool` does.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("expected one of {}", GO_BOOL_VALUES.join(" "))),
    }
}

/// Make every on/off flag behave like a Go boolean flag: `--flag`, `--flag=true`, `--flag=false`,
/// `-k=false`, and its variable takes whatever `strconv.ParseBool` takes (`1`, `t`, `TRUE`, `0`, ...).
/// A value needs the `=`: `-k false` leaves `false` as a stray argument, as in Go.
pub fn go_booleans(cmd: clap::Command) -> clap::Command {
    let ids: Vec<clap::Id> = cmd
        .get_arguments()
        .filter(|a| matches!(a.get_action(), ArgAction::SetTrue))
        .map(|a| a.get_id().clone())
        .collect();
    ids.into_iter().fold(cmd, |cmd, id| {
        cmd.mut_arg(id, |a| {
            let default = match a.get_default_values().first().and_then(|v| v.to_str()) {
                Some("true") => "true",
                _ => "false",
            };
            a.action(ArgAction::Set)
                .num_args(0..=1)
                .require_equals(true)
                .default_missing_value("true")
                .default_value(default)
                .value_name("BOOL")
                .hide_default_value(true)
                .hide_possible_values(true)
                .value_parser(clap::builder::ValueParser::new(parse_go_bool))
        })
    })
}

/// Rewrite Go-style single-dash long flags (`-collectors x`, `-rbmn`) into clap's `--long` form.
/// Only names that are real long flags (or `rbmn`) are rewritten; short flags are left alone.
pub fn normalize_args<I: IntoIterator<Item = OsString>>(
    cmd: &clap::Command,
    args: I,
) -> Vec<OsString> {
    let longs: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_string))
        .chain(["help".to_string(), "version".to_string()])
        .collect();
    let mut out = Vec::new();
    let mut after_dashdash = false;
    for (i, arg) in args.into_iter().enumerate() {
        if i == 0 || after_dashdash {
            out.push(arg);
            continue;
        }
        let Some(s) = arg.to_str() else {
            out.push(arg);
            continue;
        };
        if s == "--" {
            after_dashdash = true;
            out.push(arg);
            continue;
        }
        if let Some(body) = s
            .strip_prefix('-')
            .filter(|b| !b.starts_with('-') && b.len() > 1)
        {
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let long = if name == "rbmn" {
                Some("replace-blanks-in-model-name")
            } else {
                longs
                    .iter()
                    .find(|l| l.as_str() == name)
                    .map(String::as_str)
            };
            if let Some(long) = long {
                out.push(OsString::from(match value {
                    Some(v) => format!("--{long}={v}"),
                    None => format!("--{long}"),
                }));
                continue;
            }
        }
        if s == "--rbmn" || s.starts_with("--rbmn=") {
            out.push(OsString::from(s.replacen(
                "--rbmn",
                "--replace-blanks-in-model-name",
                1,
            )));
            continue;
        }
        out.push(arg);
    }
    out
}

/// One line for a command-line error: what is wrong, the flag or variable it came from, a suggestion
/// when clap has one, and "see --help" (never the usage line with all the flags).
pub fn describe_error(cmd: &clap::Command, error: &clap::Error, args: &[OsString]) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let rendered = error.render().to_string();
    let first = rendered
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("invalid command line");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    if matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        let given_arg = match error.get(ContextKind::InvalidArg) {
            Some(ContextValue::String(a)) => Some(a.as_str()),
            _ => None,
        };
        let given_value = match error.get(ContextKind::InvalidValue) {
            Some(ContextValue::String(v)) => Some(v.as_str()),
            _ => None,
        };
        if let (Some(arg_text), Some(value)) = (given_arg, given_value) {
            if let Some(var) = value_from_environment(cmd, arg_text, value, args) {
                let flag = arg_text.split(['[', ' ', '=']).next().unwrap_or(arg_text);
                let reason = line
                    .split_once("': ")
                    .map(|(_, r)| r.to_string())
                    .unwrap_or_default();
                line =
                    format!("invalid value '{value}' in environment variable {var} (flag {flag})");
                if !reason.is_empty() {
                    line.push_str(": ");
                    line.push_str(&reason);
                }
            }
        }
    }
    let suggestion = match error.get(ContextKind::SuggestedArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(list)) => list.first().cloned(),
        _ => None,
    };
    if let Some(tip) = suggestion {
        line.push_str(&format!("; did you mean '{tip}'?"));
    }
    line.push_str("; see --help");
    line
}

/// When the bad value came from an environment variable (the flag is not on the command line and its
/// variable holds that value), the variable's name.
fn value_from_environment(
    cmd: &clap::Command,
    arg_text: &str,
    value: &str,
    args: &[OsString],
) -> Option<String> {
    let flag = arg_text.split(['[', ' ', '=']).next()?;
    let arg = cmd.get_arguments().find(|a| {
        flag.strip_prefix("--")
            .is_some_and(|l| a.get_long() == Some(l))
            || flag
                .strip_prefix('-')
                .and_then(|s| s.chars().next())
                .is_some_and(|c| !flag.starts_with("--") && a.get_short() == Some(c))
    })?;
    let var = arg.get_env()?.to_str()?.to_string();
    // A list variable (a value delimiter) names the one item that failed.
    let in_var = std::env::var(&var).ok().is_some_and(|v| {
        v == value
            || arg
                .get_value_delimiter()
                .is_some_and(|d| v.split(d).any(|item| item == value))
    });
    if !in_var {
        return None;
    }
    let normalized = normalize_args(cmd, args.iter().cloned());
    let on_command_line = normalized.iter().skip(1).any(|a| {
        let Some(a) = a.to_str() else { return false };
        arg.get_long()
            .is_some_and(|l| a == format!("--{l}") || a.starts_with(&format!("--{l}=")))
            || arg.get_short().is_some_and(|c| {
                !a.starts_with("--") && a.starts_with('-') && a[1..].starts_with(c)
            })
    });
    (!on_command_line).then_some(var)
}
