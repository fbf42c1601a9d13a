//! A sub-millisecond timer for the `Fixed` latency mode.
//!
//! tokio's timer wheel has a resolution of 1 ms and rounds every deadline up, and its driver
//! parks with millisecond timeouts: a 50 ms sleep fires 50–52 ms later, which is the error a
//! fixed-latency check of a client would then measure. Here one OS thread keeps the deadlines
//! in a heap and waits on a condition variable (futex timeouts are accurate to tens of
//! microseconds), then completes the waiting task's oneshot: the task runs within about
//! 0.1 ms of its deadline, whatever the load on the runtime's timer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use tokio::sync::oneshot;

struct Entry {
    at: Instant,
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

#[derive(Default)]
struct State {
    heap: BinaryHeap<Reverse<Entry>>,
    seq: u64,
}

struct Timer {
    state: Mutex<State>,
    wake: Condvar,
}

fn timer() -> Option<&'static Arc<Timer>> {
    static TIMER: OnceLock<Option<Arc<Timer>>> = OnceLock::new();
    TIMER
        .get_or_init(|| {
            let t = Arc::new(Timer {
                state: Mutex::new(State::default()),
                wake: Condvar::new(),
            });
            let t2 = t.clone();
            std::thread::Builder::new()
                .name("bench-sim-timer".into())
                .spawn(move || run(&t2))
                .ok()
                .map(|_| t)
        })
        .as_ref()
}

fn run(t: &Timer) {
    let mut st = t.state.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        let now = Instant::now();
        while st.heap.peek().is_some_and(|Reverse(e)| e.at <= now) {
            if let Some(Reverse(e)) = st.heap.pop() {
                let _ = e.tx.send(());
            }
        }
        st = match st.heap.peek().map(|Reverse(e)| e.at) {
            Some(at) => {
                t.wake
                    .wait_timeout(st, at.saturating_duration_since(now))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
            }
            None => t.wake.wait(st).unwrap_or_else(PoisonError::into_inner),
        };
    }
}

/// Completes at `at` (to within about 0.1 ms), or at once if it has passed. Falls back to
/// tokio's timer if the timer thread could not be started.
pub(crate) async fn sleep_until(at: tokio::time::Instant) {
    let at = at.into_std();
    if at <= Instant::now() {
        return;
    }
    let Some(t) = timer() else {
        tokio::time::sleep_until(at.into()).await;
        return;
    };
    let (tx, rx) = oneshot::channel();
    {
        let mut st = t.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.heap.peek().is_none_or(|Reverse(e)| at < e.at);
        st.heap.push(Reverse(Entry { at, seq, tx }));
        if earliest {
            t.wake.notify_one();
        }
    }
    let _ = rx.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn wakes_in_deadline_order_and_never_early() -> Result<(), tokio::task::JoinError> {
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::new();
        for ms in [30u64, 10, 20, 10, 0] {
            tasks.push(tokio::spawn(async move {
                let at = start + Duration::from_millis(ms);
                sleep_until(at).await;
                let now = tokio::time::Instant::now();
                (ms, now >= at, now.saturating_duration_since(at))
            }));
        }
        for t in tasks {
            let (ms, on_time, late) = t.await?;
            assert!(on_time, "{ms} ms: woke early");
            // Lateness is not asserted tightly: the machine is shared.
            assert!(late < Duration::from_millis(500), "{ms} ms: {late:?} late");
        }
        Ok(())
    }
}
