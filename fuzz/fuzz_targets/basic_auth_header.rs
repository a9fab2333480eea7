//! The `Authorization` header on :9400: `split_credentials` accepts exactly `Basic ` (any case) and
//! canonical base64 of `user:password` within the header limit, and what it returns encodes back to
//! what was sent.
#![no_main]
use base64::Engine as _;
use dcgm_otel::server::auth::{split_credentials, MAX_HEADER};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(c) = split_credentials(data) else {
        return;
    };
    assert!(data.len() <= MAX_HEADER);
    assert!(data[..6].eq_ignore_ascii_case(b"basic "));
    assert!(!c.user().contains(&b':'));
    let mut joined = c.user().to_vec();
    joined.push(b':');
    joined.extend_from_slice(c.password());
    let encoded = base64::engine::general_purpose::STANDARD.encode(&joined);
    assert_eq!(encoded.as_bytes(), data[6..].trim_ascii());
});
