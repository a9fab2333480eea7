//! The two OTLP transports, sending an already-encoded export request of one signal
//! (`ExportMetricsServiceRequest` or `ExportLogsServiceRequest`, [`Signal`](super::settings::Signal)):
//! gRPC through tonic (a lazily connected channel, a pass-through codec so the bytes are encoded once)
//! and HTTP/protobuf through a hyper-util client over hyper-rustls. https endpoints trust the system
//! roots plus the configured CA; a client certificate and key give mTLS. Each send reports whether a
//! failure is worth retrying (OTLP spec: gRPC UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, ABORTED,
//! OUT_OF_RANGE, DATA_LOSS, and RESOURCE_EXHAUSTED with RetryInfo; HTTP 429, 502, 503, 504 and
//! connection errors) and the server's requested delay (gRPC `RetryInfo`, HTTP `Retry-After` in
//! delay-seconds or as an HTTP-date), as a delay from the moment the answer was read.

use std::io::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Buf, BufMut, Bytes};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use prost::Message;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::settings::{OtlpConfig, Protocol};
use crate::error_chain::error_chain;

/// Why a send failed.
#[derive(Debug)]
pub enum SendError {
    /// Worth retrying; `retry_after` is the delay the server asked for.
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Retrying would not help (bad request, unauthenticated, ...).
    Permanent(String),
}

/// A delivered request.
#[derive(Debug, Default)]
pub struct Delivered {
    /// Data points or log records the receiver rejected (partial success).
    pub rejected_data_points: i64,
    /// The receiver's partial-success message.
    pub message: String,
    /// Bytes of the request body sent (after compression for HTTP).
    pub body_bytes: usize,
}

/// A transport that can send encoded requests.
#[allow(clippy::large_enum_variant)] // one value per process
pub enum Transport {
    Grpc {
        channel: Channel,
        /// The signal service's Export method.
        path: http::uri::PathAndQuery,
        gzip: bool,
        headers: Vec<(
            tonic::metadata::MetadataKey<tonic::metadata::Ascii>,
            tonic::metadata::AsciiMetadataValue,
        )>,
        timeout: Duration,
    },
    Http {
        client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
        url: hyper::Uri,
        gzip: bool,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
        timeout: Duration,
    },
}

/// A transport that cannot be built from the settings (start-up error, exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("OTLP transport: {0}")]
pub struct TransportError(pub String);

