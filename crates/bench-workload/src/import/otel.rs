//! OpenTelemetry GenAI spans in the flat layout inference-perf reads: one JSON object per
//! session, `{"trace_id", "spans": [{"span_id", "parent_span_id", "name", "start_time",
//! "end_time", "attributes": {"gen_ai.operation.name", "gen_ai.input.messages", ...}}]}`.
//!
//! Chat spans become turns. Their dependencies come from the structure: the messages a call
//! repeats (an earlier call's output, its tool-call ids, the responses to them), the
//! `invoke_agent` span each call runs under (its agent), and the `execute_tool` span an agent
//! runs inside (the call that asked for that tool forks it; the call that reads the tool's
//! response joins it). Calls with a common predecessor that no later call of the same branch
//! continues become parallel branches.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{
    Ctx, Document, ImportError, NoteKind, agent_id, as_object, at_key, content_text, cursor,
    describe, file_stem, for_each_json_line, gap_ms, is_jsonl, open, opt_array_at, opt_str_at,
    opt_time_at, read_document,
};
use crate::format::{
    MAIN_AGENT, Message, Source, Subagent, SubagentContext, TraceSession, TraceTurn,
};

/// One message, normalised from either the semantic conventions' `parts` form or the OpenAI
/// form, so that a call's output and its copy in a later input compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Msg {
    role: String,
    /// The text parts, joined by newlines.
    text: String,
    calls: Vec<ToolCall>,
    /// Tool-call responses: the call id (when given) and the response as text.
    responses: Vec<(Option<String>, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ToolCall {
    id: Option<String>,
    name: String,
    /// The arguments as JSON text (a string argument as written).
    arguments: String,
}

impl Msg {
    fn is_empty(&self) -> bool {
        self.text.is_empty() && self.calls.is_empty() && self.responses.is_empty()
    }
}

fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn opt_string(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads one message (`at` names it in errors); non-text parts that carry nothing a replay
/// sends (reasoning, blobs, files) are counted in `dropped`.
fn message(v: &Value, at: &str, dropped: &mut u64) -> Result<Msg, String> {
    let m = as_object(v, at)?;
    let role = match m.get("role") {
        Some(Value::String(s)) => match s.trim().to_lowercase().as_str() {
            "developer" => "system".to_string(),
            r => r.to_string(),
        },
        Some(v) => {
            return Err(format!(
                "{}: expected a string, found {}",
                at_key(at, "role"),
                describe(v)
            ));
        }
        None => return Err(format!("{}: missing", at_key(at, "role"))),
    };
    let mut msg = Msg {
        role,
        text: String::new(),
        calls: Vec::new(),
        responses: Vec::new(),
    };
    let mut texts: Vec<String> = Vec::new();
    if let Some(parts) = opt_array_at(m, at, "parts")? {
        for (i, p) in parts.iter().enumerate() {
            let here = format!("{}[{i}]", at_key(at, "parts"));
            let p = as_object(p, &here)?;
            match p.get("type").and_then(Value::as_str) {
                Some("text") => match p.get("content") {
                    Some(Value::String(s)) => texts.push(s.clone()),
                    None | Some(Value::Null) => {}
                    Some(v) => {
                        return Err(format!(
                            "{}: expected a string, found {}",
                            at_key(&here, "content"),
                            describe(v)
                        ));
                    }
                },
                Some("tool_call") => msg.calls.push(ToolCall {
                    id: opt_string(p.get("id")),
                    name: p.get("name").map(json_text).unwrap_or_default(),
                    arguments: p.get("arguments").map(json_text).unwrap_or_default(),
                }),
                Some("tool_call_response") => msg.responses.push((
                    opt_string(p.get("id")),
                    p.get("response")
                        .or_else(|| p.get("result"))
                        .map(json_text)
                        .unwrap_or_default(),
                )),
                _ => *dropped += 1,
            }
        }
    } else {
        let (text, d) = content_text(m.get("content"), &at_key(at, "content"))?;
        *dropped += d;
        if msg.role == "tool" {
            msg.responses
                .push((opt_string(m.get("tool_call_id")), text));
        } else if !text.is_empty() {
            texts.push(text);
        }
        if let Some(calls) = opt_array_at(m, at, "tool_calls")? {
            for c in calls {
                let f = c.get("function");
                msg.calls.push(ToolCall {
                    id: opt_string(c.get("id")),
                    name: f
                        .and_then(|f| f.get("name"))
                        .map(json_text)
                        .unwrap_or_default(),
                    arguments: f
                        .and_then(|f| f.get("arguments"))
                        .map(json_text)
                        .unwrap_or_default(),
                });
            }
        }
    }
    msg.text = texts.join("\n");
    Ok(msg)
}

/// A message list attribute: a list, or a JSON string holding one.
fn messages(
    attrs: &Map<String, Value>,
    at: &str,
    key: &str,
    dropped: &mut u64,
) -> Result<Option<Vec<Msg>>, String> {
    let here = at_key(at, key);
    let parsed;
    let items = match attrs.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(Value::String(s)) => {
            parsed = serde_json::from_str::<Value>(s)
                .map_err(|e| format!("{here}: the string is not valid JSON ({e})"))?;
            match &parsed {
                Value::Array(a) => a,
                other => {
                    return Err(format!(
                        "{here}: expected a list of messages, found {}",
                        describe(other)
                    ));
                }
            }
        }
        Some(v) => {
            return Err(format!(
                "{here}: expected a list of messages, found {}",
                describe(v)
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        out.push(message(v, &format!("{here}[{i}]"), dropped)?);
    }
    Ok(Some(out))
}

/// A token count attribute: an integer, an integral float or a string of digits.
fn tokens(attrs: &Map<String, Value>, at: &str, keys: &[&str]) -> Result<Option<u64>, String> {
    for key in keys {
        match attrs.get(*key) {
            None | Some(Value::Null) => continue,
            Some(v) => {
                let n = v
                    .as_u64()
                    .or_else(|| {
                        v.as_f64()
                            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                            .map(|f| f as u64)
                    })
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()));
                return match n {
                    Some(n) => Ok(Some(n)),
                    None => Err(format!(
                        "{}: expected a non-negative integer, found {}",
                        at_key(at, key),
                        describe(v)
                    )),
                };
            }
        }
    }
    Ok(None)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Llm,
    Tool,
    Agent,
    Other,
}

struct Span<'v> {
    id: String,
    parent: Option<String>,
    kind: Kind,
    start: i64,
    end: i64,
    attrs: &'v Map<String, Value>,
}

/// One LLM call.
struct Call {
    span: usize,
    start: i64,
    end: i64,
    input: Vec<Msg>,
    output: Msg,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    model: Option<String>,
    /// The `invoke_agent` span it runs under (`None`: no agent span above it).
    agent: Option<usize>,
}

fn no_attributes() -> &'static Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(Map::new)
}

