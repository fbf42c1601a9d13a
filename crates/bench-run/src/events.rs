//! The run directory's writers: `events.jsonl` (lifecycle events, also broadcast to a
//! [`crate::RunHandle`]'s subscribers) and `turns.jsonl`/`sessions.jsonl` ([`RunDirWriter`]).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bench_rundir::{EventLine, LifecycleEvent, Secrets, SessionRecord, TurnRecord, files, jsonl};
use bench_runner::{Observer, RunEvent};
use tokio::sync::broadcast;

/// How many events a subscriber may fall behind before it is told it lagged.
pub const EVENT_BUFFER: usize = 1024;

/// Appends lifecycle events to `events.jsonl` (or, [`Events::in_memory`], to no file), keeps
/// this process's ones (a few a minute: phases, a heartbeat every 5 s) and broadcasts them.
#[derive(Debug)]
pub struct Events {
    file: Mutex<(Option<File>, Vec<EventLine>)>,
    tx: broadcast::Sender<EventLine>,
    secrets: Secrets,
}

impl Events {
    /// Opens (or appends to) `dir/events.jsonl`.
    pub fn open(dir: &Path) -> Result<Events, jsonl::IoError> {
        let (tx, _) = broadcast::channel(EVENT_BUFFER);
        Ok(Events {
            file: Mutex::new((
                Some(jsonl::open_append(&dir.join(files::EVENTS))?),
                Vec::new(),
            )),
            tx,
            secrets: Secrets::default(),
        })
    }

    /// Events kept and broadcast but written nowhere (a run without a run directory).
    pub fn in_memory() -> Events {
        let (tx, _) = broadcast::channel(EVENT_BUFFER);
        Events {
            file: Mutex::new((None, Vec::new())),
            tx,
            secrets: Secrets::default(),
        }
    }

    /// The same, replacing every secret in an event's texts by `***` before it is written or
    /// sent.
    pub fn with_secrets(mut self, secrets: Secrets) -> Events {
        self.secrets = secrets;
        self
    }

    /// Writes `event` stamped now, then broadcasts it.
    pub fn emit(&self, mut event: LifecycleEvent) {
        event.scrub(&self.secrets);
        let line = EventLine {
            event,
            utc: bench_report::export::utc_now(),
        };
        // Written, kept and sent under one lock: a subscriber taking the history gets each
        // event once, either in it or from the channel.
        if let Ok(mut g) = self.file.lock() {
            if let Some(f) = &mut g.0 {
                let _ = jsonl::append(f, &line);
            }
            g.1.push(line.clone());
            let _ = self.tx.send(line);
        }
    }

    /// A new subscriber (it sees events emitted from now on).
    pub fn subscribe(&self) -> EventStream {
        EventStream(self.tx.subscribe())
    }

    /// The events this process emitted so far and a subscriber to the rest: no event is
    /// missing between the two or in both.
    pub fn subscribe_with_history(&self) -> (Vec<EventLine>, EventStream) {
        match self.file.lock() {
            Ok(g) => (g.1.clone(), EventStream(self.tx.subscribe())),
            Err(_) => (Vec::new(), EventStream(self.tx.subscribe())),
        }
    }
}

/// A subscription to a run's lifecycle events, as they are emitted. (A tokio broadcast
/// receiver inside, kept private: public signatures carry no tokio types.)
#[derive(Debug)]
pub struct EventStream(broadcast::Receiver<EventLine>);

/// What [`EventStream::recv`] got.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // moved once per event, never stored
pub enum Received {
    /// The next event.
    Event(EventLine),
    /// This many events were missed: the subscriber fell [`EVENT_BUFFER`] behind
    /// (`events.jsonl` has them all).
    Missed(u64),
    /// The run will emit no more.
    Ended,
}

impl EventStream {
    /// A stream that has ended already (for what emits no lifecycle events of its own, such
    /// as a sweep, whose points each have theirs).
    pub fn ended() -> EventStream {
        let (tx, rx) = broadcast::channel(1);
        drop(tx);
        EventStream(rx)
    }

    /// The next event, waiting for it.
    pub async fn recv(&mut self) -> Received {
        match self.0.recv().await {
            Ok(e) => Received::Event(e),
            Err(broadcast::error::RecvError::Lagged(n)) => Received::Missed(n),
            Err(broadcast::error::RecvError::Closed) => Received::Ended,
        }
    }

