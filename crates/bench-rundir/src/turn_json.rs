//! [`TurnRecord::write_json`] and [`SessionRecord::write_json`]: a record's line, byte for byte
//! what `serde_json` writes, with its keys written as literals (serde escapes every key byte by
//! byte; the turn record's line was ~8% of a short turn's user-space instructions). The fields
//! are destructured without `..`, so a field added to a record does not compile until it is
//! written here too; the tests compare the bytes with `serde_json::to_vec` on records with
//! every field set and with none.

use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter};

use crate::{CountSource, SessionRecord, SessionStatus, TurnRecord, TurnStatus};

/// Appends `value` as `serde_json` would (a string, an enum, a nested value). Writing to a
/// `Vec` fails only for a value `serde_json` cannot write (a map with non-string keys), which
/// no record holds today: a field that could is an error, not a silently broken line.
fn serde<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> serde_json::Result<()> {
    serde_json::to_writer(&mut *out, value)
}

/// A string as `serde_json` writes it ([`crate::json_str::write_str`]).
#[inline(never)]
fn strv(out: &mut Vec<u8>, s: &str) {
    crate::json_str::write_str(out, s);
}

#[inline(never)]
fn opt_str(out: &mut Vec<u8>, v: &Option<String>) {
    match v {
        Some(s) => strv(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

/// The names `serde` gives the records' enums (`rename_all`), written as literals.
fn turn_status(s: TurnStatus) -> &'static str {
    match s {
        TurnStatus::Ok => "\"ok\"",
        TurnStatus::Error => "\"error\"",
        TurnStatus::Timeout => "\"timeout\"",
    }
}

fn count_source(s: Option<CountSource>) -> &'static str {
    match s {
        Some(CountSource::Server) => "\"server\"",
        Some(CountSource::Client) => "\"client\"",
        None => "null",
    }
}

fn session_status(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Completed => "\"completed\"",
        SessionStatus::Truncated => "\"truncated\"",
        SessionStatus::ContextGuard => "\"context_guard\"",
        SessionStatus::Timeout => "\"timeout\"",
        SessionStatus::Failed => "\"failed\"",
    }
}

// The value writers are not inlined: a line's ~40 fields inlined each its own copy of the
// number formatting and the buffer's growth check (~15 KB of machine code run once per turn,
// a steady share of the turn's instruction-cache misses). Measured with callgrind's cache
// simulation over a raw load phase: L1i misses per turn 2,153 → 2,043 (docs/performance.md,
// sixth round). A key is a literal: inlined, its copy is a few moves of a known length.
#[inline(always)]
fn key(out: &mut Vec<u8>, k: &str) {
    out.extend_from_slice(k.as_bytes());
}

#[inline(never)]
fn u64v(out: &mut Vec<u8>, v: u64) {
    let _ = CompactFormatter.write_u64(out, v);
}

#[inline(never)]
fn u32v(out: &mut Vec<u8>, v: u32) {
    let _ = CompactFormatter.write_u32(out, v);
}

/// `serde_json`'s `f64`: `null` when not finite.
#[inline(never)]
fn f64v(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        let _ = CompactFormatter.write_f64(out, v);
    } else {
        out.extend_from_slice(b"null");
    }
}

