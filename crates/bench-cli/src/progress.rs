//! Run progress on stderr: an [`indicatif`] bar on a terminal, plain heartbeat lines otherwise.
//!
//! The counters are `bench_run`'s [`ProgressCounters`] (the engine's workers bump atomics); a
//! ticker thread reads them on a timer and draws, so a stalled server still shows heartbeats:
//! elapsed time keeps moving while the turn count and the output rate stand still. The line's
//! fields are described in `bench_run::progress`.

use std::io::{IsTerminal, Write as _};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bench_run::ProgressCounters;
use bench_run::progress::{RateWindow, Snapshot, body, line};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the bar is redrawn (its message, position and spinner).
const BAR_REFRESH: Duration = Duration::from_millis(200);

/// The shortest heartbeat interval accepted (shorter ones are raised to it).
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// An indicatif progress bar on stderr (for a terminal).
    Bar,
    /// A plain heartbeat line on stderr every interval (for logs and pipes).
    Lines,
    /// Nothing.
    Off,
}

impl Mode {
    /// [`Mode::Bar`] when stderr is a terminal, else [`Mode::Lines`].
    pub fn auto() -> Mode {
        if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines
        }
    }
}

/// The ticker thread and the channel that stops it.
#[derive(Debug)]
struct Ticker {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

/// Run progress on stderr; call [`Progress::finish`] when the run returns.
#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    ticker: Mutex<Option<Ticker>>,
}

impl Progress {
    /// Starts showing the run whose counters are `counters` (the ticker starts now).
    /// `interval` is the heartbeat period of [`Mode::Lines`] and the window of the output rate.
    pub fn start(counters: Arc<ProgressCounters>, interval: Duration, mode: Mode) -> Progress {
        let interval = interval.max(MIN_INTERVAL);
        let bar = (mode == Mode::Bar).then(|| new_bar(&counters.snapshot(Instant::now())));
        let ticker = match mode {
            Mode::Off => None,
            Mode::Bar | Mode::Lines => {
                let (stop, rx) = mpsc::channel::<()>();
                let c = Arc::clone(&counters);
                let b = bar.clone();
                let spawned = std::thread::Builder::new()
                    .name("bench-progress".into())
                    .spawn(move || tick(&c, b.as_ref(), interval, &rx));
                // Without a thread there is no progress display; the run goes on regardless.
                spawned.ok().map(|thread| Ticker { stop, thread })
            }
        };
        Progress {
            bar,
            ticker: Mutex::new(ticker),
        }
    }

    /// The bar, in [`Mode::Bar`] (lines printed with its `println` go above it).
    pub fn bar(&self) -> Option<&ProgressBar> {
        self.bar.as_ref()
    }

    /// Stops the ticker and clears the bar. Idempotent; also done on drop.
    pub fn finish(&self) {
        let ticker = match self.ticker.lock() {
            Ok(mut t) => t.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(t) = ticker {
            let _ = t.stop.send(());
            let _ = t.thread.join();
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The bar: a proportional bar when the run has a planned total or a deadline, a spinner
/// otherwise; the heartbeat fields are its message.
fn new_bar(first: &Snapshot) -> ProgressBar {
    let (len, template) = match first.fraction() {
        Some(_) => (Some(1000), "{spinner} [{bar:24}] {msg}"),
        None => (None, "{spinner} {msg}"),
    };
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(body(first));
    bar
}

/// The ticker: redraws the bar every [`BAR_REFRESH`], or prints a line every `interval`,
/// until `stop` receives or disconnects.
fn tick(
    c: &ProgressCounters,
    bar: Option<&ProgressBar>,
    interval: Duration,
    stop: &mpsc::Receiver<()>,
) {
    let period = if bar.is_some() {
        BAR_REFRESH.min(interval)
    } else {
        interval
    };
    // Tokens are counted when a turn ends, in bursts: average over at least 10 s so the rate
    // does not swing between 0 and a burst.
    let window = interval.max(Duration::from_secs(10));
    let mut rate = RateWindow::new(window, Instant::now());
    let mut epoch = c.epoch();
    loop {
        match stop.recv_timeout(period) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = Instant::now();
        let e = c.epoch();
        if e != epoch {
            // The counts were zeroed (warmup → measured run): the rate starts over.
            epoch = e;
            rate = RateWindow::new(window, c.start());
        }
        let mut s = c.snapshot(now);
        s.output_tok_s = rate.push(now, c.output_tokens());
        match bar {
            Some(bar) => {
                if let Some(f) = s.fraction() {
                    bar.set_position((f * 1000.0).round() as u64);
                }
                bar.set_message(body(&s));
                bar.tick();
            }
            None => {
                let _ = writeln!(std::io::stderr().lock(), "{}", line(&s));
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_ticker_stops_at_once() {
        // A long interval: finish must not wait for the next tick (compared with the
        // interval, not a wall-clock budget).
        let counters = Arc::new(ProgressCounters::new(None, 4, None));
        let interval = Duration::from_secs(3600);
        let p = Progress::start(counters, interval, Mode::Lines);
        let t = Instant::now();
        p.finish();
        p.finish();
        assert!(t.elapsed() < interval / 100);
        assert!(
            p.ticker.lock().expect("not poisoned").is_none(),
            "the ticker thread was joined"
        );
    }

    #[test]
    fn bar_ticker_draws_and_stops_on_drop() {
        let counters = Arc::new(ProgressCounters::new(Some(10), 4, None));
        let p = Progress::start(counters, Duration::from_secs(5), Mode::Bar);
        std::thread::sleep(BAR_REFRESH * 2);
        let bar = p.bar.clone().expect("a bar in Mode::Bar");
        assert!(bar.message().contains("0/10 turns"), "{}", bar.message());
        drop(p);
        assert!(bar.is_finished(), "dropping the display finishes the bar");
    }
}
