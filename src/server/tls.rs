//! TLS for :9400: turns a validated `tls_server_config` into a rustls acceptor (ring provider, TLS 1.2 and
//! 1.3 only, HTTP/1.1 ALPN). Client certificates are verified against `client_ca_file` when the policy asks
//! for them. The acceptor is built from files read now; a SIGHUP reload builds a new one, which applies to
//! connections accepted after it.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls;

use rustls::crypto::ring as provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite};
use tokio_rustls::TlsAcceptor;

use crate::config::web_config::{
    CipherSuite, ClientAuth, Curve, PemSource, TlsSettings, TlsVersion, WebConfigError,
};
use crate::local_file::{self, Links};

fn error(file: &Path, key: &str, message: String) -> WebConfigError {
    WebConfigError {
        path: file.display().to_string(),
        key: Some(format!("tls_server_config.{key}")),
        line: None,
        message,
    }
}

fn read_pem(src: &PemSource, file: &Path, key: &str) -> Result<Vec<u8>, WebConfigError> {
    match src {
        PemSource::Inline(text) => Ok(text.as_bytes().to_vec()),
        PemSource::File(p) => local_file::read(p, local_file::MAX_CONFIG_BYTES, Links::Follow)
            .map_err(|e| error(file, key, format!("cannot read {}: {e}", p.display()))),
    }
}

fn key_names(src: &PemSource, file_key: &'static str, inline_key: &'static str) -> &'static str {
    match src {
        PemSource::File(_) => file_key,
        PemSource::Inline(_) => inline_key,
    }
}

fn certificates(
    src: &PemSource,
    file: &Path,
    key: &str,
) -> Result<Vec<CertificateDer<'static>>, WebConfigError> {
    let pem = read_pem(src, file, key)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| error(file, key, format!("bad PEM certificate data: {e}")))?;
    if certs.is_empty() {
        return Err(error(file, key, "no CERTIFICATE block found".into()));
    }
    Ok(certs)
}

fn suite_of(cs: CipherSuite) -> SupportedCipherSuite {
    use provider::cipher_suite as s;
    match cs {
        CipherSuite::EcdheEcdsaAes128Gcm => s::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::EcdheEcdsaAes256Gcm => s::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::EcdheEcdsaChacha20 => s::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        CipherSuite::EcdheRsaAes128Gcm => s::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::EcdheRsaAes256Gcm => s::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::EcdheRsaChacha20 => s::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    }
}

/// Build the acceptor. `file` is the web config file, for messages.
pub fn acceptor(t: &TlsSettings, file: &Path) -> Result<TlsAcceptor, WebConfigError> {
    let cert_key = key_names(&t.cert, "cert_file", "cert");
    let key_key = key_names(&t.key, "key_file", "key");
    let chain = certificates(&t.cert, file, cert_key)?;
    let key_pem = read_pem(&t.key, file, key_key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| error(file, key_key, format!("no usable PRIVATE KEY block: {e}")))?;

    let mut crypto = provider::default_provider();
    if !t.cipher_suites.is_empty() {
        let tls12: Vec<SupportedCipherSuite> =
            t.cipher_suites.iter().map(|c| suite_of(*c)).collect();
        crypto
            .cipher_suites
            .retain(|s| s.version() == &rustls::version::TLS13 || tls12.contains(s));
    }
    if !t.curves.is_empty() {
        let mut groups = Vec::with_capacity(t.curves.len());
        for c in &t.curves {
            let g: &'static dyn rustls::crypto::SupportedKxGroup = match c {
                Curve::X25519 => provider::kx_group::X25519,
                Curve::P256 => provider::kx_group::SECP256R1,
                Curve::P384 => provider::kx_group::SECP384R1,
            };
            if !groups
                .iter()
                .any(|x: &&dyn rustls::crypto::SupportedKxGroup| x.name() == g.name())
            {
                groups.push(g);
            }
        }
        crypto.kx_groups = groups;
    }
    let crypto = Arc::new(crypto);
    let versions: &[&'static rustls::SupportedProtocolVersion] =
        match (t.min_version, t.max_version) {
            (TlsVersion::Tls12, TlsVersion::Tls12) => &[&rustls::version::TLS12],
            (TlsVersion::Tls13, _) => &[&rustls::version::TLS13],
            (TlsVersion::Tls12, TlsVersion::Tls13) => {
                &[&rustls::version::TLS13, &rustls::version::TLS12]
            }
        };
    let builder = ServerConfig::builder_with_provider(crypto.clone())
        .with_protocol_versions(versions)
        .map_err(|e| {
            error(
                file,
                "cipher_suites",
                format!("no usable TLS configuration: {e}"),
            )
        })?;

    let builder = match (t.client_auth, &t.client_ca) {
        (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
        (policy, Some(ca)) => {
            let ca_key = key_names(ca, "client_ca_file", "client_ca");
            let mut roots = RootCertStore::empty();
            for c in certificates(ca, file, ca_key)? {
                roots
                    .add(c)
                    .map_err(|e| error(file, ca_key, format!("unusable CA certificate: {e}")))?;
            }
            let vb = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), crypto);
            let vb = if policy == ClientAuth::VerifyIfGiven {
                vb.allow_unauthenticated()
            } else {
                vb
            };
            let verifier = vb
                .build()
                .map_err(|e| error(file, ca_key, format!("cannot verify clients with it: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        error(
            file,
            key_key,
            format!("certificate and key do not work together: {e}"),
        )
    })?;
    config.ignore_client_order = t.prefer_server_cipher_suites;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
