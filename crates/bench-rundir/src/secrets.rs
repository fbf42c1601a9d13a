//! Secrets: the values that must never reach a file, a log, an output, an API response or an
//! error message, and the one rule that says which names are secret.
//!
//! A [`Secrets`] holds the secret *values* a process knows about — the API keys it reads from
//! the environment ([`ENV_VARS`]), the values of secret request headers ([`is_secret_name`],
//! or named by `--secret-header`) and whatever else a front end adds — and replaces every
//! occurrence of one of them in a text with [`MASK`] (`***`). Values shorter than [`MIN_LEN`]
//! characters are ignored: scrubbing `1` or `abc` would mangle every output while protecting
//! nothing.
//!
//! It is built once, when a run (or a command) starts, and applied where text leaves the
//! process or reaches a file: error details before they are recorded, event lines, `run.json`,
//! reports, the control plane's responses. It is never applied per streamed chunk: only error
//! paths and one-off writes pay for it, and an empty `Secrets` costs one branch.
//!
//! This crate is the lowest one every writer reaches (the transport, the runner, reports,
//! telemetry, journeys, the run library and the control plane all depend on it), and it is
//! plain synchronous code.
//!
//! ```
//! use bench_rundir::secrets::{Secrets, cut};
//! let mut s = Secrets::default();
//! s.add_header("Authorization", "Bearer tok-1234abcd");
//! s.add("sk-live-5678");
//! assert_eq!(
//!     s.scrub("HTTP 401: invalid token tok-1234abcd (key sk-live-5678)"),
//!     "HTTP 401: invalid token *** (key ***)"
//! );
//! // A body cut short for an error detail never keeps half a secret.
//! assert_eq!(cut("key sk-live-5678 is wrong", 7), "key");
//! ```

use std::borrow::Cow;
use std::sync::Arc;

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// Values shorter than this many characters are not treated as secrets (they would match
/// everywhere).
pub const MIN_LEN: usize = 4;

/// The environment variables whose values are secrets: the API keys the transport sends
/// (`OPENAI_API_KEY` as a bearer token, else `API_KEY` verbatim; `ANTHROPIC_API_KEY` as
/// `x-api-key` for the Messages API) and `bench serve`'s token.
pub const ENV_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "API_KEY",
    "ANTHROPIC_API_KEY",
    "BENCH_SERVE_TOKEN",
];

/// A cookie's own value is a secret from this many characters on (see
/// [`Secrets::add_header`]).
pub const MIN_COOKIE_LEN: usize = 8;

/// Whether a header name or a JSON key names a secret: it contains `key`, `token`, `secret`,
/// `auth`, `cookie`, `password`, `passwd`, `bearer` or `credential` (case-insensitive), so
/// `Authorization`, `Proxy-Authorization`, `Cookie`, `X-Api-Key`, `api_key` and `auth_token`
/// are. Counting words are not: `tokens` and `tokeniz…` are left out before looking, so
/// `max_tokens`, `input_tokens` and `tokenizer` are not secrets.
///
/// The one rule for both: request headers whose values are scrubbed (with those named by
/// `--secret-header`) and members redacted from reports ([`redact`]).
pub fn is_secret_name(name: &str) -> bool {
    let n = name
        .to_ascii_lowercase()
        .replace("tokens", "")
        .replace("tokeniz", "");
    [
        "key",
        "token",
        "secret",
        "auth",
        "cookie",
        "password",
        "passwd",
        "bearer",
        "credential",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// Whether the header `name` carries a secret: [`is_secret_name`], or one of `extra` (the
/// names given with `--secret-header`), case-insensitively.
pub fn is_secret_header(name: &str, extra: &[String]) -> bool {
    let name = name.trim();
    is_secret_name(name) || extra.iter().any(|e| e.trim().eq_ignore_ascii_case(name))
}

/// A copy of `value` with the value of every secret-named member ([`is_secret_name`]) and of
/// every member of an object named `headers` replaced by `"***"` (a `null` stays `null`).
pub fn redact(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    fn walk(v: Value, in_headers: bool) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| {
                        let v = if (in_headers || is_secret_name(&k)) && !v.is_null() {
                            Value::String(MASK.into())
                        } else {
                            walk(v, k.eq_ignore_ascii_case("headers"))
                        };
                        (k, v)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.into_iter().map(|v| walk(v, in_headers)).collect()),
            other => other,
        }
    }
    walk(value, false)
}

