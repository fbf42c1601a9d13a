//! `run.json`, one typed document per kind of run: [`ReplayRunJson`] (`bench run`) and
//! [`JourneysRunJson`] (`bench journeys`). Each is written when its run starts and read back
//! through the same type by `--resume`, `bench report`, `bench merge` and `bench serve`;
//! [`bench_rundir::RunJsonHead`] is the part every kind shares, for readers that do not know
//! the kind yet (`bench status`, the control plane's listing).

use std::path::{Path, PathBuf};

use bench_rundir::{ClockOffset, Merged, RunKind, ShardInfo};
use bench_runner::RunConfig;
use bench_telemetry::Backend;
use bench_workload::plan::PlanSummary;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::journeys::JourneysSpec;
use crate::server::Detected;
use crate::{Load, RunSpec};

/// A replay run's `run.json`: its spec and what the run found out before it started. Every
/// field but the spec may be missing (a file of an older bench): it then reads as its default.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayRunJson {
    /// The run's specification (header values never are in it).
    pub spec: RunSpec,
    /// The bench that wrote it.
    #[serde(default)]
    pub tool_version: String,
    /// The process that played it (none in a merged run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Where requests went (the embedded simulator's loopback address without a server).
    #[serde(default)]
    pub base_url: String,
    /// The model every request named.
    #[serde(default)]
    pub model: String,
    /// The model's window the context guard used.
    #[serde(default)]
    pub max_model_len: Option<u64>,
    /// The server family used.
    #[serde(default)]
    pub backend: Backend,
    /// What detection found, and from what.
    #[serde(default)]
    pub backend_detected: Detected,
    /// How requests were authenticated (never a secret: `none`, `bearer from OPENAI_API_KEY`).
    #[serde(default)]
    pub auth: String,
    /// The plan's summary (the whole plan's, in a shard).
    #[serde(default)]
    pub plan: PlanSummary,
    /// The engine's resolved configuration (its headers are not recorded). An echo for people:
    /// one an older bench wrote in another shape reads as the default (the spec is what
    /// readers use).
    #[serde(default, deserialize_with = "echo")]
    pub run: RunConfig,
    /// The whole plan's digest: every shard of one run has the same.
    #[serde(default)]
    pub plan_digest: String,
    /// [`RunSpec::config_digest`].
    #[serde(default)]
    pub config_digest: String,
    /// The shard of the plan this run played (`--shard I/N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// This host's clock against the server's (`--shard` or `--start-at` runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockOffset>,
    /// The check turns' finding about the field that pins chat output, when bench checked
    /// (`output_cap_field = "auto"` against a server not known to honour
    /// `max_completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_cap: Option<crate::server::OutputCapCheck>,
    /// How a merged run was made (`bench merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<Merged>,
}

impl Default for ReplayRunJson {
    /// The default spec's document before it ran (no server, no plan).
    fn default() -> Self {
        ReplayRunJson {
            spec: RunSpec::default(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            pid: None,
            base_url: String::new(),
            model: String::new(),
            max_model_len: None,
            backend: Backend::Unknown,
            backend_detected: Detected {
                backend: Backend::Unknown,
                evidence: String::new(),
            },
            auth: String::new(),
            plan: PlanSummary::default(),
            run: RunConfig::new("", crate::DEFAULT_CONCURRENCY),
            plan_digest: String::new(),
            config_digest: String::new(),
            shard: None,
            clock: None,
            output_cap: None,
            merged: None,
        }
    }
}

impl ReplayRunJson {
    /// The concurrency the run was judged at: the closed loop's, or the open loop's in-flight
    /// cap (0: none).
    pub fn concurrency(&self) -> u32 {
        match &self.spec.load {
            Load::Closed { concurrency, .. } => *concurrency,
            Load::Open { max_in_flight, .. } => max_in_flight.unwrap_or(0),
        }
    }

    /// The merged run's document: this (the first shard's) without what belonged to that shard
    /// alone (its part, clock, process, start time), its load `shards` times over (each shard
    /// had the same), and how it was merged.
    pub fn merged(&self, merged: Merged) -> ReplayRunJson {
        let n = merged.shards.len() as u32;
        let total: u32 = merged.shards.iter().map(|s| s.concurrency).sum();
        let mut doc = self.clone();
        doc.pid = None;
        doc.shard = None;
        doc.clock = None;
        doc.spec.placement = Default::default();
        match &mut doc.spec.load {
            Load::Closed { concurrency, .. } => *concurrency = total,
            Load::Open {
                arrival,
                max_in_flight,
            } => {
                arrival.rate *= f64::from(n);
                if max_in_flight.is_some() {
                    *max_in_flight = Some(total);
                }
            }
        }
        doc.run.concurrency = total;
        if let Some(a) = &mut doc.run.arrival {
            a.rate *= f64::from(n);
        }
        doc.merged = Some(merged);
        doc
    }
}

fn echo<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RunConfig, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).unwrap_or_default())
}

/// A journeys run's `run.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JourneysRunJson {
    /// Always [`RunKind::Journeys`].
    pub kind: RunKind,
    /// The suite's specification.
    pub spec: JourneysSpec,
    /// The bench that wrote it.
    pub tool_version: String,
    /// The process that played it (none in a merged run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The server timed.
    pub base_url: String,
    /// Names of the extra headers sent (never their values).
    #[serde(default)]
    pub header_names: Vec<String>,
    /// The journeys in the order the suite plays them, with their runs: what shards partition.
    pub plan_digest: String,
    /// [`JourneysSpec::config_digest`].
    pub config_digest: String,
    /// A shard's part: `sessions` and `turns` count its (journey, run) pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// How a merged run was made (`bench merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<Merged>,
}

