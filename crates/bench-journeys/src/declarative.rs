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

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bench_rundir::secrets::{Secrets, is_secret_name};

use crate::journey::Journey;

mod compile;
mod errors;
mod journey;
mod json_path;
mod multipart;
mod raw;
mod run;
mod steps;
mod streams;
mod template;

use compile::compile;
use errors::{located, toml_message};
use raw::RawFile;
use steps::FileJourney;

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use steps::{BodyT, PartData};

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
