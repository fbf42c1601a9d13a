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
/// Records are gathered in memory and written in batches, one `write` per file: at most
/// [`RECORD_FLUSH_EVERY`] after the first of them waits, once [`RECORD_BATCH_BYTES`] wait, at
/// [`RunDirWriter::flush`] and on drop, and (turn records) before any session's later turn is
/// sent ([`RunEvent::TurnSent`] with `turn_index` > 0). So a turn's record reaches the OS
/// before that session's next turn, as before, and a session's record never before its turns'
/// (turn lines are written first). A crash may lose the records of the last ~100 ms: a session
/// without its record is one [`crate::resume()`] plays again from its first turn, as one that
/// was in flight. (The `write` per record was ~13% of a short turn's client CPU.)
#[derive(Debug)]
pub struct RunDirWriter {
    pending: Arc<Mutex<Pending>>,
    errors: Arc<Mutex<Vec<String>>>,
    secrets: Secrets,
}

/// How long a record may wait in memory before it is written.
pub const RECORD_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Waiting records are written at once when either file's lines reach this size.
pub const RECORD_BATCH_BYTES: usize = 32 * 1024;

/// One record file: whole lines not written yet.
#[derive(Debug)]
struct Lines {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
}

impl Lines {
    fn open(path: PathBuf) -> Result<Lines, jsonl::IoError> {
        Ok(Lines {
            file: jsonl::open_append(&path)?,
            path,
            buf: Vec::new(),
        })
    }

    /// Writes the waiting lines (one `write` call), noting a failure in `errors`.
    /// Appends a line written by `write` and its newline; a line `write` fails is dropped
    /// whole and noted. True when the line was added.
    fn line(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> serde_json::Result<()>,
        errors: &Mutex<Vec<String>>,
    ) -> bool {
        let start = self.buf.len();
        match write(&mut self.buf) {
            Ok(()) => {
                self.buf.push(b'\n');
                true
            }
            Err(e) => {
                self.buf.truncate(start);
                note_error(errors, &self.path, &e);
                false
            }
        }
    }

    fn write_out(&mut self, errors: &Mutex<Vec<String>>) {
        if self.buf.is_empty() {
            return;
        }
        let r = self.file.write_all(&self.buf);
        self.buf.clear();
        if let Err(e) = r {
            note_error(errors, &self.path, &e);
        }
    }
}

/// Records not written yet, the first of them waiting since `since`.
#[derive(Debug)]
struct Pending {
    turns: Lines,
    sessions: Lines,
    since: Option<Instant>,
}

impl Pending {
    /// Writes the waiting lines: turns first, so no session record precedes its turns'.
    fn write_out(&mut self, errors: &Mutex<Vec<String>>) {
        self.since = None;
        self.turns.write_out(errors);
        self.sessions.write_out(errors);
    }