impl JourneysRunJson {
    /// The merged run's document: this (the first shard's) without its part, process and
    /// start time, and how it was merged.
    pub fn merged(&self, merged: Merged) -> JourneysRunJson {
        let mut doc = self.clone();
        doc.pid = None;
        doc.shard = None;
        doc.spec.placement = Default::default();
        doc.merged = Some(merged);
        doc
    }
}

/// Why a `run.json` could not be read as its kind's document.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadError {
    /// There is none: not a run directory.
    Missing(PathBuf),
    /// It cannot be read, or is not a document of this kind that this bench reads (`version`:
    /// the bench that wrote it, when another).
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong, one line.
        what: String,
        /// The `tool_version` it records, when it is not this bench's.
        version: Option<String>,
    },
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Missing(p) => {
                write!(f, "{}: not a run directory (no run.json)", p.display())
            }
            ReadError::Bad {
                path,
                what,
                version: Some(v),
            } => write!(
                f,
                "{}: written by bench {v}, which this bench {} does not read ({what})",
                path.display(),
                env!("CARGO_PKG_VERSION")
            ),
            ReadError::Bad { path, what, .. } => write!(f, "{}: {what}", path.display()),
        }
    }
}

/// Reads `dir/run.json` as `T` ([`ReplayRunJson`] or [`JourneysRunJson`]).
pub fn read<T: DeserializeOwned>(dir: &Path) -> Result<T, ReadError> {
    let path = dir.join(bench_rundir::files::RUN_JSON);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::Missing(dir.to_owned()));
        }
        Err(e) => {
            return Err(ReadError::Bad {
                path,
                what: e.to_string(),
                version: None,
            });
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| ReadError::Bad {
        version: serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("tool_version")?.as_str().map(str::to_owned))
            .filter(|v| v != env!("CARGO_PKG_VERSION")),
        path,
        what: e.to_string(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bench_rundir::MergedShard;
    use bench_runner::{Arrival, ArrivalProcess};

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures")
            .join(name)
    }

    #[test]
    fn a_run_json_written_by_this_bench_reads_back_as_itself() {
        let dir = fixture("baselines/replay");
        let doc: ReplayRunJson = read(&dir).unwrap();
        assert!(doc.plan.sessions > 0, "{:?}", doc.plan);
        assert_eq!(doc.run.concurrency, doc.concurrency());
        let again: ReplayRunJson =
            serde_json::from_value(serde_json::to_value(&doc).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&again).unwrap(),
            serde_json::to_value(&doc).unwrap()
        );
    }

    #[test]
    fn a_run_json_without_a_spec_or_without_a_file_is_named() {
        let e = read::<ReplayRunJson>(&fixture("rundirs/pre-spec-completed")).unwrap_err();
        assert!(
            matches!(&e, ReadError::Bad { what, .. } if what.contains("spec")),
            "{e}"
        );
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(
            read::<ReplayRunJson>(tmp.path()).unwrap_err(),
            ReadError::Missing(tmp.path().to_owned())
        );
    }

    fn merged(concurrency: &[u32]) -> Merged {
        Merged {
            count: concurrency.len() as u32,
            partial: false,
            missing: Vec::new(),
            shards: concurrency
                .iter()
                .enumerate()
                .map(|(i, &c)| MergedShard {
                    index: i as u32,
                    dir: format!("s{i}"),
                    host: None,
                    start_utc: None,
                    shift_s: 0.0,
                    clock: None,
                    concurrency: c,
                    finished: true,
                    turns: 0,
                    sessions: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn a_merged_run_has_the_load_of_all_its_shards_and_no_shard_of_its_own() {
        let mut shard = ReplayRunJson::default();
        shard.spec.load = Load::Closed {
            concurrency: 8,
            ramp_up: None,
        };
        shard.run.concurrency = 8;
        shard.pid = Some(7);
        shard.shard = Some(ShardInfo {
            index: 0,
            count: 4,
            sessions: 1,
            turns: 1,
            planned_tokens: 1,
        });
        let m = shard.merged(merged(&[8, 8, 8, 8]));
        assert_eq!(m.concurrency(), 32);
        assert_eq!(m.run.concurrency, 32);
        assert_eq!((m.pid, m.shard), (None, None));
        assert_eq!(m.merged.as_ref().map(|m| m.shards.len()), Some(4));

        let arrival = Arrival {
            rate: 1.5,
            process: ArrivalProcess::Poisson,
            seed: 0,
        };
        shard.spec.load = Load::Open {
            arrival,
            max_in_flight: Some(8),
        };
        shard.run.arrival = Some(arrival);
        let m = shard.merged(merged(&[8, 8]));
        match m.spec.load {
            Load::Open {
                arrival,
                max_in_flight,
            } => assert_eq!((arrival.rate, max_in_flight), (3.0, Some(16))),
            Load::Closed { .. } => panic!("the load changed kind"),
        }
        assert_eq!(m.run.arrival.map(|a| a.rate), Some(3.0));
        shard.spec.load = Load::Open {
            arrival,
            max_in_flight: None,
        };
        let m = shard.merged(merged(&[0, 0]));
        assert!(matches!(
            m.spec.load,
            Load::Open {
                max_in_flight: None,
                ..
            }
        ));
    }
}