fn parse_spans<'v>(
    spans: &'v [Value],
    at: &str,
    dropped: &mut u64,
) -> Result<(Vec<Span<'v>>, Vec<Call>, u64, u64), String> {
    let mut out = Vec::with_capacity(spans.len());
    let mut calls = Vec::new();
    let mut no_messages = 0;
    for (i, v) in spans.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let s = as_object(v, &here)?;
        let id = opt_string(s.get("span_id")).ok_or_else(|| {
            format!(
                "{}: missing (every span needs its id)",
                at_key(&here, "span_id")
            )
        })?;
        let parent = opt_string(s.get("parent_span_id"));
        let name = opt_str_at(s, &here, "name")?.unwrap_or("");
        let start = opt_time_at(s, &here, "start_time")?
            .ok_or_else(|| format!("{}: missing", at_key(&here, "start_time")))?;
        let end = opt_time_at(s, &here, "end_time")?
            .unwrap_or(start)
            .max(start);
        let attrs = match s.get("attributes") {
            None | Some(Value::Null) => no_attributes(),
            Some(Value::Object(o)) => o,
            Some(v) => {
                return Err(format!(
                    "{}: expected an object, found {}",
                    at_key(&here, "attributes"),
                    describe(v)
                ));
            }
        };
        let aat = at_key(&here, "attributes");
        let op = opt_str_at(attrs, &aat, "gen_ai.operation.name")?.unwrap_or("");
        let mut kind = match op {
            "chat" | "text_completion" | "generate_content" => Kind::Llm,
            "execute_tool" => Kind::Tool,
            "invoke_agent" => Kind::Agent,
            _ if name.starts_with("chat ") => Kind::Llm,
            _ if name.starts_with("execute_tool ") => Kind::Tool,
            _ if name.starts_with("invoke_agent ") => Kind::Agent,
            _ => Kind::Other,
        };
        if kind == Kind::Llm {
            match messages(attrs, &aat, "gen_ai.input.messages", dropped)? {
                Some(input) if !input.is_empty() => {
                    let output = match messages(attrs, &aat, "gen_ai.output.messages", dropped)? {
                        Some(list) => {
                            let mut o = Msg {
                                role: "assistant".to_string(),
                                text: String::new(),
                                calls: Vec::new(),
                                responses: Vec::new(),
                            };
                            let mut texts = Vec::new();
                            for m in list {
                                if !m.text.is_empty() {
                                    texts.push(m.text);
                                }
                                o.calls.extend(m.calls);
                            }
                            o.text = texts.join("\n");
                            o
                        }
                        None => Msg {
                            role: "assistant".to_string(),
                            text: ["gen_ai.output.text", "gen_ai.completion"]
                                .iter()
                                .find_map(|k| attrs.get(*k).and_then(Value::as_str))
                                .unwrap_or("")
                                .to_string(),
                            calls: Vec::new(),
                            responses: Vec::new(),
                        },
                    };
                    calls.push(Call {
                        span: out.len(),
                        start,
                        end,
                        input,
                        output,
                        input_tokens: tokens(
                            attrs,
                            &aat,
                            &["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"],
                        )?,
                        output_tokens: tokens(
                            attrs,
                            &aat,
                            &[
                                "gen_ai.usage.output_tokens",
                                "gen_ai.usage.completion_tokens",
                            ],
                        )?,
                        cached_tokens: tokens(
                            attrs,
                            &aat,
                            &["gen_ai.usage.cache_read.input_tokens"],
                        )?,
                        model: ["gen_ai.request.model", "gen_ai.response.model"]
                            .iter()
                            .find_map(|k| attrs.get(*k).and_then(Value::as_str))
                            .map(str::to_string),
                        agent: None,
                    });
                }
                _ => {
                    no_messages += 1;
                    kind = Kind::Other;
                }
            }
        }
        out.push(Span {
            id,
            parent,
            kind,
            start,
            end,
            attrs,
        });
    }
    // Identical spans (same times and attributes) are one call recorded twice.
    calls.sort_by(|a, b| (a.start, a.end, &out[a.span].id).cmp(&(b.start, b.end, &out[b.span].id)));
    let mut seen = HashSet::new();
    let before = calls.len();
    calls.retain(|c| {
        let s = &out[c.span];
        seen.insert((s.start, s.end, Value::Object(s.attrs.clone()).to_string()))
    });
    let duplicates = (before - calls.len()) as u64;
    Ok((out, calls, no_messages, duplicates))
}

