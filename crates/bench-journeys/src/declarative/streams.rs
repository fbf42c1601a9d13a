//! Server-sent event streams held open by declarative steps: a reader task per stream parses
//! events as they arrive (stamping each with its arrival time) and hands them to `wait` steps
//! through a bounded channel, so a stream nobody waits on applies back-pressure instead of
//! growing memory.

use std::time::{Duration, Instant};

use bench_transport::StreamingResponse;
use bench_transport::sse::{SseItem, SseParser};
use tokio::sync::mpsc;

use crate::journey::Failure;

/// Events read ahead of the `wait` steps at most.
const BUFFERED_EVENTS: usize = 256;
/// Bytes one event may take before it is dispatched (a server that never ends its event is
/// a failure, not unbounded memory).
pub(crate) const MAX_EVENT_BYTES: usize = 16 << 20;

/// One dispatched event.
#[derive(Debug)]
pub(crate) struct Event {
    /// The `event:` field, else the `type` of the JSON data, else empty.
    pub name: String,
    /// The data lines joined.
    pub data: String,
    /// The data as JSON, when it is.
    pub json: Option<serde_json::Value>,
    /// When the chunk that completed it arrived.
    pub at: Instant,
}

/// What the reader hands on.
#[derive(Debug)]
pub(crate) enum Item {
    Event(Event),
    /// The body ended.
    End,
    /// Reading failed.
    Failed(Failure),
}

/// An open stream: its reader task (aborted when this is dropped) and its events.
#[derive(Debug)]
pub(crate) struct OpenStream {
    rx: mpsc::Receiver<Item>,
    task: tokio::task::JoinHandle<()>,
    ended: bool,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        // Dropping the task drops the response, which closes its connection.
        self.task.abort();
    }
}

impl OpenStream {
    /// Starts reading `resp` on a task of its own.
    pub(crate) fn start(resp: StreamingResponse) -> OpenStream {
        let (tx, rx) = mpsc::channel(BUFFERED_EVENTS);
        let task = tokio::spawn(read(resp, tx));
        OpenStream {
            rx,
            task,
            ended: false,
        }
    }

    /// The next item, or `None` once `deadline` passed. After the end (or a failure) every
    /// call says so again.
    pub(crate) async fn next(&mut self, deadline: Instant) -> Option<Item> {
        if self.ended {
            return Some(Item::End);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, self.rx.recv()).await {
            Ok(Some(item)) => {
                if !matches!(item, Item::Event(_)) {
                    self.ended = true;
                }
                Some(item)
            }
            Ok(None) => {
                self.ended = true;
                Some(Item::End)
            }
            Err(_) => None,
        }
    }
}

fn name_of(event: Option<&str>, json: Option<&serde_json::Value>) -> String {
    match event {
        Some(e) if !e.is_empty() => e.to_owned(),
        _ => json
            .and_then(|j| j.get("type"))
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_owned(),
    }
}

async fn read(mut resp: StreamingResponse, tx: mpsc::Sender<Item>) {
    let mut parser = SseParser::new();
    let mut undispatched = 0usize;
    loop {
        let chunk = match resp.chunk().await {
            None => {
                let _ = tx.send(Item::End).await;
                return;
            }
            Some(Err(e)) => {
                let _ = tx.send(Item::Failed(e.into())).await;
                return;
            }
            Some(Ok(c)) => c,
        };
        let at = Instant::now();
        let mut events = Vec::new();
        parser.feed(&chunk, |item| {
            if let SseItem::Event(ev) = item {
                let json = serde_json::from_str::<serde_json::Value>(&ev.data).ok();
                events.push(Event {
                    name: name_of(ev.event.as_deref(), json.as_ref()),
                    data: ev.data.into_owned(),
                    json,
                    at,
                });
            }
        });
        if events.is_empty() {
            undispatched += chunk.len();
            if undispatched > MAX_EVENT_BYTES {
                let f = Failure::other(format!(
                    "an event of the stream is larger than {} MiB",
                    MAX_EVENT_BYTES >> 20
                ));
                let _ = tx.send(Item::Failed(f)).await;
                return;
            }
        } else {
            undispatched = 0;
        }
        for ev in events {
            if tx.send(Item::Event(ev)).await.is_err() {
                return;
            }
        }
    }
}

/// How long a failed stream's body is read for its error message at most.
pub(crate) const ERROR_BODY_WAIT: Duration = Duration::from_secs(2);

/// The start of a (failed) streaming response's body, for the failure's detail.
pub(crate) async fn body_start(resp: &mut StreamingResponse) -> Vec<u8> {
    let mut out = Vec::new();
    let read = async {
        while out.len() < 200 {
            match resp.chunk().await {
                Some(Ok(c)) => out.extend_from_slice(&c),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_BODY_WAIT, read).await;
    out
}