    /// The next event if one is waiting (`None`: none yet).
    pub fn try_recv(&mut self) -> Option<Received> {
        match self.0.try_recv() {
            Ok(e) => Some(Received::Event(e)),
            Err(broadcast::error::TryRecvError::Lagged(n)) => Some(Received::Missed(n)),
            Err(broadcast::error::TryRecvError::Closed) => Some(Received::Ended),
            Err(broadcast::error::TryRecvError::Empty) => None,
        }
    }
}

impl Observer for Events {
    fn on_event(&self, e: &RunEvent<'_>) {
        if let RunEvent::Phase(p) = e {
            self.emit(LifecycleEvent::Phase { phase: *p });
        }
    }
}

/// Writes `turns.jsonl` and `sessions.jsonl`, one line per record.
///
/// A turn record is handed to the OS (an unbuffered write) before the engine goes on: a crash
/// loses no turn that ended. Session records are gathered and written together, at most
/// [`SESSION_FLUSH_EVERY`] after the first of them ended (or once [`SESSION_BATCH_BYTES`]
/// wait), and at [`RunDirWriter::flush`] or drop: a crash may lose the last of them, and a
/// session without its record is one [`crate::resume()`] plays again, as one that was in flight.
/// (One `write` a turn fewer: the system call and the file system's write path were ~5% of a
/// short turn's client CPU.)
#[derive(Debug)]
pub struct RunDirWriter {
    /// The file with the buffer its lines are built in.
    turns: Mutex<(File, Vec<u8>)>,
    sessions: Arc<Mutex<Pending>>,
    dir: PathBuf,
    errors: Arc<Mutex<Vec<String>>>,
    secrets: Secrets,
}

/// How long a session record may wait in memory before it is written.
pub const SESSION_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Waiting session records written at once when they reach this size.
pub const SESSION_BATCH_BYTES: usize = 32 * 1024;

/// Session records not written yet: whole lines, the first of them waiting since `since`.
#[derive(Debug)]
struct Pending {
    file: File,
    lines: Vec<u8>,
    since: Option<Instant>,
}

impl Pending {
    /// Writes the waiting lines (one `write` call), noting a failure in `errors`.
    fn write_out(&mut self, path: &Path, errors: &Mutex<Vec<String>>) {
        self.since = None;
        if self.lines.is_empty() {
            return;
        }
        let r = self.file.write_all(&self.lines);
        self.lines.clear();
        if let Err(e) = r {
            note_error(errors, path, &e);
        }
    }
}

fn note_error(errors: &Mutex<Vec<String>>, path: &Path, e: &dyn std::fmt::Display) {
    if let Ok(mut errs) = errors.lock() {
        errs.push(format!("{}: {e}", path.display()));
    }
}

impl RunDirWriter {
    /// Creates (or appends to) the record files in `dir`.
    pub fn create(dir: &Path) -> Result<RunDirWriter, jsonl::IoError> {
        std::fs::create_dir_all(dir).map_err(|source| jsonl::IoError {
            path: dir.to_owned(),
            source,
        })?;
        let sessions = Arc::new(Mutex::new(Pending {
            file: jsonl::open_append(&dir.join(files::SESSIONS))?,
            lines: Vec::new(),
            since: None,
        }));
        let errors = Arc::new(Mutex::new(Vec::new()));
        spawn_session_flusher(
            Arc::downgrade(&sessions),
            dir.join(files::SESSIONS),
            errors.clone(),
        );
        Ok(RunDirWriter {
            turns: Mutex::new((jsonl::open_append(&dir.join(files::TURNS))?, Vec::new())),
            sessions,
            dir: dir.to_path_buf(),
            errors,
            secrets: Secrets::default(),
        })
    }

    /// The same, replacing every secret in a record's error texts by `***` (only failed turns
    /// are looked at).
    pub fn with_secrets(mut self, secrets: Secrets) -> RunDirWriter {
        self.secrets = secrets;
        self
    }

    /// Write failures so far (records that could not be written).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Writes the session records still waiting (the run's end; also done on drop).
    pub fn flush(&self) {
        if let Ok(mut p) = self.sessions.lock() {
            p.write_out(&self.dir.join(files::SESSIONS), &self.errors);
        }
    }

