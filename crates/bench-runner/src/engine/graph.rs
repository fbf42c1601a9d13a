//! Playing an agent graph (a session whose turns fork subagents and join their answers).
//!
//! Every branch — the main conversation and each subagent — is a future of its own, and the
//! session's one task polls them all: no task is spawned per branch. A node is sent once every
//! node it waits for has finished and its tool wait (counted from the last of them) has passed.
//! A forked branch starts from its fork node's conversation as sent (messages, prefix chain,
//! the Responses id it continues), so its first request shares its parent's prefix.
//!
//! Failure: a node whose fork node or join failed is not sent; it is recorded with
//! `dependency_failed`, and so are the nodes that wait on it. The next turn of the branch
//! goes on, as after any failed turn (the recorded answer joins the context). Nodes cut by the
//! deadline, a timeout or the context guard are not recorded, nor is anything waiting on them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bench_rundir::record::{NodeInfo, SessionRecord, SessionStatus, TurnStatus};
use bench_transport::ErrorKind;
use bench_workload::format::SubagentContext;
use bench_workload::plan::{PlannedGraph, PlannedSession, Role};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::thread::{Cleared, Due, Thread, clear_turn, conversation_bytes};
use super::{
    Opening, PhaseState, Shared, Transport, push_msg, request_options, send_with_retries,
    sent_record, turn_record,
};
use crate::conv::Conversation;
use crate::observer::RunEvent;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    Failed,
    /// Not sent: the play stopped first (deadline, timeout, context guard, a cut dependency).
    Skipped,
}

/// A finished node.
struct Done {
    outcome: Outcome,
    end: Instant,
    /// `model` content mode: its answer as generated (a JSON string literal) and its tokens,
    /// for the joins that wait on it.
    answer: Option<(Arc<str>, u64)>,
    /// A fork node's conversation, for its subagents.
    snapshot: Option<Arc<Thread>>,
}

#[derive(Default)]
struct Play {
    done: Vec<Option<Done>>,
    in_flight: u32,
    busy_since: Option<Instant>,
    busy: Duration,
    played: u32,
    output_tokens: u64,
    any_failed: bool,
    /// Why the play stopped early (the first reason seen).
    stop: Option<SessionStatus>,
}

struct Ctx<'a, T: Transport> {
    sh: &'a Shared<T>,
    ph: &'a PhaseState,
    sess: &'a PlannedSession,
    g: &'a PlannedGraph,
    replay: u32,
    arrival: Option<Instant>,
    play_start: Instant,
    in_play: Vec<bool>,
    opening: Opening,
    marker: Option<String>,
    marker_len: usize,
    state: std::sync::Mutex<Play>,
    notify: Notify,
}

impl<T: Transport> Ctx<'_, T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Play> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn finish(&self, n: u32, done: Done) {
        self.lock().done[n as usize] = Some(done);
        self.notify.notify_waiters();
    }

    /// Waits until every node of `deps` has finished; gives their worst outcome (skipped, then
    /// failed, then ok: nothing waiting on a skipped node is sent) and the last end with the
    /// node that had it.
    async fn wait_for(&self, deps: &[u32]) -> (Outcome, Option<(Instant, u32)>) {
        if deps.is_empty() {
            return (Outcome::Ok, None);
        }
        loop {
            let n = self.notify.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            {
                let st = self.lock();
                if deps.iter().all(|&d| st.done[d as usize].is_some()) {
                    let mut worst = Outcome::Ok;
                    let mut last: Option<(Instant, u32)> = None;
                    for &d in deps {
                        let Some(done) = &st.done[d as usize] else {
                            continue;
                        };
                        worst = match (worst, done.outcome) {
                            (Outcome::Skipped, _) | (_, Outcome::Skipped) => Outcome::Skipped,
                            (Outcome::Failed, _) | (_, Outcome::Failed) => Outcome::Failed,
                            _ => Outcome::Ok,
                        };
                        if last.is_none_or(|(t, _)| done.end > t) {
                            last = Some((done.end, d));
                        }
                    }
                    return (worst, last);
                }
            }
            n.await;
        }
    }

    fn skip_rest(&self, nodes: impl Iterator<Item = u32>, why: Option<SessionStatus>) {
        let now = Instant::now();
        {
            let mut st = self.lock();
            if let Some(w) = why {
                st.stop.get_or_insert(w);
            }
            for n in nodes {
                st.done[n as usize] = Some(Done {
                    outcome: Outcome::Skipped,
                    end: now,
                    answer: None,
                    snapshot: None,
                });
            }
        }
        self.notify.notify_waiters();
    }
}

