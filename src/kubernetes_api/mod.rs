//! A minimal Kubernetes API client: list + watch of one resource (pods of this node; DRA
//! ResourceSlices of this node; `-m`'s counters ConfigMap) and one GET of a single object, kept in an in-memory cache the enricher reads on the collector thread.
//! Hand-written over the hyper client already in the tree instead of kube-rs + k8s-openapi (about 50
//! more crates, several minutes of cold build on the project's 2-core machines) for the two GETs it
//! needs.
//!
//! The protocol ([`watch`]): a `list` gives the objects and a `resourceVersion`; a `watch` from that
//! version streams `ADDED`/`MODIFIED`/`DELETED` events (and `BOOKMARK`s, asked for, which only move
//! the version) as JSON lines until the server ends it (`timeoutSeconds=300`) — then the watch resumes
//! from the last version seen. `410 Gone` (as the response status or as an `ERROR` event: the version
//! is too old) means list again. A failed request is retried with doubling delays (1 s to 30 s, with
//! jitter). Nothing here runs on the collector thread: the watch has its own thread and runtime, and
//! a collection only reads the cache.
//!
//! The API being down never blocks a collection: the cache keeps what it last knew for
//! [`stale_after`] (10 collect intervals, at least 10 s) after the watch was lost, then is emptied
//! (series lose their pod labels and API UIDs) until a list succeeds again; each change is logged once. Requests are counted in
//! `dcgm_otel_kubernetes_api_requests_total{verb,result}`. The bytes of a list page and of the watch
//! stream are decoded by [`stream`] (no I/O, bounded line and page sizes) into the typed [`objects`].
//!
//! The API server is trusted with pod metadata, not with the node: a watch has a total deadline, a list
//! a page count and a deadline, the cache a bound in objects and bytes, objects of other nodes are
//! dropped ([`watch`]); TLS trusts the cluster's CA alone when one is given, and a bearer token is never
//! sent over plain `http://` ([`config`]).

pub mod config;
pub mod objects;
pub mod stream;
pub mod watch;

pub use config::{ApiConfig, Auth, ConfigError};
pub use watch::{get_object, Cache, Resource, Watcher};

pub use stream::{LIST_LIMIT, MAX_LIST_PAGE, MAX_WATCH_LINE};
pub use watch::{
    stale_after, MAX_CACHE_BYTES, MAX_CACHE_OBJECTS, MAX_LIST_PAGES, WATCH_DEADLINE,
    WATCH_TIMEOUT_S,
};
