//! The four generation endpoints over real HTTP: each API's event sequence and bodies, reasoning,
//! usage with prefix-cache hits across turns, the Responses store, errors in each API's shape.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bench_sim::{LatencyMode, SimConfig, SimServer};
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Client, eventually, instant, start, temp_jsonl};

const CHAT: &str = "/v1/chat/completions";
const COMPLETIONS: &str = "/v1/completions";
const RESPONSES: &str = "/v1/responses";
const MESSAGES: &str = "/v1/messages";

/// Every event type the contract lets the Responses stream carry.
const RESPONSES_EVENTS: [&str; 14] = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.output_item.done",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

/// Every event type the contract lets the Messages stream carry.
const MESSAGES_EVENTS: [&str; 8] = [
    "message_start",
    "content_block_start",
    "ping",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "error",
];

/// One SSE event.
#[derive(Debug)]
struct Event {
    /// The `event:` line, if any.
    name: Option<String>,
    data: String,
    at: Instant,
}

impl Event {
    /// Parses `event: …` / `data: …` lines; anything else fails.
    fn parse(text: &str, at: Instant) -> Result<Self> {
        let (mut name, mut data) = (None, None);
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                ensure!(name.is_none(), "two event lines in {text:?}");
                name = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data: ") {
                ensure!(data.is_none(), "two data lines in {text:?}");
                data = Some(v.to_owned());
            } else {
                bail!("unexpected line {line:?}");
            }
        }
        Ok(Self {
            name,
            data: data.context("event without data")?,
            at,
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// A streamed reply.
struct Sse {
    status: StatusCode,
    headers: HeaderMap,
    sent: Instant,
    events: Vec<Event>,
}

impl Sse {
    /// The typed events (`event:` name checked against the data's `type`), in order.
    fn typed(&self) -> Vec<(String, Value)> {
        self.events
            .iter()
            .map(|e| {
                let v = e.json();
                let name = e.name.clone().expect("a typed event has an event line");
                assert_eq!(v["type"], name.as_str(), "event line and data type differ");
                (name, v)
            })
            .collect()
    }

    /// The event types with runs of the same type collapsed to `type×n`.
    fn shape(&self) -> Vec<String> {
        let mut out: Vec<(String, usize)> = Vec::new();
        for (ty, _) in self.typed() {
            match out.last_mut() {
                Some((last, n)) if *last == ty => *n += 1,
                _ => out.push((ty, 1)),
            }
        }
        out.into_iter()
            .map(|(ty, n)| if n == 1 { ty } else { format!("{ty}×{n}") })
            .collect()
    }

    /// The `data:` chunks of an OpenAI chunk stream (no event lines), which must end with
    /// `[DONE]`.
    fn chunks(&self) -> Vec<Value> {
        assert!(
            self.events.iter().all(|e| e.name.is_none()),
            "no event lines"
        );
        assert_eq!(self.events.last().map(|e| e.data.as_str()), Some("[DONE]"));
        self.events[..self.events.len() - 1]
            .iter()
            .map(Event::json)
            .collect()
    }

    /// Times of the typed events of type `ty`.
    fn times_of(&self, ty: &str) -> Vec<Instant> {
        self.events
            .iter()
            .filter(|e| e.json()["type"] == ty)
            .map(|e| e.at)
            .collect()
    }
}

impl Client {
    /// POSTs `body` to `path` and reads its SSE events: all of them, or the first `stop_after`
    /// (leaving the rest unread).
    async fn events(&mut self, path: &str, body: &Value, stop_after: Option<usize>) -> Result<Sse> {
        let req = self.request(Method::POST, path, Some(body));
        self.sender.ready().await?;
        let sent = Instant::now();
        let resp = self.sender.send_request(req).await?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let mut body = resp.into_body();
        let mut pending = Vec::new();
        let mut events = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame?.into_data() else {
                continue;
            };
            let now = Instant::now();
            pending.extend_from_slice(&data);
            while let Some(pos) = pending.windows(2).position(|w| w == b"\n\n") {
                let raw: Vec<u8> = pending.drain(..pos + 2).collect();
                events.push(Event::parse(std::str::from_utf8(&raw)?.trim_end(), now)?);
            }
            if stop_after.is_some_and(|n| events.len() >= n) {
                break;
            }
        }
        if stop_after.is_none() {
            ensure!(
                pending.is_empty(),
                "trailing bytes without event terminator"
            );
        }
        Ok(Sse {
            status,
            headers,
            sent,
            events,
        })
    }
}

fn words(s: &Value) -> usize {
    s.as_str().unwrap().split_whitespace().count()
}

fn reasoning(n: u32) -> SimConfig {
    SimConfig {
        reasoning_tokens: n,
        ..instant()
    }
}

fn chat_body(messages: Value, max: u32, stream: bool) -> Value {
    json!({"model": "bench-sim", "messages": messages, "max_tokens": max, "stream": stream,
           "stream_options": {"include_usage": true}, "ignore_eos": true})
}

fn completion_body(prompt: &str, max: u32, stream: bool) -> Value {
    json!({"model": "bench-sim", "prompt": prompt, "max_tokens": max, "stream": stream,
           "stream_options": {"include_usage": true}, "ignore_eos": true})
}

fn responses_body(input: Value, max: u32, stream: bool) -> Value {
    json!({"model": "bench-sim", "input": input, "max_output_tokens": max, "stream": stream,
           "ignore_eos": true})
}

fn messages_body(messages: Value, max: u32, stream: bool) -> Value {
    json!({"model": "bench-sim", "messages": messages, "max_tokens": max, "stream": stream,
           "ignore_eos": true})
}

#[tokio::test]
async fn chat_reasoning_comes_first_as_reasoning_content() -> Result<()> {
    let (sim, mut c) = start(reasoning(5)).await?;
    let msgs = json!([{"role": "user", "content": "think"}]);
    let s = c
        .events(CHAT, &chat_body(msgs.clone(), 12, true), None)
        .await?;
    assert_eq!(s.status, StatusCode::OK);
    let chunks = s.chunks();
    // Role chunk, 12 tokens, usage chunk.
    assert_eq!(chunks.len(), 14);
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    for (i, ch) in chunks[1..13].iter().enumerate() {
        let delta = &ch["choices"][0]["delta"];
        let (field, other) = if i < 5 {
            ("reasoning_content", "content")
        } else {
            ("content", "reasoning_content")
        };
        assert_eq!(words(&delta[field]), 1, "token {i}: {delta}");
        assert!(delta.get(other).is_none(), "token {i}: {delta}");
        let fin = &ch["choices"][0]["finish_reason"];
        assert_eq!(i == 11, !fin.is_null(), "token {i}");
    }
    let u = &chunks[13]["usage"];
    assert_eq!(u["completion_tokens"], 12);
    assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 5);

    let whole = c
        .post(CHAT, &chat_body(msgs.clone(), 12, false))
        .await?
        .json();
    let m = &whole["choices"][0]["message"];
    assert_eq!(words(&m["reasoning_content"]), 5);
    assert_eq!(words(&m["content"]), 7);
    assert_eq!(
        whole["usage"]["completion_tokens_details"]["reasoning_tokens"],
        5
    );

    // Shorter than the reasoning: every token is reasoning.
    let s = c.events(CHAT, &chat_body(msgs, 3, true), None).await?;
    let chunks = s.chunks();
    assert_eq!(chunks.len(), 5);
    assert!(
        chunks[1..4]
            .iter()
            .all(|ch| ch["choices"][0]["delta"].get("reasoning_content").is_some())
    );
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
    assert_eq!(
        chunks[4]["usage"]["completion_tokens_details"]["reasoning_tokens"],
        3
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn chat_without_reasoning_reports_no_reasoning_details() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let s = c
        .events(CHAT, &chat_body(msgs.clone(), 4, true), None)
        .await?;
    let chunks = s.chunks();
    assert!(
        chunks[5]["usage"]
            .get("completion_tokens_details")
            .is_none()
    );
    let whole = c.post(CHAT, &chat_body(msgs, 4, false)).await?.json();
    assert!(
        whole["choices"][0]["message"]
            .get("reasoning_content")
            .is_none()
    );
    assert!(whole["usage"].get("completion_tokens_details").is_none());
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn completions_stream_and_whole() -> Result<()> {
    // Reasoning is plain text on the legacy endpoint.
    let (sim, mut c) = start(reasoning(3)).await?;
    let s = c
        .events(COMPLETIONS, &completion_body("Once upon", 10, true), None)
        .await?;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.headers["content-type"], "text/event-stream");
    let chunks = s.chunks();
    assert_eq!(chunks.len(), 11, "10 tokens and the usage chunk");
    for (i, ch) in chunks[..10].iter().enumerate() {
        assert_eq!(ch["object"], "text_completion");
        assert!(ch["id"].as_str().unwrap().starts_with("cmpl-"));
        assert_eq!(ch["model"], "bench-sim");
        let choice = &ch["choices"][0];
        assert_eq!(words(&choice["text"]), 1);
        assert!(choice["logprobs"].is_null());
        assert_eq!(choice["finish_reason"].is_null(), i < 9);
        assert!(choice.get("delta").is_none());
    }
    assert_eq!(chunks[9]["choices"][0]["finish_reason"], "length");
    let u = &chunks[10];
    assert_eq!(u["choices"], json!([]));
    // "Once upon" = 9 bytes = 3 tokens.
    assert_eq!(u["usage"]["prompt_tokens"], 3);
    assert_eq!(u["usage"]["completion_tokens"], 10);
    assert_eq!(u["usage"]["total_tokens"], 13);
    assert_eq!(u["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    assert!(u["usage"].get("completion_tokens_details").is_none());

    let r = c
        .post(COMPLETIONS, &completion_body("Once upon", 10, false))
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(words(&v["choices"][0]["text"]), 10);
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 10);
    // Without include_usage: no usage chunk.
    let s = c
        .events(
            COMPLETIONS,
            &json!({"prompt": ["a", "b"], "max_tokens": 2, "stream": true, "ignore_eos": true}),
            None,
        )
        .await?;
    assert_eq!(s.chunks().len(), 2);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn responses_stream_the_contract_sequence() -> Result<()> {
    let (sim, mut c) = start(reasoning(3)).await?;
    let s = c
        .events(RESPONSES, &responses_body(json!("why?"), 8, true), None)
        .await?;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(
        s.shape(),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_text.delta×3",
            "response.reasoning_text.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta×5",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ]
    );
    let ev = s.typed();
    for (i, (_, v)) in ev.iter().enumerate() {
        assert_eq!(
            v["sequence_number"], i,
            "sequence numbers count every event"
        );
    }
    let created = &ev[0].1["response"];
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("resp_"));
    assert_eq!(created["object"], "response");
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["output"], json!([]));
    let rs = &ev[2].1;
    assert_eq!(rs["output_index"], 0);
    assert_eq!(rs["item"]["type"], "reasoning");
    let rs_id = rs["item"]["id"].as_str().unwrap();
    assert!(rs_id.starts_with("rs_"));
    let mut reasoning_text = String::new();
    for (_, d) in &ev[3..6] {
        assert_eq!(d["item_id"], rs_id);
        assert_eq!(
            (d["output_index"].as_u64(), d["content_index"].as_u64()),
            (Some(0), Some(0))
        );
        reasoning_text.push_str(d["delta"].as_str().unwrap());
    }
    assert_eq!(ev[6].1["text"], reasoning_text.as_str());
    let msg = &ev[8].1;
    assert_eq!(msg["output_index"], 1);
    assert_eq!(msg["item"]["type"], "message");
    assert_eq!(msg["item"]["role"], "assistant");
    let msg_id = msg["item"]["id"].as_str().unwrap();
    assert!(msg_id.starts_with("msg_"));
    assert_eq!(ev[9].1["part"], json!({"type": "output_text", "text": ""}));
    let text: String = ev[10..15]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["item_id"], msg_id);
            assert_eq!(d["output_index"], 1);
            d["delta"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ev[15].1["text"], text.as_str());
    let done = &ev[18].1["response"];
    assert_eq!(done["id"], id);
    assert_eq!(done["status"], "incomplete");
    assert_eq!(done["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(
        done["output"][0]["content"][0]["text"],
        reasoning_text.as_str()
    );
    assert_eq!(done["output"][1]["content"][0]["text"], text.as_str());
    // "<|user|>\nwhy?\n" = 14 bytes = 4 tokens.
    assert_eq!(
        done["usage"],
        json!({"input_tokens": 4, "input_tokens_details": {"cached_tokens": 0},
               "output_tokens": 8, "output_tokens_details": {"reasoning_tokens": 3},
               "total_tokens": 12})
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn responses_without_reasoning_and_whole() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        seed: 7,
        ..instant()
    })
    .await?;
    let s = c
        .events(RESPONSES, &responses_body(json!("hi"), 4, true), None)
        .await?;
    assert_eq!(
        s.shape(),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta×4",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.incomplete",
        ]
    );
    assert_eq!(s.typed()[2].1["output_index"], 0);
    let u = &s.typed()[11].1["response"]["usage"];
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);
    // A natural stop is `response.completed`.
    let mut stopped = false;
    for _ in 0..10 {
        let body = json!({"input": "tell me", "max_output_tokens": 200, "stream": true});
        let s = c.events(RESPONSES, &body, None).await?;
        let (last, v) = s.typed().pop().unwrap();
        let n = v["response"]["usage"]["output_tokens"].as_u64().unwrap();
        assert_eq!(
            last == "response.completed",
            n < 200,
            "{last} after {n} tokens"
        );
        if last == "response.completed" {
            assert_eq!(v["response"]["status"], "completed");
            assert!(v["response"].get("incomplete_details").is_none());
            stopped = true;
            break;
        }
    }
    assert!(stopped, "no natural stop in 10 answers of up to 200 tokens");

    let r = c
        .post(RESPONSES, &responses_body(json!("hi"), 6, false))
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "incomplete");
    assert_eq!(v["output"].as_array().unwrap().len(), 1);
    let item = &v["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["content"][0]["type"], "output_text");
    assert_eq!(item["content"][0]["annotations"], json!([]));
    assert_eq!(words(&item["content"][0]["text"]), 6);
    assert_eq!(v["usage"]["output_tokens"], 6);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn responses_whole_with_reasoning() -> Result<()> {
    let (sim, mut c) = start(reasoning(4)).await?;
    let v = c
        .post(RESPONSES, &responses_body(json!("q"), 10, false))
        .await?
        .json();
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(out[0]["summary"], json!([]));
    assert_eq!(out[0]["content"][0]["type"], "reasoning_text");
    assert_eq!(words(&out[0]["content"][0]["text"]), 4);
    assert_eq!(words(&out[1]["content"][0]["text"]), 6);
    assert_eq!(v["usage"]["output_tokens_details"]["reasoning_tokens"], 4);
    // All reasoning: no message item, streamed or not.
    let v = c
        .post(RESPONSES, &responses_body(json!("q"), 2, false))
        .await?
        .json();
    assert_eq!(v["output"].as_array().unwrap().len(), 1);
    assert_eq!(v["output"][0]["type"], "reasoning");
    let s = c
        .events(RESPONSES, &responses_body(json!("q"), 2, true), None)
        .await?;
    assert_eq!(
        s.shape(),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_text.delta×2",
            "response.reasoning_text.done",
            "response.output_item.done",
            "response.incomplete",
        ]
    );
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn messages_stream_the_contract_sequence() -> Result<()> {
    let (sim, mut c) = start(reasoning(2)).await?;
    let msgs = json!([{"role": "user", "content": "why?"}]);
    let s = c
        .events(MESSAGES, &messages_body(msgs.clone(), 6, true), None)
        .await?;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(
        s.shape(),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta×3",
            "content_block_stop",
            "content_block_start",
            "content_block_delta×4",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let ev = s.typed();
    let m = &ev[0].1["message"];
    assert!(m["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(m["type"], "message");
    assert_eq!(m["role"], "assistant");
    assert_eq!(m["model"], "bench-sim");
    assert_eq!(m["content"], json!([]));
    assert!(m["stop_reason"].is_null() && m["stop_sequence"].is_null());
    assert_eq!(
        m["usage"],
        json!({"input_tokens": 4, "cache_creation_input_tokens": 0,
               "cache_read_input_tokens": 0, "output_tokens": 1})
    );
    assert_eq!(
        ev[1].1,
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": ""}})
    );
    for (_, d) in &ev[3..5] {
        assert_eq!(d["index"], 0);
        assert_eq!(d["delta"]["type"], "thinking_delta");
        assert_eq!(words(&d["delta"]["thinking"]), 1);
    }
    assert_eq!(ev[5].1["delta"]["type"], "signature_delta");
    assert!(
        ev[5].1["delta"]["signature"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    assert_eq!(ev[6].1, json!({"type": "content_block_stop", "index": 0}));
    assert_eq!(
        ev[7].1,
        json!({"type": "content_block_start", "index": 1,
               "content_block": {"type": "text", "text": ""}})
    );
    for (_, d) in &ev[8..12] {
        assert_eq!(d["index"], 1);
        assert_eq!(d["delta"]["type"], "text_delta");
        assert_eq!(words(&d["delta"]["text"]), 1);
    }
    assert_eq!(ev[12].1, json!({"type": "content_block_stop", "index": 1}));
    assert_eq!(
        ev[13].1,
        json!({"type": "message_delta",
               "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
               "usage": {"output_tokens": 6}})
    );
    assert_eq!(ev[14].1, json!({"type": "message_stop"}));

    let r = c.post(MESSAGES, &messages_body(msgs, 6, false)).await?;
    assert_eq!(r.status, StatusCode::OK);
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["stop_reason"], "max_tokens");
    assert!(v["stop_sequence"].is_null());
    let content = v["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(words(&content[0]["thinking"]), 2);
    assert!(content[0]["signature"].is_string());
    assert_eq!(content[1]["type"], "text");
    assert_eq!(words(&content[1]["text"]), 4);
    assert_eq!(v["usage"]["output_tokens"], 6);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn messages_without_reasoning_and_a_natural_stop() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let s = c
        .events(MESSAGES, &messages_body(msgs.clone(), 3, true), None)
        .await?;
    assert_eq!(
        s.shape(),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta×3",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    assert_eq!(s.typed()[1].1["content_block"]["type"], "text");
    let mut stopped = false;
    for _ in 0..10 {
        let body = json!({"messages": msgs, "max_tokens": 200});
        let v = c.post(MESSAGES, &body).await?.json();
        let n = v["usage"]["output_tokens"].as_u64().unwrap();
        let content = v["content"].as_array().unwrap();
        assert_eq!(content.len(), 1);
        assert_eq!(words(&content[0]["text"]) as u64, n);
        if v["stop_reason"] == "end_turn" {
            assert!(n < 200);
            stopped = true;
            break;
        }
        assert_eq!(v["stop_reason"], "max_tokens");
    }
    assert!(stopped, "no natural stop in 10 answers of up to 200 tokens");
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn messages_without_max_tokens_is_a_400_in_anthropic_shape() -> Result<()> {
    let (sim, mut c) = start(instant()).await?;
    let req = Request::builder()
        .method(Method::POST)
        .uri(MESSAGES)
        .header("host", "x")
        .header("x-api-key", "sk-anything")
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string(),
        )))?;
    let r = c.send(req).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json(),
        json!({"type": "error", "error": {"type": "invalid_request_error",
               "message": "max_tokens: Field required"}})
    );
    // The same headers with max_tokens: served.
    let req = Request::builder()
        .method(Method::POST)
        .uri(MESSAGES)
        .header("host", "x")
        .header("x-api-key", "sk-anything")
        .header("anthropic-version", "2023-06-01")
        .body(Full::new(Bytes::from(
            messages_body(json!([{"role": "user", "content": "hi"}]), 2, false).to_string(),
        )))?;
    assert_eq!(c.send(req).await?.status, StatusCode::OK);
    assert_eq!(sim.stats().errors_total, 1);
    sim.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn errors_come_in_each_apis_shape() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        max_model_len: 100,
        ..instant()
    })
    .await?;
    let long = "a".repeat(500);
    // Too long for the context: 400 in every API's shape.
    let r = c
        .post(RESPONSES, &responses_body(json!(long), 10, true))
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let e = &r.json()["error"];
    assert_eq!(e["type"], "invalid_request_error");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("maximum context length is 100")
    );
    assert!(e["param"].is_null() && e["code"].is_null());
    let r = c
        .post(
            MESSAGES,
            &messages_body(json!([{"role": "user", "content": long}]), 10, false),
        )
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = c
        .post(COMPLETIONS, &completion_body(&long, 10, false))
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["code"], 400);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in the prompt")
    );
    // Invalid JSON and limits below 1.
    let r = c.post(RESPONSES, &json!({"input": 5})).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = c
        .post(RESPONSES, &json!({"input": "x", "max_output_tokens": 0}))
        .await?;
    assert_eq!(
        r.json()["error"]["message"],
        "max_output_tokens must be at least 1, got 0"
    );
    let r = c
        .post(MESSAGES, &json!({"max_tokens": 5, "messages": []}))
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    // Wrong method: 405 with Allow: POST, in the path's API shape.
    let r = c.get(MESSAGES).await?;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers["allow"], "POST");
    assert_eq!(r.json()["type"], "error");
    let r = c.get(RESPONSES).await?;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.headers["allow"], "POST");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = c.get(COMPLETIONS).await?;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.json()["error"]["code"], 405);
    assert_eq!(sim.stats().errors_total, 6);
    sim.shutdown().await;
    Ok(())
}

