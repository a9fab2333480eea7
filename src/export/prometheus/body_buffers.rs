//! The buffers of a /metrics body: a small pool the plain and gzip buffers return to when the last
//! reader drops them, and the gzip stream that compresses the text as it is written (one reused
//! deflate state; no second pass over the body). A body made for gzip alone streams its text through
//! one small buffer (`STREAM_BUFFER`) into the compressor instead of keeping the whole text.

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

use crate::lock::LockExt;

/// Spare body buffers. A body's bytes return here when the last `Bytes` referring to them is dropped
/// (the next render usually, or a slow scrape finishing), so steady-state renders do not allocate.
#[derive(Default)]
pub(super) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

/// Spare buffers kept per pool: the published body and one a slow scraper may still hold.
const POOL_SPARES: usize = 2;

impl BufferPool {
    pub(super) fn take(&self, min_capacity: usize) -> Vec<u8> {
        let buf = self.free.lock_unpoisoned().pop();
        let mut buf = buf.unwrap_or_default();
        buf.clear();
        buf.reserve(min_capacity);
        buf
    }

    /// Free the spare buffers (those out on loan come back as usual).
    pub(super) fn release_spares(&self) {
        self.free.lock_unpoisoned().clear();
    }

    fn give(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut free = self.free.lock_unpoisoned();
        if free.len() < POOL_SPARES {
            free.push(buf);
        }
    }
}

/// A body buffer on loan to `Bytes`; goes back to its pool when dropped.
struct Pooled {
    pub(super) buf: Vec<u8>,
    pool: Weak<BufferPool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give(std::mem::take(&mut self.buf));
        }
    }
}

pub(super) fn pooled_bytes(buf: Vec<u8>, pool: &Arc<BufferPool>) -> Bytes {
    Bytes::from_owner(Pooled {
        buf,
        pool: Arc::downgrade(pool),
    })
}

/// Gzip (RFC 1952: the header `GzEncoder` writes at the fast level, raw deflate, CRC-32 and size) of a
/// body while it is being written: each chunk is compressed as soon as it is complete, while it is still
/// in cache, with a reused compressor.
pub(super) struct GzipStream<'a> {
    pub(super) deflate: &'a mut flate2::Compress,
    crc: flate2::Crc,
    pub(super) out: Vec<u8>,
    /// Bytes of the current text buffer compressed so far.
    fed: usize,
    /// Bytes of text compressed and then dropped from the buffer ([`GzipStream::drain`]).
    drained: usize,
    /// Whether the text is streamed: dropped from its buffer once compressed (gzip alone asked).
    stream: bool,
    ok: bool,
}

/// Text is handed to the compressor in pieces of about this size.
const GZIP_CHUNK: usize = 64 * 1024;

/// The capacity of the buffer a streamed body's text goes through: a chunk and the family that
/// completes it, usually without growing.
pub(super) const STREAM_BUFFER: usize = 2 * GZIP_CHUNK;

impl<'a> GzipStream<'a> {
    /// `stream`: the text is not kept (see [`GzipStream::feed_chunk`]).
    pub(super) fn new(
        deflate: &'a mut flate2::Compress,
        mut out: Vec<u8>,
        stream: bool,
    ) -> GzipStream<'a> {
        deflate.reset();
        out.clear();
        out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255]);
        GzipStream {
            deflate,
            crc: flate2::Crc::new(),
            out,
            fed: 0,
            drained: 0,
            stream,
            ok: true,
        }
    }

    /// Compress the text written since the last chunk once a chunk's worth is there; when the text
    /// is streamed, empty its buffer too (its capacity stays, for the next chunk).
    pub(super) fn feed_chunk(&mut self, text: &mut String) {
        if text.len() - self.fed < GZIP_CHUNK {
            return;
        }
        if self.stream {
            self.drain(text);
        } else {
            self.feed(text.as_bytes());
        }
    }

    /// Compress all of `text` and empty it.
    pub(super) fn drain(&mut self, text: &mut String) {
        self.feed(text.as_bytes());
        self.drained += self.fed;
        self.fed = 0;
        text.clear();
    }

    /// Bytes of text taken in so far (compressed, or dropped after compression).
    pub(super) fn len(&self) -> usize {
        self.drained + self.fed
    }

    /// Compress what `text` (the text buffer so far) has beyond what was fed already.
    pub(super) fn feed(&mut self, text: &[u8]) {
        let Some(chunk) = text.get(self.fed..) else {
            self.ok = false;
            return;
        };
        self.crc.update(chunk);
        self.fed = text.len();
        self.ok = self.ok
            && deflate_into(
                self.deflate,
                chunk,
                &mut self.out,
                flate2::FlushCompress::None,
            );
    }

    /// Compress the rest and close the stream; `None` when deflate failed on the way.
    pub(super) fn finish(mut self, text: &[u8]) -> Option<Vec<u8>> {
        self.feed(text);
        if !(self.ok
            && deflate_into(
                self.deflate,
                &[],
                &mut self.out,
                flate2::FlushCompress::Finish,
            ))
        {
            return None;
        }
        self.out.extend_from_slice(&self.crc.sum().to_le_bytes());
        // ISIZE: the size modulo 2^32 (RFC 1952).
        self.out
            .extend_from_slice(&(self.len() as u32).to_le_bytes());
        Some(self.out)
    }
}