    /// After a record was added: starts its wait, or writes the batch once it is full.
    fn added(&mut self, errors: &Mutex<Vec<String>>) {
        self.since.get_or_insert_with(Instant::now);
        if self.turns.buf.len() >= RECORD_BATCH_BYTES
            || self.sessions.buf.len() >= RECORD_BATCH_BYTES
        {
            self.write_out(errors);
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
        RunDirWriter::create_with(dir, true)
    }

    /// [`RunDirWriter::create`], with or without the thread that writes waiting records after
    /// [`RECORD_FLUSH_EVERY`] (without it they wait for a full batch, a later turn, or the end).
    fn create_with(dir: &Path, flusher: bool) -> Result<RunDirWriter, jsonl::IoError> {
        std::fs::create_dir_all(dir).map_err(|source| jsonl::IoError {
            path: dir.to_owned(),
            source,
        })?;
        let pending = Arc::new(Mutex::new(Pending {
            turns: Lines::open(dir.join(files::TURNS))?,
            sessions: Lines::open(dir.join(files::SESSIONS))?,
            since: None,
        }));
        let errors = Arc::new(Mutex::new(Vec::new()));
        if flusher {
            spawn_flusher(Arc::downgrade(&pending), errors.clone());
        }
        Ok(RunDirWriter {
            pending,
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

    /// Writes the records still waiting (the run's end; also done on drop).
    pub fn flush(&self) {
        if let Ok(mut p) = self.pending.lock() {
            p.write_out(&self.errors);
        }
    }

    fn write_turn(&self, value: &TurnRecord) {
        if let Ok(mut p) = self.pending.lock() {
            // `serde_json`'s bytes, its keys written as literals.
            let r = p.turns.line(|buf| value.write_json(buf), &self.errors);
            if r {
                p.added(&self.errors);
            }
        }
    }

    fn write_session(&self, value: &SessionRecord) {
        if let Ok(mut p) = self.pending.lock() {
            let r = p.sessions.line(|buf| value.write_json(buf), &self.errors);
            if r {
                p.added(&self.errors);
            }
        }
    }

    /// A session's later turn is about to be sent: the turn records waiting go first.
    fn turn_sent(&self) {
        if let Ok(mut p) = self.pending.lock() {
            if !p.turns.buf.is_empty() {
                p.write_out(&self.errors);
            }
        }
    }
}

impl Drop for RunDirWriter {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A thread that writes waiting records once they have waited [`RECORD_FLUSH_EVERY`]; it ends
/// with the writer.
fn spawn_flusher(pending: std::sync::Weak<Mutex<Pending>>, errors: Arc<Mutex<Vec<String>>>) {
    let flusher = move || {
        let tick = RECORD_FLUSH_EVERY / 4;
        loop {
            std::thread::sleep(tick);
            let Some(pending) = pending.upgrade() else {
                return;
            };
            let Ok(mut p) = pending.lock() else {
                return;
            };
            if p.since.is_some_and(|t| t.elapsed() >= RECORD_FLUSH_EVERY) {
                p.write_out(&errors);
            }
        }
    };
    // Without the thread (none could be started) records wait for the next batch, a later
    // turn, or the end.
    let _ = std::thread::Builder::new()
        .name("bench-records-flush".into())
        .spawn(flusher);
}

impl Observer for RunDirWriter {
    fn on_event(&self, event: &RunEvent<'_>) {
        match event {
            RunEvent::TurnSent { turn_index, .. } if *turn_index > 0 => self.turn_sent(),
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
        writer.flush();
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

    /// An ok turn record of session `id`.
    fn turn(id: &str, index: u32) -> TurnRecord {
        let line = format!(
            r#"{{"session_id":"{id}","replay":0,"turn_index":{index},"status":"ok",
            "error_kind":null,"error":null,"ttft_ms":1.0,"e2e_ms":2.0,"tpot_ms":null,
            "chunk_gaps_ms":[],"input_tokens":5,"input_tokens_source":"server",
            "output_tokens":1,"output_tokens_source":"server","cached_tokens":null,
            "cached_device_tokens":null,"cached_host_tokens":null,"max_output_tokens":8,
            "recorded_output_tokens":null,"active_at_dispatch":1,"due_s":0.0,"sent_s":0.0,
            "first_token_s":0.001,"end_s":0.002,"sent_utc":"","end_utc":"","worker":null,
            "redials":0,"warmup":false}}"#
        );
        serde_json::from_str(&line).unwrap()
    }

    /// The session ids of `path`'s records, in file order.
    fn ids<T: serde::de::DeserializeOwned>(path: &Path, id: fn(T) -> String) -> Vec<String> {
        jsonl::read::<T>(path)
            .unwrap()
            .records
            .into_iter()
            .map(id)
            .collect()
    }

    fn session_ids(dir: &Path) -> Vec<String> {
        ids::<SessionRecord>(&dir.join(files::SESSIONS), |r| r.session_id)
    }

    fn turn_ids(dir: &Path) -> Vec<String> {
        ids::<TurnRecord>(&dir.join(files::TURNS), |r| {
            format!("{}/{}", r.session_id, r.turn_index)
        })
    }

    fn sent(id: &str, turn_index: u32) -> RunEvent<'_> {
        RunEvent::TurnSent {
            session_id: id,
            turn_index,
        }
    }

    #[test]
    fn records_wait_briefly_and_are_never_lost_at_the_end() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-sessions-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        // The flusher writes waiting records by itself (no later record, no flush).
        let writer = RunDirWriter::create(dir).unwrap();
        writer.on_event(&RunEvent::TurnFinished(&turn("a", 0)));
        writer.on_event(&RunEvent::SessionFinished(&session("a")));
        let deadline = Instant::now() + Duration::from_secs(30);
        while session_ids(dir).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(session_ids(dir), ["a"], "written by the flusher");
        assert_eq!(turn_ids(dir), ["a/0"], "written by the flusher");
        // Dropping the writer writes what waits.
        writer.on_event(&RunEvent::TurnFinished(&turn("b", 0)));
        writer.on_event(&RunEvent::SessionFinished(&session("b")));
        writer.on_event(&RunEvent::SessionFinished(&session("c")));
        drop(writer);
        assert_eq!(session_ids(dir), ["a", "b", "c"]);
        assert_eq!(turn_ids(dir), ["a/0", "b/0"]);
    }

    #[test]
    fn a_record_that_fails_to_serialize_is_dropped_whole_and_noted() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-badline-")
            .tempdir()
            .unwrap();
        let path = tmp.path().join(files::TURNS);
        let mut lines = Lines::open(path.clone()).unwrap();
        let errors = Mutex::new(Vec::new());
        let ok = |text: &'static [u8]| {
            move |b: &mut Vec<u8>| {
                b.extend_from_slice(text);
                Ok(())
            }
        };
        assert!(lines.line(ok(b"{\"a\":1}"), &errors));
        // Part of a line written, then the failure: none of it stays.
        let failed = lines.line(
            |b| {
                b.extend_from_slice(b"{\"b\":");
                Err(serde_json::from_str::<u8>("x").unwrap_err())
            },
            &errors,
        );
        assert!(!failed);
        assert!(lines.line(ok(b"{\"c\":3}"), &errors));
        lines.write_out(&errors);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"a\":1}\n{\"c\":3}\n"
        );
        let noted = errors.into_inner().unwrap();
        assert_eq!(noted.len(), 1, "{noted:?}");
        assert!(
            noted[0].starts_with(&path.display().to_string()),
            "{noted:?}"
        );
    }

