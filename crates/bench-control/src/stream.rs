//! A run's event log: every event gets the next id and is kept; subscribers read it at their
//! own pace, so the history and the live feed are one sequence (nothing missing or doubled
//! between them) and a slow subscriber never holds up the run.
//!
//! [`EventLog::push`] serializes the event once (with its id) under a short lock and wakes the
//! subscribers; [`EventLog::stream`] is the `text/event-stream` body of one subscriber: the
//! events after a given id, then the live ones, a keepalive comment while idle, ending after the
//! terminal event. The log keeps the latest [`HISTORY_CAP`] events; a subscriber that falls
//! behind the oldest one kept is told (`stream.lagged`) and continues from there.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use serde::Serialize;
use tokio::sync::watch;

/// Events kept per run (at a `progress` event a second and at most 20 `turn.completed` a
/// second, hours of a run).
pub const HISTORY_CAP: usize = 100_000;

/// How long a stream stays silent before a keepalive comment.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// How many events one body chunk carries at most.
const CHUNK_EVENTS: usize = 256;

/// One event as subscribers get it.
#[derive(Debug)]
pub struct Entry {
    /// Its id (from 1, strictly increasing).
    pub id: u64,
    /// The event type (`progress`, `run.completed`, …).
    pub event: String,
    /// Its JSON (compact, one line, with `id` and `event` first).
    pub json: String,
    /// The last event of the run.
    pub terminal: bool,
}

#[derive(Debug, Default)]
struct Inner {
    events: VecDeque<Arc<Entry>>,
    next_id: u64,
    closed: bool,
    /// `stream.jsonl` in the run directory: every event, one line each.
    file: Option<std::fs::File>,
}

/// What a line of `stream.jsonl` is read back as (the rest of it is served as written).
#[derive(serde::Deserialize)]
struct Head {
    id: u64,
    event: String,
}

/// The terminal event types.
#[derive(serde::Deserialize)]
enum Terminal {
    #[serde(rename = "run.completed")]
    Completed,
    #[serde(rename = "run.failed")]
    Failed,
    #[serde(rename = "run.cancelled")]
    Cancelled,
}

/// `event` is a terminal event's type (`run.completed`, `run.failed`, `run.cancelled`).
pub(crate) fn is_terminal(event: &str) -> bool {
    serde_json::from_value::<Terminal>(serde_json::Value::String(event.to_owned())).is_ok()
}

/// A run's events, in order, with ids.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<Inner>,
    /// Replaced by `***` in every event pushed.
    secrets: bench_rundir::Secrets,
    cap: usize,
    /// The id of the latest event; `true` once the terminal one is in.
    tx: watch::Sender<(u64, bool)>,
}

impl Default for EventLog {
    fn default() -> Self {
        EventLog::with_cap(HISTORY_CAP)
    }
}

/// What a subscriber gets for one read.
#[derive(Debug, Default)]
pub struct Read {
    /// Events after the id asked for (at most the limit asked for).
    pub entries: Vec<Arc<Entry>>,
    /// Ids that were asked for but are no longer kept (first, last).
    pub lagged: Option<(u64, u64)>,
    /// The terminal event is at or before the last entry returned: nothing follows.
    pub done: bool,
}

impl EventLog {
    /// A log that keeps the latest `cap` events (at least one).
    pub fn with_cap(cap: usize) -> EventLog {
        let (tx, _) = watch::channel((0, false));
        EventLog {
            inner: Mutex::new(Inner {
                next_id: 1,
                ..Inner::default()
            }),
            secrets: bench_rundir::Secrets::default(),
            cap: cap.max(1),
            tx,
        }
    }

    /// The same log, replacing every secret in an event's strings by `***` before it is
    /// kept, written or sent (a run's header values, the environment's API keys).
    pub fn with_secrets(mut self, secrets: bench_rundir::Secrets) -> EventLog {
        self.secrets = secrets;
        self
    }

