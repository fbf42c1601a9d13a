//! The steps of [`super::build_plan_with`], in the order it takes them: read and intern, count,
//! the shared system prompt, shape, shuffle and size the pool, tool waits, encode, summarize.

use std::collections::HashMap;
use std::sync::Arc;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::{
    DatasetSpec, Dist, GraphStats, GraphSummary, MESSAGE_OVERHEAD_TOKENS, Msg, OutputPolicy,
    PlanConfig, PlanProgress, PlanSummary, PlannedBranch, PlannedGraph, PlannedMessage,
    PlannedSession, PlannedTurn, ProgressFn, RecordingRates, Role, SAMPLE, SystemPromptInfo,
    ToolMessages, extract_tool_waits, graph_stats, json_literal, synthetic_sessions,
    system_message, system_prompt,
};
use crate::error::PlanError;
use crate::format::{SubagentContext, TraceSession, TraceTurn};
use crate::load::{self, LoadOptions, LoadReport};
use crate::tokenize::TokenCounter;

/// Interns message texts so each distinct text is stored and counted once: a text shared by
/// many sessions (a system prompt, a repeated tool output) is one entry, whatever session it
/// came from.
#[derive(Default)]
pub(super) struct Interner {
    ids: HashMap<Arc<str>, u32>,
    texts: Vec<Arc<str>>,
    /// Token counts known without counting (synthetic text), by id.
    known: Vec<Option<u32>>,
}

impl Interner {
    fn id(&mut self, s: &str) -> u32 {
        self.id_known(s, None)
    }

    /// [`Interner::id`], with the text's token count when it is known by construction.
    fn id_known(&mut self, s: &str, known: Option<u32>) -> u32 {
        if known.is_some() {
            // Synthetic text: random words, distinct by construction; not worth a hash of
            // every byte to find the rare duplicate (it would only save its memory).
            let id = self.texts.len() as u32;
            self.texts.push(Arc::from(s));
            self.known.push(known);
            return id;
        }
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let a: Arc<str> = Arc::from(s);
        let id = self.texts.len() as u32;
        self.texts.push(a.clone());
        self.known.push(known);
        self.ids.insert(a, id);
        id
    }
}

/// A session reduced to interned ids, kept while selecting.
pub(super) struct Candidate {
    id: Arc<str>,
    model: Option<String>,
    tools: Option<Arc<str>>,
    /// Its gaps are already pure tool waits (synthetic sessions).
    synthetic_gaps: bool,
    system: Option<u32>,
    turns: Vec<CandTurn>,
    graph: Option<CandGraph>,
}

struct CandGraph {
    resolved: crate::graph::Resolved,
    /// Per subagent: its id, context and (fresh) own system prompt's text id.
    agents: Vec<(Arc<str>, SubagentContext, Option<u32>)>,
}

struct CandTurn {
    /// Role, text id, and (faithful tool messages) the members after the content.
    delta: Vec<(Role, u32, Option<Arc<str>>)>,
    answer: u32,
    answer_extra: Option<Arc<str>>,
    rec: TraceTurn,
}

// ---------------------------------------------------------------------------------------------
// 1. Read sessions, cut and filter by turns, intern their texts.

/// What reading hands on: the sessions kept, their texts interned, and what the reader
/// reported.
pub(super) struct Candidates {
    /// Every distinct text of the sessions kept.
    pub(super) interner: Interner,
    /// The sessions kept, in the order read.
    pub(super) candidates: Vec<Candidate>,
    /// Invalid records skipped (their first examples are told at the end).
    pub(super) report: LoadReport,
}

