//! Run settings and the request body built from them.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

/// What joins the conversation after each turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContentMode {
    /// The recorded assistant text (reproducible across engines).
    #[default]
    Trace,
    /// What the server generated.
    Model,
}

/// Which request field carries the pinned output length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputCapField {
    /// `max_completion_tokens` (the current OpenAI name).
    #[default]
    MaxCompletionTokens,
    /// `max_tokens` (older servers).
    MaxTokens,
}

impl OutputCapField {
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            OutputCapField::MaxCompletionTokens => "max_completion_tokens",
            OutputCapField::MaxTokens => "max_tokens",
        }
    }
}

/// How responses are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseMode {
    /// A server-sent event stream (with `stream_options.include_usage`): TTFT and every gap
    /// between chunks are measured.
    #[default]
    Stream,
    /// One JSON response (`stream: false`): TTFT is the whole response time.
    Whole,
}

/// What happens to the tool waits a plan records between turns.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum ToolWaits {
    /// Wait: each planned wait times `scale`, capped at `cap`.
    Honour {
        /// Multiplies every wait.
        scale: f64,
        /// The longest wait.
        #[serde(with = "humantime_serde")]
        cap: Duration,
    },
    /// Send the next turn as soon as the last one ended.
    Skip,
}

impl Default for ToolWaits {
    /// Honoured as planned, capped at 30 s.
    fn default() -> Self {
        ToolWaits::Honour {
            scale: 1.0,
            cap: Duration::from_secs(30),
        }
    }
}

impl ToolWaits {
    /// The wait before a turn whose plan says `planned_ms` (`None`: no wait).
    pub fn wait(self, planned_ms: f64) -> Option<Duration> {
        match self {
            ToolWaits::Honour { scale, cap } if planned_ms > 0.0 => {
                Some(Duration::from_secs_f64((planned_ms * scale / 1000.0).max(0.0)).min(cap))
            }
            _ => None,
        }
    }
}

/// How sessions arrive in an open-loop run.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalProcess {
    /// Exponential gaps between session starts (a Poisson process).
    #[default]
    Poisson,
    /// Evenly spaced session starts.
    Constant,
    /// Gamma-distributed gaps with shape `burstiness` and the rate's mean (vLLM's
    /// `--burstiness`): 1 is Poisson, below 1 burstier, above 1 more even; the gaps'
    /// coefficient of variation is `1 / sqrt(burstiness)`.
    Gamma {
        /// The gamma shape, > 0.
        burstiness: f64,
    },
    /// Each session starts at its recorded offset: its first turn's `timestamp_ms` (from a
    /// timed trace: Mooncake, LMCache) less the earliest one, times `time_scale` (0.5 plays
    /// the trace twice as fast). Sessions start in that order; [`Arrival::rate`] is only
    /// reported (the trace's mean rate).
    Trace {
        /// Multiplies every recorded offset, > 0.
        time_scale: f64,
    },
}

/// Open loop: sessions start on a schedule of their own, whatever the server's speed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Arrival {
    /// Session starts per second.
    pub rate: f64,
    /// Spacing of the starts.
    pub process: ArrivalProcess,
    /// Seed of the Poisson gaps (same seed, same schedule).
    pub seed: u64,
}

