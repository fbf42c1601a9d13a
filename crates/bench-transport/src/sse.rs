//! An incremental parser for `text/event-stream` bodies (server-sent events).
//!
//! It follows the WHATWG HTML "event stream interpretation" rules:
//!
//! * lines end in LF, CR or CRLF (a CRLF split across two chunks is one line end);
//! * a field is `name: value` (one optional space after the colon is removed), or a bare
//!   `name` with an empty value; a line starting with `:` is a comment;
//! * `data` lines are joined with `\n`; a blank line dispatches the event unless no `data` field
//!   was seen; `event` names the next event; `id` (without NUL) sets the last event id, which
//!   persists across events; `retry` with only ASCII digits is a reconnection time;
//! * one UTF-8 byte order mark at the very start of the stream is skipped;
//! * an event (or a line) not terminated when the stream ends is dropped.
//!
//! The parser works on bytes, so chunk boundaries may fall anywhere, including inside a UTF-8
//! character: text is only decoded once a whole line is known. When an event's only `data` line
//! lies inside one fed chunk (the common case for LLM streams), its text is handed out borrowed
//! from that chunk without copying.
//!
//! ```
//! use bench_transport::sse::{SseParser, SseItem};
//!
//! let mut parser = SseParser::new();
//! let mut data = Vec::new();
//! for chunk in [&b"data: hel"[..], b"lo\n\nda", b"ta: [DONE]\n\n"] {
//!     parser.feed(chunk, |item| {
//!         if let SseItem::Event(ev) = item {
//!             data.push(ev.data.to_string());
//!         }
//!     });
//! }
//! assert_eq!(data, ["hello", "[DONE]"]);
//! ```