/// Reads the dataset's sessions (a dataset directory's manifest fills in `cfg`), cuts and
/// filters them by turns and interns their texts; fails when no session is left.
pub(super) fn read_candidates(
    cfg: &mut PlanConfig,
    counter: &TokenCounter,
    summary: &mut PlanSummary,
) -> Result<Candidates, PlanError> {
    let mut interner = Interner::default();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut report = LoadReport::default();
    // `exact`: the session is synthetic filler whose user messages and answers have these
    // token counts by construction (`TokenCounter::filler_is_exact`).
    let mut take = |rec: TraceSession,
                    cfg: &PlanConfig,
                    summary: &mut PlanSummary,
                    exact: Option<(u32, u32)>|
     -> Result<(), PlanError> {
        if let Some(cand) = take_session(rec, cfg, summary, &mut interner, exact)? {
            candidates.push(cand);
        }
        Ok(())
    };
    match cfg.dataset.clone() {
        DatasetSpec::Path(p) => {
            let (_, manifest) = load::dataset_files(&p)?;
            if let Some(m) = &manifest {
                cfg.apply_manifest(m)?;
                cfg.validate()?;
            }
            summary.dataset = p.display().to_string();
            let cfg = &*cfg;
            report = load::for_each_session(
                &p,
                LoadOptions {
                    skip_invalid: cfg.skip_invalid,
                    max_line_bytes: cfg.max_trace_line_bytes,
                },
                &mut |rec| take(rec, cfg, summary, None),
            )?;
        }
        DatasetSpec::Sample => {
            summary.dataset = "sample (bundled)".into();
            let cfg = &*cfg;
            load::read_sessions(
                std::path::Path::new("sample.jsonl.zst"),
                SAMPLE,
                LoadOptions::default(),
                &mut report,
                &mut |rec| take(rec, cfg, summary, None),
            )?;
        }
        DatasetSpec::Random(spec) => {
            summary.dataset = format!(
                "random (turns {}, input +{} per turn, output {})",
                spec.turns, spec.input_increment, spec.output_len
            );
            let n = cfg
                .num_sessions
                .unwrap_or(cfg.concurrency.saturating_mul(2));
            let exact = counter
                .filler_is_exact()
                .then_some((spec.input_increment, spec.output_len));
            if exact.is_none() && counter.is_tokenizer() {
                summary.notes.push(format!(
                    "the synthetic words are not single tokens of {}: synthetic text was \
                     counted with it",
                    counter.name()
                ));
            }
            for rec in synthetic_sessions(&spec, n, cfg.seed, cfg.gap_cap_ms) {
                take(rec, cfg, summary, exact)?;
            }
        }
        DatasetSpec::Agentic(spec) => {
            summary.dataset = format!(
                "agentic (turns {}, {} spawns a session, fan-out {}, input {}, output {})",
                spec.turns, spec.spawns, spec.fan_out, spec.input, spec.output
            );
            let n = cfg
                .num_sessions
                .unwrap_or(cfg.concurrency.saturating_mul(2));
            let exact = counter
                .filler_is_exact()
                .then_some((spec.input, spec.output));
            for rec in crate::agentic::sessions(&spec, n, cfg.seed, cfg.gap_cap_ms) {
                take(rec, cfg, summary, exact)?;
            }
        }
    }
    summary.skipped_invalid = report.skipped;
    if candidates.is_empty() {
        return Err(PlanError::Empty(format!(
            "{}: no session is left to plan: {} read, {} with no turns, {} with fewer than {} turns",
            summary.dataset,
            summary.sessions_read,
            summary.excluded_empty,
            summary.excluded_min_turns,
            cfg.min_turns.unwrap_or(1)
        )));
    }
    Ok(Candidates {
        interner,
        candidates,
        report,
    })
}

/// One session read: counted (progress is told every 1,000), left out when it has no turns or
/// too few, cut to `--max-turns`, then interned (`exact`: see [`read_candidates`]).
fn take_session(
    mut rec: TraceSession,
    cfg: &PlanConfig,
    summary: &mut PlanSummary,
    interner: &mut Interner,
    exact: Option<(u32, u32)>,
) -> Result<Option<Candidate>, PlanError> {
    summary.sessions_read += 1;
    if summary.sessions_read % 1000 == 0 {
        if let Some(p) = &cfg.progress {
            (p.0)(PlanProgress::Reading {
                sessions: summary.sessions_read,
            });
        }
    }
    if rec.turns.is_empty() {
        summary.excluded_empty += 1;
        return Ok(None);
    }
    if (rec.turns.len() as u64) < u64::from(cfg.min_turns.unwrap_or(1)) {
        summary.excluded_min_turns += 1;
        return Ok(None);
    }
    if let Some(max) = cfg.max_turns {
        if rec.subagents.is_empty() {
            rec.turns.truncate(max as usize);
        } else {
            crate::graph::cut(&mut rec, max as usize);
        }
    }
    // A forked subagent's own prompt is a user message at its start.
    for a in &mut rec.subagents {
        if a.context == SubagentContext::Fork {
            if let Some(sp) = a.system_prompt.take().filter(|p| !p.is_empty()) {
                if let Some(t0) = a.turns.first_mut() {
                    t0.input_delta.insert(
                        0,
                        crate::format::Message {
                            role: "user".into(),
                            content: sp,
                            tool_call_id: None,
                        },
                    );
                }
            }
        }
    }
    intern_session(rec, cfg, summary, interner, exact).map(Some)
}