    /// A log that also appends every event to `path` (`stream.jsonl` in the run directory),
    /// so the stream reads the same after a restart.
    pub fn with_file(path: &std::path::Path) -> std::io::Result<EventLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let log = EventLog::default();
        log.lock().file = Some(file);
        Ok(log)
    }

    /// The log a run left in `path` (closed: nothing follows). A torn or bad line is skipped;
    /// `None` when the file cannot be read or holds no event.
    pub fn read_file(path: &std::path::Path) -> Option<EventLog> {
        let text = std::fs::read_to_string(path).ok()?;
        let log = EventLog::default();
        {
            let mut g = log.lock();
            for line in text.lines() {
                let Ok(head) = serde_json::from_str::<Head>(line) else {
                    continue;
                };
                if g.events.back().is_some_and(|e| e.id >= head.id) {
                    continue;
                }
                g.next_id = head.id + 1;
                g.events.push_back(Arc::new(Entry {
                    id: head.id,
                    terminal: is_terminal(&head.event),
                    event: head.event,
                    json: line.to_owned(),
                }));
            }
            if g.events.is_empty() {
                return None;
            }
            while g.events.len() > log.cap {
                g.events.pop_front();
            }
            g.closed = true;
            log.tx.send_replace((g.next_id - 1, true));
        }
        Some(log)
    }

    /// The terminal event, once it is in.
    pub fn terminal(&self) -> Option<Arc<Entry>> {
        self.lock().events.back().filter(|e| e.terminal).cloned()
    }

    /// The first event kept.
    pub fn first(&self) -> Option<Arc<Entry>> {
        self.lock().events.front().cloned()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the log consistent (pushes are one step).
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `fields` (a JSON object, or anything serializing to one) as event `event`;
    /// returns its id, or `None` once the log is closed (after the terminal event) or when
    /// `fields` is not an object.
    pub fn push(&self, event: &str, fields: &impl Serialize) -> Option<u64> {
        self.push_inner(event, fields, false)
    }

    /// Appends the terminal event and closes the log: later pushes are refused.
    pub fn push_terminal(&self, event: &str, fields: &impl Serialize) -> Option<u64> {
        self.push_inner(event, fields, true)
    }

    fn push_inner(&self, event: &str, fields: &impl Serialize, terminal: bool) -> Option<u64> {
        let serde_json::Value::Object(mut fields) = serde_json::to_value(fields).ok()? else {
            return None;
        };
        if !self.secrets.is_empty() {
            fields.values_mut().for_each(|v| self.secrets.scrub_json(v));
        }
        let mut g = self.lock();
        if g.closed {
            return None;
        }
        let id = g.next_id;
        fields.remove("id");
        fields.remove("event");
        // `id` and `event` first, for people reading the stream.
        let rest = serde_json::Value::Object(fields).to_string();
        let event_json = serde_json::Value::from(event).to_string();
        let json = match rest.strip_prefix('{').filter(|r| *r != "}") {
            Some(r) => format!("{{\"id\":{id},\"event\":{event_json},{r}"),
            None => format!("{{\"id\":{id},\"event\":{event_json}}}"),
        };
        if let Some(f) = g.file.as_mut() {
            use std::io::Write as _;
            if let Err(e) = f.write_all(format!("{json}\n").as_bytes()) {
                // Warned once: the file is left alone from now on.
                g.file = None;
                tracing::warn!(error = %e, "cannot write stream.jsonl; the stream goes on in memory");
            }
        }
        g.next_id += 1;
        g.closed = terminal;
        g.events.push_back(Arc::new(Entry {
            id,
            event: event.to_owned(),
            json,
            terminal,
        }));
        while g.events.len() > self.cap {
            g.events.pop_front();
        }
        // Sent under the lock: a subscriber woken for id N finds N in the log.
        self.tx.send_replace((id, terminal));
        Some(id)
    }

    /// Closes the log without a terminal event (a run this process cannot follow): streams end
    /// after the events in it.
    pub fn close(&self) {
        let mut g = self.lock();
        g.closed = true;
        let last = g.next_id - 1;
        self.tx.send_replace((last, true));
    }

    /// The id of the latest event (0 before the first).
    pub fn last_id(&self) -> u64 {
        self.lock().next_id - 1
    }

    /// The terminal event is in.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// The latest event of type `event`, if any is kept.
    pub fn latest(&self, event: &str) -> Option<Arc<Entry>> {
        self.lock()
            .events
            .iter()
            .rev()
            .find(|e| e.event == event)
            .cloned()
    }

    /// Up to `max` events with ids above `after`.
    pub fn read_after(&self, after: u64, max: usize) -> Read {
        let g = self.lock();
        let first_kept = g.events.front().map_or(g.next_id, |e| e.id);
        let mut read = Read::default();
        let from = if after + 1 < first_kept {
            read.lagged = Some((after + 1, first_kept - 1));
            first_kept
        } else {
            after + 1
        };
        let skip = g.events.partition_point(|e| e.id < from);
        read.entries = g.events.iter().skip(skip).take(max).cloned().collect();
        // Done once the log is closed and this read reaches its end.
        read.done = g.closed
            && read
                .entries
                .last()
                .map_or(skip >= g.events.len(), |e| e.id + 1 == g.next_id);
        read
    }

    /// The `text/event-stream` body of a subscriber that has seen every event up to `after`
    /// (0: none): the history, then the live events, a keepalive comment every `keepalive`
    /// of silence, ending after the terminal event.
    pub fn stream(
        self: Arc<Self>,
        after: u64,
        keepalive: Duration,
    ) -> impl Stream<Item = Bytes> + Send + 'static {
        let rx = self.tx.subscribe();
        let state = Sub {
            log: self,
            after,
            rx,
            done: false,
            first: true,
            keepalive,
        };
        futures_util::stream::unfold(state, |mut s| async move {
            let chunk = s.next_chunk().await?;
            Some((chunk, s))
        })
    }
}

