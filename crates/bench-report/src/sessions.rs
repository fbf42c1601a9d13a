//! Per-session metrics: agent users think in sessions, not turns. One *play* of a session is
//! every measured turn it sent (a session replayed twice is two plays).

use std::collections::{BTreeMap, HashMap};

use bench_rundir::{SessionRecord, SessionStatus, TurnRecord, TurnStatus};
use serde::{Deserialize, Serialize};

use crate::result::Dist;
use crate::slo::Slo;

/// The `sessions` block of `result.json`: distributions over session plays.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionMetrics {
    /// Measured session plays that sent at least one turn (warmup and superseded plays aside).
    pub plays: u64,
    /// Plays the run finished (`completed` in `sessions.jsonl`).
    pub completed: u64,
    /// `completed ÷ plays`.
    pub completion_rate: Option<f64>,
    /// First send → last byte of the play's turns, s.
    pub e2e_s: Dist,
    /// Time the play spent in requests (Σ of its turns' e2e), s.
    pub model_s: Dist,
    /// The rest of its e2e: tool waits and think time as replayed, plus any dispatch lag, s.
    pub tool_wait_s: Dist,
    /// `Σ model_s ÷ Σ e2e_s`: how much of a session's life the model accounts for.
    pub model_share: Option<f64>,
    /// Turns sent per play (ok or not).
    pub turns: Dist,
    /// Σ input tokens of the play's ok turns.
    pub input_tokens: Dist,
    /// Σ output tokens of the play's ok turns.
    pub output_tokens: Dist,
    /// Plays whose every turn was ok and met the SLO (`null` without an SLO).
    pub slo_met: Option<u64>,
    /// `slo_met ÷ plays`: session goodput (`null` without an SLO).
    pub goodput: Option<f64>,
}

#[derive(Default)]
struct Play {
    first_sent: f64,
    last_end: f64,
    model: f64,
    turns: u64,
    input: u64,
    output: u64,
    all_met: bool,
}

impl SessionMetrics {
    /// Over the measured (non-warmup, non-superseded) turns; `None` when there are none.
    pub fn compute(
        records: &[TurnRecord],
        sessions: &[SessionRecord],
        slo: Option<&Slo>,
    ) -> Option<SessionMetrics> {
        // BTreeMap: the same order on every run, whatever the hash seed.
        let mut plays: BTreeMap<(&str, u32), Play> = BTreeMap::new();
        for r in records.iter().filter(|r| !r.warmup && !r.superseded) {
            let p = plays
                .entry((r.session_id.as_str(), r.replay))
                .or_insert_with(|| Play {
                    first_sent: f64::INFINITY,
                    last_end: f64::NEG_INFINITY,
                    all_met: true,
                    ..Play::default()
                });
            p.turns += 1;
            if r.sent_s.is_finite() {
                p.first_sent = p.first_sent.min(r.sent_s);
            }
            if r.end_s.is_finite() {
                p.last_end = p.last_end.max(r.end_s);
            }
            let busy = crate::result::busy_s(r);
            if busy.is_finite() && busy > 0.0 {
                p.model += busy;
            }
            let ok = r.status == TurnStatus::Ok;
            if ok {
                // Saturating: a corrupt record may hold any count.
                p.input = p.input.saturating_add(r.input_tokens.unwrap_or(0));
                p.output = p.output.saturating_add(r.output_tokens.unwrap_or(0));
            }
            if !ok || slo.is_some_and(|s| !s.is_met_by(r)) {
                p.all_met = false;
            }
        }
        if plays.is_empty() {
            return None;
        }
        let completed_plays: HashMap<(&str, u32), bool> = sessions
            .iter()
            .filter(|s| !s.warmup && !s.superseded)
            .map(|s| {
                (
                    (s.session_id.as_str(), s.replay),
                    s.status == SessionStatus::Completed,
                )
            })
            .collect();
        let n = plays.len() as u64;
        let completed = plays
            .keys()
            .filter(|k| completed_plays.get(*k).copied().unwrap_or(false))
            .count() as u64;
        let e2e = |p: &Play| (p.last_end - p.first_sent).max(0.0);
        let (sum_model, sum_e2e) = plays
            .values()
            .fold((0.0, 0.0), |(m, e), p| (m + p.model, e + e2e(p)));
        let slo_met = slo.map(|_| plays.values().filter(|p| p.all_met).count() as u64);
        Some(SessionMetrics {
            plays: n,
            completed,
            completion_rate: Some(completed as f64 / n as f64),
            e2e_s: Dist::from_values(plays.values().map(e2e)),
            model_s: Dist::from_values(plays.values().map(|p| p.model)),
            tool_wait_s: Dist::from_values(plays.values().map(|p| (e2e(p) - p.model).max(0.0))),
            model_share: (sum_e2e > 0.0).then(|| (sum_model / sum_e2e).min(1.0)),
            turns: Dist::from_values(plays.values().map(|p| p.turns as f64)),
            input_tokens: Dist::from_values(plays.values().map(|p| p.input as f64)),
            output_tokens: Dist::from_values(plays.values().map(|p| p.output as f64)),
            slo_met,
            goodput: slo_met.map(|m| m as f64 / n as f64),
        })
    }
}
