//! Per-session metrics: agent users think in sessions, not turns. One *play* of a session is
//! every measured turn it sent (a session replayed twice is two plays).

use std::collections::{BTreeMap, HashMap};

use bench_rundir::{SessionRecord, SessionStatus, TurnRecord, TurnStatus};
use serde::{Deserialize, Serialize};

use crate::result::Dist;
use crate::slo::{SessionSlo, Slo};

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
    /// How the plays fared against the session SLO (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_slo: Option<SessionSloMet>,
}

/// The `sessions.session_slo` block of `result.json`: the plays that met a [`SessionSlo`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSloMet {
    /// The objective, in the `--session-slo` form.
    pub slo: String,
    /// Plays judged: every measured play except those the run's end cut (truncated, or
    /// without a session record) before they had missed anything.
    pub judged: u64,
    /// Of those, the plays that completed with every turn ok and within the per-turn bounds,
    /// and their first send → last byte within `session_s`.
    pub met: u64,
    /// `met ÷ judged` (`null` when none was judged).
    pub share: Option<f64>,
    /// Plays the run's end cut before they could be judged.
    pub cut: u64,
}

impl SessionSloMet {
    /// One line for the console and the reports: `sessions within the session SLO
    /// (ttft_ms=2000,session_s=600): 18 of 20 judged (90.0%), 3 cut by the run's end`.
    pub fn text(&self) -> String {
        let share = self
            .share
            .map_or_else(|| "—".to_owned(), |s| format!("{:.1}%", s * 100.0));
        let mut t = format!(
            "  sessions within the session SLO ({}): {} of {} judged ({share})",
            self.slo, self.met, self.judged
        );
        if self.cut > 0 {
            t.push_str(&format!(", {} cut by the run's end", self.cut));
        }
        t
    }
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
    /// Every turn ok and within the session SLO's per-turn bounds.
    turns_met_session: bool,
}

impl SessionMetrics {
    /// Over the measured (non-warmup, non-superseded) turns; `None` when there are none.
    pub fn compute(
        records: &[TurnRecord],
        sessions: &[SessionRecord],
        slo: Option<&Slo>,
        session_slo: Option<&SessionSlo>,
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
                    turns_met_session: true,
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
            if !ok || session_slo.is_some_and(|s| !s.turn.is_met_by(r)) {
                p.turns_met_session = false;
            }
        }
        if plays.is_empty() {
            return None;
        }
        let status_of: HashMap<(&str, u32), SessionStatus> = sessions
            .iter()
            .filter(|s| !s.warmup && !s.superseded)
            .map(|s| ((s.session_id.as_str(), s.replay), s.status))
            .collect();
        let n = plays.len() as u64;
        let completed = plays
            .keys()
            .filter(|k| status_of.get(*k) == Some(&SessionStatus::Completed))
            .count() as u64;
        let e2e = |p: &Play| (p.last_end - p.first_sent).max(0.0);
        let (sum_model, sum_e2e) = plays
            .values()
            .fold((0.0, 0.0), |(m, e), p| (m + p.model, e + e2e(p)));
        let slo_met = slo.map(|_| plays.values().filter(|p| p.all_met).count() as u64);
        let session_slo = session_slo.map(|s| {
            let (mut judged, mut met, mut cut) = (0, 0, 0);
            for (k, p) in &plays {
                let within = s.session_s.is_none_or(|b| e2e(p) <= b);
                let missed = !(p.turns_met_session && within);
                match status_of.get(k) {
                    Some(SessionStatus::Completed) => {
                        judged += 1;
                        met += u64::from(!missed);
                    }
                    // Cut by the run's end: judged only once it had already missed.
                    Some(SessionStatus::Truncated) | None if !missed => cut += 1,
                    _ => judged += 1,
                }
            }
            SessionSloMet {
                slo: s.to_string(),
                judged,
                met,
                share: (judged > 0).then(|| met as f64 / judged as f64),
                cut,
            }
        });
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
            session_slo,
        })
    }
}