fn rustls_config(cfg: &OtlpConfig) -> Result<rustls::ClientConfig, TransportError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for c in native.certs {
        let _ = roots.add(c);
    }
    if let Some(pem) = &cfg.tls.ca_pem {
        let mut n = 0;
        for c in CertificateDer::pem_slice_iter(pem) {
            let c = c.map_err(|e| TransportError(format!("CA certificate: {e}")))?;
            roots
                .add(c)
                .map_err(|e| TransportError(format!("CA certificate: {e}")))?;
            n += 1;
        }
        if n == 0 {
            return Err(TransportError(
                "CA certificate file holds no certificate".into(),
            ));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TransportError(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    match &cfg.tls.client_identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<_, _>>()
                .map_err(|e| TransportError(format!("client certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| TransportError(format!("client key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| TransportError(format!("client certificate/key: {e}")))
        }
    }
}

impl Transport {
    /// Build the transport. Must run inside a tokio runtime (the gRPC channel spawns its worker).
    pub fn new(cfg: &OtlpConfig) -> Result<Transport, TransportError> {
        match cfg.protocol {
            Protocol::Grpc => {
                let mut ep = Endpoint::from_shared(cfg.endpoint.clone())
                    .map_err(|e| TransportError(format!("endpoint '{}': {e}", cfg.endpoint)))?
                    .timeout(cfg.timeout)
                    .connect_timeout(cfg.timeout.min(Duration::from_secs(5)));
                if cfg.is_tls() {
                    let mut tls = ClientTlsConfig::new().with_native_roots();
                    if let Some(pem) = &cfg.tls.ca_pem {
                        tls = tls.ca_certificate(Certificate::from_pem(pem));
                    }
                    if let Some((cert, key)) = &cfg.tls.client_identity {
                        tls = tls.identity(Identity::from_pem(cert, key));
                    }
                    ep = ep
                        .tls_config(tls)
                        .map_err(|e| TransportError(format!("TLS: {e}")))?;
                }
                let mut headers = Vec::new();
                for (k, v) in &cfg.headers {
                    let key = tonic::metadata::MetadataKey::from_bytes(k.as_bytes())
                        .map_err(|e| TransportError(format!("header '{k}': {e}")))?;
                    let value = v
                        .parse()
                        .map_err(|e| TransportError(format!("header '{k}' value: {e}")))?;
                    headers.push((key, value));
                }
                Ok(Transport::Grpc {
                    channel: ep.connect_lazy(),
                    path: http::uri::PathAndQuery::from_static(cfg.signal.grpc_path()),
                    gzip: cfg.gzip,
                    headers,
                    timeout: cfg.timeout,
                })
            }
            Protocol::HttpProtobuf => {
                let url: hyper::Uri = cfg
                    .endpoint
                    .parse()
                    .map_err(|e| TransportError(format!("endpoint '{}': {e}", cfg.endpoint)))?;
                let tls = rustls_config(cfg)?;
                let mut http = HttpConnector::new();
                http.enforce_http(false);
                http.set_connect_timeout(Some(cfg.timeout.min(Duration::from_secs(5))));
                let connector = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_or_http()
                    .enable_http1()
                    .wrap_connector(http);
                let client = Client::builder(hyper_util::rt::TokioExecutor::new())
                    .pool_idle_timeout(Duration::from_secs(90))
                    .pool_max_idle_per_host(1)
                    .build(connector);
                let mut headers = Vec::new();
                for (k, v) in &cfg.headers {
                    let name = http::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| TransportError(format!("header '{k}': {e}")))?;
                    let value = http::HeaderValue::from_str(v)
                        .map_err(|e| TransportError(format!("header '{k}' value: {e}")))?;
                    headers.push((name, value));
                }
                Ok(Transport::Http {
                    client,
                    url,
                    gzip: cfg.gzip,
                    headers,
                    timeout: cfg.timeout,
                })
            }
        }
    }

    /// Send one encoded request.
    pub async fn send(&self, body: &Bytes) -> Result<Delivered, SendError> {
        match self {
            Transport::Grpc {
                channel,
                path,
                gzip,
                headers,
                timeout,
            } => {
                // Its own task: tonic panics (`expect`) on a failure whose `grpc-status-details-bin`
                // is not base64, which a broken or hostile collector can send. Caught here, that is a
                // failed export to retry, not the end of the sender.
                let call = tokio::spawn(send_grpc(
                    channel.clone(),
                    path.clone(),
                    *gzip,
                    headers.clone(),
                    *timeout,
                    body.clone(),
                ));
                match call.await {
                    Ok(result) => result,
                    Err(e) => Err(SendError::Retryable {
                        message: if e.is_panic() {
                            "the collector's gRPC answer could not be read (malformed status)"
                                .to_string()
                        } else {
                            format!("the gRPC call was cancelled: {e}")
                        },
                        retry_after: None,
                    }),
                }
            }
            Transport::Http {
                client,
                url,
                gzip,
                headers,
                timeout,
            } => send_http(client, url, *gzip, headers, *timeout, body).await,
        }
    }
}

// ---- gRPC ------------------------------------------------------------------------------------------

/// Pass-through codec: the request is already protobuf; the response is decoded with prost.
#[derive(Default)]
struct RawCodec;

struct RawEncoder;
struct ResponseDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.reserve(item.len());
        dst.put_slice(&item);
        Ok(())
    }
}

/// `Export{Metrics,Logs}ServiceResponse`: both are a `partial_success` message (field 1) holding the
/// rejected count (field 1: data points or log records) and a message (field 2), so one type reads
/// either signal's answer.
#[derive(Clone, PartialEq, prost::Message)]
struct ExportResponse {
    #[prost(message, optional, tag = "1")]
    partial_success: Option<PartialSuccess>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PartialSuccess {
    #[prost(int64, tag = "1")]
    rejected: i64,
    #[prost(string, tag = "2")]
    error_message: String,
}

impl Decoder for ResponseDecoder {
    type Item = ExportResponse;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, tonic::Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        ExportResponse::decode(bytes)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("bad OTLP export response: {e}")))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ExportResponse;
    type Encoder = RawEncoder;
    type Decoder = ResponseDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