/// Which nodes a play sends: all, or in a warmup the first `max_turns` of each branch whose
/// fork node is sent.
fn in_play(g: &PlannedGraph, max_turns: usize) -> Vec<bool> {
    let n = g.branch_of.len();
    let mut keep = vec![false; n];
    // Branches fork from earlier-resolved ones; a few passes settle any listing order.
    for _ in 0..g.branches.len() {
        for b in &g.branches {
            let root = b.fork.is_none_or(|f| keep[f as usize]);
            for k in 0..b.len as usize {
                keep[b.first as usize + k] = root && k < max_turns;
            }
        }
    }
    keep
}

pub(super) async fn play_graph<T: Transport>(
    sh: &Shared<T>,
    ph: &PhaseState,
    sess: &PlannedSession,
    g: &PlannedGraph,
    replay: u32,
    arrival: Option<Instant>,
    marker: Option<String>,
) -> SessionRecord {
    let play_start = Instant::now();
    let session_start = arrival.unwrap_or(play_start);
    let in_play = in_play(g, ph.sessions.max_turns);
    let planned = in_play.iter().filter(|&&k| k).count() as u32;
    let ctx = Ctx {
        sh,
        ph,
        sess,
        g,
        replay,
        arrival,
        play_start,
        opening: Opening::new(sess.system.as_deref(), marker.as_deref()),
        marker: marker.clone(),
        marker_len: 64 + sess.id.len(),
        in_play,
        state: std::sync::Mutex::new(Play {
            done: (0..sess.turns.len()).map(|_| None).collect(),
            ..Play::default()
        }),
        notify: Notify::new(),
    };
    let branches = (0..g.branches.len()).map(|b| play_branch(&ctx, b));
    futures_util::future::join_all(branches).await;
    let st = ctx
        .state
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let status = match st.stop {
        Some(s) => s,
        None if st.any_failed => SessionStatus::Failed,
        None => SessionStatus::Completed,
    };
    SessionRecord {
        session_id: sess.id.to_string(),
        replay,
        status,
        turns_played: st.played,
        turns_planned: planned,
        output_tokens: st.output_tokens,
        busy_s: st.busy.as_secs_f64(),
        marker,
        warmup: ph.warmup,
        start_s: sh.offset_s(session_start),
        end_s: sh.offset_s(Instant::now()),
        superseded: false,
    }
}

