//! `bench plan`'s and `bench import`'s flags, and the dataset flags `bench run` shares.

use std::path::PathBuf;

use bench_workload::plan::{DatasetSpec, GapPolicy, OutputPolicy, PlanConfig, SyntheticSpec};
use bench_workload::{PlanError, abench};
use clap::Args;

use crate::CliError;

/// `--tool-messages`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ToolMessagesArg {
    /// Tool results as user text; tool calls dropped.
    Coerce,
    /// Tool calls and results as recorded.
    Faithful,
}

/// Dataset selection and shaping flags (shared by `bench plan` and `bench run`; recorded in a
/// run's `run.json` for `--resume`).
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// Sessions: `sample` (the bundled sample), `random` (synthetic, see --turns ...),
    /// `agentic` (synthetic agent graphs with subagents, see --agentic), or a native trace: a
    /// .jsonl / .jsonl.zst / .json file or a directory of them.
    #[arg(
        long,
        default_value = "sample",
        value_name = "sample|random|agentic|PATH"
    )]
    pub dataset: String,
    /// `--dataset agentic`: KEY=VALUE,... over the defaults taken from the public agent
    /// corpora (docs/workload.md): turns=45, input=1400, output=216, spawns=2,
    /// fan_out=1:21/2:8/3:8, subagent_turns=5-17, depth=1, nest=0,
    /// parallel_tools=1:85/2:10/3:3/4:2, tool_wait_ms=129, tool_wait_sigma=3.1, context=fresh.
    #[arg(
        long,
        value_name = "KEY=VALUE,...",
        help_heading = "Synthetic workload (--dataset random)"
    )]
    pub agentic: Option<String>,
    /// agentic-bench's dataset: `NAME/TIER` (read from ~/abench_data/NAME/TIER/, with its
    /// manifest.json defaults) or `random` (= --dataset random).
    #[arg(long, value_name = "NAME/TIER|random", conflicts_with = "dataset", help_heading = ABENCH)]
    pub dataset_name: Option<String>,
    /// agentic-bench's data location: a session file, a tier directory, or a root holding
    /// NAME/TIER/ (NAME/TIER from --dataset-name, default deepswe/mixed).
    #[arg(long, value_name = "PATH", conflicts_with = "dataset", help_heading = ABENCH)]
    pub dataset_path: Option<PathBuf>,
    /// Token counter: `qwen3` (embedded), `none` (~4 characters per token), or a
    /// tokenizer.json / model directory.
    #[arg(long, default_value = "qwen3", value_name = "qwen3|none|PATH")]
    pub tokenizer: String,
    /// Keep sessions with at least this many turns.
    #[arg(long)]
    pub min_turns: Option<u32>,
    /// Cut sessions to at most this many turns (never pads).
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Lower bound of the peak-context band, tokens.
    #[arg(long)]
    pub min_context: Option<u64>,
    /// The model's window, tokens: sessions whose peak context (shared system prompt and
    /// pinned output included) exceeds it are left out.
    #[arg(long)]
    pub max_context: Option<u64>,
    /// Sessions in the pool [default: 2 × --concurrency].
    #[arg(long)]
    pub num_sessions: Option<u32>,
    /// Concurrent sessions (the plan's pool is 2 × this by default) [default: 8]. With
    /// `bench run --rate`: the most sessions in flight [default: no limit].
    #[arg(short = 'c', long, visible_alias = "max-concurrency", value_name = "C")]
    pub concurrency: Option<u32>,
    /// Seed of the shuffle and of synthetic text and gaps.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output pinning: `trace` (as recorded), `fixed:K`, or `budget:T` (T per session, split
    /// evenly over its turns) [default: trace].
    #[arg(long, value_name = "POLICY")]
    pub output_policy: Option<String>,
    /// A shared system prompt of exactly this many tokens, prepended to every session.
    #[arg(long, visible_alias = "system-prompt-len")]
    pub system_prompt_tokens: Option<u32>,
    /// Tool waits are capped at this many ms.
    #[arg(long, default_value_t = 30_000.0)]
    pub gap_cap_ms: f64,
    /// Take recorded gaps as pure tool waits (do not subtract the recording model's
    /// generation time).
    #[arg(long)]
    pub raw_gaps: bool,
    /// Count and skip invalid trace records instead of stopping at the first.
    #[arg(long)]
    pub skip_invalid: bool,
    /// The longest line of a trace file read (bytes, or 64MiB, 1GiB...): a longer one is an
    /// invalid record, read no further than the cap, so memory stays bounded.
    #[arg(long, value_name = "SIZE", default_value = "64MiB",
          value_parser = bench_transport::limits::parse_bytes)]
    pub max_trace_line: u64,
    /// How the trace's tool calls and results are sent: coerce (results as user text, calls
    /// dropped: every chat template accepts it) or faithful (assistant `tool_calls` with their
    /// ids, results as `role: tool` with `tool_call_id`, and the recorded `tools`
    /// definitions: what the agent sent; chat endpoint only).
    #[arg(long, value_enum, default_value_t = ToolMessagesArg::Coerce)]
    pub tool_messages: ToolMessagesArg,
    /// Synthetic: turns per session.
    #[arg(long, default_value_t = SyntheticSpec::default().turns, help_heading = "Synthetic workload (--dataset random)")]
    pub turns: u32,
    /// Synthetic: new user tokens per turn.
    #[arg(long, default_value_t = SyntheticSpec::default().input_increment, help_heading = "Synthetic workload (--dataset random)")]
    pub input_increment: u32,
    /// Synthetic: output tokens per turn.
    #[arg(long, default_value_t = SyntheticSpec::default().output_len, help_heading = "Synthetic workload (--dataset random)")]
    pub output_len: u32,
    /// Synthetic: tool wait before each turn after the first: `zero`, `fixed:MS`,
    /// `uniform:LO,HI`, `exponential:MEAN` (capped by --gap-cap-ms).
    #[arg(
        long,
        default_value = "zero",
        help_heading = "Synthetic workload (--dataset random)"
    )]
    pub gap_policy: String,
}

