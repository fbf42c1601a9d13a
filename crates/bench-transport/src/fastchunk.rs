//! A fast path for the common shape of a chat-completion chunk, and of a whole non-streamed
//! chat completion.
//!
//! Decoding each chunk with serde was about 30 % of the client's CPU in a streamed turn: most
//! of a chunk is fields the client never reads (`id`, `object`, `created`, `model`, ...), and
//! one chunk is one output token. A whole response cost serde ~8,000 instructions (a sixth of
//! a non-streamed turn's client work). [`parse`] walks the JSON once, validating it as strict
//! JSON, skipping what it does not need and borrowing the text it does. It gives up (`None`)
//! on anything less common, and the caller then decodes the chunk with serde, which also
//! reports what is malformed. So the fast path may only ever accept what serde accepts, and
//! must return exactly what serde would; the tests check both over captured streams, whole
//! responses and mutations of them.
//!
//! It tells reasoning output (`reasoning_content`, `reasoning`) from answer output (`content`,
//! `refusal`) exactly as serde's reading does (a delta or message with a tool call, also
//! answer output, is left to serde). A response's `message` reads as a chunk's `delta`, and a
//! `usage` object is read in full (its counts, `prompt_tokens_details.cached_tokens` and
//! `completion_tokens_details.reasoning_tokens`).
//!
//! It gives up on: escapes in a key, and `\u` surrogates in a text it returns (other escapes are
//! decoded); an `sglext` or `error` that is not `null`; `tool_calls` other than `null` or `[]`;
//! more than one choice; a duplicated field the client reads; nesting deeper than 64; a number
//! it would not read exactly like serde (e.g. a non-integer `index` or token count).

use bench_rundir::json_str::first_special;
use std::borrow::Cow;

use crate::openai::wire::{Choices, Chunk, CompletionDetails, PromptDetails, UsageWire, some};

/// Nesting allowed in skipped values (serde's own limit is 128).
const MAX_DEPTH: u32 = 64;

/// Parses `data` when it has the common shape; `None` leaves it to serde.
pub(crate) fn parse(data: &str) -> Option<Chunk<'_>> {
    parse_memo(data, None)
}

/// What one stream's chunks have in common: the bytes of a chunk up to its `choices` value,
/// when every member before that was skipped. Servers repeat `id`, `object`, `created` and
/// `model` unchanged in every chunk of a stream, in the same order: over half of each chunk.
///
/// The parser is a function of the bytes it has read, so a chunk starting with the same bytes
/// reaches the same state at their end (inside the outer object, at the `choices` value, no
/// field read yet): [`parse_with`] compares those bytes and goes on from there. Whatever the
/// next chunk holds, it is read exactly as without the memo.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    prefix: Vec<u8>,
}

/// The longest prefix a memo keeps (a chunk with more before `choices` is parsed in full).
const MEMO_MAX: usize = 512;

/// [`parse`], going on from where `memo` says the previous chunk's shared part ends, and
/// noting it for the next.
pub(crate) fn parse_with<'a>(data: &'a str, memo: &mut Memo) -> Option<Chunk<'a>> {
    parse_memo(data, Some(memo))
}

/// [`parse_with`], or with no memo (a one-off: a whole response) [`parse`].
fn parse_memo<'a>(data: &'a str, memo: Option<&mut Memo>) -> Option<Chunk<'a>> {
    let mut p = P {
        s: data,
        b: data.as_bytes(),
        i: 0,
    };
    let mut top = Top::default();
    if let Some(memo) = memo
        .as_deref()
        .filter(|m| !m.prefix.is_empty() && p.b.starts_with(&m.prefix))
    {
        // (The memo ends after the `:` and the whitespace that followed it there; this
        // chunk may have more.)
        p.i = memo.prefix.len();
        p.ws();
        top.member(&mut p, "choices")?;
        if p.next_member()? {
            p.members_rest(|p, key| top.member(p, key))?;
        }
    } else {
        p.ws();
        p.eat(b'{')?;
        p.members(|p, key| top.member(p, key))?;
        if let (Some(memo), Some(at)) = (memo, top.choices_at.filter(|at| *at <= MEMO_MAX)) {
            memo.prefix.clear();
            memo.prefix.extend_from_slice(&p.b[..at]);
        }
    }
    p.ws();
    (p.i == p.b.len()).then_some(Chunk {
        choices: top.choices,
        usage: top.usage,
        sglext: None,
        error: None,
    })
}

