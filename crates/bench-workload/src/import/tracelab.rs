//! TraceLab round rows (uw-syfi/TraceLab): one LLM round per JSONL line,
//! `{"session_id", "round_index", "model", "input_tokens_total", "prefix_tokens",
//! "output_tokens", "timing_events": [...], "tools": [...]}`, grouped by `session_id`.
//!
//! A Claude Code subagent is a session of its own named `<session>/subagents/<agent>`: it
//! becomes a subagent of `<session>`, forked by the round whose spawn tool call (`Agent`,
//! `Task`, ...) spans it and joined by the round that reads that call's result. The format has
//! no request start or end: a round starts when its last input event (user message or tool
//! result) arrived and ends with its last output event. There is no text either: prompts are
//! filler of the recorded token counts.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{
    Ctx, Document, ImportError, NoteKind, agent_id, as_object, at_key, describe,
    for_each_json_line, gap_ms, is_jsonl, new_input_tokens, no_sessions, open, opt_array_at,
    opt_f64_at, opt_str_at, opt_time_at, opt_u64_at, read_document, req_u64_at,
};
use crate::format::{
    MAIN_AGENT, Message, Source, Subagent, SubagentContext, TraceSession, TraceTurn,
};

/// Tool names that run a subagent (Claude Code's `Agent`, formerly `Task`; Codex's agent
/// tools).
const SPAWN_TOOLS: [&str; 5] = ["Agent", "Task", "spawn_agent", "wait_agent", "resume_agent"];
/// Largest accepted token count of a round (as for Mooncake's `input_length`).
const MAX_TOKENS: u64 = 1 << 24;
/// How a subagent session's id names its parent: `<parent>/subagents/<agent>`.
const SUBAGENT_MARK: &str = "/subagents/";

struct Tool {
    name: String,
    call_id: Option<String>,
    emitted: Option<i64>,
    result: Option<i64>,
    /// Wall latency, else the runner's internal one (ms).
    latency_ms: Option<f64>,
}

/// One round (LLM call).
struct Round {
    file: usize,
    line: Option<u64>,
    round_index: u64,
    provider: Option<String>,
    model: Option<String>,
    input: u64,
    prefix: Option<u64>,
    output: u64,
    /// Input ready: the last user message or tool result before the first output event.
    start: Option<i64>,
    /// The last output event.
    end: Option<i64>,
    /// The first event of any kind.
    first_event: Option<i64>,
    tools: Vec<Tool>,
    /// Tool-call ids whose results this round reads.
    results: Vec<String>,
}

