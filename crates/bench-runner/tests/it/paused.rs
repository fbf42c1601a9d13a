//! The engine under tokio's paused clock against a scripted in-process transport: no sockets,
//! no real time, so every timing below is exact (integer milliseconds on tokio's timer wheel).
//!
//! Sessions are built by hand: session `i` is `s{i}`, its turn `k` sends the user message
//! `s{i}/t{k}` (which is how the fake server knows what it is answering) and is pinned to
//! [`OUT`] output tokens.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_rundir::record::{CountSource, SessionStatus, TurnRecord, TurnStatus};
use bench_runner::{
    Arrival, ArrivalProcess, CancelToken, Observer, Phase, RunConfig, RunEvent, RunOutcome,
    StopReason, ToolWaits, Transport, WARMUP_TURNS, run,
};
use bench_transport::{Error, ErrorKind, RequestOptions, Segments, TurnOutcome, Usage};
use bench_workload::plan::{Msg, Plan, PlannedMessage, PlannedSession, PlannedTurn, Role};
use bytes::Bytes;
use tokio::time::{Instant, sleep, sleep_until};

/// Output tokens every planned turn is pinned to (so a turn takes `ttft + 7 * itl`).
const OUT: u32 = 8;

// ---------------------------------------------------------------------------------------------
// The scripted transport.

/// Scripted latency of one request: first token after `ttft`, then one token every `itl`.
#[derive(Debug, Clone, Copy)]
struct Lat {
    ttft: Duration,
    itl: Duration,
}

fn lat(ttft_ms: u64, itl_ms: u64) -> Lat {
    Lat {
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::from_millis(itl_ms),
    }
}

/// A turn of `e2e_ms` in total at [`OUT`] tokens: `itl` 10 ms, the rest is TTFT.
fn e2e(e2e_ms: u64) -> Lat {
    lat(e2e_ms - 10 * u64::from(OUT - 1), 10)
}

/// One request as the fake server saw it.
#[derive(Debug, Clone)]
struct Seen {
    session: String,
    turn: u32,
    /// `(role, content)` of every message.
    messages: Vec<(String, String)>,
    max_tokens: u32,
    timeout: Option<Duration>,
    sent: Instant,
    end: Option<Instant>,
    ok: Option<bool>,
    usage: Usage,
}

#[derive(Default)]
struct FakeState {
    in_flight: u32,
    max_in_flight: u32,
    /// `(when, requests in flight right after)` at every request start and end.
    log: Vec<(Instant, u32)>,
    seen: Vec<Seen>,
}

type Script = dyn Fn(&str, u32) -> Lat + Send + Sync;

/// A fake chat server sleeping on tokio's clock for a latency scripted per `(session, turn)`.
#[derive(Clone)]
struct Fake {
    script: Arc<Script>,
    state: Arc<Mutex<FakeState>>,
}

impl Fake {
    fn new(script: impl Fn(&str, u32) -> Lat + Send + Sync + 'static) -> Self {
        Fake {
            script: Arc::new(script),
            state: Arc::default(),
        }
    }

    /// Every turn takes `ms` in total.
    fn uniform(ms: u64) -> Self {
        Fake::new(move |_, _| e2e(ms))
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    fn seen_of(&self, session: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.session == session)
            .collect()
    }

    fn max_in_flight(&self) -> u32 {
        self.state.lock().unwrap().max_in_flight
    }

    fn log(&self) -> Vec<(Instant, u32)> {
        self.state.lock().unwrap().log.clone()
    }

    async fn serve(
        &self,
        body: Bytes,
        stream: bool,
        timeout: Option<Duration>,
    ) -> Result<TurnOutcome, Error> {
        let sent = Instant::now();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("the body is JSON");
        let messages: Vec<(String, String)> = v["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_string(),
                    m["content"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let last_user = &messages
            .iter()
            .rev()
            .find(|(r, _)| r == "user")
            .expect("a user message")
            .1;
        let (session, turn) = last_user.split_once("/t").expect("s{i}/t{k}");
        let (session, turn) = (session.to_string(), turn.parse::<u32>().unwrap());
        let max_tokens = u32::try_from(v["max_completion_tokens"].as_u64().unwrap()).unwrap();
        assert!(max_tokens >= 1);
        let l = (self.script)(&session, turn);
        let total = l.ttft + l.itl * (max_tokens - 1);
        // What a server with a prefix cache would report: everything up to the new message
        // was in the previous turn's prompt or answer.
        let chars = |c: &String| c.chars().count() as u64;
        let prompt: u64 = messages.iter().map(|(_, c)| chars(c)).sum();
        let cached = prompt - messages.last().map_or(0, |(_, c)| chars(c));
        let usage = Usage {
            prompt_tokens: Some(prompt),
            completion_tokens: Some(u64::from(max_tokens)),
            total_tokens: Some(prompt + u64::from(max_tokens)),
            cached_tokens: Some(cached),
            cached_device_tokens: None,
            cached_host_tokens: None,
            reasoning_tokens: None,
        };
        let idx = {
            let mut st = self.state.lock().unwrap();
            st.in_flight += 1;
            st.max_in_flight = st.max_in_flight.max(st.in_flight);
            let n = st.in_flight;
            st.log.push((sent, n));
            st.seen.push(Seen {
                session,
                turn,
                messages,
                max_tokens,
                timeout,
                sent,
                end: None,
                ok: None,
                usage,
            });
            st.seen.len() - 1
        };
        let result = match timeout {
            Some(t) if total > t => {
                sleep(t).await;
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!("no answer within {t:?}"),
                ))
            }
            _ => {
                let mut offsets = Vec::with_capacity(max_tokens as usize);
                for k in 0..max_tokens {
                    sleep_until(sent + l.ttft + l.itl * k).await;
                    offsets.push(Instant::now() - sent);
                }
                Ok(TurnOutcome {
                    content: "tok ".repeat(max_tokens as usize),
                    reasoning: String::new(),
                    ttft: offsets.first().copied(),
                    ttfa: offsets.first().copied(),
                    e2e: Instant::now() - sent,
                    reasoning_chunks: 0,
                    answer_chunks: offsets.len() as u32,
                    chunk_offsets: offsets,
                    usage: Some(usage),
                    finish_reason: Some("length".into()),
                    streamed: stream,
                    events: max_tokens + 2,
                    body_bytes: 0,
                    redials: 0,
                    resent: 0,
                    worker: None,
                    connect: None,
                    tls: None,
                    response_id: None,
                })
            }
        };
        let mut st = self.state.lock().unwrap();
        st.in_flight -= 1;
        let n = st.in_flight;
        st.log.push((Instant::now(), n));
        st.seen[idx].end = Some(Instant::now());
        st.seen[idx].ok = Some(result.is_ok());
        result
    }
}