    fn write_turn(&self, value: &TurnRecord) {
        let r = match self.turns.lock() {
            Ok(mut f) => {
                let (f, buf) = &mut *f;
                jsonl::append_with(f, buf, value)
            }
            Err(_) => Ok(()),
        };
        if let Err(e) = r {
            note_error(&self.errors, &self.dir.join(files::TURNS), &e);
        }
    }

    fn write_session(&self, value: &SessionRecord) {
        let Ok(mut p) = self.sessions.lock() else {
            return;
        };
        let len = p.lines.len();
        match serde_json::to_writer(&mut p.lines, value) {
            Ok(()) => p.lines.push(b'\n'),
            Err(e) => {
                p.lines.truncate(len);
                note_error(&self.errors, &self.dir.join(files::SESSIONS), &e);
                return;
            }
        }
        p.since.get_or_insert_with(Instant::now);
        if p.lines.len() >= SESSION_BATCH_BYTES {
            p.write_out(&self.dir.join(files::SESSIONS), &self.errors);
        }
    }
}

impl Drop for RunDirWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A thread that writes waiting session records once they have waited
/// [`SESSION_FLUSH_EVERY`]; it ends with the writer.
fn spawn_session_flusher(
    sessions: std::sync::Weak<Mutex<Pending>>,
    path: PathBuf,
    errors: Arc<Mutex<Vec<String>>>,
) {
    let flusher = move || {
        let tick = SESSION_FLUSH_EVERY / 4;
        loop {
            std::thread::sleep(tick);
            let Some(sessions) = sessions.upgrade() else {
                return;
            };
            let Ok(mut p) = sessions.lock() else {
                return;
            };
            if p.since.is_some_and(|t| t.elapsed() >= SESSION_FLUSH_EVERY) {
                p.write_out(&path, &errors);
            }
        }
    };
    // Without the thread (none could be started) records wait for the next batch or the end.
    let _ = std::thread::Builder::new()
        .name("bench-sessions-flush".into())
        .spawn(flusher);
}

