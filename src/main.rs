//! The `dcgm-otel` binary: parse the command line, set up logging, resolve the start-up plan (bad input
//! stops here, before anything starts), start and serve until SIGTERM/SIGINT. Every start-up failure
//! is one line on stderr: exit code 2 for bad input, 1 for a failing environment.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Instant;

use dcgm_otel::app::{Plan, StartError};
use dcgm_otel::cli;

fn main() -> ExitCode {
    let started = Instant::now();
    let args: Vec<OsString> = std::env::args_os().collect();
    let parsed = match cli::parse(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprintln!("dcgm-otel: {}", cli::describe_error(&e, &args));
            return ExitCode::from(2);
        }
    };
    dcgm_otel::telemetry::logging::init(&parsed.cli.logging);
    match Plan::resolve(parsed).and_then(|plan| plan.start(started)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(StartError { code, message }) => {
            eprintln!("dcgm-otel: {message}");
            ExitCode::from(code)
        }
    }
}
