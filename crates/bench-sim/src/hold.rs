//! Hold/release: a switch that stops generation requests before their first output token, so a
//! test can act on a request that is certainly in flight (`POST /sim/hold`, `POST /sim/release`,
//! `GET /sim/held`).
//!
//! The state lives in one `watch` channel: every change (hold, release, a request entering or
//! leaving the hold) notifies the long-polls of `GET /sim/held` and the held requests. A held
//! request waits for the release *epoch* to move rather than for the switch to turn off, so a
//! release followed at once by a new hold still lets every request held before it go.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::wait_shutdown;

/// A held streamed request writes an SSE comment this often, so that a client that went away is
/// noticed (hyper may only see a closed socket when it writes to it).
pub(crate) const HEARTBEAT: Duration = Duration::from_millis(100);
/// The SSE comment a held streamed request writes every [`HEARTBEAT`].
pub(crate) const HEARTBEAT_COMMENT: &[u8] = b": held\n\n";
/// `GET /sim/held` waits this long without `timeout_ms`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest `timeout_ms` honoured.
const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// The hold switch and the requests it holds.
pub(crate) struct Hold {
    state: watch::Sender<HoldState>,
}

/// What [`Hold`] guards.
pub(crate) struct HoldState {
    on: bool,
    /// Moved by every release: a request held under an older epoch proceeds.
    epoch: u64,
    next_id: u64,
    /// The requests held now, in the order they were held.
    held: BTreeMap<u64, HeldRequest>,
    /// Holds ever started (a request held twice counts twice).
    held_total: u64,
}

struct HeldRequest {
    endpoint: &'static str,
    session: Option<String>,
    since: Instant,
}

/// One held request's place in the hold; dropping it (the request ended while held) takes the
/// request out of the held set.
pub(crate) struct Ticket {
    hold: Arc<Hold>,
    id: u64,
    epoch: u64,
    /// When the request was held.
    pub(crate) since: Instant,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let id = self.id;
        self.hold
            .state
            .send_if_modified(|s| s.held.remove(&id).is_some());
    }
}

impl Ticket {
    /// Resolves when a release lets this request go (`false` if the hold is gone, which only
    /// happens when the server is).
    pub(crate) async fn released(&self) -> bool {
        let mut rx = self.hold.state.subscribe();
        let epoch = self.epoch;
        rx.wait_for(|s| s.epoch != epoch).await.is_ok()
    }
}

impl Hold {
    /// A hold switch, on from the start when `on`.
    pub(crate) fn new(on: bool) -> Self {
        Self {
            state: watch::Sender::new(HoldState {
                on,
                epoch: 0,
                next_id: 0,
                held: BTreeMap::new(),
                held_total: 0,
            }),
        }
    }

    /// Whether requests arriving now are held.
    pub(crate) fn is_on(&self) -> bool {
        self.state.borrow().on
    }

    /// Turns hold mode on; returns the number of requests held now.
    pub(crate) fn hold(&self) -> usize {
        let mut n = 0;
        self.state.send_if_modified(|s| {
            n = s.held.len();
            !std::mem::replace(&mut s.on, true)
        });
        n
    }

    /// Turns hold mode off and lets every held request go; returns how many were held.
    pub(crate) fn release(&self) -> usize {
        let mut n = 0;
        self.state.send_modify(|s| {
            s.on = false;
            s.epoch += 1;
            n = s.held.len();
            s.held.clear();
        });
        n
    }

    /// The number of requests held now.
    pub(crate) fn held(&self) -> usize {
        self.state.borrow().held.len()
    }

    /// Holds a request when hold mode is on (`None`: it goes on at once).
    pub(crate) fn enter(
        self: &Arc<Self>,
        endpoint: &'static str,
        session: Option<&str>,
    ) -> Option<Ticket> {
        let mut ticket = None;
        self.state.send_if_modified(|s| {
            if !s.on {
                return false;
            }
            let id = s.next_id;
            s.next_id += 1;
            s.held_total += 1;
            let since = Instant::now();
            s.held.insert(
                id,
                HeldRequest {
                    endpoint,
                    session: session.map(str::to_owned),
                    since,
                },
            );
            ticket = Some(Ticket {
                hold: Arc::clone(self),
                id,
                epoch: s.epoch,
                since,
            });
            true
        });
        ticket
    }

    /// `GET /sim/held`: waits until the number held satisfies `q` (or its timeout passes, or
    /// the server shuts down); the status (`200`, `408` or `503`) and the JSON body.
    pub(crate) async fn wait(
        &self,
        q: &HeldQuery,
        mut shutdown: watch::Receiver<bool>,
    ) -> (StatusCode, Vec<u8>) {
        let mut rx = self.state.subscribe();
        // The body is rendered from the very state that satisfied the bounds.
        let met = async {
            rx.wait_for(|s| q.accepts(s.held.len()))
                .await
                .map(|s| s.json())
        };
        let answer = tokio::select! {
            r = tokio::time::timeout(q.timeout, met) => match r {
                Ok(Ok(body)) => Some((StatusCode::OK, body)),
                Ok(Err(_)) | Err(_) => None,
            },
            () = wait_shutdown(&mut shutdown) => {
                Some((StatusCode::SERVICE_UNAVAILABLE, self.state.borrow().json()))
            }
        };
        answer.unwrap_or_else(|| (StatusCode::REQUEST_TIMEOUT, self.state.borrow().json()))
    }
}