/// `text` cut to at most `max` bytes for an error detail, at a character boundary and never
/// inside a word: when the cut would split one, it goes back to the end of the word before
/// (a word ends at whitespace or a quote). A key or token in a server's answer is then either
/// whole, for [`Secrets::scrub`] to find, or left out — never half shown. (A text whose first
/// `max` bytes are one word is cut at `max`.)
pub fn cut(text: &str, max: usize) -> &str {
    fn boundary(c: char) -> bool {
        c.is_whitespace() || matches!(c, '"' | '\'' | '`')
    }
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    if text[end..].starts_with(boundary) {
        return &text[..end];
    }
    match text[..end].rfind(boundary) {
        Some(p) if p > 0 => &text[..p],
        _ => &text[..end],
    }
}

/// The `user` and `password` of a URL's `user:password@` (as written, percent-encoding kept);
/// `None` when the URL carries no credentials. The password is `""` for `user@`.
pub fn url_credentials(url: &str) -> Option<(&str, &str)> {
    let rest = url.trim().split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    Some(userinfo.split_once(':').unwrap_or((userinfo, "")))
}

/// `url` without its `user:password@` (the URL a client connects to).
pub fn without_credentials(url: &str) -> String {
    match url_credentials(url) {
        Some((user, pass)) => {
            let userinfo = if pass.is_empty() && !url.contains(&format!("{user}:@")) {
                format!("{user}@")
            } else {
                format!("{user}:{pass}@")
            };
            url.replacen(&userinfo, "", 1)
        }
        None => url.to_owned(),
    }
}

/// `url` with the password of its `user:password@` replaced by [`MASK`] (for messages that
/// name a URL before any secret is known).
pub fn redact_url(url: &str) -> Cow<'_, str> {
    match url_credentials(url) {
        Some((user, pass)) if !pass.is_empty() => {
            Cow::Owned(url.replacen(&format!("{user}:{pass}@"), &format!("{user}:{MASK}@"), 1))
        }
        _ => Cow::Borrowed(url),
    }
}

/// The secret values a process knows, replaced by [`MASK`] wherever [`Secrets::scrub`] is
/// applied. Cheap to clone (shared); `Debug` shows how many values it holds, never them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    /// Longest first, so a secret containing another is replaced whole.
    values: Arc<Vec<String>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.values.len())
    }
}

impl Secrets {
    /// The values of the [`ENV_VARS`] that are set.
    pub fn from_env() -> Secrets {
        let mut s = Secrets::default();
        for name in ENV_VARS {
            if let Ok(v) = std::env::var(name) {
                s.add(&v);
            }
        }
        s
    }

    /// Adds one value (trimmed; ignored when shorter than [`MIN_LEN`] characters).
    pub fn add(&mut self, value: &str) {
        let v = value.trim();
        if v.chars().count() < MIN_LEN || self.values.iter().any(|x| x == v) {
            return;
        }
        let values = Arc::make_mut(&mut self.values);
        values.push(v.to_owned());
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    }

    /// Adds the password of `url`'s `user:password@`, as written and percent-decoded (what a
    /// `--base-url` may carry), so that the URL shows as `user:***@host` wherever it is
    /// scrubbed.
    pub fn add_url_credentials(&mut self, url: &str) {
        if let Some((_, pass)) = url_credentials(url) {
            self.add(pass);
            if let Some(decoded) = percent_decode(pass) {
                self.add(&decoded);
            }
        }
    }

    /// `self` with `value` added.
    pub fn with(mut self, value: &str) -> Secrets {
        self.add(value);
        self
    }