/// `google.rpc.Status`, `google.protobuf.Any`, `google.rpc.RetryInfo`, `google.protobuf.Duration`:
/// just the fields needed to read a server's retry delay.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<ProtoAny>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoAny {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// The RetryInfo delay in a gRPC status's details, if any.
fn retry_info(details: &[u8]) -> Option<Duration> {
    let status = RpcStatus::decode(details).ok()?;
    status
        .details
        .iter()
        .filter(|a| a.type_url.ends_with("google.rpc.RetryInfo"))
        .find_map(|a| RetryInfo::decode(a.value.as_slice()).ok()?.retry_delay)
        .map(|d| {
            Duration::from_secs(d.seconds.max(0) as u64)
                + Duration::from_nanos(d.nanos.max(0) as u64)
        })
}

async fn send_grpc(
    channel: Channel,
    path: http::uri::PathAndQuery,
    gzip: bool,
    headers: Vec<(
        tonic::metadata::MetadataKey<tonic::metadata::Ascii>,
        tonic::metadata::AsciiMetadataValue,
    )>,
    timeout: Duration,
    body: Bytes,
) -> Result<Delivered, SendError> {
    let len = body.len();
    let mut grpc = tonic::client::Grpc::new(channel).accept_compressed(CompressionEncoding::Gzip);
    if gzip {
        grpc = grpc.send_compressed(CompressionEncoding::Gzip);
    }
    let fut = async {
        grpc.ready().await.map_err(|e| SendError::Retryable {
            message: format!("connect: {}", error_chain(&e)),
            retry_after: None,
        })?;
        let mut req = tonic::Request::new(body);
        req.set_timeout(timeout);
        for (k, v) in headers {
            req.metadata_mut().insert(k, v);
        }
        grpc.unary(req, path, RawCodec)
            .await
            .map_err(|status| grpc_failure(status.code(), status.message(), status.details()))
    };
    let resp = match tokio::time::timeout(timeout + Duration::from_secs(1), fut).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(SendError::Retryable {
                message: format!("no answer within {timeout:?}"),
                retry_after: None,
            })
        }
    };
    Ok(delivered(resp.into_inner(), len))
}

/// Longest receiver message kept (partial success, error detail): it goes to the log.
pub const MAX_MESSAGE: usize = 512;
/// Longest HTTP response body read from a collector.
pub const MAX_RESPONSE_BODY: usize = 4 << 20;

fn clip(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(MAX_MESSAGE) {
        Some((i, _)) => s[..i].to_string(),
        None => s.to_string(),
    }
}

/// A successful reply: its partial success, if any.
fn delivered(resp: ExportResponse, body_bytes: usize) -> Delivered {
    let partial = resp.partial_success.unwrap_or_default();
    Delivered {
        rejected_data_points: partial.rejected,
        message: clip(&partial.error_message),
        body_bytes,
    }
}

/// What a failed gRPC call means: the OTLP retryable codes (RESOURCE_EXHAUSTED only with a RetryInfo
/// in the status details) and the server's requested delay.
pub fn grpc_failure(code: tonic::Code, message: &str, details: &[u8]) -> SendError {
    use tonic::Code;
    let retry_after = retry_info(details);
    let message = format!("gRPC {code:?}: {}", clip(message));
    match code {
        Code::Unavailable
        | Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::DataLoss => SendError::Retryable {
            message,
            retry_after,
        },
        Code::ResourceExhausted if retry_after.is_some() => SendError::Retryable {
            message,
            retry_after,
        },
        _ => SendError::Permanent(message),
    }
}

/// The delay a `Retry-After` value asks for, read at `now` (RFC 9110 10.2.3): delay-seconds (1*DIGIT;
/// `+3`, `-0` or `1.5` are none), or an HTTP-date in any of its three forms (IMF-fixdate, RFC 850,
/// asctime), the time from `now` until it (zero when it has passed).
pub fn retry_after_delay(value: &[u8], now: SystemTime) -> Option<Duration> {
    let v = std::str::from_utf8(value.trim_ascii()).ok()?;
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok().map(Duration::from_secs);
    }
    let date = httpdate::parse_http_date(v).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

