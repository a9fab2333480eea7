//! HTTP basic auth for :9400 (`basic_auth_users` in the web config).
//!
//! - The user name is compared in constant time: each configured name and the offered one are reduced to
//!   an HMAC-SHA256 under a per-process random key and compared with `subtle`, over every user, with no
//!   early exit. An unknown user still costs one bcrypt verification (against a configured hash, result
//!   discarded), so timing does not tell which names exist.
//! - The password is checked with bcrypt (constant-time compare inside), on the blocking pool, at most
//!   [`BCRYPT_PARALLELISM`] at a time, so a burst of bad passwords cannot stall the two async workers.
//! - A successful check is cached for [`CACHE_TTL`], keyed by HMAC(user, password) (never the password
//!   itself): a Prometheus scraping every 15-60 s pays one bcrypt (about 50 ms at cost 10) per
//!   [`CACHE_TTL`], not one per scrape. Failures are never cached. A reload starts a new cache.
//! - Nothing here logs a credential or a hash.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hyper::header::HeaderValue;
use ring::hmac;
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::web_config::BasicAuthUser;
use crate::lock::LockExt;

/// How long a verified (user, password) pair is remembered.
pub const CACHE_TTL: Duration = Duration::from_secs(120);
/// Remembered pairs at most (the cache is cleared when full).
pub const CACHE_MAX: usize = 256;
/// bcrypt verifications running at once.
pub const BCRYPT_PARALLELISM: usize = 2;
/// Longest `Authorization` value looked at (longer: malformed).
pub const MAX_HEADER: usize = 1024;

/// Result of checking one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    /// No `Authorization` header.
    Missing,
    /// Not `Basic base64(user:password)`.
    Malformed,
    /// Unknown user or wrong password.
    Denied,
}

impl Outcome {
    pub fn reason(self) -> &'static str {
        match self {
            Outcome::Allowed => "none",
            Outcome::Missing => "missing",
            Outcome::Malformed => "malformed",
            Outcome::Denied => "wrong",
        }
    }
}

/// The user and password of one `Authorization: Basic ...` value, decoded on the stack.
pub struct Credentials {
    buf: [u8; MAX_HEADER],
    colon: usize,
    len: usize,
}

impl Credentials {
    pub fn user(&self) -> &[u8] {
        &self.buf[..self.colon]
    }
    pub fn password(&self) -> &[u8] {
        &self.buf[self.colon + 1..self.len]
    }
}

/// Split a raw `Authorization` value: `Basic ` (any case), padded standard base64 of `user:password`
/// (the first `:` separates them), at most [`MAX_HEADER`] bytes. `None`: malformed.
pub fn split_credentials(raw: &[u8]) -> Option<Credentials> {
    if raw.len() > MAX_HEADER || raw.len() < 6 || !raw[..6].eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let b64 = raw[6..].trim_ascii();
    let mut buf = [0u8; MAX_HEADER];
    let len = base64::engine::general_purpose::STANDARD
        .decode_slice(b64, &mut buf)
        .ok()?;
    let colon = buf[..len].iter().position(|b| *b == b':')?;
    Some(Credentials { buf, colon, len })
}

struct User {
    name_mac: [u8; 32],
    hash: String,
}

/// The basic-auth checker for one loaded web config.
pub struct BasicAuth {
    key: hmac::Key,
    users: Vec<User>,
    cache: Mutex<HashMap<[u8; 32], Instant>>,
    bcrypt_slots: tokio::sync::Semaphore,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BasicAuth({} users)", self.users.len())
    }
}

fn mac(key: &hmac::Key, domain: u8, parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(&[domain]);
    for p in parts {
        ctx.update(&(p.len() as u64).to_be_bytes());
        ctx.update(p);
    }
    let tag = ctx.sign();
    let mut out = [0u8; 32];
    out.copy_from_slice(&tag.as_ref()[..32]);
    out
}