    /// Adds the value of header `name`, whatever its name, and the parts a server may echo on
    /// their own: the credentials after an authorization scheme (`Bearer TOKEN`, `Basic …`)
    /// and, of a cookie header, each cookie's value of at least [`MIN_COOKIE_LEN`] characters
    /// (`a=VALUE; b=VALUE`; shorter ones are preferences such as `theme=dark`, not sessions).
    pub fn add_header(&mut self, name: &str, value: &str) {
        self.add(value);
        let v = value.trim();
        if name.to_ascii_lowercase().contains("cookie") {
            for pair in v.split(';') {
                if let Some((_, val)) = pair.split_once('=') {
                    if val.trim().chars().count() >= MIN_COOKIE_LEN {
                        self.add(val);
                    }
                }
            }
        } else if let Some((scheme, rest)) = v.split_once(' ') {
            if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
                self.add(rest);
            }
        }
    }

    /// Adds the values of the secret ones of `headers` ([`is_secret_header`] with `extra`, the
    /// `--secret-header` names).
    pub fn add_headers(&mut self, headers: &[(String, String)], extra: &[String]) {
        for (k, v) in headers {
            if is_secret_header(k, extra) {
                self.add_header(k, v);
            }
        }
    }

    /// Adds every value of `other`.
    pub fn extend(&mut self, other: &Secrets) {
        for v in other.values.iter() {
            self.add(v);
        }
    }

    /// No value is known (scrubbing changes nothing).
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// How many values are known.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// `value` is one of the secrets (trimmed).
    pub fn is_secret(&self, value: &str) -> bool {
        let v = value.trim();
        self.values.iter().any(|x| x == v)
    }

    /// `text` holds a secret.
    pub fn leaks(&self, text: &str) -> bool {
        self.values.iter().any(|v| text.contains(v.as_str()))
    }

    /// `text` with every secret replaced by [`MASK`]; borrowed when there is none in it.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for v in self.values.iter() {
            if out.contains(v.as_str()) {
                out = Cow::Owned(out.replace(v.as_str(), MASK));
            }
        }
        out
    }

    /// [`Secrets::scrub`] in place.
    pub fn scrub_string(&self, text: &mut String) {
        if let Cow::Owned(s) = self.scrub(text) {
            *text = s;
        }
    }

    /// Scrubs every string of a JSON value in place (object keys too).
    pub fn scrub_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => self.scrub_string(s),
            Value::Array(a) => a.iter_mut().for_each(|v| self.scrub_json(v)),
            Value::Object(m) => {
                if m.keys().any(|k| self.leaks(k)) {
                    *m = std::mem::take(m)
                        .into_iter()
                        .map(|(k, v)| (self.scrub(&k).into_owned(), v))
                        .collect();
                }
                m.values_mut().for_each(|v| self.scrub_json(v));
            }
            _ => {}
        }
    }

    /// A copy of `value` with every string in it scrubbed (through its JSON form); `value`
    /// itself when no secret is known or it does not round-trip.
    pub fn scrub_value<T>(&self, value: T) -> T
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        if self.is_empty() {
            return value;
        }
        let Ok(mut v) = serde_json::to_value(&value) else {
            return value;
        };
        let before = v.clone();
        self.scrub_json(&mut v);
        if v == before {
            return value;
        }
        serde_json::from_value(v).unwrap_or(value)
    }
}

impl crate::TurnRecord {
    /// Its error texts (the turn's and its failed attempts') hold a secret.
    pub fn leaks(&self, secrets: &Secrets) -> bool {
        self.error.as_deref().is_some_and(|e| secrets.leaks(e))
            || self.failed_attempts.iter().any(|a| secrets.leaks(&a.error))
    }

    /// Replaces every secret in its error texts by [`MASK`].
    pub fn scrub(&mut self, secrets: &Secrets) {
        if let Some(e) = &mut self.error {
            secrets.scrub_string(e);
        }
        for a in &mut self.failed_attempts {
            secrets.scrub_string(&mut a.error);
        }
    }
}

impl crate::LifecycleEvent {
    /// Replaces every secret in its texts (a stop's or a disabled scrape's reason, a resume's
    /// repairs) by [`MASK`].
    pub fn scrub(&mut self, secrets: &Secrets) {
        use crate::LifecycleEvent as E;
        match self {
            E::ScrapeDisabled { reason } | E::Stopped { reason, .. } => {
                secrets.scrub_string(reason);
            }
            E::Resumed(r) => r.repairs.iter_mut().for_each(|l| secrets.scrub_string(l)),
            _ => {}
        }
    }
}

