//! TLS material: the CA and client certificate and key files, read and checked to be PEM at
//! start-up so a wrong path fails there, not at the first export.

use std::path::{Path, PathBuf};

use super::config::{OtlpConfigError, Signal, TlsFiles};
use super::sources::lookup;
use crate::export::otel::otlp::args::OtlpArgs;

fn read_pem(path: &Path, source_name: &str) -> Result<Vec<u8>, OtlpConfigError> {
    let bytes = std::fs::read(path).map_err(|e| OtlpConfigError {
        source_name: source_name.to_string(),
        message: format!("cannot read '{}': {e}", path.display()),
    })?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(OtlpConfigError {
            source_name: source_name.to_string(),
            message: format!("'{}' is not a PEM file", path.display()),
        });
    }
    Ok(bytes)
}

/// The CA certificate and the client certificate and key, read and checked as PEM now.
pub(super) fn tls_files(
    cli: &OtlpArgs,
    signal: Signal,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TlsFiles, OtlpConfigError> {
    let path_of = |flag: &Option<PathBuf>, flag_name: &str, suffix: &str| {
        lookup(
            flag.as_ref().map(|p| p.display().to_string()),
            flag_name,
            signal,
            suffix,
            env,
        )
    };
    let ca_pem = match path_of(&cli.otlp_certificate, "--otlp-certificate", "CERTIFICATE") {
        Some(f) => Some(read_pem(Path::new(&f.value), &f.source_name)?),
        None => None,
    };
    let cert = path_of(
        &cli.otlp_client_certificate,
        "--otlp-client-certificate",
        "CLIENT_CERTIFICATE",
    );
    let key = path_of(&cli.otlp_client_key, "--otlp-client-key", "CLIENT_KEY");
    let client_identity = match (cert, key) {
        (None, None) => None,
        (Some(c), Some(k)) => Some((
            read_pem(Path::new(&c.value), &c.source_name)?,
            read_pem(Path::new(&k.value), &k.source_name)?,
        )),
        (Some(c), None) => {
            return Err(OtlpConfigError {
                source_name: c.source_name,
                message: "a client certificate needs a client key (--otlp-client-key / OTEL_EXPORTER_OTLP_CLIENT_KEY)".into(),
            })
        }
        (None, Some(k)) => {
            return Err(OtlpConfigError {
                source_name: k.source_name,
                message: "a client key needs a client certificate (--otlp-client-certificate / OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE)".into(),
            })
        }
    };
    Ok(TlsFiles {
        ca_pem,
        client_identity,
    })
}