/// What an OTLP/HTTP collector's reply means: its status, `Retry-After` value ([`retry_after_delay`],
/// read now) and body (an `Export{Metrics,Logs}ServiceResponse` on success, a `google.rpc.Status` or
/// text otherwise). `sent_bytes` is the request body's size, reported back in [`Delivered`].
pub fn http_reply(
    status: u16,
    retry_after: Option<&[u8]>,
    body: &[u8],
    sent_bytes: usize,
) -> Result<Delivered, SendError> {
    if (200..300).contains(&status) {
        let resp = ExportResponse::decode(body).unwrap_or_default();
        return Ok(delivered(resp, sent_bytes));
    }
    let now = SystemTime::now();
    let retry_after = retry_after.and_then(|v| retry_after_delay(v, now));
    let detail = RpcStatus::decode(body)
        .ok()
        .map(|s| s.message)
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
    let shown = match http::StatusCode::from_u16(status) {
        Ok(s) => s.to_string(),
        Err(_) => status.to_string(),
    };
    let message = format!("HTTP {shown}: {}", clip(&detail));
    match status {
        429 | 502 | 503 | 504 => Err(SendError::Retryable {
            message,
            retry_after,
        }),
        _ => Err(SendError::Permanent(message)),
    }
}

// ---- HTTP ------------------------------------------------------------------------------------------

fn gzip_bytes(body: &[u8]) -> Result<Vec<u8>, std::io::Error> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::fast(),
    );
    enc.write_all(body)?;
    enc.finish()
}