/// Run deflate over all of `input` (and, with `Finish`, to the end of the stream), growing `out` as
/// needed. False when deflate fails or stops making progress.
fn deflate_into(
    deflate: &mut flate2::Compress,
    mut input: &[u8],
    out: &mut Vec<u8>,
    flush: flate2::FlushCompress,
) -> bool {
    let finish = flush == flate2::FlushCompress::Finish;
    loop {
        if out.capacity() - out.len() < 4096 {
            out.reserve(out.capacity().max(64 * 1024));
        }
        let (in_before, out_before) = (deflate.total_in(), out.len());
        let status = match deflate.compress_vec(input, out, flush) {
            Ok(s) => s,
            Err(_) => return false,
        };
        let consumed = (deflate.total_in() - in_before) as usize;
        input = input.get(consumed..).unwrap_or_default();
        if (finish && status == flate2::Status::StreamEnd) || (!finish && input.is_empty()) {
            return true;
        }
        if consumed == 0 && out.len() == out_before && out.capacity() - out.len() >= 4096 {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_body_decodes_to_the_text() {
        use std::io::Read as _;
        let mut deflate = flate2::Compress::new(flate2::Compression::fast(), false);
        let mut text = String::new();
        for i in 0..50_000 {
            text.push_str(&format!(
                "DCGM_FI_DEV_SM_CLOCK{{gpu=\"{}\"}} {}\n",
                i % 8,
                i * 7
            ));
        }
        for input in [&b""[..], b"x", text.as_bytes()] {
            // fed in uneven pieces, as the renderer does
            let mut g = GzipStream::new(&mut deflate, Vec::new(), false);
            let mut end = 0;
            while end < input.len() {
                end = (end + 70_001).min(input.len());
                g.feed(&input[..end]);
            }
            let out = g.finish(input).unwrap();
            let mut back = Vec::new();
            flate2::read::GzDecoder::new(&out[..])
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, input);
        }
    }

    #[test]
    fn streamed_text_is_compressed_whole_through_a_small_buffer() {
        use std::io::Read as _;
        let mut deflate = flate2::Compress::new(flate2::Compression::fast(), false);
        let mut whole = String::new();
        let mut buffer = String::new();
        let mut g = GzipStream::new(&mut deflate, Vec::new(), true);
        for i in 0..50_000 {
            let line = format!("DCGM_FI_DEV_SM_CLOCK{{gpu=\"{}\"}} {}\n", i % 8, i * 7);
            whole.push_str(&line);
            buffer.push_str(&line);
            g.feed_chunk(&mut buffer);
            assert!(
                buffer.len() < GZIP_CHUNK + line.len(),
                "the buffer holds a chunk at most"
            );
        }
        g.drain(&mut buffer);
        buffer.push_str("# the tail\n");
        whole.push_str("# the tail\n");
        assert_eq!(g.len() + buffer.len(), whole.len());
        let out = g.finish(buffer.as_bytes()).unwrap();
        let mut back = String::new();
        flate2::read::GzDecoder::new(&out[..])
            .read_to_string(&mut back)
            .unwrap();
        assert_eq!(back, whole);
    }
}
