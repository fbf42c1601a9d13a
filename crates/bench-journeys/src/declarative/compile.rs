//! Compiled steps and journeys: compiling the file as written into them, checking names,
//! streams and the clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};

use bench_rundir::secrets::Secrets;

use crate::journey::Kind;

use super::json_path::JsonPath;
use super::raw::{Clock, RawFile, RawJourney, RawParam, RawPart, RawStep};
use super::steps::{BodyT, Common, FileJourney, Matcher, Names, Part, PartData, Step, StepKind};
use super::template::{JsonT, Seg, Template, is_ident};
use super::{JourneyFile, Param};

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

pub(super) fn compile(
    raw: RawFile,
    given: &BTreeMap<String, String>,
) -> Result<JourneyFile, String> {
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