fn parse_row(v: &Value, at: &str) -> Result<(String, Round), String> {
    let obj = as_object(v, if at.is_empty() { "line" } else { at })?;
    let session_id = match obj.get("session_id") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        None | Some(Value::Null) => return Err(format!("{}: missing", at_key(at, "session_id"))),
        Some(v) => {
            return Err(format!(
                "{}: expected a non-empty string, found {}",
                at_key(at, "session_id"),
                describe(v)
            ));
        }
    };
    let round_index = req_u64_at(obj, at, "round_index")?;
    let input = req_u64_at(obj, at, "input_tokens_total")?;
    let output = req_u64_at(obj, at, "output_tokens")?;
    for (k, v) in [("input_tokens_total", input), ("output_tokens", output)] {
        if v > MAX_TOKENS {
            return Err(format!(
                "{}: {v} is larger than the supported maximum ({MAX_TOKENS})",
                at_key(at, k)
            ));
        }
    }
    let prefix = opt_u64_at(obj, at, "prefix_tokens")?;
    let mut first_output: Option<i64> = None;
    let mut last_output: Option<i64> = None;
    let mut inputs: Vec<i64> = Vec::new();
    let mut first_event: Option<i64> = None;
    let mut results = Vec::new();
    let events_at = at_key(at, "timing_events");
    for (i, e) in opt_array_at(obj, at, "timing_events")?
        .into_iter()
        .flatten()
        .enumerate()
    {
        let here = format!("{events_at}[{i}]");
        let e = as_object(e, &here)?;
        let Some(ts) = opt_time_at(e, &here, "timestamp")? else {
            continue;
        };
        first_event = Some(first_event.map_or(ts, |f| f.min(ts)));
        match opt_str_at(e, &here, "event_type")?.unwrap_or("") {
            "user_message" => inputs.push(ts),
            "tool_result" => {
                inputs.push(ts);
                if let Some(id) = opt_str_at(e, &here, "tool_call_id")? {
                    results.push(id.to_string());
                }
            }
            "reasoning" | "text" | "tool_call" => {
                first_output = Some(first_output.map_or(ts, |f| f.min(ts)));
                last_output = Some(last_output.map_or(ts, |l| l.max(ts)));
            }
            _ => {}
        }
    }
    let start = inputs
        .iter()
        .copied()
        .filter(|&t| first_output.is_none_or(|f| t <= f))
        .max()
        .or(first_output);
    let end = last_output.or(start).map(|e| start.map_or(e, |s| e.max(s)));
    let tools_at = at_key(at, "tools");
    let mut tools = Vec::new();
    for (i, t) in opt_array_at(obj, at, "tools")?
        .into_iter()
        .flatten()
        .enumerate()
    {
        let here = format!("{tools_at}[{i}]");
        let t = as_object(t, &here)?;
        let wall = opt_f64_at(t, &here, "tool_wall_latency_ms")?;
        let internal = opt_f64_at(t, &here, "tool_internal_latency_ms")?;
        tools.push(Tool {
            name: opt_str_at(t, &here, "tool_name")?.unwrap_or("").to_string(),
            call_id: opt_str_at(t, &here, "tool_call_id")?.map(str::to_string),
            emitted: opt_time_at(t, &here, "emitted_at")?,
            result: opt_time_at(t, &here, "result_at")?,
            latency_ms: wall.or(internal).filter(|l| *l >= 0.0),
        });
    }
    Ok((
        session_id,
        Round {
            file: 0,
            line: None,
            round_index,
            provider: opt_str_at(obj, at, "provider")?.map(str::to_string),
            model: opt_str_at(obj, at, "model")?.map(str::to_string),
            input,
            prefix,
            output,
            start,
            end,
            first_event,
            tools,
            results,
        },
    ))
}

#[derive(Default)]
struct Rows {
    files: Vec<PathBuf>,
    /// Session ids in order of first appearance.
    order: Vec<String>,
    sessions: HashMap<String, Vec<Round>>,
}

impl Rows {
    fn add(&mut self, ctx: &mut Ctx<'_>, id: String, mut round: Round, line: Option<u64>) {
        round.file = self.files.len() - 1;
        round.line = line;
        ctx.mark_usable();
        let list = self.sessions.entry(id).or_insert_with_key(|id| {
            self.order.push(id.clone());
            Vec::new()
        });
        list.push(round);
    }
}

fn read_lines(
    ctx: &mut Ctx<'_>,
    rows: &mut Rows,
    path: &Path,
    reader: Box<dyn std::io::BufRead>,
) -> Result<(), ImportError> {
    for_each_json_line(
        ctx,
        path,
        reader,
        &mut |ctx, line, value| match parse_row(&value, "") {
            Ok((id, r)) => {
                rows.add(ctx, id, r, Some(line));
                Ok(Ok(()))
            }
            Err(m) => Ok(Err(m)),
        },
    )
}

fn read_file(ctx: &mut Ctx<'_>, rows: &mut Rows, path: &Path) -> Result<(), ImportError> {
    rows.files.push(path.to_path_buf());
    if is_jsonl(path) {
        return read_lines(ctx, rows, path, open(path)?);
    }
    match read_document(path)? {
        Document::Empty => Ok(()),
        Document::Invalid(e) => ctx.invalid(e),
        Document::Lines(bytes) => read_lines(ctx, rows, path, super::cursor(bytes)),
        Document::Json(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match parse_row(item, &format!("[{i}]")) {
                    Ok((id, r)) => rows.add(ctx, id, r, None),
                    Err(m) => ctx.invalid(ImportError::new(path, None, m))?,
                }
            }
            Ok(())
        }
        Document::Json(v) => match parse_row(&v, "") {
            Ok((id, r)) => {
                rows.add(ctx, id, r, None);
                Ok(())
            }
            Err(m) => ctx.invalid(ImportError::new(path, None, m)),
        },
    }
}

