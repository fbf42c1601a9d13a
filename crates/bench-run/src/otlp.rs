//! `--otlp-endpoint`: a finished run's turns as OpenTelemetry spans over OTLP/HTTP (JSON), one
//! trace per session play: a root span for the play (`invoke_agent`) and under it one span per
//! turn named as the GenAI semantic conventions name a model call (`chat <model>`), with the
//! conventions' attributes (`gen_ai.operation.name`, `gen_ai.provider.name`,
//! `gen_ai.request.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens`, …), the
//! time to first token as a `gen_ai.first_token` event and a failed turn's `error.type`.
//!
//! Spans are sent after the run, so exporting costs the load phase nothing; a receiver that is
//! down or refuses them costs the run a warning only (docs/telemetry.md).

use std::time::Duration;

use bench_report::record::{SessionRecord, TurnRecord, TurnStatus};
use bench_transport::{Client, ClientConfig, Endpoint};
use bytes::Bytes;
use serde_json::{Value, json};

/// Spans per export request.
pub const BATCH: usize = 1000;

/// What was exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exported {
    /// Spans sent (session spans and turn spans).
    pub spans: usize,
    /// Export requests the receiver accepted.
    pub requests: usize,
}

/// The run's identity and shape, for the spans' resource and attributes.
#[derive(Debug, Clone)]
pub struct RunIdentity<'a> {
    /// The run directory's name (`bench.run`), which also seeds the trace ids.
    pub run: &'a str,
    /// The model asked for.
    pub model: &'a str,
    /// The API every turn called.
    pub endpoint: Endpoint,
    /// The server's base URL (`server.address`, `server.port`).
    pub base_url: &'a str,
}

/// `POST` path and base URL of an OTLP/HTTP endpoint: `http://collector:4318` posts to
/// `/v1/traces`; a URL that already ends with a path posts there.
pub fn target(endpoint: &str) -> Result<(String, String), String> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(|| {
            format!("--otlp-endpoint {endpoint:?}: give an http:// or https:// URL, e.g. http://127.0.0.1:4318")
        })?;
    let scheme = &endpoint[..endpoint.len() - rest.len()];
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(format!(
            "--otlp-endpoint {endpoint:?}: a host is needed, and no credentials (user:pass@)"
        ));
    }
    let path = match path.trim_end_matches('/') {
        "" => "/v1/traces".to_owned(),
        p => p.to_owned(),
    };
    Ok((format!("{scheme}{authority}"), path))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn ids(run: &str, session: &str, replay: u32, node: Option<u32>) -> u128 {
    let key = format!("{run}\u{0}{session}\u{0}{replay}\u{0}{node:?}");
    xxhash_rust::xxh3::xxh3_128(key.as_bytes())
}

fn trace_id(run: &str, session: &str, replay: u32) -> String {
    hex(&ids(run, session, replay, None).to_be_bytes())
}

fn span_id(run: &str, session: &str, replay: u32, node: Option<u32>) -> String {
    // A span id must not be all zeros; one in 2^64 is, and then gets a 1.
    let id = (ids(run, session, replay, node) as u64).max(1);
    hex(&id.to_be_bytes())
}

fn attr(key: &str, v: Value) -> Value {
    let value = match v {
        Value::String(s) => json!({ "stringValue": s }),
        Value::Bool(b) => json!({ "boolValue": b }),
        Value::Number(n) if n.is_f64() => json!({ "doubleValue": n }),
        // OTLP/JSON writes 64-bit integers as strings.
        Value::Number(n) => json!({ "intValue": n.to_string() }),
        other => json!({ "stringValue": other.to_string() }),
    };
    json!({ "key": key, "value": value })
}

/// Unix nanoseconds of run-clock time `t_s` (the origin in whole nanoseconds, so that no
/// precision is lost to a float of 10¹⁸).
fn nanos(origin_unix_ns: i128, t_s: f64) -> String {
    let ns = origin_unix_ns + (t_s * 1e9).round() as i128;
    format!("{}", ns.max(0))
}

