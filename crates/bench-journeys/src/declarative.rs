//! Declarative journeys: HTTP steps in a TOML file (`--file journeys.toml`; the built-in
//! `agent-sessions` and `agent-turns` packs are two).
//!
//! ```toml
//! # Optional: values given with `--param NAME=VALUE` (JourneysSpec.params), `{{NAME}}` in
//! # templates. Without a default a parameter is required; the run is refused up front,
//! # naming it and its description.
//! [params]
//! runner_id = { description = "the runner sessions bind to" }
//! prompt = { default = "Say hello.", description = "the user message of every turn" }
//!
//! # Optional, applied to every request.
//! [defaults]
//! headers = { "x-team" = "infra" }        # templated
//! timeout_s = 30                          # per request and per wait; default: the client's
//!
//! # Optional steps run at the start of EVERY journey's setup (make them idempotent).
//! [[setup]]
//! method = "POST"
//! path = "/v1/agents"
//! json = { name = "bench" }
//! capture = { agent_id = "id" }
//!
//! [[journey]]
//! name = "create_session"                 # unique, [A-Za-z0-9_.:-]
//! description = "POST /v1/sessions then DELETE (both timed)"
//! kind = "latency"                        # or "throughput"; default latency
//! concurrency_safe = true                 # default false
//! needs_mock_llm = false                  # default false: an LLM behind the server
//! needs_runner = false                    # default false: the server's runner process
//! max_iterations = 100                    # optional cap on timed operations
//! report = ["agent_id"]                   # setup variables shown beside the figures
//! setup = []                              # steps; or [[journey.setup]] tables
//! measure = [                             # required: ONE timed operation, all steps together
//!   { method = "POST", path = "/v1/sessions", json = { agent_id = "{{agent_id}}" },
//!     expect = 201, capture = { id = "id" } },
//!   { method = "DELETE", path = "/v1/sessions/{{id}}" },
//! ]
//! teardown = []                           # best effort: every step is tried, errors ignored
//! ```
//!
//! # Steps
//!
//! | key | meaning |
//! |---|---|
//! | `method` | `GET` (default), `POST`, `PUT`, `PATCH`, `DELETE`, `HEAD`, `OPTIONS` |
//! | `path` | required (but in `wait` steps), starts with `/`, templated (substituted values are percent-encoded where a URI needs it) |
//! | `base` | send this step to another server: `http(s)://host:port`, templated (no credentials from the environment go there) |
//! | `headers` | templated; over `[defaults].headers` and the body's content type |
//! | `json` | any TOML value, sent as JSON (strings templated, recursively); `content-type: application/json` |
//! | `body` | raw text, templated |
//! | `multipart` | parts `{ name, text }` (templated), `{ name, base64 }` or `{ name, tar_gz = { "path" = "templated text", … } }` (a gzipped tar made when the step runs), each with `filename?`, `content_type?`; `content-type: multipart/form-data` |
//! | `expect` | a status or a list of statuses; default: any 2xx |
//! | `capture` | `{ var = "json.path" }`: sets a variable from the JSON response (of a `stream`/`wait` step: from the matched event's data) |
//! | `collect` | `{ list = "json.path" }`: appends to a list variable (for `for_each`) |
//! | `when` | `"var"`: run only if set; `"!var"`: only if unset (lists: set when non-empty) |
//! | `repeat` | run the step N times, `{{index}}` = 0..N-1 |
//! | `for_each` | run once per item of a collected list, `{{item}}` |
//! | `timeout_s` | this step's request timeout (of a `stream` step: until its response head; of a wait: for the event) |
//! | `stream` | the response is a server-sent event stream: keep it open under this name (see below) |
//! | `wait` | read events of the open stream of this name until `until` matches (sends nothing) |
//! | `until` | `{ event = "name", data = { "json.path" = value, … } }`: the event a `stream`/`wait` step waits for (either key may be left out; values templated) |
//! | `fail_on` | a list of such matches: an event matching one first fails the step |
//! | `clock` | in `measure`: `"start"` (the operation's time starts just before this step) or `"stop"` (it stops when the step is done) |
//!
//! `json`, `body` and `multipart` are exclusive; so are `repeat` and `for_each`.
//!
//! JSON paths are dotted keys and `[n]` indexes (`data[0].id`, `[0].item_id`); a trailing `?`
//! makes a capture optional (a missing value or `null` leaves the variable as it was). A
//! captured string is used as is, any other value as its JSON text.
//!
//! # Event streams
//!
//! A `stream` step sends its request (a `GET` by default) and, once the response head says
//! success, keeps the body open under its name; a task reads it as it arrives, stamping each
//! event with its arrival time. With `until` the step itself waits for that event (the first
//! `session.heartbeat`, say: the stream is live). A `wait` step then reads the stream's events in
//! order, skipping those that do not match, until one matches `until`:
//!
//! ```toml
//! measure = [
//!   { path = "/v1/sessions/{{sid}}/stream", stream = "events", until = { event = "session.heartbeat" } },
//!   { method = "POST", path = "/v1/sessions/{{sid}}/events", json = { type = "message" }, clock = "start" },
//!   { wait = "events", until = { event = "response.output_text.delta" }, clock = "stop",
//!     fail_on = [{ event = "response.failed" }] },
//!   { wait = "events", until = { event = "session.status", data = { status = "idle" } } },
//! ]
//! ```
//!
//! An event's name is its `event:` field, else the `type` string of its JSON data. `data`
//! compares values at JSON paths of the event's data (as text: a string as is, anything else
//! as its JSON). A `wait` fails with `timeout` when no matching event comes within its timeout
//! (`timeout_s`, `[defaults].timeout_s`, else 30 s), with `other: <match> on stream <name>`
//! when a `fail_on` event comes first, and with `other: stream <name> ended before <match>`
//! when the stream ends. Events nobody waits for yet are buffered (256 at most, then the
//! server is slowed down by TCP, never memory); one event may take 16 MiB. A stream lives until
//! the end of the steps that opened it (the setup, one operation, the teardown); a `wait` on a
//! stream no earlier step of the same part opens is an error when the file is parsed.
//!
//! # The clock
//!
//! Without `clock` the runner times the whole `measure`. With `clock = "start"` on one step and
//! `clock = "stop"` on a later one (either may be left out: the operation's start and end), the
//! operation times itself from just before the first to the end of the second; on a `wait` (or
//! a `stream` with `until`) the end is the matched event's arrival, not when the step noticed
//! it. Steps outside the clock still run (the turn after its first token runs to idle, say).
//!
//! # Templates, variables and parameters
//!
//! `{{name}}` is a parameter or a variable captured so far, `{{env.NAME}}` an environment
//! variable (the step fails when it is unset), `{{index}}` / `{{item}}` the `repeat` /
//! `for_each` position. A variable no step captures is an error when the file is parsed; one not
//! captured yet when a step runs fails the step with `other: unknown variable {{x}}`. A step
//! cannot capture a parameter's name. Parameters are recorded in the run's report: pass
//! secrets as `{{env.NAME}}`. Every `{{env.NAME}}` value the file reads, the literal values of
//! its secret-named headers ([`bench_rundir::is_secret_name`]) and the values such headers get
//! from variables are secrets ([`JourneyFile::secrets`]): failures show them as `***`.
//!
//! Setup captures (the file's `[[setup]]` steps, then the journey's) form the journey context,
//! shared by every timed operation. Captures inside `measure` are local to one operation (so
//! concurrent operations never see each other's), while `collect` appends to a list in the
//! shared context, which `teardown` can walk with `for_each`.
//!
//! # Failures
//!
//! A status outside `expect` is `HTTP <status>`, a transport error `timeout`, `connect` or
//! `other: …`, a failed capture `other: capture <var>: …`, an event stream's failures as above.
//! In `setup` and `measure` the first failing step ends the operation; a failed setup fails
//! the journey's run.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue, Method};
use serde::Deserialize;

use bench_rundir::secrets::{Secrets, is_secret_name};

use crate::journey::{BoxFuture, Ctx, Env, Failure, Journey, Kind};

mod streams;

/// A journeys file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct FileError {
    /// The file.
    pub file: String,
    /// What is wrong, and where.
    pub message: String,
}

/// A parsed journeys file.
#[derive(Debug, Clone)]
pub struct JourneyFile {
    journeys: Vec<Arc<FileJourney>>,
    params: Vec<Param>,
    secrets: Secrets,
}

/// A parameter a journeys file declares (`[params]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Param {
    /// Its name (`{{name}}` in templates).
    pub name: String,
    /// What it is for.
    pub description: String,
    /// Its default, if it has one.
    pub default: Option<String>,
    /// The value it has in this run (given, else the default); `None`: not set.
    pub value: Option<String>,
}

impl JourneyFile {
    /// Its journeys, in file order.
    pub fn journeys(&self) -> Vec<Arc<dyn Journey>> {
        self.journeys
            .iter()
            .map(|j| j.clone() as Arc<dyn Journey>)
            .collect()
    }

