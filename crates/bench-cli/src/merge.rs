//! `bench merge`: the run directories of a sharded run put back together
//! ([`bench_run::merge`]).

use bench_args::MergeCmd;

use crate::{CliError, out};

/// Runs `bench merge`.
pub fn run_merge(args: MergeCmd) -> Result<(), CliError> {
    let m = bench_run::merge::merge(&args.dirs, &args.output, args.partial)
        .map_err(bench_args::run_error)?;
    for n in &m.notes {
        eprintln!("bench merge: {n}");
    }
    if let Some(r) = &m.journeys {
        if args.json {
            let text = serde_json::to_string_pretty(r)
                .map_err(|e| CliError::Failed(format!("cannot encode the report: {e}")))?;
            return out(&format!("{text}\n"));
        }
        let runs: usize = r.journeys.values().map(|j| j.runs.len()).sum();
        return out(&format!(
            "bench merge: {} of {} journeys shards{} → {}: {} journeys, {runs} journey runs\n",
            m.merged.shards.len(),
            m.merged.count,
            if m.merged.partial { " (partial)" } else { "" },
            m.dir.display(),
            r.journeys.len(),
        ));
    }
    let Some(result) = &m.result else {
        return Err(CliError::Failed("bench merge wrote no result".into()));
    };
    if args.json {
        let text = serde_json::to_string_pretty(result)
            .map_err(|e| CliError::Failed(format!("cannot encode the result: {e}")))?;
        return out(&format!("{text}\n"));
    }
    let s = &result.summary;
    let verdict = result.validity.as_ref().map_or("-", |v| v.verdict.as_str());
    out(&format!(
        "bench merge: {} of {} shards{} → {}: {} turns ok, {} failed, {} sessions; validity {verdict}\n",
        m.merged.shards.len(),
        m.merged.count,
        if m.merged.partial { " (partial)" } else { "" },
        m.dir.display(),
        s.turns_ok,
        s.turns_failed,
        result.sessions.as_ref().map_or(0, |x| x.plays),
    ))
}
