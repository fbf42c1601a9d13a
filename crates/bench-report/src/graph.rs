//! Agent graphs: where the time of a session play whose turns form a graph (a main agent that
//! forks subagents and joins them) went, computed from the records' [`NodeInfo`].
//!
//! One *play* is every measured (non-warmup, non-superseded) record of one `session_id` and
//! `replay` that carries a `node`; linear sessions (`node` absent) are not graph plays.
//!
//! # The critical path
//!
//! [`plays`] walks each play back from its node with the latest `end_s`, one node at a time,
//! to a node released by nothing (the play's first node), and partitions the time along that
//! walk into components that never overlap:
//!
//! - `tool_wait_s`: `due_s − released_s`, the replayed tool wait (or think time);
//! - `dispatch_lag_s`: `sent_s − due_s`, the client's lateness;
//! - `ttft_uncached_s` / `ttft_cached_s`: `first_token_s − sent_s`, split in proportion
//!   `cached_tokens / input_tokens` when both are known (else all uncached). A node that never
//!   produced a token (failed) counts its whole request, `end_s − sent_s`, as uncached TTFT;
//! - `decode_s`: `end_s − first_token_s`;
//! - `join_wait_s`: for a join (a node with more than one entry in `after`) released by another
//!   conversation's node (`released_by ≠ after[0]`), `released_s − end_s(after[0])`: how long
//!   the agent, done with its own predecessor, stayed blocked on its slowest sibling.
//!
//! **The breakdown follows the agent's own line back from the last node.** At a join whose
//! binding dependency was a sibling, the walk does not go through that sibling: the time the
//! agent spent blocked on others is join wait, and the walk continues along `after[0]`, the
//! agent's own predecessor. Elsewhere it follows `released_by`, the dependency whose end released
//! the node (a subagent's first node leads back to the node it forked from). Each second on the
//! path thus lands in exactly one component, and `path_s` (their sum) is the time from the play's
//! start to the last node's end when the records are consistent. The times come from the
//! records' timestamps (`*_s`), not from `ttft_ms`/`e2e_ms`, so the components add up to wall
//! time; a negative or non-finite difference counts as 0.
//!
//! `critical_path_share` is `path_s ÷` the play's e2e: its session record's `end_s − start_s`,
//! or, without one, its last node's end minus its first node's due time.
//!
//! [`breakdown`] aggregates the plays into a [`GraphBreakdown`] (percentiles by
//! [`crate::percentile`], the crate's one method); [`timeline`] and [`pick_timeline_play`] give
//! the per-node bars of one play for a chart.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use bench_rundir::record::NodeInfo;
use bench_rundir::{SessionRecord, TurnRecord, TurnStatus};
use serde::{Deserialize, Serialize};

use crate::console::{num, pct};
use crate::stats::{mean, percentile, sorted_finite};

/// The critical path of one play, partitioned into components (seconds; see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CriticalPath {
    /// Nodes the walk visited.
    pub path_nodes: u32,
    /// Σ of the components below, s.
    pub path_s: f64,
    /// Σ `sent_s − due_s` along the path, s.
    pub dispatch_lag_s: f64,
    /// The TTFT along the path for the prompt's uncached part, s.
    pub ttft_uncached_s: f64,
    /// The TTFT along the path for the prompt's cached part (`cached_tokens / input_tokens`), s.
    pub ttft_cached_s: f64,
    /// Σ `end_s − first_token_s` along the path, s.
    pub decode_s: f64,
    /// Σ `due_s − released_s` along the path, s.
    pub tool_wait_s: f64,
    /// Time joins on the path spent blocked on a sibling after their own predecessor ended, s.
    pub join_wait_s: f64,
    /// `path_s ÷ e2e_s` of the play (`null` when its e2e is not positive).
    pub critical_path_share: Option<f64>,
}

/// One graph session play.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlayBreakdown {
    /// Session id.
    pub session_id: String,
    /// Which play of the session.
    pub replay: u32,
    /// Its measured nodes (records with a `node`).
    pub nodes: u32,
    /// Its e2e: session record `end_s − start_s`, else last node end − first node due, s.
    pub e2e_s: f64,
    /// The most requests of the session in flight at once (max `NodeInfo::in_flight`).
    pub max_in_flight: u32,
    /// Its critical path.
    pub path: CriticalPath,
}

/// One component of the critical path over every play.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Component {
    /// Σ over plays, s.
    pub total_s: f64,
    /// Mean over plays (with a positive e2e) of the component's share of the play's e2e.
    pub share: Option<f64>,
}

/// The critical-path components over every play.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Components {
    /// `sent_s − due_s`.
    pub dispatch_lag: Component,
    /// TTFT for the prompt's uncached part.
    pub ttft_uncached: Component,
    /// TTFT for the prompt's cached part.
    pub ttft_cached: Component,
    /// `end_s − first_token_s`.
    pub decode: Component,
    /// `due_s − released_s`.
    pub tool_wait: Component,
    /// Joins blocked on a sibling.
    pub join_wait: Component,
}

