//! Weka / kv-cache-tester agent traces (the `cc-traces` corpora): one trace object per `.json`
//! file (or per JSONL line), `{"id", "block_size", "hash_id_scope", "tool_tokens",
//! "system_tokens", "requests": [...]}`. A request item is a call (`"type": "n"` or `"s"`, with
//! `t`, `in`, `out`, `hash_ids`, `api_time`, `think_time`) or a subagent (`"type": "subagent"`
//! with its own `requests`), in time order.
//!
//! The graph is the one the format states: the call just before one or more consecutive
//! subagent items forks them, and the next call of the same agent joins the ones that
//! completed (an `async_launched` subagent runs in the background and nothing joins it).
//! Subagents nest. There is no text: prompts are made from the KV-block hash ids the way the
//! Mooncake importer makes them ([`super::mooncake::block_text`]), so equal ids give equal text
//! and every prompt is exactly `in` tokens of one-token words.

use std::collections::HashSet;
use std::path::Path;

use serde_json::{Map, Value};

use super::{
    Ctx, Document, ImportError, NoteKind, agent_id, at_key, cursor, describe, file_stem,
    for_each_json_line, is_jsonl, new_input_tokens, open, opt_array_at, opt_f64_at, opt_str_at,
    opt_u64_at, read_document, req_u64_at,
};
use crate::format::{
    MAIN_AGENT, Message, Source, Subagent, SubagentContext, TraceSession, TraceTurn,
};

/// Largest accepted `in` (tokens), as for Mooncake's `input_length`.
const MAX_INPUT_TOKENS: u64 = 1 << 24;
/// Tokens per block when `block_size` is missing or 0 (as inference-perf).
const DEFAULT_BLOCK: u64 = 64;
/// A subagent whose first call's `t` is below this (seconds) and below the item's `t` uses
/// times relative to its own start (clock convention B).
const RELATIVE_FIRST_T_S: f64 = 1.0;

/// One recorded call.
struct Call {
    /// `t` as written (seconds; relative to its subagent's start under convention B).
    t: f64,
    /// Start on the conversation clock, seconds.
    start_s: f64,
    api_s: f64,
    think_s: Option<f64>,
    model: Option<String>,
    input: u64,
    output: u64,
    hash_ids: Vec<u64>,
}

impl Call {
    fn end_s(&self) -> f64 {
        self.start_s + self.api_s
    }
}

/// One subagent item.
struct SubItem {
    agent_id: String,
    subagent_type: Option<String>,
    t: f64,
    duration_ms: Option<f64>,
    background: bool,
    /// `tool_tokens + system_tokens`: its own system prompt's size.
    prefix_tokens: u64,
    items: Vec<Item>,
}

enum Item {
    Call(Call),
    Sub(SubItem),
}

impl Item {
    fn t(&self) -> f64 {
        match self {
            Item::Call(c) => c.t,
            Item::Sub(s) => s.t,
        }
    }
}

struct Trace {
    id: Option<String>,
    block: u64,
    global: bool,
    prefix_tokens: u64,
    model: Option<String>,
    items: Vec<Item>,
}

fn object<'v>(v: &'v Value, at: &str, what: &str) -> Result<&'v Map<String, Value>, String> {
    v.as_object().ok_or_else(|| {
        let at = if at.is_empty() { what } else { at };
        format!("{at}: expected an object, found {}", describe(v))
    })
}