pub(crate) fn import(
    ctx: &mut Ctx<'_>,
    groups: &[(PathBuf, Vec<PathBuf>)],
) -> Result<(), ImportError> {
    let mut rows = Rows::default();
    for (input, paths) in groups {
        let before = ctx.usable;
        for path in paths {
            read_file(ctx, &mut rows, path)?;
        }
        if ctx.usable == before {
            return Err(no_sessions(input));
        }
    }
    for rounds in rows.sessions.values_mut() {
        // Stable: rounds with the same index keep their file order.
        rounds.sort_by_key(|r| r.round_index);
    }
    // Families: a session and the sessions named `<it>/subagents/...`.
    let mut children: HashMap<String, Vec<String>> = HashMap::new();
    let mut mains = Vec::new();
    for id in &rows.order {
        let parent = id
            .find(SUBAGENT_MARK)
            .map(|p| &id[..p])
            .filter(|p| rows.sessions.contains_key(*p));
        let timed = rows.sessions[id].iter().any(|r| r.start.is_some());
        match parent {
            Some(p) if timed => children.entry(p.to_string()).or_default().push(id.clone()),
            _ => {
                if id.contains(SUBAGENT_MARK) {
                    ctx.note(NoteKind::TracelabOrphan, 1);
                }
                mains.push(id.clone());
            }
        }
    }
    for id in mains {
        let kids = children.remove(&id).unwrap_or_default();
        let mut members = vec![(id.clone(), rows.sessions.remove(&id).unwrap_or_default())];
        for k in kids {
            let rounds = rows.sessions.remove(&k).unwrap_or_default();
            members.push((k, rounds));
        }
        let first = &members[0].1[0];
        let (file, line) = (rows.files[first.file].clone(), first.line);
        let session = family(ctx, members);
        ctx.emit(&file, line, session)?;
    }
    Ok(())
}

/// A member of a family: a session's rounds and where it hangs in the graph.
struct Member {
    session: String,
    name: String,
    rounds: Vec<Round>,
    fork: Option<(usize, usize)>,
}