impl Transport for Fake {
    fn send_turn(
        &self,
        body: Segments,
        stream: bool,
        opts: &RequestOptions,
    ) -> impl Future<Output = Result<TurnOutcome, Error>> + Send {
        let (me, timeout) = (self.clone(), opts.timeout);
        async move { me.serve(body.to_bytes(), stream, timeout).await }
    }
}

// ---------------------------------------------------------------------------------------------
// Plans by hand.

fn text(role: Role, t: &str) -> Msg {
    Arc::new(PlannedMessage {
        role,
        content_json: Arc::from(serde_json::to_string(t).unwrap()),
        tokens: u32::try_from(t.len().div_ceil(4)).unwrap(),
        extra_json: None,
    })
}

/// Session `s{i}`: `turns` turns, each after a tool wait of `gap_ms` (but the first), turn `k`
/// estimated at `100 * (k + 1)` prompt tokens.
fn session(i: usize, turns: u32, gap_ms: f64) -> PlannedSession {
    PlannedSession {
        id: Arc::from(format!("s{i}")),
        system: None,
        turns: (0..turns)
            .map(|k| PlannedTurn {
                index: k,
                input_delta: vec![text(Role::User, &format!("s{i}/t{k}"))],
                assistant: text(Role::Assistant, &format!("answer of s{i}/t{k}")),
                max_output_tokens: OUT,
                recorded_output_tokens: Some(u64::from(OUT)),
                recorded_input_tokens: None,
                recorded_cached_tokens: None,
                pre_gap_ms: if k == 0 { 0.0 } else { gap_ms },
                est_prompt_tokens: 100 * (u64::from(k) + 1),
                timestamp_ms: None,
            })
            .collect(),
        peak_context: 100 * u64::from(turns) + u64::from(OUT),
        model: None,
        tools: None,
        graph: None,
    }
}

fn sessions(n: usize, turns: u32) -> Vec<PlannedSession> {
    (0..n).map(|i| session(i, turns, 0.0)).collect()
}

fn plan(sessions: Vec<PlannedSession>) -> Arc<Plan> {
    Arc::new(Plan {
        sessions,
        system_prompt: None,
        tokenizer: "chars".into(),
        seed: 0,
        summary: Default::default(),
    })
}

/// The index `i` of session `s{i}`.
fn sid(s: &str) -> u64 {
    s.trim_start_matches('s').parse().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Checks.

/// `x` seconds is `ms` milliseconds (to the nanosecond: the paused clock is exact).
#[track_caller]
fn assert_s(x: f64, ms: f64) {
    assert!(
        (x - ms / 1000.0).abs() < 1e-9,
        "expected {ms} ms, got {} ms",
        x * 1000.0
    );
}

#[track_caller]
fn assert_ms(x: Option<f64>, ms: f64) {
    let x = x.expect("a value");
    assert!((x - ms).abs() < 1e-6, "expected {ms} ms, got {x} ms");
}

fn turns_of<'a>(out: &'a RunOutcome, session: &str) -> Vec<&'a TurnRecord> {
    let mut ts: Vec<_> = out
        .turns
        .iter()
        .filter(|t| t.session_id == session && !t.warmup)
        .collect();
    ts.sort_by_key(|t| (t.replay, t.turn_index));
    ts
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The run's events, kept in order.
#[derive(Debug, Clone, PartialEq)]
enum Ev {
    Started,
    Phase(Phase),
    Turn { warmup: bool },
    Session { warmup: bool },
    Stopped(StopReason),
}

#[derive(Default)]
struct Events(Mutex<Vec<Ev>>);

impl Observer for Events {
    fn on_event(&self, e: &RunEvent<'_>) {
        let ev = match e {
            RunEvent::Started { .. } => Ev::Started,
            RunEvent::Phase(p) => Ev::Phase(*p),
            RunEvent::TurnFinished(t) => Ev::Turn { warmup: t.warmup },
            RunEvent::SessionFinished(s) => Ev::Session { warmup: s.warmup },
            RunEvent::Stopped { by } => Ev::Stopped(*by),
            _ => return,
        };
        self.0.lock().unwrap().push(ev);
    }
}

