//! `bench serve`: the control plane (runs API, event stream, Prometheus, dashboard).

use std::net::SocketAddr;
use std::path::PathBuf;

use bench_control::{ServeConfig, ServeError};
use clap::Args;

use crate::CliError;

/// `bench serve` flags.
#[derive(Debug, Clone, Args)]
pub struct ServeCmd {
    /// Where to listen. `:0` picks a free port (the line on stderr says which). A
    /// non-loopback address needs --token.
    #[arg(long, default_value = bench_control::DEFAULT_BIND)]
    pub bind: SocketAddr,
    /// Required as `Authorization: Bearer TOKEN` on every API route and /metrics
    /// (`?access_token=` for EventSource). Prefer the environment variable: a flag shows in `ps`.
    #[arg(long, env = "BENCH_SERVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where run directories go (`DIR/<id>`); finished runs found there are listed after a
    /// restart.
    #[arg(long, value_name = "DIR", default_value = "runs")]
    pub runs_dir: PathBuf,
}

/// Runs `bench serve` until Ctrl-C or SIGTERM (the active run is cancelled and finalized).
pub async fn run_serve(args: ServeCmd) -> Result<(), CliError> {
    let (bind, token, runs_dir) = (args.bind, args.token, args.runs_dir.clone());
    let mut own = bench_run::secrets::Secrets::default();
    if let Some(t) = &token {
        own.add(t);
    }
    crate::secrets::init(&[], &[], &own);
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