async fn play_branch<T: Transport>(ctx: &Ctx<'_, T>, b: usize) {
    let (sh, g, sess) = (ctx.sh, ctx.g, ctx.sess);
    let cfg = &sh.cfg;
    let br = &g.branches[b];
    let nodes: Vec<u32> = (br.first..br.first + br.len)
        .filter(|&n| ctx.in_play[n as usize])
        .collect();
    if nodes.is_empty() {
        return;
    }
    // Where the branch's conversation starts.
    let (mut st, mut inherited_failure) = match br.fork {
        None => (new_branch(ctx, b, sess.system.as_ref(), &ctx.opening), None),
        Some(f) => {
            let (outcome, _) = ctx.wait_for(&[f]).await;
            if outcome == Outcome::Skipped {
                ctx.skip_rest(nodes.iter().copied(), None);
                return;
            }
            let snapshot = ctx.lock().done[f as usize]
                .as_ref()
                .and_then(|d| d.snapshot.clone());
            let st = match (br.context, snapshot) {
                (SubagentContext::Fork, Some(s)) => {
                    let mut st = (*s).clone();
                    st.messages.reserve(branch_bytes(ctx, b));
                    st
                }
                _ => {
                    let opening = Opening::new(br.system.as_deref(), ctx.opening_marker());
                    new_branch(ctx, b, br.system.as_ref(), &opening)
                }
            };
            (st, (outcome == Outcome::Failed).then_some(f))
        }
    };
    let fresh_opening;
    let opening = match br.fork {
        Some(_) if br.context == SubagentContext::Fresh => {
            fresh_opening = Opening::new(br.system.as_deref(), ctx.opening_marker());
            &fresh_opening
        }
        _ => &ctx.opening,
    };
    let system_msg = match br.context {
        SubagentContext::Fresh if br.fork.is_some() => br.system.as_deref(),
        _ => sess.system.as_deref(),
    };
    let system = opening.system(system_msg);
    let mut prev_end: Option<(Instant, u32)> = None;
    for (pos, &n) in nodes.iter().enumerate() {
        let turn = &sess.turns[n as usize];
        let joins: Vec<u32> = g.joins[n as usize]
            .iter()
            .copied()
            .filter(|&d| ctx.in_play[d as usize])
            .collect();
        let (outcome, last_join) = ctx.wait_for(&joins).await;
        if outcome == Outcome::Skipped {
            ctx.skip_rest(nodes[pos..].iter().copied(), None);
            return;
        }
        // Released by the slowest of what it waits on: its predecessor (or fork), its joins.
        let fork_end = if pos == 0 {
            br.fork
                .and_then(|f| ctx.lock().done[f as usize].as_ref().map(|d| (d.end, f)))
        } else {
            None
        };
        let release = [prev_end, fork_end, last_join]
            .into_iter()
            .flatten()
            .max_by_key(|(t, _)| *t);
        let failed_dep = inherited_failure.or(match outcome {
            Outcome::Failed => joins.iter().copied().find(|&d| {
                ctx.lock().done[d as usize]
                    .as_ref()
                    .is_some_and(|x| x.outcome == Outcome::Failed)
            }),
            _ => None,
        });
        let after: Vec<u32> = g.deps(n).filter(|&d| ctx.in_play[d as usize]).collect();
        let node_info = |released: Instant, in_flight: u32| NodeInfo {
            agent: br.agent.to_string(),
            depth: br.depth,
            after: after.clone(),
            released_s: sh.offset_s(released),
            released_by: release.map(|(_, d)| d),
            in_flight,
        };
        // A node whose dependency failed is recorded, not sent.
        if let Some(d) = failed_dep {
            let now = Instant::now();
            let err = bench_transport::Error::new(
                ErrorKind::DependencyFailed,
                format!("not sent: node {} it waits on failed", node_name(g, d)),
            );
            let mut rec = turn_record(sh, sess, ctx.replay, turn, &Err(err), 0, now, now, now, 0);
            rec.warmup = ctx.ph.warmup;
            rec.input_tokens = None;
            rec.input_tokens_source = None;
            rec.node = Some(node_info(release.map_or(now, |r| r.0), 0));
            push_context(ctx, &mut st, turn, &joins);
            // What waits on this node waits on the failure too: the rest of the branch.
            inherited_failure = Some(d);
            {
                let mut s = ctx.lock();
                s.played += 1;
                s.any_failed = true;
            }
            sh.turn_finished(rec);
            prev_end = Some((now, n));
            ctx.finish(
                n,
                Done {
                    outcome: Outcome::Failed,
                    end: now,
                    answer: None,
                    snapshot: g.forks[n as usize].then(|| Arc::new(st.clone())),
                },
            );
            continue;
        }
        let first_of_session = br.fork.is_none() && pos == 0;
        let released = release.map_or(ctx.play_start, |r| r.0);
        let due = Due {
            at: match (ctx.arrival, first_of_session) {
                (Some(a), true) => a,
                _ => released,
            },
            tool_wait: !first_of_session,
            play_start: ctx.play_start,
            extra_tokens: opening.extra_tokens,
            est_shift: st.est_shift,
        };
        let Cleared {
            due,
            now,
            est_prompt,
        } = match clear_turn(sh, ctx.ph, turn, due).await {
            Ok(c) => c,
            Err(why) => {
                ctx.skip_rest(nodes[pos..].iter().copied(), Some(why));
                return;
            }
        };
        let mut delta = st
            .continues(cfg)
            .map(|_| Conversation::rendered(0, cfg.render()));
        push_input(ctx, &mut st, turn, &joins, delta.as_mut());
        let body = st.body(cfg, system, turn, sess.tools.as_deref(), delta.as_ref());
        let opts = request_options(sh, &sess.id, now);
        let active = ctx.ph.active.load(Ordering::SeqCst);
        let own_pieces = st.own_before;
        sh.prefixes.sent(&mut st.chain);
        let first_sent = Instant::now();
        let in_flight = {
            let mut s = ctx.lock();
            s.in_flight += 1;
            if s.in_flight == 1 {
                s.busy_since = Some(first_sent);
            }
            s.in_flight
        };
        sh.emit(RunEvent::TurnSent {
            session_id: &sess.id,
            turn_index: turn.index,
        });
        let (result, sent, failed) = Box::pin(send_with_retries(sh, ctx.ph, body, opts)).await;
        let end = Instant::now();
        let mut rec = turn_record(
            sh, sess, ctx.replay, turn, &result, active, due, sent, end, est_prompt,
        );
        sent_record(&mut rec, failed, ctx.ph, est_prompt);
        rec.prefix_shared_tokens = sh.prefixes.shared(&mut st.chain, own_pieces);
        rec.node = Some(node_info(released, in_flight));
        st.own_before = st.chain.len();
        let ok = rec.status == TurnStatus::Ok;
        {
            let mut s = ctx.lock();
            s.in_flight -= 1;
            if s.in_flight == 0 {
                if let Some(t) = s.busy_since.take() {
                    s.busy += end.duration_since(t);
                }
            }
            s.played += 1;
            if ok {
                s.output_tokens += rec.output_tokens.unwrap_or(0);
            } else {
                s.any_failed = true;
            }
        }
        let answer = st
            .push_answer(cfg, turn, &result, rec.output_tokens.unwrap_or(0))
            .map(|(text, out)| (Arc::from(text), out));
        if let (TurnStatus::Ok, Ok(o)) = (rec.status, &result) {
            sh.emit(RunEvent::Answer {
                record: &rec,
                answer: &o.content,
            });
        }
        sh.turn_finished(rec);
        prev_end = Some((end, n));
        ctx.finish(
            n,
            Done {
                outcome: if ok { Outcome::Ok } else { Outcome::Failed },
                end,
                answer,
                snapshot: g.forks[n as usize].then(|| Arc::new(st.clone())),
            },
        );
    }
}