async fn send_http(
    client: &Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: &hyper::Uri,
    gzip: bool,
    headers: &[(http::HeaderName, http::HeaderValue)],
    timeout: Duration,
    body: &Bytes,
) -> Result<Delivered, SendError> {
    let payload = if gzip {
        Bytes::from(gzip_bytes(body).map_err(|e| SendError::Permanent(format!("gzip: {e}")))?)
    } else {
        body.clone()
    };
    let len = payload.len();
    let mut builder = hyper::Request::post(url.clone())
        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
        .header(
            http::header::USER_AGENT,
            concat!("dcgm-otel/", env!("CARGO_PKG_VERSION")),
        );
    if gzip {
        builder = builder.header(http::header::CONTENT_ENCODING, "gzip");
    }
    for (k, v) in headers {
        builder = builder.header(k.clone(), v.clone());
    }
    let req = builder
        .body(Full::new(payload))
        .map_err(|e| SendError::Permanent(format!("request: {e}")))?;
    let fut = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| SendError::Retryable {
                message: format!("HTTP: {}", error_chain(&e)),
                retry_after: None,
            })?;
        let status = resp.status().as_u16();
        let retry_after = resp.headers().get(http::header::RETRY_AFTER).cloned();
        // A collector's answer is small; a longer one is cut (the status still decides).
        let body = http_body_util::Limited::new(resp.into_body(), MAX_RESPONSE_BODY)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        Ok::<_, SendError>((status, retry_after, body))
    };
    let (status, retry_after, resp_body) = match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(SendError::Retryable {
                message: format!("no answer within {timeout:?}"),
                retry_after: None,
            })
        }
    };
    http_reply(
        status,
        retry_after.as_ref().map(http::HeaderValue::as_bytes),
        &resp_body,
        len,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_retry_info_from_status_details() {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: 3,
                nanos: 500_000_000,
            }),
        };
        let status = RpcStatus {
            code: 14,
            message: "busy".into(),
            details: vec![ProtoAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        };
        assert_eq!(
            retry_info(&status.encode_to_vec()),
            Some(Duration::from_millis(3500))
        );
        assert_eq!(retry_info(b""), None);
    }

    #[test]
    fn reads_partial_success_of_either_signal() {
        use opentelemetry_proto::tonic::collector::logs::v1::{
            ExportLogsPartialSuccess, ExportLogsServiceResponse,
        };
        use opentelemetry_proto::tonic::collector::metrics::v1::{
            ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
        };
        let logs = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 3,
                error_message: "too old".into(),
            }),
        };
        let metrics = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: 5,
                error_message: "bad unit".into(),
            }),
        };
        let l = ExportResponse::decode(logs.encode_to_vec().as_slice()).unwrap();
        let m = ExportResponse::decode(metrics.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            l.partial_success,
            Some(PartialSuccess {
                rejected: 3,
                error_message: "too old".into()
            })
        );
        assert_eq!(
            m.partial_success,
            Some(PartialSuccess {
                rejected: 5,
                error_message: "bad unit".into()
            })
        );
    }

    #[test]
    fn http_replies_read_partial_success_status_details_and_retry_after() {
        use opentelemetry_proto::tonic::collector::metrics::v1::{
            ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
        };
        let ok = ExportMetricsServiceResponse {
            partial_success: Some(ExportMetricsPartialSuccess {
                rejected_data_points: 3,
                error_message: "é".repeat(600),
            }),
        };
        let d = http_reply(200, None, &ok.encode_to_vec(), 10).unwrap();
        assert_eq!(d.rejected_data_points, 3);
        assert_eq!(d.message, "é".repeat(MAX_MESSAGE));
        assert_eq!(d.body_bytes, 10);
        let garbage = http_reply(204, Some(b"5"), b"\xff\xff", 1).unwrap();
        assert_eq!(
            (garbage.rejected_data_points, garbage.message.as_str()),
            (0, "")
        );

        let status = RpcStatus {
            code: 8,
            message: "slow down".into(),
            details: vec![],
        };
        match http_reply(503, Some(b" 7 "), &status.encode_to_vec(), 1) {
            Err(SendError::Retryable {
                message,
                retry_after,
            }) => {
                assert_eq!(message, "HTTP 503 Service Unavailable: slow down");
                assert_eq!(retry_after, Some(Duration::from_secs(7)));
            }
            other => panic!("{other:?}"),
        }
        // "+30" found by fuzz/ (otlp_response): u64's parser takes a sign that delay-seconds does not.
        for not_a_delay in [
            &b"+30"[..],
            b"",
            b"-0",
            b"1.5",
            b"Wed, 21 Oct 2015",
            b"soon",
        ] {
            match http_reply(429, Some(not_a_delay), b"busy", 1) {
                Err(SendError::Retryable { retry_after, .. }) => assert_eq!(retry_after, None),
                other => panic!("{other:?}"),
            }
        }
        match http_reply(599, None, b"", 1) {
            Err(SendError::Permanent(message)) => {
                assert_eq!(message, "HTTP 599 <unknown status code>: ")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date_in_any_form() {
        // 1994-11-06 08:49:37 UTC, RFC 9110's example, in its three forms.
        let date = std::time::UNIX_EPOCH + Duration::from_secs(784_111_777);
        let now = date - Duration::from_millis(2500);
        for form in [
            &b"Sun, 06 Nov 1994 08:49:37 GMT"[..],
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(
                retry_after_delay(form, now),
                Some(Duration::from_millis(2500)),
                "{}",
                String::from_utf8_lossy(form)
            );
        }
        // A date that has passed: no wait; seconds as they are.
        assert_eq!(
            retry_after_delay(
                b"Sun, 06 Nov 1994 08:49:37 GMT",
                date + Duration::from_secs(9)
            ),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after_delay(b" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after_delay(b"Sun, 06 Nov 1994", now), None);
    }

    #[test]
    fn grpc_resource_exhausted_is_retried_only_with_retry_info() {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: i64::MAX,
                nanos: i32::MAX,
            }),
        };
        let status = RpcStatus {
            code: 8,
            message: String::new(),
            details: vec![ProtoAny {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: info.encode_to_vec(),
            }],
        };
        assert!(matches!(
            grpc_failure(tonic::Code::ResourceExhausted, "x", &status.encode_to_vec()),
            SendError::Retryable {
                retry_after: Some(_),
                ..
            }
        ));
        assert!(matches!(
            grpc_failure(tonic::Code::ResourceExhausted, "x", b""),
            SendError::Permanent(_)
        ));
    }
}