struct Sub {
    log: Arc<EventLog>,
    after: u64,
    rx: watch::Receiver<(u64, bool)>,
    done: bool,
    first: bool,
    keepalive: Duration,
}

impl Sub {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = String::new();
        if self.first {
            // Reconnect quickly after a dropped connection (the browser default is ~3 s).
            out.push_str("retry: 1000\n\n");
            self.first = false;
        }
        loop {
            // Marks the current version seen before reading: a push after the read wakes us.
            self.rx.borrow_and_update();
            let read = self.log.read_after(self.after, CHUNK_EVENTS);
            if let Some((from, to)) = read.lagged {
                let note = serde_json::json!({
                    "event": "stream.lagged",
                    "missed_from": from,
                    "missed_to": to,
                });
                out.push_str(&format!("data: {note}\n\n"));
            }
            for e in &read.entries {
                out.push_str(&format!("id: {}\ndata: {}\n\n", e.id, e.json));
                self.after = e.id;
            }
            if read.done {
                self.done = true;
            }
            if !out.is_empty() {
                return Some(Bytes::from(out));
            }
            match tokio::time::timeout(self.keepalive, self.rx.changed()).await {
                Ok(Ok(())) => continue,
                // The log is gone (cannot happen while we hold it) or silent: say we are here.
                Ok(Err(_)) => return None,
                Err(_) => return Some(Bytes::from_static(b": keepalive\n\n")),
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn ids(text: &str) -> Vec<u64> {
        text.lines()
            .filter_map(|l| l.strip_prefix("id: "))
            .map(|v| v.parse().unwrap())
            .collect()
    }

    #[test]
    fn ids_increase_and_the_terminal_event_closes_the_log() {
        let log = EventLog::default();
        assert_eq!(log.push("a", &serde_json::json!({"x": 1})), Some(1));
        assert_eq!(log.push("b", &serde_json::json!({"id": 99})), Some(2));
        assert_eq!(log.push("bad", &5), None, "not an object");
        assert_eq!(
            log.push_terminal("run.completed", &serde_json::json!({})),
            Some(3)
        );
        assert_eq!(log.push("late", &serde_json::json!({})), None);
        let r = log.read_after(0, 10);
        assert_eq!(r.entries.len(), 3);
        assert!(r.done);
        assert_eq!(r.entries[1].json, r#"{"id":2,"event":"b"}"#);
        assert!(log.read_after(3, 10).done);
        assert!(!log.read_after(1, 1).done);
    }

    #[test]
    fn a_subscriber_behind_the_kept_history_is_told() {
        let log = EventLog::with_cap(3);
        for _ in 0..5 {
            log.push("e", &serde_json::json!({}));
        }
        let r = log.read_after(0, 10);
        assert_eq!(r.lagged, Some((1, 2)));
        assert_eq!(
            r.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        assert_eq!(log.read_after(3, 10).lagged, None);
    }

    #[tokio::test(start_paused = true)]
    async fn keepalive_while_idle_then_the_events_then_the_end() {
        let log = Arc::new(EventLog::default());
        log.push("a", &serde_json::json!({}));
        let mut s = Box::pin(log.clone().stream(0, Duration::from_secs(15)));
        let first = String::from_utf8(s.next().await.unwrap().to_vec()).unwrap();
        assert!(first.starts_with("retry: 1000\n\n"), "{first}");
        assert_eq!(ids(&first), [1]);
        let idle = s.next().await.unwrap();
        assert_eq!(&idle[..], b": keepalive\n\n");
        log.push_terminal("run.completed", &serde_json::json!({}));
        let last = String::from_utf8(s.next().await.unwrap().to_vec()).unwrap();
        assert_eq!(ids(&last), [2]);
        assert!(
            s.next().await.is_none(),
            "the stream ends after the terminal event"
        );
    }
}
