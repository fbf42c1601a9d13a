//! Whether a run's numbers can be trusted: a verdict over documented checks (`result.json`
//! `validity`). Each check says what it measured, against which threshold, and why it matters;
//! a check that cannot be made on this run says so (`skipped`) instead of passing.

use serde::{Deserialize, Serialize};

use crate::record::TurnRecord;
use crate::result::RunResult;
use crate::stats::percentile;

/// The run's verdict: `invalid` when any check failed, `suspect` when any warned, else
/// `valid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every check that could be made passed.
    Valid,
    /// A check warned: read the figures with its explanation in mind.
    Suspect,
    /// A check failed: the figures do not describe the server.
    Invalid,
}

impl Verdict {
    /// `valid`, `suspect` or `invalid`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Valid => "valid",
            Verdict::Suspect => "suspect",
            Verdict::Invalid => "invalid",
        }
    }
}

fn verdict_of(checks: &[Check]) -> Verdict {
    if checks.iter().any(|c| c.status == CheckStatus::Fail) {
        Verdict::Invalid
    } else if checks.iter().any(|c| c.status == CheckStatus::Warn) {
        Verdict::Suspect
    } else {
        Verdict::Valid
    }
}

/// One check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// Within its threshold.
    Pass,
    /// Past its warning threshold: the run is suspect.
    Warn,
    /// Past its failure threshold: the run is invalid.
    Fail,
    /// Not applicable or not measurable on this run (the explanation says why).
    Skipped,
}

/// One validity check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Stable identifier (`error_rate`, `dispatch_lag`, …).
    pub name: String,
    /// How it came out.
    pub status: CheckStatus,
    /// What was measured (its unit is in the threshold text); `null` when skipped.
    pub value: Option<f64>,
    /// The thresholds, in words (`warn ≥ 5 ms, fail ≥ 50 ms`).
    pub threshold: String,
    /// What the value means for this run.
    pub explanation: String,
}

/// The `validity` block of `result.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Validity {
    /// The verdict over `checks`.
    pub verdict: Verdict,
    /// Every check, in a fixed order.
    pub checks: Vec<Check>,
}

/// The client's own CPU over the measured phase (`result.json` `client`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientCpu {
    /// User + system CPU time of the process over the measured phase (getrusage), s.
    pub cpu_s: f64,
    /// Wall time of the measured phase, s.
    pub wall_s: f64,
    /// `cpu_s ÷ wall_s`: cores kept busy (1.0 = one full core).
    pub cores: Option<f64>,
    /// The process also ran the server (the embedded simulator): its CPU is in `cpu_s`.
    pub includes_server: bool,
    /// The process's peak resident memory over its whole life (getrusage `ru_maxrss`), in
    /// bytes. Written when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// The process's own CPU time (user + system, getrusage) when the measured phase began: its
    /// start-up, planning, warm-up and readiness checks; `cpu_s` is what came after. Written
    /// when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_cpu_start_s: Option<f64>,
    /// The process's CPU time when the measured phase ended (`process_cpu_start_s + cpu_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_cpu_end_s: Option<f64>,
}

impl ClientCpu {
    /// From the two readings; `cores` is `null` when the wall time is not positive.
    pub fn new(cpu_s: f64, wall_s: f64, includes_server: bool) -> ClientCpu {
        ClientCpu {
            cpu_s,
            wall_s,
            cores: (wall_s > 0.0 && cpu_s.is_finite()).then(|| cpu_s / wall_s),
            includes_server,
            peak_rss_bytes: None,
            process_cpu_start_s: None,
            process_cpu_end_s: None,
        }
    }
}

/// The fewest values a p99 is judged from: below it, it is about the slowest of them (the
/// console marks it `*`).
pub const P99_MIN_COUNT: u64 = 100;