/// `--concurrency` when not given.
pub const DEFAULT_CONCURRENCY: u32 = 8;

/// The help heading of the flags taken from agentic-bench (docs/agentic-bench.md).
pub const ABENCH: &str = "agentic-bench compatibility";

impl PlanArgs {
    /// `--concurrency`, or its default.
    pub fn concurrency(&self) -> u32 {
        self.concurrency.unwrap_or(DEFAULT_CONCURRENCY)
    }

    /// The plan configuration these flags describe.
    pub fn to_config(&self) -> Result<PlanConfig, CliError> {
        let synthetic = || -> Result<DatasetSpec, CliError> {
            Ok(DatasetSpec::Random(SyntheticSpec {
                turns: self.turns,
                input_increment: self.input_increment,
                output_len: self.output_len,
                gap: self
                    .gap_policy
                    .parse::<GapPolicy>()
                    .map_err(|e| CliError::Usage(format!("--gap-policy: {e}")))?,
            }))
        };
        let (name, path) = (self.dataset_name.as_deref(), self.dataset_path.as_deref());
        let dataset = if name.is_some() || path.is_some() {
            match abench::resolve(name, path, abench::data_root().as_deref()).map_err(plan_error)? {
                abench::AbenchDataset::Random => synthetic()?,
                abench::AbenchDataset::Path(p) => DatasetSpec::Path(p),
            }
        } else {
            match self.dataset.as_str() {
                "sample" => DatasetSpec::Sample,
                "random" => synthetic()?,
                "agentic" => DatasetSpec::Agentic(
                    bench_workload::agentic::AgenticSpec::parse(
                        self.agentic.as_deref().unwrap_or(""),
                    )
                    .map_err(|e| CliError::Usage(format!("--agentic: {e}")))?,
                ),
                p => DatasetSpec::Path(PathBuf::from(p)),
            }
        };
        let mut cfg = PlanConfig::new(dataset);
        cfg.tokenizer = self.tokenizer.parse().unwrap_or_default();
        cfg.min_turns = self.min_turns;
        cfg.max_turns = self.max_turns;
        cfg.min_context = self.min_context;
        cfg.max_context = self.max_context;
        cfg.num_sessions = self.num_sessions;
        cfg.concurrency = self.concurrency();
        cfg.seed = self.seed;
        cfg.output = match &self.output_policy {
            Some(p) => Some(
                p.parse::<OutputPolicy>()
                    .map_err(|e| CliError::Usage(format!("--output-policy: {e}")))?,
            ),
            None => None,
        };
        cfg.system_prompt_tokens = self.system_prompt_tokens;
        cfg.gap_cap_ms = self.gap_cap_ms;
        cfg.raw_gaps = self.raw_gaps;
        cfg.skip_invalid = self.skip_invalid;
        cfg.max_trace_line_bytes = self.max_trace_line;
        cfg.tool_messages = match self.tool_messages {
            ToolMessagesArg::Coerce => bench_workload::plan::ToolMessages::Coerce,
            ToolMessagesArg::Faithful => bench_workload::plan::ToolMessages::Faithful,
        };
        cfg.validate().map_err(plan_error)?;
        Ok(cfg)
    }
}

/// Maps a planning error to an exit code: bad input or flags → 2.
pub fn plan_error(e: PlanError) -> CliError {
    CliError::Usage(e.to_string())
}

/// `bench plan` flags.
#[derive(Debug, Clone, Args)]
pub struct PlanCmd {
    /// Selection flags.
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Print one JSON object (stable keys: sessions, turns, input_tokens, output_tokens,
    /// system_prompt_tokens, tokenizer, ...).
    #[arg(long)]
    pub json: bool,
}

/// `bench import` flags.
#[derive(Debug, Clone, Args)]
pub struct ImportCmd {
    /// Input format: lmcache, mooncake, sharegpt, openai-messages, swe-agent, cc-traces (the
    /// Weka-format Claude Code corpus, with subagents), otel (OpenTelemetry GenAI spans),
    /// tracelab (Claude Code / Codex rounds).
    #[arg(long = "from", value_name = "FORMAT")]
    pub from: String,
    /// Input files or directories (.zst- and .gz-compressed inputs are read transparently).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Output trace: .jsonl, or .jsonl.zst to compress.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// Count and skip invalid records instead of stopping at the first.
    #[arg(long)]
    pub skip_invalid: bool,
    /// The longest line of a JSON Lines input read (bytes, or 64MiB, 1GiB...): a longer one is
    /// an invalid record, read no further than the cap, so memory stays bounded.
    #[arg(long, value_name = "SIZE", default_value = "64MiB",
          value_parser = bench_transport::limits::parse_bytes)]
    pub max_trace_line: u64,
}