/// How a run behaves. `RunConfig::new(model, concurrency)` gives the defaults.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    /// Model name sent in every request.
    pub model: String,
    /// Closed loop: workers, i.e. sessions played at once. Open loop ([`RunConfig::arrival`]):
    /// the most sessions in flight, `0` for no limit (a session arriving while the limit is
    /// reached waits, and its wait counts as dispatch lag).
    pub concurrency: u32,
    /// Open loop: start sessions on this schedule instead of refilling `concurrency` workers.
    pub arrival: Option<Arrival>,
    /// Closed loop: start the `concurrency` workers evenly over this time instead of all at
    /// once (no thundering herd of first turns and connections). Turns sent while fewer are
    /// active fall outside the steady window by its concurrency rule.
    #[serde(with = "humantime_serde")]
    pub ramp_up: Option<Duration>,
    /// Play the first N sessions of the pool, cut to 3 turns, before the measured run; their
    /// records are marked `warmup` and left out of every metric.
    pub warmup_sessions: u32,
    /// Loop the pool; no new session or turn after this.
    #[serde(with = "humantime_serde")]
    pub duration: Option<Duration>,
    /// The hard fuse on the whole run.
    #[serde(with = "humantime_serde")]
    pub max_duration: Option<Duration>,
    /// Per-request timeout (tightened by what is left of the fuse).
    #[serde(with = "humantime_serde")]
    pub turn_timeout: Duration,
    /// Stop a session that has run this long (at its next turn boundary).
    #[serde(with = "humantime_serde")]
    pub session_timeout: Option<Duration>,
    /// The model's window: a session stops when its next prompt plus pinned output would not fit.
    pub max_model_len: Option<u64>,
    /// Tool waits between turns: honoured (scaled, capped) or skipped.
    pub tool_waits: ToolWaits,
    /// Mark each replay of a recycled session so it cannot hit the cache its previous play warmed.
    pub cache_bust: bool,
    /// The field that carries the pinned output length.
    pub output_cap_field: OutputCapField,
    /// Send `ignore_eos: true` with the pinned output length.
    pub ignore_eos: bool,
    /// What joins the conversation after each turn.
    pub content_mode: ContentMode,
    /// Streamed or whole responses.
    pub response: ResponseMode,
    /// Send `return_cached_tokens_details: true` (SGLang: the device/host split of cache hits).
    pub return_cached_tokens_details: bool,
    /// JSON fields merged into every body last (a `null` removes a field).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Header carrying a stable per-session routing key, if any.
    #[serde(skip)]
    pub routing_header: Option<HeaderName>,
    /// Response header naming the worker that served a turn.
    #[serde(skip)]
    pub worker_header: Option<HeaderName>,
    /// Where this run's clock starts: every record's `*_s` offset adds it. A resumed run sets
    /// it to where its predecessor's records end, so one run directory keeps one timeline.
    #[serde(with = "humantime_serde")]
    pub time_origin: Duration,
}

impl RunConfig {
    /// Defaults: no duration, 600 s turn timeout, gaps honoured (capped at 30 s), cache
    /// busting on, output pinned with `max_completion_tokens` + `ignore_eos`, trace content,
    /// streaming.
    pub fn new(model: impl Into<String>, concurrency: u32) -> Self {
        RunConfig {
            model: model.into(),
            concurrency,
            arrival: None,
            ramp_up: None,
            warmup_sessions: 0,
            duration: None,
            max_duration: None,
            turn_timeout: Duration::from_secs(600),
            session_timeout: None,
            max_model_len: None,
            tool_waits: ToolWaits::default(),
            cache_bust: true,
            output_cap_field: OutputCapField::MaxCompletionTokens,
            ignore_eos: true,
            content_mode: ContentMode::Trace,
            response: ResponseMode::Stream,
            return_cached_tokens_details: false,
            extra_body: serde_json::Map::new(),
            routing_header: None,
            worker_header: None,
            time_origin: Duration::ZERO,
        }
    }

    /// The request body: a concatenation of constant pieces and the conversation so far
    /// (`messages` is the comma-separated message objects, already JSON).
    pub fn body(&self, messages: &str, max_output_tokens: u32) -> String {
        self.body_with_head(None, messages, max_output_tokens)
    }

    /// [`RunConfig::body`] with `head` (a message shared by many sessions, such as the plan's
    /// system prompt) written before `messages`: each session then keeps only its own part of
    /// the conversation, not a copy of the shared prompt.
    pub fn body_with_head(
        &self,
        head: Option<&bench_workload::plan::PlannedMessage>,
        messages: &str,
        max_output_tokens: u32,
    ) -> String {
        let head_len = head.map_or(0, |h| h.json_len() + 1);
        let mut b = String::with_capacity(head_len + messages.len() + 256);
        self.open_body(&mut b);
        if let Some(h) = head {
            h.write_json(&mut b);
            if !messages.is_empty() {
                b.push(',');
            }
        }
        b.push_str(messages);
        self.close_body(&mut b, max_output_tokens);
        b
    }

