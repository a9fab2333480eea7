//! HTTP basic auth for :9400 (`basic_auth_users` in the web config).
//!
//! - The user name is compared in constant time: each configured name and the offered one are reduced to
//!   an HMAC-SHA256 under a per-process random key and compared with `subtle`, over every user, with no
//!   early exit. An unknown user still costs one bcrypt verification, against a fixed dummy hash of the
//!   highest configured cost ([`DUMMY_HASHES`]; never a real user's hash), so timing does not tell which
//!   names exist.
//! - The password is checked with bcrypt (constant-time compare inside) on [`BCRYPT_PARALLELISM`] threads
//!   of its own (started with the checker, ended with it), never on the async workers. A slot is taken
//!   without waiting ([`Outcome::Busy`]: the server answers 429 at once) and travels with the work, so it
//!   is held until bcrypt has finished even when the client went away: hit-and-run clients cannot start
//!   more bcrypt work than the slots, nor more threads. Costs above
//!   [`crate::config::web_config::MAX_BCRYPT_COST`] are refused when the web config is loaded.
//! - A successful check is cached, keyed by HMAC(user, password) (never the password itself), until it
//!   has not been used for [`CACHE_TTL`]: a Prometheus scraping every 15-60 s pays one bcrypt (about
//!   50 ms at cost 10) when it starts, not one per scrape, and needs no bcrypt slot afterwards — a crowd
//!   of wrong passwords cannot lock it out. Failures are never cached. A reload that changes the users
//!   starts a new cache; one that keeps them (same names and hashes) keeps it.
//! - Nothing here logs a credential or a hash.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use hyper::header::HeaderValue;
use ring::hmac;
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::web_config::BasicAuthUser;
use crate::lock::LockExt;

/// How long a verified (user, password) pair is remembered after its last use.
pub const CACHE_TTL: Duration = Duration::from_secs(120);
/// Remembered pairs at most (the cache is cleared when full).
pub const CACHE_MAX: usize = 256;
/// bcrypt verifications running at once.
pub const BCRYPT_PARALLELISM: usize = 2;
/// Longest `Authorization` value looked at (longer: malformed).
pub const MAX_HEADER: usize = 1024;

/// What an unknown user's password is verified against, by cost (10 to 14, the costs a web config may
/// have): bcrypt hashes of random passwords nobody kept, made with `htpasswd -nbBC <cost>`.
pub const DUMMY_HASHES: [(u32, &str); 5] = [
    (
        10,
        "$2y$10$e6nGAchQ1Bw/v906AzwtJOugOeFA4/H5ELi8KtllpfN7V6R8txI9m",
    ),
    (
        11,
        "$2y$11$9x.VasFSOSxLpNsZ76H.ZePPaML9KAz2NhpuUip91z2pdyk0wM0u6",
    ),
    (
        12,
        "$2y$12$VSU3YvcF1D54H/w7kLufN.7Bj6V2Fo8B85UiDfqAQLTyZ7ZS9wEO6",
    ),
    (
        13,
        "$2y$13$0.xZCy4LmEYCbeylMw/WDeC7vh3IVPmn25AQuiZiAXR5jWW9VHNRa",
    ),
    (
        14,
        "$2y$14$y.wlaI2P95buMWYBOK8hZ.Te.eQ8MoNjFpPZ0HEAgY1F.x94P..5u",
    ),
];

/// The dummy hash for users whose highest cost is `cost` (the nearest one at or below it).
fn dummy_hash(cost: u32) -> &'static str {
    DUMMY_HASHES
        .iter()
        .rev()
        .find(|(c, _)| *c <= cost)
        .map_or(DUMMY_HASHES[0].1, |(_, h)| *h)
}

/// A bcrypt hash's cost (`$2y$NN$...`); 0 when it cannot be read (the web config checked it already).
fn cost_of(hash: &str) -> u32 {
    hash.get(4..6).and_then(|c| c.parse().ok()).unwrap_or(0)
}

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
    /// Not cached, and every bcrypt slot is busy: try again (429).
    Busy,
}