/// Thresholds (documented in `docs/report.md`).
const ERROR_WARN: f64 = 0.01;
const ERROR_FAIL: f64 = 0.05;
const LAG_WARN_MS: f64 = 5.0;
const LAG_FAIL_MS: f64 = 50.0;
const SLIP_WARN_MS: f64 = 10.0;
const SLIP_FAIL_MS: f64 = 100.0;
const CPU_WARN: f64 = 0.7;
const CPU_FAIL: f64 = 0.9;
const STEADY_MIN_TURNS_FAIL: u64 = 30;
const STEADY_SHARE_WARN: f64 = 0.5;
const STEADY_SHARE_FAIL: f64 = 0.2;
const OSL_WARN: f64 = 0.10;
const OSL_FAIL: f64 = 0.50;
const CACHE_WARN: f64 = 0.05;
const CACHE_FAIL: f64 = 0.15;
const ESTIMATE_WARN: f64 = 0.10;
const ESTIMATE_FAIL: f64 = 0.30;
const WARM_WARN: f64 = 0.01;
const WARM_FAIL: f64 = 0.10;
/// How far below the truth the client's shared-prefix figure can be: it is found in pieces of
/// 128 bytes of the request (about 32 tokens), so a turn is warm only beyond a block and this.
const WARM_SLACK_TOKENS: f64 = 48.0;
/// …and the client's token estimate of the shared part may be this much short of the server's.
const WARM_SLACK_SHARE: f64 = 0.03;

fn grade(v: f64, warn: f64, fail: f64) -> CheckStatus {
    if v >= fail {
        CheckStatus::Fail
    } else if v >= warn {
        CheckStatus::Warn
    } else {
        CheckStatus::Pass
    }
}

fn check(
    name: &str,
    status: CheckStatus,
    value: Option<f64>,
    threshold: String,
    why: String,
) -> Check {
    Check {
        name: name.to_owned(),
        status,
        value,
        threshold,
        explanation: why,
    }
}

fn skipped(name: &str, threshold: String, why: &str) -> Check {
    check(name, CheckStatus::Skipped, None, threshold, why.to_owned())
}

/// The tail of `(sent_s − due_s)` in ms over `turns` that a check judges: the p99 from
/// [`P99_MIN_COUNT`] values on, the p90 below (a p99 of fewer is about the slowest one, and one
/// late wake of a loaded machine would decide the verdict); with the note that says which.
fn lag_tail_ms<'a>(turns: impl Iterator<Item = &'a TurnRecord>) -> Option<(f64, String)> {
    let mut v: Vec<f64> = turns
        .map(|r| (r.sent_s - r.due_s) * 1000.0)
        .filter(|x| x.is_finite())
        .map(|x| x.max(0.0))
        .collect();
    v.sort_by(f64::total_cmp);
    if v.len() as u64 >= P99_MIN_COUNT {
        return percentile(&v, 0.99).map(|p| (p, String::new()));
    }
    let note = format!(
        " (judged on the p90: a p99 of {} turns, fewer than {P99_MIN_COUNT}, is about the \
         slowest of them)",
        v.len()
    );
    percentile(&v, 0.90).map(|p| (p, note))
}

