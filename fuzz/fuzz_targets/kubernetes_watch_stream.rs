//! The Kubernetes API's bytes: a watch stream (JSON event lines cut into frames anywhere) and a list
//! page, decoded into the typed pod and ResourceSlice objects. Properties: cutting the stream into
//! frames differently never changes the events decoded; a decode error ends the stream; each object
//! goes through the pod and ResourceSlice parsers.
#![no_main]
use dcgm_otel::kubernetes_api::objects::{Pod, ResourceSlice};
use dcgm_otel::kubernetes_api::stream::{self, WatchDecoder, WatchEvent};
use dcgm_otel::enrich::kubernetes::{parse_pod, parse_resource_slice, MAX_LABEL_VALUE};
use libfuzzer_sys::fuzz_target;

fn parse_object(o: Pod) {
    if let Some((key, meta)) = parse_pod(o) {
        assert!(key.contains('/'));
        assert!(meta.labels.values().all(|v| v.len() <= MAX_LABEL_VALUE));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 1 {
        if let Ok(page) = stream::decode_list_page::<Pod>(rest) {
            page.items.into_iter().for_each(parse_object);
        }
        if let Ok(page) = stream::decode_list_page::<ResourceSlice>(rest) {
            page.items.into_iter().for_each(|s| {
                let _ = parse_resource_slice(s);
            });
        }
        return;
    }
    let frame = usize::from(mode >> 1).max(1);
    let mut whole = WatchDecoder::<Pod>::new();
    let at_once = whole.push(rest);
    let mut cut = WatchDecoder::<Pod>::new();
    let in_frames: Vec<_> = rest.chunks(frame).flat_map(|c| cut.push(c)).collect();
    assert_eq!(at_once, in_frames, "frames of {frame} bytes");
    if let Some(i) = at_once.iter().position(Result::is_err) {
        assert_eq!(i, at_once.len() - 1, "an error is the last thing decoded");
    }
    for event in at_once.into_iter().flatten() {
        let _ = event.resource_version();
        if let WatchEvent::Error(code, message) = &event {
            assert_ne!(*code, 410);
            assert!(message.chars().count() <= 200);
        }
        if let WatchEvent::Put(o) | WatchEvent::Delete(o) = event {
            parse_object(o);
        }
    }
});
