//! The bytes the Kubernetes API server sends, decoded without any I/O: a watch stream (one JSON event
//! per line, cut into frames anywhere) into [`WatchEvent`]s, and one list page into its items and
//! continue token. Objects are decoded into typed structs holding only what the exporter reads
//! ([`ApiObject`]; the rest of an object is skipped, never built): a list page's items are located as raw
//! JSON slices of the body, each decoded on its own (an item that does not decode is skipped and counted).
//! Bounded: a watch line longer than [`MAX_WATCH_LINE`] and a list page longer than [`MAX_LIST_PAGE`] are
//! errors, never an unbounded buffer. Pure so that `fuzz/` drives exactly what the watcher runs.

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;

/// Longest watch event line kept: one object, which etcd limits to 1.5 MiB by default (the API server's
/// request limit is about 3 MiB), so a longer line is a broken or hostile server.
pub const MAX_WATCH_LINE: usize = 4 << 20;
/// Longest list page read: [`LIST_LIMIT`] objects of up to 160 KiB each on average (a pod with its
/// managed fields is 5 to 30 KiB). 64 MiB before issue 35, which a 60 MiB page turned into 714 MiB.
pub const MAX_LIST_PAGE: usize = 16 << 20;
/// Objects asked for per list page (`limit=`).
pub const LIST_LIMIT: usize = 100;
/// Characters of a server's error message kept for the log.
const MAX_MESSAGE: usize = 200;

/// An object of a watched resource, as decoded: only the fields the exporter reads.
pub trait ApiObject: DeserializeOwned {
    /// `metadata.resourceVersion`.
    fn resource_version(&self) -> Option<&str>;
    /// The node a node-scoped object belongs to (`spec.nodeName`); `None` for other objects.
    fn node_name(&self) -> Option<&str> {
        None
    }
}

/// One decoded watch event.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<O> {
    /// `ADDED` or `MODIFIED`: the object as it is now.
    Put(O),
    /// `DELETED`: the object as it was.
    Delete(O),
    /// `BOOKMARK`: only its resource version matters.
    Bookmark(Option<String>),
    /// `ERROR` with code 410: the version is too old; list again.
    Gone,
    /// Another `ERROR`: its code (0 when absent or out of range) and message (cut to 200 characters).
    Error(u16, String),
}

