//! Agent graphs under tokio's paused clock: the fork/join fixture planned from its file and
//! played against a scripted transport, so every send time below is exact.
//!
//! The fixture (`fixtures/graphs/native/fork_join.jsonl`): main:0, main:1, then three subagents
//! forked after main:1 (`explore-parser`, `explore-lexer`, `explore-tests`, two turns each,
//! first gaps 50/70/90 ms, second 80/90/100 ms), the join main:2 (300 ms after the slowest),
//! main:3 (150 ms), main:4 (100 ms). Nodes: main 0–4, parser 5–6, lexer 7–8, tests 9–10.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bench_rundir::record::{SessionStatus, TurnRecord, TurnStatus};
use bench_runner::{CancelToken, ContentMode, RunConfig, RunOutcome, Transport, run};
use bench_transport::{Error, ErrorKind, RequestOptions, Segments, TurnOutcome, Usage};
use bench_workload::plan::{DatasetSpec, Plan, PlanConfig, build_plan};
use bench_workload::tokenize::TokenizerSpec;
use tokio::time::{Instant, sleep};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../fixtures/graphs/native/fork_join.jsonl"
);

/// Every request takes this long.
const E2E_MS: u64 = 100;

#[derive(Debug, Clone)]
struct Seen {
    messages: Vec<(String, String)>,
    sent: Instant,
}

type Pred = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A chat server on tokio's clock: every answer after [`E2E_MS`], `answer to <last user
/// message>` as its text; a request whose last user message `fail` picks gets a server error.
#[derive(Clone, Default)]
struct Fake {
    fail: Option<Pred>,
    seen: Arc<Mutex<Vec<Seen>>>,
    in_flight: Arc<Mutex<(u32, u32)>>,
}

