//! Scraping the server's `/metrics` during a run: a baseline before the first turn, one
//! scrape every interval, a final one after the last turn; each appended to `scrapes.jsonl`.
//! A failing or non-Prometheus endpoint disables scraping with one warning (and a
//! `scrape.disabled` event); the run goes on.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use bench_rundir::{Phase, ScrapePhase, files, jsonl};
use bench_runner::{Observer, RunEvent};
use bench_telemetry::Scrape;
use bench_transport::Client;
use tokio::sync::watch;

/// Tracks the run's phase for the scrapes' `phase` field.
#[derive(Debug, Default)]
pub struct PhaseTracker(AtomicU8);

impl PhaseTracker {
    /// The phase now (`None` before the first).
    pub fn get(&self) -> Option<Phase> {
        match self.0.load(Ordering::Relaxed) {
            1 => Some(Phase::Warmup),
            2 => Some(Phase::Measuring),
            3 => Some(Phase::Draining),
            _ => None,
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
#[derive(Debug)]
pub struct Scraper {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<Scrape>>,
}

/// A `--scrape` endpoint: scraped at the same times as the server's `/metrics`, its records
/// marked with its URL.
#[derive(Debug, Clone)]
pub struct ScrapeTarget {
    /// A client of its base URL.
    pub client: Client,
    /// The path it serves its metrics on.
    pub path: String,
    /// Its URL, as records and messages name it.
    pub url: String,
}

impl Scraper {
    /// Takes the baseline scrape now, then scrapes every `interval` in the background.
    /// `on_disabled` is called once if scraping stops working. `t_s` counts from now plus
    /// `origin` (a resumed run's clock continues its predecessor's).
    pub async fn start(
        client: Client,
        interval: Duration,
        origin: Duration,
        dir: &Path,
        phase: Arc<PhaseTracker>,
        on_disabled: impl Fn(&str) + Send + 'static,
    ) -> Scraper {
        Self::start_with(
            Some(client),
            Vec::new(),
            interval,
            origin,
            dir,
            phase,
            on_disabled,
        )
        .await
    }

    /// [`Scraper::start`] for the server's `/metrics` (`server`, when scraped) and each
    /// `--scrape` target, all at the same times; a source that fails is disabled on its own
    /// (`on_disabled` once for each, naming a target by its URL), the others go on.
    pub async fn start_with(
        server: Option<Client>,
        targets: Vec<ScrapeTarget>,
        interval: Duration,
        origin: Duration,
        dir: &Path,
        phase: Arc<PhaseTracker>,
        on_disabled: impl Fn(&str) + Send + 'static,
    ) -> Scraper {
        let (stop, mut stopped) = watch::channel(false);
        let mut sources: Vec<Source> = server
            .map(|client| Source {
                client,
                path: "/metrics".to_owned(),
                target: None,
                disabled: false,
            })
            .into_iter()
            .collect();
        sources.extend(targets.into_iter().map(|t| Source {
            client: t.client,
            path: t.path,
            target: Some(t.url),
            disabled: false,
        }));
        let mut state = Loop {
            sources,
            file: jsonl::open_append(&dir.join(files::SCRAPES)).ok(),
            start: Instant::now(),
            origin,
            scrapes: Vec::new(),
            on_disabled: Box::new(on_disabled),
        };
        state.scrape(ScrapePhase::Baseline).await;
        let task = tokio::spawn(async move {
            let mut tick =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while state.sources.iter().any(|s| !s.disabled) {
                tokio::select! {
                    _ = tick.tick() => state.scrape(ScrapePhase::during(phase.get())).await,
                    _ = stopped.changed() => break,
                }
            }
            state.scrape(ScrapePhase::Final).await;
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

/// One endpoint the loop scrapes.
struct Source {
    client: Client,
    path: String,
    /// `None`: the server's own `/metrics`.
    target: Option<String>,
    disabled: bool,
}

struct Loop {
    sources: Vec<Source>,
    file: Option<std::fs::File>,
    start: Instant,
    origin: Duration,
    scrapes: Vec<Scrape>,
    on_disabled: Box<dyn Fn(&str) + Send>,
}

impl Source {
    /// One scrape of this source, or why it is to be disabled.
    async fn get(&self) -> Result<bench_telemetry::Snapshot, String> {
        let what = match &self.target {
            None => "GET /metrics".to_owned(),
            Some(url) => format!("--scrape {url}"),
        };
        match self
            .client
            .get(&self.path, Some(Duration::from_secs(10)))
            .await
        {
            Ok(r) if r.status.is_success() => {
                bench_telemetry::parse(&String::from_utf8_lossy(&r.body))
                    .map_err(|e| format!("{what}: {e}"))
            }
            Ok(r) if r.status == http::StatusCode::NOT_FOUND && self.target.is_none() => Err(
                "the server has no /metrics (HTTP 404): the report shows the client's figures \
                 only, without the server's (KV usage, queue, its prefix-cache counters); \
                 --no-metrics says so up front"
                    .to_owned(),
            ),
            Ok(r) if self.target.is_none() => {
                Err(format!("GET /metrics answered HTTP {}", r.status.as_u16()))
            }
            Ok(r) => Err(format!("{what} answered HTTP {}", r.status.as_u16())),
            Err(e) => Err(format!("{what}: {e}")),
        }
    }
}

impl Loop {
    async fn scrape(&mut self, phase: ScrapePhase) {
        let t_s = (self.origin + self.start.elapsed()).as_secs_f64();
        let utc = bench_report::export::utc_now();
        let live: Vec<usize> = (0..self.sources.len())
            .filter(|&i| !self.sources[i].disabled)
            .collect();
        // Every source at once: a slow exporter does not delay the server's scrape.
        let got = futures_util::future::join_all(live.iter().map(|&i| self.sources[i].get())).await;
        for (i, snapshot) in live.into_iter().zip(got) {
            match snapshot {
                Ok(snapshot) => {
                    let s = Scrape {
                        t_s,
                        utc: utc.clone(),
                        phase,
                        snapshot,
                        target: self.sources[i].target.clone(),
                    };
                    if let Some(f) = self.file.as_mut() {
                        let _ = jsonl::append(f, &s);
                    }
                    self.scrapes.push(s);
                }
                Err(reason) => {
                    self.sources[i].disabled = true;
                    (self.on_disabled)(&reason);
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A fresh temporary directory, removed when the returned guard drops.
    fn dir(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("bench-run-scrape-{name}-"))
            .tempdir()
            .unwrap()
    }

    fn phases(dir: &Path) -> Vec<ScrapePhase> {
        jsonl::read::<Scrape>(&dir.join(files::SCRAPES))
            .unwrap()
            .records
            .into_iter()
            .map(|s| s.phase)
            .collect()
    }

    /// Waits (up to 30 s) until a scrape of phase `p` is in the file.
    async fn until_scraped(dir: &Path, p: ScrapePhase) {
        let t0 = Instant::now();
        while !phases(dir).contains(&p) {
            assert!(t0.elapsed() < Duration::from_secs(30), "no {p:?} scrape");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn each_scrape_carries_the_phase_it_was_taken_in() {
        let cfg = bench_sim::SimConfig {
            bind: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            mode: bench_sim::LatencyMode::Instant,
            ..bench_sim::SimConfig::default()
        };
        let sim = bench_sim::SimServer::start(cfg).await.unwrap();
        let client = Client::new(bench_transport::ClientConfig::new(sim.base_url())).unwrap();
        let tmp = dir("phases");
        let d = tmp.path();
        let tracker = Arc::new(PhaseTracker::default());
        let s = Scraper::start(
            client,
            Duration::from_millis(20),
            Duration::from_secs(100),
            d,
            tracker.clone(),
            |r| panic!("disabled: {r}"),
        )
        .await;
        assert_eq!(
            phases(d),
            [ScrapePhase::Baseline],
            "the baseline comes first"
        );
        for (p, want) in [
            (Phase::Warmup, ScrapePhase::Warmup),
            (Phase::Measuring, ScrapePhase::Measuring),
            (Phase::Draining, ScrapePhase::Draining),
        ] {
            tracker.on_event(&RunEvent::Phase(p));
            until_scraped(d, want).await;
        }
        let all = s.finish().await;
        sim.shutdown().await;
        let seen: Vec<ScrapePhase> = all.iter().map(|s| s.phase).collect();
        assert_eq!(seen, phases(d), "what is returned is what was written");
        assert_eq!(seen.last(), Some(&ScrapePhase::Final));
        let mut order = seen.clone();
        order.dedup();
        assert_eq!(
            order,
            [
                ScrapePhase::Baseline,
                ScrapePhase::Warmup,
                ScrapePhase::Measuring,
                ScrapePhase::Draining,
                ScrapePhase::Final
            ]
        );
        assert!(all[0].t_s >= 100.0, "t_s continues the origin");
        assert!(all.windows(2).all(|w| w[0].t_s <= w[1].t_s));
    }

    #[tokio::test]
    async fn a_dead_endpoint_disables_scraping_once_and_takes_no_final() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", l.local_addr().unwrap());
        drop(l);
        let client = Client::new(bench_transport::ClientConfig::new(url)).unwrap();
        let tmp = dir("dead");
        let d = tmp.path();
        let reasons = Arc::new(Mutex::new(Vec::new()));
        let r = reasons.clone();
        let s = Scraper::start(
            client,
            Duration::from_millis(10),
            Duration::ZERO,
            d,
            Arc::new(PhaseTracker::default()),
            move |why| r.lock().unwrap().push(why.to_owned()),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(s.finish().await.is_empty());
        let reasons = reasons.lock().unwrap();
        assert_eq!(reasons.len(), 1, "{reasons:?}");
        assert!(
            reasons[0].starts_with("GET /metrics: connect"),
            "{reasons:?}"
        );
        assert!(phases(d).is_empty());
    }
}