/// The span tree: parents, agents, and which tool span runs which agent.
struct Tree<'s, 'v> {
    spans: &'s [Span<'v>],
    index: HashMap<&'s str, usize>,
}

impl<'s, 'v> Tree<'s, 'v> {
    fn new(spans: &'s [Span<'v>]) -> Self {
        let index = spans
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        Tree { spans, index }
    }

    /// The ancestors of span `i`, nearest first (a cycle in the parent links ends the walk).
    fn ancestors(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let mut cur = i;
        let mut steps = 0;
        std::iter::from_fn(move || {
            steps += 1;
            if steps > self.spans.len() {
                return None;
            }
            let p = *self.index.get(self.spans[cur].parent.as_deref()?)?;
            cur = p;
            Some(p)
        })
    }

    /// The nearest ancestor of `i` that is an agent or a tool span.
    fn nearest(&self, i: usize, kinds: &[Kind]) -> Option<usize> {
        self.ancestors(i)
            .find(|&a| kinds.contains(&self.spans[a].kind))
    }

    fn tool_call_id(&self, i: usize) -> Option<&str> {
        self.spans[i]
            .attrs
            .get("gen_ai.tool.call.id")
            .and_then(Value::as_str)
    }
}

/// A chain of turns: the main conversation or a subagent.
struct Branch {
    agent: Option<usize>,
    name: String,
    fork: Option<usize>,
    context: SubagentContext,
    system_prompt: Option<String>,
    nodes: Vec<usize>,
}