/// Prompt bytes of the rendered conversation (`<|role|>\n` + text + `\n` per message).
fn rendered_len(messages: &[(&str, &str)]) -> usize {
    messages
        .iter()
        .map(|(r, t)| r.len() + 5 + t.len() + 1)
        .sum()
}

/// Tokens served from the cache for a prompt starting with `bytes` bytes already cached as
/// full blocks: whole 64-byte blocks (16 tokens of 4 bytes).
fn cached_for(bytes: usize) -> u64 {
    (bytes / 64 * 16) as u64
}

/// Each endpoint's request for a conversation, and how it reports usage and the answer.
#[derive(Clone, Copy, Debug)]
enum Ep {
    Chat,
    Completions,
    Responses,
    Messages,
}

impl Ep {
    fn path(self) -> &'static str {
        match self {
            Ep::Chat => CHAT,
            Ep::Completions => COMPLETIONS,
            Ep::Responses => RESPONSES,
            Ep::Messages => MESSAGES,
        }
    }

    fn body(self, convo: &[(&str, &str)], max: u32, stream: bool) -> Value {
        let msgs: Vec<Value> = convo
            .iter()
            .map(|(r, t)| json!({"role": r, "content": t}))
            .collect();
        match self {
            Ep::Chat => chat_body(json!(msgs), max, stream),
            Ep::Completions => {
                let text: String = convo.iter().map(|(_, t)| *t).collect();
                completion_body(&text, max, stream)
            }
            Ep::Responses => responses_body(json!(msgs), max, stream),
            Ep::Messages => messages_body(json!(msgs), max, stream),
        }
    }

    /// Bytes of the prompt the simulator renders for `convo`.
    fn prompt_len(self, convo: &[(&str, &str)]) -> usize {
        match self {
            Ep::Completions => convo.iter().map(|(_, t)| t.len()).sum(),
            _ => rendered_len(convo),
        }
    }

    /// (prompt, cached) tokens and the answer of a whole response.
    fn read_whole(self, v: &Value) -> (u64, u64, String) {
        let u = &v["usage"];
        let n = |v: &Value| v.as_u64().unwrap();
        match self {
            Ep::Chat => (
                n(&u["prompt_tokens"]),
                n(&u["prompt_tokens_details"]["cached_tokens"]),
                v["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
            Ep::Completions => (
                n(&u["prompt_tokens"]),
                n(&u["prompt_tokens_details"]["cached_tokens"]),
                v["choices"][0]["text"].as_str().unwrap().to_owned(),
            ),
            Ep::Responses => (
                n(&u["input_tokens"]),
                n(&u["input_tokens_details"]["cached_tokens"]),
                v["output"][0]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
            Ep::Messages => (
                n(&u["input_tokens"]) + n(&u["cache_read_input_tokens"]),
                n(&u["cache_read_input_tokens"]),
                v["content"][0]["text"].as_str().unwrap().to_owned(),
            ),
        }
    }

    /// (prompt, cached) tokens of a streamed response.
    fn read_streamed(self, s: &Sse) -> (u64, u64) {
        let n = |v: &Value| v.as_u64().unwrap();
        match self {
            Ep::Chat | Ep::Completions => {
                let chunks = s.chunks();
                let u = &chunks.last().unwrap()["usage"];
                (
                    n(&u["prompt_tokens"]),
                    n(&u["prompt_tokens_details"]["cached_tokens"]),
                )
            }
            Ep::Responses => {
                let (_, v) = s.typed().pop().unwrap();
                let u = &v["response"]["usage"];
                (
                    n(&u["input_tokens"]),
                    n(&u["input_tokens_details"]["cached_tokens"]),
                )
            }
            Ep::Messages => {
                let (_, v) = s.typed().swap_remove(0);
                let u = &v["message"]["usage"];
                assert_eq!(u["cache_creation_input_tokens"], 0);
                let cached = n(&u["cache_read_input_tokens"]);
                (n(&u["input_tokens"]) + cached, cached)
            }
        }
    }
}

/// Turn 2 (streamed) of a conversation hits turn 1's prompt, turn 3 (whole) hits turn 2's, on
/// every endpoint: each prompt starts with the previous prompt and its answer.
#[tokio::test]
async fn every_endpoint_hits_the_prefix_cache_on_later_turns() -> Result<()> {
    for ep in [Ep::Chat, Ep::Completions, Ep::Responses, Ep::Messages] {
        let (sim, mut c) = start(instant()).await?;
        let q1 = "x".repeat(990);
        let mut convo: Vec<(&str, &str)> = vec![("user", &q1)];
        let r = c.post(ep.path(), &ep.body(&convo, 30, false)).await?;
        assert_eq!(r.status, StatusCode::OK, "{ep:?}");
        let (p1, cached1, a1) = ep.read_whole(&r.json());
        assert_eq!(cached1, 0, "{ep:?}");
        assert_eq!(p1 as usize, ep.prompt_len(&convo).div_ceil(4), "{ep:?}");
        let len1 = ep.prompt_len(&convo);

        convo.push(("assistant", &a1));
        convo.push(("user", " and then?"));
        let s = c
            .events(ep.path(), &ep.body(&convo, 30, true), None)
            .await?;
        let (p2, cached2) = ep.read_streamed(&s);
        assert_eq!(p2 as usize, ep.prompt_len(&convo).div_ceil(4), "{ep:?}");
        assert_eq!(
            cached2,
            cached_for(len1),
            "{ep:?}: turn 2 hits turn 1's prompt"
        );
        let len2 = ep.prompt_len(&convo);

        // Turn 3 reuses turn 2's answer text from a whole response of the same prompt.
        let r = c.post(ep.path(), &ep.body(&convo, 30, false)).await?;
        let (_, _, a2) = ep.read_whole(&r.json());
        convo.push(("assistant", &a2));
        convo.push(("user", " more"));
        let r = c.post(ep.path(), &ep.body(&convo, 30, false)).await?;
        let (p3, cached3, _) = ep.read_whole(&r.json());
        assert_eq!(p3 as usize, ep.prompt_len(&convo).div_ceil(4), "{ep:?}");
        assert_eq!(
            cached3,
            cached_for(len2),
            "{ep:?}: turn 3 hits turn 2's prompt"
        );
        assert!(cached3 > cached2, "{ep:?}");
        sim.shutdown().await;
    }
    Ok(())
}

/// `previous_response_id` (server-side state) renders the same prompts as resending the
/// conversation (client-side state): the same prompt and cached tokens at every turn.
#[tokio::test]
async fn previous_response_id_chains_like_client_state() -> Result<()> {
    let q1 = "y".repeat(990);
    let questions = [q1.as_str(), " second question", " third question"];
    let instructions = "You are terse.";

    // Server-side state; turn 2 streamed (a streamed answer is stored too).
    let (sim, mut c) = start(SimConfig {
        reasoning_tokens: 2,
        ..instant()
    })
    .await?;
    let mut server = Vec::new();
    let mut answers = Vec::new();
    let mut prev: Option<String> = None;
    for (turn, q) in questions.iter().enumerate() {
        let mut body = responses_body(json!(q), 12, turn == 1);
        body["instructions"] = json!(instructions);
        if let Some(id) = &prev {
            body["previous_response_id"] = json!(id);
        }
        let v = if turn == 1 {
            let s = c.events(RESPONSES, &body, None).await?;
            s.typed().pop().unwrap().1["response"].clone()
        } else {
            c.post(RESPONSES, &body).await?.json()
        };
        assert_eq!(v["output"][0]["type"], "reasoning");
        answers.push(
            v["output"][1]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        server.push((
            v["usage"]["input_tokens"].clone(),
            v["usage"]["input_tokens_details"]["cached_tokens"].clone(),
        ));
        prev = Some(v["id"].as_str().unwrap().to_owned());
    }
    sim.shutdown().await;

    // Client-side state: every item resent, the output items as the server sent them
    // (reasoning included), on a fresh simulator with the same seed.
    let (sim, mut c) = start(SimConfig {
        reasoning_tokens: 2,
        ..instant()
    })
    .await?;
    let mut input: Vec<Value> = Vec::new();
    let mut client = Vec::new();
    for (turn, q) in questions.iter().enumerate() {
        input.push(json!({"role": "user", "content": q}));
        let mut body = responses_body(json!(input), 12, false);
        body["instructions"] = json!(instructions);
        body["store"] = json!(false);
        let v = c.post(RESPONSES, &body).await?.json();
        assert_eq!(
            v["output"][1]["content"][0]["text"], answers[turn],
            "same seed, same answers"
        );
        client.push((
            v["usage"]["input_tokens"].clone(),
            v["usage"]["input_tokens_details"]["cached_tokens"].clone(),
        ));
        input.extend(v["output"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(server, client);
    assert!(server[1].1.as_u64().unwrap() > 0, "turn 2 hits the cache");
    assert!(server[2].1.as_u64().unwrap() > server[1].1.as_u64().unwrap());

    // A response sent with store: false cannot be continued.
    let mut body = responses_body(json!("x"), 2, false);
    body["store"] = json!(false);
    let unstored = c.post(RESPONSES, &body).await?.json()["id"].clone();
    let r = c
        .post(
            RESPONSES,
            &json!({"input": "y", "previous_response_id": unstored}),
        )
        .await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let id = unstored.as_str().unwrap();
    assert_eq!(
        r.json(),
        json!({"error": {"message": format!("Previous response with id '{id}' not found."),
               "type": "invalid_request_error", "param": "previous_response_id",
               "code": "previous_response_not_found"}})
    );
    let r = c
        .post(
            RESPONSES,
            &json!({"input": "y", "previous_response_id": "resp_nope", "stream": true}),
        )
        .await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["code"], "previous_response_not_found");
    assert_eq!(sim.stats().errors_total, 2);
    sim.shutdown().await;
    Ok(())
}

/// Only the contract's event types, whatever the reasoning split; the typed streams end after
/// their terminal event (no `[DONE]`), the chunk streams with `[DONE]`.
#[tokio::test]
async fn only_contract_event_types_are_sent() -> Result<()> {
    for r in [0, 3, 50] {
        let (sim, mut c) = start(SimConfig {
            seed: u64::from(r),
            ..reasoning(r)
        })
        .await?;
        for max in [1, 5, 20] {
            for ignore_eos in [true, false] {
                let mut body = responses_body(json!("q"), max, true);
                body["ignore_eos"] = json!(ignore_eos);
                let s = c.events(RESPONSES, &body, None).await?;
                for (ty, _) in s.typed() {
                    assert!(
                        RESPONSES_EVENTS.contains(&ty.as_str()),
                        "unknown event {ty}"
                    );
                }
                let (last, _) = s.typed().pop().unwrap();
                assert!(matches!(
                    last.as_str(),
                    "response.completed" | "response.incomplete"
                ));
                let mut body = messages_body(json!([{"role": "user", "content": "q"}]), max, true);
                body["ignore_eos"] = json!(ignore_eos);
                let s = c.events(MESSAGES, &body, None).await?;
                for (ty, _) in s.typed() {
                    assert!(MESSAGES_EVENTS.contains(&ty.as_str()), "unknown event {ty}");
                }
                assert_eq!(s.typed().pop().unwrap().0, "message_stop");
                for (path, body) in [
                    (
                        CHAT,
                        chat_body(json!([{"role": "user", "content": "q"}]), max, true),
                    ),
                    (COMPLETIONS, completion_body("q", max, true)),
                ] {
                    let s = c.events(path, &body, None).await?;
                    s.chunks();
                }
            }
        }
        sim.shutdown().await;
    }
    Ok(())
}

/// Reasoning tokens follow the same per-token schedule as answer tokens (Fixed mode).
#[tokio::test]
async fn reasoning_keeps_the_fixed_schedule() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        mode: LatencyMode::Fixed {
            ttft: Duration::from_millis(60),
            itl: Duration::from_millis(15),
        },
        reasoning_tokens: 3,
        worker_id: Some("w2".to_owned()),
        ..SimConfig::default()
    })
    .await?;
    for path in [RESPONSES, MESSAGES] {
        let body = if path == RESPONSES {
            responses_body(json!("q"), 7, true)
        } else {
            messages_body(json!([{"role": "user", "content": "q"}]), 7, true)
        };
        let s = c.events(path, &body, None).await?;
        assert_eq!(s.headers["x-worker-id"], "w2");
        let times: Vec<Instant> = if path == RESPONSES {
            let mut t = s.times_of("response.reasoning_text.delta");
            t.extend(s.times_of("response.output_text.delta"));
            t
        } else {
            s.times_of("content_block_delta")
                .into_iter()
                .enumerate()
                // The signature delta arrives with the first text token.
                .filter(|(i, _)| *i != 3)
                .map(|(_, t)| t)
                .collect()
        };
        assert_eq!(times.len(), 7, "{path}");
        let ttft = (times[0] - s.sent).as_secs_f64() * 1e3;
        assert!((60.0..110.0).contains(&ttft), "{path}: ttft {ttft} ms");
        let itl = (times[6] - times[0]).as_secs_f64() * 1e3 / 6.0;
        assert!((14.0..35.0).contains(&itl), "{path}: itl {itl} ms");
        // No gap at the switch from reasoning to answer beyond one token's.
        let switch = (times[3] - times[2]).as_secs_f64() * 1e3;
        assert!(
            (5.0..50.0).contains(&switch),
            "{path}: switch gap {switch} ms"
        );
    }
    sim.shutdown().await;
    Ok(())
}

/// The continuous-batching engine serves the new endpoints too: prefix hits reported in
/// Anthropic's `message_start`, and a client gone mid-stream frees its slot.
#[tokio::test]
async fn model_mode_serves_and_aborts_the_new_endpoints() -> Result<()> {
    let (sim, mut c) = start(SimConfig {
        decode_step_base_ms: 2.0,
        ..SimConfig::default()
    })
    .await?;
    let msgs = json!([{"role": "user", "content": "z".repeat(990)}]);
    c.events(MESSAGES, &messages_body(msgs.clone(), 3, true), None)
        .await?;
    let s = c
        .events(MESSAGES, &messages_body(msgs, 3, true), None)
        .await?;
    let u = &s.typed()[0].1["message"]["usage"];
    assert_eq!(u["cache_read_input_tokens"], 240);
    assert_eq!(u["input_tokens"], 10);
    for (path, body) in [
        (RESPONSES, responses_body(json!("long"), 10_000, true)),
        (
            MESSAGES,
            messages_body(json!([{"role": "user", "content": "long"}]), 10_000, true),
        ),
        (COMPLETIONS, completion_body("long", 10_000, true)),
    ] {
        let aborted = sim.stats().aborted_total;
        let mut c = Client::connect(sim.local_addr()).await?;
        let s = c.events(path, &body, Some(8)).await?;
        assert_eq!(s.status, StatusCode::OK);
        assert_eq!(sim.stats().running, 1, "{path}");
        c.conn.abort();
        drop(c);
        let freed = eventually(&sim, Duration::from_secs(3), |st| {
            st.running == 0 && st.kv_used_blocks == 0 && st.aborted_total == aborted + 1
        })
        .await;
        assert!(freed, "{path}: stats after disconnect: {:?}", sim.stats());
    }
    sim.shutdown().await;
    Ok(())
}

/// Every endpoint writes its request-log line; a Responses turn continuing a stored response
/// counts the stored turns.
#[tokio::test]
async fn request_log_covers_every_endpoint() -> Result<()> {
    let log = temp_jsonl("eplog");
    let path = log.path().to_path_buf();
    let sim = SimServer::start(SimConfig {
        request_log: Some(path.clone()),
        ..instant()
    })
    .await?;
    let mut c = Client::connect(sim.local_addr()).await?;
    let convo = json!([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                       {"role": "user", "content": "q2"}]);
    c.events(MESSAGES, &messages_body(convo.clone(), 2, true), None)
        .await?;
    c.post(COMPLETIONS, &completion_body("q", 2, false)).await?;
    let first = c
        .post(RESPONSES, &responses_body(convo, 2, false))
        .await?
        .json();
    let mut next = responses_body(json!("q3"), 2, true);
    next["previous_response_id"] = first["id"].clone();
    c.events(RESPONSES, &next, None).await?;
    c.post(MESSAGES, &json!({"messages": []})).await?;
    sim.shutdown().await;
    let lines: Vec<Value> = std::fs::read_to_string(&path)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let got: Vec<(u64, bool, u64, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["turn_index"].as_u64().unwrap(),
                l["stream"].as_bool().unwrap(),
                l["completion_tokens"].as_u64().unwrap(),
                l["finish"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (1, true, 2, "length"),
            (0, false, 2, "length"),
            (1, false, 2, "length"),
            (2, true, 2, "length"),
            (0, false, 0, "error"),
        ]
    );
    Ok(())
}