/// The GenAI operation and provider of an endpoint.
fn operation(e: Endpoint) -> (&'static str, &'static str) {
    match e {
        Endpoint::Completions => ("text_completion", "openai"),
        Endpoint::Messages => ("chat", "anthropic"),
        Endpoint::Chat | Endpoint::Responses => ("chat", "openai"),
    }
}

/// The run clock's origin, Unix nanoseconds: a record's `sent_utc` less its `sent_s`.
fn origin(turns: &[TurnRecord]) -> Option<i128> {
    turns.iter().find_map(|r| {
        let t = humantime::parse_rfc3339_weak(r.sent_utc.trim_end_matches('Z')).ok()?;
        let unix = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as i128;
        Some(unix - (r.sent_s * 1e9).round() as i128)
    })
}

/// The spans of the measured, current records: a session span per play that sent a turn, a
/// turn span per turn under it. Warmup and superseded records are left out.
pub fn spans(turns: &[TurnRecord], sessions: &[SessionRecord], id: &RunIdentity<'_>) -> Vec<Value> {
    let keep = |r: &&TurnRecord| !r.warmup && !r.superseded;
    let Some(origin) = origin(turns) else {
        return Vec::new();
    };
    let (op, provider) = operation(id.endpoint);
    let (host, port) = server_address(id.base_url);
    // Each play's turns, found once (a run may hold 10⁵ turns of 10⁴ plays).
    let mut by_play: std::collections::HashMap<(&str, u32), Vec<&TurnRecord>> =
        std::collections::HashMap::new();
    for r in turns.iter().filter(keep) {
        by_play
            .entry((r.session_id.as_str(), r.replay))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for s in sessions.iter().filter(|s| !s.warmup && !s.superseded) {
        let Some(mine) = by_play.remove(&(s.session_id.as_str(), s.replay)) else {
            continue;
        };
        let trace = trace_id(id.run, &s.session_id, s.replay);
        let root = span_id(id.run, &s.session_id, s.replay, None);
        let start = mine.iter().map(|r| r.sent_s).fold(s.start_s, f64::min);
        let end = mine.iter().map(|r| r.end_s).fold(s.end_s, f64::max);
        let failed = mine.iter().any(|r| r.status != TurnStatus::Ok);
        out.push(json!({
            "traceId": trace,
            "spanId": root,
            "name": "invoke_agent bench-session",
            "kind": 1,
            "startTimeUnixNano": nanos(origin, start),
            "endTimeUnixNano": nanos(origin, end),
            "attributes": [
                attr("gen_ai.operation.name", json!("invoke_agent")),
                attr("gen_ai.agent.name", json!("bench-session")),
                attr("gen_ai.conversation.id", json!(format!("{}#{}", s.session_id, s.replay))),
                attr("bench.session.status", json!(format!("{:?}", s.status).to_lowercase())),
                attr("bench.session.turns", json!(mine.len() as u64)),
            ],
            "status": { "code": if failed { 2 } else { 1 } },
        }));
        for r in mine {
            let mut attributes = vec![
                attr("gen_ai.operation.name", json!(op)),
                attr("gen_ai.provider.name", json!(provider)),
                attr("gen_ai.request.model", json!(id.model)),
                attr(
                    "gen_ai.request.max_tokens",
                    json!(u64::from(r.max_output_tokens)),
                ),
                attr(
                    "gen_ai.conversation.id",
                    json!(format!("{}#{}", r.session_id, r.replay)),
                ),
                attr("server.address", json!(host)),
                attr("bench.turn_index", json!(u64::from(r.turn_index))),
            ];
            if let Some(p) = port {
                attributes.push(attr("server.port", json!(u64::from(p))));
            }
            if let Some(n) = r.input_tokens {
                attributes.push(attr("gen_ai.usage.input_tokens", json!(n)));
            }
            if let Some(n) = r.output_tokens {
                attributes.push(attr("gen_ai.usage.output_tokens", json!(n)));
            }
            if let Some(n) = r.cached_tokens {
                attributes.push(attr("gen_ai.usage.cache_read.input_tokens", json!(n)));
            }
            if let Some(t) = r.ttft_ms {
                attributes.push(attr("bench.ttft_ms", json!(t)));
            }
            if let Some(k) = r.error_kind {
                attributes.push(attr("error.type", json!(k.as_str())));
            }
            let events: Vec<Value> = r
                .first_token_s
                .map(|t| {
                    json!({
                        "timeUnixNano": nanos(origin, t),
                        "name": "gen_ai.first_token",
                        "attributes": [attr("bench.ttft_ms", json!(r.ttft_ms.unwrap_or((t - r.sent_s) * 1000.0)))],
                    })
                })
                .into_iter()
                .collect();
            let ok = r.status == TurnStatus::Ok;
            out.push(json!({
                "traceId": trace,
                "spanId": span_id(id.run, &r.session_id, r.replay, Some(r.turn_index)),
                "parentSpanId": root,
                "name": format!("{op} {}", id.model),
                "kind": 3,
                "startTimeUnixNano": nanos(origin, r.sent_s),
                "endTimeUnixNano": nanos(origin, r.end_s.max(r.sent_s)),
                "attributes": attributes,
                "events": events,
                "status": if ok { json!({ "code": 1 }) } else {
                    json!({ "code": 2, "message": r.error.clone().unwrap_or_default() })
                },
            }));
        }
    }
    out
}

/// `host` and `port` of a base URL.
fn server_address(base_url: &str) -> (String, Option<u16>) {
    let rest = base_url.split("://").nth(1).unwrap_or(base_url);
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            (h.trim_matches(['[', ']']).to_owned(), p.parse().ok())
        }
        _ => (authority.to_owned(), None),
    }
}

