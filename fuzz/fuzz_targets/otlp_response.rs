//! What an OTLP collector answers: HTTP status + `Retry-After` + body (ExportMetricsServiceResponse
//! with partial success, or a google.rpc.Status), and gRPC status code + details (RetryInfo).
//! Properties: only 2xx is delivered; only 429/502/503/504 and the OTLP gRPC codes are retried; a
//! server delay is read only from a Retry-After that is delay-seconds or an HTTP-date (which begins
//! with its day's name); messages stay bounded.
#![no_main]
use dcgm_otel::export::otel::otlp::transport::{self, SendError, MAX_MESSAGE};
use libfuzzer_sys::fuzz_target;

fn bounded(message: &str) {
    // "HTTP 503 Service Unavailable: " / "gRPC ResourceExhausted: " + at most MAX_MESSAGE characters.
    assert!(
        message.chars().count() <= MAX_MESSAGE + 64,
        "{} chars",
        message.len()
    );
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (head, rest) = data.split_at(4);
    let header_len = usize::from(head[3] & 0x1f).min(rest.len());
    let (header, body) = rest.split_at(header_len);
    if head[0] & 1 == 0 {
        let status = u16::from_le_bytes([head[1], head[2]]) % 1000;
        let retry_after = (head[3] & 0x20 != 0).then_some(header);
        match transport::http_reply(status, retry_after, body, 7) {
            Ok(d) => {
                assert!((200..300).contains(&status));
                assert_eq!(d.body_bytes, 7);
                bounded(&d.message);
            }
            Err(SendError::Retryable {
                message,
                retry_after: delay,
            }) => {
                assert!(matches!(status, 429 | 502 | 503 | 504), "{status}");
                if delay.is_some() {
                    let v = std::str::from_utf8(header).expect("a delay comes from text");
                    let v = v.trim_matches(|c: char| c.is_ascii_whitespace());
                    let day = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
                        .iter()
                        .any(|d| v.starts_with(d));
                    assert!(v.bytes().all(|b| b.is_ascii_digit()) || day, "{v:?}");
                }
                bounded(&message);
            }
            Err(SendError::Permanent(message)) => {
                assert!(!(200..300).contains(&status) && !matches!(status, 429 | 502 | 503 | 504));
                bounded(&message);
            }
        }
    } else {
        let code = tonic::Code::from_i32(i32::from(head[1] % 20));
        let message = String::from_utf8_lossy(header);
        match transport::grpc_failure(code, &message, body) {
            SendError::Retryable {
                message,
                retry_after,
            } => {
                use tonic::Code::*;
                let always = matches!(
                    code,
                    Unavailable | Cancelled | DeadlineExceeded | Aborted | OutOfRange | DataLoss
                );
                assert!(
                    always || (code == ResourceExhausted && retry_after.is_some()),
                    "{code:?}"
                );
                bounded(&message);
            }
            SendError::Permanent(message) => bounded(&message),
        }
    }
});