/// The outer object's members read so far.
#[derive(Default)]
struct Top<'a> {
    choices: Option<Choices<'a>>,
    usage: Option<UsageWire>,
    /// Which of `choices`, `usage`, `sglext`, `error` were read (a second one is left to
    /// serde, which rejects the duplicate).
    seen: u8,
    /// Where the `choices` value starts, when no other member was read before it.
    choices_at: Option<usize>,
}

impl<'a> Top<'a> {
    /// Reads the value of the member `key` (the cursor on its first byte).
    fn member(&mut self, p: &mut P<'a>, key: &str) -> Option<()> {
        let bit = match key {
            "choices" => 1,
            "usage" => 2,
            "sglext" => 4,
            "error" => 8,
            _ => return p.skip_value(0),
        };
        if self.seen & bit != 0 {
            return None; // serde: duplicate field
        }
        if bit == 1 {
            if self.seen == 0 {
                self.choices_at = Some(p.i);
            }
            self.seen |= bit;
            self.choices = p.choices()?;
            Some(())
        } else if bit == 2 {
            self.seen |= bit;
            self.usage = p.usage()?;
            Some(())
        } else {
            self.seen |= bit;
            p.null()
        }
    }
}

/// What a `delta` carries that the client reads.
#[derive(Default)]
struct Delta<'a> {
    content: Option<Cow<'a, str>>,
    reasoning_content: Option<Cow<'a, str>>,
    reasoning: Option<Cow<'a, str>>,
    refusal: Option<Cow<'a, str>>,
    /// Which of the four are there and not empty (the bits of [`P::delta`]), noted as they
    /// are read.
    nonempty: u8,
}

impl Delta<'_> {
    /// As serde's `Delta::has_reasoning`: `reasoning_content` or `reasoning`.
    fn has_reasoning(&self) -> bool {
        self.nonempty & (2 | 4) != 0
    }

    /// As serde's `Delta::has_answer`: `content` or `refusal` (a delta with `tool_calls`
    /// never gets here).
    fn has_answer(&self) -> bool {
        self.nonempty & (1 | 8) != 0
    }
}

