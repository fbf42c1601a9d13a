//! `--dataset agentic`: seeded synthetic agent graphs.
//!
//! A session is a main agent of `turns` steps. Each step after the first answers the
//! previous one's tool calls: `k` parallel calls (drawn from `parallel_tools`), whose results
//! are `k` messages of `input` tokens and whose wait is the slowest of `k` tool latencies
//! (`tool_wait`). A step may spawn subagents (on average `spawns` spawn points per session):
//! `fan_out` of them, each `subagent_turns` steps long, run side by side, and the next main
//! step joins them all. Subagents start `fresh` (their own conversation, as Claude Code's do)
//! or `fork` their parent's; below `depth`, a subagent step may spawn its own (`nest`).
//!
//! Every user message is `input` filler tokens and every answer `output` tokens, so counts are
//! exact by construction. The defaults are the figures of the public agent corpora, listed in
//! `docs/workload.md` ("Synthetic agent graphs") with their sources.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::format::{Message, Source, Subagent, SubagentContext, TraceSession, TraceTurn};

/// Weights of small counts: `1:21/2:8/3:8` draws 1 with weight 21, 2 with 8, 3 with 8.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Weights(pub Vec<(u32, f64)>);

impl Weights {
    fn draw(&self, rng: &mut ChaCha8Rng) -> u32 {
        let total: f64 = self.0.iter().map(|w| w.1).sum();
        let mut u = rng.random_range(0.0..total.max(f64::MIN_POSITIVE));
        for &(v, w) in &self.0 {
            if u < w {
                return v;
            }
            u -= w;
        }
        self.0.last().map_or(1, |w| w.0)
    }

    /// The mean count.
    pub fn mean(&self) -> f64 {
        let total: f64 = self.0.iter().map(|w| w.1).sum();
        self.0.iter().map(|&(v, w)| f64::from(v) * w).sum::<f64>() / total
    }
}

impl std::str::FromStr for Weights {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split('/') {
            let (v, w) = part
                .split_once(':')
                .ok_or_else(|| format!("{part:?}: expected COUNT:WEIGHT (e.g. 1:21/2:8)"))?;
            let v: u32 = v
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: the count must be a whole number"))?;
            let w: f64 = w
                .trim()
                .parse()
                .ok()
                .filter(|w: &f64| w.is_finite() && *w >= 0.0)
                .ok_or_else(|| format!("{part:?}: the weight must be a non-negative number"))?;
            if v == 0 {
                return Err(format!("{part:?}: counts start at 1"));
            }
            out.push((v, w));
        }
        if out.iter().all(|w| w.1 == 0.0) {
            return Err(format!("{s:?}: no weight above 0"));
        }
        Ok(Weights(out))
    }
}

impl std::fmt::Display for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(v, w)| format!("{v}:{w}")).collect();
        f.write_str(&parts.join("/"))
    }
}

/// Knobs of `--dataset agentic` (`--agentic KEY=VALUE,...`); see the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgenticSpec {
    /// Main-agent steps per session (`turns`).
    pub turns: u32,
    /// Tokens of each user message: the task, and each tool result (`input`).
    pub input: u32,
    /// Output tokens of every step (`output`).
    pub output: u32,
    /// Mean spawn points per session (`spawns`): each main step but the last spawns with
    /// probability `spawns / (turns - 1)`.
    pub spawns: f64,
    /// Subagents per spawn (`fan_out`).
    pub fan_out: Weights,
    /// Steps of a subagent, drawn uniformly from this range (`subagent_turns=LO-HI`).
    pub subagent_turns: (u32, u32),
    /// The deepest nesting (`depth`; 1: subagents of main only).
    pub depth: u32,
    /// Probability that a subagent step spawns subagents of its own, above `depth` (`nest`).
    pub nest: f64,
    /// Parallel tool calls per step (`parallel_tools`).
    pub parallel_tools: Weights,
    /// One tool call's latency: lognormal with this median, ms (`tool_wait_ms`).
    pub tool_wait_median_ms: f64,
    /// ... and this σ of its log (`tool_wait_sigma`).
    pub tool_wait_sigma: f64,
    /// Where subagents start (`context=fresh|fork`).
    pub context: SubagentContext,
}

