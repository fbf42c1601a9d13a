//! `bench journeys`: flags → [`bench_run::journeys::JourneysSpec`], the suite (run by
//! `bench-run`), the report, gates, the baseline comparison and the exit code.

use std::path::Path;
use std::sync::Arc;

use bench_args::{JourneysCmd, run_error};
use bench_journeys::{Comparison, Report};
use bench_run::journeys::{JourneysOptions, OnRun, start_journeys};
use bench_run::{CancelledBy, Notice};

use crate::{CliError, out};

fn write_file(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, crate::secrets::scrub(text).as_bytes())
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))
}

/// Runs `bench journeys`.
pub async fn run_journeys(args: JourneysCmd, given: &[String]) -> Result<(), CliError> {
    let headers = bench_args::parse_headers(&args.headers)?;
    let spec = args.to_spec_given(given)?;
    // The file's own secrets ({{env.NAME}} values, literal secret headers) are never printed
    // either.
    let file_secrets = match &spec.file {
        Some(f) => bench_journeys::declarative::load(f)
            .map(|f| f.secrets().clone())
            .unwrap_or_default(),
        None => bench_run::secrets::Secrets::default(),
    };
    crate::secrets::init(
        &headers,
        &args.secret_headers,
        spec.base_url.as_deref(),
        &file_secrets,
    );
    // After the secrets are known: a base URL's password is printed masked.
    if args.print_spec {
        return out(&bench_run::specfile::to_toml(&spec).map_err(run_error)?);
    }
    let journeys = spec.select().map_err(run_error)?;
    if args.list {
        let mut text = bench_journeys::suite::listing(&journeys);
        let params = spec.file_params().map_err(run_error)?;
        if !params.is_empty() {
            text.push_str("\nparameters (--param NAME=VALUE):\n");
            for p in &params {
                let state = match (&p.value, &p.default) {
                    (Some(v), Some(d)) if v == d => format!("default {d}"),
                    (Some(v), _) => format!("= {v}"),
                    (None, _) => "required".to_owned(),
                };
                text.push_str(&format!("  {:<16}{:<24}{}\n", p.name, state, p.description));
            }
        }
        return out(&text);
    }
    if !(args.threshold.is_finite() && args.threshold >= 0.0) {
        return Err(CliError::Usage(
            "--threshold must be a non-negative number".into(),
        ));
    }
    // Read the baseline first: a bad file fails before minutes of measuring.
    let baseline = match &args.baseline {
        Some(p) => Some(Report::read(p).map_err(|e| CliError::Usage(format!("--baseline {e}")))?),
        None => None,
    };
    if spec.base_url.is_none() && !spec.is_embedded() {
        return Err(CliError::Usage(format!(
            "{}: --base-url is required (only the openai pack has an embedded server)",
            spec.source()
        )));
    }
    let total = spec.runs;
    let on_run: OnRun = Arc::new(move |name, row| {
        let detail = match &row.setup_failure {
            Some(f) => format!("setup failed: {f}"),
            None => format!(
                "{} ok, {} failed, p50 {} ms",
                row.n_success,
                row.n_failures,
                row.p50_ms.map_or("—".into(), |v| format!("{v:.2}"))
            ),
        };
        eprintln!("bench journeys: {name} run {}/{total}: {detail}", row.run);
    });
    let options = JourneysOptions {
        headers,
        secret_headers: args.secret_headers.clone(),
        run_dir: args.run_dir.clone(),
        on_run: Some(on_run),
        notices: Some(Arc::new(|n| match n {
            Notice::Info(m) => eprintln!("{m}"),
            Notice::Warning(m) => eprintln!("warning: {m}"),
        })),
        ..JourneysOptions::default()
    };
    // SIGINT or SIGTERM (what Kubernetes sends a shard's pod), taken over before the run
    // starts so that a signal during its --start-at wait stops it.
    let mut signals = crate::run::Signals::new();
    let handle = start_journeys(spec, options).await.map_err(run_error)?;
    let canceller = handle.canceller();
    let sig = tokio::spawn(async move {
        signals.next().await;
        eprintln!("bench journeys: stopping: operations in flight finish, teardown runs");
        canceller.cancel(CancelledBy::Signal);
    });
    let done = handle.wait().await;
    sig.abort();
    let done = done.map_err(run_error)?;
    let report = &done.report;
    let cmp = baseline
        .as_ref()
        .map(|b| Comparison::new(report, b, args.threshold, args.min_delta_ms));
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?
        + "\n";
    if let Some(p) = &args.output {
        write_file(p, &json)?;
    }
    if let Some(p) = &args.markdown {
        write_file(p, &report.markdown(cmp.as_ref()))?;
    }
    if args.json {
        out(&json)?;
    } else {
        out(&report.console())?;
        if let Some(c) = &cmp {
            out(&report.markdown(Some(c)))?;
        }
    }
    // Verdicts: setup failures, gates, regressions, a cancel.
    let mut problems = done.problems;
    if let Some(c) = &cmp {
        let at = problems.len() - usize::from(!done.stopped_by.is_finished());
        problems.splice(at..at, c.regressions());
    }
    match problems.split_last() {
        None => Ok(()),
        Some((last, rest)) => {
            for p in rest {
                eprintln!("error: {p}");
            }
            Err(CliError::Failed(last.clone()))
        }
    }
}