fn parse_trace(v: &Value, at: &str) -> Result<Trace, String> {
    let obj = object(v, at, "trace")?;
    let here = |k: &str| at_key(at, k);
    let id = match obj.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        Some(v) => {
            return Err(format!(
                "{}: expected a non-empty string or an integer, found {}",
                here("id"),
                describe(v)
            ));
        }
    };
    let block = match opt_u64_at(obj, at, "block_size")? {
        None | Some(0) => DEFAULT_BLOCK,
        Some(b) if b > u64::from(u32::MAX) => {
            return Err(format!(
                "{}: {b} is not a plausible block size",
                here("block_size")
            ));
        }
        Some(b) => b,
    };
    let global = match opt_str_at(obj, at, "hash_id_scope")? {
        None | Some("local") => false,
        Some("global") => true,
        Some(other) => {
            return Err(format!(
                "{}: expected \"local\" or \"global\", found {other:?}",
                here("hash_id_scope")
            ));
        }
    };
    let prefix_tokens = opt_u64_at(obj, at, "tool_tokens")?
        .unwrap_or(0)
        .saturating_add(opt_u64_at(obj, at, "system_tokens")?.unwrap_or(0));
    let model = opt_array_at(obj, at, "models")?
        .and_then(|m| m.first())
        .and_then(Value::as_str)
        .map(str::to_string);
    let requests = opt_array_at(obj, at, "requests")?
        .ok_or_else(|| format!("{}: missing", here("requests")))?;
    let items = parse_items(requests, &here("requests"))?;
    Ok(Trace {
        id,
        block,
        global,
        prefix_tokens,
        model,
        items,
    })
}

fn parse_items(arr: &[Value], at: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::with_capacity(arr.len());
    for (i, v) in arr.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let obj = object(v, &at, "request")?;
        let kind = opt_str_at(obj, &at, "type")?
            .ok_or_else(|| format!("{}: missing", at_key(&at, "type")))?;
        let t =
            opt_f64_at(obj, &at, "t")?.ok_or_else(|| format!("{}: missing", at_key(&at, "t")))?;
        if t < 0.0 {
            return Err(format!(
                "{}: must not be negative, found {t}",
                at_key(&at, "t")
            ));
        }
        items.push(match kind {
            "n" | "s" => Item::Call(parse_call(obj, &at, t)?),
            "subagent" => Item::Sub(parse_sub(obj, &at, t)?),
            other => {
                return Err(format!(
                    "{}: expected \"n\", \"s\" or \"subagent\", found {other:?}",
                    at_key(&at, "type")
                ));
            }
        });
    }
    Ok(items)
}

fn parse_call(obj: &Map<String, Value>, at: &str, t: f64) -> Result<Call, String> {
    let input = req_u64_at(obj, at, "in")?;
    if input > MAX_INPUT_TOKENS {
        return Err(format!(
            "{}: {input} is larger than the supported maximum ({MAX_INPUT_TOKENS})",
            at_key(at, "in")
        ));
    }
    let output = req_u64_at(obj, at, "out")?;
    if output > MAX_INPUT_TOKENS {
        return Err(format!(
            "{}: {output} is larger than the supported maximum ({MAX_INPUT_TOKENS})",
            at_key(at, "out")
        ));
    }
    let ids = opt_array_at(obj, at, "hash_ids")?
        .ok_or_else(|| format!("{}: missing", at_key(at, "hash_ids")))?;
    let mut hash_ids = Vec::with_capacity(ids.len());
    for (i, v) in ids.iter().enumerate() {
        hash_ids.push(v.as_u64().ok_or_else(|| {
            format!(
                "{}[{i}]: expected a non-negative integer, found {}",
                at_key(at, "hash_ids"),
                describe(v)
            )
        })?);
    }
    let api_s = opt_f64_at(obj, at, "api_time")?.unwrap_or(0.0);
    if api_s < 0.0 {
        return Err(format!(
            "{}: must not be negative, found {api_s}",
            at_key(at, "api_time")
        ));
    }
    let think_s = opt_f64_at(obj, at, "think_time")?.filter(|s| *s >= 0.0);
    Ok(Call {
        t,
        start_s: t,
        api_s,
        think_s,
        model: opt_str_at(obj, at, "model")?.map(str::to_string),
        input,
        output,
        hash_ids,
    })
}