/// How far `x`'s input repeats the conversation of call `d` (its input, then its output):
/// the messages in common, and whether that is all of it.
fn repeats(x: &Call, d: &Call) -> (usize, bool) {
    let conv = d.input.iter().chain(std::iter::once(&d.output));
    let n = x.input.iter().zip(conv).take_while(|(a, b)| a == b).count();
    (n, n == d.input.len() + 1)
}

fn output_key(m: &Msg) -> Option<(String, Vec<ToolCall>)> {
    (!m.text.is_empty() || !m.calls.is_empty()).then(|| (m.text.clone(), m.calls.clone()))
}

fn to_native(m: &Msg) -> Vec<Message> {
    let mut out = Vec::new();
    if !m.text.is_empty() || m.responses.is_empty() {
        out.push(Message {
            role: m.role.clone(),
            content: m.text.clone(),
            tool_call_id: None,
        });
    }
    for (id, r) in &m.responses {
        out.push(Message {
            role: "tool".to_string(),
            content: r.clone(),
            tool_call_id: id.clone(),
        });
    }
    out
}

fn tool_calls_json(m: &Msg) -> Option<Value> {
    (!m.calls.is_empty()).then(|| {
        Value::Array(
            m.calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments}})
                })
                .collect(),
        )
    })
}

