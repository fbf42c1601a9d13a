//! `bench journeys`' flags and the [`JourneysSpec`] they describe.

use std::path::PathBuf;
use std::time::Duration;

use bench_run::EmbeddedSim;
use bench_run::journeys::JourneysSpec;
use clap::Args;

use crate::run::{EmbeddedSimArgs, parse_duration};
use crate::{CliError, run_error};

/// `bench journeys` flags.
#[derive(Debug, Clone, Args)]
pub struct JourneysCmd {
    /// Start from the suite spec in FILE (TOML, or JSON when it ends in .json; --print-spec
    /// writes one): flags given beside it override the settings they name.
    #[arg(long, value_name = "SPEC_FILE")]
    pub spec: Option<PathBuf>,
    /// Print the suite spec the flags (and --spec) make, as TOML, and exit.
    #[arg(long)]
    pub print_spec: bool,
    /// Built-in pack: `openai` (any OpenAI-compatible server; the embedded simulator by
    /// default), `agent-sessions` (an agent server's session API, e.g. Omnigent) or
    /// `agent-turns` (full agent turns: needs a runner and an LLM behind the server; see
    /// --list for its parameters) [default: openai].
    #[arg(long, conflicts_with = "file")]
    pub pack: Option<String>,
    /// Journeys from a declarative TOML file instead of a pack (see docs/journeys.md).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Only these journeys, in this order (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub journeys: Vec<String>,
    /// List the journeys (name, kind, flags, description) and the file's parameters, then
    /// exit.
    #[arg(long)]
    pub list: bool,
    /// A value for a parameter of the pack or file, `NAME=VALUE` (repeatable; --list shows
    /// them). Recorded in the report: put secrets in the environment and use {{env.NAME}}.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Server to time (http:// or https://). Without it the `openai` pack starts the embedded
    /// simulator; other journeys need it.
    #[arg(long, env = "BENCH_BASE_URL")]
    pub base_url: Option<String>,
    /// Timed operations per latency run (a journey's own cap may lower it).
    #[arg(long, default_value_t = 50)]
    pub iterations: u32,
    /// Untimed operations before timing (their errors are ignored).
    #[arg(long, default_value_t = 5)]
    pub warmup: u32,
    /// Operations in flight. Above 1, concurrency-safe journeys run as throughput.
    #[arg(short = 'c', long, default_value_t = 1)]
    pub concurrency: u32,
    /// Timed operations per throughput run.
    #[arg(long, default_value_t = 200)]
    pub requests: u32,
    /// Repeat every journey this many times (per-run rows plus a summary).
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Per-request timeout.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub timeout: Duration,
    /// Extra request header, `K=V` (repeatable). The values of Authorization,
    /// Proxy-Authorization and headers whose names contain key, token, secret, auth or cookie
    /// are secrets, as is every {{env.NAME}} a --file reads: never shown (`***`; see
    /// docs/secrets.md).
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    /// Treat the value of header NAME (a --header) as a secret too, whatever its name
    /// (repeatable).
    #[arg(long = "secret-header", value_name = "NAME")]
    pub secret_headers: Vec<String>,
    /// Write the versioned JSON report to FILE.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Record the run in RUN_DIR (run.json, events.jsonl, report.json), as `bench status`
    /// and `bench merge` read it.
    #[arg(long, value_name = "RUN_DIR")]
    pub run_dir: Option<PathBuf>,
    /// Write a markdown summary (for PR comments) to FILE.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Print the JSON report instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Fail (exit 1) when a journey's mean req/s is below this.
    #[arg(long)]
    pub min_rps: Option<f64>,
    /// Fail (exit 1) when a journey's mean p50 is above this many ms.
    #[arg(long)]
    pub max_p50_ms: Option<f64>,
    /// Fail (exit 1) when a journey's mean p99 is above this many ms.
    #[arg(long)]
    pub max_p99_ms: Option<f64>,
    /// Compare with a previous `--output` report: a p50 or p95 regression beyond --threshold
    /// fails (exit 1); new and skipped journeys are reported, not failed. Both sides use the
    /// median over runs, so one disturbed run of three does not fail the gate.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Allowed relative regression against --baseline (0.2 = 20 %).
    #[arg(long, default_value_t = 0.2)]
    pub threshold: f64,
    /// Increases smaller than this many ms are never regressions (timer noise on
    /// sub-millisecond operations).
    #[arg(long, default_value_t = 0.0)]
    pub min_delta_ms: f64,
    /// The API the openai pack's generation journeys call: chat, responses, messages or
    /// completions (their descriptions name the chat path).
    #[arg(long, default_value = "chat", value_name = "API")]
    pub endpoint: bench_transport::Endpoint,
    /// Play shard I of N (0-based) of the suite's journey runs (the (journey, run) pairs in
    /// order, every N-th from the I-th), with --run-dir; `bench merge` puts the shards' reports
    /// together. Give --runs of at least N / (journeys) so every shard has a run.
    #[arg(
        long,
        value_name = "I/N",
        conflicts_with = "shards",
        requires = "run_dir"
    )]
    pub shard: Option<bench_workload::shard::Shard>,
    /// Play one of N shards, I taken from JOB_COMPLETION_INDEX (Kubernetes Indexed Jobs).
    #[arg(long, value_name = "N", requires = "run_dir")]
    pub shards: Option<u32>,
    /// Start timing at this UTC time (RFC 3339), so that shards on several hosts start
    /// together. Refused when already more than 5 s past.
    #[arg(long, value_name = "UTC_TIME", value_parser = bench_run::placement::parse_start_at)]
    pub start_at: Option<time::OffsetDateTime>,
    /// Cap on one event-stream line or event a server sends (bytes, or 8MiB, 1GiB...): past it
    /// the operation fails as `response_too_large` and the rest is not read.
    #[arg(long, value_name = "SIZE", value_parser = bench_transport::limits::parse_bytes,
          default_value = "8MiB", help_heading = "Response size caps")]
    pub max_event_bytes: u64,
    /// Cap on one response body, streamed or not (past it: `response_too_large`).
    #[arg(long, value_name = "SIZE", value_parser = bench_transport::limits::parse_bytes,
          default_value = "64MiB", help_heading = "Response size caps")]
    pub max_response_bytes: u64,
    /// Cap on one answer read whole: a JSON body, a journey step's response (past it:
    /// `response_too_large`).
    #[arg(long, value_name = "SIZE", value_parser = bench_transport::limits::parse_bytes,
          default_value = "8MiB", help_heading = "Response size caps")]
    pub max_json_bytes: u64,
    /// TLS for an https:// --base-url.
    #[command(flatten)]
    pub tls: crate::TlsArgs,
    /// Embedded simulator (openai pack without --base-url).
    #[command(flatten)]
    pub sim: EmbeddedSimArgs,
}