/// A session reduced to a [`Candidate`]: its graph resolved, its texts interned (the
/// subagents' own prompts, the session's, then every turn's in node order), its tool
/// definitions kept as JSON when tool messages are sent as recorded.
fn intern_session(
    mut rec: TraceSession,
    cfg: &PlanConfig,
    summary: &mut PlanSummary,
    interner: &mut Interner,
    exact: Option<(u32, u32)>,
) -> Result<Candidate, PlanError> {
    let graph = if rec.subagents.is_empty() && rec.turns.iter().all(|t| t.after.is_empty()) {
        None
    } else {
        let resolved = crate::graph::resolve(&rec).map_err(|message| PlanError::Input {
            file: summary.dataset.clone().into(),
            line: None,
            message,
        })?;
        let agents = rec
            .subagents
            .iter()
            .map(|a| {
                (
                    Arc::<str>::from(a.agent_id.as_str()),
                    a.context,
                    a.system_prompt
                        .as_deref()
                        .filter(|s| !s.is_empty())
                        .map(|s| interner.id(s)),
                )
            })
            .collect();
        Some(CandGraph { resolved, agents })
    };
    let system = rec
        .system_prompt
        .as_deref()
        .filter(|s| !s.is_empty())
        .map(|s| interner.id(s));
    let sub_turns = std::mem::take(&mut rec.subagents)
        .into_iter()
        .flat_map(|a| a.turns);
    let turns = rec
        .turns
        .into_iter()
        .chain(sub_turns)
        .map(|t| intern_turn(t, cfg.tool_messages, summary, interner, exact))
        .collect();
    let synthetic_gaps = rec
        .source
        .as_ref()
        .and_then(|s| s.dataset.as_deref())
        .is_some_and(|d| d == "synthetic" || d == "random");
    let tools = match (&rec.tools, cfg.tool_messages) {
        (Some(t @ serde_json::Value::Array(a)), ToolMessages::Faithful) if !a.is_empty() => {
            Some(Arc::from(t.to_string()))
        }
        _ => None,
    };
    Ok(Candidate {
        id: Arc::from(rec.session_id),
        model: rec.source.and_then(|s| s.model),
        tools,
        synthetic_gaps,
        system,
        turns,
        graph,
    })
}