impl Default for AgenticSpec {
    fn default() -> Self {
        AgenticSpec {
            turns: 45,
            input: 1_400,
            output: 216,
            spawns: 2.0,
            fan_out: Weights(vec![(1, 21.0), (2, 8.0), (3, 8.0)]),
            subagent_turns: (5, 17),
            depth: 1,
            nest: 0.0,
            parallel_tools: Weights(vec![(1, 85.0), (2, 10.0), (3, 3.0), (4, 2.0)]),
            tool_wait_median_ms: 129.0,
            tool_wait_sigma: 3.1,
            context: SubagentContext::Fresh,
        }
    }
}

impl AgenticSpec {
    /// The defaults with `KEY=VALUE,...` applied (`--agentic`); an unknown key or bad value
    /// names itself.
    pub fn parse(s: &str) -> Result<AgenticSpec, String> {
        let mut spec = AgenticSpec::default();
        for kv in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("{kv:?}: expected KEY=VALUE"))?;
            let (k, v) = (k.trim(), v.trim());
            let num = |what: &str| -> Result<f64, String> {
                v.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| format!("{what}={v:?}: expected a non-negative number"))
            };
            let whole = |what: &str| -> Result<u32, String> {
                v.parse::<u32>()
                    .map_err(|_| format!("{what}={v:?}: expected a whole number"))
            };
            match k {
                "turns" => spec.turns = whole(k)?,
                "input" => spec.input = whole(k)?,
                "output" => spec.output = whole(k)?,
                "spawns" => spec.spawns = num(k)?,
                "fan_out" => spec.fan_out = v.parse().map_err(|e| format!("fan_out: {e}"))?,
                "subagent_turns" => {
                    let (lo, hi) = v.split_once('-').unwrap_or((v, v));
                    let p = |x: &str| {
                        x.trim()
                            .parse::<u32>()
                            .map_err(|_| format!("subagent_turns={v:?}: expected LO-HI"))
                    };
                    spec.subagent_turns = (p(lo)?, p(hi)?);
                }
                "depth" => spec.depth = whole(k)?,
                "nest" => spec.nest = num(k)?,
                "parallel_tools" => {
                    spec.parallel_tools = v.parse().map_err(|e| format!("parallel_tools: {e}"))?
                }
                "tool_wait_ms" => spec.tool_wait_median_ms = num(k)?,
                "tool_wait_sigma" => spec.tool_wait_sigma = num(k)?,
                "context" => {
                    spec.context = match v {
                        "fresh" => SubagentContext::Fresh,
                        "fork" => SubagentContext::Fork,
                        _ => return Err(format!("context={v:?}: expected fresh or fork")),
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown key {k:?} (turns, input, output, spawns, fan_out, \
                         subagent_turns, depth, nest, parallel_tools, tool_wait_ms, \
                         tool_wait_sigma, context)"
                    ));
                }
            }
        }
        spec.validate()?;
        Ok(spec)
    }

    /// Refuses values no session can be made of.
    pub fn validate(&self) -> Result<(), String> {
        if self.turns == 0 || self.input == 0 || self.output == 0 {
            return Err("turns, input and output must be at least 1".into());
        }
        let (lo, hi) = self.subagent_turns;
        if lo == 0 || hi < lo {
            return Err(format!("subagent_turns={lo}-{hi}: need 1 <= LO <= HI"));
        }
        if self.nest > 1.0 {
            return Err(format!("nest={}: a probability, at most 1", self.nest));
        }
        Ok(())
    }

    /// `KEY=VALUE,...` of every knob (what a run records and `--agentic` reads back).
    pub fn text(&self) -> String {
        format!(
            "turns={},input={},output={},spawns={},fan_out={},subagent_turns={}-{},depth={},\
             nest={},parallel_tools={},tool_wait_ms={},tool_wait_sigma={},context={}",
            self.turns,
            self.input,
            self.output,
            self.spawns,
            self.fan_out,
            self.subagent_turns.0,
            self.subagent_turns.1,
            self.depth,
            self.nest,
            self.parallel_tools,
            self.tool_wait_median_ms,
            self.tool_wait_sigma,
            match self.context {
                SubagentContext::Fresh => "fresh",
                SubagentContext::Fork => "fork",
            }
        )
    }
}