fn span(rounds: &[Round]) -> Option<(i64, i64)> {
    let start = rounds
        .iter()
        .filter_map(|r| r.first_event.or(r.start))
        .min()?;
    let end = rounds.iter().filter_map(|r| r.end).max()?;
    Some((start, end))
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `tokens` one-token words unique to `key`.
fn filler(key: &str, tokens: u64) -> String {
    super::mooncake::block_text(mix(fnv1a(key)), tokens.min(u64::from(u32::MAX)) as u32)
}

/// Builds the session of a main session and its subagent sessions.
fn family(ctx: &mut Ctx<'_>, raw: Vec<(String, Vec<Round>)>) -> TraceSession {
    let mut taken = HashSet::from([MAIN_AGENT.to_string()]);
    let mut members: Vec<Member> = raw
        .into_iter()
        .enumerate()
        .map(|(k, (session, rounds))| Member {
            name: if k == 0 {
                MAIN_AGENT.to_string()
            } else {
                let own = session.rsplit(SUBAGENT_MARK).next().unwrap_or(&session);
                agent_id(own, &mut taken)
            },
            session,
            rounds,
            fork: None,
        })
        .collect();
    // Place each subagent in the spawn call that spans it (the one whose result comes
    // soonest after its last output), earliest-ending subagent first.
    let mut by_end: Vec<usize> = (1..members.len()).collect();
    by_end.sort_by_key(|&k| span(&members[k].rounds).map(|s| s.1));
    let mut claimed: HashSet<(usize, usize, usize)> = HashSet::new();
    let mut parent_of: Vec<Option<usize>> = vec![None; members.len()];
    // (member, round) → joins to add: (member, round) of each subagent's last round.
    let mut joins: HashMap<(usize, usize), Vec<(usize, usize)>> = HashMap::new();
    let mut spawn_calls: HashSet<(usize, usize, usize)> = HashSet::new();
    let mut unmatched = 0;
    for &k in &by_end {
        let Some((c_start, c_end)) = span(&members[k].rounds) else {
            continue;
        };
        let mut best: Option<((usize, usize, usize), i64)> = None;
        for (m, member) in members.iter().enumerate() {
            // No member may end up inside itself.
            let mut up = Some(m);
            let mut cyclic = false;
            while let Some(u) = up {
                if u == k {
                    cyclic = true;
                    break;
                }
                up = parent_of[u];
            }
            if cyclic {
                continue;
            }
            for (r, round) in member.rounds.iter().enumerate() {
                for (t, tool) in round.tools.iter().enumerate() {
                    let (Some(e), Some(res)) = (tool.emitted, tool.result) else {
                        continue;
                    };
                    if !SPAWN_TOOLS.contains(&tool.name.as_str())
                        || claimed.contains(&(m, r, t))
                        || e > c_start
                        || res < c_end
                    {
                        continue;
                    }
                    if best.is_none_or(|(_, d)| res - c_end < d) {
                        best = Some(((m, r, t), res - c_end));
                    }
                }
            }
        }
        let last = (k, members[k].rounds.len() - 1);
        match best {
            Some(((m, r, t), _)) => {
                claimed.insert((m, r, t));
                spawn_calls.insert((m, r, t));
                parent_of[k] = Some(m);
                members[k].fork = Some((m, r));
                let call_id = members[m].rounds[r].tools[t].call_id.clone();
                let reader = members[m]
                    .rounds
                    .iter()
                    .enumerate()
                    .skip(r + 1)
                    .find(|(_, later)| {
                        call_id
                            .as_ref()
                            .is_some_and(|id| later.results.iter().any(|x| x == id))
                    })
                    .map(|(j, _)| j)
                    .or_else(|| (r + 1 < members[m].rounds.len()).then_some(r + 1));
                if let Some(j) = reader {
                    joins.entry((m, j)).or_default().push(last);
                }
            }
            None => {
                unmatched += 1;
                let main = &members[0].rounds;
                let fork = (0..main.len())
                    .filter(|&r| main[r].end.is_some_and(|e| e <= c_start))
                    .max_by_key(|&r| (main[r].end, r))
                    .unwrap_or(0);
                parent_of[k] = Some(0);
                members[k].fork = Some((0, fork));
            }
        }
    }
    ctx.note(NoteKind::TracelabUnmatched, unmatched);

    // A fresh conversation's system prompt: the model's (one text per model, so branches and
    // sessions of one model share it), as long as the most any first round of the family
    // with that model read from the cache.
    let mut system_len: HashMap<Option<&str>, u64> = HashMap::new();
    for m in &members {
        let r = &m.rounds[0];
        let e = system_len.entry(r.model.as_deref()).or_insert(0);
        *e = (*e).max(r.prefix.unwrap_or(0));
    }
    let t0 = members
        .iter()
        .flat_map(|m| &m.rounds)
        .filter_map(|r| r.start)
        .min();
    let name = |(m, r): (usize, usize)| format!("{}:{r}", members[m].name);
    let mut untimed = 0;
    let mut built: Vec<(Option<String>, Vec<TraceTurn>)> = Vec::with_capacity(members.len());
    for (mi, member) in members.iter().enumerate() {
        let mut system_prompt = None;
        let mut turns = Vec::with_capacity(member.rounds.len());
        // The previous round's prompt as replayed (it may exceed the recorded one).
        let mut replayed = 0u64;
        for (r, round) in member.rounds.iter().enumerate() {
            let joined = joins.get(&(mi, r)).cloned().unwrap_or_default();
            let joined_out: u64 = joined
                .iter()
                .map(|&(m, j)| members[m].rounds[j].output)
                .sum();
            let key = format!("tracelab\u{1}{}\u{1}{r}", member.session);
            let mut input_delta = Vec::new();
            let new_tokens = if r == 0 {
                let model = round.model.as_deref();
                let len = system_len.get(&model).copied().unwrap_or(0);
                let len = len.min(round.input.saturating_sub(1));
                if len > 0 {
                    let seed = format!("tracelab-system\u{1}{}", model.unwrap_or(""));
                    system_prompt = Some(filler(&seed, len));
                }
                replayed = round.input;
                round.input - len
            } else {
                let context = replayed + member.rounds[r - 1].output + joined_out;
                let d = new_input_tokens(ctx, round.input, context);
                replayed = context + d;
                d
            };
            if new_tokens > 0 {
                input_delta.push(Message {
                    role: "user".to_string(),
                    content: filler(&format!("{key}\u{1}in"), new_tokens),
                    tool_call_id: None,
                });
            }
            // Its dependencies: the previous round (or the fork node), then the joined ones.
            let pred = if r > 0 {
                Some((mi, r - 1))
            } else {
                member.fork
            };
            let deps: Vec<(usize, usize)> =
                pred.into_iter().chain(joined.iter().copied()).collect();
            let ends: Option<Vec<i64>> = deps
                .iter()
                .map(|&(m, j)| members[m].rounds[j].end)
                .collect();
            let pre_gap_ms = match (round.start, ends) {
                _ if deps.is_empty() => 0.0,
                (Some(s), Some(ends)) => gap_ms(ends.iter().copied().max().unwrap_or(s), s),
                _ => {
                    untimed += 1;
                    // The longest of the previous round's tool calls that ran no subagent
                    // (parallel calls overlap: the wait is the longest, not the sum).
                    match (r, joined.is_empty()) {
                        (1.., true) => member.rounds[r - 1]
                            .tools
                            .iter()
                            .enumerate()
                            .filter(|(t, _)| !spawn_calls.contains(&(mi, r - 1, *t)))
                            .filter_map(|(_, t)| t.latency_ms)
                            .fold(0.0, f64::max),
                        _ => 0.0,
                    }
                }
            };
            let mut turn = TraceTurn::new(
                r as u32,
                input_delta,
                filler(&format!("{key}\u{1}out"), round.output),
            );
            turn.input_tokens = Some(round.input);
            turn.output_tokens = Some(round.output);
            turn.cached_tokens = round.prefix;
            turn.pre_gap_ms = Some(pre_gap_ms);
            turn.timestamp_ms = round.start.zip(t0).map(|(s, t0)| gap_ms(t0, s));
            turn.after = joined.iter().map(|&j| name(j)).collect();
            turns.push(turn);
        }
        built.push((system_prompt, turns));
    }
    ctx.note(NoteKind::TracelabUntimed, untimed);
    let mut built = built.into_iter();
    let (system_prompt, main_turns) = built.next().unwrap_or_default();
    let mut subagents: Vec<(Option<i64>, Subagent)> = members
        .iter()
        .skip(1)
        .zip(built)
        .map(|(m, (system_prompt, turns))| {
            (
                m.rounds[0].start,
                Subagent {
                    agent_id: m.name.clone(),
                    after: m.fork.map(name).unwrap_or_default(),
                    context: SubagentContext::Fresh,
                    subagent_type: None,
                    system_prompt,
                    turns,
                },
            )
        })
        .collect();
    subagents.sort_by_key(|(s, _)| *s);
    let main = &members[0].rounds[0];
    TraceSession {
        session_id: members[0].session.clone(),
        source: Some(Source {
            dataset: Some("tracelab".to_string()),
            agent: main.provider.clone(),
            model: main.model.clone(),
            ..Source::default()
        }),
        system_prompt,
        turns: main_turns,
        tools: None,
        subagents: subagents.into_iter().map(|(_, s)| s).collect(),
    }
}