use std::borrow::Cow;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event` field of this event, if one was given and non-empty (else the event type is
    /// "message").
    pub event: Option<Cow<'a, str>>,
    /// The `data` lines joined with `\n`.
    pub data: Cow<'a, str>,
    /// The `id` field given within this event's block, if any. See
    /// [`SseParser::last_event_id`] for the persistent WHATWG "last event ID".
    pub id: Option<Cow<'a, str>>,
}

/// What the parser hands to its callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem<'a> {
    /// A dispatched event.
    Event(SseEvent<'a>),
    /// A comment line (the text after the colon, one leading space removed).
    Comment(Cow<'a, str>),
    /// A valid `retry` field: the reconnection time in milliseconds.
    Retry(u64),
}

/// Where the current event's data lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum DataLoc {
    /// No `data` field seen yet in this event.
    #[default]
    None,
    /// Exactly one `data` line, at this byte range of the chunk being fed.
    Chunk(usize, usize),
    /// Accumulated in `data_buf` (with a trailing `\n` after each line).
    Buf,
}

/// Incremental event-stream parser. Feed it byte chunks as they arrive.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of an incomplete line carried over from earlier chunks.
    line_buf: Vec<u8>,
    /// Joined data lines of the current event (only when `data_loc == Buf`).
    data_buf: Vec<u8>,
    data_loc: DataLoc,
    event_type: Vec<u8>,
    event_id: Option<Vec<u8>>,
    last_event_id: String,
    /// The previous chunk ended with CR: an LF starting the next chunk belongs to it.
    pending_cr: bool,
    /// How many bytes of the stream start have been checked for a byte order mark (0..=3).
    bom_state: u8,
    /// Bytes held back while deciding whether the stream starts with a BOM.
    bom_buf: Vec<u8>,
    /// The longest line, and the longest joined data of one event, the parser buffers
    /// (0: no cap). Past it the parser stops and [`SseParser::overflowed`] says so.
    max_len: usize,
    overflowed: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

fn text(bytes: &[u8]) -> Cow<'_, str> {
    // Validating valid text is fast (SIMD where the CPU has it: ~3% of a streamed turn's
    // client CPU went to `std::str::from_utf8`); `from_utf8_lossy` is only needed (and only
    // taken) for invalid bytes.
    match simdutf8::basic::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

impl SseParser {
    /// A parser at the start of a stream, with no cap on line or event size.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that buffers at most `max_len` bytes of one line and of one event's joined
    /// `data`: a longer line or event stops it (memory stays bounded whatever the stream holds)
    /// and [`SseParser::overflowed`] turns true. Nothing after that point is handed out.
    pub fn with_max_len(max_len: usize) -> Self {
        SseParser {
            max_len,
            ..Self::default()
        }
    }

    /// True once a line or an event passed the parser's cap ([`SseParser::with_max_len`]);
    /// the parser ignores everything fed after that.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Whether `len` more bytes of one line or event would pass the cap (and if so, stops).
    #[inline]
    fn over(&mut self, len: usize) -> bool {
        if self.max_len != 0 && len > self.max_len {
            self.overflowed = true;
        }
        self.overflowed
    }

    /// The WHATWG "last event ID": the most recent `id` field of a dispatched event (it
    /// persists across events; empty when none was set).
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// True when the parser holds no partial line or undispatched event: a stream that ends
    /// here ended cleanly.
    pub fn is_idle(&self) -> bool {
        self.line_buf.is_empty()
            && self.data_loc == DataLoc::None
            && self.event_type.is_empty()
            && self.event_id.is_none()
    }

    /// Feeds the next chunk of the body; `on_item` is called for every event, comment and
    /// retry completed by it, in stream order.
    pub fn feed<F>(&mut self, chunk: &[u8], mut on_item: F)
    where
        F: for<'x> FnMut(SseItem<'x>),
    {
        if self.overflowed {
            return;
        }
        let mut chunk = chunk;
        // A leading byte order mark, possibly split across chunks.
        let held;
        if self.bom_state < 3 {
            let need = 3 - self.bom_state as usize;
            let take = need.min(chunk.len());
            self.bom_buf.extend_from_slice(&chunk[..take]);
            self.bom_state += take as u8;
            let seen = &self.bom_buf[..];
            if seen != &BOM[..seen.len()] {
                // Not a BOM: replay the held bytes as ordinary input.
                self.bom_state = 3;
                held = std::mem::take(&mut self.bom_buf);
                self.feed_inner(&held, &mut on_item);
                // The rest of this chunk after the bytes we took.
                chunk = &chunk[take..];
            } else if self.bom_state < 3 {
                return; // still undecided, all bytes held
            } else {
                self.bom_buf.clear();
                chunk = &chunk[take..];
            }
        }
        self.feed_inner(chunk, &mut on_item);
    }

    fn feed_inner<F>(&mut self, chunk: &[u8], on_item: &mut F)
    where
        F: for<'x> FnMut(SseItem<'x>),
    {
        // An empty chunk changes nothing (it must not end a CR's wait for its LF).
        if chunk.is_empty() {
            return;
        }
        let mut pos = 0;
        if self.pending_cr {
            self.pending_cr = false;
            if chunk.first() == Some(&b'\n') {
                pos = 1;
            }
        }
        while pos < chunk.len() {
            if self.overflowed {
                return;
            }
            let rest = &chunk[pos..];
            let Some(off) = memchr::memchr2(b'\n', b'\r', rest) else {
                if !self.over(self.line_buf.len() + rest.len()) {
                    self.line_buf.extend_from_slice(rest);
                }
                break;
            };
            let end = pos + off;
            let mut next = end + 1;
            if chunk[end] == b'\r' {
                if next < chunk.len() {
                    if chunk[next] == b'\n' {
                        next += 1;
                    }
                } else {
                    self.pending_cr = true;
                }
            }
            if self.line_buf.is_empty() {
                if self.over(end - pos) {
                    return;
                }
                self.process_line(chunk, pos, end, on_item);
            } else {
                if self.over(self.line_buf.len() + end - pos) {
                    return;
                }
                self.line_buf.extend_from_slice(&chunk[pos..end]);
                let line = std::mem::take(&mut self.line_buf);
                self.process_owned_line(&line, on_item);
                // keep the allocation
                self.line_buf = line;
                self.line_buf.clear();
            }
            pos = next;
        }
        if self.overflowed {
            return;
        }
        // An event whose data still points into this chunk must be copied before the chunk goes.
        if let DataLoc::Chunk(s, e) = self.data_loc {
            self.data_buf.clear();
            self.data_buf.extend_from_slice(&chunk[s..e]);
            self.data_buf.push(b'\n');
            self.data_loc = DataLoc::Buf;
        }
    }

    /// A complete line lying inside the current chunk at `chunk[start..end]`.
    fn process_line<F>(&mut self, chunk: &[u8], start: usize, end: usize, on_item: &mut F)
    where
        F: for<'x> FnMut(SseItem<'x>),
    {
        let line = &chunk[start..end];
        if line.is_empty() {
            self.dispatch(Some(chunk), on_item);
            return;
        }
        let (name, value_start) = split_field(line);
        if name == b"data" {
            let (vs, ve) = (start + value_start, end);
            match self.data_loc {
                DataLoc::None => self.data_loc = DataLoc::Chunk(vs, ve),
                DataLoc::Chunk(s, e) => {
                    if self.over(e - s + ve - vs + 2) {
                        return;
                    }
                    self.data_buf.clear();
                    self.data_buf.extend_from_slice(&chunk[s..e]);
                    self.data_buf.push(b'\n');
                    self.data_buf.extend_from_slice(&chunk[vs..ve]);
                    self.data_buf.push(b'\n');
                    self.data_loc = DataLoc::Buf;
                }
                DataLoc::Buf => {
                    if self.over(self.data_buf.len() + ve - vs + 1) {
                        return;
                    }
                    self.data_buf.extend_from_slice(&chunk[vs..ve]);
                    self.data_buf.push(b'\n');
                }
            }
        } else {
            self.other_field(line, name, &line[value_start..], on_item);
        }
    }

    /// A complete line assembled from several chunks.
    fn process_owned_line<F>(&mut self, line: &[u8], on_item: &mut F)
    where
        F: for<'x> FnMut(SseItem<'x>),
    {
        if line.is_empty() {
            self.dispatch(None, on_item);
            return;
        }
        let (name, value_start) = split_field(line);
        if name == b"data" {
            // The chunk-local span (if any) belongs to an earlier chunk and was already copied.
            debug_assert!(!matches!(self.data_loc, DataLoc::Chunk(..)));
            if self.data_loc == DataLoc::None {
                self.data_buf.clear();
            }
            if self.over(self.data_buf.len() + line.len() - value_start + 1) {
                return;
            }
            self.data_buf.extend_from_slice(&line[value_start..]);
            self.data_buf.push(b'\n');
            self.data_loc = DataLoc::Buf;
        } else {
            self.other_field(line, name, &line[value_start..], on_item);
        }
    }

    fn other_field<F>(&mut self, line: &[u8], name: &[u8], value: &[u8], on_item: &mut F)
    where
        F: for<'x> FnMut(SseItem<'x>),
    {
        if line[0] == b':' {
            let mut c = &line[1..];
            if c.first() == Some(&b' ') {
                c = &c[1..];
            }
            on_item(SseItem::Comment(text(c)));
            return;
        }
        match name {
            b"event" => {
                self.event_type.clear();
                self.event_type.extend_from_slice(value);
            }
            b"id" if !value.contains(&0) => {
                self.event_id = Some(value.to_vec());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                // Saturate absurdly long digit strings instead of failing.
                let ms = std::str::from_utf8(value)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(u64::MAX);
                on_item(SseItem::Retry(ms));
            }
            _ => {} // unknown fields are ignored
        }
    }

    fn dispatch<F>(&mut self, chunk: Option<&[u8]>, on_item: &mut F)
    where
        F: for<'x> FnMut(SseItem<'x>),
    {
        if let Some(id) = self.event_id.as_deref() {
            self.last_event_id = text(id).into_owned();
        }
        let data: &[u8] = match self.data_loc {
            DataLoc::None => {
                self.event_type.clear();
                self.event_id = None;
                return;
            }
            DataLoc::Chunk(s, e) => match chunk {
                Some(c) => &c[s..e],
                None => &[],
            },
            DataLoc::Buf => &self.data_buf[..self.data_buf.len().saturating_sub(1)],
        };
        let event = if self.event_type.is_empty() {
            None
        } else {
            Some(text(&self.event_type))
        };
        let id = self.event_id.as_deref().map(text);
        on_item(SseItem::Event(SseEvent {
            event,
            data: text(data),
            id,
        }));
        self.data_loc = DataLoc::None;
        self.data_buf.clear();
        self.event_type.clear();
        self.event_id = None;
    }
}

/// Splits a non-empty line into the field name and the offset where its value starts.
fn split_field(line: &[u8]) -> (&[u8], usize) {
    match memchr::memchr(b':', line) {
        Some(i) => {
            let mut v = i + 1;
            if line.get(v) == Some(&b' ') {
                v += 1;
            }
            (&line[..i], v)
        }
        None => (line, line.len()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<String> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |it| out.push(format!("{it:?}")));
        }
        out
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        let out = parse_all(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(out.len(), 1);
        assert!(out[0].contains("\"a\\nb\""), "{out:?}");
    }

    #[test]
    fn bom_split_and_stripped_once() {
        let out = parse_all(&[b"\xEF", b"\xBB", b"\xBFdata: 1\n\n"]);
        assert_eq!(out.len(), 1);
        assert!(out[0].contains("\"1\""));
        // a partial BOM is ordinary input: the field name is then not `data`
        let out = parse_all(&[b"\xEF\xBBdata: 1\n\ndata: 2\n\n"]);
        assert_eq!(out.len(), 1);
        assert!(out[0].contains("\"2\""));
    }

    #[test]
    fn short_stream_shorter_than_bom() {
        let out = parse_all(&[b"d", b"a", b"ta:x\n\n"]);
        assert_eq!(out.len(), 1);
        assert!(out[0].contains("\"x\""));
    }

    #[test]
    fn an_empty_chunk_between_cr_and_lf_leaves_one_line_end() {
        // Found by the `sse` fuzz target (`xtask/fuzz`, minimized): an empty chunk cleared the
        // pending CR, so the LF after it read as a blank line and dispatched an event the
        // stream does not hold.
        let whole = parse_all(&[b"data\r\n"]);
        assert!(whole.is_empty(), "{whole:?}");
        assert_eq!(parse_all(&[b"data\r", b"", b"\n"]), whole);
        assert_eq!(
            parse_all(&[b"data: x\r", b"", b"\n", b"", b"\r", b"", b"\n"]),
            parse_all(&[b"data: x\r\n\r\n"])
        );
    }

    #[test]
    fn unterminated_event_is_dropped() {
        let mut p = SseParser::new();
        let mut n = 0;
        p.feed(b"data: a\n\ndata: b\n", |_| n += 1);
        assert_eq!(n, 1);
        assert!(!p.is_idle());
    }

    #[test]
    fn a_line_past_the_cap_stops_the_parser_without_buffering_it() {
        let mut p = SseParser::with_max_len(64);
        let mut events = Vec::new();
        p.feed(b"data: ok\n\ndata: ", |it| events.push(format!("{it:?}")));
        // A line that never ends, fed in pieces: the buffer never holds more than the cap.
        for _ in 0..1000 {
            p.feed(&[b'x'; 100], |it| events.push(format!("{it:?}")));
            assert!(p.line_buf.capacity() <= 128, "{}", p.line_buf.capacity());
        }
        assert!(p.overflowed());
        assert_eq!(events.len(), 1, "{events:?}");
        // Nothing after the overflow is handed out.
        p.feed(b"\n\ndata: late\n\n", |it| events.push(format!("{it:?}")));
        assert_eq!(events.len(), 1);
    }

    #[test]
    fn an_event_of_many_short_data_lines_past_the_cap_stops_the_parser() {
        let mut p = SseParser::with_max_len(64);
        let mut n = 0;
        for _ in 0..100 {
            p.feed(b"data: 0123456789\n", |_| n += 1);
        }
        assert!(p.overflowed());
        assert!(p.data_buf.capacity() <= 128);
        assert_eq!(n, 0);
        // One line inside one chunk longer than the cap overflows too.
        let mut p = SseParser::with_max_len(8);
        p.feed(b"data: 0123456789\n\n", |_| n += 1);
        assert!(p.overflowed());
        assert_eq!(n, 0);
    }

    #[test]
    fn lines_and_events_at_the_cap_are_fine() {
        let mut p = SseParser::with_max_len(16);
        let mut data = Vec::new();
        for chunk in [&b"data: 0123456789"[..], b"\n\ndata: ab\ndata: cd\n\n"] {
            p.feed(chunk, |it| {
                if let SseItem::Event(ev) = it {
                    data.push(ev.data.to_string());
                }
            });
        }
        assert!(!p.overflowed());
        assert_eq!(data, ["0123456789", "ab\ncd"]);
    }
}