/// Median, 90th percentile and mean of a share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShareDist {
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// Arithmetic mean.
    pub mean: Option<f64>,
}

/// Median and 90th percentile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct P50P90 {
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
}

/// Requests of a session in flight at once, over plays.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InFlightDist {
    /// Median of the plays' maxima.
    pub p50: Option<f64>,
    /// Largest of the plays' maxima.
    pub max: u32,
}

/// TTFT of the ok nodes at one nesting depth, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DepthTtft {
    /// `NodeInfo::depth`: 0 for main, 1 for a subagent of main, ….
    pub depth: u32,
    /// Ok nodes with a TTFT at this depth.
    pub n: u64,
    /// Median.
    pub p50_ms: Option<f64>,
    /// 90th percentile.
    pub p90_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
}

/// The agent-graph breakdown of a run: critical-path components over its graph plays.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphBreakdown {
    /// Graph plays counted.
    pub sessions: u64,
    /// The critical path's components: totals and mean shares of e2e.
    pub components: Components,
    /// `path_s ÷ e2e_s` over plays.
    pub critical_path_share: ShareDist,
    /// Play e2e, s.
    pub e2e_s: P50P90,
    /// Each play's most requests in flight at once.
    pub max_in_flight: InFlightDist,
    /// TTFT of ok nodes by nesting depth, ascending.
    pub ttft_by_depth: Vec<DepthTtft>,
}

/// How a node of a [`timeline`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BarStatus {
    /// A complete response.
    Ok,
    /// An error, a timeout, or never sent (`dependency_failed`).
    Failed,
}

/// One node's bar in a play's timeline chart (times in s from the run's start).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineBar {
    /// The node's number in its session.
    pub turn_index: u32,
    /// Its conversation: `main` or the subagent's id.
    pub agent: String,
    /// Nesting depth.
    pub depth: u32,
    /// When it was due.
    pub due_s: f64,
    /// When it was sent.
    pub sent_s: f64,
    /// When its first output chunk arrived.
    pub first_token_s: Option<f64>,
    /// When it ended.
    pub end_s: f64,
    /// How it ended.
    pub status: BarStatus,
}

type Node<'a> = (&'a TurnRecord, &'a NodeInfo);

/// Measured graph nodes by play, in a stable order.
fn graph_plays(turns: &[TurnRecord]) -> BTreeMap<(&str, u32), Vec<Node<'_>>> {
    let mut plays: BTreeMap<(&str, u32), Vec<Node<'_>>> = BTreeMap::new();
    for r in turns.iter().filter(|r| !r.warmup && !r.superseded) {
        if let Some(n) = &r.node {
            plays
                .entry((r.session_id.as_str(), r.replay))
                .or_default()
                .push((r, n));
        }
    }
    plays
}

