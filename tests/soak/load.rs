//! The soak's load on :9400: scrapers at a fixed rate (`Connection: close`, whole body read, with the
//! soak's basic-auth credentials), a liveness probe (`/health`, no credentials, twice a second) and a
//! slowloris crowd (connections that send one header byte at a time and never finish a request; a
//! connection the exporter closes is opened again, and counted). The scrapers and the probe come from
//! 127.0.0.1, the crowd from four other loopback addresses (25 each: within the per-client cap).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the load saw.
#[derive(Default)]
pub struct LoadStats {
    pub scrapes_ok: AtomicU64,
    pub scrapes_failed: AtomicU64,
    /// Why scrapes or probes failed: the status code, or the I/O error's kind.
    pub failures: Mutex<std::collections::BTreeMap<String, u64>>,
    pub probes_ok: AtomicU64,
    pub probes_failed: AtomicU64,
    /// Scrape durations in µs (for the percentiles of the report).
    pub latencies_us: Mutex<Vec<u32>>,
    pub slowloris_reopened: AtomicU64,
}

pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    pub stats: Arc<LoadStats>,
}

impl Load {
    /// `rate` scrapes per second over `workers` threads, and `slowloris` idle connections.
    pub fn start(port: u16, rate: u32, workers: u32, slowloris: u32) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(LoadStats::default());
        let mut threads = Vec::new();
        let period = Duration::from_secs_f64(f64::from(workers) / f64::from(rate.max(1)));
        for w in 0..workers {
            let (stop, stats) = (stop.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                // Stagger the workers over one period.
                std::thread::sleep(period.mul_f64(f64::from(w) / f64::from(workers)));
                let mut next = Instant::now();
                let mut buf = Vec::with_capacity(4 << 20);
                while !stop.load(Ordering::Relaxed) {
                    let began = Instant::now();
                    match scrape(port, &mut buf) {
                        Ok(()) => {
                            stats.scrapes_ok.fetch_add(1, Ordering::Relaxed);
                            let us = began.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                            let mut l = stats.latencies_us.lock().unwrap();
                            if l.len() < 2_000_000 {
                                l.push(us);
                            }
                        }
                        Err(e) => {
                            stats.scrapes_failed.fetch_add(1, Ordering::Relaxed);
                            stats.count_failure(&format!("scrape: {e}"));
                        }
                    }
                    next += period;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now; // behind: no burst to catch up
                    }
                }
            }));
        }
        {
            let (stop, stats) = (stop.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match crate::probe::get_as(port, "/health", None) {
                        Some((200, _)) => {
                            stats.probes_ok.fetch_add(1, Ordering::Relaxed);
                        }
                        other => {
                            stats.probes_failed.fetch_add(1, Ordering::Relaxed);
                            let why = other.map_or("no answer".to_string(), |(s, _)| s.to_string());
                            stats.count_failure(&format!("/health: {why}"));
                        }
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }));
        }
        if slowloris > 0 {
            let (stop, stats) = (stop.clone(), stats.clone());
            threads.push(std::thread::spawn(move || {
                let open = |i: usize| {
                    let c =
                        crate::hostile::connect_from([127, 0, 0, 10 + (i % 4) as u8], port).ok()?;
                    c.set_write_timeout(Some(Duration::from_millis(200))).ok()?;
                    Some(c)
                };
                let mut crowd: Vec<Option<TcpStream>> = (0..slowloris as usize).map(open).collect();
                let request = b"GET /metrics HTTP/1.1\r\nHost: slowloris\r\nX-Pad: ";
                let mut sent = vec![0usize; crowd.len()];
                while !stop.load(Ordering::Relaxed) {
                    for (i, slot) in crowd.iter_mut().enumerate() {
                        let byte = request.get(sent[i]).copied().unwrap_or(b'a');
                        let alive = slot.as_mut().is_some_and(|c| c.write_all(&[byte]).is_ok());
                        if alive {
                            sent[i] += 1;
                        } else {
                            stats.slowloris_reopened.fetch_add(1, Ordering::Relaxed);
                            *slot = open(i);
                            sent[i] = 0;
                        }
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }));
        }
        Load {
            stop,
            threads,
            stats,
        }
    }

    pub fn stop(self) -> Arc<LoadStats> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        self.stats
    }
}

impl LoadStats {
    fn count_failure(&self, why: &str) {
        *self
            .failures
            .lock()
            .unwrap()
            .entry(why.to_string())
            .or_insert(0) += 1;
    }
}

fn scrape(port: u16, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: soak\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
        crate::AUTHORIZATION
    )?;
    buf.clear();
    s.read_to_end(buf)?;
    if buf.starts_with(b"HTTP/1.1 200") {
        Ok(())
    } else {
        let status = String::from_utf8_lossy(&buf[..buf.len().min(12)]).into_owned();
        Err(std::io::Error::other(format!("answered {status:?}")))
    }
}
