//! What stopped a run, in one typed value and one line.

use bench_rundir::{SessionRecord, SessionStatus, StopBy};
use bench_runner::{RunConfig, RunOutcome, StopReason};

/// Who cancelled a run (when the engine says it was cancelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelledBy {
    /// SIGINT or SIGTERM (the CLI's signal handler).
    Signal,
    /// The program that started the run ([`crate::RunHandle::cancel`]).
    Caller,
}

/// `run.stopped`'s `by` and `reason`. `completed`: the pool was played and every measured
/// session reached its last turn (failed turns included); `exhausted`: the pool was played but
/// some sessions ended early (context guard or session timeout); `error`: a replay task failed.
pub fn classify(
    outcome: &RunOutcome,
    cfg: &RunConfig,
    sessions: &[SessionRecord],
    cancelled_by: CancelledBy,
) -> (StopBy, String) {
    if let Some(first) = outcome.task_failures.first() {
        return (
            StopBy::Error,
            format!(
                "{} replay task(s) failed: {first}",
                outcome.task_failures.len()
            ),
        );
    }
    match outcome.stopped_by {
        StopReason::Exhausted => {
            let measured = sessions.iter().filter(|s| !s.warmup && !s.superseded);
            let early = measured
                .clone()
                .filter(|s| {
                    matches!(
                        s.status,
                        SessionStatus::ContextGuard | SessionStatus::Timeout
                    )
                })
                .count();
            let n = measured.count();
            if early == 0 {
                (
                    StopBy::Completed,
                    format!("all {n} planned sessions were played"),
                )
            } else {
                (
                    StopBy::Exhausted,
                    format!(
                        "the pool was played; {early} of {n} sessions ended early (context \
                         guard or session timeout)"
                    ),
                )
            }
        }
        StopReason::Duration => (
            StopBy::Duration,
            format!(
                "--duration {:?} passed; sessions in flight stopped at a turn boundary",
                cfg.limits.duration.unwrap_or_default()
            ),
        ),
        StopReason::MaxDuration => (
            StopBy::MaxDuration,
            format!(
                "the --max-duration fuse ({:?}) blew; turns in flight were cut",
                cfg.limits.max_duration.unwrap_or_default()
            ),
        ),
        StopReason::Cancelled => match cancelled_by {
            CancelledBy::Signal => (
                StopBy::Signal,
                "SIGINT or SIGTERM: no new turn was sent; turns in flight finished or were cut \
                 after the grace period"
                    .to_owned(),
            ),
            CancelledBy::Caller => (
                StopBy::Cancelled,
                "cancelled: no new turn was sent; turns in flight finished or were cut".to_owned(),
            ),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outcome(by: StopReason, failures: Vec<String>) -> RunOutcome {
        RunOutcome {
            turns: Vec::new(),
            sessions: Vec::new(),
            elapsed: Duration::from_secs(1),
            warmup_elapsed: Duration::ZERO,
            stopped_by: by,
            arrivals_not_started: 0,
            task_failures: failures,
        }
    }

    fn sess(status: SessionStatus, warmup: bool) -> SessionRecord {
        SessionRecord {
            session_id: "s".into(),
            replay: 0,
            status,
            turns_played: 1,
            turns_planned: 1,
            output_tokens: 0,
            busy_s: 0.0,
            marker: None,
            warmup,
            start_s: 0.0,
            end_s: 0.0,
            superseded: false,
        }
    }

    #[test]
    fn the_stop_says_what_ended_the_run() {
        let mut cfg = RunConfig::new("m", 2);
        cfg.limits.duration = Some(Duration::from_secs(90));
        cfg.limits.max_duration = Some(Duration::from_secs(120));
        let done = [
            sess(SessionStatus::Completed, false),
            sess(SessionStatus::Failed, false),
            // A warmup play cut by the context guard does not make the run exhausted.
            sess(SessionStatus::ContextGuard, true),
        ];
        let by = |o: &RunOutcome, s: &[SessionRecord], c| classify(o, &cfg, s, c).0;
        let ex = outcome(StopReason::Exhausted, Vec::new());
        assert_eq!(by(&ex, &done, CancelledBy::Caller), StopBy::Completed);
        let (b, reason) = classify(&ex, &cfg, &done, CancelledBy::Caller);
        assert_eq!(
            (b, reason.as_str()),
            (StopBy::Completed, "all 2 planned sessions were played")
        );
        let early = [
            sess(SessionStatus::Completed, false),
            sess(SessionStatus::Timeout, false),
        ];
        let (b, reason) = classify(&ex, &cfg, &early, CancelledBy::Caller);
        assert_eq!(b, StopBy::Exhausted);
        assert!(reason.contains("1 of 2 sessions ended early"), "{reason}");
        assert_eq!(
            by(
                &outcome(StopReason::Duration, Vec::new()),
                &done,
                CancelledBy::Caller
            ),
            StopBy::Duration
        );
        assert!(
            classify(
                &outcome(StopReason::MaxDuration, Vec::new()),
                &cfg,
                &done,
                CancelledBy::Caller
            )
            .1
            .contains("120s")
        );
        let c = outcome(StopReason::Cancelled, Vec::new());
        assert_eq!(by(&c, &done, CancelledBy::Signal), StopBy::Signal);
        assert_eq!(by(&c, &done, CancelledBy::Caller), StopBy::Cancelled);
        // A failed replay task wins over everything.
        let f = outcome(StopReason::Exhausted, vec!["panicked".into()]);
        let (b, reason) = classify(&f, &cfg, &done, CancelledBy::Signal);
        assert_eq!(b, StopBy::Error);
        assert_eq!(reason, "1 replay task(s) failed: panicked");
    }
}