/// Builds one session from a document holding `spans` (`at` names the list in errors).
fn session(
    ctx: &mut Ctx<'_>,
    spans: &[Value],
    at: &str,
    session_id: String,
) -> Result<Option<TraceSession>, String> {
    let mut dropped_parts = 0;
    let (spans, mut calls, no_messages, duplicates) = parse_spans(spans, at, &mut dropped_parts)?;
    ctx.note(NoteKind::PartsDropped, dropped_parts);
    ctx.note(NoteKind::OtelNoMessages, no_messages);
    ctx.note(NoteKind::OtelDuplicates, duplicates);
    if calls.is_empty() {
        return Ok(None);
    }
    let tree = Tree::new(&spans);
    for c in &mut calls {
        c.agent = tree.nearest(c.span, &[Kind::Agent]);
    }
    // Which agent a tool span runs (its nearest agent-or-tool descendant that is an agent).
    let mut agent_of_tool: HashMap<usize, usize> = HashMap::new();
    let mut spawn_tool: HashMap<usize, usize> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        if s.kind == Kind::Agent {
            if let Some(t) = tree.nearest(i, &[Kind::Agent, Kind::Tool]) {
                if spans[t].kind == Kind::Tool {
                    agent_of_tool.entry(t).or_insert(i);
                    spawn_tool.insert(i, t);
                }
            }
        }
    }
    let tool_by_call_id: HashMap<&str, usize> = spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == Kind::Tool)
        .filter_map(|(i, _)| tree.tool_call_id(i).map(|id| (id, i)))
        .collect();

    let n = calls.len();
    let main_agent = calls[0].agent;
    // Per call: its producer maps (tool-call id → calls, output → calls), filled as we go.
    let mut by_call_id: HashMap<String, Vec<usize>> = HashMap::new();
    let mut by_output: HashMap<(String, Vec<ToolCall>), Vec<usize>> = HashMap::new();
    let mut by_agent: HashMap<Option<usize>, Vec<usize>> = HashMap::new();
    let words = n.div_ceil(64);
    let mut anc: Vec<Vec<u64>> = Vec::with_capacity(n);
    let mut alive = vec![false; n];
    let mut branches: Vec<Branch> = Vec::new();
    let mut branch_of = vec![usize::MAX; n];
    let mut joins_of: Vec<Vec<usize>> = vec![Vec::new(); n];
    // Per call: tool-call ids whose responses are joined answers (not part of its delta).
    let mut joined_ids: Vec<HashSet<String>> = vec![HashSet::new(); n];
    let mut unlinked = 0;
    let last_before = |list: Option<&Vec<usize>>| list.and_then(|l| l.last().copied());

    for i in 0..n {
        let x = &calls[i];
        let mut deps: Vec<usize> = Vec::new();
        let mut spawn = None;
        for m in &x.input {
            if m.role == "assistant" {
                if let Some(k) = output_key(m) {
                    deps.extend(last_before(by_output.get(&k)));
                }
                for c in &m.calls {
                    if let Some(id) = &c.id {
                        deps.extend(last_before(by_call_id.get(id)));
                    }
                }
            }
            for (id, _) in &m.responses {
                let Some(id) = id else { continue };
                deps.extend(last_before(by_call_id.get(id)));
                // The response of a tool that ran an agent: the agent's last call.
                let ran = tool_by_call_id
                    .get(id.as_str())
                    .and_then(|t| agent_of_tool.get(t));
                if let Some(&a) = ran {
                    if let Some(last) = last_before(by_agent.get(&Some(a))) {
                        deps.push(last);
                        joined_ids[i].insert(id.clone());
                    }
                }
            }
        }
        // The first call of a subagent: the call that asked for the tool it runs in, else
        // the latest call of its parent agent that had finished.
        let first_of_agent = !by_agent.contains_key(&x.agent);
        if first_of_agent && x.agent != main_agent {
            if let Some(a) = x.agent {
                let asked = spawn_tool
                    .get(&a)
                    .and_then(|&t| tree.tool_call_id(t))
                    .and_then(|id| last_before(by_call_id.get(id)));
                let parent_agent = tree.nearest(a, &[Kind::Agent]);
                spawn = asked.or_else(|| {
                    by_agent
                        .get(&parent_agent)
                        .into_iter()
                        .flatten()
                        .copied()
                        .filter(|&d| calls[d].end <= x.start)
                        .max_by_key(|&d| (calls[d].end, d))
                });
                deps.extend(spawn);
            }
        }
        if deps.is_empty() {
            // Nothing links it: the latest call of its agent that had finished, else of any.
            let finished = |d: &usize| alive[*d] && calls[*d].end <= x.start;
            deps.extend(
                by_agent
                    .get(&x.agent)
                    .into_iter()
                    .flatten()
                    .copied()
                    .filter(finished)
                    .max_by_key(|&d| (calls[d].end, d))
                    .or_else(|| (0..i).filter(finished).max_by_key(|&d| (calls[d].end, d))),
            );
        }
        deps.sort_unstable();
        deps.dedup();
        let is_anc = |e: usize, d: usize| (anc[e][d / 64] >> (d % 64)) & 1 == 1;
        // The frontier: what no other dependency already waits for.
        let frontier: Vec<usize> = deps
            .iter()
            .copied()
            .filter(|&d| !deps.iter().any(|&e| e != d && is_anc(e, d)))
            .collect();
        let mut mine = vec![0u64; words];
        for &d in &deps {
            for (w, a) in mine.iter_mut().zip(&anc[d]) {
                *w |= a;
            }
            mine[d / 64] |= 1 << (d % 64);
        }
        if deps.is_empty() && !branches.is_empty() {
            anc.push(mine);
            unlinked += 1;
            continue;
        }
        alive[i] = true;
        // Continue a branch of its agent that ends with one of its dependencies (preferring
        // one whose conversation it repeats, then the latest); the other dependencies on the
        // frontier are joins. Otherwise it starts a branch, forking from the call that asked
        // for its agent, else from the dependency whose conversation it repeats, else from
        // the one that finished last.
        let chain = deps
            .iter()
            .copied()
            .filter(|&d| {
                let b = &branches[branch_of[d]];
                b.agent == x.agent && b.nodes.last() == Some(&d)
            })
            .max_by_key(|&d| (repeats(x, &calls[d]).1, d));
        let b = match chain {
            Some(d) => {
                joins_of[i] = frontier.iter().copied().filter(|&e| e != d).collect();
                branch_of[d]
            }
            None => {
                let fork = spawn.filter(|s| deps.contains(s)).or_else(|| {
                    frontier
                        .iter()
                        .copied()
                        .max_by_key(|&d| (repeats(x, &calls[d]).1, calls[d].end, d))
                });
                let context = match fork {
                    Some(f) if repeats(x, &calls[f]).1 => SubagentContext::Fork,
                    _ => SubagentContext::Fresh,
                };
                joins_of[i] = frontier
                    .iter()
                    .copied()
                    .filter(|&e| Some(e) != fork)
                    .collect();
                let system_prompt = match (context, x.input.first()) {
                    (SubagentContext::Fresh, Some(m)) if m.role == "system" => Some(m.text.clone()),
                    _ => None,
                };
                let name = match x.agent {
                    _ if branches.is_empty() => MAIN_AGENT.to_string(),
                    Some(a) if x.agent != main_agent => {
                        let attrs = spans[a].attrs;
                        ["gen_ai.agent.id", "gen_ai.agent.name"]
                            .iter()
                            .find_map(|k| attrs.get(*k).and_then(Value::as_str))
                            .map_or_else(|| format!("agent-{}", spans[a].id), str::to_string)
                    }
                    _ => MAIN_AGENT.to_string(),
                };
                branches.push(Branch {
                    agent: x.agent,
                    name,
                    fork,
                    context,
                    system_prompt,
                    nodes: Vec::new(),
                });
                branches.len() - 1
            }
        };
        anc.push(mine);
        branch_of[i] = b;
        branches[b].nodes.push(i);
        by_agent.entry(x.agent).or_default().push(i);
        for c in &x.output.calls {
            if let Some(id) = &c.id {
                by_call_id.entry(id.clone()).or_default().push(i);
            }
        }
        if let Some(k) = output_key(&x.output) {
            by_output.entry(k).or_default().push(i);
        }
    }
    ctx.note(NoteKind::OtelUnlinked, unlinked);

    // Names: `main`, then each subagent's id made unique.
    let mut taken = HashSet::from([MAIN_AGENT.to_string()]);
    for b in branches.iter_mut().skip(1) {
        b.name = agent_id(&b.name, &mut taken);
    }
    let mut turn_of = vec![0usize; n];
    for b in &branches {
        for (t, &c) in b.nodes.iter().enumerate() {
            turn_of[c] = t;
        }
    }
    let name = |c: usize| format!("{}:{}", branches[branch_of[c]].name, turn_of[c]);
    let t0 = calls[0].start;
    let mut rewritten = 0;
    let mut built: Vec<Vec<TraceTurn>> = Vec::with_capacity(branches.len());
    for br in &branches {
        let mut turns = Vec::with_capacity(br.nodes.len());
        for (t, &i) in br.nodes.iter().enumerate() {
            let x = &calls[i];
            let pred = if t > 0 {
                Some(br.nodes[t - 1])
            } else if br.context == SubagentContext::Fork {
                br.fork
            } else {
                None
            };
            // What the replay already sends: the predecessor's conversation (as far as this
            // input repeats it), or the branch's own system prompt.
            let skip = match pred {
                Some(p) => {
                    let (k, whole) = repeats(x, &calls[p]);
                    rewritten += u64::from(!whole);
                    k
                }
                None => usize::from(x.input.first().is_some_and(|m| m.role == "system")),
            };
            // Joined answers reach this turn from the planner: leave them out of its input.
            let joined: Vec<&Msg> = joins_of[i].iter().map(|&j| &calls[j].output).collect();
            let mut delta = Vec::new();
            for m in &x.input[skip..] {
                if m.role == "assistant"
                    && joined
                        .iter()
                        .any(|o| o.text == m.text && o.calls == m.calls)
                {
                    continue;
                }
                let mut m = m.clone();
                let had_responses = !m.responses.is_empty();
                m.responses.retain(|(id, r)| {
                    let by_id = id.as_ref().is_some_and(|id| joined_ids[i].contains(id));
                    !by_id && !joined.iter().any(|o| !o.text.is_empty() && o.text == *r)
                });
                if had_responses && m.is_empty() {
                    continue;
                }
                delta.extend(to_native(&m));
            }
            let released = pred
                .or(br.fork)
                .into_iter()
                .chain(joins_of[i].iter().copied())
                .map(|d| calls[d].end)
                .max();
            let mut turn = TraceTurn::new(t as u32, delta, x.output.text.clone());
            turn.tool_calls = tool_calls_json(&x.output);
            turn.input_tokens = x.input_tokens;
            turn.output_tokens = x.output_tokens;
            turn.cached_tokens = x.cached_tokens;
            turn.pre_gap_ms = Some(released.map_or(0.0, |r| gap_ms(r, x.start)));
            turn.timestamp_ms = Some(gap_ms(t0, x.start));
            turn.after = joins_of[i].iter().map(|&j| name(j)).collect();
            turns.push(turn);
        }
        built.push(turns);
    }
    ctx.note(NoteKind::OtelRewritten, rewritten);
    let mut built = built.into_iter();
    let main_turns = built.next().unwrap_or_default();
    let subagents = branches
        .iter()
        .skip(1)
        .zip(built)
        .map(|(b, turns)| Subagent {
            agent_id: b.name.clone(),
            after: b.fork.map(name).unwrap_or_default(),
            context: b.context,
            subagent_type: b
                .agent
                .filter(|_| b.agent != main_agent)
                .and_then(|a| spans[a].attrs.get("gen_ai.agent.name"))
                .and_then(Value::as_str)
                .map(str::to_string),
            system_prompt: b.system_prompt.clone(),
            turns,
        })
        .collect();
    let system_prompt = calls[0]
        .input
        .first()
        .filter(|m| m.role == "system")
        .map(|m| m.text.clone());
    Ok(Some(TraceSession {
        session_id,
        source: Some(Source {
            dataset: Some("otel".to_string()),
            model: calls[0].model.clone(),
            ..Source::default()
        }),
        system_prompt,
        turns: main_turns,
        tools: None,
        subagents,
    }))
}