struct Gen<'a> {
    spec: &'a AgenticSpec,
    rng: ChaCha8Rng,
    seed: u64,
    text_n: u64,
    gap_cap_ms: f64,
    subagents: Vec<Subagent>,
}

impl Gen<'_> {
    fn text(&mut self, tokens: u32) -> String {
        self.text_n += 1;
        crate::text::filler(
            self.seed ^ self.text_n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            tokens,
        )
    }

    fn user(&mut self) -> Message {
        Message {
            role: "user".into(),
            content: self.text(self.spec.input),
            tool_call_id: None,
        }
    }

    /// One tool call's latency, ms.
    fn tool_ms(&mut self) -> f64 {
        let z = rand_distr::Distribution::<f64>::sample(&rand_distr::StandardNormal, &mut self.rng);
        self.spec.tool_wait_median_ms * (self.spec.tool_wait_sigma * z).exp()
    }

    /// A step's input after the first: its parallel tool results, and the wait for the
    /// slowest call.
    fn tool_step(&mut self) -> (Vec<Message>, f64) {
        let k = self.spec.parallel_tools.draw(&mut self.rng);
        let msgs = (0..k).map(|_| self.user()).collect();
        let wait = (0..k).map(|_| self.tool_ms()).fold(0.0, f64::max);
        (msgs, wait.min(self.gap_cap_ms))
    }

    fn turn(&mut self, index: u32, delta: Vec<Message>, gap: f64) -> TraceTurn {
        let answer = self.text(self.spec.output);
        let mut t = TraceTurn::new(index, delta, answer);
        t.output_tokens = Some(u64::from(self.spec.output));
        t.pre_gap_ms = Some(gap);
        t
    }

    /// The steps of one conversation (`agent`, at `depth`): spawns happen with probability
    /// `p_spawn` at each step but the last, and the next step joins them.
    fn conversation(
        &mut self,
        agent: &str,
        depth: u32,
        steps: u32,
        p_spawn: f64,
    ) -> Vec<TraceTurn> {
        let mut turns: Vec<TraceTurn> = Vec::with_capacity(steps as usize);
        let mut joins: Vec<String> = Vec::new();
        for i in 0..steps {
            let mut t = if i == 0 {
                let task = self.user();
                self.turn(0, vec![task], 0.0)
            } else if !joins.is_empty() {
                // The subagents' answers are this step's input (the plan adds them).
                let gap = self.tool_ms().min(self.gap_cap_ms);
                let mut t = self.turn(i, Vec::new(), gap);
                t.after = std::mem::take(&mut joins);
                t
            } else {
                let (delta, gap) = self.tool_step();
                self.turn(i, delta, gap)
            };
            if i + 1 < steps && depth < self.spec.depth && self.rng.random::<f64>() < p_spawn {
                let fan = self.spec.fan_out.draw(&mut self.rng);
                for c in 0..fan {
                    let id = if agent == crate::format::MAIN_AGENT {
                        format!("sub-{i}-{c}")
                    } else {
                        format!("{agent}.{i}-{c}")
                    };
                    let (lo, hi) = self.spec.subagent_turns;
                    let len = self.rng.random_range(lo..=hi);
                    let nest = self.spec.nest;
                    let child = self.conversation(&id, depth + 1, len, nest);
                    joins.push(format!("{id}:{}", len - 1));
                    self.subagents.push(Subagent {
                        agent_id: id,
                        after: format!("{agent}:{i}"),
                        context: self.spec.context,
                        subagent_type: Some("synthetic".into()),
                        system_prompt: None,
                        turns: child,
                    });
                }
            }
            t.index = i;
            turns.push(t);
        }
        turns
    }
}