fn parse_sub(obj: &Map<String, Value>, at: &str, t: f64) -> Result<SubItem, String> {
    let agent_id = opt_str_at(obj, at, "agent_id")?
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            format!(
                "{}: missing (a subagent needs its id)",
                at_key(at, "agent_id")
            )
        })?
        .to_string();
    let duration_ms = opt_f64_at(obj, at, "duration_ms")?;
    if let Some(d) = duration_ms.filter(|d| *d < 0.0) {
        return Err(format!(
            "{}: must not be negative, found {d}",
            at_key(at, "duration_ms")
        ));
    }
    let background = opt_str_at(obj, at, "status")? == Some("async_launched");
    let prefix_tokens = opt_u64_at(obj, at, "tool_tokens")?
        .unwrap_or(0)
        .saturating_add(opt_u64_at(obj, at, "system_tokens")?.unwrap_or(0));
    let requests = opt_array_at(obj, at, "requests")?
        .ok_or_else(|| format!("{}: missing", at_key(at, "requests")))?;
    Ok(SubItem {
        agent_id,
        subagent_type: opt_str_at(obj, at, "subagent_type")?.map(str::to_string),
        t,
        duration_ms,
        background,
        prefix_tokens,
        items: parse_items(requests, &at_key(at, "requests"))?,
    })
}

/// Puts every call on the conversation clock. `base` is the start of the frame the items'
/// `t` count from (0 for the main agent). A subagent whose items all start before the item's
/// own `t`, the first about 0, counts them from its own start (convention B: `t` is the
/// completion time, the start `t − duration_ms`); otherwise they share its parent's frame.
fn place(ctx: &mut Ctx<'_>, items: &mut [Item], base: f64) {
    for item in items {
        match item {
            Item::Call(c) => c.start_s = base + c.t,
            Item::Sub(s) => {
                let first = s.items.iter().map(Item::t).fold(f64::INFINITY, f64::min);
                let relative = !s.items.is_empty()
                    && s.items.iter().all(|i| i.t() < s.t)
                    && first < RELATIVE_FIRST_T_S;
                let inner = if relative {
                    ctx.note(NoteKind::CcRelativeClock, 1);
                    base + s.t - s.duration_ms.map_or(0.0, |d| d / 1000.0)
                } else {
                    base
                };
                place(ctx, &mut s.items, inner);
            }
        }
    }
}

/// A node: a call, and the nodes (branch, turn) it joins.
struct Node {
    call: Call,
    joins: Vec<(usize, usize)>,
}

struct Branch {
    agent_id: String,
    subagent_type: Option<String>,
    fork: Option<(usize, usize)>,
    prefix_tokens: u64,
    nodes: Vec<Node>,
}

struct Graph {
    branches: Vec<Branch>,
    taken: HashSet<String>,
}

impl Graph {
    /// Appends `items` to branch `b`; `fallback` is the node a subagent forks from when `b`
    /// has no call yet. Returns the ends of completed subagents that no later call of `b`
    /// joined (their parent's joiner waits for them).
    fn walk(
        &mut self,
        ctx: &mut Ctx<'_>,
        items: Vec<Item>,
        b: usize,
        fallback: Option<(usize, usize)>,
    ) -> Vec<(usize, usize)> {
        let mut waiting = Vec::new();
        for item in items {
            match item {
                Item::Call(call) => {
                    let joins = std::mem::take(&mut waiting);
                    self.branches[b].nodes.push(Node { call, joins });
                }
                Item::Sub(s) => {
                    let last = self.branches[b].nodes.len().checked_sub(1);
                    let Some(fork) = last.map(|t| (b, t)).or(fallback) else {
                        ctx.note(NoteKind::SubagentNoFork, 1);
                        continue;
                    };
                    if !s.items.iter().any(|i| matches!(i, Item::Call(_))) {
                        ctx.note(NoteKind::SubagentEmpty, 1);
                        continue;
                    }
                    let k = self.branches.len();
                    self.branches.push(Branch {
                        agent_id: agent_id(&s.agent_id, &mut self.taken),
                        subagent_type: s.subagent_type,
                        fork: Some(fork),
                        prefix_tokens: s.prefix_tokens,
                        nodes: Vec::new(),
                    });
                    let inner = self.walk(ctx, s.items, k, Some(fork));
                    if s.background {
                        ctx.note(NoteKind::SubagentBackground, 1);
                    } else {
                        waiting.push((k, self.branches[k].nodes.len() - 1));
                        waiting.extend(inner);
                    }
                }
            }
        }
        waiting
    }