async fn play(sessions: Vec<PlannedSession>, fake: &Fake, cfg: RunConfig) -> RunOutcome {
    run(
        plan(sessions),
        fake.clone(),
        cfg,
        vec![],
        CancelToken::new(),
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// 1. Closed loop.

#[tokio::test(start_paused = true)]
async fn closed_loop_keeps_exactly_c_sessions_in_flight() {
    // Session s{i} answers each turn with a TTFT of 20 + 10 * (i % 5) ms, then 7 tokens 5 ms
    // apart: sessions last 165..285 ms and end at different times.
    let ttft = |s: &str| 20 + 10 * (sid(s) % 5);
    let fake = Fake::new(move |s, _| lat(ttft(s), 5));
    let t0 = Instant::now();
    let out = play(sessions(12, 3), &fake, RunConfig::new("fake", 4)).await;

    assert_eq!(out.stopped_by, StopReason::Exhausted);
    assert_eq!(out.turns.len(), 36);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Ok));
    assert_eq!(out.sessions.len(), 12);
    let ids: HashSet<_> = out.sessions.iter().map(|s| s.session_id.clone()).collect();
    assert_eq!(ids.len(), 12, "every session played once");
    for s in &out.sessions {
        assert_eq!(s.status, SessionStatus::Completed);
        assert_eq!((s.replay, s.turns_played, s.turns_planned), (0, 3, 3));
        assert!(s.marker.is_none());
    }

    // Never more than C at once, and the fake saw exactly C.
    assert_eq!(fake.max_in_flight(), 4);
    assert!(out.turns.iter().all(|t| t.active_at_dispatch <= 4));
    // s11 is the last session of the pool to start (the pool is handed out in order): until
    // then every finished session was replaced at once.
    let last_start = turns_of(&out, "s11")[0].sent_s;
    // s0..s3 start at 0; s0 ends at 165 -> s4, s1 195 -> s5, s2 225 -> s6, s3 255 -> s7,
    // s5 360 -> s8, s6 420 -> s9, s4 450 -> s10, s7 480 -> s11.
    assert_s(last_start, 480.0);
    let before: Vec<_> = out
        .turns
        .iter()
        .filter(|t| t.sent_s <= last_start + 1e-9)
        .collect();
    assert_eq!(before.len(), 29, "turns dispatched while the pool lasted");
    // The 4 first turns all go out at 0 s (their `active_at_dispatch`, a ramp of 1..4, is
    // pinned by `closed_loop_first_turns_see_all_c_sessions_active`); every later one saw 4.
    let (first, later): (Vec<&TurnRecord>, Vec<&TurnRecord>) =
        before.iter().copied().partition(|t| t.sent_s == 0.0);
    assert_eq!(first.len(), 4);
    assert!(
        first
            .iter()
            .all(|t| t.turn_index == 0 && sid(&t.session_id) < 4)
    );
    for t in &later {
        assert_eq!(
            t.active_at_dispatch, 4,
            "{} turn {} at {} s",
            t.session_id, t.turn_index, t.sent_s
        );
    }
    // The fake's view: once every instant's events settled, 4 requests were in flight.
    let mut settled: BTreeMap<Duration, u32> = BTreeMap::new();
    for (at, n) in fake.log() {
        settled.insert(at - t0, n);
    }
    let limit = Duration::from_secs_f64(last_start);
    let during: Vec<_> = settled.range(..=limit).collect();
    assert!(during.len() >= 8);
    assert!(during.iter().all(|(_, n)| **n == 4), "{during:?}");

    // Turns of a session run back to back (no gaps planned): next sent as the last ended.
    for i in 0..12 {
        let ts = turns_of(&out, &format!("s{i}"));
        for w in ts.windows(2) {
            assert_s(w[1].sent_s, w[0].end_s * 1000.0);
            assert_s(w[1].due_s, w[1].sent_s * 1000.0);
        }
    }

    // Records carry what the server measured and reported.
    let seen = fake.seen();
    assert_eq!(seen.len(), 36);
    for t in &out.turns {
        let f = (ttft(&t.session_id)) as f64;
        assert_ms(t.ttft_ms, f);
        assert_ms(t.e2e_ms, f + 35.0);
        assert_ms(t.tpot_ms, 5.0);
        assert_eq!(t.chunk_gaps_ms.len(), 7);
        assert!(t.chunk_gaps_ms.iter().all(|g| (g - 5.0).abs() < 1e-6));
        assert_s(t.first_token_s.unwrap(), t.sent_s * 1000.0 + f);
        let s = seen
            .iter()
            .find(|s| s.session == t.session_id && s.turn == t.turn_index)
            .unwrap();
        assert_s(t.sent_s, (s.sent - t0).as_secs_f64() * 1000.0);
        assert_eq!((s.max_tokens, s.ok), (OUT, Some(true)));
        assert_eq!(t.output_tokens, Some(u64::from(OUT)));
        assert_eq!(t.output_tokens_source, Some(CountSource::Server));
        assert_eq!(t.input_tokens, s.usage.prompt_tokens);
        assert_eq!(t.input_tokens_source, Some(CountSource::Server));
        assert_eq!(t.cached_tokens, s.usage.cached_tokens);
        assert_eq!(t.max_output_tokens, OUT);
    }
    // The run ends with the last answer: s9 (started at 420, 3 x 95 ms) at 705 ms.
    let last_end = seen.iter().filter_map(|s| s.end).max().unwrap();
    assert_eq!(out.elapsed, last_end - t0);
    assert_eq!(out.elapsed, ms(705));
    assert_eq!(out.warmup_elapsed, Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn closed_loop_first_turns_see_all_c_sessions_active() {
    let fake = Fake::uniform(100);
    let out = play(sessions(8, 2), &fake, RunConfig::new("fake", 4)).await;
    let first: Vec<_> = out.turns.iter().filter(|t| t.sent_s == 0.0).collect();
    assert_eq!(first.len(), 4);
    assert_eq!(fake.max_in_flight(), 4);
    // Every turn of this run was dispatched with 4 sessions in play (the pool of 8 two-turn
    // sessions runs in two waves of 4 that start and end together).
    for t in &out.turns {
        assert_eq!(
            t.active_at_dispatch, 4,
            "{} turn {} at {} s",
            t.session_id, t.turn_index, t.sent_s
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Duration: the pool loops, replays are marked, the deadline truncates.

#[tokio::test(start_paused = true)]
async fn duration_loops_the_pool_marks_replays_and_truncates_at_the_deadline() {
    let fake = Fake::uniform(100);
    let mut pool = sessions(2, 3);
    pool[0].system = Some(text(Role::System, "You are s0."));
    let mut cfg = RunConfig::new("fake", 2);
    cfg.limits.duration = Some(ms(1050));
    let t0 = Instant::now();
    let out = play(pool, &fake, cfg).await;

    assert_eq!(out.stopped_by, StopReason::Duration);
    // Plays of 300 ms: replays 0, 1, 2 complete by 900 ms; replay 3 sends turns at 900 and
    // 1000 ms and is cut at 1100 ms, the first turn boundary after the deadline.
    assert_eq!(out.elapsed, ms(1100));
    assert_eq!(out.sessions.len(), 8);
    for s in &out.sessions {
        let want = if s.replay == 3 {
            (SessionStatus::Truncated, 2)
        } else {
            (SessionStatus::Completed, 3)
        };
        assert_eq!((s.status, s.turns_played), want, "{s:?}");
        let marker =
            (s.replay > 0).then(|| format!("[bench replay {}#{}]", s.session_id, s.replay));
        assert_eq!(s.marker, marker);
    }
    let plays: HashSet<_> = out
        .sessions
        .iter()
        .map(|s| (s.session_id.clone(), s.replay))
        .collect();
    assert_eq!(plays.len(), 8, "each (session, replay) once");
    assert_eq!(out.turns.len(), 22);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Ok));
    // Nothing is sent at or after the deadline.
    assert!(out.turns.iter().all(|t| t.sent_s < 1.05));
    assert!(fake.seen().iter().all(|s| s.sent - t0 < ms(1050)));
    assert_eq!(fake.seen().len(), 22);

    // The cache-bust marker follows the system prompt (s0), or is the system message (s1).
    let replay_of = |first: &(String, String), sys: Option<&str>| -> u32 {
        let m = match sys {
            Some(sys) => {
                assert_eq!(first.0, "system");
                if first.1 == sys {
                    return 0;
                }
                first
                    .1
                    .strip_prefix(&format!("{sys}\n"))
                    .expect("the marker right after the system prompt")
                    .to_string()
            }
            None if first.0 == "user" => return 0,
            None => {
                assert_eq!(first.0, "system");
                first.1.clone()
            }
        };
        m.strip_prefix("[bench replay ")
            .and_then(|m| m.strip_suffix(']'))
            .and_then(|m| m.split_once('#'))
            .map(|(_, n)| n.parse().unwrap())
            .expect("[bench replay ID#N]")
    };
    for (id, sys) in [("s0", Some("You are s0.")), ("s1", None)] {
        let seen = fake.seen_of(id);
        let replays: Vec<u32> = seen
            .iter()
            .map(|s| replay_of(&s.messages[0], sys))
            .collect();
        assert_eq!(replays, [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3], "{id}");
        for s in &seen {
            let systems = s.messages.iter().filter(|(r, _)| r == "system").count();
            // One system message: the session's own, or the marker's (replays of s1).
            let want = usize::from(sys.is_some() || s.messages[0].0 == "system");
            assert_eq!(systems, want);
            if let Some(m) = s
                .messages
                .iter()
                .skip(1)
                .find(|(_, c)| c.contains("[bench"))
            {
                panic!("marker outside the first message: {m:?}");
            }
        }
        // The marker of the replay is exactly its own.
        for s in seen
            .iter()
            .filter(|s| s.messages[0].1.contains("[bench replay"))
        {
            assert!(s.messages[0].1.ends_with(']'));
            assert!(s.messages[0].1.contains(&format!("[bench replay {id}#")));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. The fuse.

#[tokio::test(start_paused = true)]
async fn the_fuse_cuts_a_request_in_flight_and_a_tool_wait() {
    // s0: turn 0 takes 100 ms, turn 1 would take 10 s. s1: turn 0 100 ms, then a 30 s tool wait.
    let fake = Fake::new(|s, k| {
        if s == "s0" && k == 1 {
            e2e(10_000)
        } else {
            e2e(100)
        }
    });
    let pool = vec![session(0, 3, 0.0), session(1, 2, 30_000.0)];
    let mut cfg = RunConfig::new("fake", 2);
    cfg.limits.max_duration = Some(ms(250));
    let t0 = Instant::now();
    let out = play(pool, &fake, cfg).await;

    assert_eq!(out.stopped_by, StopReason::MaxDuration);
    assert_eq!(out.elapsed, ms(250), "the run returns at the fuse");
    assert_eq!(Instant::now() - t0, ms(250));
    // The per-request timeout is the turn timeout tightened to what is left of the fuse.
    let s0 = fake.seen_of("s0");
    let timeouts: Vec<_> = s0.iter().map(|s| s.timeout).collect();
    assert_eq!(timeouts, [Some(ms(250)), Some(ms(150))]);
    assert_eq!(s0[1].end.unwrap() - t0, ms(250));
    assert_eq!((s0[0].ok, s0[1].ok), (Some(true), Some(false)));
    assert_eq!(fake.seen_of("s1").len(), 1);

    let t = turns_of(&out, "s0");
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].status, TurnStatus::Ok);
    assert_eq!(t[1].status, TurnStatus::Timeout);
    assert_eq!(t[1].error_kind, Some(ErrorKind::Timeout));
    assert_s(t[1].end_s, 250.0);
    let t = turns_of(&out, "s1");
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].status, TurnStatus::Ok);
    for s in &out.sessions {
        assert_eq!(s.status, SessionStatus::Truncated, "{s:?}");
        assert_s(s.end_s, 250.0);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Turn and session timeouts.

#[tokio::test(start_paused = true)]
async fn a_turn_timeout_fails_the_turn_and_the_run_goes_on() {
    let fake = Fake::new(|s, k| {
        if s == "s0" && k == 1 {
            e2e(2000)
        } else {
            e2e(100)
        }
    });
    let mut cfg = RunConfig::new("fake", 1);
    cfg.limits.turn_timeout = ms(500);
    let out = play(sessions(2, 3), &fake, cfg).await;

    assert_eq!(out.stopped_by, StopReason::Exhausted);
    assert!(fake.seen().iter().all(|s| s.timeout == Some(ms(500))));
    let t = turns_of(&out, "s0");
    assert_eq!(t.len(), 3, "a timed-out turn does not end the session");
    assert_eq!(t[1].status, TurnStatus::Timeout);
    assert_eq!(t[1].error_kind, Some(ErrorKind::Timeout));
    assert!(t[1].error.as_deref().unwrap().contains("timeout"));
    assert_eq!(
        (t[1].ttft_ms, t[1].e2e_ms, t[1].output_tokens),
        (None, None, None)
    );
    assert_eq!(t[1].input_tokens_source, Some(CountSource::Client));
    assert_s(t[1].sent_s, 100.0);
    assert_s(t[1].end_s, 600.0);
    assert_eq!(t[2].status, TurnStatus::Ok);
    assert_s(t[2].sent_s, 600.0);
    let s1 = turns_of(&out, "s1");
    assert!(s1.iter().all(|t| t.status == TurnStatus::Ok));
    assert_s(s1[0].sent_s, 700.0);
    let st: Vec<_> = out
        .sessions
        .iter()
        .map(|s| (s.session_id.as_str(), s.status))
        .collect();
    assert_eq!(
        st,
        [
            ("s0", SessionStatus::Failed),
            ("s1", SessionStatus::Completed)
        ]
    );
    assert_eq!(out.sessions[0].output_tokens, 2 * u64::from(OUT));
    assert_eq!(out.elapsed, ms(1000));
}

/// One `Answer` (with what it carried) or `TurnFinished` (`None`) event: turn, answer, status.
type AnswerEvent = (u32, Option<String>, TurnStatus);

/// Per session: its `Answer` and `TurnFinished` events, in order.
#[derive(Default)]
struct Answers(Mutex<BTreeMap<String, Vec<AnswerEvent>>>);

impl Observer for Answers {
    fn on_event(&self, e: &RunEvent<'_>) {
        let (rec, answer) = match e {
            RunEvent::Answer { record, answer } => (*record, Some((*answer).to_owned())),
            RunEvent::TurnFinished(record) => (*record, None),
            _ => return,
        };
        let mut m = self.0.lock().unwrap();
        m.entry(rec.session_id.clone())
            .or_default()
            .push((rec.turn_index, answer, rec.status));
    }
}

#[tokio::test(start_paused = true)]
async fn every_ok_turn_announces_its_answer_right_before_it_finishes() {
    let fake = Fake::new(|s, k| {
        if s == "s0" && k == 1 {
            e2e(2000)
        } else {
            e2e(100)
        }
    });
    let mut cfg = RunConfig::new("fake", 2);
    cfg.limits.turn_timeout = ms(500);
    let answers = Arc::new(Answers::default());
    let out = run(
        plan(sessions(2, 3)),
        fake.clone(),
        cfg,
        vec![answers.clone()],
        CancelToken::new(),
    )
    .await;
    assert_eq!(out.turns.len(), 6);
    let tok = Some("tok ".repeat(OUT as usize));
    let m = answers.0.lock().unwrap();
    let (ok, timeout) = (TurnStatus::Ok, TurnStatus::Timeout);
    // The timed-out turn has no answer; every ok one has what the server said, just before
    // its record.
    assert_eq!(
        m["s0"],
        [
            (0, tok.clone(), ok),
            (0, None, ok),
            (1, None, timeout),
            (2, tok.clone(), ok),
            (2, None, ok),
        ]
    );
    assert_eq!(m["s1"].len(), 6);
    for pair in m["s1"].chunks(2) {
        assert_eq!(
            (pair[0].1.as_ref(), pair[1].1.as_ref()),
            (tok.as_ref(), None)
        );
        assert_eq!(pair[0].0, pair[1].0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_session_timeout_stops_the_session_at_its_next_turn_boundary() {
    let fake = Fake::uniform(100);
    // s0: 5 turns of 100 ms. s1: 2 turns. s2: 3 turns with 200 ms tool waits.
    let pool = vec![session(0, 5, 0.0), session(1, 2, 0.0), session(2, 3, 200.0)];
    let mut cfg = RunConfig::new("fake", 1);
    cfg.limits.session_timeout = Some(ms(250));
    let out = play(pool, &fake, cfg).await;

    assert_eq!(out.stopped_by, StopReason::Exhausted);
    let st: Vec<_> = out
        .sessions
        .iter()
        .map(|s| (s.session_id.as_str(), s.status, s.turns_played))
        .collect();
    assert_eq!(
        st,
        [
            // Boundaries at 100 and 200 ms are inside the limit; at 300 ms it is over.
            ("s0", SessionStatus::Timeout, 3),
            ("s1", SessionStatus::Completed, 2),
            // Its next turn would start after the wait, at 300 ms of its play.
            ("s2", SessionStatus::Timeout, 1),
        ]
    );
    assert_eq!(fake.seen_of("s0").len(), 3);
    assert_eq!(fake.seen_of("s2").len(), 1);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Ok));
    // s0 0..300, s1 300..500, s2 500..600; its next turn would be due past its limit, so it
    // ends at once instead of sitting out the tool wait.
    assert_s(turns_of(&out, "s1")[0].sent_s, 300.0);
    assert_s(out.sessions[2].end_s, 600.0);
    assert_eq!(out.elapsed, ms(600));
}

// ---------------------------------------------------------------------------------------------
// 5. The context guard.

#[tokio::test(start_paused = true)]
async fn the_context_guard_stops_a_session_before_a_turn_that_cannot_fit() {
    let fake = Fake::uniform(100);
    // Turn k needs 100 * (k + 1) + 8 tokens: 108, 208, 308. A window of 208 fits turn 1 exactly.
    let mut cfg = RunConfig::new("fake", 1);
    cfg.max_model_len = Some(208);
    let out = play(vec![session(0, 3, 0.0), session(1, 2, 0.0)], &fake, cfg).await;

    let s0 = &out.sessions[0];
    assert_eq!(s0.session_id, "s0");
    assert_eq!(s0.status, SessionStatus::ContextGuard);
    assert_eq!((s0.turns_played, s0.turns_planned), (2, 3));
    let seen: Vec<u32> = fake.seen_of("s0").iter().map(|s| s.turn).collect();
    assert_eq!(seen, [0, 1], "turn 2 never reaches the server");
    assert_eq!(out.sessions[1].status, SessionStatus::Completed);
    assert_eq!(out.turns.len(), 4);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Ok));
    // The guard frees the slot at once.
    assert_s(turns_of(&out, "s1")[0].sent_s, 200.0);
    assert_eq!(out.stopped_by, StopReason::Exhausted);
    assert_eq!(out.elapsed, ms(400));
}

// ---------------------------------------------------------------------------------------------
// 6. Tool waits.

#[tokio::test(start_paused = true)]
async fn tool_waits_are_honoured_scaled_capped_and_never_latency() {
    // (gap_scale, gap_cap_ms, no_gaps) -> the wait actually observed for a planned 2000 ms.
    let cases = [
        (1.0, 30_000.0, false, 2000),
        (0.5, 30_000.0, false, 1000),
        (1.0, 1500.0, false, 1500),
        (2.0, 3000.0, false, 3000),
        (2.0, 30_000.0, false, 4000),
        (1.0, 30_000.0, true, 0),
    ];
    for (scale, cap, no_gaps, gap) in cases {
        let fake = Fake::new(|_, _| lat(100, 10)); // 100 + 7 x 10 = 170 ms a turn
        let mut cfg = RunConfig::new("fake", 1);
        cfg.request.tool_waits = if no_gaps {
            ToolWaits::Skip
        } else {
            ToolWaits::Honour {
                scale,
                cap: Duration::from_secs_f64(cap / 1000.0),
            }
        };
        let t0 = Instant::now();
        let out = play(vec![session(0, 3, 2000.0)], &fake, cfg).await;
        let case = format!("scale {scale}, cap {cap}, no_gaps {no_gaps}");

        let seen = fake.seen();
        assert_eq!(seen.len(), 3);
        for w in seen.windows(2) {
            assert_eq!(w[1].sent - w[0].end.unwrap(), ms(gap), "{case}");
        }
        assert_eq!(seen[0].sent, t0);
        let t = turns_of(&out, "s0");
        for (k, t) in t.iter().enumerate() {
            assert_ms(t.ttft_ms, 100.0);
            assert_ms(t.e2e_ms, 170.0);
            assert_eq!(t.sent_s, t.due_s, "no dispatch lag ({case})");
            assert_s(t.sent_s, k as f64 * (170.0 + gap as f64));
        }
        assert_s(out.sessions[0].busy_s, 510.0);
        assert_eq!(out.sessions[0].status, SessionStatus::Completed);
        assert_eq!(out.elapsed, ms(510 + 2 * gap), "{case}");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Open loop.

#[tokio::test(start_paused = true)]
async fn open_loop_constant_arrivals_start_on_schedule_without_a_limit() {
    let fake = Fake::uniform(1200); // sessions of 2 turns: 2.4 s each
    let mut cfg = RunConfig::new("fake", 0);
    cfg.arrival = Some(Arrival {
        rate: 2.0,
        process: ArrivalProcess::Constant,
        seed: 1,
    });
    let t0 = Instant::now();
    let out = play(sessions(6, 2), &fake, cfg).await;

    assert_eq!(out.stopped_by, StopReason::Exhausted);
    assert_eq!(out.turns.len(), 12);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Ok));
    for i in 0..6 {
        let t = turns_of(&out, &format!("s{i}"));
        let at = 500.0 * i as f64;
        assert_s(t[0].due_s, at);
        assert_s(t[0].sent_s, at);
        assert_s(t[1].sent_s, at + 1200.0);
        assert_eq!(
            fake.seen_of(&format!("s{i}"))[0].sent - t0,
            ms(500 * i as u64)
        );
        assert_s(
            out.sessions
                .iter()
                .find(|s| s.session_id == format!("s{i}"))
                .unwrap()
                .start_s,
            at,
        );
    }
    // Sessions in flight at each arrival: s0 ends at 2.4 s, after s4 arrived at 2.0 s.
    let active: Vec<u32> = (0..6)
        .map(|i| turns_of(&out, &format!("s{i}"))[0].active_at_dispatch)
        .collect();
    assert_eq!(active, [1, 2, 3, 4, 5, 5]);
    assert_eq!(fake.max_in_flight(), 5);
    assert_eq!(out.arrivals_not_started, 0);
    assert_eq!(out.elapsed, ms(2500 + 2400));
}

/// `--arrival trace`: sessions start at their recorded offsets (first timed turn, less the
/// earliest), scaled, in recorded order whatever the plan's order; a session late for a slot
/// counts the wait as dispatch lag.
#[tokio::test(start_paused = true)]
async fn open_loop_trace_arrivals_start_at_the_recorded_offsets_scaled() {
    let fake = Fake::uniform(100);
    // Recorded at 10.0 s, 13.0 s, 10.4 s and 11.0 s into the trace (plan order differs).
    let recorded = [10_000.0, 13_000.0, 10_400.0, 11_000.0];
    let mut ss: Vec<PlannedSession> = (0..4).map(|i| session(i, 2, 0.0)).collect();
    for (s, ts) in ss.iter_mut().zip(recorded) {
        s.turns[0].timestamp_ms = Some(ts);
        s.turns[1].timestamp_ms = Some(ts + 50.0);
    }
    let mut cfg = RunConfig::new("fake", 0);
    cfg.arrival = Some(Arrival {
        rate: 1.0,
        process: ArrivalProcess::Trace { time_scale: 0.5 },
        seed: 1,
    });
    let t0 = Instant::now();
    let out = play(ss, &fake, cfg).await;
    assert_eq!(out.turns.len(), 8);
    for (i, ts) in recorded.iter().enumerate() {
        let at = (ts - 10_000.0) * 0.5;
        let t = turns_of(&out, &format!("s{i}"));
        assert_s(t[0].due_s, at);
        assert_s(t[0].sent_s, at);
        assert_eq!(
            fake.seen_of(&format!("s{i}"))[0].sent - t0,
            Duration::from_secs_f64(at / 1000.0)
        );
    }
    // Recorded order: s0, s2, s3, s1.
    let order: Vec<String> = fake
        .seen()
        .iter()
        .filter(|s| s.turn == 0)
        .map(|s| s.session.clone())
        .collect();
    assert_eq!(order, ["s0", "s2", "s3", "s1"]);
}

#[tokio::test(start_paused = true)]
async fn open_loop_with_a_limit_counts_the_wait_for_a_slot_as_dispatch_lag() {
    let fake = Fake::uniform(1200);
    let mut cfg = RunConfig::new("fake", 1);
    cfg.arrival = Some(Arrival {
        rate: 2.0,
        process: ArrivalProcess::Constant,
        seed: 1,
    });
    let out = play(sessions(4, 1), &fake, cfg).await;

    assert_eq!(fake.max_in_flight(), 1);
    for i in 0..4u32 {
        let t = turns_of(&out, &format!("s{i}"));
        let due = 500.0 * f64::from(i);
        let sent = 1200.0 * f64::from(i);
        assert_s(t[0].due_s, due);
        assert_s(t[0].sent_s, sent);
        assert_s(t[0].sent_s - t[0].due_s, sent - due); // 0, 0.7, 1.4, 2.1 s
        // Latency is the server's only; the wait is lag, not TTFT.
        assert_ms(t[0].e2e_ms, 1200.0);
        // The session started when it was due.
        let s = out
            .sessions
            .iter()
            .find(|s| s.session_id == format!("s{i}"))
            .unwrap();
        assert_s(s.start_s, due);
    }
    assert_eq!(out.arrivals_not_started, 0);
    assert_eq!(out.elapsed, ms(4800));
}

#[tokio::test(start_paused = true)]
async fn open_loop_poisson_arrivals_have_the_rate_and_repeat_with_the_seed() {
    async fn schedule(seed: u64) -> Vec<f64> {
        let fake = Fake::uniform(100);
        let mut cfg = RunConfig::new("fake", 0);
        cfg.arrival = Some(Arrival {
            rate: 10.0,
            process: ArrivalProcess::Poisson,
            seed,
        });
        let out = play(sessions(400, 1), &fake, cfg).await;
        assert_eq!(out.turns.len(), 400);
        let mut due = vec![0.0; 400];
        for t in &out.turns {
            // Sent on time, up to the timer's 1 ms granularity.
            let lag = t.sent_s - t.due_s;
            assert!((0.0..0.001).contains(&lag), "lag {lag}");
            due[sid(&t.session_id) as usize] = t.due_s;
        }
        due
    }
    let a = schedule(7).await;
    assert_eq!(a[0], 0.0);
    assert!(a.windows(2).all(|w| w[1] >= w[0]), "arrivals in pool order");
    let mean = a[399] / 399.0;
    assert!((mean - 0.1).abs() < 0.01, "mean inter-arrival {mean} s");
    let gaps: Vec<f64> = a.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().any(|g| *g < 0.02) && gaps.iter().any(|g| *g > 0.25),
        "exponential gaps"
    );
    assert_eq!(schedule(7).await, a, "same seed, same schedule");
    assert_ne!(schedule(8).await, a, "another seed, another schedule");
}

/// vLLM's `--burstiness`: gamma gaps whose coefficient of variation is 1 / sqrt(B), at the
/// rate asked for, over 2,000 session starts.
#[tokio::test(start_paused = true)]
async fn open_loop_gamma_arrivals_have_the_rate_and_the_burstiness() {
    for burstiness in [0.25, 1.0, 4.0] {
        let fake = Fake::uniform(100);
        let mut cfg = RunConfig::new("fake", 0);
        cfg.arrival = Some(Arrival {
            rate: 20.0,
            process: ArrivalProcess::Gamma { burstiness },
            seed: 11,
        });
        let out = play(sessions(2_001, 1), &fake, cfg).await;
        assert_eq!(out.turns.len(), 2_001);
        let mut due = vec![0.0; 2_001];
        for t in &out.turns {
            due[sid(&t.session_id) as usize] = t.sent_s;
        }
        let gaps: Vec<f64> = due.windows(2).map(|w| w[1] - w[0]).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let cv = sd / mean;
        let want = 1.0 / burstiness.sqrt();
        assert!(
            (mean - 0.05).abs() < 0.005,
            "B={burstiness}: mean gap {mean} s"
        );
        assert!(
            (cv - want).abs() <= 0.1 * want,
            "B={burstiness}: CV {cv:.3}, expected {want:.3} within 10%"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn open_loop_ends_when_the_last_session_ends() {
    let fake = Fake::uniform(100);
    let mut cfg = RunConfig::new("fake", 0);
    cfg.arrival = Some(Arrival {
        rate: 0.1,
        process: ArrivalProcess::Constant,
        seed: 1,
    });
    let out = play(sessions(2, 1), &fake, cfg).await;
    assert_eq!(out.turns.len(), 2);
    assert_eq!(out.stopped_by, StopReason::Exhausted);
    // Arrivals at 0 and 10 s, the last session ends at 10.1 s: nothing is left to wait for.
    assert_eq!(out.elapsed, ms(10_100));
}

// ---------------------------------------------------------------------------------------------
// 8. Warmup.

#[tokio::test(start_paused = true)]
async fn warmup_plays_cut_marked_sessions_first_then_the_whole_pool() {
    let fake = Fake::uniform(100);
    let events = Arc::new(Events::default());
    let mut cfg = RunConfig::new("fake", 2);
    cfg.warmup_sessions = 2;
    let out = run(
        plan(sessions(3, 10)),
        fake.clone(),
        cfg,
        vec![events.clone()],
        CancelToken::new(),
    )
    .await;

    assert_eq!(out.stopped_by, StopReason::Exhausted);
    // Warmup: s0 and s1, 3 turns each, 0..300 ms. Measured: s0, s1 300..1300, s2 1300..2300.
    assert_eq!(out.warmup_elapsed, ms(300));
    assert_eq!(out.elapsed, ms(2000));
    let warm: Vec<_> = out.turns.iter().filter(|t| t.warmup).collect();
    assert_eq!(warm.len(), 2 * WARMUP_TURNS);
    assert!(
        warm.iter()
            .all(|t| t.session_id != "s2" && t.turn_index < 3 && t.end_s <= 0.3)
    );
    assert_eq!(out.turns.len() - warm.len(), 30);
    let ws: Vec<_> = out.sessions.iter().filter(|s| s.warmup).collect();
    assert_eq!(ws.len(), 2);
    for s in &ws {
        assert_eq!(
            (s.status, s.turns_played, s.turns_planned),
            (SessionStatus::Completed, 3, 3)
        );
        assert_eq!(s.marker, Some(format!("[bench warmup {}]", s.session_id)));
    }
    let measured: Vec<_> = out.sessions.iter().filter(|s| !s.warmup).collect();
    assert_eq!(measured.len(), 3);
    assert!(measured.iter().all(|s| s.status == SessionStatus::Completed
        && s.turns_played == 10
        && s.marker.is_none()));
    // The server saw the warmup marker as the system message of the warmup plays only.
    for id in ["s0", "s1"] {
        let seen = fake.seen_of(id);
        assert_eq!(seen.len(), 3 + 10);
        for (n, s) in seen.iter().enumerate() {
            if n < 3 {
                assert_eq!(
                    s.messages[0],
                    ("system".into(), format!("[bench warmup {id}]"))
                );
            } else {
                assert_eq!(s.messages[0].0, "user");
            }
        }
    }
    assert_s(turns_of(&out, "s0")[0].sent_s, 300.0);

    // Events: the warmup phase, then the measuring one.
    let ev = events.0.lock().unwrap().clone();
    assert_eq!(ev[0], Ev::Started);
    assert_eq!(ev[1], Ev::Phase(Phase::Warmup));
    let m = ev
        .iter()
        .position(|e| *e == Ev::Phase(Phase::Measuring))
        .unwrap();
    assert_eq!(m, 2 + 6 + 2);
    assert!(
        ev[2..m]
            .iter()
            .all(|e| matches!(e, Ev::Turn { warmup: true } | Ev::Session { warmup: true }))
    );
    assert!(ev[m + 1..ev.len() - 1].iter().all(|e| matches!(
        e,
        Ev::Turn { warmup: false } | Ev::Session { warmup: false } | Ev::Phase(Phase::Draining)
    )));
    // The warmup never drains; the measured phase does, once.
    let drains = ev
        .iter()
        .filter(|e| matches!(e, Ev::Phase(Phase::Draining)));
    assert_eq!(drains.count(), 1);
    assert_eq!(ev.len(), m + 1 + 30 + 3 + 1 + 1);
    assert_eq!(ev.last(), Some(&Ev::Stopped(StopReason::Exhausted)));
}

/// When each phase event came, from the start of the run.
#[derive(Default)]
struct PhaseTimes(Mutex<Vec<(Phase, Duration)>>, Mutex<Option<Instant>>);

impl Observer for PhaseTimes {
    fn on_event(&self, e: &RunEvent<'_>) {
        let mut t0 = self.1.lock().unwrap();
        let t0 = *t0.get_or_insert_with(Instant::now);
        if let RunEvent::Phase(p) = e {
            self.0.lock().unwrap().push((*p, t0.elapsed()));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_run_drains_once_when_it_starts_no_further_session_or_turn() {
    // Pool used up: 3 sessions of 2 turns at C = 2 and 100 ms a turn. At 200 ms one worker
    // takes the last session and the other finds none: draining, while s2 plays to 400 ms.
    let fake = Fake::uniform(100);
    let times = Arc::new(PhaseTimes::default());
    let cfg = RunConfig::new("fake", 2);
    let out = run(
        plan(sessions(3, 2)),
        fake.clone(),
        cfg,
        vec![times.clone()],
        CancelToken::new(),
    )
    .await;
    assert_eq!(out.elapsed, ms(400));
    let t = times.0.lock().unwrap().clone();
    assert_eq!(
        t,
        vec![(Phase::Measuring, ms(0)), (Phase::Draining, ms(200))]
    );

    // Duration: plays of 300 ms loop until the 1050 ms deadline; the first turn boundary
    // after it (1100 ms) starts nothing more.
    let times = Arc::new(PhaseTimes::default());
    let mut cfg = RunConfig::new("fake", 2);
    cfg.limits.duration = Some(ms(1050));
    run(
        plan(sessions(2, 3)),
        fake.clone(),
        cfg,
        vec![times.clone()],
        CancelToken::new(),
    )
    .await;
    let t = times.0.lock().unwrap().clone();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1], (Phase::Draining, ms(1100)));

    // A cancel at 150 ms: the turns in flight end at 200 ms, where the sessions stop.
    let times = Arc::new(PhaseTimes::default());
    run(
        plan(sessions(4, 3)),
        fake,
        RunConfig::new("fake", 2),
        vec![times.clone()],
        cancel_at(ms(150)),
    )
    .await;
    let t = times.0.lock().unwrap().clone();
    assert_eq!(t.len(), 2);
    assert_eq!(t[1], (Phase::Draining, ms(200)));
}

#[tokio::test(start_paused = true)]
async fn a_ramp_up_spreads_the_first_sessions_and_counts_them_active_as_they_start() {
    // C = 4 over 1 s: workers start at 0, 250, 500 and 750 ms; turns take 1 s.
    let fake = Fake::uniform(1000);
    let mut cfg = RunConfig::new("fake", 4);
    cfg.ramp_up = Some(ms(1000));
    let out = play(sessions(4, 2), &fake, cfg).await;
    let mut firsts: Vec<(f64, u32)> = out
        .turns
        .iter()
        .filter(|t| t.turn_index == 0)
        .map(|t| (t.sent_s, t.active_at_dispatch))
        .collect();
    firsts.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (n, (sent, active)) in firsts.iter().enumerate() {
        assert_s(*sent, 250.0 * n as f64);
        assert_eq!(*active, n as u32 + 1);
    }
    // Second turns all see the 4 sessions active.
    assert!(
        out.turns
            .iter()
            .filter(|t| t.turn_index == 1)
            .all(|t| t.active_at_dispatch == 4)
    );
    assert_eq!(out.elapsed, ms(2750));
}

#[tokio::test(start_paused = true)]
async fn a_time_origin_shifts_every_record_offset() {
    let fake = Fake::uniform(100);
    let mut cfg = RunConfig::new("fake", 1);
    cfg.time_origin = Duration::from_secs(42);
    let out = play(sessions(1, 2), &fake, cfg).await;
    let t = turns_of(&out, "s0");
    assert_s(t[0].sent_s, 42_000.0);
    assert_s(t[0].end_s, 42_100.0);
    assert_s(t[1].due_s, 42_100.0);
    assert_s(out.sessions[0].start_s, 42_000.0);
    assert_s(out.sessions[0].end_s, 42_200.0);
}

#[tokio::test(start_paused = true)]
async fn the_duration_counts_from_the_end_of_the_warmup() {
    let fake = Fake::uniform(100);
    let mut cfg = RunConfig::new("fake", 2);
    cfg.warmup_sessions = 2;
    cfg.limits.duration = Some(ms(450));
    let out = play(sessions(3, 10), &fake, cfg).await;

    assert_eq!(out.stopped_by, StopReason::Duration);
    assert_eq!(out.warmup_elapsed, ms(300));
    // Measuring from 300 ms, deadline at 750 ms: turns sent at 300..700, cut at 800 ms.
    assert_eq!(out.elapsed, ms(500));
    let measured: Vec<_> = out.turns.iter().filter(|t| !t.warmup).collect();
    assert_eq!(measured.len(), 10);
    let last = measured.iter().map(|t| t.sent_s).fold(0.0, f64::max);
    assert_s(last, 700.0);
    let ms_: Vec<_> = out.sessions.iter().filter(|s| !s.warmup).collect();
    assert_eq!(ms_.len(), 2, "s2 never starts");
    assert!(
        ms_.iter()
            .all(|s| s.status == SessionStatus::Truncated && s.turns_played == 5)
    );
    assert!(
        out.sessions
            .iter()
            .filter(|s| s.warmup)
            .all(|s| s.status == SessionStatus::Completed)
    );
}

// ---------------------------------------------------------------------------------------------
// 9. Cancel.

fn cancel_at(after: Duration) -> CancelToken {
    let token = CancelToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        sleep(after).await;
        t.cancel();
    });
    token
}

#[tokio::test(start_paused = true)]
async fn cancel_cuts_a_tool_wait_at_once() {
    let fake = Fake::uniform(100);
    let pool = vec![session(0, 2, 20_000.0), session(1, 2, 0.0)];
    let out = run(
        plan(pool),
        fake.clone(),
        RunConfig::new("fake", 1),
        vec![],
        cancel_at(ms(1000)),
    )
    .await;

    assert_eq!(out.stopped_by, StopReason::Cancelled);
    assert_eq!(out.elapsed, ms(1000), "the 20 s wait is cut at the cancel");
    assert_eq!(fake.seen().len(), 1);
    assert_eq!(out.sessions.len(), 1, "no new session after a cancel");
    assert_eq!(out.sessions[0].status, SessionStatus::Truncated);
    assert_eq!(out.sessions[0].turns_played, 1);
    assert_s(out.sessions[0].end_s, 1000.0);
}

#[tokio::test(start_paused = true)]
async fn cancel_lets_turns_in_flight_finish() {
    let fake = Fake::uniform(100);
    let out = run(
        plan(sessions(2, 3)),
        fake.clone(),
        RunConfig::new("fake", 2),
        vec![],
        cancel_at(ms(50)),
    )
    .await;

    assert_eq!(out.stopped_by, StopReason::Cancelled);
    assert_eq!(out.elapsed, ms(100));
    assert_eq!(out.turns.len(), 2);
    assert!(
        out.turns
            .iter()
            .all(|t| t.status == TurnStatus::Ok && t.turn_index == 0)
    );
    assert!(
        out.sessions
            .iter()
            .all(|s| s.status == SessionStatus::Truncated)
    );
}

#[tokio::test(start_paused = true)]
async fn cancel_cuts_an_open_loop_arrival_wait() {
    let fake = Fake::uniform(100);
    let mut cfg = RunConfig::new("fake", 0);
    cfg.arrival = Some(Arrival {
        rate: 0.01,
        process: ArrivalProcess::Constant,
        seed: 1,
    });
    let out = run(
        plan(sessions(3, 1)),
        fake.clone(),
        cfg,
        vec![],
        cancel_at(ms(1000)),
    )
    .await;

    assert_eq!(out.stopped_by, StopReason::Cancelled);
    assert_eq!(
        out.elapsed,
        ms(1000),
        "the 100 s wait for the next arrival is cut"
    );
    assert_eq!(out.sessions.len(), 1);
    assert_eq!(out.sessions[0].status, SessionStatus::Completed);
    assert_eq!(out.arrivals_not_started, 0);
}

// ---------------------------------------------------------------------------------------------
// 10. A panicking transport loses only the session it was playing.

/// Panics on session `s1`'s second turn; otherwise the fake.
#[derive(Clone)]
struct PanicsOnS1T1(Fake);

impl Transport for PanicsOnS1T1 {
    fn send_turn(
        &self,
        body: Segments,
        stream: bool,
        opts: &RequestOptions,
    ) -> impl Future<Output = Result<TurnOutcome, Error>> + Send {
        let boom = String::from_utf8_lossy(&body.to_bytes()).contains("s1/t1");
        let inner = self.0.send_turn(body, stream, opts);
        async move {
            assert!(!boom, "scripted transport bug");
            inner.await
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_task_is_reported_and_loses_no_earlier_record() {
    let fake = Fake::uniform(100);
    let out = run(
        plan(sessions(4, 2)),
        PanicsOnS1T1(fake.clone()),
        RunConfig::new("fake", 2),
        vec![],
        CancelToken::new(),
    )
    .await;
    assert_eq!(out.task_failures.len(), 1, "{:?}", out.task_failures);
    // s1's worker dies at its second turn: s1/t0 is kept; s0 and whichever sessions the other
    // worker played are whole.
    assert!(turns_of(&out, "s1").len() == 1);
    assert_eq!(turns_of(&out, "s0").len(), 2);
    assert!(out.sessions.iter().all(|s| s.session_id != "s1"));
    assert_eq!(out.stopped_by, StopReason::Exhausted);
}
