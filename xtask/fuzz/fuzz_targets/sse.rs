//! `sse`: `bench_transport::sse::SseParser` fed arbitrary bytes cut at arbitrary points. Byte 0
//! picks the parser: below `0x80` uncapped (`SseParser::new`), else capped at
//! `(b & 0x7F) * 8 + 1` bytes (`SseParser::with_max_len`); then a `bench_fuzz::Cut`.
//! Invariant: the items produced, the last event id, whether the parser overflowed its cap and
//! (when it did not) whether it is idle are the same however the bytes are cut as when they are
//! fed whole; nothing panics.
#![no_main]

use bench_fuzz::Cut;
use bench_transport::sse::{SseItem, SseParser};
use libfuzzer_sys::fuzz_target;

/// An item, owned.
#[derive(Debug, PartialEq, Eq)]
enum Item {
    Event {
        event: Option<String>,
        data: String,
        id: Option<String>,
    },
    Comment(String),
    Retry(u64),
}

fn owned(item: SseItem<'_>) -> Item {
    match item {
        SseItem::Event(ev) => Item::Event {
            event: ev.event.map(|e| e.into_owned()),
            data: ev.data.into_owned(),
            id: ev.id.map(|i| i.into_owned()),
        },
        SseItem::Comment(c) => Item::Comment(c.into_owned()),
        SseItem::Retry(ms) => Item::Retry(ms),
    }
}

/// What a parser made of `chunks`: its items, last event id, overflow and (without one) idleness.
fn parse(cap: Option<usize>, chunks: &[&[u8]]) -> (Vec<Item>, String, bool, Option<bool>) {
    let mut parser = match cap {
        None => SseParser::new(),
        Some(n) => SseParser::with_max_len(n),
    };
    let mut items = Vec::new();
    for chunk in chunks {
        parser.feed(chunk, |item| items.push(owned(item)));
    }
    let overflowed = parser.overflowed();
    let idle = (!overflowed).then(|| parser.is_idle());
    (items, parser.last_event_id().to_owned(), overflowed, idle)
}

fuzz_target!(|data: &[u8]| {
    let Some((&c, rest)) = data.split_first() else {
        return;
    };
    let cap = (c >= 0x80).then(|| usize::from(c & 0x7F) * 8 + 1);
    let Some(cut) = Cut::parse(rest) else {
        return;
    };
    let whole = parse(cap, &[cut.payload]);
    let split = parse(cap, &cut.chunks());
    assert_eq!(
        whole, split,
        "the events depend on where the stream was cut"
    );
});