    fn node(&self, (b, t): (usize, usize)) -> &Node {
        &self.branches[b].nodes[t]
    }

    fn name(&self, (b, t): (usize, usize)) -> String {
        format!("{}:{t}", self.branches[b].agent_id)
    }
}

/// SplitMix64's finalizer: a bijective mix of 64 bits.
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

/// Appends words `from..to` of the block text of `id` (each word one token).
fn push_words(out: &mut String, id: u64, from: u64, to: u64) {
    if to <= from {
        return;
    }
    let text = super::mooncake::block_text(id, to as u32);
    // Every word is one space and letters: word `from` starts at the `from`-th space.
    let start = text
        .match_indices(' ')
        .nth(from as usize)
        .map_or(text.len(), |(i, _)| i);
    out.push_str(&text[start..]);
}

/// Makes the text of one trace's prompts.
struct Texts<'g> {
    graph: &'g Graph,
    block: u64,
    global: bool,
    /// Seeds the trace-local block ids and the filler.
    scope: u64,
}

const TAIL: u64 = 1;
const ANSWER: u64 = 2;

impl Texts<'_> {
    fn block_id(&self, raw: u64) -> u64 {
        if self.global {
            raw
        } else {
            mix(self.scope ^ mix(raw))
        }
    }

    /// Filler unique to node `t` of branch `b` (`tag`: its prompt's tail or its answer).
    fn filler_id(&self, b: usize, t: usize, tag: u64) -> u64 {
        let agent = fnv1a(&self.graph.branches[b].agent_id);
        mix(self.scope ^ mix(agent ^ mix(((t as u64) << 2) | tag)))
    }

    /// Tokens `a..z` of the prompt of node `t` of branch `b`: token `j` is word `j mod B` of
    /// block `hash_ids[j / B]`. Past its blocks, the text continues as the next call of the
    /// branch has it when that call extends this one (so the next prompt repeats this one),
    /// else as filler unique to the call.
    fn render(&self, b: usize, mut t: usize, a: u64, z: u64, out: &mut String) {
        let nodes = &self.graph.branches[b].nodes;
        let mut j = a;
        while j < z {
            let call = &nodes[t].call;
            let blk = j / self.block;
            if let Some(&raw) = call.hash_ids.get(blk as usize) {
                let end = z.min((blk + 1) * self.block);
                let base = blk * self.block;
                push_words(out, self.block_id(raw), j - base, end - base);
                j = end;
            } else if nodes
                .get(t + 1)
                .is_some_and(|next| next.call.hash_ids.starts_with(&call.hash_ids))
            {
                t += 1;
            } else {
                let base = call.hash_ids.len() as u64 * self.block;
                push_words(out, self.filler_id(b, t, TAIL), j - base, z - base);
                j = z;
            }
        }
    }

    /// The answer of node `t` of branch `b`: what the next call's prompt holds after this
    /// one's when it extends it, else filler; `out` tokens either way.
    fn answer(&self, b: usize, t: usize) -> String {
        let nodes = &self.graph.branches[b].nodes;
        let call = &nodes[t].call;
        let mut out = String::with_capacity(call.output as usize * 6);
        match nodes.get(t + 1) {
            Some(next) if next.call.hash_ids.starts_with(&call.hash_ids) => {
                self.render(b, t + 1, call.input, call.input + call.output, &mut out);
            }
            _ => push_words(&mut out, self.filler_id(b, t, ANSWER), 0, call.output),
        }
        out
    }
}

fn user(content: String) -> Message {
    Message {
        role: "user".to_string(),
        content,
        tool_call_id: None,
    }
}