/// `x` when finite and positive, else 0.
fn nonneg(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

/// Adds one node's own time (tool wait, dispatch lag, TTFT split, decode) to `path`.
fn add_node(path: &mut CriticalPath, r: &TurnRecord, n: &NodeInfo) {
    path.tool_wait_s += nonneg(r.due_s - n.released_s);
    path.dispatch_lag_s += nonneg(r.sent_s - r.due_s);
    let request = nonneg(r.end_s - r.sent_s);
    let ttft = match (r.first_token_s, r.ttft_ms) {
        (Some(first), _) => nonneg(first - r.sent_s),
        (None, Some(ms)) => nonneg(ms / 1000.0),
        // No token ever came: the whole request waited for one.
        (None, None) => request,
    }
    .min(request);
    let cached_frac = match (r.cached_tokens, r.input_tokens) {
        (Some(c), Some(i)) if i > 0 => (c as f64 / i as f64).min(1.0),
        _ => 0.0,
    };
    let cached = ttft * cached_frac;
    path.ttft_cached_s += cached;
    path.ttft_uncached_s += ttft - cached;
    path.decode_s += request - ttft;
}

/// The critical path of one play's nodes (see the module docs); `e2e_s` gives the share.
fn critical_path(nodes: &[Node<'_>], e2e_s: f64) -> CriticalPath {
    let by_index: HashMap<u32, Node<'_>> =
        nodes.iter().map(|&(r, n)| (r.turn_index, (r, n))).collect();
    // The latest end; ties go to the lowest turn index, so the choice is stable.
    let last = nodes
        .iter()
        .filter(|(r, _)| r.end_s.is_finite())
        .copied()
        .reduce(|best, cand| {
            let later = cand.0.end_s > best.0.end_s
                || (cand.0.end_s == best.0.end_s && cand.0.turn_index < best.0.turn_index);
            if later { cand } else { best }
        });
    let mut path = CriticalPath::default();
    let mut seen = HashSet::new();
    let mut cur = last;
    while let Some((r, n)) = cur {
        // A corrupt record could make a cycle: never visit a node twice.
        if !seen.insert(r.turn_index) {
            break;
        }
        path.path_nodes += 1;
        add_node(&mut path, r, n);
        let own = n.after.first().copied();
        let next = match (n.released_by, own) {
            // A join released by a sibling: blocked on others since its own predecessor ended;
            // follow the agent's own line.
            (Some(by), Some(own)) if n.after.len() > 1 && by != own => match by_index.get(&own) {
                Some((pred, _)) => {
                    path.join_wait_s += nonneg(n.released_s - pred.end_s);
                    Some(own)
                }
                // Its predecessor is not in the records: follow what released it instead.
                None => Some(by),
            },
            (by, _) => by,
        };
        cur = next.and_then(|i| by_index.get(&i).copied());
    }
    path.path_s = path.dispatch_lag_s
        + path.ttft_uncached_s
        + path.ttft_cached_s
        + path.decode_s
        + path.tool_wait_s
        + path.join_wait_s;
    path.critical_path_share = (e2e_s > 0.0).then(|| path.path_s / e2e_s);
    path
}

/// Every measured graph play with its critical path, ordered by session id then replay.
pub fn plays(turns: &[TurnRecord], sessions: &[SessionRecord]) -> Vec<PlayBreakdown> {
    let records: HashMap<(&str, u32), &SessionRecord> = sessions
        .iter()
        .filter(|s| !s.warmup && !s.superseded)
        .map(|s| ((s.session_id.as_str(), s.replay), s))
        .collect();
    graph_plays(turns)
        .into_iter()
        .map(|((id, replay), nodes)| {
            let from_record = records
                .get(&(id, replay))
                .map(|s| s.end_s - s.start_s)
                .filter(|e| e.is_finite() && *e > 0.0);
            let e2e_s = from_record.unwrap_or_else(|| {
                let first_due = nodes
                    .iter()
                    .map(|(r, _)| r.due_s)
                    .fold(f64::INFINITY, f64::min);
                let last_end = nodes
                    .iter()
                    .map(|(r, _)| r.end_s)
                    .fold(f64::NEG_INFINITY, f64::max);
                nonneg(last_end - first_due)
            });
            PlayBreakdown {
                session_id: id.to_owned(),
                replay,
                nodes: nodes.len() as u32,
                e2e_s,
                max_in_flight: nodes.iter().map(|(_, n)| n.in_flight).max().unwrap_or(0),
                path: critical_path(&nodes, e2e_s),
            }
        })
        .collect()
}

/// The breakdown over every measured graph play; `None` when no measured record has a `node`.
pub fn breakdown(turns: &[TurnRecord], sessions: &[SessionRecord]) -> Option<GraphBreakdown> {
    let plays = plays(turns, sessions);
    if plays.is_empty() {
        return None;
    }
    let positive: Vec<&PlayBreakdown> = plays.iter().filter(|p| p.e2e_s > 0.0).collect();
    let component = |part: fn(&CriticalPath) -> f64| Component {
        total_s: plays.iter().map(|p| part(&p.path)).sum(),
        share: mean(&sorted_finite(
            positive.iter().map(|p| part(&p.path) / p.e2e_s),
        )),
    };
    let shares = sorted_finite(plays.iter().filter_map(|p| p.path.critical_path_share));
    let e2e = sorted_finite(plays.iter().map(|p| p.e2e_s));
    let in_flight = sorted_finite(plays.iter().map(|p| f64::from(p.max_in_flight)));

    let mut by_depth: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for r in turns
        .iter()
        .filter(|r| !r.warmup && !r.superseded && r.status == TurnStatus::Ok)
    {
        if let (Some(n), Some(ttft)) = (&r.node, r.ttft_ms) {
            by_depth.entry(n.depth).or_default().push(ttft);
        }
    }
    let ttft_by_depth = by_depth
        .into_iter()
        .map(|(depth, v)| {
            let s = sorted_finite(v);
            DepthTtft {
                depth,
                n: s.len() as u64,
                p50_ms: percentile(&s, 0.50),
                p90_ms: percentile(&s, 0.90),
                p99_ms: percentile(&s, 0.99),
            }
        })
        .collect();

    Some(GraphBreakdown {
        sessions: plays.len() as u64,
        components: Components {
            dispatch_lag: component(|c| c.dispatch_lag_s),
            ttft_uncached: component(|c| c.ttft_uncached_s),
            ttft_cached: component(|c| c.ttft_cached_s),
            decode: component(|c| c.decode_s),
            tool_wait: component(|c| c.tool_wait_s),
            join_wait: component(|c| c.join_wait_s),
        },
        critical_path_share: ShareDist {
            p50: percentile(&shares, 0.50),
            p90: percentile(&shares, 0.90),
            mean: mean(&shares),
        },
        e2e_s: P50P90 {
            p50: percentile(&e2e, 0.50),
            p90: percentile(&e2e, 0.90),
        },
        max_in_flight: InFlightDist {
            p50: percentile(&in_flight, 0.50),
            max: plays.iter().map(|p| p.max_in_flight).max().unwrap_or(0),
        },
        ttft_by_depth,
    })
}

impl Components {
    /// The components with their display names, in the reports' order.
    pub(crate) fn named(&self) -> [(&'static str, &Component); 6] {
        [
            ("tool wait", &self.tool_wait),
            ("join wait", &self.join_wait),
            ("dispatch lag", &self.dispatch_lag),
            ("TTFT uncached", &self.ttft_uncached),
            ("TTFT cached", &self.ttft_cached),
            ("decode", &self.decode),
        ]
    }
}

impl GraphBreakdown {
    /// Console lines in the style of [`crate::RunResult::console`].
    pub fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |text: String| {
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(format!(
            "agent graphs   {} plays  e2e p50 {} s p90 {} s  requests in flight p50 {} max {}",
            self.sessions,
            num(self.e2e_s.p50, 2),
            num(self.e2e_s.p90, 2),
            num(self.max_in_flight.p50, 1),
            self.max_in_flight.max
        ));
        let c = &self.critical_path_share;
        line(format!(
            "  critical path  p50 {} p90 {} mean {} of session e2e (the last node's own line back)",
            pct(c.p50),
            pct(c.p90),
            pct(c.mean)
        ));
        let parts: Vec<String> = self
            .components
            .named()
            .iter()
            .map(|(name, comp)| format!("{name} {}", pct(comp.share)))
            .collect();
        line(format!("  on the path    {}", parts.join("  ")));
        if !self.ttft_by_depth.is_empty() {
            line(format!(
                "{:<22}{:>10}{:>10}{:>10}{:>8}",
                "TTFT by depth, ms", "p50", "p90", "p99", "n"
            ));
            for d in &self.ttft_by_depth {
                line(format!(
                    "{:<22}{:>10}{:>10}{:>10}{:>8}",
                    format!("  depth {}", d.depth),
                    num(d.p50_ms, 1),
                    num(d.p90_ms, 1),
                    num(d.p99_ms, 1),
                    d.n
                ));
            }
        }
        out
    }

    /// Markdown tables in the style of [`crate::RunResult::markdown`].
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let c = &self.critical_path_share;
        let _ = writeln!(
            md,
            "Agent graphs: {} plays; e2e p50 {} s, p90 {} s; requests in flight p50 {}, max {}; \
             critical path p50 {}, p90 {}, mean {} of session e2e (the last node's own line \
             back; time blocked on a sibling is join wait).\n",
            self.sessions,
            num(self.e2e_s.p50, 2),
            num(self.e2e_s.p90, 2),
            num(self.max_in_flight.p50, 1),
            self.max_in_flight.max,
            pct(c.p50),
            pct(c.p90),
            pct(c.mean)
        );
        let _ = writeln!(md, "| critical path | total, s | mean share of e2e |");
        let _ = writeln!(md, "|---|---|---|");
        for (name, comp) in self.components.named() {
            let _ = writeln!(
                md,
                "| {name} | {} | {} |",
                num(Some(comp.total_s), 3),
                pct(comp.share)
            );
        }
        if !self.ttft_by_depth.is_empty() {
            md.push('\n');
            let _ = writeln!(md, "| TTFT by depth, ms | p50 | p90 | p99 | n |");
            let _ = writeln!(md, "|---|---|---|---|---|");
            for d in &self.ttft_by_depth {
                let _ = writeln!(
                    md,
                    "| depth {} | {} | {} | {} | {} |",
                    d.depth,
                    num(d.p50_ms, 1),
                    num(d.p90_ms, 1),
                    num(d.p99_ms, 1),
                    d.n
                );
            }
        }
        md
    }
}

/// The bars of one measured play's nodes, grouped by branch (conversations in the order of their
/// first node, so `main` first) and by turn within a branch. Empty when the play has no node.
pub fn timeline(turns: &[TurnRecord], session_id: &str, replay: u32) -> Vec<TimelineBar> {
    let nodes: Vec<Node<'_>> = graph_plays(turns)
        .remove(&(session_id, replay))
        .unwrap_or_default();
    let mut first_of: HashMap<&str, u32> = HashMap::new();
    for (r, n) in &nodes {
        let f = first_of.entry(n.agent.as_str()).or_insert(r.turn_index);
        *f = (*f).min(r.turn_index);
    }
    let mut bars: Vec<(u32, TimelineBar)> = nodes
        .iter()
        .map(|(r, n)| {
            let branch = first_of
                .get(n.agent.as_str())
                .copied()
                .unwrap_or(r.turn_index);
            let bar = TimelineBar {
                turn_index: r.turn_index,
                agent: n.agent.clone(),
                depth: n.depth,
                due_s: r.due_s,
                sent_s: r.sent_s,
                first_token_s: r.first_token_s,
                end_s: r.end_s,
                status: if r.status == TurnStatus::Ok {
                    BarStatus::Ok
                } else {
                    BarStatus::Failed
                },
            };
            (branch, bar)
        })
        .collect();
    bars.sort_by(|a, b| (a.0, &a.1.agent, a.1.turn_index).cmp(&(b.0, &b.1.agent, b.1.turn_index)));
    bars.into_iter().map(|(_, bar)| bar).collect()
}

/// The measured graph play to chart: the one with the most nodes (ties: the earliest start,
/// then session id and replay). `None` when there is no graph play.
pub fn pick_timeline_play(turns: &[TurnRecord]) -> Option<(String, u32)> {
    graph_plays(turns)
        .into_iter()
        .map(|(key, nodes)| {
            let start = nodes
                .iter()
                .map(|(r, n)| n.released_s.min(r.due_s))
                .fold(f64::INFINITY, f64::min);
            (key, nodes.len(), start)
        })
        // BTreeMap order, so `reduce` keeps the smallest key among equals.
        .reduce(|best, cand| {
            let better = cand.1 > best.1 || (cand.1 == best.1 && cand.2 < best.2);
            if better { cand } else { best }
        })
        .map(|((id, replay), _, _)| (id.to_owned(), replay))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use bench_rundir::{ErrorKind, SessionStatus};

    use super::*;

    const EPS: f64 = 1e-9;

    fn close(a: f64, b: f64, what: &str) {
        assert!((a - b).abs() < EPS, "{what}: {a} != {b}");
    }

    fn close_opt(a: Option<f64>, b: f64, what: &str) {
        close(a.unwrap_or_else(|| panic!("{what}: null")), b, what);
    }

    /// Times of a node: released, due, sent, first token (None: failed), end.
    struct T(f64, f64, f64, Option<f64>, f64);

    /// An ok graph node of play `s`/`replay`, 1000 input tokens, `cached` of them cached.
    #[allow(clippy::too_many_arguments)]
    fn node(
        s: &str,
        replay: u32,
        turn_index: u32,
        agent: &str,
        after: &[u32],
        released_by: Option<u32>,
        t: T,
        cached: Option<u64>,
        in_flight: u32,
    ) -> TurnRecord {
        let T(released_s, due_s, sent_s, first_token_s, end_s) = t;
        let ok = first_token_s.is_some();
        TurnRecord {
            replay,
            status: if ok {
                TurnStatus::Ok
            } else {
                TurnStatus::Error
            },
            error_kind: (!ok).then_some(ErrorKind::Status),
            ttft_ms: first_token_s.map(|f| (f - sent_s) * 1000.0),
            e2e_ms: ok.then_some((end_s - sent_s) * 1000.0),
            input_tokens: Some(1000),
            cached_tokens: cached,
            due_s,
            sent_s,
            first_token_s,
            end_s,
            node: Some(NodeInfo {
                agent: agent.to_owned(),
                depth: u32::from(agent != "main"),
                after: after.to_vec(),
                released_s,
                released_by,
                in_flight,
            }),
            ..TurnRecord::example(s, turn_index)
        }
    }

    fn session(s: &str, replay: u32, start_s: f64, end_s: f64) -> SessionRecord {
        SessionRecord {
            session_id: s.to_owned(),
            replay,
            status: SessionStatus::Completed,
            turns_played: 1,
            turns_planned: 1,
            output_tokens: 0,
            busy_s: 0.0,
            marker: None,
            warmup: false,
            start_s,
            end_s,
            superseded: false,
        }
    }

    /// Play `g`/0: main:0, main:1 after a 0.2 s tool wait, three subagents forked from main:1,
    /// the join main:2 released by the slowest (node 5), then main:3. Session record 0–2 s.
    fn fork_join() -> Vec<TurnRecord> {
        vec![
            node(
                "g",
                0,
                0,
                "main",
                &[],
                None,
                T(0.0, 0.0, 0.001, Some(0.05), 0.1),
                None,
                1,
            ),
            // 750 of 1000 input tokens cached: TTFT 0.098 s splits 0.0735 / 0.0245.
            node(
                "g",
                0,
                1,
                "main",
                &[0],
                Some(0),
                T(0.1, 0.3, 0.302, Some(0.4), 0.5),
                Some(750),
                1,
            ),
            node(
                "g",
                0,
                2,
                "main",
                &[1, 4, 5, 6],
                Some(5),
                T(1.2, 1.25, 1.251, Some(1.3), 1.4),
                Some(500),
                1,
            ),
            node(
                "g",
                0,
                3,
                "main",
                &[2],
                Some(2),
                T(1.4, 1.5, 1.5, Some(1.55), 1.7),
                None,
                1,
            ),
            node(
                "g",
                0,
                4,
                "sub-a",
                &[1],
                Some(1),
                T(0.5, 0.51, 0.511, Some(0.6), 0.8),
                None,
                1,
            ),
            node(
                "g",
                0,
                5,
                "sub-b",
                &[1],
                Some(1),
                T(0.5, 0.55, 0.552, Some(0.7), 1.2),
                None,
                2,
            ),
            node(
                "g",
                0,
                6,
                "sub-c",
                &[1],
                Some(1),
                T(0.5, 0.6, 0.6, Some(0.65), 0.9),
                None,
                3,
            ),
        ]
    }

    /// Play `g`/1 (no session record): the subagents (3, and 4 which failed) end before main:1,
    /// so the join main:2 is released by its own predecessor.
    fn early_children() -> Vec<TurnRecord> {
        vec![
            node(
                "g",
                1,
                0,
                "main",
                &[],
                None,
                T(10.0, 10.0, 10.0, Some(10.1), 10.2),
                None,
                1,
            ),
            node(
                "g",
                1,
                1,
                "main",
                &[0],
                Some(0),
                T(10.2, 10.2, 10.2, Some(10.32), 10.4),
                None,
                2,
            ),
            node(
                "g",
                1,
                2,
                "main",
                &[1, 3, 4],
                Some(1),
                T(10.4, 10.5, 10.5, Some(10.7), 10.8),
                None,
                1,
            ),
            node(
                "g",
                1,
                3,
                "sub-a",
                &[0],
                Some(0),
                T(10.2, 10.2, 10.2, Some(10.25), 10.3),
                None,
                2,
            ),
            node(
                "g",
                1,
                4,
                "sub-b",
                &[0],
                Some(0),
                T(10.2, 10.2, 10.21, None, 10.35),
                None,
                2,
            ),
        ]
    }

    /// Both plays plus records that must be ignored: a superseded copy of `g`/0's last node
    /// ending later, a warmup graph play, a linear session.
    fn run() -> (Vec<TurnRecord>, Vec<SessionRecord>) {
        let mut turns = fork_join();
        turns.extend(early_children());
        let mut stale = node(
            "g",
            0,
            3,
            "main",
            &[2],
            Some(2),
            T(1.4, 1.5, 1.5, Some(3.0), 9.0),
            None,
            9,
        );
        stale.superseded = true;
        turns.push(stale);
        let mut warm = node(
            "w",
            0,
            0,
            "main",
            &[],
            None,
            T(0.0, 0.0, 0.0, Some(5.0), 6.0),
            None,
            7,
        );
        warm.warmup = true;
        turns.push(warm);
        let mut linear = node(
            "lin",
            0,
            0,
            "main",
            &[],
            None,
            T(0.0, 0.0, 0.0, Some(0.5), 1.0),
            None,
            1,
        );
        linear.node = None;
        turns.push(linear);
        let mut stale_session = session("g", 0, 0.0, 50.0);
        stale_session.superseded = true;
        let sessions = vec![
            stale_session,
            session("g", 0, 0.0, 2.0),
            session("lin", 0, 0.0, 1.0),
        ];
        (turns, sessions)
    }

    fn sum(p: &CriticalPath) -> f64 {
        p.dispatch_lag_s
            + p.ttft_uncached_s
            + p.ttft_cached_s
            + p.decode_s
            + p.tool_wait_s
            + p.join_wait_s
    }

    #[test]
    fn fork_join_critical_path_components() {
        let (turns, sessions) = run();
        let plays = plays(&turns, &sessions);
        assert_eq!(
            plays.len(),
            2,
            "warmup, superseded and linear plays are not counted"
        );
        let a = &plays[0];
        assert_eq!((a.session_id.as_str(), a.replay), ("g", 0));
        assert_eq!(a.nodes, 7);
        assert_eq!(a.max_in_flight, 3);
        close(a.e2e_s, 2.0, "e2e from the session record");
        let p = &a.path;
        // main:3 → main:2 → (join wait, then its own line) main:1 → main:0.
        assert_eq!(p.path_nodes, 4);
        close(p.tool_wait_s, 0.1 + 0.05 + 0.2 + 0.0, "tool wait");
        close(
            p.dispatch_lag_s,
            0.0 + 0.001 + 0.002 + 0.001,
            "dispatch lag",
        );
        // TTFT main:3 0.05, main:2 0.049 (half cached), main:1 0.098 (75 % cached), main:0 0.049.
        close(p.ttft_cached_s, 0.0245 + 0.0735, "ttft cached");
        close(
            p.ttft_uncached_s,
            0.05 + 0.0245 + 0.0245 + 0.049,
            "ttft uncached",
        );
        close(p.decode_s, 0.15 + 0.1 + 0.1 + 0.05, "decode");
        // main:2 was released at 1.2 by sub-b; its own predecessor main:1 ended at 0.5.
        close(p.join_wait_s, 0.7, "join wait");
        close(p.path_s, sum(p), "components sum to path_s");
        close(p.path_s, 1.7, "the path covers play start → last end");
        close_opt(p.critical_path_share, 0.85, "share");
    }

    #[test]
    fn join_released_by_own_predecessor_has_no_join_wait() {
        let (turns, sessions) = run();
        let plays = plays(&turns, &sessions);
        let b = &plays[1];
        assert_eq!((b.session_id.as_str(), b.replay), ("g", 1));
        assert_eq!(b.nodes, 5);
        assert_eq!(b.max_in_flight, 2);
        // No session record: last end − first due.
        close(b.e2e_s, 0.8, "e2e fallback");
        let p = &b.path;
        assert_eq!(p.path_nodes, 3);
        close(p.join_wait_s, 0.0, "join wait");
        close(p.tool_wait_s, 0.1, "tool wait");
        close(p.dispatch_lag_s, 0.0, "dispatch lag");
        close(p.ttft_uncached_s, 0.2 + 0.12 + 0.1, "ttft uncached");
        close(p.ttft_cached_s, 0.0, "ttft cached");
        close(p.decode_s, 0.1 + 0.08 + 0.1, "decode");
        close(p.path_s, sum(p), "components sum to path_s");
        close_opt(p.critical_path_share, 1.0, "share");
    }

    #[test]
    fn aggregate_over_plays() {
        let (turns, sessions) = run();
        let g = breakdown(&turns, &sessions).expect("graph plays");
        assert_eq!(g.sessions, 2);
        let c = &g.components;
        close(c.tool_wait.total_s, 0.35 + 0.1, "tool wait total");
        close(c.join_wait.total_s, 0.7, "join wait total");
        close(c.dispatch_lag.total_s, 0.004, "lag total");
        close(c.ttft_uncached.total_s, 0.148 + 0.42, "uncached total");
        close(c.ttft_cached.total_s, 0.098, "cached total");
        close(c.decode.total_s, 0.4 + 0.28, "decode total");
        // Mean over plays of component ÷ e2e: (0.35/2 + 0.1/0.8) / 2, (0.7/2 + 0) / 2.
        close_opt(c.tool_wait.share, 0.15, "tool wait share");
        close_opt(c.join_wait.share, 0.175, "join wait share");
        close_opt(c.ttft_cached.share, 0.098 / 2.0 / 2.0, "cached share");
        close_opt(g.critical_path_share.p50, 0.925, "share p50");
        close_opt(g.critical_path_share.p90, 0.985, "share p90");
        close_opt(g.critical_path_share.mean, 0.925, "share mean");
        close_opt(g.e2e_s.p50, 1.4, "e2e p50");
        close_opt(g.e2e_s.p90, 1.88, "e2e p90");
        close_opt(g.max_in_flight.p50, 2.5, "in flight p50");
        assert_eq!(g.max_in_flight.max, 3);
    }

    #[test]
    fn ttft_by_depth_over_ok_nodes() {
        let (turns, sessions) = run();
        let g = breakdown(&turns, &sessions).expect("graph plays");
        let d = &g.ttft_by_depth;
        assert_eq!(d.len(), 2);
        // Depth 0: 49, 49, 50, 98, 100, 120, 200 ms (warmup 5000 and superseded 1500 left out).
        assert_eq!((d[0].depth, d[0].n), (0, 7));
        close_opt(d[0].p50_ms, 98.0, "depth 0 p50");
        close_opt(d[0].p90_ms, 152.0, "depth 0 p90");
        close_opt(d[0].p99_ms, 195.2, "depth 0 p99");
        // Depth 1: 50, 50, 89, 148 ms; the failed subagent node has no TTFT.
        assert_eq!((d[1].depth, d[1].n), (1, 4));
        close_opt(d[1].p50_ms, 69.5, "depth 1 p50");
        close_opt(d[1].p90_ms, 130.3, "depth 1 p90");
        close_opt(d[1].p99_ms, 146.23, "depth 1 p99");
    }

    #[test]
    fn linear_and_warmup_only_runs_have_no_breakdown() {
        let (turns, sessions) = run();
        let ignored: Vec<TurnRecord> = turns
            .into_iter()
            .filter(|r| r.node.is_none() || r.warmup || r.superseded)
            .collect();
        assert_eq!(ignored.len(), 3);
        assert_eq!(breakdown(&ignored, &sessions), None);
        assert_eq!(pick_timeline_play(&ignored), None);
        assert!(timeline(&ignored, "w", 0).is_empty());
    }

    #[test]
    fn failed_node_counts_its_request_as_uncached_ttft() {
        // A join whose slowest child failed without a token: the walk still follows main's line,
        // and a failed node on the path counts end − sent as uncached TTFT.
        let turns = vec![
            node(
                "f",
                0,
                0,
                "main",
                &[],
                None,
                T(0.0, 0.0, 0.0, Some(0.1), 0.2),
                Some(2000),
                1,
            ),
            node(
                "f",
                0,
                1,
                "main",
                &[0, 2],
                Some(2),
                T(0.5, 0.6, 0.6, None, 0.9),
                Some(250),
                1,
            ),
            node(
                "f",
                0,
                2,
                "sub",
                &[0],
                Some(0),
                T(0.2, 0.2, 0.2, None, 0.5),
                None,
                2,
            ),
        ];
        let p = &plays(&turns, &[])[0].path;
        assert_eq!(p.path_nodes, 2);
        close(p.join_wait_s, 0.3, "join wait");
        close(p.tool_wait_s, 0.1, "tool wait");
        // main:1 failed: 0.3 s request, a quarter cached. main:0: cached > input clamps to all.
        close(p.ttft_uncached_s, 0.225, "uncached");
        close(p.ttft_cached_s, 0.075 + 0.1, "cached");
        close(p.decode_s, 0.1, "decode");
        close(p.path_s, 0.9, "path");
    }

    #[test]
    fn timeline_of_the_biggest_play() {
        let (turns, _) = run();
        let (id, replay) = pick_timeline_play(&turns).expect("a graph play");
        assert_eq!((id.as_str(), replay), ("g", 0), "7 nodes beat 5");
        let bars = timeline(&turns, &id, replay);
        let order: Vec<(u32, &str)> = bars
            .iter()
            .map(|b| (b.turn_index, b.agent.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                (0, "main"),
                (1, "main"),
                (2, "main"),
                (3, "main"),
                (4, "sub-a"),
                (5, "sub-b"),
                (6, "sub-c")
            ]
        );
        // The superseded copy of main:3 (end 9.0) is not charted.
        close(bars[3].end_s, 1.7, "main:3 end");
        assert_eq!(bars[4].depth, 1);
        assert!(bars.iter().all(|b| b.status == BarStatus::Ok));

        let b = timeline(&turns, "g", 1);
        assert_eq!(b.len(), 5);
        assert_eq!(b[4].status, BarStatus::Failed);
        assert_eq!(b[4].first_token_s, None);

        // Equal sizes: the earlier start wins.
        let mut later = early_children();
        for r in &mut later {
            r.session_id = "a-later".into();
            for t in [&mut r.due_s, &mut r.sent_s, &mut r.end_s] {
                *t += 100.0;
            }
            if let Some(n) = &mut r.node {
                n.released_s += 100.0;
            }
        }
        later.extend(early_children());
        assert_eq!(pick_timeline_play(&later), Some(("g".to_owned(), 1)));
    }

    #[test]
    fn serde_round_trip_with_stable_keys() {
        let (turns, sessions) = run();
        let g = breakdown(&turns, &sessions).expect("graph plays");
        let v = serde_json::to_value(&g).unwrap();
        for key in [
            "/sessions",
            "/components/dispatch_lag/total_s",
            "/components/ttft_uncached/share",
            "/components/ttft_cached/total_s",
            "/components/decode/total_s",
            "/components/tool_wait/total_s",
            "/components/join_wait/share",
            "/critical_path_share/p50",
            "/critical_path_share/p90",
            "/critical_path_share/mean",
            "/e2e_s/p50",
            "/e2e_s/p90",
            "/max_in_flight/p50",
            "/max_in_flight/max",
            "/ttft_by_depth/0/depth",
            "/ttft_by_depth/0/n",
            "/ttft_by_depth/0/p50_ms",
            "/ttft_by_depth/0/p90_ms",
            "/ttft_by_depth/0/p99_ms",
        ] {
            assert!(v.pointer(key).is_some(), "missing {key}");
        }
        let back: GraphBreakdown = serde_json::from_value(v).unwrap();
        assert_eq!(back, g);
        let bar = serde_json::to_value(&timeline(&turns, "g", 1)[4]).unwrap();
        assert_eq!(bar["status"], "failed");
    }

    #[test]
    fn text_and_markdown_shapes() {
        let (turns, sessions) = run();
        let g = breakdown(&turns, &sessions).expect("graph plays");
        let text = "\
agent graphs   2 plays  e2e p50 1.40 s p90 1.88 s  requests in flight p50 2.5 max 3
  critical path  p50 92.5% p90 98.5% mean 92.5% of session e2e (the last node's own line back)
  on the path    tool wait 15.0%  join wait 17.5%  dispatch lag 0.1%  TTFT uncached 29.9%  \
TTFT cached 2.5%  decode 27.5%
TTFT by depth, ms            p50       p90       p99       n
  depth 0                   98.0     152.0     195.2       7
  depth 1                   69.5     130.3     146.2       4
";
        assert_eq!(g.text(), text);
        let md = "\
Agent graphs: 2 plays; e2e p50 1.40 s, p90 1.88 s; requests in flight p50 2.5, max 3; \
critical path p50 92.5%, p90 98.5%, mean 92.5% of session e2e (the last node's own line back; \
time blocked on a sibling is join wait).

| critical path | total, s | mean share of e2e |
|---|---|---|
| tool wait | 0.450 | 15.0% |
| join wait | 0.700 | 17.5% |
| dispatch lag | 0.004 | 0.1% |
| TTFT uncached | 0.568 | 29.9% |
| TTFT cached | 0.098 | 2.5% |
| decode | 0.680 | 27.5% |

| TTFT by depth, ms | p50 | p90 | p99 | n |
|---|---|---|---|---|
| depth 0 | 98.0 | 152.0 | 195.2 | 7 |
| depth 1 | 69.5 | 130.3 | 146.2 | 4 |
";
        assert_eq!(g.markdown(), md);
    }
}
