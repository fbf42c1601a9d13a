//! `events.jsonl`: the run's lifecycle, one [`EventLine`] per line.
//!
//! ```text
//! {"event":"run.started","utc":"…","pid":4242,"host":"box","sessions_planned":16,…}
//! {"event":"phase","utc":"…","phase":"measuring"}
//! {"event":"heartbeat","utc":"…","elapsed_s":5.0,"turns_done":40,"in_flight":8,…}
//! {"event":"run.stopped","utc":"…","by":"completed","reason":"all 16 planned sessions were played"}
//! ```
//!
//! A resumed run appends `run.resumed` (the fields of `run.started` plus what the resume
//! decided) and goes on in the same file; readers take the latest `run.started` or
//! `run.resumed` as the current segment's start.

use serde::{Deserialize, Serialize};

/// One line of `events.jsonl`: the event and when it was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventLine {
    /// The event (its `event` key names the kind).
    #[serde(flatten)]
    pub event: LifecycleEvent,
    /// Wall time it was written (RFC 3339 UTC).
    #[serde(default)]
    pub utc: String,
}

/// A run's lifecycle events: the closed set `events.jsonl` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
#[non_exhaustive]
pub enum LifecycleEvent {
    /// The run started (the first segment).
    #[serde(rename = "run.started")]
    Started(Opened),
    /// A crashed or stopped run was resumed (a new segment).
    #[serde(rename = "run.resumed")]
    Resumed(Resumed),
    /// A phase began.
    #[serde(rename = "phase")]
    Phase {
        /// Which.
        phase: Phase,
    },
    /// The counters, every few seconds while the run plays.
    #[serde(rename = "heartbeat")]
    Heartbeat(Heartbeat),
    /// `/metrics` scraping stopped working; the run goes on without it.
    #[serde(rename = "scrape.disabled")]
    ScrapeDisabled {
        /// Why (one line).
        reason: String,
    },
    /// The run stopped.
    #[serde(rename = "run.stopped")]
    Stopped {
        /// What stopped it.
        by: StopBy,
        /// In words (one line).
        #[serde(default)]
        reason: String,
    },
    /// An event kind this version does not know (written by a newer one); skipped by readers.
    #[serde(other)]
    Other,
}

/// Who runs a segment and what it plays: the fields of `run.started` (and `run.resumed`).
/// Every field may be missing in a directory written by hand or by an older version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Opened {
    /// The process playing the run.
    #[serde(default)]
    pub pid: Option<u32>,
    /// The machine it runs on.
    #[serde(default)]
    pub host: Option<String>,
    /// When that process started (RFC 3339 UTC), to tell a reused pid apart.
    #[serde(default)]
    pub process_start_utc: Option<String>,
    /// Sessions in the plan.
    #[serde(default)]
    pub sessions_planned: Option<u64>,
    /// Turns in the plan.
    #[serde(default)]
    pub turns_planned: Option<u64>,
    /// Closed loop: sessions at once; open loop: the cap on sessions in flight (0: none).
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Open loop: sessions started per second.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Warmup sessions played before measuring.
    #[serde(default)]
    pub warmup_sessions: Option<u32>,
    /// The measured phase's length, s (a duration run).
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// The hard fuse on the whole run, s.
    #[serde(default)]
    pub max_duration_s: Option<f64>,
}

/// `run.resumed`: a new segment's [`Opened`] fields plus what the resume decided.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resumed {
    /// Who runs this segment.
    #[serde(flatten)]
    pub opened: Opened,
    /// Sessions finished in earlier segments, kept.
    #[serde(default)]
    pub sessions_kept: u64,
    /// Sessions played again from their first turn.
    #[serde(default)]
    pub sessions_restarted: u64,
    /// Turn records marked superseded by this resume.
    #[serde(default)]
    pub turns_superseded: u64,
    /// Session records marked superseded by this resume.
    #[serde(default)]
    pub sessions_superseded: u64,
    /// The warmup is played again (the measured phase had not begun).
    #[serde(default)]
    pub warmup_replayed: bool,
    /// Where this segment's clock starts (s on the run's timeline).
    #[serde(default)]
    pub time_origin_s: f64,
    /// What was repaired (torn last lines dropped, newlines added), one line each.
    #[serde(default)]
    pub repairs: Vec<String>,
}

/// The `heartbeat` event: the run's counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Since this segment started, s.
    #[serde(default)]
    pub elapsed_s: f64,
    /// Turns finished (ok or not, warmup included).
    #[serde(default)]
    pub turns_done: u64,
    /// Turns sent and not finished.
    #[serde(default)]
    pub in_flight: u64,
    /// Session plays started and not finished.
    #[serde(default)]
    pub active_sessions: u64,
    /// Tokens of the measured ok turns.
    #[serde(default)]
    pub tokens: Tokens,
}