/// Milliseconds, rounded to the microsecond.
fn ms(seconds: f64) -> f64 {
    (seconds * 1e6).round() / 1e3
}

fn build(ctx: &mut Ctx<'_>, mut trace: Trace, session_id: String) -> TraceSession {
    place(ctx, &mut trace.items, 0.0);
    let mut graph = Graph {
        branches: vec![Branch {
            agent_id: MAIN_AGENT.to_string(),
            subagent_type: None,
            fork: None,
            prefix_tokens: trace.prefix_tokens,
            nodes: Vec::new(),
        }],
        taken: HashSet::from([MAIN_AGENT.to_string()]),
    };
    graph.walk(ctx, std::mem::take(&mut trace.items), 0, None);
    let extra_blocks = graph
        .branches
        .iter()
        .flat_map(|b| &b.nodes)
        .filter(|n| n.call.hash_ids.len() as u64 > n.call.input.div_ceil(trace.block))
        .count();
    ctx.note(NoteKind::CcExtraBlocks, extra_blocks as u64);
    let texts = Texts {
        graph: &graph,
        block: trace.block,
        global: trace.global,
        scope: fnv1a(&session_id),
    };
    let t0 = graph
        .branches
        .iter()
        .flat_map(|b| &b.nodes)
        .map(|n| n.call.start_s)
        .fold(f64::INFINITY, f64::min);

    let mut system_prompt = None;
    let mut main_turns = Vec::new();
    let mut subagents = Vec::new();
    // Per branch and turn: the prompt's size as replayed (text tokens). A fork node's branch
    // comes before the branches it forks.
    let mut replayed: Vec<Vec<u64>> = Vec::with_capacity(graph.branches.len());
    for (b, branch) in graph.branches.iter().enumerate() {
        replayed.push(Vec::with_capacity(branch.nodes.len()));
        // Where the branch's conversation starts: the fork node's (when the first call's
        // blocks start with all of the fork node's), else its own system prompt.
        let fork_ctx = branch.fork.filter(|&f| {
            let parent = &graph.node(f).call.hash_ids;
            !parent.is_empty() && branch.nodes[0].call.hash_ids.starts_with(parent)
        });
        let mut own_system = None;
        let mut turns = Vec::with_capacity(branch.nodes.len());
        for (t, node) in branch.nodes.iter().enumerate() {
            let call = &node.call;
            let joined: u64 = node.joins.iter().map(|&j| graph.node(j).call.output).sum();
            // The context the replay sends before this turn's new input: the previous
            // prompt as replayed (which may exceed the recorded one), its answer and the
            // joined answers; what is left of the recorded prompt is new.
            let prev = match t {
                0 => fork_ctx,
                _ => Some((b, t - 1)),
            };
            let mut input_delta = Vec::new();
            match prev {
                Some(p) => {
                    let context = replayed[p.0][p.1] + graph.node(p).call.output + joined;
                    let d = new_input_tokens(ctx, call.input, context);
                    if d > 0 {
                        let mut text = String::with_capacity(d as usize * 6);
                        texts.render(b, t, call.input - d, call.input, &mut text);
                        input_delta.push(user(text));
                    }
                    replayed[b].push(context + d);
                }
                None => {
                    let split = branch.prefix_tokens.min(call.input);
                    let split = if split < call.input { split } else { 0 };
                    if split > 0 {
                        let mut text = String::with_capacity(split as usize * 6);
                        texts.render(b, t, 0, split, &mut text);
                        own_system = Some(text);
                    }
                    if call.input > split {
                        let mut text = String::with_capacity((call.input - split) as usize * 6);
                        texts.render(b, t, split, call.input, &mut text);
                        input_delta.push(user(text));
                    }
                    replayed[b].push(call.input);
                }
            }
            // The wait: a chain turn's recorded think time, else from the end of the last of
            // its dependencies (the previous call or the fork node, and the joined ones).
            let pre_gap_ms = if b == 0 && t == 0 {
                0.0
            } else {
                match (t, node.joins.is_empty(), call.think_s) {
                    (1.., true, Some(think)) => ms(think),
                    _ => {
                        let dep = if t > 0 {
                            (b, t - 1)
                        } else {
                            branch.fork.unwrap_or((0, 0))
                        };
                        let released = std::iter::once(dep)
                            .chain(node.joins.iter().copied())
                            .map(|d| graph.node(d).call.end_s())
                            .fold(f64::NEG_INFINITY, f64::max);
                        ms((call.start_s - released).max(0.0))
                    }
                }
            };
            let mut turn = TraceTurn::new(t as u32, input_delta, texts.answer(b, t));
            turn.input_tokens = Some(call.input);
            turn.output_tokens = Some(call.output);
            turn.pre_gap_ms = Some(pre_gap_ms);
            turn.timestamp_ms = Some(ms(call.start_s - t0));
            turn.after = node.joins.iter().map(|&j| graph.name(j)).collect();
            turns.push(turn);
        }
        if b == 0 {
            system_prompt = own_system;
            main_turns = turns;
        } else {
            let fork = branch.fork.unwrap_or((0, 0));
            subagents.push(Subagent {
                agent_id: branch.agent_id.clone(),
                after: graph.name(fork),
                context: if fork_ctx.is_some() {
                    SubagentContext::Fork
                } else {
                    SubagentContext::Fresh
                },
                subagent_type: branch.subagent_type.clone(),
                system_prompt: own_system,
                turns,
            });
        }
    }
    let model = graph.branches[0].nodes[0]
        .call
        .model
        .clone()
        .or(trace.model);
    TraceSession {
        session_id,
        source: Some(Source {
            dataset: Some("cc-traces".to_string()),
            model,
            ..Source::default()
        }),
        system_prompt,
        turns: main_turns,
        tools: None,
        subagents,
    }
}

