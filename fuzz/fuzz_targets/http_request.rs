//! Raw bytes sent to :9400 as one connection, served by the real server stack (hyper's HTTP/1 parser
//! with the 16 KiB head limit and 100-header cap, the no-body rule, the routes). Properties: no panic,
//! no hang; every answer starts with an HTTP/1.x status line of a status the server gives.
#![no_main]
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dcgm_otel::config::LabelStyle;
use dcgm_otel::export::metrics_body::MetricsBody;
use dcgm_otel::export::prometheus::Renderer;
use dcgm_otel::pipeline::CollectorStatus;
use dcgm_otel::server::{self, Limits, ServeOptions, ServerState};
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Fixture {
    runtime: tokio::runtime::Runtime,
    state: ServerState,
    opts: ServeOptions,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        // Nothing collected yet: /metrics serves the empty body (its making is exercised by the e2e
        // tests); what is fuzzed here is the HTTP stack in front of it.
        let body = MetricsBody::new(Renderer::new(LabelStyle::default(), None));
        let state = ServerState {
            body: Arc::new(body),
            status: CollectorStatus::new(Duration::from_secs(30)),
        };
        let mut opts = ServeOptions::plain();
        // No head-read timer: the client below always ends its side, so nothing waits.
        opts.limits = Limits {
            read_timeout: Duration::ZERO,
            ..Limits::default()
        };
        Fixture {
            runtime,
            state,
            opts,
        }
    })
}

const STATUSES: &[&[u8]] = &[
    b"200", b"400", b"401", b"404", b"405", b"413", b"414", b"431", b"501", b"503", b"505",
];

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let opts = ServeOptions {
        limits: f.opts.limits,
        web: f.opts.web.clone(),
        metrics: f.opts.metrics.clone(),
        health_auth: f.opts.health_auth,
        pprof: f.opts.pprof,
    };
    let answer = f.runtime.block_on(async {
        let (mut client, server_side) = tokio::io::duplex(64 * 1024);
        let serving = tokio::spawn(server::serve_stream(server_side, f.state.clone(), opts));
        let (mut rx, mut tx) = tokio::io::split(&mut client);
        let send = async {
            let _ = tx.write_all(data).await;
            let _ = tx.shutdown().await;
        };
        let mut answer = Vec::new();
        let receive = rx.read_to_end(&mut answer);
        let (_, _) = tokio::join!(send, receive);
        let _ = serving.await;
        answer
    });
    if answer.is_empty() {
        return;
    }
    // hyper answers an HTTP/1.0 request in HTTP/1.0.
    assert!(
        answer.starts_with(b"HTTP/1.1 ") || answer.starts_with(b"HTTP/1.0 "),
        "{:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(64)])
    );
    let status = &answer[9..12.min(answer.len())];
    assert!(
        STATUSES.contains(&status),
        "status {:?}",
        String::from_utf8_lossy(status)
    );
});
