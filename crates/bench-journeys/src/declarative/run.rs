//! Running: steps executed against the server, with their variables.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderName, HeaderValue};

use crate::journey::{Env, Failure};

use super::json_path::JsonPath;
use super::multipart::{MultipartPart, multipart_body};
use super::raw::Clock;
use super::steps::{BodyT, Common, PartData, Step, StepKind};
use super::streams;

pub(super) type Lists = Mutex<HashMap<String, Vec<String>>>;

/// The journey context: setup's captures and the collected lists.
#[derive(Debug, Default)]
pub(super) struct State {
    pub(super) vars: HashMap<String, String>,
    pub(super) lists: Lists,
}

/// The variables one sequence of steps sees: `base` (the context, read-only), its own captures,
/// and the shared lists.
pub(super) struct Scope<'a> {
    base: &'a HashMap<String, String>,
    pub(super) local: HashMap<String, String>,
    lists: &'a Lists,
    /// Event streams opened by this sequence of steps (closed with it).
    streams: HashMap<String, streams::OpenStream>,
    /// When the event the last `wait` matched arrived.
    matched_at: Option<Instant>,
    pub(super) clock_start: Option<Instant>,
    pub(super) clock_stop: Option<Instant>,
}

impl<'a> Scope<'a> {
    pub(super) fn new(base: &'a HashMap<String, String>, lists: &'a Lists) -> Scope<'a> {
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
pub(super) struct Vars<'a> {
    pub(super) scope: &'a Scope<'a>,
    pub(super) index: Option<String>,
    pub(super) item: Option<&'a str>,
}

impl Vars<'_> {
    pub(super) fn get(&self, name: &str) -> Option<&str> {
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
pub(super) async fn run_steps(
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

pub(super) fn header_value(name: &HeaderName, v: String) -> Result<HeaderValue, Failure> {
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
            other = common.client_for(b, env.client.limits())?;
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
pub(super) const DEFAULT_WAIT: Duration = Duration::from_secs(30);

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