struct P<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> P<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    fn lit(&mut self, word: &[u8]) -> Option<()> {
        self.b[self.i..]
            .starts_with(word)
            .then(|| self.i += word.len())
    }

    fn null(&mut self) -> Option<()> {
        self.lit(b"null")
    }

    /// The members of an object whose `{` was just read, up to and including its `}`: `f`
    /// reads each value (the cursor on its first byte) given its key.
    fn members(&mut self, f: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        self.members_rest(f)
    }

    /// The members from the next key (after a `{` and a first member, or after a `,`) up to
    /// and including the `}`.
    fn members_rest(&mut self, mut f: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        loop {
            self.ws();
            let key = self.plain_str()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            f(self, key)?;
            if !self.next_member()? {
                return Some(());
            }
        }
    }

    /// After a member's value: `true` past a `,` (another member follows), `false` past the
    /// object's `}`.
    fn next_member(&mut self) -> Option<bool> {
        self.ws();
        let more = match self.peek()? {
            b',' => true,
            b'}' => false,
            _ => return None,
        };
        self.i += 1;
        Some(more)
    }

    /// Moves to the next `"` or `\\` of the current string; `None` at the end of the input or
    /// on a control character before it (not allowed in a JSON string).
    fn seek_quote_or_escape(&mut self) -> Option<u8> {
        let rest = &self.b[self.i..];
        let n = first_special(rest)?;
        if rest[n] < 0x20 {
            return None;
        }
        self.i += n;
        Some(rest[n])
    }

    /// A string without escapes, borrowed (the cursor on its `"`).
    fn plain_str(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        if self.seek_quote_or_escape()? != b'"' {
            return None;
        }
        let s = &self.s[start..self.i];
        self.i += 1;
        Some(s)
    }

    /// `null` or a string: borrowed without escapes, decoded into an owned one with them
    /// (a `\u` surrogate is left to serde).
    fn opt_text(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.eat(b'"')?;
        let start = self.i;
        if self.seek_quote_or_escape()? == b'"' {
            let s = &self.s[start..self.i];
            self.i += 1;
            return Some(Some(Cow::Borrowed(s)));
        }
        let mut out = String::with_capacity(self.i - start + 16);
        let mut from = start;
        loop {
            out.push_str(&self.s[from..self.i]);
            if self.b[self.i] == b'"' {
                self.i += 1;
                return Some(Some(Cow::Owned(out)));
            }
            // A backslash.
            let c = match *self.b.get(self.i + 1)? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => {
                    let hex = std::str::from_utf8(self.b.get(self.i + 2..self.i + 6)?).ok()?;
                    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return None;
                    }
                    let c = char::from_u32(u32::from_str_radix(hex, 16).ok()?)?;
                    self.i += 4;
                    c
                }
                _ => return None,
            };
            out.push(c);
            self.i += 2;
            from = self.i;
            self.seek_quote_or_escape()?;
        }
    }

    /// An unsigned integer written as JSON writes one (no sign, fraction, exponent or leading
    /// zero) that fits `T`: what serde reads as `T` from a number (others are left to it).
    fn uint<T: std::str::FromStr>(&mut self) -> Option<T> {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        let digits = &self.s[start..self.i];
        if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        digits.parse().ok()
    }

    /// `null`, `[]` or a one-choice array, folded like [`Choices`]' serde visitor.
    fn choices(&mut self) -> Option<Option<Choices<'a>>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.eat(b'[')?;
        self.ws();
        let mut out = Choices::default();
        if self.eat(b']').is_some() {
            return Some(Some(out));
        }
        self.eat(b'{')?;
        let (mut index, mut delta, mut message, mut finish) = (0u32, None, None, None);
        let mut seen = 0u8;
        self.members(|p, key| {
            let bit = match key {
                "index" => 1,
                "delta" => 2,
                "finish_reason" => 4,
                "message" => 8,
                _ => return p.skip_value(1),
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            match bit {
                1 => index = p.uint()?,
                2 => delta = p.delta()?,
                8 => message = p.delta()?,
                _ => finish = p.opt_text()?,
            }
            Some(())
        })?;
        // A whole response's `message` reads as a chunk's `delta` (serde: `delta.or(message)`).
        let delta = delta.or(message);
        self.ws();
        self.eat(b']')?; // a second choice: left to serde
        if let Some(d) = &delta {
            out.has_reasoning = d.has_reasoning();
            out.has_answer = d.has_answer();
        }
        if index == 0 {
            if let Some(d) = delta {
                out.content = d.content;
                out.reasoning = d.reasoning_content.or(d.reasoning);
            }
            out.finish_reason = finish;
        }
        Some(Some(out))
    }

    /// `null` or a delta object.
    fn delta(&mut self) -> Option<Option<Delta<'a>>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.eat(b'{')?;
        let mut d = Delta::default();
        let mut seen = 0u8;
        self.members(|p, key| {
            let (bit, slot) = match key {
                "content" => (1, &mut d.content),
                "reasoning_content" => (2, &mut d.reasoning_content),
                "reasoning" => (4, &mut d.reasoning),
                "refusal" => (8, &mut d.refusal),
                // No tool call (`null` or `[]`, as vLLM writes in every message) adds nothing;
                // a call is left to serde.
                "tool_calls" if seen & 16 == 0 => {
                    seen |= 16;
                    return p.null().or_else(|| p.empty_array());
                }
                "tool_calls" => return None,
                _ => return p.skip_value(2),
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            *slot = p.opt_text()?;
            if some(slot) {
                d.nonempty |= bit;
            }
            Some(())
        })?;
        Some(Some(d))
    }

    /// `[]` (whitespace inside allowed).
    fn empty_array(&mut self) -> Option<()> {
        self.eat(b'[')?;
        self.ws();
        self.eat(b']')
    }

    /// `null` or an unsigned integer (see [`P::uint`]).
    fn opt_uint<T: std::str::FromStr>(&mut self) -> Option<Option<T>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.uint().map(Some)
    }

    /// `null` or a `usage` object, read like serde's [`UsageWire`].
    fn usage(&mut self) -> Option<Option<UsageWire>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.eat(b'{')?;
        let mut u = UsageWire::default();
        let mut seen = 0u8;
        self.members(|p, key| {
            let bit = match key {
                "prompt_tokens" => 1,
                "completion_tokens" => 2,
                "total_tokens" => 4,
                "prompt_tokens_details" => 8,
                "completion_tokens_details" => 16,
                _ => return p.skip_value(2),
            };
            if seen & bit != 0 {
                return None;
            }
            seen |= bit;
            match bit {
                1 => u.prompt_tokens = p.opt_uint()?,
                2 => u.completion_tokens = p.opt_uint()?,
                4 => u.total_tokens = p.opt_uint()?,
                8 => {
                    u.prompt_tokens_details = p
                        .details("cached_tokens")?
                        .map(|cached_tokens| PromptDetails { cached_tokens });
                }
                _ => {
                    u.completion_tokens_details = p
                        .details("reasoning_tokens")?
                        .map(|reasoning_tokens| CompletionDetails { reasoning_tokens });
                }
            }
            Some(())
        })?;
        Some(Some(u))
    }

    /// `null` or an object of which only the member `name` (`null` or an unsigned integer) is
    /// read.
    fn details(&mut self, name: &str) -> Option<Option<Option<u64>>> {
        if self.peek()? == b'n' {
            self.null()?;
            return Some(None);
        }
        self.eat(b'{')?;
        let (mut v, mut seen) = (None, false);
        self.members(|p, key| {
            if key != name {
                return p.skip_value(3);
            }
            if std::mem::replace(&mut seen, true) {
                return None;
            }
            v = p.opt_uint()?;
            Some(())
        })?;
        Some(Some(v))
    }

    /// Skips one value, validating it (the cursor on its first byte).
    fn skip_value(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.skip_str(),
            b'{' => {
                self.i += 1;
                self.members(|p, _| p.skip_value(depth + 1))
            }
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.ws();
                    self.skip_value(depth + 1)?;
                    self.ws();
                    match self.peek()? {
                        b',' => self.i += 1,
                        b']' => {
                            self.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b't' => self.lit(b"true"),
            b'f' => self.lit(b"false"),
            b'n' => self.null(),
            b'-' | b'0'..=b'9' => self.skip_number(),
            _ => None,
        }
    }

    /// A string, escapes included (validated, not decoded).
    fn skip_str(&mut self) -> Option<()> {
        self.eat(b'"')?;
        loop {
            match self.seek_quote_or_escape()? {
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                _ => {
                    self.i += 1;
                    match *self.b.get(self.i)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let hex = self.b.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            // A surrogate is left to serde, which knows its pairing rules.
                            if matches!(hex[0], b'd' | b'D') && !matches!(hex[1], b'0'..=b'7') {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
            }
        }
    }

    /// A number in JSON's grammar (at most 32 bytes: anything longer is left to serde).
    fn skip_number(&mut self) -> Option<()> {
        let start = self.i;
        let _ = self.eat(b'-');
        let digits = |p: &mut Self| {
            let from = p.i;
            while let Some(b'0'..=b'9') = p.peek() {
                p.i += 1;
            }
            p.i - from
        };
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.eat(b'.').is_some() && digits(self) == 0 {
            return None;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if digits(self) == 0 {
                return None;
            }
        }
        (self.i - start <= 32).then_some(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// What the client reads from a chunk, from either path.
    fn reading(c: &Chunk<'_>) -> String {
        let ch = c.choices.as_ref().map(|c| {
            (
                c.has_reasoning,
                c.has_answer,
                c.content.as_deref().map(str::to_owned),
                c.reasoning.as_deref().map(str::to_owned),
                c.finish_reason.as_deref().map(str::to_owned),
            )
        });
        format!(
            "{ch:?} usage={:?} sglext={} error={:?}",
            c.usage,
            c.sglext.is_some(),
            c.error
        )
    }

    /// After `first` of the same stream, `data` reads exactly as it does alone.
    fn same_after(first: &str, data: &str) {
        let mut memo = Memo::default();
        let _ = parse_with(first, &mut memo);
        let alone = parse(data).map(|c| reading(&c));
        let after = parse_with(data, &mut memo).map(|c| reading(&c));
        assert_eq!(after, alone, "after {first}: {data}");
    }

    /// The fast path accepts only what serde accepts, and reads it the same; returns whether
    /// it took the chunk.
    fn agrees(data: &str) -> bool {
        let slow: Result<Chunk<'_>, _> = serde_json::from_str(data);
        match parse(data) {
            Some(fast) => {
                let slow = slow.unwrap_or_else(|e| {
                    panic!("fast path accepted what serde rejects ({e}): {data}")
                });
                assert_eq!(reading(&fast), reading(&slow), "{data}");
                true
            }
            None => false,
        }
    }

    const COMMON: &[&str] = &[
        // The simulator's (vLLM's) shape.
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" enim"},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" x"},"logprobs":null,"finish_reason":"length","stop_reason":null}]}"#,
        // llama.cpp's order, an empty delta, an emoji.
        r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"🌟"}}],"created":1796013671,"id":"c","model":"smollm2-135m","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}"#,
        r#"{"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1,"id":"c","model":"m","object":"chat.completion.chunk"}"#,
        // Reasoning under both names, a refusal, null usage, an empty choices array.
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hmm","content":null}}],"usage":null}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":"so"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"","reasoning":"b"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"refusal":"no"}}]}"#,
        // Reasoning and answer in one delta, either one empty or null, on another index.
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"a","content":"b"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"","content":"b"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":"x","content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":null,"reasoning_content":null,"content":null,"refusal":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":"r","refusal":"no"}}]}"#,
        r#"{"choices":[{"index":2,"delta":{"reasoning_content":"r"}}]}"#,
        // Escapes in the text are decoded.
        r#"{"choices":[{"index":0,"delta":{"content":"a\nb\"c\\d\/e\tf\u00e9g\u4e2dh\b\f\r"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\n"},"finish_reason":"st\u006fp"}]}"#,
        r#"{"choices":[],"usage":null,"sglext":null,"error":null}"#,
        r#"{"choices":null}"#,
        r#"{}"#,
        // Another index: output but no text for choice 0.
        r#"{"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}]}"#,
        // Skipped values of every kind, whitespace everywhere.
        // A usage chunk (once per stream), with and without details.
        r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
        r#"{"id":"c","choices":[],"usage":{"prompt_tokens":385,"completion_tokens":64,"total_tokens":449,"prompt_tokens_details":{"cached_tokens":256,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":12,"audio_tokens":0,"accepted_prediction_tokens":0}}}"#,
        r#"{"usage":{"prompt_tokens":null,"completion_tokens":0,"prompt_tokens_details":null,"completion_tokens_details":{},"extra":[1,{"a":null}]},"choices":null}"#,
        r#"{"usage":{"prompt_tokens_details":{"audio_tokens":1},"completion_tokens_details":{"reasoning_tokens":null}}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551615}}"#,
        // Whole non-streamed responses: the simulator's, vLLM's (every optional field written),
        // llama.cpp's, OpenAI's.
        r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":" et ullamco ad dolor","role":"assistant"}}],"created":1796613785,"id":"chatcmpl-ed83869ceb358a76adb2220aa0ccb2b3","model":"sim","object":"chat.completion","usage":{"completion_tokens":23,"prompt_tokens":385,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":408}}"#,
        r#"{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":"think"},"logprobs":null,"finish_reason":"length","stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":10,"total_tokens":74,"completion_tokens":64,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}"#,
        r#"{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"The \"answer\"\n"}}],"created":1796013671,"model":"smollm2","system_fingerprint":"b0-unknown","object":"chat.completion","usage":{"completion_tokens":8,"prompt_tokens":31,"total_tokens":39,"prompt_tokens_details":{"cached_tokens":30}},"id":"chatcmpl-x","timings":{"prompt_n":1,"prompt_ms":12.5,"predicted_per_second":80.1}}"#,
        r#"{"id":"chatcmpl-o","object":"chat.completion","created":1,"model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't","tool_calls":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"service_tier":"default"}"#,
        // `delta` and `message` both: the delta is read.
        r#"{"choices":[{"index":0,"message":{"content":"m"},"delta":{"content":"d"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"d","tool_calls":[ ]}}]}"#,
        " { \"x\" : [ 1 , -2.5e+3 , 0.0 , true , false , null , { \"a\" : [ ] } , \"\\\"\\u00e9\\n\" ] ,\n\"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" : \"a\" } , \"logprobs\" : { \"content\" : [ { \"token\" : \"a\" , \"logprob\" : -0.1 } ] } } ] }\r\n",
    ];

    const FALLBACK: &[&str] = &[
        // A surrogate pair in the text, a usage chunk, tool calls, two choices, duplicate fields.
        r#"{"choices":[{"index":0,"delta":{"content":"a\ud83c\udf1fb"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"name":"f"}}]}}]}"#,
        r#"{"choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"message":{"tool_calls":[],"tool_calls":[]}}]}"#,
        r#"{"choices":[{"index":0,"message":{"content":"a"},"message":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#,
        r#"{"choices":[],"choices":[]}"#,
        r#"{"choices":[{"index":0,"index":0}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}"#,
        r#"{"error":{"message":"boom"}}"#,
        r#"{"sglext":{"cached_tokens_details":{"device":1,"host":0}}}"#,
        // Not quite JSON, or numbers read differently.
        r#"{"choices":[{"index":01}]}"#,
        r#"{"choices":[{"index":0.0}]}"#,
        r#"{"choices":[{"index":-0}]}"#,
        r#"{"choices":[{"index":4294967296}]}"#,
        // Token counts serde would not read as integers, duplicates, a second `usage`.
        r#"{"usage":{"prompt_tokens":1.0}}"#,
        r#"{"usage":{"prompt_tokens":-1}}"#,
        r#"{"usage":{"prompt_tokens":1e2}}"#,
        r#"{"usage":{"prompt_tokens":18446744073709551616}}"#,
        r#"{"usage":{"prompt_tokens":"3"}}"#,
        r#"{"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
        r#"{"usage":{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}}"#,
        r#"{"usage":{"completion_tokens_details":[]}}"#,
        r#"{"usage":null,"usage":null}"#,
        r#"{"usage":[]}"#,
        r#"{"choices":[]} x"#,
        r#"{"choices":[],}"#,
        r#"{"x":01}"#,
        r#"{"x":"\ud800"}"#,
        r#"["choices"]"#,
    ];

    #[test]
    fn common_chunks_take_the_fast_path_and_read_as_serde_does() {
        for data in COMMON {
            assert!(agrees(data), "not taken: {data}");
        }
    }

    #[test]
    fn reasoning_and_answer_are_told_apart() {
        // (chunk, has_reasoning, has_answer), read by the fast path; `agrees` checks serde.
        let cases = [
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"a"}}]}"#,
                true,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning":"a"}}]}"#,
                true,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#,
                false,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"refusal":"a"}}]}"#,
                false,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"a","content":"b"}}]}"#,
                true,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning_content":"","content":"b"}}]}"#,
                false,
                true,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"reasoning":"a","content":""}}]}"#,
                true,
                false,
            ),
            (
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
                false,
                false,
            ),
            (
                r#"{"choices":[{"index":3,"delta":{"reasoning_content":"a"}}]}"#,
                true,
                false,
            ),
        ];
        for (data, reasoning, answer) in cases {
            assert!(agrees(data), "not taken: {data}");
            let c = parse(data).unwrap().choices.unwrap();
            assert_eq!(
                (c.has_reasoning, c.has_answer),
                (reasoning, answer),
                "{data}"
            );
        }
        // A tool call is answer output; serde reads it (the fast path leaves it).
        let data = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#;
        assert!(parse(data).is_none());
        let c = serde_json::from_str::<Chunk<'_>>(data)
            .unwrap()
            .choices
            .unwrap();
        assert_eq!((c.has_reasoning, c.has_answer), (false, true));
    }

    #[test]
    fn uncommon_chunks_are_left_to_serde() {
        for data in FALLBACK {
            assert!(!agrees(data), "taken: {data}");
        }
    }

    #[test]
    fn a_stream_s_next_chunk_goes_on_after_the_shared_part_and_reads_the_same() {
        let vllm = COMMON[0];
        let mut memo = Memo::default();
        assert!(parse_with(vllm, &mut memo).is_some());
        // The memo holds the bytes up to the `choices` value.
        let at = vllm.find(r#""choices":"#).unwrap() + r#""choices":"#.len();
        assert_eq!(memo.prefix, vllm.as_bytes()[..at]);
        // The next chunk of the stream reads as alone, through the memo.
        let next = vllm.replace(" enim", " dolor");
        let c = parse_with(&next, &mut memo).unwrap();
        assert_eq!(c.choices.unwrap().content.as_deref(), Some(" dolor"));
        assert_eq!(memo.prefix, vllm.as_bytes()[..at], "kept");
        // What follows the shared part is still checked: a broken tail, a duplicate
        // `choices`, trailing bytes.
        for bad in [
            vllm.replace(r#"null}]}"#, r#"null}]"#),
            vllm.replace(r#"}]}"#, r#"}],"choices":[]}"#),
            format!("{vllm} x"),
            vllm.replace(r#"{"index":0"#, r#"{"index":01"#),
        ] {
            assert!(parse_with(&bad, &mut memo).is_none(), "{bad}");
            assert!(!agrees(&bad), "{bad}");
        }
        // Another stream (another id) is parsed in full, and becomes the memo.
        let other = vllm.replace("chatcmpl-1", "chatcmpl-22");
        assert!(parse_with(&other, &mut memo).is_some());
        assert_eq!(memo.prefix.len(), at + 1);
        // A chunk that read a field before `choices` leaves no memo to go on from.
        let mut memo = Memo::default();
        assert!(parse_with(r#"{"usage":null,"choices":[]}"#, &mut memo).is_some());
        assert!(memo.prefix.is_empty());
        // Every pair of chunks above, in both orders.
        for a in COMMON.iter().chain(FALLBACK) {
            for b in COMMON.iter().chain(FALLBACK) {
                same_after(a, b);
            }
        }
    }

    /// Every event of the captured streams in `fixtures/openai_stream`.
    fn captured_events() -> Vec<String> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/openai_stream");
        let mut files = vec![
            dir.join("llamacpp_smollm2_stream_include_usage.sse"),
            dir.join("sglang-0.5.23_protocol_rendered_chat_stream.SYNTHETIC.sse"),
        ];
        // Real reasoning streams (`reasoning_content`, and `reasoning` next to
        // `reasoning_details`).
        let chat = dir.join("../endpoint_streams/chat");
        for name in [
            "zai_glm-4.7_reasoning_content_stream.sse",
            "openrouter_claude-sonnet-4.5_reasoning_stream.sse",
        ] {
            files.push(chat.join(name));
        }
        for e in std::fs::read_dir(dir.join("openai-python-recordings")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "bin") {
                files.push(p);
            }
        }
        let mut out = Vec::new();
        for f in files {
            let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
            for line in text.lines() {
                if let Some(d) = line.strip_prefix("data:") {
                    let d = d.trim_start();
                    if d.starts_with('{') {
                        out.push(d.to_owned());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn captured_streams_read_the_same_and_mostly_take_the_fast_path() {
        let events = captured_events();
        assert!(events.len() > 50, "{}", events.len());
        let taken = events.iter().filter(|d| agrees(d)).count();
        assert!(taken * 2 > events.len(), "{taken} of {}", events.len());
        // In stream order, each after the one before it (the memo carried along).
        for pair in events.windows(2) {
            same_after(&pair[0], &pair[1]);
        }
    }

    /// Single-byte deletions, insertions and replacements of every chunk above: whatever the
    /// fast path accepts, serde accepts and reads the same.
    #[test]
    fn mutations_never_make_the_fast_path_disagree() {
        let mut corpus: Vec<String> = COMMON
            .iter()
            .chain(FALLBACK)
            .map(|s| (*s).to_owned())
            .collect();
        corpus.extend(captured_events().into_iter().take(40));
        let bytes: &[u8] = b"\"{}[],:\\ 0-1.eE+tnu\n";
        let mut checked = 0;
        for data in &corpus {
            let b = data.as_bytes();
            for i in 0..=b.len() {
                let mut variants: Vec<Vec<u8>> = Vec::new();
                if i < b.len() {
                    variants.push([&b[..i], &b[i + 1..]].concat());
                }
                for &c in bytes {
                    variants.push([&b[..i], &[c], &b[i..]].concat());
                    if i < b.len() {
                        variants.push([&b[..i], &[c], &b[i + 1..]].concat());
                    }
                }
                for v in variants {
                    if let Ok(s) = std::str::from_utf8(&v) {
                        agrees(s);
                        // As the next chunk of the stream the unmutated one began.
                        same_after(data, s);
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
    }
}