/// One session object (`{"spans": [...]}` with an optional `session_id` / `trace_id`), or a
/// bare span list. `at` prefixes paths in errors.
fn document(
    ctx: &mut Ctx<'_>,
    v: &Value,
    at: &str,
    default_id: String,
) -> Result<Option<TraceSession>, String> {
    if let Value::Array(spans) = v {
        return session(
            ctx,
            spans,
            if at.is_empty() { "spans" } else { at },
            default_id,
        );
    }
    let obj = as_object(v, if at.is_empty() { "trace" } else { at })?;
    if obj.contains_key("resourceSpans") {
        return Err(format!(
            "{}: this is an OTLP/JSON export; flatten it to {{\"trace_id\", \"spans\": [{{\"span_id\", \"parent_span_id\", \"start_time\", \"end_time\", \"attributes\"}}]}} first (see docs/importers.md)",
            at_key(at, "resourceSpans")
        ));
    }
    let spans = opt_array_at(obj, at, "spans")?
        .ok_or_else(|| format!("{}: missing", at_key(at, "spans")))?;
    let id = ["session_id", "trace_id"]
        .iter()
        .find_map(|k| opt_string(obj.get(*k)))
        .unwrap_or(default_id);
    session(ctx, spans, &at_key(at, "spans"), id)
}

