//! `bench status`: what a run directory says about its run (see `bench_telemetry::health`).

use std::path::PathBuf;
use std::time::Duration;

use bench_telemetry::health::{self, LocalSystem, Process, Status, Tokens};
use clap::Args;

use crate::{CliError, out};

/// `bench status` flags.
#[derive(Debug, Clone, Args)]
pub struct StatusCmd {
    /// The run directory (as written by `bench run --run-dir`).
    pub run_dir: PathBuf,
    /// Print one JSON object (stable keys) instead of text.
    #[arg(long)]
    pub json: bool,
    /// A run with turns in flight and no turn finished for this long (or no heartbeat for this
    /// long) is reported as stalled (e.g. 90s, 5m).
    #[arg(long, value_parser = crate::run::parse_duration, default_value = "120s")]
    pub stall_after: Duration,
}

/// Runs `bench status`.
pub fn run_status(args: StatusCmd) -> Result<(), CliError> {
    let status = health::status(&args.run_dir, args.stall_after, &LocalSystem)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    if args.json {
        let text = serde_json::to_string_pretty(&status)
            .map_err(|e| CliError::Failed(format!("cannot encode the status: {e}")))?;
        out(&format!("{text}\n"))
    } else {
        out(&text(&status, args.stall_after))
    }
}

/// The human-readable status: a few aligned lines.
pub fn text(s: &Status, stall_after: Duration) -> String {
    let state = if let Some(stop) = &s.stopped {
        if stop.reason.is_empty() {
            format!("stopped by {}", stop.by)
        } else {
            format!("stopped by {} ({})", stop.by, stop.reason)
        }
    } else if s.crashed {
        "CRASHED (process gone, no stop recorded)".to_owned()
    } else if s.stalled {
        format!(
            "STALLED ({} in flight, no progress for {})",
            s.in_flight.unwrap_or(0),
            clock(stall_after.as_secs_f64())
        )
    } else if s.opened_utc.is_none() {
        "unknown (no run.started event)".to_owned()
    } else {
        "running".to_owned()
    };
    let process = match (s.process, s.pid, &s.host) {
        (p, Some(pid), Some(host)) => format!("{} (pid {pid} on {host})", p.as_str()),
        (p, Some(pid), None) => format!("{} (pid {pid}, host not recorded)", p.as_str()),
        (p, _, _) => p.as_str().to_owned(),
    };
    let mut lines = vec![
        ("run", s.run_dir.display().to_string()),
        ("state", state),
        ("phase", s.phase.clone().unwrap_or_else(|| "-".to_owned())),
        ("process", process),
        ("sessions", progress(s.sessions_done, s.sessions_planned)),
        ("turns", progress(s.turns_done, s.turns_planned)),
        ("tokens", tokens(&s.tokens)),
    ];
    if s.tokens_by_phase.warmup != Tokens::default() {
        lines.push(("warmup", tokens(&s.tokens_by_phase.warmup)));
    }
    if let Some(n) = s.in_flight
        && s.stopped.is_none()
        && s.process != Process::Gone
    {
        lines.push(("in flight", n.to_string()));
    }
    if let Some(t) = &s.last_turn_utc {
        lines.push(("last turn", t.clone()));
    }
    lines.push((
        "time left",
        s.time_left_s.map_or_else(|| "-".to_owned(), clock),
    ));
    if s.torn_lines > 0 || s.bad_lines > 0 {
        lines.push((
            "records",
            format!(
                "{} torn last line(s) ignored, {} unreadable line(s) skipped",
                s.torn_lines, s.bad_lines
            ),
        ));
    }
    let mut text = String::new();
    for (k, v) in lines {
        text.push_str(&format!("{k:<10} {v}\n"));
    }
    text
}

fn progress(done: u64, planned: Option<u64>) -> String {
    match planned {
        Some(n) if n > 0 => format!("{done}/{n} ({:.1}%)", done as f64 * 100.0 / n as f64),
        Some(n) => format!("{done}/{n}"),
        None => format!("{done}/?"),
    }
}

fn tokens(t: &Tokens) -> String {
    format!(
        "input {} · output {} · cached {}",
        t.input, t.output, t.cached
    )
}

/// `1h 02m 03s`, `4m 05s`, `12s`.
fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m {sec:02}s"),
        (h, m, sec) => format!("{h}h {m:02}m {sec:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::clock;

    #[test]
    fn clock_formats() {
        assert_eq!(clock(12.4), "12s");
        assert_eq!(clock(245.0), "4m 05s");
        assert_eq!(clock(3723.0), "1h 02m 03s");
        assert_eq!(clock(-3.0), "0s");
    }
}
