//! The consumer on synthetic streams that follow the wire contract (`docs/endpoints.md`)
//! for every endpoint: cut at every byte, timing of reasoning and answer, error events,
//! missing terminal events, unknown events, malformed JSON, non-streamed answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use super::*;

/// An event stream: each `(event, data)` becomes `event: …` (when not empty) and `data: …`.
fn sse(events: &[(&str, &str)]) -> Vec<u8> {
    let mut s = String::new();
    for (event, data) in events {
        if !event.is_empty() {
            s.push_str(&format!("event: {event}\n"));
        }
        s.push_str(&format!("data: {data}\n\n"));
    }
    s.into_bytes()
}

/// Typed events as the Responses and Messages APIs send them: `event:` equal to the data's
/// `type`.
fn typed_stream(datas: &[String]) -> Vec<u8> {
    let mut s = String::new();
    for d in datas {
        let v: serde_json::Value = serde_json::from_str(d).unwrap();
        s.push_str(&format!(
            "event: {}\ndata: {d}\n\n",
            v["type"].as_str().unwrap()
        ));
    }
    s.into_bytes()
}

/// Chat per the contract: role chunk, two reasoning tokens, one chunk with both, two answer
/// tokens, the finish chunk, the usage chunk, `[DONE]`.
fn chat_stream() -> Vec<u8> {
    let c = |delta: &str, finish: &str| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}"#
        )
    };
    let datas = [
        c(r#"{"role":"assistant","content":""}"#, "null"),
        c(r#"{"reasoning_content":"Let"}"#, "null"),
        c(r#"{"reasoning":" me"}"#, "null"),
        c(r#"{"reasoning_content":" think.","content":"Hi"}"#, "null"),
        c(r#"{"content":" th\u00e9re"}"#, "null"),
        c(r#"{"content":"!"}"#, "null"),
        c(r#"{}"#, r#""length""#),
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":6,"total_tokens":16,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}}"#.to_owned(),
        "[DONE]".to_owned(),
    ];
    let refs: Vec<(&str, &str)> = datas.iter().map(|d| ("", d.as_str())).collect();
    sse(&refs)
}

/// Responses per the contract: three reasoning tokens, then three answer tokens; `terminal` is
/// `response.completed` or `response.incomplete`.
fn responses_stream(terminal: &str) -> Vec<u8> {
    let mut d = vec![
        r#"{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","model":"m","output":[]},"sequence_number":0}"#.to_owned(),
        r#"{"type":"response.in_progress","response":{"id":"resp_1","object":"response","status":"in_progress","model":"m","output":[]},"sequence_number":1}"#.to_owned(),
        r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"reasoning","id":"rs_1"},"sequence_number":2}"#.to_owned(),
    ];
    let mut n = 3;
    let mut push = |d: &mut Vec<String>, body: String| {
        d.push(format!(r#"{{{body},"sequence_number":{n}}}"#));
        n += 1;
    };
    for tok in ["Think", "ing", " hard"] {
        push(
            &mut d,
            format!(
                r#""type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"{tok}""#
            ),
        );
    }
    push(&mut d, r#""type":"response.reasoning_text.done","item_id":"rs_1","output_index":0,"content_index":0,"text":"Thinking hard""#.to_owned());
    push(&mut d, r#""type":"response.output_item.done","output_index":0,"item":{"type":"reasoning","id":"rs_1"}"#.to_owned());
    push(&mut d, r#""type":"response.output_item.added","output_index":1,"item":{"type":"message","id":"msg_1","role":"assistant","content":[]}"#.to_owned());
    push(
        &mut d,
        r#""type":"response.content_part.added","part":{"type":"output_text","text":""}"#
            .to_owned(),
    );
    for tok in ["Hel", "lo", " \\\"you\\\"\\n"] {
        push(
            &mut d,
            format!(
                r#""type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"{tok}""#
            ),
        );
    }
    push(&mut d, r#""type":"response.output_text.done","item_id":"msg_1","output_index":1,"content_index":0,"text":"Hello \"you\"\n""#.to_owned());
    push(&mut d, r#""type":"response.content_part.done","part":{"type":"output_text","text":"Hello \"you\"\n"}"#.to_owned());
    push(&mut d, r#""type":"response.output_item.done","output_index":1,"item":{"type":"message","id":"msg_1"}"#.to_owned());
    let (status, details) = if terminal == "response.incomplete" {
        (
            "incomplete",
            r#","incomplete_details":{"reason":"max_output_tokens"}"#,
        )
    } else {
        ("completed", "")
    };
    push(
        &mut d,
        format!(
            r#""type":"{terminal}","response":{{"id":"resp_1","object":"response","status":"{status}"{details},"usage":{{"input_tokens":20,"input_tokens_details":{{"cached_tokens":8}},"output_tokens":6,"output_tokens_details":{{"reasoning_tokens":3}},"total_tokens":26}}}}"#
        ),
    );
    typed_stream(&d)
}

/// Messages per the contract: a thinking block of three tokens and its signature, a text block
/// of three tokens, `stop_reason` as given.
fn messages_stream(stop_reason: &str) -> Vec<u8> {
    let mut d = vec![
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":8,"output_tokens":1}}}"#.to_owned(),
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#.to_owned(),
    ];
    for tok in ["Hm", "m", "…"] {
        d.push(format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"thinking_delta","thinking":"{tok}"}}}}"#));
    }
    d.push(r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}"#.to_owned());
    d.push(r#"{"type":"content_block_stop","index":0}"#.to_owned());
    d.push(
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#
            .to_owned(),
    );
    d.push(r#"{"type":"ping"}"#.to_owned());
    for tok in ["Yes", ",", " no"] {
        d.push(format!(r#"{{"type":"content_block_delta","index":1,"delta":{{"type":"text_delta","text":"{tok}"}}}}"#));
    }
    d.push(r#"{"type":"content_block_stop","index":1}"#.to_owned());
    d.push(format!(r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop_reason}","stop_sequence":null}},"usage":{{"output_tokens":7}}}}"#));
    d.push(r#"{"type":"message_stop"}"#.to_owned());
    typed_stream(&d)
}

/// Completions per the contract: three tokens, the last with its finish reason, the usage
/// chunk, `[DONE]`.
fn completions_stream() -> Vec<u8> {
    let c = |text: &str, finish: &str| {
        format!(
            r#"{{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{finish}}}]}}"#
        )
    };
    let datas = [
        c("Once", "null"),
        c(" upon", "null"),
        c(" a", r#""length""#),
        r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}}"#.to_owned(),
        "[DONE]".to_owned(),
    ];
    let refs: Vec<(&str, &str)> = datas.iter().map(|d| ("", d.as_str())).collect();
    sse(&refs)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Feeds `pieces` (piece `k` at `k + 1` ms) to a consumer of `endpoint`.
fn read(endpoint: Endpoint, streamed: bool, pieces: &[&[u8]]) -> Result<TurnOutcome, Error> {
    let t0 = Instant::now();
    let mut c = ChatStreamConsumer::with_endpoint(t0, streamed, endpoint);
    for (k, p) in pieces.iter().enumerate() {
        c.feed(p, t0 + ms(k as u64 + 1))?;
    }
    c.finish(t0 + ms(1000))
}

fn whole(endpoint: Endpoint, body: &[u8]) -> Result<TurnOutcome, Error> {
    read(endpoint, true, &[body])
}

/// One event per read.
fn per_event(endpoint: Endpoint, body: &[u8]) -> TurnOutcome {
    let text = std::str::from_utf8(body).unwrap();
    let pieces: Vec<&[u8]> = text.split_inclusive("\n\n").map(str::as_bytes).collect();
    read(endpoint, true, &pieces).unwrap()
}

/// What does not depend on when bytes arrived.
fn timeless(o: &TurnOutcome) -> TurnOutcome {
    TurnOutcome {
        ttft: None,
        ttfa: None,
        e2e: Duration::ZERO,
        chunk_offsets: vec![Duration::ZERO; o.chunk_offsets.len()],
        ..o.clone()
    }
}

fn contract_streams() -> Vec<(Endpoint, Vec<u8>)> {
    vec![
        (Endpoint::Chat, chat_stream()),
        (Endpoint::Responses, responses_stream("response.completed")),
        (Endpoint::Messages, messages_stream("end_turn")),
        (Endpoint::Completions, completions_stream()),
    ]
}

#[test]
fn contract_streams_read_as_specified() {
    let o = whole(Endpoint::Chat, &chat_stream()).unwrap();
    assert_eq!(
        (o.content.as_str(), o.reasoning.as_str()),
        ("Hi thére!", "Let me think.")
    );
    assert_eq!(
        (o.reasoning_chunks, o.answer_chunks, o.chunk_offsets.len()),
        (3, 3, 5)
    );
    assert_eq!(o.finish_reason.as_deref(), Some("length"));
    let u = o.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (Some(10), Some(6), Some(16))
    );
    assert_eq!((u.cached_tokens, u.reasoning_tokens), (Some(4), Some(3)));

    let o = whole(Endpoint::Responses, &responses_stream("response.completed")).unwrap();
    assert_eq!(
        (o.content.as_str(), o.reasoning.as_str()),
        ("Hello \"you\"\n", "Thinking hard")
    );
    assert_eq!(
        (o.reasoning_chunks, o.answer_chunks, o.chunk_offsets.len()),
        (3, 3, 6)
    );
    assert_eq!(o.finish_reason.as_deref(), Some("stop"));
    let u = o.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (Some(20), Some(6), Some(26))
    );
    assert_eq!((u.cached_tokens, u.reasoning_tokens), (Some(8), Some(3)));
    assert_eq!(o.events, 17);

    let o = whole(
        Endpoint::Responses,
        &responses_stream("response.incomplete"),
    )
    .unwrap();
    assert_eq!(o.finish_reason.as_deref(), Some("length"));

    let o = whole(Endpoint::Messages, &messages_stream("end_turn")).unwrap();
    assert_eq!(
        (o.content.as_str(), o.reasoning.as_str()),
        ("Yes, no", "Hmm…")
    );
    assert_eq!(
        (o.reasoning_chunks, o.answer_chunks, o.chunk_offsets.len()),
        (3, 3, 6)
    );
    assert_eq!(o.finish_reason.as_deref(), Some("stop"));
    let u = o.usage.unwrap();
    // Anthropic's input_tokens excludes cache reads: the prompt is 12 + 8 + 0.
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.total_tokens),
        (Some(20), Some(7), None)
    );
    assert_eq!((u.cached_tokens, u.reasoning_tokens), (Some(8), None));
    for (stop, finish) in [
        ("max_tokens", "length"),
        ("tool_use", "tool_use"),
        ("stop_sequence", "stop_sequence"),
    ] {
        let o = whole(Endpoint::Messages, &messages_stream(stop)).unwrap();
        assert_eq!(o.finish_reason.as_deref(), Some(finish));
    }

    let o = whole(Endpoint::Completions, &completions_stream()).unwrap();
    assert_eq!(
        (o.content.as_str(), o.reasoning.as_str()),
        ("Once upon a", "")
    );
    assert_eq!(
        (o.reasoning_chunks, o.answer_chunks, o.chunk_offsets.len()),
        (0, 3, 3)
    );
    assert_eq!(o.finish_reason.as_deref(), Some("length"));
    let u = o.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
        (Some(5), Some(3), Some(2))
    );
    assert_eq!(u.reasoning_tokens, None);
}

#[test]
fn contract_streams_read_the_same_split_at_every_byte() {
    for (endpoint, body) in contract_streams() {
        let want = timeless(&whole(endpoint, &body).unwrap());
        for cut in 0..=body.len() {
            let (a, b) = body.split_at(cut);
            let got = read(endpoint, true, &[a, b])
                .unwrap_or_else(|e| panic!("{endpoint} cut at {cut}: {e}"));
            assert_eq!(timeless(&got), want, "{endpoint} cut at {cut}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(
            timeless(&read(endpoint, true, &bytes).unwrap()),
            want,
            "{endpoint} byte by byte"
        );
    }
}

#[test]
fn ttft_is_the_first_output_and_ttfa_the_first_answer() {
    // (endpoint, body, event index of the first reasoning token, of the first answer token)
    let cases = [
        (Endpoint::Chat, chat_stream(), 1, 3),
        (
            Endpoint::Responses,
            responses_stream("response.completed"),
            3,
            10,
        ),
        (Endpoint::Messages, messages_stream("end_turn"), 2, 9),
        (Endpoint::Completions, completions_stream(), 0, 0),
    ];
    for (endpoint, body, first, answer) in cases {
        let o = per_event(endpoint, &body);
        assert_eq!(o.ttft, Some(ms(first + 1)), "{endpoint}");
        assert_eq!(o.ttfa, Some(ms(answer + 1)), "{endpoint}");
        assert_eq!(o.chunk_offsets.first().copied(), o.ttft, "{endpoint}");
        assert!(
            o.chunk_offsets.windows(2).all(|w| w[0] < w[1]),
            "{endpoint}"
        );
    }
    // Reasoning only (cut before the answer): output but no answer.
    let body = String::from_utf8(messages_stream("max_tokens")).unwrap();
    let cut = body
        .find("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1")
        .unwrap();
    let rest = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":4}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let o = per_event(
        Endpoint::Messages,
        format!("{}{rest}", &body[..cut]).as_bytes(),
    );
    assert_eq!((o.ttft, o.ttfa), (Some(ms(3)), None));
    assert_eq!((o.reasoning_chunks, o.answer_chunks), (3, 0));
}

#[test]
fn the_type_inside_data_wins_over_the_event_line_which_serves_when_it_is_missing() {
    // Disagreeing: the data says reasoning, the event line says text.
    let body = sse(&[
        (
            "response.output_text.delta",
            r#"{"type":"response.reasoning_text.delta","delta":"r"}"#,
        ),
        ("", r#"{"type":"response.output_text.delta","delta":"a"}"#),
        ("response.output_text.delta", r#"{"delta":"b"}"#),
        (
            "response.completed",
            r#"{"response":{"status":"completed"}}"#,
        ),
    ]);
    let o = whole(Endpoint::Responses, &body).unwrap();
    assert_eq!((o.reasoning.as_str(), o.content.as_str()), ("r", "ab"));
    assert_eq!((o.reasoning_chunks, o.answer_chunks), (1, 2));
    assert_eq!(o.finish_reason.as_deref(), Some("stop"));

    let body = sse(&[
        (
            "ping",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"index":0,"delta":{"type":"thinking_delta","thinking":"t"}}"#,
        ),
        (
            "message_delta",
            r#"{"type":"content_block_stop","index":0}"#,
        ),
        ("message_stop", r#"{}"#),
    ]);
    let o = whole(Endpoint::Messages, &body).unwrap();
    assert_eq!((o.content.as_str(), o.reasoning.as_str()), ("x", "t"));
    // An event that names nothing at all is ignored.
    let body = sse(&[("", r#"{"delta":"x"}"#), ("", r#"{"type":"message_stop"}"#)]);
    assert_eq!(
        whole(Endpoint::Messages, &body)
            .unwrap()
            .chunk_offsets
            .len(),
        0
    );
}

#[test]
fn missing_terminal_events_are_incomplete_and_name_what_is_missing() {
    let drop_last = |body: Vec<u8>| {
        let text = String::from_utf8(body).unwrap();
        let trimmed = text.trim_end_matches("\n\n");
        let cut = trimmed.rfind("\n\n").unwrap() + 2;
        text.as_bytes()[..cut].to_vec()
    };
    let cases = [
        (Endpoint::Chat, drop_last(chat_stream()), "before [DONE]"),
        (
            Endpoint::Completions,
            drop_last(completions_stream()),
            "before [DONE]",
        ),
        (
            Endpoint::Responses,
            drop_last(responses_stream("response.completed")),
            "before response.completed or response.incomplete",
        ),
        (
            Endpoint::Messages,
            drop_last(messages_stream("end_turn")),
            "before message_stop",
        ),
    ];
    for (endpoint, body, missing) in cases {
        let t0 = Instant::now();
        let mut c = ChatStreamConsumer::with_endpoint(t0, true, endpoint);
        c.feed(&body, t0).unwrap();
        assert!(!c.is_done(), "{endpoint}");
        assert!(c.chunks() > 0, "{endpoint}");
        let e = c.finish(t0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Incomplete, "{endpoint}");
        assert!(e.to_string().contains(missing), "{endpoint}: {e}");
    }
    // `[DONE]` does not end a responses or messages stream.
    for (endpoint, mut body) in [
        (
            Endpoint::Responses,
            drop_last(responses_stream("response.completed")),
        ),
        (Endpoint::Messages, drop_last(messages_stream("end_turn"))),
    ] {
        body.extend_from_slice(b"data: [DONE]\n\n");
        assert_eq!(
            whole(endpoint, &body).unwrap_err().kind(),
            ErrorKind::Incomplete,
            "{endpoint}"
        );
    }
}

#[test]
fn terminal_events_end_the_stream_and_later_events_are_ignored() {
    for (endpoint, mut body) in contract_streams() {
        let t0 = Instant::now();
        let mut c = ChatStreamConsumer::with_endpoint(t0, true, endpoint);
        c.feed(&body, t0).unwrap();
        assert!(c.is_done(), "{endpoint}");
        let want = c.finish(t0).unwrap();
        // More output (even a malformed event) after the end changes nothing but the count.
        body.extend_from_slice(b"event: content_block_delta\ndata: {\"type\":\"response.output_text.delta\",\"choices\":[{\"index\":0,\"text\":\"x\",\"delta\":{\"content\":\"x\"}}],\"delta\":\"x\"}\n\ndata: {oops\n\n");
        let got = whole(endpoint, &body).unwrap();
        assert_eq!(got.events, want.events + 2, "{endpoint}");
        assert_eq!(
            (got.content, got.chunk_offsets.len()),
            (want.content, want.chunk_offsets.len()),
            "{endpoint}"
        );
    }
}

#[test]
fn error_events_are_server_errors_with_the_servers_message_on_one_line() {
    let cases: [(Endpoint, Vec<u8>, &str); 7] = [
        (
            Endpoint::Responses,
            sse(&[(
                "error",
                r#"{"type":"error","code":"server_error","message":"The model\ncrashed","sequence_number":3}"#,
            )]),
            "server_error: The model crashed",
        ),
        (
            Endpoint::Responses,
            sse(&[("error", r#"{"type":"error","message":"no code"}"#)]),
            "no code",
        ),
        (
            Endpoint::Responses,
            sse(&[(
                "response.failed",
                r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"gpu fell off"}}}"#,
            )]),
            "server_error: gpu fell off",
        ),
        (
            Endpoint::Messages,
            sse(&[(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )]),
            "overloaded_error: Overloaded",
        ),
        // Not JSON, but the event says it is an error.
        (
            Endpoint::Messages,
            sse(&[("error", "upstream timed out")]),
            "upstream timed out",
        ),
        (
            Endpoint::Completions,
            sse(&[("", r#"{"error":{"message":"out of memory","code":500}}"#)]),
            "out of memory",
        ),
        (
            Endpoint::Chat,
            sse(&[(
                "",
                r#"{"error":{"object":"error","message":"bad\r\nthing","type":"BadRequestError"}}"#,
            )]),
            "BadRequestError: bad  thing",
        ),
    ];
    for (endpoint, body, message) in cases {
        let t0 = Instant::now();
        let mut c = ChatStreamConsumer::with_endpoint(t0, true, endpoint);
        let e = c.feed(&body, t0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Server, "{endpoint}: {e}");
        assert!(e.to_string().contains(message), "{endpoint}: {e}");
        assert!(!e.to_string().contains(['\n', '\r']), "{endpoint}: {e}");
    }
}

#[test]
fn unknown_event_types_and_fields_are_ignored() {
    let mut body = sse(&[
        (
            "response.created",
            r#"{"type":"response.created","response":{"id":"r","tools":[{"x":[1,2]}],"output":[]}}"#,
        ),
        (
            "response.audio.delta",
            r#"{"type":"response.audio.delta","delta":"UklGRg=="}"#,
        ),
        (
            "response.future.delta",
            r#"{"type":"response.future.delta","delta":{"nested":[true]}}"#,
        ),
        (
            "response.output_text.annotation.added",
            r#"{"type":"response.output_text.annotation.added","annotation":{"type":"url_citation"}}"#,
        ),
        (
            "",
            r#"{"type":"response.output_text.delta","delta":"ok","logprobs":[],"obfuscation":"abc"}"#,
        ),
    ]);
    body.extend_from_slice(b": keep-alive\n\nretry: 10\n\n");
    body.extend(sse(&[("response.completed", r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0}}}}"#)]));
    let o = whole(Endpoint::Responses, &body).unwrap();
    assert_eq!((o.content.as_str(), o.chunk_offsets.len()), ("ok", 1));

    let body = sse(&[
        (
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1,"service_tier":"standard","cache_creation":{"ephemeral_5m_input_tokens":0}}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"x","name":"web_search","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"x"}}}"#,
        ),
        (
            "brand_new_event",
            r#"{"type":"brand_new_event","whatever":[1]}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"ok"}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ]);
    let o = whole(Endpoint::Messages, &body).unwrap();
    assert_eq!((o.content.as_str(), o.chunk_offsets.len()), ("ok", 1));
    assert_eq!(o.usage.unwrap().prompt_tokens, Some(3));
}

#[test]
fn tool_call_text_is_answer_output() {
    let body = sse(&[
        (
            "",
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"function_call","id":"fc_1","call_id":"c","name":"get","arguments":""}}"#,
        ),
        (
            "",
            r#"{"type":"response.function_call_arguments.delta","delta":"{\"a\":"}"#,
        ),
        (
            "",
            r#"{"type":"response.function_call_arguments.delta","delta":""}"#,
        ),
        ("", r#"{"type":"response.refusal.delta","delta":"no"}"#),
        (
            "",
            r#"{"type":"response.completed","response":{"status":"completed"}}"#,
        ),
    ]);
    let o = whole(Endpoint::Responses, &body).unwrap();
    assert_eq!(
        (o.answer_chunks, o.reasoning_chunks, o.content.as_str()),
        (3, 0, "")
    );
    let body = sse(&[
        (
            "",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"get","input":{}}}"#,
        ),
        (
            "",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}"#,
        ),
        (
            "",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
        ),
        ("", r#"{"type":"message_stop"}"#),
    ]);
    let o = whole(Endpoint::Messages, &body).unwrap();
    assert_eq!(
        (o.answer_chunks, o.reasoning_chunks, o.content.as_str()),
        (2, 0, "")
    );
}

#[test]
fn malformed_json_is_reported_with_a_snippet() {
    for endpoint in Endpoint::ALL {
        let t0 = Instant::now();
        let mut c = ChatStreamConsumer::with_endpoint(t0, true, endpoint);
        let e = c
            .feed(
                b"event: message_start\ndata: {\"type\": \"message_start\", \"oops\n\n",
                t0,
            )
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MalformedJson, "{endpoint}");
        assert!(
            e.to_string()
                .contains("{\"type\": \"message_start\", \"oops"),
            "{endpoint}: {e}"
        );
        // A known event whose member has the wrong shape is malformed too.
        let bad = match endpoint {
            Endpoint::Responses => r#"{"type":"response.output_text.delta","delta":5}"#,
            Endpoint::Messages => {
                r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":[1]}}"#
            }
            _ => r#"{"choices":[{"index":0,"text":7,"delta":{"content":7}}]}"#,
        };
        let mut c = ChatStreamConsumer::with_endpoint(t0, true, endpoint);
        let e = c.feed(&sse(&[("", bad)]), t0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MalformedJson, "{endpoint}: {e}");
        // Not JSON at all, as a whole answer.
        let e = read(endpoint, false, &[b"<html>502</html>"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MalformedJson, "{endpoint}");
        assert!(
            e.to_string().contains("<html>502</html>"),
            "{endpoint}: {e}"
        );
    }
}

#[test]
fn non_streamed_answers_per_contract() {
    let e2e = ms(1000);
    // (endpoint, body, content, reasoning, finish, prompt, completion, cached, reasoning tokens)
    let responses = r#"{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[
        {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"Mull"}]},
        {"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Answer","annotations":[]}]}],
        "usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":3},"output_tokens":4,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":13}}"#;
    let messages = r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[
        {"type":"thinking","thinking":"Mull","signature":"c2ln"},{"type":"text","text":"Answer"}],
        "stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"cache_creation_input_tokens":1,"cache_read_input_tokens":3,"output_tokens":4}}"#;
    let completions = r#"{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"Answer","finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":3}}}"#;
    let chat = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Answer","reasoning_content":"Mull"},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":3},"completion_tokens_details":{"reasoning_tokens":2}}}"#;
    let cases = [
        (
            Endpoint::Responses,
            responses,
            "Mull",
            "length",
            Some(9),
            Some(2),
        ),
        (Endpoint::Messages, messages, "Mull", "stop", Some(9), None),
        (
            Endpoint::Completions,
            completions,
            "",
            "stop",
            Some(9),
            None,
        ),
        (Endpoint::Chat, chat, "Mull", "length", Some(9), Some(2)),
    ];
    for (endpoint, body, reasoning, finish, prompt, reasoning_tokens) in cases {
        let b = body.as_bytes();
        let o = read(endpoint, false, &[&b[..7], &b[7..]]).unwrap();
        assert_eq!(
            (o.content.as_str(), o.reasoning.as_str()),
            ("Answer", reasoning),
            "{endpoint}"
        );
        assert_eq!(o.finish_reason.as_deref(), Some(finish), "{endpoint}");
        assert_eq!(
            (o.ttft, o.ttfa, o.e2e),
            (Some(e2e), Some(e2e), e2e),
            "{endpoint}"
        );
        assert_eq!(o.chunk_offsets, [e2e], "{endpoint}");
        assert_eq!(
            (o.reasoning_chunks, o.answer_chunks),
            (u32::from(!reasoning.is_empty()), 1),
            "{endpoint}"
        );
        let u = o.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (prompt, Some(4), Some(3)),
            "{endpoint}"
        );
        assert_eq!(u.reasoning_tokens, reasoning_tokens, "{endpoint}");
        assert!(!o.streamed && o.events == 0, "{endpoint}");
    }
    // Reasoning but no answer: TTFT but no TTFA.
    let body = br#"{"status":"incomplete","output":[{"type":"reasoning","content":[{"type":"reasoning_text","text":"Mull"}]}]}"#;
    let o = read(Endpoint::Responses, false, &[body]).unwrap();
    assert_eq!(
        (o.ttft, o.ttfa, o.reasoning_chunks, o.answer_chunks),
        (Some(e2e), None, 1, 0)
    );
    // A failed response and an error message are server errors.
    let failed = br#"{"id":"r","object":"response","status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}"#;
    let e = read(Endpoint::Responses, false, &[failed]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Server);
    assert!(e.to_string().contains("server_error: boom"), "{e}");
    let error = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#;
    let e = read(Endpoint::Messages, false, &[error]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Server);
    assert!(
        e.to_string()
            .contains("invalid_request_error: max_tokens: required"),
        "{e}"
    );
}

#[test]
fn messages_usage_takes_the_last_counters_reported() {
    // message_delta's output_tokens is cumulative; a later input count replaces the earlier.
    let body = sse(&[
        (
            "",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":90,"output_tokens":1}}}"#,
        ),
        (
            "",
            r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":5}}"#,
        ),
        (
            "",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":10,"cache_creation_input_tokens":4,"output_tokens":9}}"#,
        ),
        ("", r#"{"type":"message_stop"}"#),
    ]);
    let o = whole(Endpoint::Messages, &body).unwrap();
    let u = o.usage.unwrap();
    assert_eq!(
        (u.prompt_tokens, u.cached_tokens, u.completion_tokens),
        (Some(104), Some(90), Some(9))
    );
    assert_eq!(o.finish_reason.as_deref(), Some("stop"));
    // No usage at all: none.
    let body = sse(&[("", r#"{"type":"message_stop"}"#)]);
    assert_eq!(whole(Endpoint::Messages, &body).unwrap().usage, None);
}

#[test]
fn new_keeps_reading_chat() {
    let t0 = Instant::now();
    let mut c = ChatStreamConsumer::new(t0, true);
    assert_eq!(c.endpoint(), Endpoint::Chat);
    c.feed(&chat_stream(), t0).unwrap();
    let o = c.finish(t0).unwrap();
    assert_eq!(
        timeless(&o),
        timeless(&whole(Endpoint::Chat, &chat_stream()).unwrap())
    );
    assert_eq!(o.reasoning, "Let me think.");
}

#[test]
fn an_empty_read_between_cr_and_lf_dispatches_nothing() {
    // Found by the `stream_responses` fuzz target (`xtask/fuzz`, minimized: `data\r\n` a byte
    // at a time with empty reads between): the empty read made the LF a blank line, which
    // dispatched an empty event (malformed JSON) where the whole body holds none.
    let whole = read(Endpoint::Responses, true, &[b"data\r\n"]).unwrap_err();
    let cut = read(Endpoint::Responses, true, &[b"data\r", b"", b"\n"]).unwrap_err();
    assert_eq!(whole.kind(), ErrorKind::MalformedSse, "{whole}");
    assert_eq!(cut.kind(), whole.kind(), "{cut}");
}

#[test]
fn absurd_messages_usage_counts_saturate() {
    // The Messages prompt is a sum of three counts the server sends: counts near u64::MAX
    // overflowed it (a panic with overflow checks, as in tests and the fuzz builds). Found
    // reading the parser for the `stream_messages` fuzz target (`xtask/fuzz`), which panicked
    // on this body.
    let body = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":18446744073709551615,\"cache_read_input_tokens\":1}}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let o = whole(Endpoint::Messages, body).unwrap();
    assert_eq!(o.usage.unwrap().prompt_tokens, Some(u64::MAX));
}
