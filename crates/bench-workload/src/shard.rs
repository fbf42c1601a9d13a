//! Sharding a plan over several processes (`--shard I/N`): a deterministic partition of the
//! plan's sessions, and the plan's digest that says two hosts planned the same thing.
//!
//! Every host plans the whole pool from the same flags and seed (planning is deterministic),
//! then keeps its shard. The partition is balanced by planned tokens: sessions are taken
//! heaviest first (ties by their place in the plan) and each goes to the shard with the fewest
//! tokens so far (ties to the lower index), so it depends only on the plan. A shard keeps its
//! sessions in the plan's order.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::plan::{Plan, PlannedMessage, PlannedSession};

/// Shard `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// 0-based, below `count` (Kubernetes' `JOB_COMPLETION_INDEX`).
    pub index: u32,
    /// How many shards play the plan.
    pub count: u32,
}

/// The most shards a plan is cut into.
pub const MAX_SHARDS: u32 = 10_000;

impl Shard {
    /// Shard `index` of `count`; an error names what is wrong.
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 {
            return Err("the shard count must be at least 1".into());
        }
        if count > MAX_SHARDS {
            return Err(format!("at most {MAX_SHARDS} shards (got {count})"));
        }
        if index >= count {
            return Err(format!(
                "shard index {index} is not below the shard count {count} (indices are 0-based: \
                 0 to {})",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// `I/N`, e.g. `0/4`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not I/N (e.g. 0/4: the first of 4 shards)"))?;
        let num = |x: &str, what: &str| {
            x.trim()
                .parse::<u32>()
                .map_err(|_| format!("{s:?}: {what} {x:?} is not a whole number"))
        };
        Shard::new(num(i, "the index")?, num(n, "the count")?)
    }
}

/// What a shard plays, for `run.json`.
pub use bench_rundir::ShardInfo;

/// A session's planned tokens: every turn's estimated prompt plus its pinned output.
pub fn planned_tokens(s: &PlannedSession) -> u64 {
    s.turns
        .iter()
        .map(|t| t.est_prompt_tokens + u64::from(t.max_output_tokens))
        .sum()
}

/// Which shard each of `plan`'s sessions belongs to (by position in `plan.sessions`).
pub fn assignment(plan: &Plan, count: u32) -> Vec<u32> {
    let count = count.max(1) as usize;
    let weights: Vec<u64> = plan.sessions.iter().map(planned_tokens).collect();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    // Heaviest first; equal weights keep the plan's order (a stable sort).
    order.sort_by(|&a, &b| weights[b].cmp(&weights[a]));
    // Least-loaded shard first, ties to the lower index: a heap of (load, index).
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
        (0..count).map(|i| std::cmp::Reverse((0, i))).collect();
    let mut out = vec![0u32; weights.len()];
    for s in order {
        if let Some(std::cmp::Reverse((load, i))) = heap.pop() {
            out[s] = i as u32;
            heap.push(std::cmp::Reverse((load + weights[s], i)));
        }
    }
    out
}

/// Keeps `shard`'s sessions of `plan` (in the plan's order) and says what they are.
pub fn keep_shard(plan: &mut Plan, shard: Shard) -> ShardInfo {
    let owner = assignment(plan, shard.count);
    let mut k = 0;
    plan.sessions.retain(|_| {
        let keep = owner[k] == shard.index;
        k += 1;
        keep
    });
    ShardInfo {
        index: shard.index,
        count: shard.count,
        sessions: plan.sessions.len() as u64,
        turns: plan.sessions.iter().map(|s| s.turns.len() as u64).sum(),
        planned_tokens: plan.sessions.iter().map(planned_tokens).sum(),
    }
}

/// A digest of everything a plan sends and schedules (sessions in order, their messages'
/// bytes and token counts, output caps, tool waits, recorded times, tools, the tokenizer and
/// seed): two hosts with the same digest play the same plan. 32 hex digits (xxh3-128).
pub fn plan_digest(plan: &Plan) -> String {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    // A shared message (a system prompt every session sends) is hashed once and then named by
    // its digest.
    let mut seen: HashMap<*const PlannedMessage, u128> = HashMap::new();
    let mut msg = |h: &mut xxhash_rust::xxh3::Xxh3, m: &std::sync::Arc<PlannedMessage>| {
        let d = *seen.entry(std::sync::Arc::as_ptr(m)).or_insert_with(|| {
            let mut mh = xxhash_rust::xxh3::Xxh3::new();
            mh.update(&[m.role as u8]);
            field(&mut mh, m.content_json.as_bytes());
            mh.update(&m.tokens.to_le_bytes());
            field(&mut mh, m.extra_json.as_deref().unwrap_or("").as_bytes());
            mh.digest128()
        });
        h.update(&d.to_le_bytes());
    };
    field(&mut h, plan.tokenizer.as_bytes());
    h.update(&plan.seed.to_le_bytes());
    h.update(&(plan.sessions.len() as u64).to_le_bytes());
    for s in &plan.sessions {
        field(&mut h, s.id.as_bytes());
        match &s.system {
            Some(m) => {
                h.update(&[1]);
                msg(&mut h, m);
            }
            None => h.update(&[0]),
        }
        field(&mut h, s.tools.as_deref().unwrap_or("").as_bytes());
        h.update(&(s.turns.len() as u64).to_le_bytes());
        for t in &s.turns {
            h.update(&t.index.to_le_bytes());
            h.update(&(t.input_delta.len() as u64).to_le_bytes());
            for m in &t.input_delta {
                msg(&mut h, m);
            }
            msg(&mut h, &t.assistant);
            h.update(&t.max_output_tokens.to_le_bytes());
            h.update(&t.pre_gap_ms.to_bits().to_le_bytes());
            h.update(&t.est_prompt_tokens.to_le_bytes());
            h.update(&t.timestamp_ms.map_or(u64::MAX, f64::to_bits).to_le_bytes());
        }
        // A linear session adds nothing here, so its digest is what it was before graphs.
        if let Some(g) = &s.graph {
            h.update(b"graph");
            for b in &g.branches {
                field(&mut h, b.agent.as_bytes());
                h.update(&b.fork.map_or(u32::MAX, |f| f).to_le_bytes());
                h.update(&[b.context as u8]);
                h.update(&b.len.to_le_bytes());
                if let Some(m) = &b.system {
                    msg(&mut h, m);
                }
            }
            for j in &g.joins {
                h.update(&(j.len() as u32).to_le_bytes());
                for d in j {
                    h.update(&d.to_le_bytes());
                }
            }
        }
    }
    format!("{:032x}", h.digest128())
}

/// Bytes with their length first, so that field boundaries cannot shift.
fn field(h: &mut xxhash_rust::xxh3::Xxh3, b: &[u8]) {
    h.update(&(b.len() as u64).to_le_bytes());
    h.update(b);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn shards_parse_and_refuse_what_cannot_be_one() {
        assert_eq!("1/4".parse::<Shard>(), Ok(Shard { index: 1, count: 4 }));
        assert_eq!(Shard { index: 3, count: 8 }.to_string(), "3/8");
        for bad in ["4/4", "1", "a/4", "1/0", "-1/4", "1/20000"] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!(
            "4/4"
                .parse::<Shard>()
                .unwrap_err()
                .contains("0-based: 0 to 3")
        );
    }
}