impl HoldState {
    /// The `GET /sim/held` body.
    fn json(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Body<'a> {
            hold: bool,
            held: usize,
            held_total: u64,
            requests: Vec<Entry<'a>>,
        }
        #[derive(Serialize)]
        struct Entry<'a> {
            endpoint: &'static str,
            session: Option<&'a str>,
            held_ms: f64,
        }
        let now = Instant::now();
        let body = Body {
            hold: self.on,
            held: self.held.len(),
            held_total: self.held_total,
            requests: self
                .held
                .values()
                .map(|r| Entry {
                    endpoint: r.endpoint,
                    session: r.session.as_deref(),
                    held_ms: round_ms(now.saturating_duration_since(r.since)),
                })
                .collect(),
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }
}

/// Milliseconds, rounded to the microsecond.
pub(crate) fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// The query of `GET /sim/held`.
#[derive(Debug, PartialEq)]
pub(crate) struct HeldQuery {
    at_least: Option<usize>,
    at_most: Option<usize>,
    timeout: Duration,
}

impl HeldQuery {
    /// Parses `at_least=N&at_most=N&timeout_ms=T` (each optional); the error is one line.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut q = HeldQuery {
            at_least: None,
            at_most: None,
            timeout: DEFAULT_TIMEOUT,
        };
        const KEYS: [&str; 3] = ["at_least", "at_most", "timeout_ms"];
        let mut seen = [false; KEYS.len()];
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let Some(k) = KEYS.iter().position(|k| *k == key) else {
                return Err(format!(
                    "unknown query parameter {key:?} (expected at_least, at_most, timeout_ms)"
                ));
            };
            if std::mem::replace(&mut seen[k], true) {
                return Err(format!("query parameter {key} given twice"));
            }
            let n: u64 = value
                .parse()
                .map_err(|_| format!("{key} must be a non-negative integer, got {value:?}"))?;
            let count = usize::try_from(n).unwrap_or(usize::MAX);
            match k {
                0 => q.at_least = Some(count),
                1 => q.at_most = Some(count),
                _ => q.timeout = Duration::from_millis(n).min(MAX_TIMEOUT),
            }
        }
        if let (Some(lo), Some(hi)) = (q.at_least, q.at_most) {
            if lo > hi {
                return Err(format!(
                    "at_least ({lo}) is greater than at_most ({hi}): no count satisfies both"
                ));
            }
        }
        Ok(q)
    }

    fn accepts(&self, held: usize) -> bool {
        self.at_least.is_none_or(|lo| held >= lo) && self.at_most.is_none_or(|hi| held <= hi)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn query_parses_and_refuses() {
        let q = HeldQuery::parse(Some("at_least=2&timeout_ms=700000")).unwrap();
        assert_eq!(q.at_least, Some(2));
        assert_eq!(q.at_most, None);
        assert_eq!(q.timeout, MAX_TIMEOUT);
        assert!(q.accepts(2) && !q.accepts(1));
        let q = HeldQuery::parse(None).unwrap();
        assert_eq!(q.timeout, DEFAULT_TIMEOUT);
        assert!(q.accepts(0) && q.accepts(7));
        assert!(HeldQuery::parse(Some("at_most=0")).unwrap().accepts(0));
        for bad in [
            "at_least=x",
            "at_least=-1",
            "at_least",
            "wait=1",
            "at_most=1&at_most=2",
            "at_least=3&at_most=1",
        ] {
            let e = HeldQuery::parse(Some(bad)).unwrap_err();
            assert!(!e.contains('\n'), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn release_lets_go_even_when_held_again() {
        let hold = Arc::new(Hold::new(true));
        let t = hold.enter("/v1/completions", Some("s")).unwrap();
        assert_eq!(hold.held(), 1);
        assert_eq!(hold.release(), 1);
        assert_eq!(hold.hold(), 0);
        // Held again at once: the request held before the release still goes.
        assert!(t.released().await);
        let again = hold.enter("/v1/completions", None);
        assert!(again.is_some());
        drop(t);
        assert_eq!(hold.held(), 1);
        assert_eq!(hold.state.borrow().held_total, 2);
        drop(again);
        assert_eq!(hold.held(), 0);
    }

    #[test]
    fn a_dropped_ticket_leaves_the_held_set() {
        let hold = Arc::new(Hold::new(false));
        assert!(hold.enter("/v1/messages", None).is_none());
        hold.hold();
        let t = hold.enter("/v1/messages", None).unwrap();
        assert_eq!(hold.held(), 1);
        drop(t);
        assert_eq!(hold.held(), 0);
        let body: serde_json::Value = serde_json::from_slice(&hold.state.borrow().json()).unwrap();
        assert_eq!(body["hold"], true);
        assert_eq!(body["held_total"], 1);
        assert_eq!(body["requests"], serde_json::json!([]));
    }
}
