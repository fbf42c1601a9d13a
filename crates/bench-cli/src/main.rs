//! The `bench` binary: parse arguments, build the runtime, run, map errors to exit codes.

use std::process::ExitCode;

use bench_cli::{Cli, CliError, Command};
use clap::{CommandFactory, FromArgMatches};

/// mimalloc: per-turn buffers (request bodies, SSE chunks, records) are allocated and freed at
/// a high rate on the worker threads; glibc's allocator cost ~10% of the client's CPU in
/// profiles and gave large bodies fresh pages every turn (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // No transparent huge pages: memory mimalloc freed and purged came back as a fresh 2 MiB
    // page to zero on its next use, over and over (27% of a 20,000-turn run's CPU was the
    // kernel's clear_page; docs/performance.md). mimalloc is built not to ask for them
    // (`no_thp`); this also covers a kernel that gives them unasked (THP `always`).
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
    // A panic's message may quote a secret (a URL, a header): it is printed scrubbed, as
    // every other line is, and with a backtrace only when RUST_BACKTRACE asks for one.
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let what = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(a non-text payload)");
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let mut text = format!("bench: internal error{at}: {what} (a bug: please report it)\n");
        let trace = std::backtrace::Backtrace::capture();
        if trace.status() == std::backtrace::BacktraceStatus::Captured {
            text.push_str(&format!("{trace}\n"));
        }
        eprint!("{}", bench_cli::secrets::scrub(&text));
    }));
    if let Some(m) = std::env::var_os("BENCH_TEST_PANIC") {
        // For the test that a panic's message is scrubbed (crates/bench-cli/tests/it/secrets.rs).
        panic!("{}", m.to_string_lossy());
    }
    let command = Cli::command();
    // The flags given on the command line: they override a --spec file's settings, and a
    // resumed run refuses configuration flags. Argument groups, which clap also lists, are
    // left out.
    let ids: Vec<(String, Vec<String>)> = command
        .get_subcommands()
        .map(|c| {
            let args = c.get_arguments().map(|a| a.get_id().to_string()).collect();
            (c.get_name().to_owned(), args)
        })
        .collect();
    let matches = command.get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let given: Vec<String> = matches
        .subcommand()
        .and_then(|(name, m)| {
            let (_, args) = ids.iter().find(|(n, _)| n == name)?;
            Some(
                args.iter()
                    .filter(|id| {
                        use clap::parser::ValueSource::{CommandLine, EnvVariable};
                        matches!(m.value_source(id), Some(CommandLine | EnvVariable))
                    })
                    .cloned()
                    .collect(),
            )
        })
        .unwrap_or_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BENCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(|| bench_cli::secrets::Stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Sim(args) => bench_cli::run_sim(args).await,
            Command::Probe(args) => bench_cli::run_probe(args).await,
            Command::Run(args) => bench_cli::run_run(*args, &given).await,
            Command::Plan(args) => bench_cli::run_plan(args),
            Command::Import(args) => bench_cli::run_import(args),
            Command::Journeys(args) => bench_cli::run_journeys(*args, &given).await,
            Command::Status(args) => bench_cli::run_status(args),
            Command::Merge(args) => bench_cli::run_merge(args),
            Command::Serve(args) => bench_cli::run_serve(args).await,
            Command::Report(args) => bench_cli::run_report(args),
            Command::Compare(args) => bench_cli::run_compare(*args),
            Command::Sweep(args) => bench_cli::run_sweep(*args, &given).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", bench_cli::secrets::scrub(&e.to_string()));
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
