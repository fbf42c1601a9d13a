//! What a run scrubs, and where: the run's [`Secrets`] are the environment's API keys
//! ([`bench_rundir::secrets::ENV_VARS`]), the values of its secret request headers (named so
//! by [`bench_rundir::is_secret_name`], or by [`crate::RunOptions::secret_headers`] — the
//! `--secret-header` flag) and [`crate::RunOptions::secrets`]. They are built once when the
//! run starts and replaced by `***` wherever text leaves the run: the client's errors (so
//! records, events and the report never see them), `run.json`, `events.jsonl`, the records,
//! `result.json`, the exports, notices, [`RunError`]s and the [`crate::RunReport`]'s texts.
//! See `docs/secrets.md`.

use std::sync::Arc;

pub use bench_rundir::Secrets;

use crate::{Notice, RunError};

/// The secrets of a run sending `headers`, where `names` are the headers whose values are
/// secret whatever their names, and `extra` further values to scrub.
pub fn run_secrets(headers: &[(String, String)], names: &[String], extra: &Secrets) -> Secrets {
    let mut s = Secrets::from_env();
    s.extend(extra);
    s.add_headers(headers, names);
    s
}

impl RunError {
    /// The same error with every secret in its message replaced by `***`.
    pub fn scrub(self, secrets: &Secrets) -> RunError {
        match self {
            RunError::Invalid(m) => RunError::Invalid(secrets.scrub(&m).into_owned()),
            RunError::Failed(m) => RunError::Failed(secrets.scrub(&m).into_owned()),
        }
    }
}

impl Notice {
    /// The same notice with every secret in it replaced by `***`.
    pub fn scrub(self, secrets: &Secrets) -> Notice {
        match self {
            Notice::Info(m) => Notice::Info(secrets.scrub(&m).into_owned()),
            Notice::Warning(m) => Notice::Warning(secrets.scrub(&m).into_owned()),
        }
    }
}

/// Where notices go: `notices`, each one scrubbed first.
pub(crate) type NoticeFn = Arc<dyn Fn(Notice) + Send + Sync>;

/// `notices`, scrubbing each notice before it is passed on.
pub(crate) fn scrubbing_notices(notices: Option<NoticeFn>, secrets: &Secrets) -> Option<NoticeFn> {
    let f = notices?;
    if secrets.is_empty() {
        return Some(f);
    }
    let s = secrets.clone();
    Some(Arc::new(move |n: Notice| f(n.scrub(&s))))
}

/// `v` as pretty JSON with every secret in its strings replaced (one-off files: `run.json`,
/// `result.json`, `report.json`).
pub(crate) fn to_pretty_json(
    v: &impl serde::Serialize,
    secrets: &Secrets,
) -> serde_json::Result<String> {
    let mut v = serde_json::to_value(v)?;
    secrets.scrub_json(&mut v);
    serde_json::to_string_pretty(&v)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_run_scrubs_secret_headers_and_the_named_ones_only() {
        let headers = vec![
            ("Authorization".to_owned(), "Bearer tok-SECRET-1".to_owned()),
            ("X-Custom".to_owned(), "cu-SECRET-2".to_owned()),
            ("X-Team".to_owned(), "infra-team".to_owned()),
        ];
        let s = run_secrets(
            &headers,
            &["x-custom".to_owned()],
            &Secrets::default().with("extra-SECRET-3"),
        );
        let text = "Bearer tok-SECRET-1 tok-SECRET-1 cu-SECRET-2 infra-team extra-SECRET-3";
        let out = s.scrub(text);
        assert!(!out.contains("SECRET"), "{out}");
        assert!(out.contains("infra-team"), "{out}");
        let e = RunError::Failed("HTTP 401: cu-SECRET-2".into()).scrub(&s);
        assert_eq!(e, RunError::Failed("HTTP 401: ***".into()));
        assert_eq!(
            Notice::Warning("x tok-SECRET-1".into()).scrub(&s),
            Notice::Warning("x ***".into())
        );
        let json = to_pretty_json(&serde_json::json!({"e": "cu-SECRET-2"}), &s).unwrap();
        assert!(json.contains("***") && !json.contains("SECRET"), "{json}");
    }
}