impl Validity {
    /// Assesses `result` (as [`crate::compute`] made it from `records`, with `server` filled
    /// in when scraped); `open_loop` says whether sessions arrived on a schedule; `client` is
    /// the process's CPU over the measured phase when it was read.
    pub fn assess(
        result: &RunResult,
        records: &[TurnRecord],
        open_loop: bool,
        client: Option<&ClientCpu>,
        cache_block_size: Option<u32>,
    ) -> Validity {
        let measured: Vec<&TurnRecord> = records
            .iter()
            .filter(|r| !r.warmup && !r.superseded)
            .collect();
        let s = &result.summary;
        let mut checks = Vec::new();

        // Error rate.
        let total = s.turns_ok + s.turns_failed;
        let t = format!(
            "share of failed turns: warn ≥ {:.0}%, fail ≥ {:.0}%",
            ERROR_WARN * 100.0,
            ERROR_FAIL * 100.0
        );
        checks.push(if total == 0 {
            skipped("error_rate", t, "no measured turn")
        } else {
            let rate = s.turns_failed as f64 / total as f64;
            check(
                "error_rate",
                grade(rate, ERROR_WARN, ERROR_FAIL),
                Some(rate),
                t,
                format!(
                    "{} of {total} turns failed: the latency figures cover the ok ones only",
                    s.turns_failed
                ),
            )
        });

        // Client saturation: how late requests left (closed loop: at once after the tool wait).
        let t = format!(
            "p99 dispatch lag (p90 below {P99_MIN_COUNT} turns), ms: warn ≥ {LAG_WARN_MS}, fail ≥ \
             {LAG_FAIL_MS}"
        );
        checks.push(if open_loop {
            skipped(
                "dispatch_lag",
                t,
                "open loop: a --max-concurrency cap delays sessions on purpose; see schedule_slip",
            )
        } else {
            match lag_tail_ms(measured.iter().copied()) {
                None => skipped("dispatch_lag", t, "no measured turn"),
                Some((lag, note)) => check(
                    "dispatch_lag",
                    grade(lag, LAG_WARN_MS, LAG_FAIL_MS),
                    Some(lag),
                    t,
                    format!(
                        "how late turns left after they were due: a late client, not the \
                         server, sets the pace when this grows{note}"
                    ),
                ),
            }
        });

        // The client's own CPU.
        let t = format!("cores the client kept busy: warn ≥ {CPU_WARN}, fail ≥ {CPU_FAIL}");
        checks.push(match client {
            None => skipped("client_cpu", t, "the client's CPU time was not read"),
            Some(c) if c.includes_server => skipped(
                "client_cpu",
                t,
                "the embedded simulator ran in the same process: its CPU cannot be told apart",
            ),
            Some(c) => match c.cores {
                None => skipped("client_cpu", t, "the measured phase had no duration"),
                Some(cores) => check(
                    "client_cpu",
                    grade(cores, CPU_WARN, CPU_FAIL),
                    Some(cores),
                    t,
                    format!(
                        "{:.2} CPU-s over {:.1} s: near a full core the client's event loop may \
                         delay reading the streams it times",
                        c.cpu_s, c.wall_s
                    ),
                ),
            },
        });

        // Open loop: did sessions start when the schedule said?
        let t = format!(
            "p99 lag of first turns behind their arrival time (p90 below {P99_MIN_COUNT}), ms: warn ≥ \
             {SLIP_WARN_MS}, fail ≥ {SLIP_FAIL_MS}"
        );
        checks.push(if !open_loop {
            skipped("schedule_slip", t, "closed loop: no arrival schedule")
        } else {
            match lag_tail_ms(measured.iter().copied().filter(|r| r.turn_index == 0)) {
                None => skipped("schedule_slip", t, "no measured first turn"),
                Some((lag, note)) => check(
                    "schedule_slip",
                    grade(lag, SLIP_WARN_MS, SLIP_FAIL_MS),
                    Some(lag),
                    t,
                    format!(
                        "sessions that start late lower the offered load below the rate asked \
                         for (and a --max-concurrency cap makes them wait on purpose){note}"
                    ),
                ),
            }
        });

        // The steady window.
        let w = &result.steady_window;
        let t = format!(
            "turns in the steady window: warn < {:.0}% of the run, fail < \
             {STEADY_MIN_TURNS_FAIL} or < {:.0}% (p99 is judged only from {P99_MIN_COUNT} values)",
            STEADY_SHARE_WARN * 100.0,
            STEADY_SHARE_FAIL * 100.0
        );
        checks.push(if w.turns_total == 0 {
            skipped("steady_window", t, "no measured turn")
        } else {
            let share = w.turns as f64 / w.turns_total as f64;
            let status = if w.turns < STEADY_MIN_TURNS_FAIL || share < STEADY_SHARE_FAIL {
                CheckStatus::Fail
            } else if share < STEADY_SHARE_WARN {
                CheckStatus::Warn
            } else {
                CheckStatus::Pass
            };
            check(
                "steady_window",
                status,
                Some(w.turns as f64),
                t,
                format!(
                    "{} of {} turns ({:.0}%) ran at the target load; the headline figures come \
                     from them{}",
                    w.turns,
                    w.turns_total,
                    share * 100.0,
                    if w.turns < P99_MIN_COUNT {
                        format!(
                            " (p50 and p90; a p99 of fewer than {P99_MIN_COUNT} turns is about \
                             their slowest, not a 1% tail: the report marks it *)"
                        )
                    } else {
                        String::new()
                    }
                ),
            )
        });

        // Did the server produce the pinned output length?
        let t = format!(
            "|achieved ÷ pinned output length − 1|: warn > {:.0}%, fail > {:.0}%",
            OSL_WARN * 100.0,
            OSL_FAIL * 100.0
        );
        checks.push(
            match result.overall.osl_fidelity.as_ref().and_then(|f| f.ratio) {
                None => skipped(
                    "output_length",
                    t,
                    "no turn has both a pinned and an achieved output length",
                ),
                Some(ratio) => {
                    let off = (ratio - 1.0).abs();
                    let status = if off > OSL_FAIL {
                        CheckStatus::Fail
                    } else if off > OSL_WARN {
                        CheckStatus::Warn
                    } else {
                        CheckStatus::Pass
                    };
                    check(
                        "output_length",
                        status,
                        Some(ratio),
                        t,
                        format!(
                            "the server produced {:.0}% of the pinned output: decode time and \
                             throughput scale with it (a server ignoring max_tokens/ignore_eos \
                             shows here)",
                            ratio * 100.0
                        ),
                    )
                }
            },
        );

        // The client's prefix-cache ratio against the server's own counters, same window.
        let t = format!(
            "|client − server prefix-cache ratio| over the measured phase: warn > {CACHE_WARN}, \
             fail > {CACHE_FAIL}"
        );
        let server_ratio = result.server.as_ref().and_then(|s| s.prefix_cache_ratio);
        checks.push(match (result.overall.prefix_cache_ratio, server_ratio) {
            (Some(c), Some(sv)) => {
                let d = (c - sv).abs();
                let status = if d > CACHE_FAIL {
                    CheckStatus::Fail
                } else if d > CACHE_WARN {
                    CheckStatus::Warn
                } else {
                    CheckStatus::Pass
                };
                check(
                    "prefix_cache_counters",
                    status,
                    Some(d),
                    t,
                    format!(
                        "cached tokens reported per turn give {c:.3}, the server's /metrics \
                         counters {sv:.3} (both over the measured phase): a gap means other \
                         traffic or counters that mean something else"
                    ),
                )
            }
            (None, _) => skipped(
                "prefix_cache_counters",
                t,
                "the server reported no cached tokens per turn",
            ),
            (_, None) => skipped(
                "prefix_cache_counters",
                t,
                "no prefix-cache counters scraped from the server's /metrics",
            ),
        });

        checks.push(token_estimate(&measured));
        checks.push(warm_cache(result, &measured, cache_block_size));

        let verdict = verdict_of(&checks);
        Validity { verdict, checks }
    }