impl<O: ApiObject> WatchEvent<O> {
    /// The object's `metadata.resourceVersion`, for the events that carry one.
    pub fn resource_version(&self) -> Option<String> {
        match self {
            WatchEvent::Put(o) | WatchEvent::Delete(o) => o.resource_version().map(str::to_string),
            WatchEvent::Bookmark(v) => v.clone(),
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

fn clip(s: &str) -> String {
    s.chars().take(MAX_MESSAGE).collect()
}

/// A watch event: its type and its object, left undecoded until the type says what it is.
#[derive(Deserialize)]
struct EventWire<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    object: Option<&'a RawValue>,
}

/// What an `ERROR` event's `Status` and a `BOOKMARK`'s object say, each field decoded leniently.
#[derive(Deserialize, Default)]
struct StatusWire<'a> {
    #[serde(default, borrow)]
    code: Option<&'a RawValue>,
    #[serde(default, borrow)]
    message: Option<&'a RawValue>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
}

/// `metadata` as far as a bookmark or a list needs it.
#[derive(Deserialize, Default)]
struct ListMetaWire {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

/// `raw` as a `T`, or `None` (a field of the wrong type is treated as absent).
fn lenient<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
}

/// An `ADDED`, `MODIFIED` or `DELETED` event whose object does not decode as the resource's (skipped,
/// counted).
struct Skipped;

/// An event line decoded.
type Decoded<O> = Result<Option<WatchEvent<O>>, Skipped>;

/// One event line: `Ok(None)` for an event to skip (no object, an unknown type), `Err(Skipped)` for an
/// object that does not decode.
fn decode_event<O: ApiObject>(line: &[u8]) -> Result<Decoded<O>, DecodeError> {
    let event: EventWire<'_> =
        serde_json::from_slice(line).map_err(|e| DecodeError::Json(e.to_string()))?;
    let Some(object) = event.object else {
        return Ok(Ok(None));
    };
    Ok(decode_object(&event.kind, object))
}

/// The event of `kind` carrying `object`.
fn decode_object<O: ApiObject>(kind: &str, object: &RawValue) -> Decoded<O> {
    let typed = || serde_json::from_str::<O>(object.get()).map_err(|_| Skipped);
    Ok(match kind {
        "ADDED" | "MODIFIED" => return typed().map(|o| Some(WatchEvent::Put(o))),
        "DELETED" => return typed().map(|o| Some(WatchEvent::Delete(o))),
        "BOOKMARK" => {
            let status: StatusWire<'_> = lenient(Some(object)).unwrap_or_default();
            let meta: ListMetaWire = lenient(status.metadata).unwrap_or_default();
            Some(WatchEvent::Bookmark(meta.resource_version))
        }
        "ERROR" => {
            let status: StatusWire<'_> = lenient(Some(object)).unwrap_or_default();
            let code = lenient::<u64>(status.code).unwrap_or(0);
            if code == 410 {
                Some(WatchEvent::Gone)
            } else {
                let message: String = lenient(status.message).unwrap_or_default();
                Some(WatchEvent::Error(
                    u16::try_from(code).unwrap_or(0),
                    clip(&message),
                ))
            }
        }
        _ => None,
    })
}

/// A watch stream being decoded: feed it each frame as it arrives.
#[derive(Debug)]
pub struct WatchDecoder<O> {
    buf: Vec<u8>,
    /// Bytes of `buf` already searched for a newline.
    scanned: usize,
    failed: bool,
    /// Events whose object did not decode as an `O` (skipped).
    pub skipped: usize,
    object: std::marker::PhantomData<fn() -> O>,
}

impl<O: ApiObject> Default for WatchDecoder<O> {
    fn default() -> Self {
        WatchDecoder {
            buf: Vec::new(),
            scanned: 0,
            failed: false,
            skipped: 0,
            object: std::marker::PhantomData,
        }
    }
}

impl<O: ApiObject> WatchDecoder<O> {
    pub fn new() -> WatchDecoder<O> {
        WatchDecoder::default()
    }