/// `text` with its `%XX` escapes decoded (`None`: there were none, or they do not make UTF-8).
pub fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return None;
    }
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_are_found_and_masked() {
        assert_eq!(
            url_credentials("https://al:p%40ss@h:1/v1?q=a@b"),
            Some(("al", "p%40ss"))
        );
        assert_eq!(url_credentials("http://al@h"), Some(("al", "")));
        assert_eq!(url_credentials("http://h:1/a@b"), None);
        assert_eq!(redact_url("http://al:pw-long@h:1"), "http://al:***@h:1");
        assert_eq!(redact_url("http://h:1"), "http://h:1");
        assert_eq!(without_credentials("http://al:***@h:1/v1"), "http://h:1/v1");
        assert_eq!(without_credentials("http://al@h:1"), "http://h:1");
        assert_eq!(without_credentials("http://h:1"), "http://h:1");
        let mut s = Secrets::default();
        s.add_url_credentials("http://al:p%40ssword@h");
        assert_eq!(s.scrub("p%40ssword and p@ssword"), "*** and ***");
    }
    use serde_json::json;

    #[test]
    fn one_name_rule_for_headers_and_json_keys() {
        for secret in [
            "Authorization",
            "Proxy-Authorization",
            "Cookie",
            "Set-Cookie",
            "X-Api-Key",
            "x-goog-api-key",
            "X-Auth-Token",
            "api_key",
            "apiKey",
            "auth_token",
            "client_secret",
            "password",
            "PRIVATE-TOKEN",
        ] {
            assert!(is_secret_name(secret), "{secret}");
        }
        for plain in [
            "Content-Type",
            "X-Custom",
            "max_tokens",
            "input_tokens",
            "maxTokens",
            "tokenizer",
            "header_names",
            "x-session-id",
        ] {
            assert!(!is_secret_name(plain), "{plain}");
        }
        assert!(is_secret_header("x-custom", &["X-Custom".into()]));
        assert!(!is_secret_header("x-custom", &[]));
    }

    #[test]
    fn values_are_scrubbed_whole_and_short_ones_ignored() {
        let mut s = Secrets::default();
        s.add("abc");
        assert!(s.is_empty(), "shorter than MIN_LEN");
        s.add_header("Authorization", "Bearer tok-SECRET-1");
        s.add_header("Cookie", "session=ck-SECRET-2; theme=dark");
        s.add("sk-SECRET-3");
        assert_eq!(format!("{s:?}"), "Secrets(5 values)");
        let text = "got Bearer tok-SECRET-1, then tok-SECRET-1 alone, session=ck-SECRET-2; \
                    theme=dark and ck-SECRET-2 and sk-SECRET-3";
        let out = s.scrub(text);
        assert!(!out.contains("SECRET"), "{out}");
        assert_eq!(out.matches(MASK).count(), 5, "{out}");
        assert!(matches!(s.scrub("nothing here"), Cow::Borrowed(_)));
        assert!(s.leaks(text) && !s.leaks(&out));
        assert!(s.is_secret(" sk-SECRET-3 "));
    }

    #[test]
    fn json_strings_and_keys_are_scrubbed() {
        let s = Secrets::default().with("sk-SECRET-3");
        let mut v = json!({"error": "key sk-SECRET-3 is wrong", "by": {"sk-SECRET-3": 1}, "n": 3});
        s.scrub_json(&mut v);
        assert_eq!(
            v,
            json!({"error": "key *** is wrong", "by": {"***": 1}, "n": 3})
        );
        let m: std::collections::BTreeMap<String, String> =
            s.scrub_value([("a".to_owned(), "x sk-SECRET-3".to_owned())].into());
        assert_eq!(m["a"], "x ***");
    }

    #[test]
    fn a_cut_never_splits_a_word() {
        let body = r#"{"error": "Incorrect API key provided: sk-SECRET-4567890. Try again"}"#;
        let at = body.find("sk-").unwrap();
        let c = cut(body, at + 5);
        assert!(c.ends_with("provided:"), "the split key is left out: {c}");
        assert_eq!(cut(body, at), &body[..at - 1], "a cut at a word's start");
        assert_eq!(cut(body, at - 1), &body[..at - 1], "a cut at a boundary");
        assert_eq!(cut("short", 200), "short");
        assert_eq!(cut("aaa bbb", 5), "aaa");
        // One word longer than the cut: cut where asked.
        let long = "x".repeat(2000);
        assert_eq!(cut(&long, 10).len(), 10);
        // Multi-byte characters: never a panic, always a boundary.
        assert_eq!(cut("éé ééééé", 7), "éé");
        assert_eq!(cut("éééééééé", 7), "ééé");
    }

    #[test]
    fn redact_hides_secret_named_members_and_header_values() {
        let v = json!({
            "spec": {"plan": {"tokenizer": "qwen3", "max_tokens": 5},
                     "target": {"url": {"api_key": "sk-live", "header_names": ["x-api-key"]}}},
            "headers": {"X-Custom": "abc"},
            "Authorization": "Bearer x",
            "auth_token": "t",
            "input_tokens": 12,
            "token": null,
        });
        let r = redact(v);
        assert_eq!(r["spec"]["plan"]["tokenizer"], "qwen3");
        assert_eq!(r["spec"]["plan"]["max_tokens"], 5);
        assert_eq!(r["spec"]["target"]["url"]["api_key"], "***");
        assert_eq!(r["spec"]["target"]["url"]["header_names"][0], "x-api-key");
        assert_eq!(r["headers"]["X-Custom"], "***");
        assert_eq!(r["Authorization"], "***");
        assert_eq!(r["auth_token"], "***");
        assert_eq!(r["input_tokens"], 12);
        assert!(r["token"].is_null());
    }
}