/// One `ExportTraceServiceRequest` (OTLP/JSON) of `spans`.
pub fn request(spans: &[Value], id: &RunIdentity<'_>) -> Value {
    json!({
        "resourceSpans": [{
            "resource": { "attributes": [
                attr("service.name", json!("bench")),
                attr("service.version", json!(env!("CARGO_PKG_VERSION"))),
                attr("bench.run", json!(id.run)),
            ]},
            "scopeSpans": [{
                "scope": { "name": "bench", "version": env!("CARGO_PKG_VERSION") },
                "spans": spans,
            }],
        }],
    })
}

/// Sends `spans` to `endpoint` in batches of [`BATCH`]. The error is one line (the first
/// refusal or connection failure); batches sent before it stay sent.
pub async fn export(
    endpoint: &str,
    spans: &[Value],
    id: &RunIdentity<'_>,
) -> Result<Exported, String> {
    let (base, path) = target(endpoint)?;
    let client = Client::new(ClientConfig::new(base)).map_err(|e| format!("{endpoint}: {e}"))?;
    let mut done = Exported {
        spans: 0,
        requests: 0,
    };
    for batch in spans.chunks(BATCH) {
        let body = Bytes::from(request(batch, id).to_string());
        let r = client
            .request(
                http::Method::POST,
                &path,
                body,
                Some(Duration::from_secs(30)),
            )
            .await
            .map_err(|e| format!("{endpoint}{path}: {e}"))?;
        if !r.status.is_success() {
            return Err(format!(
                "{endpoint}{path} answered HTTP {} after {} of {} spans",
                r.status.as_u16(),
                done.spans,
                spans.len()
            ));
        }
        done.spans += batch.len();
        done.requests += 1;
    }
    Ok(done)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_addresses_parse() {
        assert_eq!(
            target("http://127.0.0.1:4318").unwrap(),
            ("http://127.0.0.1:4318".into(), "/v1/traces".into())
        );
        assert_eq!(
            target("https://c.example:443/otlp/v1/traces/").unwrap(),
            ("https://c.example:443".into(), "/otlp/v1/traces".into())
        );
        assert!(target("c:4318").unwrap_err().contains("http://"));
        assert!(
            target("http://u:p@c:4318")
                .unwrap_err()
                .contains("credentials")
        );
        assert_eq!(
            server_address("http://127.0.0.1:8000/v1"),
            ("127.0.0.1".into(), Some(8000))
        );
        assert_eq!(
            server_address("https://api.x.com"),
            ("api.x.com".into(), None)
        );
        assert_eq!(trace_id("r", "s", 0).len(), 32);
        assert_eq!(span_id("r", "s", 0, Some(3)).len(), 16);
        assert_ne!(span_id("r", "s", 0, Some(3)), span_id("r", "s", 0, None));
    }
}
