//! `bench-workload`: session traces in, a validated plan out.
//!
//! * [`mod@format`]: the native session format ([`format::TraceSession`]).
//! * [`load`]: streaming `.jsonl`, `.jsonl.zst`, `.json` and dataset directories.
//! * [`import`]: LMCache, Mooncake, ShareGPT, OpenAI-messages and SWE-agent traces, and the agent
//!   graphs of cc-traces, OpenTelemetry GenAI spans and TraceLab, into it.
//! * [`graph`]: agent graphs (subagents, joins) resolved and checked; [`agentic`]: synthetic ones.
//! * [`tokenize`]: token counting (the embedded Qwen3 tokenizer by default).
//! * [`plan`]: selection and shaping into a [`plan::Plan`] built for the replay hot loop.
//! * [`abench`]: agentic-bench's `--dataset-name NAME/TIER` and `--dataset-path`, resolved.
//!
//! Plain synchronous code: no tokio, no hyper.
//!
//! ```
//! use bench_workload::plan::{build_plan, DatasetSpec, PlanConfig, SyntheticSpec};
//! use bench_workload::tokenize::TokenizerSpec;
//!
//! let mut cfg = PlanConfig::new(DatasetSpec::Random(SyntheticSpec::default()));
//! cfg.tokenizer = TokenizerSpec::Chars; // ~4 characters per token
//! cfg.concurrency = 4;                   // pool of 2 × 4 sessions
//! let plan = build_plan(cfg).unwrap();
//! assert_eq!(plan.summary.sessions, 8);
//! assert_eq!(plan.sessions[0].turns.len(), 10);
//! ```

pub mod abench;
pub mod agentic;
pub mod error;
pub mod format;
pub mod graph;
pub mod import;
pub mod load;
pub mod plan;
pub mod shard;
pub mod text;
pub mod tokenize;
pub mod write;

pub use error::PlanError;
