//! `bench sweep`'s flags and the [`SweepSpec`] they describe.

use std::path::PathBuf;

use bench_report::sweep::SweepAxis;
use bench_run::sweep::{self, FindMaxPlan, Levels, SweepPlan, SweepSpec};
use clap::{ArgMatches, Args, Command, FromArgMatches};

use crate::run::RunCmd;
use crate::{CliError, run_error};

/// `bench sweep`'s own flags (the `bench run` flags come with them, see [`SweepCmd`]).
#[derive(Debug, Clone, Args)]
pub struct SweepFlags {
    /// Closed loop: one run per concurrency, e.g. 1,2,4,8,16 (whole numbers, strictly
    /// increasing). A point's pool is 2 × its concurrency unless --num-sessions is given.
    #[arg(
        short = 'c',
        long = "concurrency",
        id = "sweep_concurrency",
        value_name = "LIST"
    )]
    pub concurrency: Option<String>,
    /// Open loop: one run per rate, sessions started per second, e.g. 0.5,1,2,4 (strictly
    /// increasing); --arrival sets their spacing, --max-concurrency caps the sessions in
    /// flight.
    #[arg(long, value_name = "LIST")]
    pub rates: Option<String>,
    /// Cache retention: one run per idle gap, the wait before each later turn of a session
    /// (replacing the plan's tool waits), at one load: -c N, --rates R or the spec's. E.g.
    /// 0s,5s,15s,30s,60s,120s; the first is 0s, the reference. The sweep reports the later
    /// turns' cached share and TTFT per gap and the cache's half-life (the gap at which half the
    /// cache benefit is gone). Against a server that other traffic also uses, that traffic is
    /// what evicts an idle session.
    #[arg(long, value_name = "LIST")]
    pub idle_gaps: Option<String>,
    /// Where the points' run directories (c0008, r0000.50: they sort by level), sweep.json,
    /// sweep.md and sweep.html go; must be new or empty (default: `sweeps/<UTC time>-<pid>`).
    #[arg(long, value_name = "DIR")]
    pub sweep_dir: Option<PathBuf>,
    /// Instead of every level, search for the highest load whose goodput reaches
    /// --goodput-target: run the lowest and the highest level given, then bisect between them.
    /// Goodput is the share of session plays meeting --session-slo when it is given (agents
    /// at SLO), else the share of turns meeting --slo. A point where the client was the
    /// bottleneck is never the answer.
    #[arg(long)]
    pub find_max: bool,
    /// --find-max: the share of turns (of sessions, with --session-slo) that must meet the
    /// SLO, 0–1 [default: 0.9].
    #[arg(long, value_name = "SHARE")]
    pub goodput_target: Option<f64>,
    /// --find-max: the search stops when the highest level meeting the target and the lowest
    /// missing it are this close [default: 1 for concurrency; for rates the smallest gap
    /// between the levels given].
    #[arg(long, value_name = "X")]
    pub step: Option<f64>,
}

/// `bench sweep` flags: its own ([`SweepFlags`]) and every `bench run` flag ([`RunCmd`]), with
/// these changes: the run's `--concurrency` is `--max-concurrency` here (the cap of an
/// open-loop point: `--concurrency` is the sweep's list), and `--rate`, `--run-dir`,
/// `--resume` and `--csv` are hidden and refused.
#[derive(Debug, Clone)]
pub struct SweepCmd {
    /// The sweep's own flags.
    pub sweep: SweepFlags,
    /// What every point shares.
    pub run: RunCmd,
}