/// A turn reduced to a [`CandTurn`]: its delta's roles coerced and texts interned, then its
/// answer's; the record keeps its figures, not its texts.
fn intern_turn(
    mut t: TraceTurn,
    tool_messages: ToolMessages,
    summary: &mut PlanSummary,
    interner: &mut Interner,
    exact: Option<(u32, u32)>,
) -> CandTurn {
    let delta = t
        .input_delta
        .iter()
        .map(|m| {
            let (role, coerced) = Role::coerce(&m.role, tool_messages);
            summary.coerced_roles += u64::from(coerced);
            let extra = match (role, &m.tool_call_id) {
                (Role::Tool, Some(id)) => {
                    Some(Arc::from(format!(",\"tool_call_id\":{}", json_literal(id))))
                }
                _ => None,
            };
            let id = interner.id_known(&m.content, exact.map(|e| e.0));
            (role, id, extra)
        })
        .collect();
    let answer = interner.id_known(&t.assistant_text, exact.map(|e| e.1));
    let answer_extra = match (&t.tool_calls, tool_messages) {
        (Some(calls @ serde_json::Value::Array(a)), ToolMessages::Faithful) if !a.is_empty() => {
            Some(Arc::from(format!(",\"tool_calls\":{calls}")))
        }
        _ => None,
    };
    t.input_delta = Vec::new();
    t.assistant_text = String::new();
    CandTurn {
        delta,
        answer,
        answer_extra,
        rec: t,
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Count every distinct text once.

/// What counting hands on: every distinct text and its token count, by id.
pub(super) struct Counted {
    /// The texts (the interner's lookup map dropped).
    texts: Vec<Arc<str>>,
    /// Tokens of each text.
    pub(super) counts: Vec<u32>,
}

/// Counts every distinct text once, in parallel (texts whose count is known by construction
/// are not counted), telling `progress`; then drops the interner's lookup map.
pub(super) fn count_texts(
    interner: Interner,
    counter: &TokenCounter,
    progress: Option<&ProgressFn>,
) -> Counted {
    let counts = {
        let mut counts: Vec<u32> = interner.known.iter().map(|k| k.unwrap_or(0)).collect();
        let unknown: Vec<u32> = (0..interner.texts.len() as u32)
            .filter(|&i| interner.known[i as usize].is_none())
            .collect();
        let texts: Vec<&str> = unknown
            .iter()
            .map(|&i| &*interner.texts[i as usize])
            .collect();
        let total_bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
        let mut done_bytes = 0u64;
        let mut next = unknown.iter();
        // In slices, so progress can be told; each slice is counted in parallel.
        for slice in texts.chunks(texts.len().div_ceil(50).max(1024)) {
            for (n, &id) in counter.count_all(slice).into_iter().zip(next.by_ref()) {
                counts[id as usize] = n;
            }
            done_bytes += slice.iter().map(|t| t.len() as u64).sum::<u64>();
            if let Some(p) = progress {
                (p.0)(PlanProgress::Counting {
                    texts: texts.len() as u64,
                    done_bytes,
                    total_bytes,
                });
            }
        }
        counts
    };
    if let Some(p) = progress {
        (p.0)(PlanProgress::Shaping);
    }
    // The lookup map holds a second handle on every text; the texts alone remain.
    let Interner { ids, texts, .. } = interner;
    drop(ids);
    Counted { texts, counts }
}

// ---------------------------------------------------------------------------------------------
// 3. The shared system prompt.

/// The shared system prompt of `--system-prompt-tokens`, when one is asked for.
pub(super) fn shared_system_prompt(
    cfg: &PlanConfig,
    counter: &TokenCounter,
) -> Option<SystemPromptInfo> {
    cfg.system_prompt_tokens
        .filter(|&t| t > 0)
        .map(|t| system_prompt(counter, t))
}

// ---------------------------------------------------------------------------------------------
// 4. Output pinning, prompt estimates, the peak-context band.

/// A candidate with, per node, its pinned output and estimated prompt, and its peak context.
pub(super) struct Shaped {
    cand: Candidate,
    outputs: Vec<u32>,
    prompts: Vec<u64>,
    peak: u64,
}

/// Pins every candidate's outputs under `policy`, estimates its prompts and peak context (with
/// a shared system prompt of `sp_tokens`) and leaves out those outside the peak-context band;
/// fails when the band leaves none.
pub(super) fn shape_sessions(
    candidates: Vec<Candidate>,
    counts: &[u32],
    sp_tokens: u64,
    policy: OutputPolicy,
    cfg: &PlanConfig,
    summary: &mut PlanSummary,
) -> Result<Vec<Shaped>, PlanError> {
    let mut shaped = Vec::with_capacity(candidates.len());
    let mut peaks_all = Vec::new();
    for cand in candidates {
        let outputs = pinned_outputs(&cand, counts, policy);
        let (prompts, peak) = prompt_estimates(&cand, &outputs, counts, sp_tokens);
        peaks_all.push(peak);
        if cfg.min_context.is_some_and(|lo| peak < lo)
            || cfg.max_context.is_some_and(|hi| peak > hi)
        {
            summary.excluded_context_band += 1;
            continue;
        }
        shaped.push(Shaped {
            cand,
            outputs,
            prompts,
            peak,
        });
    }
    if shaped.is_empty() {
        let (lo, hi) = (
            peaks_all.iter().min().copied().unwrap_or(0),
            peaks_all.iter().max().copied().unwrap_or(0),
        );
        return Err(PlanError::Empty(format!(
            "the peak-context band {}..{} tokens excludes all {} sessions (their peaks, with a \
             {sp_tokens}-token system prompt and pinned output, range {lo}..{hi})",
            cfg.min_context.map_or("0".into(), |v| v.to_string()),
            cfg.max_context.map_or("∞".into(), |v| v.to_string()),
            peaks_all.len(),
        )));
    }
    Ok(shaped)
}

/// The output tokens each node of `cand` is pinned to under `policy` (at least 1).
fn pinned_outputs(cand: &Candidate, counts: &[u32], policy: OutputPolicy) -> Vec<u32> {
    let n = cand.turns.len() as u64;
    cand.turns
        .iter()
        .enumerate()
        .map(|(i, t)| match policy {
            OutputPolicy::Trace => {
                let recorded = t.rec.output_tokens.filter(|&o| o > 0);
                let v = recorded.unwrap_or(u64::from(counts[t.answer as usize]));
                u32::try_from(v.max(1)).unwrap_or(u32::MAX)
            }
            OutputPolicy::Fixed { tokens } => tokens,
            OutputPolicy::Budget { tokens } => {
                let base = tokens / n;
                let extra = u64::from((i as u64) < tokens % n);
                u32::try_from((base + extra).max(1)).unwrap_or(u32::MAX)
            }
        })
        .collect()
}

/// The estimated prompt tokens of each node of `cand` (a shared system prompt of `sp_tokens`,
/// every message before it, [`MESSAGE_OVERHEAD_TOKENS`] each) and its peak context: the
/// largest prompt plus pinned output.
fn prompt_estimates(
    cand: &Candidate,
    outputs: &[u32],
    counts: &[u32],
    sp_tokens: u64,
) -> (Vec<u64>, u64) {
    let system_ctx = |own: Option<u32>| {
        if sp_tokens > 0 || own.is_some() {
            sp_tokens + own.map_or(0, |s| u64::from(counts[s as usize])) + MESSAGE_OVERHEAD_TOKENS
        } else {
            0
        }
    };
    let delta_tokens = |t: &CandTurn| -> u64 {
        t.delta
            .iter()
            .map(|(_, id, _)| u64::from(counts[*id as usize]) + MESSAGE_OVERHEAD_TOKENS)
            .sum()
    };
    let answer_tokens =
        |t: &CandTurn| u64::from(counts[t.answer as usize]) + MESSAGE_OVERHEAD_TOKENS;
    match &cand.graph {
        None => {
            let mut ctx = system_ctx(cand.system);
            let mut prompts = Vec::with_capacity(cand.turns.len());
            for t in &cand.turns {
                ctx += delta_tokens(t);
                prompts.push(ctx);
                ctx += answer_tokens(t);
            }
            let last = prompts.len() - 1;
            let peak = prompts[last] + u64::from(outputs[last]);
            (prompts, peak)
        }
        Some(g) => {
            // In dependency order: a branch starts from its fork node's context (or its
            // own system prompt), a join adds its dependencies' answers.
            let r = &g.resolved;
            let mut prompts = vec![0u64; cand.turns.len()];
            let mut after = vec![0u64; cand.turns.len()];
            for &n in &r.order {
                let (n, b) = (n as usize, r.branch_of[n as usize] as usize);
                let br = &r.branches[b];
                let start = if n as u32 > br.first {
                    after[n - 1]
                } else {
                    match (br.fork, b.checked_sub(1).map(|k| &g.agents[k])) {
                        (Some(f), Some((_, SubagentContext::Fork, _))) => after[f as usize],
                        (_, Some((_, SubagentContext::Fresh, own))) => system_ctx(*own),
                        _ => system_ctx(cand.system),
                    }
                };
                let joined: u64 = r.joins[n]
                    .iter()
                    .map(|&d| answer_tokens(&cand.turns[d as usize]))
                    .sum();
                prompts[n] = start + joined + delta_tokens(&cand.turns[n]);
                after[n] = prompts[n] + answer_tokens(&cand.turns[n]);
            }
            let peak = prompts
                .iter()
                .zip(outputs)
                .map(|(p, o)| p + u64::from(*o))
                .max()
                .unwrap_or(0);
            (prompts, peak)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Seeded shuffle, then the pool size.

/// Shuffles the sessions with the plan's seed (synthetic ones keep the order they were made
/// in) and keeps as many as the pool holds, noting when fewer are eligible.
pub(super) fn shuffle_and_size_pool(
    shaped: &mut Vec<Shaped>,
    cfg: &PlanConfig,
    is_synthetic: bool,
    summary: &mut PlanSummary,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    if !is_synthetic {
        shaped.shuffle(&mut rng);
    }
    let want = cfg
        .num_sessions
        .unwrap_or(cfg.concurrency.saturating_mul(2)) as usize;
    if shaped.len() < want {
        summary.notes.push(format!(
            "{want} sessions asked for, {} eligible: the pool holds {} (a duration run loops over it)",
            shaped.len(),
            shaped.len()
        ));
    }
    shaped.truncate(want);
}

// ---------------------------------------------------------------------------------------------
// 6. Tool waits.

/// How tool waits are derived from recorded gaps.
pub(super) struct ToolWaits {
    rates: RecordingRates,
    /// Recorded gaps are taken as they are (synthetic datasets, `--raw-gaps`).
    as_recorded: bool,
}

/// Decides how tool waits are derived (synthetic, raw or extracted at the recording rates)
/// and says so in the summary.
pub(super) fn tool_waits(
    cfg: &PlanConfig,
    is_synthetic: bool,
    summary: &mut PlanSummary,
) -> ToolWaits {
    let rates = RecordingRates::bundled();
    summary.gap_source = if is_synthetic {
        "synthetic".into()
    } else if cfg.raw_gaps {
        "raw".into()
    } else {
        "extracted".into()
    };
    ToolWaits {
        rates,
        as_recorded: is_synthetic || cfg.raw_gaps,
    }
}

impl ToolWaits {
    /// The tool wait before each node of `cand`, ms (0 for the first; not yet capped).
    fn of(&self, cand: &Candidate, counts: &[u32]) -> Vec<f64> {
        let intervals: Vec<f64> = cand
            .turns
            .iter()
            .map(|t| t.rec.pre_gap_ms.unwrap_or(0.0))
            .collect();
        let out_of = |t: &CandTurn| {
            t.rec
                .output_tokens
                .unwrap_or(u64::from(counts[t.answer as usize]))
        };
        let prev_out: Vec<u64> = match &cand.graph {
            None => std::iter::once(0)
                .chain(cand.turns.iter().map(out_of))
                .take(cand.turns.len())
                .collect(),
            // A node's interval runs from the dependency that released it.
            Some(g) => (0..cand.turns.len())
                .map(|n| {
                    g.resolved
                        .deps(n as u32)
                        .map(|d| out_of(&cand.turns[d as usize]))
                        .next()
                        .unwrap_or(0)
                })
                .collect(),
        };
        if self.as_recorded || cand.synthetic_gaps {
            intervals
                .iter()
                .enumerate()
                .map(|(k, g)| if k == 0 { 0.0 } else { *g })
                .collect()
        } else {
            extract_tool_waits(&intervals, &prev_out, cand.model.as_deref(), &self.rates)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Messages, encoded once.

/// Σ of one recorded figure over every turn, and whether every turn had it.
struct RecordedSum {
    sum: u64,
    all: bool,
}

impl Default for RecordedSum {
    fn default() -> Self {
        RecordedSum { sum: 0, all: true }
    }
}

impl RecordedSum {
    /// Adds one turn's figure (`None`: this turn did not record it).
    fn add(&mut self, v: Option<u64>) {
        match v {
            Some(v) => self.sum += v,
            None => self.all = false,
        }
    }

    /// The sum, when every turn had the figure.
    fn total(&self) -> Option<u64> {
        self.all.then_some(self.sum)
    }
}

/// Turns shaped sessions into planned ones: every message made once per role and text and
/// shared by every turn that sends it, every system message once per own prompt.
pub(super) struct Encoder<'a> {
    /// The texts not encoded yet (an encoded one is left empty).
    texts: Vec<Arc<str>>,
    /// The JSON literal of each text encoded so far, by id.
    literals: Vec<Option<Arc<str>>>,
    counts: Vec<u32>,
    msgs: HashMap<(Role, u32), Msg>,
    sp: &'a Option<SystemPromptInfo>,
    shared_system: Option<Arc<str>>,
    /// Sessions' and fresh subagents' own system prompts, by text id.
    own_system: HashMap<u32, Arc<str>>,
    system_msgs: HashMap<Option<u32>, Msg>,
    counter: &'a TokenCounter,
    recorded: [RecordedSum; 3],
}

/// A message with extra members (a tool call or result) is its own; its text stays shared.
fn with_extra(m: Msg, extra: &Option<Arc<str>>) -> Msg {
    match extra {
        None => m,
        Some(e) => Arc::new(PlannedMessage {
            role: m.role,
            content_json: m.content_json.clone(),
            tokens: m.tokens,
            extra_json: Some(e.clone()),
        }),
    }
}

impl<'a> Encoder<'a> {
    /// An encoder of `counted`'s texts for the sessions of `shaped`, with the shared system
    /// prompt `sp`.
    pub(super) fn new(
        counted: Counted,
        sp: &'a Option<SystemPromptInfo>,
        counter: &'a TokenCounter,
        shaped: &[Shaped],
    ) -> Encoder<'a> {
        let Counted { texts, counts } = counted;
        // Sessions' own system prompts (few, short), taken before texts are consumed below.
        let own_system: HashMap<u32, Arc<str>> = shaped
            .iter()
            .flat_map(|s| {
                s.cand.system.into_iter().chain(
                    s.cand
                        .graph
                        .iter()
                        .flat_map(|g| g.agents.iter().filter_map(|a| a.2)),
                )
            })
            .map(|id| (id, texts[id as usize].clone()))
            .collect();
        Encoder {
            literals: vec![None; texts.len()],
            texts,
            counts,
            msgs: HashMap::new(),
            sp,
            shared_system: sp.as_ref().map(|s| s.text.clone()),
            own_system,
            system_msgs: HashMap::new(),
            counter,
            recorded: Default::default(),
        }
    }

    /// Text `id` as a JSON literal. Each text is replaced by its JSON literal as soon as it is
    /// encoded, so the plan never holds two copies of a text.
    fn literal(&mut self, id: u32) -> Arc<str> {
        let texts = &mut self.texts;
        self.literals[id as usize]
            .get_or_insert_with(|| {
                let lit = json_literal(&texts[id as usize]);
                texts[id as usize] = Arc::from("");
                lit
            })
            .clone()
    }

    /// The message of text `id` sent as `role` (made the first time it is asked for).
    fn msg(&mut self, role: Role, id: u32) -> Msg {
        if let Some(m) = self.msgs.get(&(role, id)) {
            return m.clone();
        }
        let m = Arc::new(PlannedMessage {
            role,
            content_json: self.literal(id),
            tokens: self.counts[id as usize],
            extra_json: None,
        });
        self.msgs.insert((role, id), m.clone());
        m
    }

    /// The system message of a conversation whose own prompt is text `own` (with the shared
    /// prompt, if any); `None` when it has neither.
    fn system(&mut self, own: Option<u32>) -> Option<Msg> {
        (self.shared_system.is_some() || own.is_some()).then(|| {
            self.system_msgs
                .entry(own)
                .or_insert_with(|| {
                    system_message(
                        &self.shared_system,
                        own.and_then(|id| self.own_system.get(&id)),
                        self.sp,
                        self.counter,
                    )
                })
                .clone()
        })
    }

    /// Encodes every shaped session, in order, adding its turns' figures to `summary` (tool
    /// waits are capped at `gap_cap_ms`).
    pub(super) fn encode_sessions(
        mut self,
        shaped: Vec<Shaped>,
        waits: &ToolWaits,
        gap_cap_ms: f64,
        summary: &mut PlanSummary,
    ) -> Vec<PlannedSession> {
        let mut sessions = Vec::with_capacity(shaped.len());
        for s in shaped {
            sessions.push(self.encode_session(s, waits, gap_cap_ms, summary));
        }
        let [rec_in, rec_out, rec_cached] = &self.recorded;
        summary.recorded_input_tokens = rec_in.total();
        summary.recorded_output_tokens = rec_out.total();
        summary.recorded_cached_tokens = rec_cached.total();
        sessions
    }

    /// One planned session: its tool waits, system message, turns (a join's first messages are
    /// the answers it waits for) and graph.
    fn encode_session(
        &mut self,
        s: Shaped,
        waits: &ToolWaits,
        gap_cap_ms: f64,
        summary: &mut PlanSummary,
    ) -> PlannedSession {
        let Shaped {
            cand,
            outputs,
            prompts,
            peak,
        } = s;
        let waits = waits.of(&cand, &self.counts);
        let system = self.system(cand.system);
        let answers: Vec<u32> = cand.turns.iter().map(|t| t.answer).collect();
        let joins_of = |k: usize| -> &[u32] {
            cand.graph
                .as_ref()
                .map_or(&[][..], |g| g.resolved.joins[k].as_slice())
        };
        let joined: Vec<Vec<Msg>> = (0..cand.turns.len())
            .map(|k| {
                joins_of(k)
                    .iter()
                    .map(|&d| self.msg(Role::User, answers[d as usize]))
                    .collect()
            })
            .collect();
        let mut turns = Vec::with_capacity(cand.turns.len());
        for (k, t) in cand.turns.into_iter().enumerate() {
            let mut gap = waits[k];
            if gap > gap_cap_ms {
                gap = gap_cap_ms;
                summary.capped_gaps += 1;
            }
            summary.total_tool_wait_s += gap / 1000.0;
            let [rec_in, rec_out, rec_cached] = &mut self.recorded;
            rec_in.add(t.rec.input_tokens);
            rec_out.add(t.rec.output_tokens);
            rec_cached.add(t.rec.cached_tokens);
            let mut delta: Vec<Msg> = joined[k].clone();
            delta.extend(
                t.delta
                    .iter()
                    .map(|(r, id, extra)| with_extra(self.msg(*r, *id), extra)),
            );
            summary.new_input_tokens += delta.iter().map(|m| u64::from(m.tokens)).sum::<u64>();
            summary.input_tokens += prompts[k];
            summary.output_tokens += u64::from(outputs[k]);
            turns.push(PlannedTurn {
                index: k as u32,
                input_delta: delta,
                assistant: with_extra(self.msg(Role::Assistant, t.answer), &t.answer_extra),
                max_output_tokens: outputs[k],
                recorded_output_tokens: t.rec.output_tokens,
                recorded_input_tokens: t.rec.input_tokens,
                recorded_cached_tokens: t.rec.cached_tokens,
                pre_gap_ms: gap,
                est_prompt_tokens: prompts[k],
                timestamp_ms: t.rec.timestamp_ms,
            });
        }
        summary.turns += turns.len() as u64;
        let graph = cand.graph.map(|g| self.planned_graph(g, &turns));
        PlannedSession {
            id: cand.id,
            system,
            turns,
            peak_context: peak,
            model: cand.model,
            tools: cand.tools,
            graph,
        }
    }

    /// A session's graph as planned: its branches (a fresh one with its system message), joins,
    /// fork nodes and shape figures.
    fn planned_graph(&mut self, g: CandGraph, turns: &[PlannedTurn]) -> Box<PlannedGraph> {
        let branches = g
            .resolved
            .branches
            .iter()
            .enumerate()
            .map(|(b, br)| {
                let (agent, context, own) = match b.checked_sub(1) {
                    None => (
                        Arc::from(crate::format::MAIN_AGENT),
                        SubagentContext::Fork,
                        None,
                    ),
                    Some(k) => g.agents[k].clone(),
                };
                PlannedBranch {
                    agent,
                    fork: br.fork,
                    context,
                    system: (context == SubagentContext::Fresh)
                        .then(|| self.system(own))
                        .flatten(),
                    depth: br.depth,
                    first: br.first,
                    len: br.len,
                }
            })
            .collect();
        let mut forks = vec![false; turns.len()];
        for br in &g.resolved.branches {
            if let Some(f) = br.fork {
                forks[f as usize] = true;
            }
        }
        let mut pg = PlannedGraph {
            branches,
            joins: g.resolved.joins,
            branch_of: g.resolved.branch_of,
            forks,
            stats: GraphStats::default(),
        };
        pg.stats = graph_stats(&pg, turns, &g.resolved.order);
        Box::new(pg)
    }
}

// ---------------------------------------------------------------------------------------------
// 8. The summary.

/// Completes `summary` from the planned `sessions`: pool figures, distributions, the agent
/// graphs', estimated wall times and the note on skipped records.
pub(super) fn finish_summary(
    summary: &mut PlanSummary,
    sessions: &[PlannedSession],
    sp: &Option<SystemPromptInfo>,
    policy: OutputPolicy,
    report: &LoadReport,
) {
    summary.sessions = sessions.len() as u64;
    summary.system_prompt_tokens = sp.as_ref().map_or(0, |s| s.actual_tokens);
    summary.system_prompt = sp.clone();
    summary.peak_context = Dist::of(sessions.iter().map(|s| s.peak_context as f64).collect());
    summary.turns_per_session = Dist::of(sessions.iter().map(|s| s.turns.len() as f64).collect());
    summary.output_policy = Some(policy);
    let graphs: Vec<&GraphStats> = sessions
        .iter()
        .filter_map(|s| s.graph.as_ref().map(|g| &g.stats))
        .collect();
    if !graphs.is_empty() {
        let d = |f: &dyn Fn(&GraphStats) -> f64| {
            Dist::of(graphs.iter().map(|g| f(g)).collect()).unwrap_or_default()
        };
        summary.graph = Some(GraphSummary {
            graph_sessions: graphs.len() as u64,
            subagents: graphs.iter().map(|g| u64::from(g.subagents)).sum(),
            fan_out: d(&|g| f64::from(g.max_fan_out)),
            depth: d(&|g| f64::from(g.depth)),
            max_parallel: d(&|g| f64::from(g.max_parallel)),
            critical_path_output_tokens: d(&|g| g.critical_path_output_tokens as f64),
            est_serial_s: d(&|g| g.est_serial_s),
            est_parallel_s: d(&|g| g.est_parallel_s),
        });
    }
    for rate in [250u32, 1000, 4000] {
        summary.est_wall_time_s.insert(
            rate.to_string(),
            summary.output_tokens as f64 / f64::from(rate),
        );
    }
    if summary.skipped_invalid > 0 {
        summary.notes.push(format!(
            "{} invalid records skipped (first: {})",
            summary.skipped_invalid,
            report.skipped_examples.first().cloned().unwrap_or_default()
        ));
    }
}
