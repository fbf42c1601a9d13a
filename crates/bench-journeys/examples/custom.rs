//! A journey defined in code, timed by both runners against an in-process server (the
//! embedded simulator), with the report printed as the CLI would.
//!
//! `cargo run -p bench-journeys --example custom`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bench_journeys::{
    BoxFuture, Cancel, Ctx, Env, Failure, Journey, SuiteConfig, run_latency, run_suite,
    run_throughput,
};
use bench_transport::{Client, ClientConfig};

/// `GET /health`, counting the answers it saw (the context shared by concurrent operations).
struct Health;

impl Journey for Health {
    fn name(&self) -> &str {
        "health"
    }
    fn description(&self) -> &str {
        "GET /health"
    }
    fn concurrency_safe(&self) -> bool {
        true
    }
    fn setup<'a>(&'a self, _env: &'a Env) -> BoxFuture<'a, Result<Ctx, Failure>> {
        Box::pin(async { Ok(Box::new(AtomicU64::new(0)) as Ctx) })
    }
    fn measure<'a>(
        &'a self,
        env: &'a Env,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<Option<Duration>, Failure>> {
        Box::pin(async move {
            let r = env.client.get("/health", None).await?;
            if !r.status.is_success() {
                return Err(Failure::status(r.status.as_u16(), "GET /health"));
            }
            if let Some(n) = ctx.downcast_ref::<AtomicU64>() {
                n.fetch_add(1, Ordering::Relaxed);
            }
            Ok(None) // the runner's clock is the sample
        })
    }
    fn teardown<'a>(&'a self, _env: &'a Env, ctx: Ctx) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(n) = ctx.downcast_ref::<AtomicU64>() {
                println!("teardown: {} answers seen", n.load(Ordering::Relaxed));
            }
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sim = bench_sim::SimServer::start(bench_sim::SimConfig::default()).await?;
    let env = Env::new(Client::new(ClientConfig::new(sim.base_url()))?);
    let cancel = Cancel::new();

    // The runners directly: 100 sequential operations after 10 untimed ones...
    let lat = run_latency(&Health, &env, 100, 10, &cancel).await;
    println!(
        "latency: {} ok, {} failed",
        lat.n_success(),
        lat.n_failures()
    );
    // ...and 400 with at most 16 in flight.
    let thr = run_throughput(&Health, &env, 400, 16, 10, &cancel).await;
    println!(
        "throughput: {:.0} req/s",
        thr.n_success() as f64 / thr.wall_s.max(1e-9)
    );

    // Or as a suite with repeated runs and the report the CLI prints.
    let journeys: Vec<Arc<dyn Journey>> = vec![Arc::new(Health)];
    let cfg = SuiteConfig {
        runs: 2,
        ..SuiteConfig::default()
    };
    let results = run_suite(&journeys, &env, &cfg, &cancel, |_, _| {}).await;
    let report = bench_journeys::suite::report(
        results,
        serde_json::Value::Null,
        None,
        serde_json::Value::Null,
    );
    print!("{}", report.console());
    sim.shutdown().await;
    Ok(())
}