#[inline(never)]
fn opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => u64v(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

#[inline(never)]
fn opt_f64(out: &mut Vec<u8>, v: Option<f64>) {
    match v {
        Some(v) => f64v(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn opt_serde<T: Serialize>(out: &mut Vec<u8>, v: &Option<T>) -> serde_json::Result<()> {
    match v {
        Some(v) => serde(out, v),
        None => {
            out.extend_from_slice(b"null");
            Ok(())
        }
    }
}

#[inline(always)]
fn boolv(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

impl TurnRecord {
    /// Appends this record as one JSON object (no newline), exactly the bytes
    /// `serde_json::to_writer` writes for it, or fails where `serde_json` would (`out` then
    /// holds part of a line: the caller drops it).
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let TurnRecord {
            session_id,
            replay,
            turn_index,
            status,
            error_kind,
            error,
            ttft_ms,
            e2e_ms,
            tpot_ms,
            chunk_gaps_ms,
            input_tokens,
            input_tokens_source,
            output_tokens,
            output_tokens_source,
            cached_tokens,
            cached_device_tokens,
            cached_host_tokens,
            max_output_tokens,
            recorded_output_tokens,
            active_at_dispatch,
            due_s,
            sent_s,
            first_token_s,
            end_s,
            sent_utc,
            end_utc,
            worker,
            redials,
            ttfa_ms,
            reasoning_chunks,
            answer_chunks,
            reasoning_tokens,
            connect_ms,
            tls_ms,
            est_input_tokens,
            prefix_shared_tokens,
            warmup,
            superseded,
            attempts,
            failed_attempts,
            node,
        } = self;
        key(out, "{\"session_id\":");
        strv(out, session_id);
        key(out, ",\"replay\":");
        u32v(out, *replay);
        key(out, ",\"turn_index\":");
        u32v(out, *turn_index);
        key(out, ",\"status\":");
        key(out, turn_status(*status));
        key(out, ",\"error_kind\":");
        opt_serde(out, error_kind)?;
        key(out, ",\"error\":");
        opt_str(out, error);
        key(out, ",\"ttft_ms\":");
        opt_f64(out, *ttft_ms);
        key(out, ",\"e2e_ms\":");
        opt_f64(out, *e2e_ms);
        key(out, ",\"tpot_ms\":");
        opt_f64(out, *tpot_ms);
        key(out, ",\"chunk_gaps_ms\":[");
        for (i, g) in chunk_gaps_ms.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            f64v(out, *g);
        }
        key(out, "],\"input_tokens\":");
        opt_u64(out, *input_tokens);
        key(out, ",\"input_tokens_source\":");
        key(out, count_source(*input_tokens_source));
        key(out, ",\"output_tokens\":");
        opt_u64(out, *output_tokens);
        key(out, ",\"output_tokens_source\":");
        key(out, count_source(*output_tokens_source));
        key(out, ",\"cached_tokens\":");
        opt_u64(out, *cached_tokens);
        key(out, ",\"cached_device_tokens\":");
        opt_u64(out, *cached_device_tokens);
        key(out, ",\"cached_host_tokens\":");
        opt_u64(out, *cached_host_tokens);
        key(out, ",\"max_output_tokens\":");
        u32v(out, *max_output_tokens);
        key(out, ",\"recorded_output_tokens\":");
        opt_u64(out, *recorded_output_tokens);
        key(out, ",\"active_at_dispatch\":");
        u32v(out, *active_at_dispatch);
        key(out, ",\"due_s\":");
        f64v(out, *due_s);
        key(out, ",\"sent_s\":");
        f64v(out, *sent_s);
        key(out, ",\"first_token_s\":");
        opt_f64(out, *first_token_s);
        key(out, ",\"end_s\":");
        f64v(out, *end_s);
        key(out, ",\"sent_utc\":");
        strv(out, sent_utc);
        key(out, ",\"end_utc\":");
        strv(out, end_utc);
        key(out, ",\"worker\":");
        opt_str(out, worker);
        key(out, ",\"redials\":");
        u32v(out, *redials);
        // Written only when known (`skip_serializing_if`).
        if let Some(v) = ttfa_ms {
            key(out, ",\"ttfa_ms\":");
            f64v(out, *v);
        }
        if let Some(v) = reasoning_chunks {
            key(out, ",\"reasoning_chunks\":");
            u32v(out, *v);
        }
        if let Some(v) = answer_chunks {
            key(out, ",\"answer_chunks\":");
            u32v(out, *v);
        }
        if let Some(v) = reasoning_tokens {
            key(out, ",\"reasoning_tokens\":");
            u64v(out, *v);
        }
        if let Some(v) = connect_ms {
            key(out, ",\"connect_ms\":");
            f64v(out, *v);
        }
        if let Some(v) = tls_ms {
            key(out, ",\"tls_ms\":");
            f64v(out, *v);
        }
        if let Some(v) = est_input_tokens {
            key(out, ",\"est_input_tokens\":");
            u64v(out, *v);
        }
        if let Some(v) = prefix_shared_tokens {
            key(out, ",\"prefix_shared_tokens\":");
            u64v(out, *v);
        }
        key(out, ",\"warmup\":");
        boolv(out, *warmup);
        if *superseded {
            key(out, ",\"superseded\":true");
        }
        if *attempts != 1 {
            key(out, ",\"attempts\":");
            u32v(out, *attempts);
        }
        if !failed_attempts.is_empty() {
            key(out, ",\"failed_attempts\":");
            serde(out, failed_attempts)?;
        }
        if let Some(n) = node {
            key(out, ",\"node\":");
            serde(out, n)?;
        }
        out.push(b'}');
        Ok(())
    }
}

impl SessionRecord {
    /// Appends this record as one JSON object (no newline), exactly the bytes
    /// `serde_json::to_writer` writes for it, or fails where `serde_json` would (`out` then
    /// holds part of a line: the caller drops it).
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        let SessionRecord {
            session_id,
            replay,
            status,
            turns_played,
            turns_planned,
            output_tokens,
            busy_s,
            marker,
            warmup,
            start_s,
            end_s,
            superseded,
        } = self;
        key(out, "{\"session_id\":");
        strv(out, session_id);
        key(out, ",\"replay\":");
        u32v(out, *replay);
        key(out, ",\"status\":");
        key(out, session_status(*status));
        key(out, ",\"turns_played\":");
        u32v(out, *turns_played);
        key(out, ",\"turns_planned\":");
        u32v(out, *turns_planned);
        key(out, ",\"output_tokens\":");
        u64v(out, *output_tokens);
        key(out, ",\"busy_s\":");
        f64v(out, *busy_s);
        key(out, ",\"marker\":");
        opt_str(out, marker);
        key(out, ",\"warmup\":");
        boolv(out, *warmup);
        key(out, ",\"start_s\":");
        f64v(out, *start_s);
        key(out, ",\"end_s\":");
        f64v(out, *end_s);
        if *superseded {
            key(out, ",\"superseded\":true");
        }
        out.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::{CountSource, ErrorKind, FailedAttempt, NodeInfo, SessionStatus, TurnStatus};

    use super::*;

    /// Every field set, the strings needing escapes, the floats awkward.
    fn full() -> TurnRecord {
        TurnRecord {
            session_id: "s-\"1\"\\\n\u{1}é🦀".into(),
            replay: u32::MAX,
            turn_index: 7,
            status: TurnStatus::Error,
            error_kind: Some(ErrorKind::Status),
            error: Some("http_status: HTTP 500: \"boom\"\t\r".into()),
            ttft_ms: Some(0.1 + 0.2),
            e2e_ms: Some(1e300),
            tpot_ms: Some(f64::NAN),
            chunk_gaps_ms: vec![0.0, -0.0, 1.5e-7, 123_456_789.125, f64::INFINITY, 3.0],
            input_tokens: Some(u64::MAX),
            input_tokens_source: Some(CountSource::Server),
            output_tokens: Some(0),
            output_tokens_source: Some(CountSource::Client),
            cached_tokens: Some(5),
            cached_device_tokens: Some(6),
            cached_host_tokens: Some(7),
            max_output_tokens: 64,
            recorded_output_tokens: Some(63),
            active_at_dispatch: 1000,
            due_s: 12.000_000_1,
            sent_s: 12.5,
            first_token_s: Some(12.75),
            end_s: 13.0,
            sent_utc: "2026-12-06T05:30:35.1234Z".into(),
            end_utc: "2026-12-06T05:30:36Z".into(),
            worker: Some("gpu-0".into()),
            redials: 2,
            ttfa_ms: Some(40.25),
            reasoning_chunks: Some(3),
            answer_chunks: Some(9),
            reasoning_tokens: Some(30),
            connect_ms: Some(0.5),
            tls_ms: Some(f64::NEG_INFINITY),
            est_input_tokens: Some(99),
            prefix_shared_tokens: Some(98),
            warmup: true,
            superseded: true,
            attempts: 3,
            failed_attempts: vec![FailedAttempt {
                kind: ErrorKind::Io,
                status: Some(503),
                error: "reset \u{7f}".into(),
                end_s: 1.0,
                wait_ms: f64::NAN,
            }],
            node: Some(NodeInfo {
                agent: "sub-\"a\"".into(),
                depth: 1,
                after: vec![1, 4],
                released_s: 2.5,
                released_by: Some(4),
                in_flight: 2,
            }),
        }
    }

    /// Every optional field absent, every skipped one at its skipped value.
    fn bare() -> TurnRecord {
        TurnRecord {
            ttft_ms: None,
            e2e_ms: None,
            tpot_ms: None,
            chunk_gaps_ms: Vec::new(),
            input_tokens: None,
            output_tokens: None,
            first_token_s: None,
            sent_utc: String::new(),
            end_utc: String::new(),
            ..TurnRecord::example("", 0)
        }
    }

    fn same_as_serde(r: &TurnRecord) {
        let mut ours = Vec::new();
        r.write_json(&mut ours).unwrap();
        let theirs = serde_json::to_vec(r).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            String::from_utf8(theirs).unwrap()
        );
    }

    #[test]
    fn the_line_is_serdes_byte_for_byte() {
        same_as_serde(&full());
        same_as_serde(&bare());
        same_as_serde(&TurnRecord::example("s-1", 3));
        // Each optional or skipped field alone, in turn, on the bare record.
        let f = full();
        let b = bare();
        let variants = [
            TurnRecord {
                ttfa_ms: f.ttfa_ms,
                ..b.clone()
            },
            TurnRecord {
                reasoning_chunks: f.reasoning_chunks,
                ..b.clone()
            },
            TurnRecord {
                answer_chunks: f.answer_chunks,
                ..b.clone()
            },
            TurnRecord {
                reasoning_tokens: f.reasoning_tokens,
                ..b.clone()
            },
            TurnRecord {
                connect_ms: f.connect_ms,
                ..b.clone()
            },
            TurnRecord {
                tls_ms: Some(1.0),
                ..b.clone()
            },
            TurnRecord {
                est_input_tokens: f.est_input_tokens,
                ..b.clone()
            },
            TurnRecord {
                prefix_shared_tokens: f.prefix_shared_tokens,
                ..b.clone()
            },
            TurnRecord {
                superseded: true,
                ..b.clone()
            },
            TurnRecord {
                attempts: 0,
                ..b.clone()
            },
            TurnRecord {
                attempts: 2,
                ..b.clone()
            },
            TurnRecord {
                failed_attempts: f.failed_attempts.clone(),
                ..b.clone()
            },
            TurnRecord {
                node: f.node.clone(),
                ..b.clone()
            },
            TurnRecord {
                chunk_gaps_ms: vec![1.0],
                ..b.clone()
            },
        ];
        for v in &variants {
            same_as_serde(v);
        }
    }

    #[test]
    fn a_session_line_is_serdes_byte_for_byte() {
        let full = SessionRecord {
            session_id: "s-\"1\"\\\n\u{1}é".into(),
            replay: 3,
            status: SessionStatus::ContextGuard,
            turns_played: 2,
            turns_planned: u32::MAX,
            output_tokens: u64::MAX,
            busy_s: 0.1 + 0.2,
            marker: Some("bench-run-\"m\"".into()),
            warmup: true,
            start_s: f64::NAN,
            end_s: 1e-300,
            superseded: true,
        };
        let bare = SessionRecord {
            session_id: String::new(),
            marker: None,
            warmup: false,
            superseded: false,
            status: SessionStatus::Completed,
            ..full.clone()
        };
        for r in [&full, &bare] {
            let mut ours = Vec::new();
            r.write_json(&mut ours).unwrap();
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                String::from_utf8(serde_json::to_vec(r).unwrap()).unwrap()
            );
        }
    }

    #[test]
    fn the_enums_are_written_with_serdes_names() {
        for s in [TurnStatus::Ok, TurnStatus::Error, TurnStatus::Timeout] {
            assert_eq!(turn_status(s), serde_json::to_string(&s).unwrap());
        }
        for c in [None, Some(CountSource::Server), Some(CountSource::Client)] {
            assert_eq!(count_source(c), serde_json::to_string(&c).unwrap());
        }
        for s in [
            SessionStatus::Completed,
            SessionStatus::Truncated,
            SessionStatus::ContextGuard,
            SessionStatus::Timeout,
            SessionStatus::Failed,
        ] {
            assert_eq!(session_status(s), serde_json::to_string(&s).unwrap());
        }
    }

    #[test]
    fn it_reads_back_as_the_same_record() {
        let r = TurnRecord {
            tpot_ms: Some(1.0),
            e2e_ms: Some(2.0),
            tls_ms: Some(3.0),
            chunk_gaps_ms: vec![0.5, 0.25],
            failed_attempts: vec![FailedAttempt {
                wait_ms: 10.0,
                ..full().failed_attempts[0].clone()
            }],
            ..full()
        };
        let mut line = Vec::new();
        r.write_json(&mut line).unwrap();
        let back: TurnRecord = serde_json::from_slice(&line).unwrap();
        assert_eq!(back, r);
    }
}