/// `n` sessions of `spec`, seeded; tool waits are capped at `gap_cap_ms`.
pub fn sessions(
    spec: &AgenticSpec,
    n: u32,
    seed: u64,
    gap_cap_ms: f64,
) -> impl Iterator<Item = TraceSession> + '_ {
    (0..n).map(move |s| {
        let mut g = Gen {
            spec,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0xa9e7_1c00 ^ (u64::from(s) << 20)),
            seed: seed ^ (u64::from(s) << 40),
            text_n: 0,
            gap_cap_ms,
            subagents: Vec::new(),
        };
        let p = if spec.turns > 1 {
            (spec.spawns / f64::from(spec.turns - 1)).min(1.0)
        } else {
            0.0
        };
        let turns = g.conversation("main", 0, spec.turns, p);
        let subagents = std::mem::take(&mut g.subagents);
        TraceSession {
            session_id: format!("agentic-{s}"),
            source: Some(Source {
                dataset: Some("synthetic".into()),
                agent: Some("agentic".into()),
                ..Default::default()
            }),
            system_prompt: None,
            turns,
            tools: None,
            subagents,
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sessions_are_valid_graphs_and_the_same_for_the_same_seed() {
        let spec = AgenticSpec {
            depth: 2,
            nest: 0.3,
            spawns: 4.0,
            ..AgenticSpec::default()
        };
        let a: Vec<TraceSession> = sessions(&spec, 20, 7, 30_000.0).collect();
        let b: Vec<TraceSession> = sessions(&spec, 20, 7, 30_000.0).collect();
        assert_eq!(a, b);
        let c: Vec<TraceSession> = sessions(&spec, 20, 8, 30_000.0).collect();
        assert_ne!(a, c);
        let mut nested = 0;
        for s in &a {
            s.check().unwrap();
            let g = crate::graph::resolve(s).unwrap();
            nested += g.branches.iter().filter(|b| b.depth == 2).count();
            assert!(g.branches.iter().all(|b| b.depth <= 2));
            for t in s
                .turns
                .iter()
                .chain(s.subagents.iter().flat_map(|a| &a.turns))
            {
                assert!(t.pre_gap_ms.unwrap() <= 30_000.0);
            }
        }
        assert!(nested > 0, "nest=0.3 at depth 2 made no nested subagent");
    }

    #[test]
    fn the_shape_follows_the_knobs() {
        let spec = AgenticSpec::parse("turns=40,spawns=3,fan_out=2:1,subagent_turns=4-4,parallel_tools=3:1,tool_wait_ms=100,tool_wait_sigma=0").unwrap();
        let all: Vec<TraceSession> = sessions(&spec, 200, 1, 30_000.0).collect();
        let spawns: usize = all.iter().map(|s| s.subagents.len()).sum();
        // 2 subagents per spawn, 3 spawns per session on average.
        let mean = spawns as f64 / 200.0 / 2.0;
        assert!((mean - 3.0).abs() < 0.4, "{mean}");
        for s in &all {
            assert!(s.subagents.iter().all(|a| a.turns.len() == 4));
            for (i, t) in s.turns.iter().enumerate().skip(1) {
                if t.after.is_empty() {
                    assert_eq!(t.input_delta.len(), 3, "three parallel tool results");
                    assert_eq!(
                        t.pre_gap_ms,
                        Some(100.0),
                        "the slowest of three 100 ms calls"
                    );
                } else {
                    assert!(t.input_delta.is_empty());
                    assert_eq!(t.after.len(), 2, "turn {i} joins both");
                }
            }
        }
        let e = AgenticSpec::parse("fan_out=0:3").unwrap_err();
        assert!(e.contains("counts start at 1"), "{e}");
        let e = AgenticSpec::parse("depht=2").unwrap_err();
        assert!(e.contains("unknown key \"depht\""), "{e}");
        assert_eq!(
            AgenticSpec::parse(&AgenticSpec::default().text()).unwrap(),
            AgenticSpec::default()
        );
    }
}