    /// The same body as [`RunConfig::body_with_head`], as pieces sent without being joined:
    /// the conversation's own pieces ([`crate::Conversation`]) and a long shared `head` are
    /// not copied.
    pub fn body_segments(
        &self,
        head: Option<&bench_workload::plan::PlannedMessage>,
        conv: &crate::Conversation,
        max_output_tokens: u32,
    ) -> bench_transport::Segments {
        let mut parts = Vec::with_capacity(conv.pieces_len() + 5);
        let mut b = String::with_capacity(256);
        self.open_body(&mut b);
        if let Some(h) = head {
            if crate::conv::is_long(h) {
                b.push_str(h.json_prefix());
                parts.push(Bytes::from(std::mem::take(&mut b)));
                parts.push(crate::conv::shared(h));
                b.push('}');
            } else {
                h.write_json(&mut b);
            }
            if !conv.is_empty() {
                b.push(',');
            }
        }
        parts.push(Bytes::from(b));
        conv.pieces(&mut parts);
        let mut b = String::with_capacity(192);
        self.close_body(&mut b, max_output_tokens);
        parts.push(Bytes::from(b));
        bench_transport::Segments::new(parts)
    }

    /// `{"model":…,"messages":[`.
    fn open_body(&self, b: &mut String) {
        b.push('{');
        if !self.extra_body.contains_key("model") {
            b.push_str("\"model\":");
            b.push_str(&serde_json::to_string(&self.model).unwrap_or_default());
            b.push(',');
        }
        b.push_str("\"messages\":[");
    }

    /// `],…}`: the output cap, `ignore_eos`, streaming and the extra body.
    fn close_body(&self, b: &mut String, max_output_tokens: u32) {
        let has = |k: &str| self.extra_body.contains_key(k);
        b.push(']');
        let cap = self.output_cap_field.key();
        let stream = self.response == ResponseMode::Stream;
        if !has(cap) {
            b.push_str(&format!(",\"{cap}\":{max_output_tokens}"));
        }
        if self.ignore_eos && !has("ignore_eos") {
            b.push_str(",\"ignore_eos\":true");
        }
        if !has("stream") {
            b.push_str(if stream {
                ",\"stream\":true"
            } else {
                ",\"stream\":false"
            });
        }
        if stream && !has("stream_options") {
            b.push_str(",\"stream_options\":{\"include_usage\":true}");
        }
        if self.return_cached_tokens_details && !has("return_cached_tokens_details") {
            b.push_str(",\"return_cached_tokens_details\":true");
        }
        for (k, v) in &self.extra_body {
            if v.is_null() {
                continue;
            }
            b.push(',');
            b.push_str(&serde_json::to_string(k).unwrap_or_default());
            b.push(':');
            b.push_str(&v.to_string());
        }
        b.push('}');
    }

    /// Per-request headers of a session (its routing key).
    pub fn headers_for(&self, session_id: &str) -> Vec<(HeaderName, HeaderValue)> {
        match (&self.routing_header, HeaderValue::from_str(session_id)) {
            (Some(h), Ok(v)) => vec![(h.clone(), v)],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn body_is_valid_json_and_extra_wins() {
        let mut c = RunConfig::new("m\"x", 1);
        let msgs = r#"{"role":"user","content":"hi"}"#;
        let v: serde_json::Value = serde_json::from_str(&c.body(msgs, 7)).unwrap();
        assert_eq!(v["model"], "m\"x");
        assert_eq!(v["max_completion_tokens"], 7);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["messages"][0]["content"], "hi");
        c.extra_body
            .insert("max_completion_tokens".into(), 3.into());
        c.extra_body
            .insert("ignore_eos".into(), serde_json::Value::Null);
        c.extra_body.insert("top_k".into(), 1.into());
        c.output_cap_field = OutputCapField::MaxCompletionTokens;
        let body = c.body(msgs, 7);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["max_completion_tokens"], 3);
        assert!(v.get("ignore_eos").is_none());
        assert_eq!(
            body.matches("max_completion_tokens").count(),
            1,
            "no duplicate keys"
        );
        c.output_cap_field = OutputCapField::MaxTokens;
        c.response = ResponseMode::Whole;
        let v: serde_json::Value = serde_json::from_str(&c.body(msgs, 7)).unwrap();
        assert_eq!(v["max_tokens"], 7);
        assert_eq!(v["stream"], false);
        assert!(v.get("stream_options").is_none());
        assert!(v.get("return_cached_tokens_details").is_none());
        c.return_cached_tokens_details = true;
        let v: serde_json::Value = serde_json::from_str(&c.body(msgs, 7)).unwrap();
        assert_eq!(v["return_cached_tokens_details"], true);
    }
}