    /// Its parameters, by name.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// What the file makes secret: the value of every environment variable it reads
    /// (`{{env.NAME}}`, the documented way to pass a secret) and the literal values of its
    /// secret-named headers ([`bench_rundir::is_secret_name`]). The journeys scrub them (and
    /// the values such headers get from captured variables) from their failures; a front end
    /// adds them to everything else it scrubs.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// One line naming the parameters that have no value, with what each is for; `None` when
    /// all have one. (The journeys fail their setup with a shorter message.)
    pub fn missing_params(&self) -> Option<String> {
        let missing: Vec<String> = self
            .params
            .iter()
            .filter(|p| p.value.is_none())
            .map(|p| {
                if p.description.is_empty() {
                    format!("{} (--param {}=VALUE)", p.name, p.name)
                } else {
                    format!("{} (--param {}=VALUE: {})", p.name, p.name, p.description)
                }
            })
            .collect();
        (!missing.is_empty()).then(|| format!("parameters not set: {}", missing.join("; ")))
    }
}

/// Reads and parses a journeys file.
pub fn load(path: impl AsRef<Path>) -> Result<JourneyFile, FileError> {
    let path = path.as_ref();
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| FileError {
        file: file.clone(),
        message: format!("cannot read it: {e}"),
    })?;
    parse(&file, &text)
}

/// Parses a journeys file's text; `file` names it in errors. Its parameters keep their
/// defaults.
pub fn parse(file: &str, text: &str) -> Result<JourneyFile, FileError> {
    parse_with(file, text, &BTreeMap::new())
}

/// [`parse`] with values for the file's `[params]`. A name the file does not declare is an
/// error; a parameter left without a value is not (see [`JourneyFile::missing_params`]).
pub fn parse_with(
    file: &str,
    text: &str,
    params: &BTreeMap<String, String>,
) -> Result<JourneyFile, FileError> {
    let err = |message: String| FileError {
        file: file.to_owned(),
        message,
    };
    let de = toml::Deserializer::parse(text).map_err(|e| err(toml_message(text, &e)))?;
    let raw: RawFile = serde_path_to_error::deserialize(de).map_err(|e| err(located(text, &e)))?;
    let mut f = compile(raw, params).map_err(err)?;
    f.secrets = file_secrets(text, &f);
    if let Some(j) = f.journeys.first() {
        j.common.add_secrets(&f.secrets);
    }
    Ok(f)
}

/// [`JourneyFile::secrets`]: the values of the environment variables `text` names as
/// `{{env.NAME}}` (a name in a comment counts too: more is scrubbed, never less), and the
/// literal values of secret-named headers.
fn file_secrets(text: &str, f: &JourneyFile) -> Secrets {
    let mut s = Secrets::default();
    let mut rest = text;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        let Some(j) = after.find("}}") else { break };
        if let Some(name) = after[..j].trim().strip_prefix("env.") {
            if let Ok(v) = std::env::var(name) {
                s.add(&v);
            }
        }
        rest = &after[j + 2..];
    }
    let Some(first) = f.journeys.first() else {
        return s;
    };
    let common = &first.common;
    let steps = common.setup.iter().chain(
        f.journeys
            .iter()
            .flat_map(|j| j.setup.iter().chain(&j.measure).chain(&j.teardown)),
    );
    let headers = common
        .headers
        .iter()
        .chain(steps.flat_map(|st| st.headers.iter()));
    for (name, t) in headers {
        if let (true, Some(v)) = (is_secret_name(name.as_str()), t.literal()) {
            s.add_header(name.as_str(), &v);
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// The file as written

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    params: BTreeMap<String, RawParam>,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    setup: Vec<RawStep>,
    #[serde(default)]
    journey: Vec<RawJourney>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    /// Used when the parameter is not given (a string, number or boolean).
    default: Option<toml::Value>,
    #[serde(default)]
    description: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    #[serde(default)]
    headers: BTreeMap<String, String>,
    timeout_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJourney {
    name: String,
    #[serde(default)]
    description: String,
    kind: Option<Kind>,
    #[serde(default)]
    concurrency_safe: bool,
    #[serde(default)]
    needs_mock_llm: bool,
    #[serde(default)]
    needs_runner: bool,
    max_iterations: Option<u32>,
    #[serde(default)]
    report: Vec<String>,
    #[serde(default)]
    setup: Vec<RawStep>,
    measure: Vec<RawStep>,
    #[serde(default)]
    teardown: Vec<RawStep>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    method: Option<String>,
    base: Option<String>,
    path: Option<String>,
    stream: Option<String>,
    wait: Option<String>,
    until: Option<RawMatch>,
    #[serde(default)]
    fail_on: Vec<RawMatch>,
    clock: Option<Clock>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    json: Option<toml::Value>,
    body: Option<String>,
    multipart: Option<Vec<RawPart>>,
    #[serde(default, deserialize_with = "de_expect")]
    expect: Option<Vec<u16>>,
    #[serde(default)]
    capture: BTreeMap<String, String>,
    #[serde(default)]
    collect: BTreeMap<String, String>,
    when: Option<String>,
    repeat: Option<u32>,
    for_each: Option<String>,
    timeout_s: Option<f64>,
}

/// Which events a `stream`/`wait` step looks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    event: Option<String>,
    #[serde(default)]
    data: BTreeMap<String, toml::Value>,
}

/// Where a step puts the operation's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Clock {
    /// The operation's time starts just before this step.
    Start,
    /// It stops when this step is done (for a `wait`: when the matching event arrived).
    Stop,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPart {
    name: String,
    filename: Option<String>,
    content_type: Option<String>,
    text: Option<String>,
    base64: Option<String>,
    tar_gz: Option<BTreeMap<String, String>>,
}

/// `expect = 201` or `expect = [200, 201]`.
fn de_expect<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u16>>, D::Error> {
    use serde::de::{Error, SeqAccess, Visitor};

    fn status<E: Error>(v: i64) -> Result<u16, E> {
        u16::try_from(v)
            .ok()
            .filter(|s| (100..=599).contains(s))
            .ok_or_else(|| E::custom(format!("{v} is not an HTTP status (100-599)")))
    }

    struct Expect;
    impl<'de> Visitor<'de> for Expect {
        type Value = Vec<u16>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an HTTP status or a list of them")
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<Vec<u16>, E> {
            Ok(vec![status(v)?])
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<Vec<u16>, E> {
            Ok(vec![status(i64::try_from(v).unwrap_or(i64::MAX))?])
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u16>, A::Error> {
            let mut out = Vec::new();
            while let Some(v) = seq.next_element::<i64>()? {
                out.push(status(v)?);
            }
            if out.is_empty() {
                return Err(A::Error::custom("an empty list matches no status"));
            }
            Ok(out)
        }
    }
    d.deserialize_any(Expect).map(Some)
}

// ---------------------------------------------------------------------------------------------
// Error messages

/// `line L, column C` of a byte offset.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map_or(1, |l| l.chars().count() + 1);
    (line, col)
}

/// A TOML syntax error on one line: `line 3, column 7: <what>`.
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let (l, c) = line_col(text, span.start);
            format!("line {l}, column {c}: {}", e.message())
        }
        None => e.message().to_owned(),
    }
}

