//! The two runners. Plain `async` over `futures`: no runtime is named here (only the CLI
//! builds one), and time is read from `std::time::Instant`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::journey::{Ctx, Env, Failure, Journey, Kind};

/// Stops a run between operations (Ctrl-C): operations in flight finish, teardown runs.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A fresh token.
    pub fn new() -> Cancel {
        Cancel::default()
    }
    /// Asks runs to stop starting operations.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// Whether [`Cancel::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// How one run of a journey went: its samples and failures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// How it was run.
    pub mode: Option<Kind>,
    /// Operations in flight at most (1 for latency runs).
    pub concurrency: u32,
    /// Timed operations asked for (after clamping).
    pub operations: u32,
    /// Latency of each successful timed operation, ms, in completion order.
    pub latencies_ms: Vec<f64>,
    /// Failed timed operations by reason (`HTTP 404`, `timeout`, `connect`, `other: …`).
    pub failures: BTreeMap<String, u64>,
    /// One example of each failure reason (its detail), for the console.
    pub failure_examples: BTreeMap<String, String>,
    /// Latency: wall time of the timed loop. Throughput: first dispatch to last completion. s.
    pub wall_s: f64,
    /// Stopped early by a [`Cancel`].
    pub cancelled: bool,
    /// `setup` failed: nothing was timed.
    pub setup_failure: Option<String>,
    /// What the setup found for the report ([`Journey::notes`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: BTreeMap<String, String>,
}

/// What a runner tells its observer about each timed operation: its latency in ms, or why it
/// failed. Called as each operation completes, on the runner's task: keep it quick.
pub(crate) type OpObserver<'a> = &'a (dyn Fn(Result<f64, &Failure>) + Sync);

impl RunResult {
    fn record(
        &mut self,
        started: Instant,
        r: Result<Option<Duration>, Failure>,
        observe: Option<OpObserver<'_>>,
    ) {
        match r {
            Ok(took) => {
                let d = took.unwrap_or_else(|| started.elapsed());
                let ms = d.as_secs_f64() * 1000.0;
                self.latencies_ms.push(ms);
                if let Some(o) = observe {
                    o(Ok(ms));
                }
            }
            Err(f) => {
                if let Some(o) = observe {
                    o(Err(&f));
                }
                *self.failures.entry(f.reason.clone()).or_default() += 1;
                self.failure_examples
                    .entry(f.reason.clone())
                    .or_insert_with(|| f.to_string());
            }
        }
    }

    /// Successful timed operations.
    pub fn n_success(&self) -> u64 {
        self.latencies_ms.len() as u64
    }

    /// Failed timed operations.
    pub fn n_failures(&self) -> u64 {
        self.failures.values().sum()
    }
}

async fn timed(
    j: &dyn Journey,
    env: &Env,
    ctx: &Ctx,
) -> (Instant, Result<Option<Duration>, Failure>) {
    let start = Instant::now();
    let r = j.measure(env, ctx).await;
    (start, r)
}

/// Iterations after the journey's own cap (down, never up).
pub fn clamp_iterations(j: &dyn Journey, iterations: u32) -> u32 {
    j.max_iterations().map_or(iterations, |m| iterations.min(m))
}

/// Latency: setup, `warmup` untimed operations (errors ignored), `iterations` sequential timed
/// operations (clamped by [`Journey::max_iterations`]), teardown — always. The wall time is
/// that of the timed loop.
pub async fn run_latency(
    j: &dyn Journey,
    env: &Env,
    iterations: u32,
    warmup: u32,
    cancel: &Cancel,
) -> RunResult {
    run(j, env, Kind::Latency, iterations, 1, warmup, cancel, None).await
}

/// Throughput: setup, `warmup` untimed operations at the same concurrency (errors ignored),
/// then `requests` timed operations with at most `concurrency` in flight; the wall time runs
/// from the first dispatch to the last completion. Teardown always runs.
pub async fn run_throughput(
    j: &dyn Journey,
    env: &Env,
    requests: u32,
    concurrency: u32,
    warmup: u32,
    cancel: &Cancel,
) -> RunResult {
    run(
        j,
        env,
        Kind::Throughput,
        requests,
        concurrency,
        warmup,
        cancel,
        None,
    )
    .await
}