    /// Adds a check made outside [`Validity::assess`] (e.g. a merged run's `shards`) and
    /// updates the verdict.
    pub fn add(&mut self, check: Check) {
        self.checks.push(check);
        self.verdict = verdict_of(&self.checks);
    }

    /// The checks that warned or failed, failures first (the first says why the run is not
    /// valid).
    fn not_passed(&self) -> Vec<&Check> {
        let mut v: Vec<&Check> = self
            .checks
            .iter()
            .filter(|c| matches!(c.status, CheckStatus::Warn | CheckStatus::Fail))
            .collect();
        v.sort_by_key(|c| c.status != CheckStatus::Fail);
        v
    }

    /// The verdict and its reason in one line: `valid: all 8 checks passed (…)`, or the
    /// first failed check's (else the first warning's) name and explanation.
    pub fn headline(&self) -> String {
        let mut out = String::from(self.verdict.as_str());
        match self.not_passed().first() {
            None => {
                let skipped = self
                    .checks
                    .iter()
                    .filter(|c| c.status == CheckStatus::Skipped)
                    .count();
                out.push_str(&format!(
                    ": all {} checks passed ({skipped} not applicable; docs/report.md)",
                    self.checks.len() - skipped
                ));
            }
            Some(c) => out.push_str(&format!(": {}: {}", c.name, c.explanation)),
        }
        out
    }

    /// The verdict and its reason on the first line (the first failed check's explanation,
    /// else the first warning's), then each check that did not pass with its value and
    /// thresholds (for the console).
    pub fn console(&self) -> String {
        let mut out = self.headline();
        out.push('\n');
        for c in self.not_passed() {
            let status = if c.status == CheckStatus::Fail {
                "fail"
            } else {
                "warn"
            };
            let value = c.value.map_or("n/a".into(), |v| format!("{v:.3}"));
            out.push_str(&format!(
                "  {status} {}: {value} ({})\n",
                c.name, c.threshold
            ));
        }
        out
    }
}