/// A deserialization error with where it happened: `journey "fork": measure[0]: unknown field
/// `pathh`, expected one of … (line 12, column 1)`.
fn located(text: &str, e: &serde_path_to_error::Error<toml::de::Error>) -> String {
    use serde_path_to_error::Segment;

    let segs: Vec<&Segment> = e.path().iter().collect();
    let mut ctx = String::new();
    let mut i = 0;
    if let (Some(Segment::Map { key }), Some(Segment::Seq { index })) = (segs.first(), segs.get(1))
        && key == "journey"
    {
        // Name the journey when the file says its name.
        let name = toml::from_str::<toml::Table>(text).ok().and_then(|t| {
            t.get("journey")?
                .as_array()?
                .get(*index)?
                .get("name")?
                .as_str()
                .map(str::to_owned)
        });
        ctx = match name {
            Some(n) => format!("journey {n:?}"),
            None => format!("journey[{index}]"),
        };
        i = 2;
    }
    for s in &segs[i..] {
        match s {
            Segment::Seq { index } => ctx.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !ctx.is_empty() {
                    ctx.push_str(": ");
                }
                ctx.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    let inner = e.inner();
    let mut msg = inner.message().to_owned();
    // serde names the unknown key itself; drop it from the context.
    if let Some(key) = msg
        .strip_prefix("unknown field `")
        .and_then(|m| m.split('`').next())
        && let Some(stripped) = ctx.strip_suffix(key)
    {
        ctx = stripped.trim_end_matches(": ").to_owned();
    }
    if let Some(span) = inner.span() {
        let (l, c) = line_col(text, span.start);
        msg.push_str(&format!(" (line {l}, column {c})"));
    }
    if ctx.is_empty() {
        msg
    } else {
        format!("{ctx}: {msg}")
    }
}

// ---------------------------------------------------------------------------------------------
// Templates

#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Lit(String),
    Var(String),
    Env(String),
}

/// A string with `{{var}}`, `{{env.NAME}}`, `{{index}}`, `{{item}}` placeholders.
#[derive(Debug, Clone, Default, PartialEq)]
struct Template {
    segs: Vec<Seg>,
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

impl Template {
    fn parse(s: &str) -> Result<Template, String> {
        let mut segs = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find("{{") {
            if i > 0 {
                segs.push(Seg::Lit(rest[..i].to_owned()));
            }
            let after = &rest[i + 2..];
            let Some(j) = after.find("}}") else {
                return Err(format!("unclosed {{{{ in {s:?}"));
            };
            let name = after[..j].trim();
            if let Some(env) = name.strip_prefix("env.") {
                if !is_ident(env) {
                    return Err(format!("invalid environment variable {{{{{name}}}}}"));
                }
                segs.push(Seg::Env(env.to_owned()));
            } else if is_ident(name) {
                segs.push(Seg::Var(name.to_owned()));
            } else {
                return Err(format!("invalid variable {{{{{name}}}}} in {s:?}"));
            }
            rest = &after[j + 2..];
        }
        if !rest.is_empty() {
            segs.push(Seg::Lit(rest.to_owned()));
        }
        Ok(Template { segs })
    }

    fn vars(&self) -> impl Iterator<Item = &str> {
        self.segs.iter().filter_map(|s| match s {
            Seg::Var(v) => Some(v.as_str()),
            _ => None,
        })
    }

    /// The text when it has no placeholders.
    fn literal(&self) -> Option<String> {
        self.segs
            .iter()
            .map(|s| match s {
                Seg::Lit(l) => Some(l.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Fills in the placeholders; `for_uri` percent-encodes what a URI cannot carry.
    fn render(&self, vars: &Vars<'_>, for_uri: bool) -> Result<String, Failure> {
        let mut out = String::new();
        for s in &self.segs {
            match s {
                Seg::Lit(l) => out.push_str(l),
                Seg::Var(v) => {
                    let value = vars
                        .get(v)
                        .ok_or_else(|| Failure::other(format!("unknown variable {{{{{v}}}}}")))?;
                    push_value(&mut out, value, for_uri);
                }
                Seg::Env(name) => {
                    let value = std::env::var(name).map_err(|_| {
                        Failure::other(format!("environment variable {name} is not set"))
                    })?;
                    push_value(&mut out, &value, for_uri);
                }
            }
        }
        Ok(out)
    }
}

fn push_value(out: &mut String, value: &str, for_uri: bool) {
    if !for_uri {
        out.push_str(value);
        return;
    }
    for b in value.bytes() {
        if b.is_ascii_graphic() && !b"\"<>\\^`{|}#".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// A JSON body with templated strings.
#[derive(Debug, Clone)]
enum JsonT {
    Lit(serde_json::Value),
    Str(Template),
    Arr(Vec<JsonT>),
    Obj(Vec<(String, JsonT)>),
}

impl JsonT {
    fn compile(v: &toml::Value) -> Result<JsonT, String> {
        Ok(match v {
            toml::Value::String(s) => {
                let t = Template::parse(s)?;
                match t.literal() {
                    Some(l) => JsonT::Lit(serde_json::Value::String(l)),
                    None => JsonT::Str(t),
                }
            }
            toml::Value::Integer(i) => JsonT::Lit((*i).into()),
            toml::Value::Float(f) => JsonT::Lit(
                serde_json::Number::from_f64(*f)
                    .map(serde_json::Value::Number)
                    .ok_or_else(|| format!("{f} is not a JSON number"))?,
            ),
            toml::Value::Boolean(b) => JsonT::Lit((*b).into()),
            toml::Value::Datetime(d) => JsonT::Lit(d.to_string().into()),
            toml::Value::Array(a) => {
                JsonT::Arr(a.iter().map(JsonT::compile).collect::<Result<_, _>>()?)
            }
            toml::Value::Table(t) => JsonT::Obj(
                t.iter()
                    .map(|(k, v)| Ok((k.clone(), JsonT::compile(v)?)))
                    .collect::<Result<_, String>>()?,
            ),
        })
    }

    fn templates<'a>(&'a self, out: &mut Vec<&'a Template>) {
        match self {
            JsonT::Lit(_) => {}
            JsonT::Str(t) => out.push(t),
            JsonT::Arr(a) => a.iter().for_each(|j| j.templates(out)),
            JsonT::Obj(o) => o.iter().for_each(|(_, j)| j.templates(out)),
        }
    }

    fn render(&self, vars: &Vars<'_>) -> Result<serde_json::Value, Failure> {
        Ok(match self {
            JsonT::Lit(v) => v.clone(),
            JsonT::Str(t) => serde_json::Value::String(t.render(vars, false)?),
            JsonT::Arr(a) => serde_json::Value::Array(
                a.iter().map(|j| j.render(vars)).collect::<Result<_, _>>()?,
            ),
            JsonT::Obj(o) => serde_json::Value::Object(
                o.iter()
                    .map(|(k, j)| Ok((k.clone(), j.render(vars)?)))
                    .collect::<Result<_, Failure>>()?,
            ),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// JSON paths

#[derive(Debug, Clone, PartialEq)]
enum PathSeg {
    Key(String),
    Index(usize),
}

/// `data[0].id`, optionally ending in `?`.
#[derive(Debug, Clone, PartialEq)]
struct JsonPath {
    text: String,
    segs: Vec<PathSeg>,
    optional: bool,
}

impl JsonPath {
    fn parse(s: &str) -> Result<JsonPath, String> {
        let (body, optional) = match s.strip_suffix('?') {
            Some(b) => (b, true),
            None => (s, false),
        };
        let bad = |why: &str| format!("bad JSON path {s:?}: {why}");
        let mut segs = Vec::new();
        let mut rest = body;
        if rest.is_empty() {
            return Err(bad("empty"));
        }
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']').ok_or_else(|| bad("unclosed ["))?;
                let n = r[..end]
                    .parse::<usize>()
                    .map_err(|_| bad("an index is a number"))?;
                segs.push(PathSeg::Index(n));
                rest = &r[end + 1..];
            } else {
                if !segs.is_empty() {
                    rest = rest
                        .strip_prefix('.')
                        .ok_or_else(|| bad("expected . or ["))?;
                }
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                if end == 0 {
                    return Err(bad("empty key"));
                }
                segs.push(PathSeg::Key(rest[..end].to_owned()));
                rest = &rest[end..];
            }
        }
        Ok(JsonPath {
            text: body.to_owned(),
            segs,
            optional,
        })
    }

    /// The value there as a variable: a string as is, anything else as JSON text; `null` and
    /// missing values are `None`.
    fn get(&self, v: &serde_json::Value) -> Option<String> {
        let mut cur = v;
        for s in &self.segs {
            cur = match s {
                PathSeg::Key(k) => cur.get(k)?,
                PathSeg::Index(i) => cur.get(i)?,
            };
        }
        match cur {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Compiled steps and journeys

#[derive(Debug, Clone)]
enum PartData {
    Text(Template),
    Bytes(Bytes),
    /// A gzipped tar of these files (name, templated text), made when the step runs.
    TarGz(Vec<(String, Template)>),
}

#[derive(Debug, Clone)]
struct Part {
    name: String,
    filename: Option<String>,
    content_type: Option<String>,
    data: PartData,
}

#[derive(Debug, Clone)]
enum BodyT {
    Empty,
    Json(JsonT),
    Raw(Template),
    Multipart(Vec<Part>),
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
enum StepKind {
    /// One request, its whole response read.
    Request,
    /// A request whose response is a server-sent event stream, kept open under this name.
    Stream(String),
    /// Reads events of an open stream until one matches.
    Wait(String),
}

/// An event a `stream`/`wait` step looks for: its name, and values at JSON paths of its data.
#[derive(Debug, Clone)]
struct Matcher {
    event: Option<String>,
    data: Vec<(JsonPath, Template)>,
}

impl Matcher {
    fn compile(m: &RawMatch) -> Result<Matcher, String> {
        if m.event.is_none() && m.data.is_empty() {
            return Err("give `event`, `data` or both".into());
        }
        if m.event.as_deref().is_some_and(str::is_empty) {
            return Err("event: empty name".into());
        }
        let data = m
            .data
            .iter()
            .map(|(k, v)| {
                let path = JsonPath::parse(k)?;
                if path.optional {
                    return Err(format!("data {k:?}: a match cannot be optional"));
                }
                let text = match v {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_) => {
                        v.to_string()
                    }
                    _ => return Err(format!("data {k:?}: match a string, number or boolean")),
                };
                let t = Template::parse(&text).map_err(|e| format!("data {k:?}: {e}"))?;
                Ok((path, t))
            })
            .collect::<Result<_, String>>()?;
        Ok(Matcher {
            event: m.event.clone(),
            data,
        })
    }

    fn templates(&self) -> impl Iterator<Item = &Template> {
        self.data.iter().map(|(_, t)| t)
    }

    /// With its values filled in.
    fn render(&self, vars: &Vars<'_>) -> Result<Match, Failure> {
        Ok(Match {
            event: self.event.clone(),
            data: self
                .data
                .iter()
                .map(|(p, t)| Ok((p.clone(), t.render(vars, false)?)))
                .collect::<Result<_, Failure>>()?,
        })
    }
}

/// A [`Matcher`] with its values filled in.
#[derive(Debug, Clone)]
struct Match {
    event: Option<String>,
    data: Vec<(JsonPath, String)>,
}

impl Match {
    fn matches(&self, ev: &streams::Event) -> bool {
        if self.event.as_deref().is_some_and(|e| e != ev.name) {
            return false;
        }
        if self.data.is_empty() {
            return true;
        }
        let Some(json) = &ev.json else {
            return false;
        };
        self.data
            .iter()
            .all(|(p, want)| p.get(json).as_deref() == Some(want.as_str()))
    }
}

impl std::fmt::Display for Match {
    /// `session.status with status=idle`, `an event with type=x`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.event {
            Some(e) => f.write_str(e)?,
            None => f.write_str("an event")?,
        }
        for (i, (p, v)) in self.data.iter().enumerate() {
            let sep = if i == 0 { " with " } else { ", " };
            write!(f, "{sep}{}={v}", p.text)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
struct Step {
    kind: StepKind,
    /// Another server than the journey's (`http(s)://host:port`, templated).
    base: Option<Template>,
    until: Option<Matcher>,
    fail_on: Vec<Matcher>,
    clock: Option<Clock>,
    method: Method,
    path: Template,
    headers: Vec<(HeaderName, Template)>,
    body: BodyT,
    expect: Option<Vec<u16>>,
    capture: Vec<(String, JsonPath)>,
    collect: Vec<(String, JsonPath)>,
    /// (negated, variable)
    when: Option<(bool, String)>,
    repeat: Option<u32>,
    for_each: Option<String>,
    timeout: Option<Duration>,
}

/// What the whole file shares: parameters, defaults and the common setup steps.
#[derive(Debug)]
struct Common {
    /// The parameters that have a value (given or default).
    params: HashMap<String, String>,
    /// Parameters without a value: `(name, description)`.
    missing: Vec<(String, String)>,
    headers: Vec<(HeaderName, Template)>,
    timeout: Option<Duration>,
    setup: Vec<Step>,
    /// Clients for the `base` URLs steps name, by URL.
    clients: Mutex<HashMap<String, bench_transport::Client>>,
    /// The file's secrets ([`JourneyFile::secrets`]) and the values secret-named headers got
    /// from captured variables: scrubbed from every failure.
    secrets: Mutex<Secrets>,
}

impl Common {
    /// The client for another server (made on first use; no credentials from the
    /// environment are sent to it).
    fn client_for(&self, base: &str) -> Result<bench_transport::Client, Failure> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = clients.get(base) {
            return Ok(c.clone());
        }
        let mut cfg = bench_transport::ClientConfig::new(base);
        cfg.auth = bench_transport::Auth::None;
        cfg.timeout = self.timeout.unwrap_or(DEFAULT_WAIT);
        let c = bench_transport::Client::new(cfg)
            .map_err(|e| Failure::other(format!("base {base}: {e}")))?;
        clients.insert(base.to_owned(), c.clone());
        Ok(c)
    }

    fn add_secrets(&self, more: &Secrets) {
        self.secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(more);
    }

    /// `f` with every secret replaced by `***`: the file's, the client's (the environment's
    /// API keys, the secret `--header`s) and those captured so far.
    fn scrub(&self, mut f: Failure, env: &Env) -> Failure {
        let own = self
            .secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for s in [&own, env.client.secrets()] {
            s.scrub_string(&mut f.reason);
            s.scrub_string(&mut f.detail);
        }
        f
    }

    /// A header's value rendered from `t`: a secret-named header whose value comes from a
    /// variable makes that value a secret (marked sensitive, scrubbed from failures).
    fn header(
        &self,
        n: &HeaderName,
        t: &Template,
        vars: &Vars<'_>,
    ) -> Result<HeaderValue, Failure> {
        let v = t.render(vars, false)?;
        let secret = is_secret_name(n.as_str());
        if secret && t.literal().is_none() {
            self.secrets
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .add_header(n.as_str(), &v);
        }
        let mut v = header_value(n, v)?;
        v.set_sensitive(secret);
        Ok(v)
    }

    /// Fails when a parameter has no value.
    fn check_params(&self) -> Result<(), Failure> {
        match self.missing.first() {
            None => Ok(()),
            Some((name, _)) => Err(Failure::other(format!(
                "parameter {name} is not set (pass --param {name}=VALUE)"
            ))),
        }
    }
}

#[derive(Debug)]
struct FileJourney {
    name: String,
    description: String,
    kind: Kind,
    concurrency_safe: bool,
    needs_mock_llm: bool,
    needs_runner: bool,
    max_iterations: Option<u32>,
    /// Setup variables that go into the report.
    report: Vec<String>,
    /// Some measure step places the clock.
    clocked: bool,
    common: Arc<Common>,
    setup: Vec<Step>,
    measure: Vec<Step>,
    teardown: Vec<Step>,
}

/// The variables and lists some step sets (for checking names at parse time).
#[derive(Debug, Default, Clone)]
struct Names {
    vars: BTreeSet<String>,
    lists: BTreeSet<String>,
}

impl Names {
    fn add<'a>(&mut self, steps: impl IntoIterator<Item = &'a RawStep>) {
        for s in steps {
            self.vars.extend(s.capture.keys().cloned());
            self.lists.extend(s.collect.keys().cloned());
        }
    }
}

const METHODS: [&str; 7] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

fn timeout_of(t: Option<f64>) -> Result<Option<Duration>, String> {
    match t {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => Err(format!(
            "timeout_s: {s} is not a positive number of seconds"
        )),
    }
}

fn headers_of(h: &BTreeMap<String, String>) -> Result<Vec<(HeaderName, Template)>, String> {
    h.iter()
        .map(|(k, v)| {
            let name = HeaderName::from_bytes(k.trim().as_bytes())
                .map_err(|_| format!("headers: invalid header name {k:?}"))?;
            let t = Template::parse(v).map_err(|e| format!("headers: {k}: {e}"))?;
            if let Some(l) = t.literal() {
                HeaderValue::from_str(&l)
                    .map_err(|_| format!("headers: invalid value for header {k:?}"))?;
            }
            Ok((name, t))
        })
        .collect()
}

/// The keys a `wait` step cannot have (it sends nothing).
fn wait_conflicts(raw: &RawStep) -> Vec<&'static str> {
    [
        ("method", raw.method.is_some()),
        ("base", raw.base.is_some()),
        ("path", raw.path.is_some()),
        ("stream", raw.stream.is_some()),
        ("headers", !raw.headers.is_empty()),
        ("json", raw.json.is_some()),
        ("body", raw.body.is_some()),
        ("multipart", raw.multipart.is_some()),
        ("expect", raw.expect.is_some()),
        ("repeat", raw.repeat.is_some()),
        ("for_each", raw.for_each.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect()
}

fn stream_name(name: &str, key: &str) -> Result<String, String> {
    if is_ident(name) {
        Ok(name.to_owned())
    } else {
        Err(format!(
            "{key} {name:?}: a stream name is letters, digits and _"
        ))
    }
}

fn compile_step(raw: &RawStep, names: &Names) -> Result<Step, String> {
    let kind = match (&raw.stream, &raw.wait) {
        (Some(_), Some(_)) => return Err("`stream` and `wait` are exclusive".into()),
        (Some(n), None) => StepKind::Stream(stream_name(n, "stream")?),
        (None, Some(n)) => {
            let bad = wait_conflicts(raw);
            if !bad.is_empty() {
                return Err(format!(
                    "a `wait` step sends nothing: remove {}",
                    bad.join(", ")
                ));
            }
            if raw.until.is_none() {
                return Err("a `wait` step needs `until` (the event it waits for)".into());
            }
            StepKind::Wait(stream_name(n, "wait")?)
        }
        (None, None) => StepKind::Request,
    };
    if kind == StepKind::Request && (raw.until.is_some() || !raw.fail_on.is_empty()) {
        return Err("`until` and `fail_on` belong to `stream` and `wait` steps".into());
    }
    if matches!(kind, StepKind::Stream(_)) {
        if raw.repeat.is_some() || raw.for_each.is_some() {
            return Err("a `stream` step cannot `repeat` or `for_each`".into());
        }
        if raw.until.is_none() && !(raw.capture.is_empty() && raw.collect.is_empty()) {
            return Err("a `stream` step captures from the event it waits for: add `until`".into());
        }
    }
    let until = raw
        .until
        .as_ref()
        .map(Matcher::compile)
        .transpose()
        .map_err(|e| format!("until: {e}"))?;
    let fail_on = raw
        .fail_on
        .iter()
        .enumerate()
        .map(|(i, m)| Matcher::compile(m).map_err(|e| format!("fail_on[{i}]: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let base = match &raw.base {
        None => None,
        Some(b) => {
            let t = Template::parse(b).map_err(|e| format!("base: {e}"))?;
            let head = match t.segs.first() {
                Some(Seg::Lit(l)) => Some(l.as_str()),
                Some(_) => None,
                None => Some(""),
            };
            if head.is_some_and(|h| {
                !(h.starts_with("http://")
                    || h.starts_with("https://")
                    || "https://".starts_with(h)
                    || "http://".starts_with(h))
            }) {
                return Err(format!("base {b:?}: give an http:// or https:// URL"));
            }
            Some(t)
        }
    };
    let raw_path = match (&kind, &raw.path) {
        (StepKind::Wait(_), _) => "/",
        (_, Some(p)) => p.as_str(),
        (_, None) => return Err("missing `path` (or make it a `wait` step)".into()),
    };
    let method = raw.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    if !METHODS.contains(&method.as_str()) {
        return Err(format!(
            "method {:?}: expected one of {}",
            raw.method.as_deref().unwrap_or_default(),
            METHODS.join(", ")
        ));
    }
    let method = Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    if !raw_path.starts_with('/') {
        return Err(format!("path {raw_path:?} must start with /"));
    }
    let path = Template::parse(raw_path).map_err(|e| format!("path: {e}"))?;
    let headers = headers_of(&raw.headers)?;

    let given: Vec<&str> = [
        ("json", raw.json.is_some()),
        ("body", raw.body.is_some()),
        ("multipart", raw.multipart.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if given.len() > 1 {
        return Err(format!(
            "`json`, `body` and `multipart` are exclusive (found {})",
            given.join(" and ")
        ));
    }
    let body = if let Some(j) = &raw.json {
        BodyT::Json(JsonT::compile(j).map_err(|e| format!("json: {e}"))?)
    } else if let Some(b) = &raw.body {
        BodyT::Raw(Template::parse(b).map_err(|e| format!("body: {e}"))?)
    } else if let Some(parts) = &raw.multipart {
        if parts.is_empty() {
            return Err("multipart: no parts".into());
        }
        BodyT::Multipart(
            parts
                .iter()
                .enumerate()
                .map(|(i, p)| compile_part(p).map_err(|e| format!("multipart[{i}]: {e}")))
                .collect::<Result<_, _>>()?,
        )
    } else {
        BodyT::Empty
    };

    let paths = |m: &BTreeMap<String, String>, what: &str| {
        m.iter()
            .map(|(name, p)| {
                if !is_ident(name) || ["index", "item", "env"].contains(&name.as_str()) {
                    return Err(format!(
                        "{what}: {name:?} cannot be a variable name (letters, digits and _; not index, item or env)"
                    ));
                }
                let p = JsonPath::parse(p).map_err(|e| format!("{what} {name}: {e}"))?;
                Ok((name.clone(), p))
            })
            .collect::<Result<Vec<_>, String>>()
    };
    let capture = paths(&raw.capture, "capture")?;
    let collect = paths(&raw.collect, "collect")?;

    let when = match &raw.when {
        None => None,
        Some(w) => {
            let (neg, name) = match w.strip_prefix('!') {
                Some(n) => (true, n.trim()),
                None => (false, w.trim()),
            };
            if !names.vars.contains(name) && !names.lists.contains(name) {
                return Err(format!("when {w:?}: no step captures or collects {name:?}"));
            }
            Some((neg, name.to_owned()))
        }
    };
    if raw.repeat.is_some() && raw.for_each.is_some() {
        return Err("`repeat` and `for_each` are exclusive".into());
    }
    if raw.repeat == Some(0) {
        return Err("repeat must be at least 1".into());
    }
    if let Some(l) = &raw.for_each
        && !names.lists.contains(l)
    {
        return Err(format!("for_each {l:?}: no step collects {l:?}"));
    }

    let step = Step {
        kind,
        base,
        until,
        fail_on,
        clock: raw.clock,
        method,
        path,
        headers,
        body,
        expect: raw.expect.clone(),
        capture,
        collect,
        when,
        repeat: raw.repeat,
        for_each: raw.for_each.clone(),
        timeout: timeout_of(raw.timeout_s)?,
    };
    check_vars(&step, names)?;
    Ok(step)
}

fn compile_part(p: &RawPart) -> Result<Part, String> {
    if p.name.is_empty() {
        return Err("name is empty".into());
    }
    if let Some(ct) = &p.content_type {
        HeaderValue::from_str(ct).map_err(|_| format!("content_type {ct:?} is not valid"))?;
    }
    let data = match (&p.text, &p.base64, &p.tar_gz) {
        (Some(t), None, None) => {
            PartData::Text(Template::parse(t).map_err(|e| format!("text: {e}"))?)
        }
        (None, None, Some(files)) => {
            if files.is_empty() {
                return Err("tar_gz: no files".into());
            }
            PartData::TarGz(
                files
                    .iter()
                    .map(|(name, text)| {
                        if name.is_empty()
                            || name.starts_with('/')
                            || name.split('/').any(|c| c == ".." || c.is_empty())
                            || name.len() > 100
                        {
                            return Err(format!(
                                "tar_gz: {name:?}: give a relative path of at most 100 bytes, without .. or empty parts"
                            ));
                        }
                        let t = Template::parse(text).map_err(|e| format!("tar_gz {name}: {e}"))?;
                        Ok((name.clone(), t))
                    })
                    .collect::<Result<_, String>>()?,
            )
        }
        (None, Some(b), None) => {
            let compact: String = b.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|e| format!("base64: {e}"))?;
            PartData::Bytes(Bytes::from(bytes))
        }
        _ => return Err("give exactly one of `text`, `base64` and `tar_gz`".into()),
    };
    Ok(Part {
        name: p.name.clone(),
        filename: p.filename.clone(),
        content_type: p.content_type.clone(),
        data,
    })
}

/// Every `{{var}}` of the step names a variable some step captures; `{{index}}` and `{{item}}`
/// only appear in `repeat` / `for_each` steps.
fn check_vars(step: &Step, names: &Names) -> Result<(), String> {
    let mut ts: Vec<(&str, &Template)> = vec![("path", &step.path)];
    ts.extend(step.base.iter().map(|t| ("base", t)));
    ts.extend(
        step.until
            .iter()
            .flat_map(|m| m.templates().map(|t| ("until", t))),
    );
    ts.extend(
        step.fail_on
            .iter()
            .flat_map(|m| m.templates().map(|t| ("fail_on", t))),
    );
    ts.extend(step.headers.iter().map(|(_, t)| ("headers", t)));
    let mut body = Vec::new();
    match &step.body {
        BodyT::Empty => {}
        BodyT::Json(j) => j.templates(&mut body),
        BodyT::Raw(t) => body.push(t),
        BodyT::Multipart(parts) => {
            for p in parts {
                match &p.data {
                    PartData::Text(t) => body.push(t),
                    PartData::Bytes(_) => {}
                    PartData::TarGz(files) => body.extend(files.iter().map(|(_, t)| t)),
                }
            }
        }
    }
    let what = match step.body {
        BodyT::Json(_) => "json",
        BodyT::Multipart(_) => "multipart",
        _ => "body",
    };
    ts.extend(body.into_iter().map(|t| (what, t)));
    for (what, t) in ts {
        for v in t.vars() {
            let ok = match v {
                "index" => step.repeat.is_some(),
                "item" => step.for_each.is_some(),
                _ => names.vars.contains(v),
            };
            if !ok {
                return Err(match v {
                    "index" => format!("{what}: {{{{index}}}} is only set in a step with `repeat`"),
                    "item" => format!("{what}: {{{{item}}}} is only set in a step with `for_each`"),
                    _ if names.lists.contains(v) => format!(
                        "{what}: {{{{{v}}}}} is a collected list: walk it with for_each and {{{{item}}}}"
                    ),
                    _ => format!("{what}: unknown variable {{{{{v}}}}} (no step captures it)"),
                });
            }
        }
    }
    Ok(())
}

fn compile_steps(steps: &[RawStep], names: &Names, ctx: &str) -> Result<Vec<Step>, String> {
    steps
        .iter()
        .enumerate()
        .map(|(i, s)| compile_step(s, names).map_err(|e| format!("{ctx}[{i}]: {e}")))
        .collect()
}

/// The parameters with the values given (or their defaults).
fn compile_params(
    raw: &BTreeMap<String, RawParam>,
    given: &BTreeMap<String, String>,
) -> Result<Vec<Param>, String> {
    for k in given.keys() {
        if !raw.contains_key(k) {
            let known: Vec<&str> = raw.keys().map(String::as_str).collect();
            return Err(if known.is_empty() {
                format!("unknown parameter {k:?}: the file declares no [params]")
            } else {
                format!(
                    "unknown parameter {k:?}; the file's parameters: {}",
                    known.join(", ")
                )
            });
        }
    }
    raw.iter()
        .map(|(name, p)| {
            if !is_ident(name) || ["index", "item", "env"].contains(&name.as_str()) {
                return Err(format!(
                    "params: {name:?} cannot be a parameter name (letters, digits and _; not index, item or env)"
                ));
            }
            let default = match &p.default {
                None => None,
                Some(toml::Value::String(s)) => Some(s.clone()),
                Some(
                    v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_)),
                ) => Some(v.to_string()),
                Some(_) => {
                    return Err(format!(
                        "params: {name}: default: give a string, number or boolean"
                    ));
                }
            };
            Ok(Param {
                name: name.clone(),
                description: p.description.clone(),
                value: given.get(name).cloned().or_else(|| default.clone()),
                default,
            })
        })
        .collect()
}

/// Every `wait` names a stream an earlier step of the same sequence opened (`opened`: those
/// open when the sequence starts).
fn check_streams(steps: &[Step], opened: &mut BTreeSet<String>, ctx: &str) -> Result<(), String> {
    for (i, s) in steps.iter().enumerate() {
        match &s.kind {
            StepKind::Stream(n) => {
                opened.insert(n.clone());
            }
            StepKind::Wait(n) if !opened.contains(n) => {
                return Err(format!(
                    "{ctx}[{i}]: wait {n:?}: no earlier step opens a stream named {n:?} (streams live until the end of their setup, operation or teardown)"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// `clock` only in `measure`: at most one start and one stop, the start first.
fn check_clock(j: &RawJourney, ctx: &str) -> Result<bool, String> {
    for (what, steps) in [("setup", &j.setup), ("teardown", &j.teardown)] {
        if let Some(i) = steps.iter().position(|s| s.clock.is_some()) {
            return Err(format!(
                "{ctx}: {what}[{i}]: `clock` belongs to measure steps (setup and teardown are never timed)"
            ));
        }
    }
    let at = |c: Clock| -> Result<Option<usize>, String> {
        let v: Vec<usize> = j
            .measure
            .iter()
            .enumerate()
            .filter(|(_, s)| s.clock == Some(c))
            .map(|(i, _)| i)
            .collect();
        if v.len() > 1 {
            return Err(format!(
                "{ctx}: measure: clock = {:?} on steps {v:?}: give it once",
                format!("{c:?}").to_lowercase()
            ));
        }
        Ok(v.first().copied())
    };
    let (start, stop) = (at(Clock::Start)?, at(Clock::Stop)?);
    if let (Some(a), Some(b)) = (start, stop)
        && b < a
    {
        return Err(format!(
            "{ctx}: measure: the clock stops (step {b}) before it starts (step {a})"
        ));
    }
    Ok(start.is_some() || stop.is_some())
}

fn compile(raw: RawFile, given: &BTreeMap<String, String>) -> Result<JourneyFile, String> {
    let params = compile_params(&raw.params, given)?;
    let mut global = Names::default();
    global.vars.extend(params.iter().map(|p| p.name.clone()));
    for s in raw.setup.iter().chain(
        raw.journey
            .iter()
            .flat_map(|j| j.setup.iter().chain(&j.measure).chain(&j.teardown)),
    ) {
        if let Some(p) = params
            .iter()
            .find(|p| s.capture.contains_key(&p.name) || s.collect.contains_key(&p.name))
        {
            return Err(format!(
                "{:?} is a parameter: a step cannot capture or collect it",
                p.name
            ));
        }
    }
    global.add(&raw.setup);
    let mut all = global.clone();
    for j in &raw.journey {
        all.add(j.setup.iter().chain(&j.measure).chain(&j.teardown));
    }
    let headers = headers_of(&raw.defaults.headers).map_err(|e| format!("defaults: {e}"))?;
    for (name, t) in &headers {
        if let Some(v) = t
            .vars()
            .find(|v| !all.vars.contains(*v) && !["index", "item"].contains(v))
        {
            return Err(format!(
                "defaults: headers: {name}: unknown variable {{{{{v}}}}} (no step captures it)"
            ));
        }
    }
    let common_setup = compile_steps(&raw.setup, &global, "setup")?;
    let mut common_streams = BTreeSet::new();
    check_streams(&common_setup, &mut common_streams, "setup")?;
    let common = Arc::new(Common {
        params: params
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.value.clone()?)))
            .collect(),
        missing: params
            .iter()
            .filter(|p| p.value.is_none())
            .map(|p| (p.name.clone(), p.description.clone()))
            .collect(),
        headers,
        timeout: timeout_of(raw.defaults.timeout_s).map_err(|e| format!("defaults: {e}"))?,
        setup: common_setup,
        clients: Mutex::new(HashMap::new()),
        secrets: Mutex::new(Secrets::default()),
    });
    if raw.journey.is_empty() {
        return Err("no [[journey]]".into());
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, j) in raw.journey.into_iter().enumerate() {
        if j.name.is_empty()
            || !j
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
        {
            return Err(format!(
                "journey[{i}]: name {:?}: use letters, digits and _ . : - (not empty)",
                j.name
            ));
        }
        let ctx = format!("journey {:?}", j.name);
        if !seen.insert(j.name.clone()) {
            return Err(format!("{ctx}: duplicate name"));
        }
        if j.measure.is_empty() {
            return Err(format!("{ctx}: measure: no steps"));
        }
        if j.max_iterations == Some(0) {
            return Err(format!("{ctx}: max_iterations must be at least 1"));
        }
        let mut names = global.clone();
        names.add(j.setup.iter().chain(&j.measure).chain(&j.teardown));
        let clocked = check_clock(&j, &ctx)?;
        for v in &j.report {
            if !names.vars.contains(v) {
                return Err(format!(
                    "{ctx}: report: {v:?} is neither a parameter nor captured by a step"
                ));
            }
        }
        let setup = compile_steps(&j.setup, &names, &format!("{ctx}: setup"))?;
        let measure = compile_steps(&j.measure, &names, &format!("{ctx}: measure"))?;
        let teardown = compile_steps(&j.teardown, &names, &format!("{ctx}: teardown"))?;
        check_streams(
            &setup,
            &mut common_streams.clone(),
            &format!("{ctx}: setup"),
        )?;
        check_streams(&measure, &mut BTreeSet::new(), &format!("{ctx}: measure"))?;
        check_streams(&teardown, &mut BTreeSet::new(), &format!("{ctx}: teardown"))?;
        out.push(Arc::new(FileJourney {
            setup,
            measure,
            teardown,
            name: j.name,
            description: j.description,
            kind: j.kind.unwrap_or(Kind::Latency),
            concurrency_safe: j.concurrency_safe,
            needs_mock_llm: j.needs_mock_llm,
            needs_runner: j.needs_runner,
            max_iterations: j.max_iterations,
            report: j.report,
            clocked,
            common: common.clone(),
        }));
    }
    Ok(JourneyFile {
        journeys: out,
        params,
        secrets: Secrets::default(),
    })
}

// ---------------------------------------------------------------------------------------------
// Running

type Lists = Mutex<HashMap<String, Vec<String>>>;

/// The journey context: setup's captures and the collected lists.
#[derive(Debug, Default)]
struct State {
    vars: HashMap<String, String>,
    lists: Lists,
}

/// The variables one sequence of steps sees: `base` (the context, read-only), its own captures,
/// and the shared lists.
struct Scope<'a> {
    base: &'a HashMap<String, String>,
    local: HashMap<String, String>,
    lists: &'a Lists,
    /// Event streams opened by this sequence of steps (closed with it).
    streams: HashMap<String, streams::OpenStream>,
    /// When the event the last `wait` matched arrived.
    matched_at: Option<Instant>,
    clock_start: Option<Instant>,
    clock_stop: Option<Instant>,
}

impl<'a> Scope<'a> {
    fn new(base: &'a HashMap<String, String>, lists: &'a Lists) -> Scope<'a> {
        Scope {
            base,
            local: HashMap::new(),
            lists,
            streams: HashMap::new(),
            matched_at: None,
            clock_start: None,
            clock_stop: None,
        }
    }

    fn is_set(&self, name: &str) -> bool {
        self.local.contains_key(name)
            || self.base.contains_key(name)
            || self
                .lists
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(name)
                .is_some_and(|l| !l.is_empty())
    }

    fn list(&self, name: &str) -> Vec<String> {
        self.lists
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
            .unwrap_or_default()
    }
}

/// What a template sees in one execution of a step.
struct Vars<'a> {
    scope: &'a Scope<'a>,
    index: Option<String>,
    item: Option<&'a str>,
}

impl Vars<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        match name {
            "index" if self.index.is_some() => self.index.as_deref(),
            "item" if self.item.is_some() => self.item,
            _ => self
                .scope
                .local
                .get(name)
                .or_else(|| self.scope.base.get(name))
                .map(String::as_str),
        }
    }
}

/// Runs `steps` in order. Not `best_effort`: the first failure ends the run. `best_effort`:
/// every step (and every repetition) is tried; the first failure is returned at the end.
async fn run_steps(
    env: &Env,
    common: &Common,
    steps: &[Step],
    scope: &mut Scope<'_>,
    best_effort: bool,
) -> Result<(), Failure> {
    let mut first = None;
    for step in steps {
        if step.clock == Some(Clock::Start) {
            scope.clock_start = Some(Instant::now());
        }
        scope.matched_at = None;
        let r = run_step(env, common, step, scope, best_effort).await;
        if r.is_ok() && step.clock == Some(Clock::Stop) {
            scope.clock_stop = Some(scope.matched_at.unwrap_or_else(Instant::now));
        }
        if let Err(f) = r {
            let f = common.scrub(f, env);
            if !best_effort {
                return Err(f);
            }
            first.get_or_insert(f);
        }
    }
    first.map_or(Ok(()), Err)
}

async fn run_step(
    env: &Env,
    common: &Common,
    step: &Step,
    scope: &mut Scope<'_>,
    best_effort: bool,
) -> Result<(), Failure> {
    if let Some((negated, name)) = &step.when
        && scope.is_set(name) == *negated
    {
        return Ok(());
    }
    if let StepKind::Wait(name) = &step.kind {
        return wait_on(common, step, scope, name).await;
    }
    let mut first = None;
    let mut note = |r: Result<(), Failure>| -> Result<(), Failure> {
        match r {
            Ok(()) => Ok(()),
            Err(f) if best_effort => {
                first.get_or_insert(f);
                Ok(())
            }
            Err(f) => Err(f),
        }
    };
    if let Some(n) = step.repeat {
        for i in 0..n {
            note(run_once(env, common, step, scope, Some(i), None).await)?;
        }
    } else if let Some(list) = &step.for_each {
        for item in scope.list(list) {
            note(run_once(env, common, step, scope, None, Some(&item)).await)?;
        }
    } else {
        note(run_once(env, common, step, scope, None, None).await)?;
    }
    first.map_or(Ok(()), Err)
}

/// Sets `name` in `headers`, replacing an earlier value.
fn set_header(headers: &mut Vec<(HeaderName, HeaderValue)>, name: HeaderName, value: HeaderValue) {
    match headers.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = value,
        None => headers.push((name, value)),
    }
}

fn header_value(name: &HeaderName, v: String) -> Result<HeaderValue, Failure> {
    HeaderValue::try_from(v).map_err(|_| Failure::other(format!("header {name}: invalid value")))
}

/// One request of a step: render, send, check, capture.
async fn run_once(
    env: &Env,
    common: &Common,
    step: &Step,
    scope: &mut Scope<'_>,
    index: Option<u32>,
    item: Option<&str>,
) -> Result<(), Failure> {
    let (base, path, headers, body) = {
        let vars = Vars {
            scope,
            index: index.map(|i| i.to_string()),
            item,
        };
        let base = step
            .base
            .as_ref()
            .map(|b| b.render(&vars, false))
            .transpose()?;
        let path = step.path.render(&vars, true)?;
        let mut headers = Vec::new();
        for (n, t) in &common.headers {
            set_header(&mut headers, n.clone(), common.header(n, t, &vars)?);
        }
        let body = match &step.body {
            BodyT::Empty => Bytes::new(),
            BodyT::Json(j) => {
                set_header(
                    &mut headers,
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Bytes::from(j.render(&vars)?.to_string())
            }
            BodyT::Raw(t) => Bytes::from(t.render(&vars, false)?),
            BodyT::Multipart(parts) => {
                let mut rendered = Vec::with_capacity(parts.len());
                for p in parts {
                    let data: Cow<'_, [u8]> = match &p.data {
                        PartData::Text(t) => Cow::Owned(t.render(&vars, false)?.into_bytes()),
                        PartData::Bytes(b) => Cow::Borrowed(&b[..]),
                        PartData::TarGz(files) => {
                            let mut rendered = Vec::with_capacity(files.len());
                            for (name, t) in files {
                                rendered.push((name.as_str(), t.render(&vars, false)?));
                            }
                            Cow::Owned(tar_gz(&rendered).map_err(|e| {
                                Failure::other(format!("multipart {}: tar_gz: {e}", p.name))
                            })?)
                        }
                    };
                    rendered.push(MultipartPart {
                        name: &p.name,
                        filename: p.filename.as_deref(),
                        content_type: p.content_type.as_deref(),
                        data,
                    });
                }
                let (content_type, body) = multipart_body(&rendered);
                set_header(
                    &mut headers,
                    CONTENT_TYPE,
                    header_value(&CONTENT_TYPE, content_type)?,
                );
                body
            }
        };
        for (n, t) in &step.headers {
            set_header(&mut headers, n.clone(), common.header(n, t, &vars)?);
        }
        (base, path, headers, body)
    };
    let other;
    let client = match &base {
        None => &env.client,
        Some(b) => {
            other = common.client_for(b)?;
            &other
        }
    };
    let timeout = step.timeout.or(common.timeout);
    if let StepKind::Stream(name) = &step.kind {
        let mut resp = client
            .request_streaming(step.method.clone(), &path, &headers, body, timeout)
            .await?;
        if !expected(step, resp.status) {
            let body = streams::body_start(&mut resp).await;
            return Err(status_failure(step, &path, resp.status, &body));
        }
        scope
            .streams
            .insert(name.clone(), streams::OpenStream::start(resp));
        if step.until.is_some() {
            return wait_on(common, step, scope, name).await;
        }
        return Ok(());
    }
    let r = client
        .request_with(step.method.clone(), &path, &headers, body, timeout)
        .await?;
    if !expected(step, r.status) {
        return Err(status_failure(step, &path, r.status, &r.body));
    }
    if step.capture.is_empty() && step.collect.is_empty() {
        return Ok(());
    }
    let json: serde_json::Value = match serde_json::from_slice(&r.body) {
        Ok(v) => v,
        Err(e) => {
            let name = step
                .capture
                .first()
                .or(step.collect.first())
                .map_or("", |(n, _)| n.as_str());
            return Err(Failure {
                reason: format!("other: capture {name}: the response is not JSON"),
                detail: format!(
                    "{} {path}: capture {name}: the response is not JSON ({e}): {}",
                    step.method,
                    snippet(&r.body)
                ),
            });
        }
    };
    let what = format!("{} {path}", step.method);
    apply_captures(step, scope, &json, &what, &r.body)
}

/// Sets the step's captures and appends its collected values from `json` (a response, or a
/// matched event's data: `raw`, for failure details; `what` names it).
fn apply_captures(
    step: &Step,
    scope: &mut Scope<'_>,
    json: &serde_json::Value,
    what: &str,
    raw: &[u8],
) -> Result<(), Failure> {
    let value = |name: &str, p: &JsonPath| -> Result<Option<String>, Failure> {
        match p.get(json) {
            Some(v) => Ok(Some(v)),
            None if p.optional => Ok(None),
            None => Err(Failure {
                reason: format!("other: capture {name}: no value at {}", p.text),
                detail: format!(
                    "{what}: capture {name}: no value at {}: {}",
                    p.text,
                    snippet(raw)
                ),
            }),
        }
    };
    for (name, p) in &step.capture {
        if let Some(v) = value(name, p)? {
            scope.local.insert(name.clone(), v);
        }
    }
    for (name, p) in &step.collect {
        if let Some(v) = value(name, p)? {
            scope
                .lists
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(name.clone())
                .or_default()
                .push(v);
        }
    }
    Ok(())
}

/// Whether `status` is one the step expects (default: any 2xx).
fn expected(step: &Step, status: http::StatusCode) -> bool {
    match &step.expect {
        Some(codes) => codes.contains(&status.as_u16()),
        None => status.is_success(),
    }
}

/// `HTTP <status>`, with the request and the start of the body in its detail.
fn status_failure(step: &Step, path: &str, status: http::StatusCode, body: &[u8]) -> Failure {
    let mut detail = format!("{} {path}", step.method);
    if !body.is_empty() {
        detail.push_str(": ");
        detail.push_str(&snippet(body));
    }
    Failure::status(status.as_u16(), detail)
}

/// Default for how long a `wait` waits when neither the step nor `[defaults]` says.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Reads events of the open stream `name` until one matches the step's `until` (a `fail_on`
/// match, the stream's end or the deadline first are failures), then captures from its data.
async fn wait_on(
    common: &Common,
    step: &Step,
    scope: &mut Scope<'_>,
    name: &str,
) -> Result<(), Failure> {
    let (until, fail_on) = {
        let vars = Vars {
            scope,
            index: None,
            item: None,
        };
        let until = match &step.until {
            Some(m) => m.render(&vars)?,
            None => return Ok(()),
        };
        let fail_on = step
            .fail_on
            .iter()
            .map(|m| m.render(&vars))
            .collect::<Result<Vec<_>, _>>()?;
        (until, fail_on)
    };
    let wait = step.timeout.or(common.timeout).unwrap_or(DEFAULT_WAIT);
    let deadline = Instant::now() + wait;
    let Some(stream) = scope.streams.get_mut(name) else {
        return Err(Failure::other(format!("stream {name} is not open")));
    };
    let event = loop {
        match stream.next(deadline).await {
            None => {
                return Err(Failure {
                    reason: "timeout".into(),
                    detail: format!("no {until} on stream {name} within {wait:?}"),
                });
            }
            Some(streams::Item::End) => {
                return Err(Failure {
                    reason: format!("other: stream {name} ended before {until}"),
                    detail: String::new(),
                });
            }
            Some(streams::Item::Failed(f)) => return Err(f),
            Some(streams::Item::Event(ev)) => {
                if let Some(m) = fail_on.iter().find(|m| m.matches(&ev)) {
                    return Err(Failure {
                        reason: format!("other: {m} on stream {name}"),
                        detail: format!("{m} on stream {name}: {}", snippet(ev.data.as_bytes())),
                    });
                }
                if until.matches(&ev) {
                    break ev;
                }
            }
        }
    };
    scope.matched_at = Some(event.at);
    if step.capture.is_empty() && step.collect.is_empty() {
        return Ok(());
    }
    let Some(json) = &event.json else {
        return Err(Failure::other(format!(
            "capture: the data of {until} is not JSON: {}",
            snippet(event.data.as_bytes())
        )));
    };
    let what = format!("{until} on stream {name}");
    apply_captures(step, scope, json, &what, event.data.as_bytes())
}

/// A gzipped tar (POSIX ustar) of `files`, reproducible: mode 0644, owner 0, time 0.
fn tar_gz(files: &[(&str, String)]) -> std::io::Result<Vec<u8>> {
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    for (name, text) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(text.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        tar.append_data(&mut h, name, text.as_bytes())?;
    }
    tar.into_inner()?.finish()
}

/// The start of a body, for failure details.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(256)]);
    // Never inside a word: a secret the server echoed is whole (and scrubbed) or left out.
    let cut = bench_rundir::secrets::cut(&text, 200);
    let mut s = cut.trim().to_owned();
    if cut.len() < body.len() {
        s.push('…');
    }
    s
}

// ---------------------------------------------------------------------------------------------
// multipart/form-data

/// One part of a multipart body.
#[derive(Debug)]
struct MultipartPart<'a> {
    name: &'a str,
    filename: Option<&'a str>,
    content_type: Option<&'a str>,
    data: Cow<'a, [u8]>,
}

const BOUNDARY: &str = "bench-journeys-7b3f1c9e2d5a";

/// A quoted-string parameter as browsers write it (`"`, CR and LF percent-encoded).
fn quote_param(s: &str) -> String {
    s.replace('"', "%22")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// `multipart/form-data` (RFC 7578): the content type (with its boundary) and the body. The
/// boundary is one that no part contains.
fn multipart_body(parts: &[MultipartPart<'_>]) -> (String, Bytes) {
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    let mut boundary = BOUNDARY.to_owned();
    let mut n = 0u32;
    while parts.iter().any(|p| contains(&p.data, boundary.as_bytes())) {
        n += 1;
        boundary = format!("{BOUNDARY}-{n}");
    }
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        out.extend_from_slice(
            format!(
                "Content-Disposition: form-data; name=\"{}\"",
                quote_param(p.name)
            )
            .as_bytes(),
        );
        if let Some(f) = p.filename {
            out.extend_from_slice(format!("; filename=\"{}\"", quote_param(f)).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        let ct = match (p.content_type, p.filename) {
            (Some(ct), _) => Some(ct),
            (None, Some(_)) => Some("application/octet-stream"),
            (None, None) => None,
        };
        if let Some(ct) = ct {
            out.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&p.data);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (
        format!("multipart/form-data; boundary={boundary}"),
        Bytes::from(out),
    )
}

// ---------------------------------------------------------------------------------------------
// The Journey

fn state_of(ctx: &Ctx) -> Result<&State, Failure> {
    ctx.downcast_ref::<State>()
        .ok_or_else(|| Failure::other("the setup context is not a declarative journey's"))
}

impl Journey for FileJourney {
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn kind(&self) -> Kind {
        self.kind
    }
    fn concurrency_safe(&self) -> bool {
        self.concurrency_safe
    }
    fn needs_mock_llm(&self) -> bool {
        self.needs_mock_llm
    }
    fn needs_runner(&self) -> bool {
        self.needs_runner
    }
    fn max_iterations(&self) -> Option<u32> {
        self.max_iterations
    }
    fn notes(&self, ctx: &Ctx) -> Vec<(String, String)> {
        let Ok(state) = state_of(ctx) else {
            return Vec::new();
        };
        self.report
            .iter()
            .filter_map(|n| Some((n.clone(), state.vars.get(n)?.clone())))
            .collect()
    }

    fn setup<'a>(&'a self, env: &'a Env) -> BoxFuture<'a, Result<Ctx, Failure>> {
        Box::pin(async move {
            let common = &*self.common;
            common.check_params()?;
            let lists = Lists::default();
            let local = {
                let mut scope = Scope::new(&common.params, &lists);
                run_steps(env, common, &common.setup, &mut scope, false).await?;
                run_steps(env, common, &self.setup, &mut scope, false).await?;
                std::mem::take(&mut scope.local)
            };
            let mut vars = common.params.clone();
            vars.extend(local);
            Ok(Box::new(State { vars, lists }) as Ctx)
        })
    }

    fn measure<'a>(
        &'a self,
        env: &'a Env,
        ctx: &'a Ctx,
    ) -> BoxFuture<'a, Result<Option<Duration>, Failure>> {
        Box::pin(async move {
            let state = state_of(ctx)?;
            let mut scope = Scope::new(&state.vars, &state.lists);
            let t0 = Instant::now();
            run_steps(env, &self.common, &self.measure, &mut scope, false).await?;
            if !self.clocked {
                return Ok(None);
            }
            let end = Instant::now();
            let start = scope.clock_start.unwrap_or(t0);
            let stop = scope.clock_stop.unwrap_or(end);
            Ok(Some(stop.saturating_duration_since(start)))
        })
    }

    fn teardown<'a>(&'a self, env: &'a Env, ctx: Ctx) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Ok(state) = state_of(&ctx) else {
                return;
            };
            let mut scope = Scope::new(&state.vars, &state.lists);
            let _ = run_steps(env, &self.common, &self.teardown, &mut scope, true).await;
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn templates() {
        let t = Template::parse("/v1/{{ sid }}/x/{{env.HOME}}{{index}}").unwrap();
        assert_eq!(
            t.segs,
            vec![
                Seg::Lit("/v1/".into()),
                Seg::Var("sid".into()),
                Seg::Lit("/x/".into()),
                Seg::Env("HOME".into()),
                Seg::Var("index".into()),
            ]
        );
        assert!(Template::parse("a {{b").unwrap_err().contains("unclosed"));
        assert!(
            Template::parse("{{a b}}")
                .unwrap_err()
                .contains("invalid variable")
        );
        assert_eq!(
            Template::parse("{\"a\":{}}").unwrap().literal().as_deref(),
            Some("{\"a\":{}}")
        );

        let base = HashMap::from([("sid".to_owned(), "a b/#".to_owned())]);
        let lists = Lists::default();
        let scope = Scope::new(&base, &lists);
        let vars = Vars {
            scope: &scope,
            index: Some("3".into()),
            item: None,
        };
        let t = Template::parse("/s/{{sid}}?n={{index}}").unwrap();
        assert_eq!(t.render(&vars, true).unwrap(), "/s/a%20b/%23?n=3");
        assert_eq!(t.render(&vars, false).unwrap(), "/s/a b/#?n=3");
        let e = Template::parse("{{item}}").unwrap().render(&vars, false);
        assert_eq!(e.unwrap_err().reason, "other: unknown variable {{item}}");
        let e = Template::parse("{{env.BENCH_JOURNEYS_SURELY_UNSET}}")
            .unwrap()
            .render(&vars, false);
        assert_eq!(
            e.unwrap_err().reason,
            "other: environment variable BENCH_JOURNEYS_SURELY_UNSET is not set"
        );
    }

    #[test]
    fn json_paths() {
        let v = serde_json::json!({"data": [{"id": "s1", "n": 2, "o": {"k": true}}], "x": null});
        let get = |p: &str| JsonPath::parse(p).unwrap().get(&v);
        assert_eq!(get("data[0].id").as_deref(), Some("s1"));
        assert_eq!(get("data[0].n").as_deref(), Some("2"));
        assert_eq!(get("data[0].o").as_deref(), Some("{\"k\":true}"));
        assert_eq!(get("data[1].id?"), None);
        assert_eq!(get("x"), None);
        assert!(JsonPath::parse("data[0].id?").unwrap().optional);
        let arr = serde_json::json!([{"item_id": "i"}]);
        assert_eq!(
            JsonPath::parse("[0].item_id").unwrap().get(&arr).as_deref(),
            Some("i")
        );
        for bad in ["", "?", ".id", "a..b", "a[x]", "a[0", "a[0]b"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn multipart_bytes() {
        let parts = [
            MultipartPart {
                name: "bundle",
                filename: Some("a\".tar.gz"),
                content_type: Some("application/gzip"),
                data: Cow::Borrowed(b"\x1f\x8b\x00\r\n"),
            },
            MultipartPart {
                name: "note",
                filename: None,
                content_type: None,
                data: Cow::Borrowed(b"hi"),
            },
        ];
        let (ct, body) = multipart_body(&parts);
        assert_eq!(ct, format!("multipart/form-data; boundary={BOUNDARY}"));
        let mut want = format!(
            "--{BOUNDARY}\r\n\
             Content-Disposition: form-data; name=\"bundle\"; filename=\"a%22.tar.gz\"\r\n\
             Content-Type: application/gzip\r\n\
             \r\n"
        )
        .into_bytes();
        want.extend_from_slice(b"\x1f\x8b\x00\r\n\r\n");
        want.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\n\
                 Content-Disposition: form-data; name=\"note\"\r\n\
                 \r\n\
                 hi\r\n\
                 --{BOUNDARY}--\r\n"
            )
            .as_bytes(),
        );
        assert_eq!(
            String::from_utf8_lossy(&body),
            String::from_utf8_lossy(&want)
        );
        assert_eq!(&body[..], &want[..]);

        // A part that contains the boundary gets another one.
        let clash = [MultipartPart {
            name: "x",
            filename: None,
            content_type: None,
            data: Cow::Owned(format!("--{BOUNDARY}").into_bytes()),
        }];
        let (ct, _) = multipart_body(&clash);
        assert_eq!(ct, format!("multipart/form-data; boundary={BOUNDARY}-1"));
    }

    #[test]
    fn the_agent_sessions_pack_parses() {
        let f = parse("agent-sessions.toml", crate::packs::AGENT_SESSIONS_TOML).unwrap();
        let names: Vec<String> = f.journeys().iter().map(|j| j.name().to_owned()).collect();
        assert_eq!(
            names,
            [
                "list_sessions",
                "create_session",
                "get_session",
                "load_conversation_history",
                "search_sessions",
                "fork_session",
                "add_comment",
            ]
        );
        assert!(f.journeys().iter().all(|j| j.concurrency_safe()));
        assert!(f.journeys().iter().all(|j| !j.description().is_empty()));
        // The embedded bundle is a gzip stream.
        let bundle = f.journeys[0]
            .common
            .setup
            .iter()
            .find_map(|s| match &s.body {
                BodyT::Multipart(p) => match &p[0].data {
                    PartData::Bytes(b) => Some(b.clone()),
                    PartData::Text(_) | PartData::TarGz(_) => None,
                },
                _ => None,
            });
        assert_eq!(&bundle.unwrap()[..2], b"\x1f\x8b");
    }
}
