//! The soak's OTLP/HTTP collector, able to go away and come back on the same address, accepting
//! `/v1/metrics` and `/v1/logs` and counting both. "Away" means what a user sees when a peer dies: the
//! port is closed (connections refused) and every open connection is cut. The soak's other peers, the
//! kubelet and the Kubernetes API server, are the toolkit's (`support::kubelet`,
//! `support::api_server`), which go away the same way.

use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::otlp;

/// Requests a collector received, by signal.
#[derive(Default)]
pub struct Received {
    pub metrics: AtomicU64,
    pub logs: AtomicU64,
    pub bytes: AtomicU64,
    /// Log records in the `/v1/logs` requests, and their encoded bytes (after gzip, if any).
    pub log_records: AtomicU64,
    pub log_bytes: AtomicU64,
    /// The largest `/v1/logs` request, encoded bytes.
    pub max_log_request: AtomicU64,
    /// Arrival times (seconds since the soak began) of the requests of any signal (a few per second;
    /// the oldest beyond a day's worth are forgotten).
    pub recent: Mutex<VecDeque<f64>>,
    /// The same for `/v1/logs` requests alone.
    pub recent_logs: Mutex<VecDeque<f64>>,
}

impl Received {
    fn arrived(&self, at: f64, logs: bool) {
        let lists = [Some(&self.recent), logs.then_some(&self.recent_logs)];
        for list in lists.into_iter().flatten() {
            let mut recent = list.lock().unwrap();
            recent.push_back(at);
            if recent.len() > 200_000 {
                recent.pop_front();
            }
        }
    }

    fn count(&self, seen: &otlp::Seen, at: f64) {
        let counter = if seen.logs { &self.logs } else { &self.metrics };
        counter.fetch_add(1, Ordering::SeqCst);
        self.bytes
            .fetch_add(seen.body_bytes as u64, Ordering::SeqCst);
        if seen.logs {
            self.log_records
                .fetch_add(seen.log_records as u64, Ordering::SeqCst);
            self.log_bytes
                .fetch_add(seen.plain_bytes as u64, Ordering::SeqCst);
            self.max_log_request
                .fetch_max(seen.plain_bytes as u64, Ordering::SeqCst);
        }
        self.arrived(at, seen.logs);
    }
}

/// An OTLP/HTTP collector on 127.0.0.1 taking `/v1/metrics` and `/v1/logs`: the tests' one receiver
/// (`support::otlp`), counting what it gets; down means the receiver is dropped (port closed, open
/// connections cut), up a new one on the same port.
pub struct Collector {
    pub port: u16,
    pub received: Arc<Received>,
    receiver: Option<otlp::Receiver>,
    epoch: Instant,
}

impl Collector {
    pub fn start(epoch: Instant) -> Collector {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut c = Collector {
            port,
            received: Arc::default(),
            receiver: None,
            epoch,
        };
        c.up();
        c
    }

    pub fn up(&mut self) {
        let (received, epoch) = (self.received.clone(), self.epoch);
        self.receiver = Some(otlp::Receiver::http_counting(
            self.port,
            Arc::new(move |seen: &otlp::Seen| received.count(seen, epoch.elapsed().as_secs_f64())),
        ));
    }

    pub fn down(&mut self) {
        self.receiver = None;
        // Let the accept loop and the connections see it before the port is reused.
        std::thread::sleep(Duration::from_millis(100));
    }

    /// The first request received at or after `t` (seconds since the soak began).
    pub fn first_since(&self, t: f64) -> Option<f64> {
        first_at_or_after(&self.received.recent, t)
    }

    /// The first `/v1/logs` request received at or after `t`.
    pub fn first_logs_since(&self, t: f64) -> Option<f64> {
        first_at_or_after(&self.received.recent_logs, t)
    }
}

fn first_at_or_after(times: &Mutex<VecDeque<f64>>, t: f64) -> Option<f64> {
    times.lock().unwrap().iter().copied().find(|&at| at >= t)
}
