//! Where one process's part of a run sits among the others: which shard it plays and when it
//! starts. [`crate::RunSpec`] and [`crate::journeys::JourneysSpec`] both hold one
//! [`Placement`] (the `[placement]` table of a spec file: `shard`, `start_at`), checked and
//! waited for by the same code.

use std::time::Duration;

use bench_runner::CancelToken;
use bench_workload::shard::Shard;
use serde::{Deserialize, Serialize};

use crate::{Notice, RunError};

/// How far in the past `start_at` may be when the run is started (clocks and process start
/// differ by a little between hosts).
pub const START_AT_SLACK: Duration = Duration::from_secs(5);

/// Which part of a run this process plays, and when it starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Placement {
    /// The part this process plays (`--shard I/N`): of a replay, a deterministic partition of
    /// the plan's sessions ([`bench_workload::shard`]; concurrency and rate are this shard's
    /// own); of a journeys suite, every N-th (journey, run) pair from the I-th. `None`: all of
    /// it. `bench merge` puts the shards together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// When the measured part starts (`--start-at`, RFC 3339): shards on several hosts plan
    /// and check the server first, then start together. Refused when already more than
    /// [`START_AT_SLACK`] past; ignored by a resumed run.
    #[serde(
        skip_serializing_if = "Option::is_none",
        with = "time::serde::rfc3339::option"
    )]
    pub start_at: Option<time::OffsetDateTime>,
}

impl Placement {
    /// Neither a shard nor a start time: the whole run, started at once.
    pub fn is_unset(&self) -> bool {
        self.shard.is_none() && self.start_at.is_none()
    }

    /// The placement `--shard`, `--shards N` and `--start-at` give: `--shard I/N` as given;
    /// `--shards N` takes I from `job_index`, Kubernetes' `JOB_COMPLETION_INDEX` (set in each
    /// pod of an Indexed Job).
    pub fn from_flags(
        shard: Option<Shard>,
        shards: Option<u32>,
        job_index: Option<&str>,
        start_at: Option<time::OffsetDateTime>,
    ) -> Result<Placement, RunError> {
        let shard = match (shard, shards) {
            (Some(s), _) => Some(s),
            (None, Some(n)) => Some(shard_from_index(n, job_index)?),
            (None, None) => None,
        };
        Ok(Placement { shard, start_at })
    }

    /// Refuses a `start_at` already more than [`START_AT_SLACK`] past at `now`.
    pub fn check(&self, now: time::OffsetDateTime) -> Result<(), RunError> {
        let Some(at) = self.start_at else {
            return Ok(());
        };
        let late = now - at;
        if late > START_AT_SLACK {
            return Err(RunError::Invalid(format!(
                "--start-at {}: already {:.0} s past (shards start together at a time still \
                 ahead: give one a few minutes away)",
                rfc3339(at),
                late.as_seconds_f64()
            )));
        }
        Ok(())
    }

    /// Sleeps until `start_at` (none: returns at once), saying so through `notice` as `tool`
    /// (`bench run`); a start already past goes at once, with a warning of how late it is. A
    /// cancel of `cancel` ends the wait: the caller then stops before its first request.
    pub async fn wait(&self, tool: &str, cancel: &CancelToken, notice: impl Fn(Notice)) {
        let Some(at) = self.start_at else { return };
        let ahead = at - time::OffsetDateTime::now_utc();
        if ahead.is_positive() {
            notice(Notice::Info(format!(
                "{tool}: ready; starting at {} (in {:.1} s)",
                rfc3339(at),
                ahead.as_seconds_f64()
            )));
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs_f64(ahead.as_seconds_f64())) => {}
                () = cancel.cancelled() => {}
            }
        } else if -ahead > time::Duration::milliseconds(100) {
            notice(Notice::Warning(format!(
                "{tool}: started {:.1} s after --start-at {} (planning and the readiness checks \
                 took longer): this shard is late against the others",
                (-ahead).as_seconds_f64(),
                rfc3339(at)
            )));
        }
    }
}

/// `--shards N`: shard I of N, I from Kubernetes' `JOB_COMPLETION_INDEX` (`index`).
fn shard_from_index(count: u32, index: Option<&str>) -> Result<Shard, RunError> {
    let Some(i) = index else {
        return Err(RunError::Invalid(format!(
            "--shards {count}: JOB_COMPLETION_INDEX is not set (Kubernetes sets it in the pods \
             of an Indexed Job); elsewhere give --shard I/{count}"
        )));
    };
    let i: u32 = i.trim().parse().map_err(|_| {
        RunError::Invalid(format!(
            "--shards {count}: JOB_COMPLETION_INDEX={i:?} is not a whole number"
        ))
    })?;
    Shard::new(i, count)
        .map_err(|e| RunError::Invalid(format!("--shards {count} (JOB_COMPLETION_INDEX={i}): {e}")))
}