/// Both runners: with `concurrency` 1 the operations run one after another. `observe` hears
/// of every timed operation (never of warmup ones) as it completes.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    j: &dyn Journey,
    env: &Env,
    mode: Kind,
    requests: u32,
    concurrency: u32,
    warmup: u32,
    cancel: &Cancel,
    observe: Option<OpObserver<'_>>,
) -> RunResult {
    let operations = clamp_iterations(j, requests);
    let c = concurrency.max(1) as usize;
    let mut res = RunResult {
        mode: Some(mode),
        concurrency: c as u32,
        operations,
        ..RunResult::default()
    };
    let ctx = match j.setup(env).await {
        Ok(c) => c,
        Err(f) => {
            res.setup_failure = Some(f.to_string());
            return res;
        }
    };
    res.notes = j.notes(&ctx).into_iter().collect();
    {
        let ctx = &ctx;
        futures_util::stream::iter(0..warmup)
            .take_while(|_| std::future::ready(!cancel.is_cancelled()))
            .map(|_| j.measure(env, ctx))
            .buffer_unordered(c)
            .for_each(|_| std::future::ready(()))
            .await;
        let wall = Instant::now();
        let mut results = futures_util::stream::iter(0..operations)
            .take_while(|_| std::future::ready(!cancel.is_cancelled()))
            .map(|_| timed(j, env, ctx))
            .buffer_unordered(c);
        let mut done = 0u32;
        while let Some((start, r)) = results.next().await {
            res.record(start, r, observe);
            done += 1;
        }
        res.wall_s = wall.elapsed().as_secs_f64();
        res.cancelled = done < operations;
    }
    j.teardown(env, ctx).await;
    res
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::journey::BoxFuture;

    /// Counts calls; fails the operations whose number (from 1) is in `fail`; sleeps `sleep`.
    #[derive(Default)]
    struct Scripted {
        calls: AtomicU32,
        in_flight: AtomicU32,
        max_in_flight: AtomicU32,
        fail: Vec<u32>,
        setup_fails: bool,
        sleep: Duration,
        cap: Option<u32>,
        log: Mutex<Vec<String>>,
    }

    impl Journey for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn description(&self) -> &str {
            "test"
        }
        fn concurrency_safe(&self) -> bool {
            true
        }
        fn max_iterations(&self) -> Option<u32> {
            self.cap
        }
        fn setup<'a>(&'a self, _env: &'a Env) -> BoxFuture<'a, Result<Ctx, Failure>> {
            Box::pin(async move {
                self.log.lock().unwrap().push("setup".into());
                if self.setup_fails {
                    Err(Failure::status(503, "setup"))
                } else {
                    Ok(Box::new(7u32) as Ctx)
                }
            })
        }
        fn measure<'a>(
            &'a self,
            _env: &'a Env,
            ctx: &'a Ctx,
        ) -> BoxFuture<'a, Result<Option<Duration>, Failure>> {
            Box::pin(async move {
                assert_eq!(ctx.downcast_ref::<u32>(), Some(&7));
                let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
                let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_in_flight.fetch_max(now, Ordering::SeqCst);
                if !self.sleep.is_zero() {
                    tokio::time::sleep(self.sleep).await;
                }
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                if self.fail.contains(&n) {
                    Err(Failure::status(500, format!("op {n}")))
                } else {
                    // Operation n reports n ms, so the statistics are known exactly.
                    Ok(Some(Duration::from_millis(u64::from(n))))
                }
            })
        }
        fn teardown<'a>(&'a self, _env: &'a Env, ctx: Ctx) -> BoxFuture<'a, ()> {
            Box::pin(async move {
                assert_eq!(ctx.downcast_ref::<u32>(), Some(&7));
                self.log.lock().unwrap().push("teardown".into());
            })
        }
    }

    fn env() -> Env {
        Env::new(
            bench_transport::Client::new(bench_transport::ClientConfig::new("http://127.0.0.1:9"))
                .unwrap(),
        )
    }

    #[tokio::test]
    async fn latency_excludes_warmup_counts_failures_and_always_tears_down() {
        // Calls 1-3 are warmup (call 2 fails: ignored); timed calls are 4..=13, call 5 fails.
        let j = Scripted {
            fail: vec![2, 5],
            ..Default::default()
        };
        let r = run_latency(&j, &env(), 10, 3, &Cancel::new()).await;
        assert_eq!(j.calls.load(Ordering::SeqCst), 13);
        assert_eq!(r.n_success(), 9);
        assert_eq!(r.failures.get("HTTP 500"), Some(&1));
        let mut want: Vec<f64> = (4..=13).filter(|n| *n != 5).map(f64::from).collect();
        want.sort_by(f64::total_cmp);
        let mut got = r.latencies_ms.clone();
        got.sort_by(f64::total_cmp);
        assert_eq!(got, want, "warmup samples never reach the result");
        assert_eq!(*j.log.lock().unwrap(), ["setup", "teardown"]);
        assert_eq!(r.mode, Some(Kind::Latency));
        assert_eq!(r.concurrency, 1);
    }

    #[tokio::test]
    async fn the_suite_reports_every_timed_operation_and_no_warmup_one() {
        // Per run: 2 warmup calls, then 4 timed ones; call 2 (warmup) and call 6 (timed) fail.
        let j: Arc<dyn Journey> = Arc::new(Scripted {
            fail: vec![2, 6],
            ..Default::default()
        });
        let cfg = crate::SuiteConfig {
            iterations: 4,
            warmup: 2,
            runs: 2,
            ..crate::SuiteConfig::default()
        };
        let seen = Mutex::new(Vec::new());
        let mut rows = Vec::new();
        let out = crate::run_suite_observed(
            &[j],
            &env(),
            &cfg,
            &Cancel::new(),
            |_, row| rows.push(row.run),
            &|op| {
                seen.lock().unwrap().push((
                    op.journey.to_owned(),
                    op.run,
                    op.latency_ms(),
                    op.failure_reason().map(str::to_owned),
                ))
            },
        )
        .await;
        let ok = |run, ms: f64| ("scripted".to_owned(), run, Some(ms), None);
        assert_eq!(
            *seen.lock().unwrap(),
            [
                ok(1, 3.0),
                ok(1, 4.0),
                ok(1, 5.0),
                ("scripted".to_owned(), 1, None, Some("HTTP 500".to_owned())),
                ok(2, 9.0),
                ok(2, 10.0),
                ok(2, 11.0),
                ok(2, 12.0),
            ]
        );
        assert_eq!(rows, [1, 2]);
        assert_eq!(out["scripted"].summary.n_success, 7);
    }

    #[tokio::test]
    async fn max_iterations_clamps_down_never_up() {
        let j = Scripted {
            cap: Some(5),
            ..Default::default()
        };
        let r = run_latency(&j, &env(), 50, 0, &Cancel::new()).await;
        assert_eq!((r.operations, r.n_success()), (5, 5));
        let r = run_latency(&j, &env(), 3, 0, &Cancel::new()).await;
        assert_eq!((r.operations, r.n_success()), (3, 3));
    }

    #[tokio::test]
    async fn a_failed_setup_times_nothing() {
        let j = Scripted {
            setup_fails: true,
            ..Default::default()
        };
        let r = run_latency(&j, &env(), 5, 1, &Cancel::new()).await;
        assert_eq!(j.calls.load(Ordering::SeqCst), 0);
        assert_eq!(r.setup_failure.as_deref(), Some("HTTP 503: setup"));
        // Nothing to tear down: setup produced no context.
        assert_eq!(*j.log.lock().unwrap(), ["setup"]);
    }

    #[tokio::test]
    async fn cancel_stops_new_operations_and_still_tears_down() {
        let j = Scripted::default();
        let c = Cancel::new();
        c.cancel();
        let r = run_latency(&j, &env(), 5, 0, &c).await;
        assert!(r.cancelled);
        assert_eq!(r.n_success(), 0);
        assert_eq!(*j.log.lock().unwrap(), ["setup", "teardown"]);
        let r = run_throughput(&j, &env(), 5, 2, 0, &c).await;
        assert!(r.cancelled);
        assert_eq!(
            *j.log.lock().unwrap(),
            ["setup", "teardown", "setup", "teardown"]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn throughput_keeps_c_in_flight_and_times_first_dispatch_to_last_completion() {
        // 12 operations of 40 ms, at most 4 at once: three waves, about 120 ms of wall time
        // (never less; far less than the 480 ms one at a time would take).
        let j = Scripted {
            sleep: Duration::from_millis(40),
            fail: vec![3],
            ..Default::default()
        };
        let r = run_throughput(&j, &env(), 12, 4, 4, &Cancel::new()).await;
        assert_eq!(j.calls.load(Ordering::SeqCst), 16, "4 warmup + 12 timed");
        assert_eq!(j.max_in_flight.load(Ordering::SeqCst), 4);
        assert_eq!(r.n_success() + r.n_failures(), 12);
        assert_eq!(r.n_failures(), 0, "call 3 was a warmup call");
        assert!(r.wall_s >= 0.120, "{}", r.wall_s);
        assert!(r.wall_s < 0.400, "{}", r.wall_s);
        assert_eq!(r.mode, Some(Kind::Throughput));
        assert_eq!(*j.log.lock().unwrap(), ["setup", "teardown"]);
    }
}