/// Where `bench journeys` flags go in a [`JourneysSpec`] when they are not its field of the
/// same name (JSON pointers; the other flags that are fields are `/<flag>`).
const JOURNEY_KEYS: &[(&str, &str)] = &[
    ("shards", "/shard"),
    ("ca_cert", "/tls/ca_cert"),
    ("insecure", "/tls/insecure"),
    ("client_cert", "/tls/client_cert"),
    ("client_key", "/tls/client_key"),
    ("sim_ttft_ms", "/sim/latency"),
    ("sim_itl_ms", "/sim/latency"),
    ("sim_instant", "/sim/latency"),
    ("sim_max_model_len", "/sim/max_model_len"),
    ("sim_kv_capacity_tokens", "/sim/kv_capacity_tokens"),
    ("sim_max_num_seqs", "/sim/max_num_seqs"),
    ("sim_time_scale", "/sim/time_scale"),
    ("sim_reasoning_tokens", "/sim/reasoning_tokens"),
];

impl JourneysCmd {
    /// The suite these flags describe, over `--spec`'s when given (`given`: the ids of the
    /// flags given on the command line).
    pub fn to_spec_given(&self, given: &[String]) -> Result<JourneysSpec, CliError> {
        let flags = self.to_spec()?;
        let Some(path) = &self.spec else {
            return Ok(flags);
        };
        let mut file: JourneysSpec = bench_run::specfile::read(path).map_err(run_error)?;
        // A journeys file named in the spec is found from the spec's folder.
        if let (Some(f), Some(dir)) = (&mut file.file, path.parent())
            && f.is_relative()
        {
            *f = dir.join(&*f);
        }
        let fields = serde_json::to_value(&flags).unwrap_or_default();
        let pointers: Vec<String> = given
            .iter()
            .filter_map(|id| match JOURNEY_KEYS.iter().find(|(k, _)| k == id) {
                Some((_, p)) => Some((*p).to_owned()),
                None => fields.get(id.as_str()).map(|_| format!("/{id}")),
            })
            .collect();
        let pointers: Vec<&str> = pointers.iter().map(String::as_str).collect();
        bench_run::specfile::overlay(&file, &flags, &pointers).map_err(run_error)
    }

    /// The suite these flags describe (the embedded simulator's flags are checked only when
    /// it is used).
    pub fn to_spec(&self) -> Result<JourneysSpec, CliError> {
        let sim = match (&self.base_url, self.list) {
            (None, false) => {
                let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
                let c = self.sim.to_model_args().to_config(any, String::new());
                EmbeddedSim::from_config(&c.map_err(CliError::Usage)?)
            }
            _ => EmbeddedSim::default(),
        };
        let mut params = std::collections::BTreeMap::new();
        for p in &self.params {
            let Some((k, v)) = p.split_once('=') else {
                return Err(CliError::Usage(format!("--param {p:?}: give NAME=VALUE")));
            };
            if params.insert(k.trim().to_owned(), v.to_owned()).is_some() {
                return Err(CliError::Usage(format!(
                    "--param {}: given twice",
                    k.trim()
                )));
            }
        }
        let placement = bench_run::placement::Placement::from_flags(
            self.shard,
            self.shards,
            std::env::var("JOB_COMPLETION_INDEX").ok().as_deref(),
            self.start_at,
        )
        .map_err(run_error)?;
        Ok(JourneysSpec {
            placement,
            params,
            pack: self.pack.clone(),
            file: self.file.clone(),
            journeys: self.journeys.clone(),
            base_url: self.base_url.clone(),
            iterations: self.iterations,
            warmup: self.warmup,
            concurrency: self.concurrency,
            requests: self.requests,
            runs: self.runs,
            timeout: self.timeout,
            sim,
            min_rps: self.min_rps,
            max_p50_ms: self.max_p50_ms,
            max_p99_ms: self.max_p99_ms,
            tls: self.tls.options(),
            endpoint: self.endpoint,
            max_event_bytes: self.max_event_bytes,
            max_response_bytes: self.max_response_bytes,
            max_json_bytes: self.max_json_bytes,
        })
    }
}