impl BasicAuth {
    /// `None` when there are no users (auth off). Fails only if the system random source does.
    pub fn new(users: &[BasicAuthUser]) -> Result<Option<BasicAuth>, String> {
        if users.is_empty() {
            return Ok(None);
        }
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| "cannot get random bytes for the basic-auth key".to_string())?;
        let users = users
            .iter()
            .map(|u| User {
                name_mac: mac(&key, b'u', &[u.name.as_bytes()]),
                hash: u.bcrypt_hash.clone(),
            })
            .collect();
        Ok(Some(BasicAuth {
            key,
            users,
            cache: Mutex::new(HashMap::new()),
            bcrypt_slots: tokio::sync::Semaphore::new(BCRYPT_PARALLELISM),
        }))
    }

    /// Check the `Authorization` header of one request.
    pub async fn check(&self, header: Option<&HeaderValue>) -> Outcome {
        let Some(value) = header else {
            return Outcome::Missing;
        };
        let Some(credentials) = split_credentials(value.as_bytes()) else {
            return Outcome::Malformed;
        };
        let (user, password) = (credentials.user(), credentials.password());

        let pair = mac(&self.key, b'p', &[user, password]);
        if self.cached(&pair) {
            return Outcome::Allowed;
        }

        // Constant-time user lookup: visit every user, select the matching index without branching.
        let offered = mac(&self.key, b'u', &[user]);
        let mut found = subtle::Choice::from(0u8);
        let mut index = 0u32;
        for (i, u) in self.users.iter().enumerate() {
            let eq = u.name_mac.ct_eq(&offered);
            index = u32::conditional_select(&index, &(i as u32), eq);
            found |= eq;
        }
        let hash = match self.users.get(index as usize) {
            Some(u) => u.hash.clone(),
            None => return Outcome::Denied,
        };
        let password = password.to_vec();
        let verified = {
            let Ok(_slot) = self.bcrypt_slots.acquire().await else {
                return Outcome::Denied;
            };
            tokio::task::spawn_blocking(move || bcrypt::verify(&password, &hash).unwrap_or(false))
                .await
                .unwrap_or(false)
        };
        if verified && bool::from(found) {
            self.remember(pair);
            Outcome::Allowed
        } else {
            Outcome::Denied
        }
    }

    fn cached(&self, pair: &[u8; 32]) -> bool {
        let cache = self.cache.lock_unpoisoned();
        cache.get(pair).is_some_and(|t| t.elapsed() < CACHE_TTL)
    }

    fn remember(&self, pair: [u8; 32]) {
        let mut cache = self.cache.lock_unpoisoned();
        if cache.len() >= CACHE_MAX {
            cache.retain(|_, t| t.elapsed() < CACHE_TTL);
            if cache.len() >= CACHE_MAX {
                cache.clear();
            }
        }
        cache.insert(pair, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    fn basic(user_pass: &str) -> HeaderValue {
        header(&format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        ))
    }

    #[tokio::test]
    async fn outcomes() {
        // Cost 10 hash of "secret" made with: htpasswd -nbBC 10 prom secret
        let users = vec![BasicAuthUser {
            name: "prom".into(),
            bcrypt_hash: "$2y$10$A77zPQHRo65V/e4wnkWD6.9WnvhvF8e4EgIVidn.dXqtB.6TNpC32".into(),
        }];
        let auth = BasicAuth::new(&users).unwrap().unwrap();
        assert_eq!(auth.check(None).await, Outcome::Missing);
        assert_eq!(
            auth.check(Some(&header("Bearer x"))).await,
            Outcome::Malformed
        );
        assert_eq!(
            auth.check(Some(&header("Basic !!!"))).await,
            Outcome::Malformed
        );
        assert_eq!(
            auth.check(Some(&basic("no-colon"))).await,
            Outcome::Malformed
        );
        assert_eq!(
            auth.check(Some(&basic("prom:wrong"))).await,
            Outcome::Denied
        );
        assert_eq!(
            auth.check(Some(&basic("other:secret"))).await,
            Outcome::Denied
        );
        assert_eq!(
            auth.check(Some(&basic("prom:secret"))).await,
            Outcome::Allowed
        );
        // Second time: from the cache (same answer).
        assert_eq!(
            auth.check(Some(&basic("prom:secret"))).await,
            Outcome::Allowed
        );
        assert_eq!(
            auth.check(Some(&basic("prom:secret2"))).await,
            Outcome::Denied
        );
        let lower = header(
            &basic("prom:secret")
                .to_str()
                .unwrap()
                .replace("Basic", "basic"),
        );
        assert_eq!(auth.check(Some(&lower)).await, Outcome::Allowed);
    }

    #[test]
    fn no_users_no_auth() {
        assert!(BasicAuth::new(&[]).unwrap().is_none());
    }
}
