//! The bytes the Kubernetes API server sends, decoded without any I/O: a watch stream (one JSON event
//! per line, cut into frames anywhere) into [`WatchEvent`]s, and one list page into its items and
//! continue token. Bounded: a watch line longer than [`MAX_WATCH_LINE`] and a list page longer than
//! [`MAX_LIST_PAGE`] are errors, never an unbounded buffer. Pure so that `fuzz/` drives exactly what
//! the watcher runs.

use serde_json::Value;

/// Longest watch event line kept: one object, which etcd limits to 1.5 MiB by default (the API server's
/// request limit is about 3 MiB), so a longer line is a broken or hostile server.
pub const MAX_WATCH_LINE: usize = 4 << 20;
/// Longest list page read (500 objects).
pub const MAX_LIST_PAGE: usize = 64 << 20;
/// Characters of a server's error message kept for the log.
const MAX_MESSAGE: usize = 200;

/// One decoded watch event.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// `ADDED` or `MODIFIED`: the object as it is now.
    Put(Value),
    /// `DELETED`: the object as it was.
    Delete(Value),
    /// `BOOKMARK`: only its resource version matters.
    Bookmark(Value),
    /// `ERROR` with code 410: the version is too old; list again.
    Gone,
    /// Another `ERROR`: its code (0 when absent or out of range) and message (cut to 200 characters).
    Error(u16, String),
}

impl WatchEvent {
    /// The object's `metadata.resourceVersion`, for the events that carry one.
    pub fn resource_version(&self) -> Option<String> {
        match self {
            WatchEvent::Put(o) | WatchEvent::Delete(o) | WatchEvent::Bookmark(o) => {
                resource_version(o)
            }
            WatchEvent::Gone | WatchEvent::Error(..) => None,
        }
    }
}

/// Why the bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("watch event line longer than {MAX_WATCH_LINE} bytes")]
    LineTooLong,
    #[error("{0}")]
    Json(String),
}

/// `metadata.resourceVersion` of an object or list.
pub fn resource_version(v: &Value) -> Option<String> {
    v.get("metadata")?
        .get("resourceVersion")?
        .as_str()
        .map(str::to_string)
}

fn clip(s: &str) -> String {
    s.chars().take(MAX_MESSAGE).collect()
}

/// One event line; `None` for an event to skip (no object, an unknown type).
fn decode_event(line: &[u8]) -> Result<Option<WatchEvent>, DecodeError> {
    let event: Value =
        serde_json::from_slice(line).map_err(|e| DecodeError::Json(e.to_string()))?;
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(object) = event.get("object") else {
        return Ok(None);
    };
    Ok(match kind {
        "ADDED" | "MODIFIED" => Some(WatchEvent::Put(object.clone())),
        "DELETED" => Some(WatchEvent::Delete(object.clone())),
        "BOOKMARK" => Some(WatchEvent::Bookmark(object.clone())),
        "ERROR" => {
            let code = object.get("code").and_then(Value::as_u64).unwrap_or(0);
            if code == 410 {
                Some(WatchEvent::Gone)
            } else {
                let message = object
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Some(WatchEvent::Error(
                    u16::try_from(code).unwrap_or(0),
                    clip(message),
                ))
            }
        }
        _ => None,
    })
}

/// A watch stream being decoded: feed it each frame as it arrives.
#[derive(Debug, Default)]
pub struct WatchDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
    failed: bool,
}

impl WatchDecoder {
    pub fn new() -> WatchDecoder {
        WatchDecoder::default()
    }