    #[test]
    fn a_full_batch_is_written_at_once_turns_before_sessions() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-batch-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        // No flusher: only the batch size writes here.
        let writer = RunDirWriter::create_with(dir, false).unwrap();
        let line = |n: usize| n + 1;
        // Session records: the one that fills the batch writes it, whole lines in order.
        let full =
            RECORD_BATCH_BYTES.div_ceil(line(serde_json::to_vec(&session("s0000")).unwrap().len()));
        for i in 0..full - 1 {
            writer.on_event(&RunEvent::SessionFinished(&session(&format!("s{i:04}"))));
        }
        assert!(session_ids(dir).is_empty(), "a batch short of full waits");
        writer.on_event(&RunEvent::SessionFinished(&session(&format!(
            "s{:04}",
            full - 1
        ))));
        let expected: Vec<String> = (0..full).map(|i| format!("s{i:04}")).collect();
        assert_eq!(session_ids(dir), expected, "a full batch waits no longer");
        assert!(
            std::fs::read(dir.join(files::SESSIONS))
                .unwrap()
                .ends_with(b"\n")
        );
        // Turn records likewise.
        let full =
            RECORD_BATCH_BYTES.div_ceil(line(serde_json::to_vec(&turn("t0000", 0)).unwrap().len()));
        for i in 0..full - 1 {
            writer.on_event(&RunEvent::TurnFinished(&turn(&format!("t{i:04}"), 0)));
        }
        assert!(turn_ids(dir).is_empty(), "a batch short of full waits");
        writer.on_event(&RunEvent::TurnFinished(&turn(
            &format!("t{:04}", full - 1),
            0,
        )));
        let expected: Vec<String> = (0..full).map(|i| format!("t{i:04}/0")).collect();
        assert_eq!(turn_ids(dir), expected, "a full batch waits no longer");
        // A session batch written takes the turn records waiting with it, first.
        writer.on_event(&RunEvent::TurnFinished(&turn("x", 0)));
        let before = session_ids(dir).len();
        let full =
            RECORD_BATCH_BYTES.div_ceil(line(serde_json::to_vec(&session("x")).unwrap().len()));
        for _ in 0..full {
            writer.on_event(&RunEvent::SessionFinished(&session("x")));
        }
        assert_eq!(session_ids(dir).len(), before + full);
        assert_eq!(turn_ids(dir).last().map(String::as_str), Some("x/0"));
        assert!(writer.errors().is_empty());
    }

    #[test]
    fn a_turn_record_reaches_the_file_before_the_session_sends_its_next_turn() {
        let tmp = tempfile::Builder::new()
            .prefix("bench-run-next-turn-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let writer = RunDirWriter::create_with(dir, false).unwrap();
        writer.on_event(&sent("a", 0));
        writer.on_event(&RunEvent::TurnFinished(&turn("a", 0)));
        writer.on_event(&sent("b", 0));
        writer.on_event(&RunEvent::TurnFinished(&turn("b", 0)));
        // A session's first turn follows none of its own: nothing is written for it.
        writer.on_event(&sent("c", 0));
        assert!(turn_ids(dir).is_empty());
        // A later turn of any session: every turn record waiting goes first.
        writer.on_event(&sent("a", 1));
        assert_eq!(turn_ids(dir), ["a/0", "b/0"]);
        writer.on_event(&RunEvent::TurnFinished(&turn("a", 1)));
        writer.on_event(&RunEvent::SessionFinished(&session("a")));
        assert_eq!(turn_ids(dir), ["a/0", "b/0"], "a's last turn waits");
        writer.on_event(&sent("b", 1));
        assert_eq!(turn_ids(dir), ["a/0", "b/0", "a/1"]);
        assert_eq!(session_ids(dir), ["a"], "written with the turns");
        writer.flush();
        assert_eq!(turn_ids(dir), ["a/0", "b/0", "a/1"]);
        assert!(writer.errors().is_empty());
    }
}