    /// Decode the complete lines `data` finishes, in order. An error ends the list (and the stream:
    /// every later call returns nothing).
    pub fn push(&mut self, data: &[u8]) -> Vec<Result<WatchEvent<O>, DecodeError>> {
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
                Ok(Ok(Some(e))) => out.push(Ok(e)),
                Ok(Ok(None)) => {}
                Ok(Err(Skipped)) => self.skipped += 1,
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
#[derive(Debug, Clone, PartialEq)]
pub struct ListPage<O> {
    pub items: Vec<O>,
    /// Items that did not decode as an `O` (left out).
    pub skipped: usize,
    /// The token of the next page; `None` on the last one.
    pub continue_token: Option<String>,
    /// The list's resource version (empty when absent).
    pub version: String,
}

impl<O> Default for ListPage<O> {
    fn default() -> Self {
        ListPage {
            items: Vec::new(),
            skipped: 0,
            continue_token: None,
            version: String::new(),
        }
    }
}

/// A list page: its metadata and its items as raw slices of the body.
#[derive(Deserialize)]
struct ListWire<'a> {
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(default, borrow)]
    items: Option<&'a RawValue>,
}

/// Decode one list page (the caller bounds the body to [`MAX_LIST_PAGE`]).
pub fn decode_list_page<O: ApiObject>(body: &[u8]) -> Result<ListPage<O>, DecodeError> {
    let list: ListWire<'_> =
        serde_json::from_slice(body).map_err(|e| DecodeError::Json(e.to_string()))?;
    let meta: ListMetaWire = lenient(list.metadata).unwrap_or_default();
    let raw_items: Vec<&RawValue> = lenient(list.items).unwrap_or_default();
    let mut page = ListPage {
        items: Vec::with_capacity(raw_items.len()),
        skipped: 0,
        continue_token: meta.continue_token.filter(|c| !c.is_empty()),
        version: meta.resource_version.unwrap_or_default(),
    };
    for raw in raw_items {
        match serde_json::from_str::<O>(raw.get()) {
            Ok(o) => page.items.push(o),
            Err(_) => page.skipped += 1,
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Default, Deserialize)]
    #[serde(default)]
    struct Obj {
        metadata: Meta,
    }

    #[derive(Debug, Clone, PartialEq, Default, Deserialize)]
    #[serde(default)]
    struct Meta {
        name: Option<String>,
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }

    impl ApiObject for Obj {
        fn resource_version(&self) -> Option<&str> {
            self.metadata.resource_version.as_deref()
        }
    }

    fn decoder() -> WatchDecoder<Obj> {
        WatchDecoder::new()
    }

    #[test]
    fn events_split_across_frames_decode_once() {
        let stream = b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"7\"}}}\n\n{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"9\"}}}\n";
        let mut d = decoder();
        let mut got = Vec::new();
        for chunk in stream.chunks(5) {
            got.extend(d.push(chunk));
        }
        let got: Vec<WatchEvent<Obj>> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].resource_version().as_deref(), Some("7"));
        assert!(matches!(got[1], WatchEvent::Bookmark(_)));
        assert_eq!(got[1].resource_version().as_deref(), Some("9"));
    }

    #[test]
    fn error_events_keep_their_code_without_wrapping() {
        let mut d = decoder();
        // 65946 = 65536 + 410: a cast to u16 would have read "410 Gone".
        let got = d.push(b"{\"type\":\"ERROR\",\"object\":{\"code\":65946,\"message\":\"x\"}}\n");
        assert_eq!(got, vec![Ok(WatchEvent::Error(0, "x".into()))]);
        let mut d = decoder();
        let got = d.push(b"{\"type\":\"ERROR\",\"object\":{\"code\":410}}\n");
        assert_eq!(got, vec![Ok(WatchEvent::Gone)]);
        // Fields of the wrong type read as absent.
        let mut d = decoder();
        let got = d.push(b"{\"type\":\"ERROR\",\"object\":{\"code\":\"410\",\"message\":[1]}}\n");
        assert_eq!(got, vec![Ok(WatchEvent::Error(0, String::new()))]);
    }

    #[test]
    fn a_line_without_end_is_bounded() {
        let mut d = decoder();
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
        let mut d = decoder();
        let got = d.push(
            b"{\"type\":\"DELETED\",\"object\":{}}\nnot json\n{\"type\":\"ADDED\",\"object\":{}}\n",
        );
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], Ok(WatchEvent::Delete(Obj::default())));
        assert!(matches!(got[1], Err(DecodeError::Json(_))));
    }

    #[test]
    fn an_object_that_does_not_decode_is_skipped() {
        let mut d = decoder();
        let got = d.push(
            b"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":5}}}\n{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"b\"}}}\n",
        );
        assert_eq!(got.len(), 1);
        assert!(
            matches!(&got[0], Ok(WatchEvent::Put(o)) if o.metadata.name.as_deref() == Some("b"))
        );
        assert_eq!(d.skipped, 1);
    }

    #[test]
    fn list_pages() {
        let page: ListPage<Obj> = decode_list_page(
            br#"{"metadata":{"continue":"c1","resourceVersion":"5"},"items":[{"a":1},{"metadata":{"name":[]}}]}"#,
        )
        .unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.skipped, 1);
        assert_eq!(page.continue_token.as_deref(), Some("c1"));
        assert_eq!(page.version, "5");
        let last: ListPage<Obj> =
            decode_list_page(br#"{"metadata":{"continue":""},"items":"x"}"#).unwrap();
        assert_eq!(last, ListPage::default());
        assert!(decode_list_page::<Obj>(b"[").is_err());
    }
}
