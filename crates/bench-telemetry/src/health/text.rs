//! The human-readable rendering of a [`Status`] (what `bench status` prints without `--json`).

use std::time::Duration;

use super::{Process, Status, Tokens};

impl Status {
    /// The human-readable status: a few aligned `key value` lines, each ending in a newline.
    ///
    /// The lines are `run`, `state` (`stopped by BY (REASON)`, `CRASHED ...`, `STALLED ...`,
    /// `unknown ...` or `running`), `phase`, `process`, `sessions` and `turns` (done/planned and
    /// the percentage), `tokens`, then `warmup` (its tokens, when any), `in flight` (while the
    /// run is neither stopped nor gone), `last turn`, `time left` (`1h 02m 03s`, `4m 05s`,
    /// `12s` or `-`) and `records` (only when torn or unreadable lines were skipped).
    /// `stall_after` is the stall limit the status was computed with, named in the `STALLED`
    /// state.
    pub fn text(&self, stall_after: Duration) -> String {
        let s = self;
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
}

/// `done/planned (pct%)`, `done/0` or `done/?`.
fn progress(done: u64, planned: Option<u64>) -> String {
    match planned {
        Some(n) if n > 0 => format!("{done}/{n} ({:.1}%)", done as f64 * 100.0 / n as f64),
        Some(n) => format!("{done}/{n}"),
        None => format!("{done}/?"),
    }
}

/// `input I · output O · cached C`.
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
    use std::path::PathBuf;

    use super::*;
    use crate::health::{PhaseTokens, Stop};

    #[test]
    fn clock_formats() {
        assert_eq!(clock(12.4), "12s");
        assert_eq!(clock(245.0), "4m 05s");
        assert_eq!(clock(3723.0), "1h 02m 03s");
        assert_eq!(clock(-3.0), "0s");
    }

    fn running() -> Status {
        Status {
            run_dir: PathBuf::from("runs/x"),
            stopped: None,
            phase: Some("measuring".into()),
            process: Process::Running,
            crashed: false,
            stalled: false,
            sessions_done: 3,
            sessions_planned: Some(8),
            turns_done: 30,
            turns_planned: Some(80),
            time_left_s: Some(3723.0),
            tokens: Tokens {
                input: 1000,
                output: 200,
                cached: 500,
            },
            tokens_by_phase: PhaseTokens::default(),
            in_flight: Some(4),
            last_turn_utc: Some("2025-01-01T00:01:00Z".into()),
            opened_utc: Some("2025-01-01T00:00:00Z".into()),
            resumes: 0,
            pid: Some(42),
            host: Some("h".into()),
            torn_lines: 0,
            bad_lines: 0,
        }
    }

    #[test]
    fn a_running_run() {
        assert_eq!(
            running().text(Duration::from_secs(120)),
            "run        runs/x\n\
             state      running\n\
             phase      measuring\n\
             process    running (pid 42 on h)\n\
             sessions   3/8 (37.5%)\n\
             turns      30/80 (37.5%)\n\
             tokens     input 1000 · output 200 · cached 500\n\
             in flight  4\n\
             last turn  2025-01-01T00:01:00Z\n\
             time left  1h 02m 03s\n"
        );
    }

    #[test]
    fn stalled_stopped_and_crashed_runs() {
        let mut s = running();
        s.stalled = true;
        s.tokens_by_phase.warmup.output = 7;
        s.host = None;
        s.turns_planned = Some(0);
        s.sessions_planned = None;
        s.torn_lines = 1;
        assert_eq!(
            s.text(Duration::from_secs(90)),
            "run        runs/x\n\
             state      STALLED (4 in flight, no progress for 1m 30s)\n\
             phase      measuring\n\
             process    running (pid 42, host not recorded)\n\
             sessions   3/?\n\
             turns      30/0\n\
             tokens     input 1000 · output 200 · cached 500\n\
             warmup     input 0 · output 7 · cached 0\n\
             in flight  4\n\
             last turn  2025-01-01T00:01:00Z\n\
             time left  1h 02m 03s\n\
             records    1 torn last line(s) ignored, 0 unreadable line(s) skipped\n"
        );

        let mut s = running();
        s.stopped = Some(Stop {
            by: bench_rundir::StopBy::Completed,
            reason: String::new(),
        });
        s.phase = None;
        s.process = Process::Unknown;
        s.pid = None;
        s.time_left_s = None;
        s.last_turn_utc = None;
        let text = s.text(Duration::from_secs(120));
        assert!(
            text.contains("\nstate      stopped by completed\n"),
            "{text}"
        );
        assert!(text.contains("\nphase      -\n"), "{text}");
        assert!(text.contains("\nprocess    unknown\n"), "{text}");
        assert!(!text.contains("in flight"), "{text}");
        assert!(!text.contains("last turn"), "{text}");
        assert!(text.ends_with("\ntime left  -\n"), "{text}");

        let mut s = running();
        s.process = Process::Gone;
        s.crashed = true;
        let text = s.text(Duration::from_secs(120));
        assert!(
            text.contains("\nstate      CRASHED (process gone, no stop recorded)\n"),
            "{text}"
        );
        assert!(!text.contains("in flight"), "{text}");

        let mut s = running();
        s.opened_utc = None;
        let text = s.text(Duration::from_secs(120));
        assert!(
            text.contains("\nstate      unknown (no run.started event)\n"),
            "{text}"
        );
    }
}