impl Observer for RunDirWriter {
    fn on_event(&self, event: &RunEvent<'_>) {
        match event {
            RunEvent::TurnFinished(t) if t.leaks(&self.secrets) => {
                let mut t = (*t).clone();
                t.scrub(&self.secrets);
                self.write_turn(&t);
            }
            RunEvent::TurnFinished(t) => self.write_turn(t),
            RunEvent::SessionFinished(s) => self.write_session(s),
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    /// The next event waiting in `rx`.
    fn next(rx: &mut EventStream) -> LifecycleEvent {
        match rx.try_recv() {
            Some(Received::Event(e)) => e.event,
            other => panic!("no event waiting: {other:?}"),
        }
    }

    use super::*;
    use bench_rundir::{Phase, SessionRecord, SessionStatus, StopBy};

    /// A completed one-turn session's record.
    fn session(id: &str) -> SessionRecord {
        SessionRecord {
            session_id: id.into(),
            replay: 0,
            status: SessionStatus::Completed,
            turns_played: 1,
            turns_planned: 1,
            output_tokens: 3,
            busy_s: 0.5,
            marker: None,
            warmup: false,
            start_s: 0.0,
            end_s: 0.5,
            superseded: false,
        }
    }

    #[test]
    fn records_and_events_land_one_per_line_and_read_back_typed() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-writer-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let writer = RunDirWriter::create(dir).unwrap();
        let events = Events::open(dir).unwrap();
        let mut rx = events.subscribe();
        let s = session("a");
        for _ in 0..3 {
            writer.on_event(&RunEvent::SessionFinished(&s));
        }
        writer.flush();
        events.on_event(&RunEvent::Phase(Phase::Measuring));
        events.emit(LifecycleEvent::Stopped {
            by: StopBy::Completed,
            reason: "done".into(),
        });
        assert!(writer.errors().is_empty());
        let back = jsonl::read::<SessionRecord>(&dir.join(files::SESSIONS)).unwrap();
        assert_eq!(back.records, vec![s; 3]);
        let ev = jsonl::read::<EventLine>(&dir.join(files::EVENTS)).unwrap();
        let kinds: Vec<&LifecycleEvent> = ev.records.iter().map(|e| &e.event).collect();
        assert_eq!(
            kinds,
            [
                &LifecycleEvent::Phase {
                    phase: Phase::Measuring
                },
                &LifecycleEvent::Stopped {
                    by: StopBy::Completed,
                    reason: "done".into()
                }
            ]
        );
        // A subscriber gets the same typed events; a late one gets them as history.
        assert_eq!(next(&mut rx), *kinds[0]);
        assert_eq!(next(&mut rx), *kinds[1]);
        let (history, mut late) = events.subscribe_with_history();
        assert_eq!(history, ev.records);
        assert!(late.try_recv().is_none(), "nothing twice");
        events.emit(LifecycleEvent::Other);
        assert_eq!(next(&mut late), LifecycleEvent::Other);
    }

    #[test]
    fn a_secret_in_a_record_or_an_event_is_written_and_sent_as_stars() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-scrub-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let secrets = Secrets::default().with("sk-SECRET-0001");
        let writer = RunDirWriter::create(dir)
            .unwrap()
            .with_secrets(secrets.clone());
        let events = Events::open(dir).unwrap().with_secrets(secrets);
        let mut rx = events.subscribe();
        let line = r#"{"session_id":"s","replay":0,"turn_index":0,"status":"error",
            "error_kind":"http_status","error":"http_status: HTTP 401: bad key sk-SECRET-0001",
            "ttft_ms":null,"e2e_ms":null,"tpot_ms":null,"chunk_gaps_ms":[],"input_tokens":5,
            "input_tokens_source":"client","output_tokens":null,"output_tokens_source":null,
            "cached_tokens":null,"cached_device_tokens":null,"cached_host_tokens":null,
            "max_output_tokens":8,"recorded_output_tokens":null,"active_at_dispatch":1,
            "due_s":0.0,"sent_s":0.0,"first_token_s":null,"end_s":0.1,"sent_utc":"","end_utc":"",
            "worker":null,"redials":0,"warmup":false}"#;
        let t: bench_rundir::TurnRecord = serde_json::from_str(line).unwrap();
        writer.on_event(&RunEvent::TurnFinished(&t));
        events.emit(LifecycleEvent::ScrapeDisabled {
            reason: "GET /metrics: sk-SECRET-0001".into(),
        });
        let turns = std::fs::read_to_string(dir.join(files::TURNS)).unwrap();
        let written = std::fs::read_to_string(dir.join(files::EVENTS)).unwrap();
        for text in [&turns, &written] {
            assert!(!text.contains("SECRET") && text.contains("***"), "{text}");
        }
        assert_eq!(
            next(&mut rx),
            LifecycleEvent::ScrapeDisabled {
                reason: "GET /metrics: ***".into()
            }
        );
    }

    #[test]
    fn session_records_wait_briefly_and_are_never_lost_at_the_end() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-sessions-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let path = dir.join(files::SESSIONS);
        let ids = |path: &Path| -> Vec<String> {
            jsonl::read::<SessionRecord>(path)
                .unwrap()
                .records
                .into_iter()
                .map(|r| r.session_id)
                .collect()
        };
        // The flusher writes a waiting record by itself (no later record, no flush).
        let writer = RunDirWriter::create(dir).unwrap();
        writer.on_event(&RunEvent::SessionFinished(&session("a")));
        let deadline = Instant::now() + Duration::from_secs(30);
        while ids(&path).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(ids(&path), ["a"], "written by the flusher");
        // Dropping the writer writes what waits.
        writer.on_event(&RunEvent::SessionFinished(&session("b")));
        writer.on_event(&RunEvent::SessionFinished(&session("c")));
        drop(writer);
        assert_eq!(ids(&path), ["a", "b", "c"]);
        // A batch that reaches its size is written at once, in order, whole lines only.
        let writer = RunDirWriter::create(dir).unwrap();
        let n = SESSION_BATCH_BYTES / 150 + 2;
        for i in 0..n {
            writer.on_event(&RunEvent::SessionFinished(&session(&format!("s{i}"))));
        }
        let written = ids(&path);
        assert!(written.len() > 3, "a full batch waits no longer");
        assert!(std::fs::read(&path).unwrap().ends_with(b"\n"));
        let expected: Vec<String> = (0..written.len() - 3).map(|i| format!("s{i}")).collect();
        assert_eq!(written[3..], expected[..], "whole records, in order");
        writer.flush();
        let all = ids(&path);
        assert_eq!(all.len(), 3 + n);
        assert_eq!(all[3..].first().map(String::as_str), Some("s0"));
        assert_eq!(all.last().cloned(), Some(format!("s{}", n - 1)));
    }
}