    /// Decode the complete lines `data` finishes, in order. An error ends the list (and the stream:
    /// every later call returns nothing).
    pub fn push(&mut self, data: &[u8]) -> Vec<Result<WatchEvent, DecodeError>> {
        let mut out = Vec::new();
        if self.failed {
            return out;
        }
        self.buf.extend_from_slice(data);
        let mut start = 0;
        while let Some(off) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
            let end = self.scanned + off;
            let line = &self.buf[start..end];
            self.scanned = end + 1;
            start = end + 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if line.len() > MAX_WATCH_LINE {
                self.failed = true;
                out.push(Err(DecodeError::LineTooLong));
                return out;
            }
            match decode_event(line) {
                Ok(Some(e)) => out.push(Ok(e)),
                Ok(None) => {}
                Err(e) => {
                    self.failed = true;
                    out.push(Err(e));
                    return out;
                }
            }
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.buf.len() > MAX_WATCH_LINE {
            self.failed = true;
            self.buf = Vec::new();
            out.push(Err(DecodeError::LineTooLong));
        }
        out
    }
}

/// One decoded list page.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ListPage {
    pub items: Vec<Value>,
    /// The token of the next page; `None` on the last one.
    pub continue_token: Option<String>,
    /// The list's resource version (empty when absent).
    pub version: String,
}

/// Decode one list page (the caller bounds the body to [`MAX_LIST_PAGE`]).
pub fn decode_list_page(body: &[u8]) -> Result<ListPage, DecodeError> {
    let list: Value = serde_json::from_slice(body).map_err(|e| DecodeError::Json(e.to_string()))?;
    let continue_token = list
        .get("metadata")
        .and_then(|m| m.get("continue"))
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    let version = resource_version(&list).unwrap_or_default();
    let items = match list {
        Value::Object(mut m) => match m.remove("items") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    Ok(ListPage {
        items,
        continue_token,
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_frames_decode_once() {
        let stream = b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"7\"}}}\n\n{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}\n";
        let mut d = WatchDecoder::new();
        let mut got = Vec::new();
        for chunk in stream.chunks(5) {
            got.extend(d.push(chunk));
        }
        let got: Vec<WatchEvent> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].resource_version().as_deref(), Some("7"));
        assert!(matches!(got[1], WatchEvent::Bookmark(_)));
        assert_eq!(got[1].resource_version().as_deref(), Some("9"));
    }

    #[test]
    fn error_events_keep_their_code_without_wrapping() {
        let mut d = WatchDecoder::new();
        // 65946 = 65536 + 410: a cast to u16 would have read "410 Gone".
        let got = d.push(b"{\"type\":\"ERROR\",\"object\":{\"code\":65946,\"message\":\"x\"}}\n");
        assert_eq!(got, vec![Ok(WatchEvent::Error(0, "x".into()))]);
        let mut d = WatchDecoder::new();
        let got = d.push(b"{\"type\":\"ERROR\",\"object\":{\"code\":410}}\n");
        assert_eq!(got, vec![Ok(WatchEvent::Gone)]);
    }

    #[test]
    fn a_line_without_end_is_bounded() {
        let mut d = WatchDecoder::new();
        let chunk = vec![b' '; 1 << 20];
        let mut errors = Vec::new();
        for _ in 0..17 {
            errors.extend(d.push(&chunk));
        }
        assert_eq!(errors, vec![Err(DecodeError::LineTooLong)]);
        assert!(d.push(b"\n").is_empty());
    }

    #[test]
    fn a_bad_line_ends_the_stream_after_the_good_ones() {
        let mut d = WatchDecoder::new();
        let got = d.push(
            b"{\"type\":\"DELETED\",\"object\":{}}\nnot json\n{\"type\":\"ADDED\",\"object\":{}}\n",
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], Ok(WatchEvent::Delete(serde_json::json!({}))));
        assert!(matches!(got[1], Err(DecodeError::Json(_))));
    }

    #[test]
    fn list_pages() {
        let page = decode_list_page(
            br#"{"metadata":{"continue":"c1","resourceVersion":"5"},"items":[{"a":1}]}"#,
        )
        .unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.continue_token.as_deref(), Some("c1"));
        assert_eq!(page.version, "5");
        let last = decode_list_page(br#"{"metadata":{"continue":""},"items":"x"}"#).unwrap();
        assert_eq!(last, ListPage::default());
        assert!(decode_list_page(b"[").is_err());
    }
}
