//! Connection-level guards for :9400: the write timeout ([`TimedIo`]) and the quick answer given to a
//! connection over `--web-max-connections` ([`reject_busy`]).
//!
//! Read-side limits live in hyper's builder (header read timeout, which also bounds keep-alive idle time,
//! and the buffer cap); the write timeout needs the socket: a response that is not fully handed to the
//! kernel within `--web-write-timeout` (a client that stops reading) ends the connection, like Go's
//! `http.Server.WriteTimeout`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// A stream whose writes must complete within a deadline. The deadline starts at the first write of a
/// response and ends when the written bytes are flushed; hyper flushes after each response, so each
/// response gets the full timeout.
pub struct TimedIo<T> {
    inner: T,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    armed: bool,
}

impl<T> TimedIo<T> {
    pub fn new(inner: T, timeout: Duration) -> Self {
        TimedIo {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            armed: false,
        }
    }

    fn arm(&mut self) {
        if !self.armed && !self.timeout.is_zero() {
            self.deadline.as_mut().reset(Instant::now() + self.timeout);
            self.armed = true;
        }
    }

    /// After the inner write returned Pending: has the deadline passed? (Registers the waker.)
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.armed && self.deadline.as_mut().poll(cx).is_ready()
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "write timeout")
}

impl<T: AsyncRead + Unpin> AsyncRead for TimedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for TimedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.arm();
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.arm();
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(Ok(())) => {
                self.armed = false;
                Poll::Ready(Ok(()))
            }
            Poll::Pending if self.expired(cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n\
Content-Length: 38\r\nRetry-After: 1\r\nConnection: close\r\n\r\n503 too many connections, retry later\n";

/// Answer a connection over the cap with a fixed 503 and close it, spending at most about a second.
/// With TLS there is no plain-text answer to give: the connection is just closed.
pub async fn reject_busy(mut stream: TcpStream, plain_http: bool) {
    if !plain_http {
        return;
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(BUSY).await?;
        stream.shutdown().await?;
        // Drain what the client sent so the close is a FIN, not a reset that could eat the answer.
        let mut sink = [0u8; 1024];
        let mut total = 0usize;
        loop {
            let n = stream.read(&mut sink).await?;
            total += n;
            if n == 0 || total > 64 * 1024 {
                break;
            }
        }
        Ok::<(), io::Error>(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_client_that_stops_reading_times_the_write_out() {
        let (a, _b) = tokio::io::duplex(64);
        let mut io = TimedIo::new(a, Duration::from_millis(100));
        let err = io.write_all(&[0u8; 4096]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    /// A client that reads slowly but steadily: a 64-byte buffer drained 64 bytes every 40 ms, five
    /// 128-byte responses each flushed. Each response waits at most 80 ms for the reader (under the
    /// 100 ms timeout); all five take 360 ms (over it). Passes only when every flushed response gets
    /// a deadline of its own: one deadline for the connection cuts the second (checked by hand).
    /// Paused time: the clock moves only when every task waits, so the schedule is exact.
    #[tokio::test(start_paused = true)]
    async fn each_flushed_response_gets_a_fresh_deadline() {
        const BUFFER: usize = 64;
        const RESPONSE: usize = 2 * BUFFER;
        const RESPONSES: usize = 5;
        let timeout = Duration::from_millis(100);
        let (a, mut b) = tokio::io::duplex(BUFFER);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = [0u8; BUFFER];
            loop {
                tokio::time::sleep(Duration::from_millis(40)).await;
                match b.read(&mut chunk).await {
                    Ok(0) | Err(_) => return got,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                }
            }
        });
        let started = Instant::now();
        let mut io = TimedIo::new(a, timeout);
        for i in 0..RESPONSES {
            let response = [b'a' + i as u8; RESPONSE];
            io.write_all(&response)
                .await
                .unwrap_or_else(|e| panic!("response {i} cut off: {e}"));
            io.flush().await.unwrap();
        }
        let writing = started.elapsed();
        drop(io);
        let got = reader.await.unwrap();
        let expected: Vec<u8> = (0..RESPONSES)
            .flat_map(|i| [b'a' + i as u8; RESPONSE])
            .collect();
        assert_eq!(got, expected);
        // The precondition of the check (paused time: exact, not a wall-clock threshold): writing
        // them all took longer than one timeout, so a single deadline would have expired.
        assert!(writing > 2 * timeout, "{writing:?}");
    }

    #[test]
    fn busy_answer_length_matches() {
        let text = std::str::from_utf8(super::BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