impl Fake {
    async fn serve(&self, body: bytes::Bytes) -> Result<TurnOutcome, Error> {
        let sent = Instant::now();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let messages: Vec<(String, String)> = v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_string(),
                    m["content"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let last_user = messages
            .iter()
            .rev()
            .find(|(r, _)| r == "user")
            .map(|m| m.1.clone())
            .unwrap_or_default();
        self.seen.lock().unwrap().push(Seen {
            messages: messages.clone(),
            sent,
        });
        {
            let mut f = self.in_flight.lock().unwrap();
            f.0 += 1;
            f.1 = f.1.max(f.0);
        }
        sleep(Duration::from_millis(E2E_MS)).await;
        self.in_flight.lock().unwrap().0 -= 1;
        if self.fail.as_ref().is_some_and(|f| f(&last_user)) {
            return Err(Error::new(ErrorKind::Server, "scripted failure"));
        }
        let content = format!("answer to {}", &last_user[..last_user.len().min(24)]);
        let out = 4;
        Ok(TurnOutcome {
            content,
            reasoning: String::new(),
            ttft: Some(Duration::from_millis(E2E_MS / 2)),
            ttfa: Some(Duration::from_millis(E2E_MS / 2)),
            e2e: Instant::now() - sent,
            reasoning_chunks: 0,
            answer_chunks: out,
            chunk_offsets: (0..out)
                .map(|k| Duration::from_millis(E2E_MS / 2 + u64::from(k)))
                .collect(),
            usage: Some(Usage {
                prompt_tokens: Some(100),
                completion_tokens: Some(u64::from(out)),
                total_tokens: Some(100 + u64::from(out)),
                cached_tokens: Some(50),
                cached_device_tokens: None,
                cached_host_tokens: None,
                reasoning_tokens: None,
            }),
            finish_reason: Some("length".into()),
            streamed: true,
            events: out + 2,
            body_bytes: 0,
            redials: 0,
            resent: 0,
            worker: None,
            connect: None,
            tls: None,
            response_id: None,
        })
    }
}

impl Transport for Fake {
    fn send_turn(
        &self,
        body: Segments,
        _stream: bool,
        _opts: &RequestOptions,
    ) -> impl Future<Output = Result<TurnOutcome, Error>> + Send {
        let me = self.clone();
        async move { me.serve(body.to_bytes()).await }
    }
}

fn plan() -> Arc<Plan> {
    let mut cfg = PlanConfig::new(DatasetSpec::Path(FIXTURE.into()));
    cfg.tokenizer = TokenizerSpec::Chars;
    cfg.raw_gaps = true;
    cfg.concurrency = 1;
    cfg.num_sessions = Some(1);
    Arc::new(build_plan(cfg).unwrap())
}

async fn play(fake: &Fake, cfg: RunConfig) -> RunOutcome {
    run(plan(), fake.clone(), cfg, vec![], CancelToken::new()).await
}

fn by_node(out: &RunOutcome) -> BTreeMap<u32, &TurnRecord> {
    out.turns.iter().map(|t| (t.turn_index, t)).collect()
}

#[track_caller]
fn assert_ms(x: f64, ms: u64) {
    assert!(
        (x - ms as f64 / 1000.0).abs() < 1e-6,
        "{x} s is not {ms} ms"
    );
}

#[tokio::test(start_paused = true)]
async fn nodes_are_sent_when_their_dependencies_end_and_their_gap_passes() {
    let fake = Fake::default();
    let out = play(&fake, RunConfig::new("fake", 1)).await;
    assert_eq!(out.turns.len(), 11);
    assert!(out.turns.iter().all(|t| t.status == TurnStatus::Ok));
    let r = by_node(&out);
    // (node, sent ms): each node is sent at the end of what it waits on, plus its gap.
    let expect = [
        (0, 0),
        (1, 300),  // main:0 ends at 100, +200
        (5, 450),  // main:1 ends at 400, +50
        (7, 470),  // +70
        (9, 490),  // +90
        (6, 630),  // parser:0 ends at 550, +80
        (8, 660),  // lexer:0 ends at 570, +90
        (10, 690), // tests:0 ends at 590, +100
        (2, 1090), // the slowest, tests:1, ends at 790, +300
        (3, 1340), // main:2 ends at 1190, +150
        (4, 1540), // main:3 ends at 1440, +100
    ];
    for (n, ms) in expect {
        assert_ms(r[&n].sent_s, ms);
        assert_ms(r[&n].end_s, ms + E2E_MS);
    }
    let node = |n: u32| r[&n].node.as_ref().unwrap();
    assert_eq!(node(2).after, vec![1, 6, 8, 10]);
    assert_eq!(node(2).released_by, Some(10));
    assert_ms(node(2).released_s, 790);
    assert_eq!(node(7).agent, "explore-lexer");
    assert_eq!(node(7).depth, 1);
    assert_eq!(node(0).depth, 0);
    // The three children were in flight together; -c counts sessions: one was active.
    assert_eq!(fake.in_flight.lock().unwrap().1, 3);
    assert_eq!(node(9).in_flight, 3);
    assert!(out.turns.iter().all(|t| t.active_at_dispatch == 1));
    let s = &out.sessions[0];
    assert_eq!(s.status, SessionStatus::Completed);
    assert_eq!((s.turns_played, s.turns_planned), (11, 11));
    // Busy: the time with a request in flight (the children's overlap counted once).
    assert!((s.busy_s - 0.800).abs() < 1e-6, "{}", s.busy_s);
}

#[tokio::test(start_paused = true)]
async fn a_child_starts_from_its_parents_context_and_a_join_gets_the_answers() {
    for mode in [ContentMode::Trace, ContentMode::Model] {
        let fake = Fake::default();
        let mut cfg = RunConfig::new("fake", 1);
        cfg.request.content_mode = mode;
        play(&fake, cfg).await;
        let seen = fake.seen.lock().unwrap().clone();
        let sent = |needle: &str| {
            seen.iter()
                .find(|s| s.messages.last().unwrap().1.contains(needle))
                .unwrap_or_else(|| panic!("no request ends with {needle:?}"))
                .clone()
        };
        let main1 = sent("Tool result: src/");
        let child = sent("Explore the lexer code");
        // The child's request: main:1's messages, main:1's answer, then its own message.
        let n = main1.messages.len();
        assert_eq!(child.messages[..n], main1.messages[..], "{mode:?}");
        assert_eq!(child.messages[n].0, "assistant");
        match mode {
            ContentMode::Trace => assert!(child.messages[n].1.starts_with("Spawning three")),
            ContentMode::Model => assert!(child.messages[n].1.starts_with("answer to Tool result")),
        }
        assert_eq!(child.messages.len(), n + 2);
        // The join: main:1's context, then the three subagents' last answers, then its own.
        let join = sent("All three explorers");
        let joined: Vec<&str> = join.messages[n + 1..n + 4]
            .iter()
            .map(|(r, c)| {
                assert_eq!(r, "user");
                c.as_str()
            })
            .collect();
        match mode {
            ContentMode::Trace => {
                assert!(joined[0].starts_with("In parser: finding"), "{joined:?}");
                assert!(joined[1].starts_with("In lexer: finding"), "{joined:?}");
                assert!(joined[2].starts_with("In tests: finding"), "{joined:?}");
            }
            ContentMode::Model => {
                assert!(
                    joined
                        .iter()
                        .all(|j| j.starts_with("answer to Tool result: source")),
                    "{joined:?}"
                );
            }
        }
        assert_eq!(join.messages.len(), n + 5, "{mode:?}");
        let _ = join.sent;
    }
}

/// The fixture played with the requests `fail` picks failing: which nodes failed themselves,
/// which were recorded `dependency_failed`, and how many requests reached the server.
async fn play_failing(fail: impl Fn(&str) -> bool + Send + Sync + 'static) -> (RunOutcome, usize) {
    let fake = Fake {
        fail: Some(Arc::new(fail)),
        ..Fake::default()
    };
    let out = play(&fake, RunConfig::new("fake", 1)).await;
    assert_eq!(out.turns.len(), 11, "every node is recorded");
    let seen = fake.seen.lock().unwrap().len();
    (out, seen)
}

fn kinds(out: &RunOutcome) -> BTreeMap<u32, Option<ErrorKind>> {
    out.turns
        .iter()
        .map(|t| (t.turn_index, t.error_kind))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_failed_node_fails_what_waits_on_it_not_its_siblings() {
    // lexer:1 (27 words "source") fails: the join waits on it, and the rest of main on the
    // join; the other subagents are not touched.
    let (out, seen) =
        play_failing(|m| m.starts_with("Tool result: source") && m.matches("source").count() == 27)
            .await;
    let k = kinds(&out);
    assert_eq!(k[&8], Some(ErrorKind::Server));
    for n in [2, 3, 4] {
        assert_eq!(k[&n], Some(ErrorKind::DependencyFailed), "node {n}");
        let r = out.turns.iter().find(|t| t.turn_index == n).unwrap();
        assert!(
            r.error.as_deref().unwrap().contains("explore-lexer:1"),
            "{:?}",
            r.error
        );
        assert_eq!((r.ttft_ms, r.status), (None, TurnStatus::Error));
    }
    for n in [0, 1, 5, 6, 7, 9, 10] {
        assert_eq!(k[&n], None, "node {n}");
    }
    assert_eq!(seen, 8, "what was not sent never reached the server");
    assert_eq!(out.sessions[0].status, SessionStatus::Failed);

    // The fork node fails: no subagent starts, and the join cannot happen.
    let (out, seen) = play_failing(|m| m.starts_with("Tool result: src/")).await;
    let k = kinds(&out);
    assert_eq!(k[&1], Some(ErrorKind::Server));
    for n in [5, 6, 7, 8, 9, 10, 2, 3, 4] {
        assert_eq!(k[&n], Some(ErrorKind::DependencyFailed), "node {n}");
    }
    assert_eq!(seen, 2);

    // A failed turn inside a subagent is followed by its next turn, as in a linear session
    // (the recorded answer takes its place): nothing waits on the failure across an edge.
    let (out, seen) = play_failing(|m| m.starts_with("Explore the lexer code")).await;
    let k = kinds(&out);
    assert_eq!(k[&7], Some(ErrorKind::Server));
    assert!(k.iter().all(|(n, e)| *n == 7 || e.is_none()), "{k:?}");
    assert_eq!(seen, 11);
}

#[tokio::test(start_paused = true)]
async fn warmup_plays_the_first_turns_of_each_branch_and_deadlines_cut_every_branch() {
    let fake = Fake::default();
    let mut cfg = RunConfig::new("fake", 1);
    cfg.warmup_sessions = 1;
    let out = play(&fake, cfg).await;
    let warm: Vec<u32> = out
        .turns
        .iter()
        .filter(|t| t.warmup)
        .map(|t| t.turn_index)
        .collect();
    // Three turns of each branch: main 0–2 and both turns of every subagent.
    assert_eq!(warm.len(), 9, "{warm:?}");
    assert!(!warm.contains(&3) && !warm.contains(&4));

    // A deadline in the middle of the subagents: what is cut is not sent, nor what waits on it.
    let fake = Fake::default();
    let mut cfg = RunConfig::new("fake", 1);
    cfg.limits.duration = Some(Duration::from_millis(600));
    let out = play(&fake, cfg).await;
    let sent: Vec<u32> = out.turns.iter().map(|t| t.turn_index).collect();
    assert!(sent.contains(&5) && !sent.contains(&2), "{sent:?}");
    let s = out.sessions.iter().find(|s| s.replay == 0).unwrap();
    assert_eq!(s.status, SessionStatus::Truncated);
}
