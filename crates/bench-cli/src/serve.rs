//! `bench serve`: the control plane (runs API, event stream, Prometheus, dashboard).

use bench_args::ServeCmd;
use bench_control::{ServeConfig, ServeError};

use crate::CliError;

/// Runs `bench serve` until Ctrl-C or SIGTERM (the active run is cancelled and finalized).
pub async fn run_serve(args: ServeCmd) -> Result<(), CliError> {
    let (bind, token, runs_dir) = (args.bind, args.token, args.runs_dir.clone());
    let mut own = bench_run::secrets::Secrets::default();
    if let Some(t) = &token {
        own.add(t);
    }
    crate::secrets::init(&[], &[], None, &own);
    let cfg = ServeConfig {
        bind,
        token,
        runs_dir,
        ..ServeConfig::default()
    };
    // Taken over before the address is printed (a SIGTERM right after it stops cleanly).
    let mut signals = crate::run::Signals::new();
    let server = bench_control::Server::bind(cfg)
        .await
        .map_err(|e| match e {
            ServeError::Invalid(m) => CliError::Usage(m),
            e => CliError::Failed(e.to_string()),
        })?;
    eprintln!(
        "bench serve: listening on http://{} (runs in {})",
        server.local_addr(),
        args.runs_dir.display()
    );
    server
        .run(async {
            signals.next().await;
            eprintln!("bench serve: stopping: the active run (if any) is cancelled and finalized");
        })
        .await;
    Ok(())
}