impl<T: Transport> Ctx<'_, T> {
    fn opening_marker(&self) -> Option<&str> {
        self.marker.as_deref()
    }
}

/// `agent:turn` of node `n`.
fn node_name(g: &PlannedGraph, n: u32) -> String {
    let b = &g.branches[g.branch_of[n as usize] as usize];
    format!("{}:{}", b.agent, n - b.first)
}

/// The bytes branch `b`'s own nodes add to its conversation (their messages and answers).
fn branch_bytes<T: Transport>(ctx: &Ctx<'_, T>, b: usize) -> usize {
    let br = &ctx.g.branches[b];
    conversation_bytes(&ctx.sess.turns[br.first as usize..(br.first + br.len) as usize])
}

fn new_branch<T: Transport>(
    ctx: &Ctx<'_, T>,
    b: usize,
    system: Option<&Arc<bench_workload::plan::PlannedMessage>>,
    opening: &Opening,
) -> Thread {
    let cfg = &ctx.sh.cfg;
    // Reserved exactly, so that growing it never doubles its capacity.
    let full = ctx.marker_len + branch_bytes(ctx, b);
    Thread::new(
        full,
        cfg,
        opening.chain(ctx.sh, system, ctx.sess.tools.as_ref()),
    )
}

/// Appends a node's input: its joins' answers (live ones in `model` content mode) and its own
/// messages; `delta` (Responses with server state) gets them too.
fn push_input<T: Transport>(
    ctx: &Ctx<'_, T>,
    st: &mut Thread,
    turn: &bench_workload::plan::PlannedTurn,
    joins: &[u32],
    mut delta: Option<&mut Conversation>,
) {
    let overhead = bench_workload::plan::MESSAGE_OVERHEAD_TOKENS;
    let n_joined = ctx.g.joins[turn.index as usize].len();
    let live: Vec<Option<(Arc<str>, u64)>> = {
        let s = ctx.lock();
        ctx.g.joins[turn.index as usize]
            .iter()
            .map(|&d| {
                joins
                    .contains(&d)
                    .then(|| s.done[d as usize].as_ref().and_then(|x| x.answer.clone()))
                    .flatten()
            })
            .collect()
    };
    for (i, m) in turn.input_delta.iter().enumerate() {
        st.messages.comma();
        if let Some(d) = delta.as_deref_mut() {
            d.comma();
        }
        match live.get(i).filter(|_| i < n_joined).cloned().flatten() {
            Some((text, tokens)) => {
                st.messages.push_text(Role::User, &text);
                if let Some(d) = delta.as_deref_mut() {
                    d.push_text(Role::User, &text);
                }
                st.chain
                    .push(&[b"user", text.as_bytes()], tokens + overhead);
                st.est_shift += tokens as i64 - i64::from(m.tokens);
            }
            None => {
                st.messages.push_msg(m);
                if let Some(d) = delta.as_deref_mut() {
                    d.push_msg(m);
                }
                push_msg(&mut st.chain, m);
            }
        }
    }
}

/// A node that was not sent still joins its branch's context as recorded.
fn push_context<T: Transport>(
    ctx: &Ctx<'_, T>,
    st: &mut Thread,
    turn: &bench_workload::plan::PlannedTurn,
    joins: &[u32],
) {
    push_input(ctx, st, turn, joins, None);
    st.messages.comma();
    st.messages.push_msg(&turn.assistant);
    push_msg(&mut st.chain, &turn.assistant);
}