fn emit(
    ctx: &mut Ctx<'_>,
    path: &Path,
    line: Option<u64>,
    r: Result<Option<TraceSession>, String>,
) -> Result<(), ImportError> {
    match r {
        Ok(Some(s)) => ctx.emit(path, line, s),
        Ok(None) => Ok(()),
        Err(m) => ctx.invalid(ImportError::new(path, line, m)),
    }
}

fn import_lines(
    ctx: &mut Ctx<'_>,
    path: &Path,
    reader: Box<dyn std::io::BufRead>,
    stem: &str,
) -> Result<(), ImportError> {
    let mut index = 0usize;
    for_each_json_line(ctx, path, reader, &mut |ctx, line, value| {
        let r = document(ctx, &value, "", format!("{stem}-{index}"));
        index += 1;
        match r {
            Ok(Some(s)) => {
                ctx.emit(path, Some(line), s)?;
                Ok(Ok(()))
            }
            Ok(None) => Ok(Ok(())),
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
        Document::Json(Value::Array(items))
            if items.first().is_some_and(|v| v.get("spans").is_some()) =>
        {
            for (i, item) in items.iter().enumerate() {
                let r = document(ctx, item, &format!("[{i}]"), format!("{stem}-{i}"));
                emit(ctx, path, None, r)?;
            }
            Ok(())
        }
        Document::Json(v) => {
            let r = document(ctx, &v, "", stem.clone());
            emit(ctx, path, None, r)
        }
    }
}
