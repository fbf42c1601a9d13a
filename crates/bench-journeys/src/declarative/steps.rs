//! Compiled steps and journeys: the types, as the runner sees them.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};

use bench_rundir::secrets::{Secrets, is_secret_name};

use crate::journey::{Env, Failure, Kind};

use super::json_path::JsonPath;
use super::raw::{Clock, RawMatch, RawStep};
use super::run::{DEFAULT_WAIT, Vars, header_value};
use super::streams;
use super::template::{JsonT, Template};

#[derive(Debug, Clone)]
pub(super) enum PartData {
    Text(Template),
    Bytes(Bytes),
    /// A gzipped tar of these files (name, templated text), made when the step runs.
    TarGz(Vec<(String, Template)>),
}

#[derive(Debug, Clone)]
pub(super) struct Part {
    pub(super) name: String,
    pub(super) filename: Option<String>,
    pub(super) content_type: Option<String>,
    pub(super) data: PartData,
}

#[derive(Debug, Clone)]
pub(super) enum BodyT {
    Empty,
    Json(JsonT),
    Raw(Template),
    Multipart(Vec<Part>),
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum StepKind {
    /// One request, its whole response read.
    Request,
    /// A request whose response is a server-sent event stream, kept open under this name.
    Stream(String),
    /// Reads events of an open stream until one matches.
    Wait(String),
}

/// An event a `stream`/`wait` step looks for: its name, and values at JSON paths of its data.
#[derive(Debug, Clone)]
pub(super) struct Matcher {
    event: Option<String>,
    data: Vec<(JsonPath, Template)>,
}

impl Matcher {
    pub(super) fn compile(m: &RawMatch) -> Result<Matcher, String> {
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

    pub(super) fn templates(&self) -> impl Iterator<Item = &Template> {
        self.data.iter().map(|(_, t)| t)
    }

    /// With its values filled in.
    pub(super) fn render(&self, vars: &Vars<'_>) -> Result<Match, Failure> {
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
pub(super) struct Match {
    event: Option<String>,
    data: Vec<(JsonPath, String)>,
}

impl Match {
    pub(super) fn matches(&self, ev: &streams::Event) -> bool {
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
pub(super) struct Step {
    pub(super) kind: StepKind,
    /// Another server than the journey's (`http(s)://host:port`, templated).
    pub(super) base: Option<Template>,
    pub(super) until: Option<Matcher>,
    pub(super) fail_on: Vec<Matcher>,
    pub(super) clock: Option<Clock>,
    pub(super) method: Method,
    pub(super) path: Template,
    pub(super) headers: Vec<(HeaderName, Template)>,
    pub(super) body: BodyT,
    pub(super) expect: Option<Vec<u16>>,
    pub(super) capture: Vec<(String, JsonPath)>,
    pub(super) collect: Vec<(String, JsonPath)>,
    /// (negated, variable)
    pub(super) when: Option<(bool, String)>,
    pub(super) repeat: Option<u32>,
    pub(super) for_each: Option<String>,
    pub(super) timeout: Option<Duration>,
}

/// What the whole file shares: parameters, defaults and the common setup steps.
#[derive(Debug)]
pub(super) struct Common {
    /// The parameters that have a value (given or default).
    pub(super) params: HashMap<String, String>,
    /// Parameters without a value: `(name, description)`.
    pub(super) missing: Vec<(String, String)>,
    pub(super) headers: Vec<(HeaderName, Template)>,
    pub(super) timeout: Option<Duration>,
    pub(super) setup: Vec<Step>,
    /// Clients for the `base` URLs steps name, by URL.
    pub(super) clients: Mutex<HashMap<String, bench_transport::Client>>,
    /// The file's secrets ([`JourneyFile::secrets`](super::JourneyFile::secrets)) and the
    /// values secret-named headers got from captured variables: scrubbed from every failure.
    pub(super) secrets: Mutex<Secrets>,
}

impl Common {
    /// The client for another server (made on first use; no credentials from the
    /// environment are sent to it), with the size caps of the run's own client (`limits`).
    pub(super) fn client_for(
        &self,
        base: &str,
        limits: bench_transport::Limits,
    ) -> Result<bench_transport::Client, Failure> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = clients.get(base) {
            return Ok(c.clone());
        }
        let mut cfg = bench_transport::ClientConfig::new(base);
        cfg.auth = bench_transport::Auth::None;
        cfg.limits = limits;
        cfg.timeout = self.timeout.unwrap_or(DEFAULT_WAIT);
        let c = bench_transport::Client::new(cfg)
            .map_err(|e| Failure::other(format!("base {base}: {e}")))?;
        clients.insert(base.to_owned(), c.clone());
        Ok(c)
    }

    pub(super) fn add_secrets(&self, more: &Secrets) {
        self.secrets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(more);
    }

    /// `f` with every secret replaced by `***`: the file's, the client's (the environment's
    /// API keys, the secret `--header`s) and those captured so far.
    pub(super) fn scrub(&self, mut f: Failure, env: &Env) -> Failure {
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
    pub(super) fn header(
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
    pub(super) fn check_params(&self) -> Result<(), Failure> {
        match self.missing.first() {
            None => Ok(()),
            Some((name, _)) => Err(Failure::other(format!(
                "parameter {name} is not set (pass --param {name}=VALUE)"
            ))),
        }
    }
}

#[derive(Debug)]
pub(super) struct FileJourney {
    pub(super) name: String,
    pub(super) description: String,
    pub(super) kind: Kind,
    pub(super) concurrency_safe: bool,
    pub(super) needs_mock_llm: bool,
    pub(super) needs_runner: bool,
    pub(super) max_iterations: Option<u32>,
    /// Setup variables that go into the report.
    pub(super) report: Vec<String>,
    /// Some measure step places the clock.
    pub(super) clocked: bool,
    pub(super) common: Arc<Common>,
    pub(super) setup: Vec<Step>,
    pub(super) measure: Vec<Step>,
    pub(super) teardown: Vec<Step>,
}

/// The variables and lists some step sets (for checking names at parse time).
#[derive(Debug, Default, Clone)]
pub(super) struct Names {
    pub(super) vars: BTreeSet<String>,
    pub(super) lists: BTreeSet<String>,
}

impl Names {
    pub(super) fn add<'a>(&mut self, steps: impl IntoIterator<Item = &'a RawStep>) {
        for s in steps {
            self.vars.extend(s.capture.keys().cloned());
            self.lists.extend(s.collect.keys().cloned());
        }
    }
}