impl FromArgMatches for SweepCmd {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(SweepCmd {
            sweep: SweepFlags::from_arg_matches(m)?,
            run: RunCmd::from_arg_matches(m)?,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.sweep.update_from_arg_matches(m)?;
        self.run.update_from_arg_matches(m)
    }
}

impl Args for SweepCmd {
    fn augment_args(cmd: Command) -> Command {
        adapt(RunCmd::augment_args(SweepFlags::augment_args(cmd)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        adapt(RunCmd::augment_args_for_update(
            SweepFlags::augment_args_for_update(cmd),
        ))
    }
}

/// The `bench run` flags as a sweep takes them.
fn adapt(cmd: Command) -> Command {
    cmd.after_help(
        "Every `bench run` flag applies to each point, a run of its own (its own embedded \
         simulator, warmup and cache flush); give --duration so that each point measures as long. \
         -c/--concurrency is the sweep's list: the run's concurrency flag is --max-concurrency \
         here, the in-flight cap of --rates points. --rate, --run-dir, --resume and --csv do not \
         apply. Exit 1 also when the sweep is interrupted or a point fails --max-error-rate or \
         --require-valid. See docs/sweep.md.",
    )
    .mut_arg("concurrency", |a| {
        a.long("max-concurrency")
            .short(None)
            .visible_alias(None)
            .help(
                "With --rates: the most sessions in flight at each point [default: no limit]; \
                 the pool is 2 × this (or 16) unless --num-sessions. Not with --concurrency \
                 LIST, where each point's concurrency is its level",
            )
            .long_help(None)
    })
    .mut_arg("json", |a| {
        a.help("Print sweep.json at the end instead of the table")
            .long_help(None)
    })
    .mut_arg("run_dir", |a| a.hide(true))
    .mut_arg("resume", |a| a.hide(true))
    .mut_arg("rate", |a| a.hide(true))
    .mut_arg("csv", |a| a.hide(true))
    .mut_arg("print_spec", |a| {
        a.help(
            "Print the sweep spec (the run spec with a [sweep] table) the flags make, as TOML \
             (with --json: the body of bench serve's POST /api/runs), and exit",
        )
        .long_help(None)
    })
}

impl SweepCmd {
    /// The sweep these flags (and `--spec`) describe, checked (`given`: the ids of the flags
    /// given on the command line).
    pub fn to_spec(&self, given: &[String]) -> Result<SweepSpec, CliError> {
        to_sweep_spec(&self.sweep, &self.run, given)
    }
}

fn usage<T>(m: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Usage(m.into()))
}

/// The flags that do not apply to a sweep, refused naming what does.
fn refuse_run_only(r: &RunCmd) -> Result<(), CliError> {
    if r.resume.is_some() {
        return usage(
            "--resume does not apply to a sweep: each point is a new run in the sweep directory \
             (bench run --resume DIR/c0008 finishes one point on its own)",
        );
    }
    if r.run_dir.is_some() {
        return usage(
            "--run-dir does not apply to a sweep: each point's run directory is in --sweep-dir \
             (DIR/c0008, DIR/r0001.00, ...)",
        );
    }
    if r.rate.is_some() {
        return usage("--rate is a single rate: a sweep takes --rates LIST (e.g. 0.5,1,2)");
    }
    if r.csv.is_some() {
        return usage(
            "--csv does not apply to a sweep: every point's turns are in its run directory \
             (turns.jsonl)",
        );
    }
    Ok(())
}

/// An idle-gap sweep's table; `-c N` or `--rates R` (one level each) is its fixed load, set in
/// `r`.
fn idle_gap_plan(f: &SweepFlags, r: &mut RunCmd, gaps: &str) -> Result<SweepPlan, CliError> {
    let one = |flag: &str, list: &str| -> Result<f64, CliError> {
        match Levels::parse(
            if flag == "-c" {
                SweepAxis::Concurrency
            } else {
                SweepAxis::Rate
            },
            list,
        )
        .map_err(run_error)?
        .values()
        {
            [v] => Ok(*v),
            _ => usage(format!(
                "--idle-gaps plays every gap at one load: give {flag} one value, not {list:?}"
            )),
        }
    };
    match (&f.concurrency, &f.rates) {
        (Some(_), Some(_)) => return usage("give -c N or --rates R with --idle-gaps, not both"),
        (Some(c), None) => {
            if r.plan.concurrency.is_some() {
                return usage("--max-concurrency goes with --rates R, not -c N");
            }
            r.plan.concurrency = Some(one("-c", c)? as u32);
        }
        (None, Some(rates)) => r.rate = Some(one("--rates", rates)?),
        (None, None) => {}
    }
    if f.find_max {
        return usage("--find-max searches a load level: --idle-gaps plays every gap at one load");
    }
    Ok(SweepPlan {
        axis: SweepAxis::IdleGap,
        levels: Levels::parse(SweepAxis::IdleGap, gaps)
            .map_err(run_error)?
            .values()
            .to_vec(),
        find_max: None,
    })
}

/// The sweep table the flags give (`None`: no level list), their conflicts refused.
fn plan_of_flags(f: &SweepFlags, r: &RunCmd) -> Result<Option<SweepPlan>, CliError> {
    let (axis, list) = match (&f.concurrency, &f.rates) {
        (Some(c), None) => (SweepAxis::Concurrency, c),
        (None, Some(rates)) => (SweepAxis::Rate, rates),
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => return usage("give --concurrency LIST or --rates LIST, not both"),
    };
    if axis == SweepAxis::Concurrency && r.plan.concurrency.is_some() {
        return usage(
            "--max-concurrency caps the sessions in flight of open-loop points (--rates); with \
             --concurrency LIST each point's concurrency is its level",
        );
    }
    if axis == SweepAxis::Rate && r.ramp_up.is_some() {
        return usage(
            "--ramp-up starts closed-loop sessions gradually: it goes with --concurrency LIST, \
             not --rates",
        );
    }
    if axis == SweepAxis::Concurrency && r.arrival.is_some() {
        return usage(
            "--arrival spaces open-loop session starts: it goes with --rates, not --concurrency",
        );
    }
    Ok(Some(SweepPlan {
        axis,
        levels: Levels::parse(axis, list)
            .map_err(run_error)?
            .values()
            .to_vec(),
        find_max: None,
    }))
}

/// The sweep the flags (and `--spec`) describe.
fn to_sweep_spec(f: &SweepFlags, r: &RunCmd, given: &[String]) -> Result<SweepSpec, CliError> {
    refuse_run_only(r)?;
    let file_plan = match &r.spec {
        Some(p) => {
            bench_run::specfile::read_run_or_sweep(p)
                .map_err(run_error)?
                .1
        }
        None => None,
    };
    if let Some(gaps) = &f.idle_gaps {
        let mut r = r.clone();
        let plan = idle_gap_plan(f, &mut r, gaps)?;
        // The load -c N or --rates R set lands as the run's own flag would.
        let mut given = given.to_vec();
        if f.concurrency.is_some() {
            given.push("concurrency".into());
        }
        if f.rates.is_some() {
            given.push("rate".into());
        }
        let (run, _) = r.to_spec_and_sweep(&given)?;
        let spec = SweepSpec { run, sweep: plan };
        spec.validate().map_err(run_error)?;
        return Ok(spec);
    }
    let Some(mut plan) = plan_of_flags(f, r)?.or(file_plan) else {
        return usage(
            "bench sweep needs --concurrency LIST (e.g. 1,2,4,8), --rates LIST (e.g. 0.5,1,2), \
             --idle-gaps LIST (e.g. 0s,5s,15s,30s) or a --spec file with a sweep table",
        );
    };
    if f.find_max {
        plan.find_max = Some(FindMaxPlan {
            goodput_target: f.goodput_target.unwrap_or(sweep::DEFAULT_GOODPUT_TARGET),
            step: f.step,
        });
    } else if f.goodput_target.is_some() || f.step.is_some() {
        return usage("--goodput-target and --step go with --find-max");
    }
    // The run every point shares, built at the first level (so that a rate sweep's arrival
    // flags land in an open loop).
    let mut r = r.clone();
    let mut given = given.to_vec();
    let first = plan.levels.first().copied().unwrap_or(1.0);
    if f.concurrency.is_some() || f.rates.is_some() {
        match plan.axis {
            SweepAxis::Concurrency => r.plan.concurrency = Some(first as u32),
            SweepAxis::Rate => r.rate = Some(first),
            SweepAxis::IdleGap => {}
        }
        given.push(plan.axis.as_str().into());
    }
    let (run, _) = r.to_spec_and_sweep(&given)?;
    let spec = SweepSpec { run, sweep: plan };
    spec.validate().map_err(run_error)?;
    Ok(spec)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        sweep: SweepCmd,
    }

    #[test]
    fn the_run_flags_come_along_and_the_concurrency_is_the_list() {
        let t = T::try_parse_from([
            "t",
            "-c",
            "1,2,4",
            "--slo",
            "ttft_ms=100",
            "--duration",
            "5s",
            "--sim-max-num-seqs",
            "4",
        ])
        .unwrap();
        assert_eq!(t.sweep.sweep.concurrency.as_deref(), Some("1,2,4"));
        assert_eq!(t.sweep.run.slo.as_deref(), Some("ttft_ms=100"));
        assert_eq!(t.sweep.run.sim.sim_max_num_seqs, 4);
        assert_eq!(t.sweep.run.plan.concurrency, None);
        let t = T::try_parse_from(["t", "--rates", "1,2", "--max-concurrency", "16"]).unwrap();
        assert_eq!(t.sweep.run.plan.concurrency, Some(16));
        assert_eq!(t.sweep.sweep.rates.as_deref(), Some("1,2"));
    }
}
