//! What a caller gives a run besides its spec ([`RunOptions`]), what it is told while the run
//! plays ([`Notice`]) and why a run could not start or finish ([`RunError`]).

use std::path::PathBuf;
use std::sync::Arc;

use bench_runner::Observer;
use bench_workload::plan::ProgressFn;

use crate::{hooks, secrets};

/// Why a run could not start or finish.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Bad input: the spec, the dataset, the run directory (`bench run` exits 2).
    #[error("{0}")]
    Invalid(String),
    /// The run failed: the server, the disk (`bench run` exits 1).
    #[error("{0}")]
    Failed(String),
}

/// A line for whoever started the run (the CLI prints them on stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// What is happening (e.g. where the run goes).
    Info(String),
    /// Something the user should know (a backend mismatch, scraping disabled, a repair).
    Warning(String),
}

/// What a run needs that is never recorded in its directory.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// The run directory (default `runs/<UTC time>-<pid>`). Ignored by [`resume()`](crate::resume()).
    pub run_dir: Option<PathBuf>,
    /// Extra request headers (name, value); only the names are recorded.
    pub headers: Vec<(String, String)>,
    /// Headers whose values are secrets whatever their names (`--secret-header`); those named
    /// so by [`bench_rundir::is_secret_name`] always are. Only the names are recorded (so a
    /// resumed run scrubs them too). See [`secrets`].
    pub secret_headers: Vec<String>,
    /// Further values never to write or show; the environment's API keys and the secret
    /// headers' values are added by the run itself ([`secrets::run_secrets`]).
    pub secrets: secrets::Secrets,
    /// Observers of the engine's events (called on its tasks: keep them quick).
    pub observers: Vec<Arc<dyn Observer>>,
    /// Called as planning advances.
    pub plan_progress: Option<ProgressFn>,
    /// Where notices go (default: nowhere).
    pub notices: Option<Arc<dyn Fn(Notice) + Send + Sync>>,
    /// Called at the start, per finished turn and at the end ([`hooks`]).
    pub hooks: Vec<Arc<dyn hooks::Hooks>>,
    /// Score every ok turn; their summaries go into `result.json` ([`hooks`]).
    pub graders: Vec<Arc<dyn hooks::Grader>>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("run_dir", &self.run_dir)
            .field(
                "header_names",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("secret_headers", &self.secret_headers)
            .field("observers", &self.observers.len())
            .field("hooks", &self.hooks.len())
            .field(
                "graders",
                &self.graders.iter().map(|g| g.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl RunOptions {
    pub(crate) fn notice(&self, n: Notice) {
        if let Some(f) = &self.notices {
            f(n);
        }
    }
}
