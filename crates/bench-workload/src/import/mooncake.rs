//! Mooncake request traces: `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`
//! one request per JSONL line. Each request becomes a one-turn session whose prompt is
//! synthesized from its prefix-block hash ids, so requests sharing ids share byte-identical
//! prefixes.

use std::path::Path;

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde_json::Value;

use super::{
    Ctx, ImportError, NoteKind, as_object, file_stem, for_each_json_line, open, u64_field,
};
use crate::format::{Message, Source, TraceSession, TraceTurn};
// One-token words shared with the synthetic workload (64 = 2^6: a 32-bit draw picks one
// without bias).
use crate::text::WORDS;

/// Largest accepted `input_length` (tokens): guards against absurd lines allocating gigabytes.
const MAX_INPUT_TOKENS: u64 = 1 << 24;

fn seed(domain: &[u8; 8], a: u64, b: u64) -> [u8; 32] {
    let mut s = [0u8; 32];
    s[..8].copy_from_slice(domain);
    s[8..16].copy_from_slice(&a.to_le_bytes());
    s[16..24].copy_from_slice(&b.to_le_bytes());
    s
}

fn push_words(seed: [u8; 32], tokens: u64, out: &mut String) {
    let mut rng = ChaCha8Rng::from_seed(seed);
    for _ in 0..tokens {
        out.push_str(WORDS[(rng.next_u32() & 63) as usize]);
    }
}

/// The deterministic text of Mooncake prefix block `hash_id`: `tokens` words, each one token
/// with a leading space in common BPE tokenizers, drawn by a ChaCha8 RNG seeded with the id.
///
/// A pure function: `block_text(id, k)` is a prefix of `block_text(id, n)` for `k <= n`, and
/// concatenated blocks tokenize to the sum of their sizes.
pub fn block_text(hash_id: u64, tokens: u32) -> String {
    let mut out = String::with_capacity(tokens as usize * 6);
    push_words(seed(b"mc-block", hash_id, 0), u64::from(tokens), &mut out);
    out
}

/// FNV-1a, to derive a per-request seed from its session id.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

struct Request {
    timestamp_ms: u64,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
}

fn parse(value: &Value) -> Result<Request, String> {
    let obj = as_object(value, "line")?;
    let timestamp_ms = u64_field(obj, "timestamp")?;
    let input_length = u64_field(obj, "input_length")?;
    if input_length > MAX_INPUT_TOKENS {
        return Err(format!(
            "\"input_length\": {input_length} is larger than the supported maximum ({MAX_INPUT_TOKENS})"
        ));
    }
    let output_length = u64_field(obj, "output_length")?;
    let ids = match obj.get("hash_ids") {
        None => return Err("\"hash_ids\": missing".to_string()),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(format!(
                "\"hash_ids\": expected an array of non-negative integers, found {}",
                super::describe(v)
            ));
        }
    };
    let mut hash_ids = Vec::with_capacity(ids.len());
    for (i, v) in ids.iter().enumerate() {
        hash_ids.push(v.as_u64().ok_or_else(|| {
            format!(
                "\"hash_ids\"[{i}]: expected a non-negative integer, found {}",
                super::describe(v)
            )
        })?);
    }
    Ok(Request {
        timestamp_ms,
        input_length,
        output_length,
        hash_ids,
    })
}

/// The prompt of a request: each hash id's block, the last one cut to what `input_length`
/// leaves; blocks beyond `input_length` are ignored, and tokens beyond the blocks are filled
/// with text seeded by `tail_seed` (unique to the request). Returns the text and which of the
/// two adjustments happened.
fn prompt(req: &Request, block: u32, tail_seed: u64) -> (String, bool, bool) {
    let mut text = String::with_capacity(req.input_length as usize * 6);
    let mut remaining = req.input_length;
    let mut used = 0;
    for &id in &req.hash_ids {
        if remaining == 0 {
            break;
        }
        let take = remaining.min(u64::from(block));
        push_words(seed(b"mc-block", id, 0), take, &mut text);
        remaining -= take;
        used += 1;
    }
    let extra_blocks = used < req.hash_ids.len();
    let filled = remaining > 0;
    if filled {
        push_words(seed(b"mc-tail\0", tail_seed, 0), remaining, &mut text);
    }
    (text, extra_blocks, filled)
}

pub(crate) fn import_file(ctx: &mut Ctx<'_>, path: &Path) -> Result<(), ImportError> {
    let block = ctx.opts().mooncake_block_tokens;
    let prefix = if ctx.multi_file() {
        format!("mooncake-{}-", file_stem(path))
    } else {
        "mooncake-".to_string()
    };
    let reader = open(path)?;
    for_each_json_line(ctx, path, reader, &mut |ctx, line, value| {
        let req = match parse(&value) {
            Ok(r) => r,
            Err(m) => return Ok(Err(m)),
        };
        let session_id = format!("{prefix}{line}");
        let (text, extra_blocks, filled) = prompt(&req, block, fnv1a(&session_id));
        if extra_blocks {
            ctx.note(NoteKind::MooncakeExtraBlocks, 1);
        }
        if filled {
            ctx.note(NoteKind::MooncakeFiller, 1);
        }
        let mut turn = TraceTurn::new(
            0,
            vec![Message {
                role: "user".to_string(),
                content: text,
                tool_call_id: None,
            }],
            String::new(),
        );
        turn.input_tokens = Some(req.input_length);
        turn.output_tokens = Some(req.output_length);
        turn.pre_gap_ms = Some(0.0);
        turn.timestamp_ms = Some(req.timestamp_ms as f64);
        let session = TraceSession {
            session_id,
            source: Some(Source {
                dataset: Some("mooncake".to_string()),
                ..Source::default()
            }),
            system_prompt: None,
            turns: vec![turn],
            tools: None,
            subagents: Vec::new(),
        };
        ctx.emit(path, Some(line), session)?;
        Ok(Ok(()))
    })
}