/// Parses and builds one trace; `at` prefixes paths in errors (`[3]` inside an array).
fn session(
    ctx: &mut Ctx<'_>,
    v: &Value,
    at: &str,
    default_id: String,
) -> Result<TraceSession, String> {
    let trace = parse_trace(v, at)?;
    if !trace.items.iter().any(|i| matches!(i, Item::Call(_))) {
        return Err(format!(
            "{}: the main agent makes no call",
            at_key(at, "requests")
        ));
    }
    let id = trace.id.clone().unwrap_or(default_id);
    Ok(build(ctx, trace, id))
}

fn import_lines(
    ctx: &mut Ctx<'_>,
    path: &Path,
    reader: Box<dyn std::io::BufRead>,
    stem: &str,
) -> Result<(), ImportError> {
    let mut index = 0usize;
    for_each_json_line(ctx, path, reader, &mut |ctx, line, value| {
        let default_id = format!("{stem}-{index}");
        index += 1;
        match session(ctx, &value, "", default_id) {
            Ok(s) => {
                ctx.emit(path, Some(line), s)?;
                Ok(Ok(()))
            }
            Err(m) => Ok(Err(m)),
        }
    })
}

pub(crate) fn import_file(ctx: &mut Ctx<'_>, path: &Path) -> Result<(), ImportError> {
    let stem = file_stem(path);
    if is_jsonl(path) {
        return import_lines(ctx, path, open(path)?, &stem);
    }
    match read_document(path)? {
        Document::Empty => Ok(()),
        Document::Invalid(e) => ctx.invalid(e),
        Document::Lines(bytes) => import_lines(ctx, path, cursor(bytes), &stem),
        Document::Json(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match session(ctx, item, &format!("[{i}]"), format!("{stem}-{i}")) {
                    Ok(s) => ctx.emit(path, None, s)?,
                    Err(m) => ctx.invalid(ImportError::new(path, None, m))?,
                }
            }
            Ok(())
        }
        Document::Json(value) => match session(ctx, &value, "", stem) {
            Ok(s) => ctx.emit(path, None, s),
            Err(m) => ctx.invalid(ImportError::new(path, None, m)),
        },
    }
}