/// `--start-at`'s value: an RFC 3339 time.
pub fn parse_start_at(s: &str) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .map_err(|e| format!("{s:?} is not an RFC 3339 time such as 2026-12-02T10:00:00Z ({e})"))
}

pub(crate) fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn at(s: &str) -> time::OffsetDateTime {
        parse_start_at(s).unwrap()
    }

    #[test]
    fn a_start_more_than_the_slack_past_is_refused_naming_the_flag() {
        let p = Placement {
            start_at: Some(at("2026-12-02T10:00:00Z")),
            ..Placement::default()
        };
        p.check(at("2026-12-02T10:00:04Z")).unwrap();
        p.check(at("2026-12-02T09:00:00Z")).unwrap();
        let e = p.check(at("2026-12-02T10:01:00Z")).unwrap_err().to_string();
        assert!(
            e.contains("--start-at 2026-12-02T10:00:00Z: already 60 s past"),
            "{e}"
        );
        Placement::default()
            .check(at("2030-01-01T00:00:00Z"))
            .unwrap();
    }

    #[test]
    fn shards_take_their_index_from_the_job_completion_index() {
        let p = Placement::from_flags(None, Some(4), Some("3"), None).unwrap();
        assert_eq!(p.shard, Some(Shard::new(3, 4).unwrap()));
        let given = Shard::new(1, 2).unwrap();
        let p = Placement::from_flags(Some(given), None, Some("3"), None).unwrap();
        assert_eq!(p.shard, Some(given));
        for (index, what) in [
            (None, "JOB_COMPLETION_INDEX is not set"),
            (Some("x"), "is not a whole number"),
            (Some("4"), "--shards 4 (JOB_COMPLETION_INDEX=4)"),
        ] {
            let e = Placement::from_flags(None, Some(4), index, None).unwrap_err();
            assert!(e.to_string().contains(what), "{index:?}: {e}");
        }
    }

    #[tokio::test]
    async fn a_cancel_ends_the_wait_for_a_start_far_ahead() {
        let p = Placement {
            start_at: Some(time::OffsetDateTime::now_utc() + time::Duration::hours(1)),
            ..Placement::default()
        };
        let cancel = CancelToken::new();
        let said = Mutex::new(Vec::new());
        let c = cancel.clone();
        tokio::spawn(async move { c.cancel() });
        p.wait("bench run", &cancel, |n| said.lock().unwrap().push(n))
            .await;
        let said = said.into_inner().unwrap();
        assert!(
            matches!(&said[..], [Notice::Info(m)] if m.starts_with("bench run: ready; starting at")),
            "{said:?}"
        );
    }

    #[test]
    fn both_specs_hold_it_as_one_placement_table() {
        let p = Placement {
            shard: Some(Shard::new(1, 4).unwrap()),
            start_at: Some(at("2026-12-02T10:00:00Z")),
        };
        let run = crate::RunSpec {
            placement: p,
            ..crate::RunSpec::default()
        };
        let v = serde_json::to_value(&run).unwrap();
        assert_eq!(
            v["placement"],
            serde_json::json!({"shard": {"index": 1, "count": 4}, "start_at": "2026-12-02T10:00:00Z"})
        );
        let back: crate::RunSpec = serde_json::from_value(v).unwrap();
        assert_eq!(back.placement, p);
        // Unset, it is not written (and so not part of the digest either way).
        let plain = serde_json::to_value(crate::RunSpec::default()).unwrap();
        assert!(plain.get("placement").is_none(), "{plain}");
        assert_eq!(
            run.config_digest(),
            crate::RunSpec::default().config_digest()
        );
        let journeys: crate::journeys::JourneysSpec = toml::from_str(
            "[placement]\nshard = { index = 1, count = 4 }\nstart_at = \"2026-12-02T10:00:00Z\"\n",
        )
        .unwrap();
        assert_eq!(journeys.placement, p);
        // Unknown keys are refused by name, inside the table and beside it.
        let e = toml::from_str::<crate::RunSpec>("[placement]\nstrat_at = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("strat_at"), "{e}");
        let e =
            serde_json::from_value::<crate::RunSpec>(serde_json::json!({"shard": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field `shard`"), "{e}");
    }
}