/// Token sums.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// Prompt tokens.
    #[serde(default)]
    pub input: u64,
    /// Output tokens.
    #[serde(default)]
    pub output: u64,
    /// Prefix-cache hits.
    #[serde(default)]
    pub cached: u64,
}

/// The phases of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Unmeasured warmup sessions.
    Warmup,
    /// The measured run.
    Measuring,
    /// The measured run stopped starting sessions or turns (the pool is used up, the
    /// duration passed, or the run was cancelled); turns in flight finish.
    Draining,
}

impl Phase {
    /// Its name on disk.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Measuring => "measuring",
            Phase::Draining => "draining",
        }
    }
}

/// When a `/metrics` scrape was taken (`scrapes.jsonl`'s `phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScrapePhase {
    /// Before the first turn.
    Baseline,
    /// During the warmup.
    Warmup,
    /// During the measured phase.
    Measuring,
    /// While turns in flight finish.
    Draining,
    /// After the last turn.
    Final,
}

impl ScrapePhase {
    /// The scrape phase during run phase `p`.
    pub fn during(p: Option<Phase>) -> ScrapePhase {
        match p {
            None => ScrapePhase::Baseline,
            Some(Phase::Warmup) => ScrapePhase::Warmup,
            Some(Phase::Measuring) => ScrapePhase::Measuring,
            Some(Phase::Draining) => ScrapePhase::Draining,
        }
    }

    /// Taken once the measured phase had begun (what the server summary is computed over).
    pub fn is_measured(self) -> bool {
        matches!(
            self,
            ScrapePhase::Measuring | ScrapePhase::Draining | ScrapePhase::Final
        )
    }
}

/// What stopped a run (`run.stopped`'s `by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopBy {
    /// The pool was played and every measured session reached its last turn (failed turns
    /// included).
    Completed,
    /// The pool was played but some sessions ended early (context guard or session timeout).
    Exhausted,
    /// The `duration` passed; sessions in flight stopped at a turn boundary.
    Duration,
    /// The `max_duration` fuse blew; turns in flight were cut.
    MaxDuration,
    /// SIGINT or SIGTERM.
    Signal,
    /// Cancelled by the program that started it (`RunHandle::cancel`).
    Cancelled,
    /// A replay task failed (a bug).
    Error,
    /// A value this version does not know.
    #[serde(other)]
    Unknown,
}

impl StopBy {
    /// Its name on disk.
    pub fn as_str(self) -> &'static str {
        match self {
            StopBy::Completed => "completed",
            StopBy::Exhausted => "exhausted",
            StopBy::Duration => "duration",
            StopBy::MaxDuration => "max_duration",
            StopBy::Signal => "signal",
            StopBy::Cancelled => "cancelled",
            StopBy::Error => "error",
            StopBy::Unknown => "unknown",
        }
    }

    /// The run played its whole plan: there is nothing left to resume.
    pub fn is_finished(self) -> bool {
        matches!(self, StopBy::Completed | StopBy::Exhausted)
    }
}

impl std::fmt::Display for StopBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_with_their_kind_first() {
        let lines = [
            EventLine {
                event: LifecycleEvent::Started(Opened {
                    pid: Some(7),
                    host: Some("box".into()),
                    sessions_planned: Some(4),
                    ..Opened::default()
                }),
                utc: "2026-01-01T00:00:00Z".into(),
            },
            EventLine {
                event: LifecycleEvent::Phase {
                    phase: Phase::Measuring,
                },
                utc: "2026-01-01T00:00:01Z".into(),
            },
            EventLine {
                event: LifecycleEvent::Resumed(Resumed {
                    opened: Opened {
                        pid: Some(8),
                        ..Opened::default()
                    },
                    sessions_kept: 3,
                    repairs: vec!["x".into()],
                    ..Resumed::default()
                }),
                utc: "2026-01-01T00:00:02Z".into(),
            },
            EventLine {
                event: LifecycleEvent::Stopped {
                    by: StopBy::MaxDuration,
                    reason: "fuse".into(),
                },
                utc: "2026-01-01T00:00:03Z".into(),
            },
        ];
        for l in &lines {
            let text = serde_json::to_string(l).unwrap();
            assert!(text.starts_with("{\"event\":\""), "{text}");
            assert_eq!(&serde_json::from_str::<EventLine>(&text).unwrap(), l);
        }
        let stop = serde_json::to_value(&lines[3]).unwrap();
        assert_eq!(stop["by"], "max_duration");
    }

    #[test]
    fn unknown_kinds_and_stop_causes_are_read_not_refused() {
        let e: EventLine =
            serde_json::from_str(r#"{"event":"shard.joined","utc":"t","n":3}"#).unwrap();
        assert_eq!(e.event, LifecycleEvent::Other);
        let e: EventLine =
            serde_json::from_str(r#"{"event":"run.stopped","utc":"t","by":"meteor"}"#).unwrap();
        assert_eq!(
            e.event,
            LifecycleEvent::Stopped {
                by: StopBy::Unknown,
                reason: String::new()
            }
        );
    }
}
