//! Scraping the server's `/metrics` during `bench run`: a baseline before the first turn, one
//! scrape every `--metrics-interval`, a final one after the last turn; each appended to the run
//! directory's `scrapes.jsonl`. A failing or non-Prometheus endpoint disables scraping with one
//! warning (and a `scrape.disabled` event); the run goes on.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bench_runner::{Observer, Phase, RunEvent};
use bench_telemetry::Scrape;
use bench_transport::Client;
use tokio::sync::watch;

/// Tracks the run's phase for the scrapes' `phase` field.
#[derive(Debug, Default)]
pub struct PhaseTracker(AtomicU8);

impl PhaseTracker {
    fn name(&self) -> &'static str {
        match self.0.load(Ordering::Relaxed) {
            1 => "warmup",
            2 => "measuring",
            3 => "draining",
            _ => "baseline",
        }
    }
}

impl Observer for PhaseTracker {
    fn on_event(&self, e: &RunEvent<'_>) {
        if let RunEvent::Phase(p) = e {
            let v = match p {
                Phase::Warmup => 1,
                Phase::Measuring => 2,
                Phase::Draining => 3,
            };
            self.0.store(v, Ordering::Relaxed);
        }
    }
}

/// A running scrape loop.
pub struct Scraper {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<Scrape>>,
}

impl Scraper {
    /// Takes the baseline scrape now, then scrapes every `interval` in the background.
    /// `on_disabled` is called once if scraping stops working. `t_s` counts from now plus
    /// `origin_s` (a resumed run's clock continues its predecessor's).
    pub async fn start(
        client: Client,
        interval: Duration,
        origin_s: f64,
        dir: &Path,
        phase: Arc<PhaseTracker>,
        on_disabled: impl Fn(&str) + Send + 'static,
    ) -> Scraper {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("scrapes.jsonl"));
        let start = Instant::now();
        let (stop, mut stopped) = watch::channel(false);
        let mut state = Loop {
            client,
            file: file.ok(),
            start,
            origin_s,
            scrapes: Vec::new(),
            disabled: false,
            on_disabled: Box::new(on_disabled),
        };
        state.scrape("baseline").await;
        let task = tokio::spawn(async move {
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !state.disabled {
                tokio::select! {
                    _ = tick.tick() => state.scrape(phase.name()).await,
                    _ = stopped.changed() => break,
                }
            }
            if !state.disabled {
                state.scrape("final").await;
            }
            state.scrapes
        });
        Scraper { stop, task }
    }

    /// Takes the final scrape and returns them all.
    pub async fn finish(self) -> Vec<Scrape> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

struct Loop {
    client: Client,
    file: Option<std::fs::File>,
    start: Instant,
    origin_s: f64,
    scrapes: Vec<Scrape>,
    disabled: bool,
    on_disabled: Box<dyn Fn(&str) + Send>,
}

impl Loop {
    async fn scrape(&mut self, phase: &str) {
        if self.disabled {
            return;
        }
        let t_s = self.origin_s + self.start.elapsed().as_secs_f64();
        let utc = crate::output::utc_now();
        let snapshot = match self
            .client
            .get("/metrics", Some(Duration::from_secs(10)))
            .await
        {
            Ok(r) if r.status.is_success() => {
                bench_telemetry::parse(&String::from_utf8_lossy(&r.body)).map_err(|e| e.to_string())
            }
            Ok(r) => Err(format!("GET /metrics answered HTTP {}", r.status.as_u16())),
            Err(e) => Err(format!("GET /metrics: {e}")),
        };
        match snapshot {
            Ok(snapshot) => {
                let s = Scrape {
                    t_s,
                    utc,
                    phase: phase.to_owned(),
                    snapshot,
                };
                if let (Some(f), Ok(line)) = (self.file.as_mut(), serde_json::to_string(&s)) {
                    let _ = f.write_all(format!("{line}\n").as_bytes());
                }
                self.scrapes.push(s);
            }
            Err(reason) => {
                self.disabled = true;
                (self.on_disabled)(&reason);
            }
        }
    }
}