impl Outcome {
    pub fn reason(self) -> &'static str {
        match self {
            Outcome::Allowed => "none",
            Outcome::Missing => "missing",
            Outcome::Malformed => "malformed",
            Outcome::Denied => "wrong",
            Outcome::Busy => "busy",
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
    hash: Arc<str>,
}

/// The basic-auth checker for one loaded web config.
pub struct BasicAuth {
    key: hmac::Key,
    users: Vec<User>,
    /// What an unknown user is verified against: the dummy of the highest configured cost.
    dummy: Arc<str>,
    cache: Mutex<HashMap<[u8; 32], Instant>>,
    bcrypt: Workers,
}

/// One verification for the bcrypt threads; its slot is released when bcrypt is done.
struct Job {
    password: Vec<u8>,
    hash: Arc<str>,
    slot: tokio::sync::OwnedSemaphorePermit,
    answer: tokio::sync::oneshot::Sender<bool>,
}

/// The bcrypt threads and their slots.
struct Workers {
    jobs: std::sync::mpsc::Sender<Job>,
    slots: Arc<tokio::sync::Semaphore>,
}

impl Workers {
    /// Start [`BCRYPT_PARALLELISM`] threads; they end when the checker (the job sender) is dropped.
    fn start() -> Result<Workers, String> {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..BCRYPT_PARALLELISM {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("bcrypt-{i}"))
                .spawn(move || loop {
                    // One thread waits on the queue at a time; the other waits for the lock.
                    let next = queue.lock_unpoisoned().recv();
                    let Ok(job) = next else {
                        return;
                    };
                    let verified = bcrypt::verify(&job.password, &job.hash).unwrap_or(false);
                    drop(job.slot);
                    let _ = job.answer.send(verified);
                })
                .map_err(|e| format!("cannot start the bcrypt threads: {e}"))?;
        }
        Ok(Workers {
            jobs,
            slots: Arc::new(tokio::sync::Semaphore::new(BCRYPT_PARALLELISM)),
        })
    }
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
    /// `None` when there are no users (auth off). Fails only if the system random source or thread
    /// creation does.
    pub fn new(users: &[BasicAuthUser]) -> Result<Option<BasicAuth>, String> {
        if users.is_empty() {
            return Ok(None);
        }
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| "cannot get random bytes for the basic-auth key".to_string())?;
        let users: Vec<User> = users
            .iter()
            .map(|u| User {
                name_mac: mac(&key, b'u', &[u.name.as_bytes()]),
                hash: Arc::from(u.bcrypt_hash.as_str()),
            })
            .collect();
        let cost = users.iter().map(|u| cost_of(&u.hash)).max().unwrap_or(0);
        Ok(Some(BasicAuth {
            key,
            users,
            dummy: Arc::from(dummy_hash(cost)),
            cache: Mutex::new(HashMap::new()),
            bcrypt: Workers::start()?,
        }))
    }

    /// Whether `users` are exactly this checker's users (names and hashes, in order): a reload that
    /// keeps them keeps this checker and its cache.
    pub fn same_users(&self, users: &[BasicAuthUser]) -> bool {
        self.users.len() == users.len()
            && self.users.iter().zip(users).all(|(mine, theirs)| {
                mine.name_mac == mac(&self.key, b'u', &[theirs.name.as_bytes()])
                    && *mine.hash == *theirs.bcrypt_hash
            })
    }

    /// The hash to verify `user`'s password against (a dummy for an unknown user) and whether the user
    /// exists, found in constant time: every user is visited, the match selected without branching.
    fn lookup(&self, user: &[u8]) -> (Arc<str>, subtle::Choice) {
        let offered = mac(&self.key, b'u', &[user]);
        let mut found = subtle::Choice::from(0u8);
        let mut index = 0u32;
        for (i, u) in self.users.iter().enumerate() {
            let eq = u.name_mac.ct_eq(&offered);
            index = u32::conditional_select(&index, &(i as u32), eq);
            found |= eq;
        }
        let hash = match self.users.get(index as usize) {
            Some(u) if bool::from(found) => u.hash.clone(),
            _ => self.dummy.clone(),
        };
        (hash, found)
    }

    /// Check the `Authorization` header of one request. Never waits for a bcrypt slot.
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
        let (hash, found) = self.lookup(user);
        let Ok(slot) = self.bcrypt.slots.clone().try_acquire_owned() else {
            return Outcome::Busy;
        };
        // The slot travels with the job: it is released when bcrypt is done, not when the request is
        // dropped (a client that disconnects cannot free it early).
        let (answer, verified) = tokio::sync::oneshot::channel();
        let job = Job {
            password: password.to_vec(),
            hash,
            slot,
            answer,
        };
        if self.bcrypt.jobs.send(job).is_err() {
            return Outcome::Denied;
        }
        let verified = verified.await.unwrap_or(false);
        if verified && bool::from(found) {
            self.remember(pair);
            Outcome::Allowed
        } else {
            Outcome::Denied
        }
    }

    /// Whether `pair` was verified and used within [`CACHE_TTL`]; a hit counts as a use.
    fn cached(&self, pair: &[u8; 32]) -> bool {
        let mut cache = self.cache.lock_unpoisoned();
        match cache.get_mut(pair) {
            Some(used) if used.elapsed() < CACHE_TTL => {
                *used = Instant::now();
                true
            }
            _ => false,
        }
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
    fn unknown_users_verify_against_a_dummy_of_the_highest_cost() {
        let user = |name: &str, hash: &str| BasicAuthUser {
            name: name.into(),
            bcrypt_hash: hash.into(),
        };
        let users = vec![user("a", DUMMY_HASHES[0].1), user("b", DUMMY_HASHES[2].1)];
        let auth = BasicAuth::new(&users).unwrap().unwrap();
        let (hash, found) = auth.lookup(b"nobody");
        assert!(!bool::from(found));
        assert_eq!(&*hash, DUMMY_HASHES[2].1);
        assert_eq!(cost_of(&hash), 12);
        let (hash, found) = auth.lookup(b"a");
        assert!(bool::from(found));
        assert_eq!(&*hash, DUMMY_HASHES[0].1);
        for (cost, hash) in DUMMY_HASHES {
            assert_eq!(cost_of(hash), cost);
            assert_eq!(dummy_hash(cost), hash);
            assert!(hash.parse::<bcrypt::HashParts>().is_ok(), "{hash}");
        }
        assert!(auth.same_users(&users));
        assert!(!auth.same_users(&users[..1]));
        assert!(!auth.same_users(&[user("a", DUMMY_HASHES[1].1), users[1].clone()]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_busy_bcrypt_answers_at_once_and_the_slot_outlives_the_request() {
        // Cost 14: each verification takes about a second, far longer than the steps below.
        let users = vec![BasicAuthUser {
            name: "prom".into(),
            bcrypt_hash: DUMMY_HASHES[4].1.into(),
        }];
        let auth = std::sync::Arc::new(BasicAuth::new(&users).unwrap().unwrap());
        // Requests that start a bcrypt and are dropped at once (a client that went away).
        for i in 0..BCRYPT_PARALLELISM {
            let checker = auth.clone();
            let wrong = basic(&format!("prom:wrong{i}"));
            let started = tokio::spawn(async move { checker.check(Some(&wrong)).await });
            // Let it reach the blocking pool, then drop it.
            while auth_slots_free(&auth) > BCRYPT_PARALLELISM - 1 - i {
                tokio::task::yield_now().await;
            }
            started.abort();
        }
        // Their bcrypt still holds every slot: a new uncached check is turned away, not queued.
        assert_eq!(auth.check(Some(&basic("prom:other"))).await, Outcome::Busy);
        assert_eq!(auth.check(Some(&basic("nobody:x"))).await, Outcome::Busy);
        // Released when their bcrypt is done.
        while auth_slots_free(&auth) < BCRYPT_PARALLELISM {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(
            auth.check(Some(&basic("prom:other"))).await,
            Outcome::Denied
        );
    }

    fn auth_slots_free(auth: &BasicAuth) -> usize {
        auth.bcrypt.slots.available_permits()
    }

    #[test]
    fn no_users_no_auth() {
        assert!(BasicAuth::new(&[]).unwrap().is_none());
    }
}