/// The client's prompt-token estimate against the server's `usage` (ok turns with both).
fn token_estimate(measured: &[&TurnRecord]) -> Check {
    let t = format!(
        "|Σ client estimate ÷ Σ server prompt tokens − 1|: warn > {:.0}%, fail > {:.0}%",
        ESTIMATE_WARN * 100.0,
        ESTIMATE_FAIL * 100.0
    );
    let (mut est, mut server, mut n) = (0_u64, 0_u64, 0_u64);
    for r in measured
        .iter()
        .filter(|r| r.status == crate::record::TurnStatus::Ok)
    {
        if let (Some(e), Some(sv), Some(crate::record::CountSource::Server)) =
            (r.est_input_tokens, r.input_tokens, r.input_tokens_source)
        {
            est += e;
            server += sv;
            n += 1;
        }
    }
    if n == 0 || server == 0 {
        return skipped(
            "token_estimate",
            t,
            "no ok turn has both the client's estimate and the server's prompt-token usage",
        );
    }
    let ratio = est as f64 / server as f64;
    let off = (ratio - 1.0).abs();
    let status = if off > ESTIMATE_FAIL {
        CheckStatus::Fail
    } else if off > ESTIMATE_WARN {
        CheckStatus::Warn
    } else {
        CheckStatus::Pass
    };
    check(
        "token_estimate",
        status,
        Some(ratio),
        t,
        format!(
            "the client estimated {:.0}% of the {server} prompt tokens the server counted over \
             {n} turns: the context guard, the input bands and any figure in the client's units \
             are off by that much (a different tokenizer, a chat template or tool definitions \
             the estimate leaves out)",
            ratio * 100.0
        ),
    )
}

/// The server's block size: from its `/metrics` (`result.server.block_size`), else the one the
/// run was told (`--cache-block-size`, [`crate::Judge::cache_block_size`]).
fn block_size(result: &RunResult, told: Option<u32>) -> Option<f64> {
    result
        .server
        .as_ref()
        .and_then(|s| s.block_size)
        .or(told.map(f64::from))
        .filter(|b| *b >= 1.0)
}

/// Warm-cache contamination: a turn whose reported cached tokens exceed what the run's own
/// earlier requests could have left in an empty cache (its shared prefix rounded down to the
/// block size) by more than a block.
fn warm_cache(result: &RunResult, measured: &[&TurnRecord], told: Option<u32>) -> Check {
    let t = format!(
        "share of turns whose cached tokens exceed the run's own shared prefix (rounded down to \
         the block size) by more than a block, 48 tokens and 3% of the prefix: warn ≥ {:.0}%, fail ≥ {:.0}%",
        WARM_WARN * 100.0,
        WARM_FAIL * 100.0
    );
    let Some(block) = block_size(result, told) else {
        return skipped(
            "warm_cache",
            t,
            "the server's KV block size is unknown (its /metrics does not say): give it with \
             --cache-block-size",
        );
    };
    let (mut n, mut warm, mut first_warm) = (0_u64, 0_u64, None);
    let (mut cached_sum, mut possible_sum, mut input_sum) = (0.0, 0.0, 0.0);
    for r in measured
        .iter()
        .filter(|r| r.status == crate::record::TurnStatus::Ok)
    {
        let (Some(cached), Some(input), Some(shared)) = (
            r.cached_tokens,
            r.input_tokens,
            crate::result::shared_prefix_tokens(r),
        ) else {
            continue;
        };
        n += 1;
        let possible = (shared / block).floor() * block;
        cached_sum += cached as f64;
        possible_sum += possible;
        input_sum += input as f64;
        if cached as f64 > possible + block + WARM_SLACK_TOKENS + WARM_SLACK_SHARE * shared {
            warm += 1;
            first_warm.get_or_insert_with(|| {
                format!(
                    "{} turn {} had {cached} cached tokens where the run's own requests allowed {possible:.0}",
                    r.session_id, r.turn_index
                )
            });
        }
    }
    if n == 0 {
        return skipped(
            "warm_cache",
            t,
            "no ok turn reported cached tokens with a known shared prefix",
        );
    }
    let share = warm as f64 / n as f64;
    let ratios = if input_sum > 0.0 {
        format!(
            "; the run's own reuse allowed a prefix-cache ratio of {:.1}%, the server achieved {:.1}%",
            possible_sum / input_sum * 100.0,
            cached_sum / input_sum * 100.0
        )
    } else {
        String::new()
    };
    let why = match first_warm {
        Some(first) => format!(
            "{warm} of {n} turns got more cached tokens than this run could have left in the \
             cache (e.g. {first}): the server was warm before the run (flush it: --flush-cache), \
             so TTFT is lower than a cold start would give{ratios}"
        ),
        None => format!(
            "no turn got more cached tokens than the run's own requests allowed (block size {block:.0}){ratios}"
        ),
    };
    check(
        "warm_cache",
        grade(share, WARM_WARN, WARM_FAIL),
        Some(share),
        t,
        why,
    )
}
