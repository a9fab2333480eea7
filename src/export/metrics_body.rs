//! The `:9400` `/metrics` body, made on demand: a collection only hands its snapshot over; the body
//! is rendered the first time a scraper asks after that collection, compressed the first time a
//! scraper asks for gzip, and then served from memory until the next collection.
//!
//! Prometheus scrapes every 15–60 s while collections can run every second: rendering (~0.2 ms for
//! 10,000 series) and above all compressing (~1 ms) every collection was work nobody read. Here each
//! snapshot's plain body and its gzip body are each made **at most once**, only when asked for, and
//! concurrent scrapes of the same snapshot wait for the one that makes it instead of doing it again
//! (one maker at a time, behind a lock that only body-making takes). A body made for gzip alone does
//! not keep its plain text (2.3 MB for 10,000 series): a plain scrape of that snapshot renders it
//! then, ending with the self-metrics the gzip copy carries, so both encodings serve the same bytes.
//! A scrape still never waits on DCGM: it renders the snapshot the collector already published.
//! What must see every collection (incidents, cost counters, resets, OTLP) is done on the collector
//! thread as before; the renderer keeps no per-collection state, so skipping snapshots changes
//! nothing in what it writes (and a text rendered after the gzip copy is the same).

use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, ArcSwapOption};

use super::prometheus::{RenderedBody, Renderer};
use super::SnapshotConsumer;
use crate::lock::LockExt;
use crate::snapshot::Snapshot;

/// How many times [`MetricsBody::make`] makes a body while newer snapshots keep arriving.
const MAKE_ATTEMPTS: usize = 3;

/// The newest snapshot and the body made from it, if any was asked for.
pub struct MetricsBody {
    renderer: Renderer,
    /// The newest published snapshot (set by the collector thread, read by scrapes).
    latest: ArcSwapOption<Snapshot>,
    /// The last body made; its `seq` says from which snapshot.
    made: ArcSwap<RenderedBody>,
    /// Held while a body is made, so concurrent scrapes do the work once.
    making: Mutex<()>,
}

impl MetricsBody {
    pub fn new(renderer: Renderer) -> MetricsBody {
        MetricsBody {
            renderer,
            latest: ArcSwapOption::empty(),
            made: ArcSwap::from_pointee(RenderedBody::default()),
            making: Mutex::new(()),
        }
    }

    /// The body of the newest snapshot, already made with what a request asking for gzip (`gzip`)
    /// needs; `None` when it still has to be made ([`MetricsBody::make`]). Never blocks.
    pub fn ready(&self, gzip: bool) -> Option<Arc<RenderedBody>> {
        let made = self.made.load_full();
        let current = self.latest_seq() == made.seq && made.serves(gzip);
        current.then_some(made)
    }

    /// The body of the newest snapshot, made now when it was not yet (gzip when `gzip`, else plain
    /// text). Takes the time of a render (and a compression) at most once per snapshot and encoding;
    /// callers arriving meanwhile wait for that one and get its result.
    pub fn make(&self, gzip: bool) -> Arc<RenderedBody> {
        if let Some(body) = self.ready(gzip) {
            return body;
        }
        let _making = self.making.lock_unpoisoned();
        // Made by the caller this one waited for?
        if let Some(body) = self.ready(gzip) {
            return body;
        }
        let mut body = self.made.load_full();
        // A body made while the collector published a newer snapshot may carry self-metrics (such
        // as `dcgm_otel_source_up 0` after a failed collection) that belong to the newer one: make
        // it again from the newer snapshot (a few times at most; collections are far apart).
        for _ in 0..MAKE_ATTEMPTS {
            let Some(snapshot) = self.latest.load_full() else {
                return body;
            };
            let made = self.made.load_full();
            if made.seq == snapshot.seq && made.serves(gzip) {
                return made;
            }
            body = Arc::new(if made.seq != snapshot.seq || !made.made_any() {
                self.renderer.render_body(&snapshot, gzip, made.size)
            } else if gzip && !made.gzip_made {
                self.renderer.add_gzip(&made)
            } else {
                // Plain asked (or compression failed) after a body made for gzip alone.
                self.renderer.add_text(&snapshot, &made)
            });
            self.made.store(body.clone());
            if self.latest_seq() == snapshot.seq {
                break;
            }
        }
        body
    }

    fn latest_seq(&self) -> u64 {
        self.latest.load().as_ref().map_or(0, |s| s.seq)
    }
}

impl SnapshotConsumer for MetricsBody {
    fn on_snapshot(&self, snapshot: &Arc<Snapshot>) {
        self.latest.store(Some(snapshot.clone()));
    }
}
