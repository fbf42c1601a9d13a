//! The file as written: the TOML deserialized as is, before any checking.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::journey::Kind;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFile {
    #[serde(default)]
    pub(super) params: BTreeMap<String, RawParam>,
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    #[serde(default)]
    pub(super) setup: Vec<RawStep>,
    #[serde(default)]
    pub(super) journey: Vec<RawJourney>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawParam {
    /// Used when the parameter is not given (a string, number or boolean).
    pub(super) default: Option<toml::Value>,
    #[serde(default)]
    pub(super) description: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) timeout_s: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJourney {
    pub(super) name: String,
    #[serde(default)]
    pub(super) description: String,
    pub(super) kind: Option<Kind>,
    #[serde(default)]
    pub(super) concurrency_safe: bool,
    #[serde(default)]
    pub(super) needs_mock_llm: bool,
    #[serde(default)]
    pub(super) needs_runner: bool,
    pub(super) max_iterations: Option<u32>,
    #[serde(default)]
    pub(super) report: Vec<String>,
    #[serde(default)]
    pub(super) setup: Vec<RawStep>,
    pub(super) measure: Vec<RawStep>,
    #[serde(default)]
    pub(super) teardown: Vec<RawStep>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    pub(super) method: Option<String>,
    pub(super) base: Option<String>,
    pub(super) path: Option<String>,
    pub(super) stream: Option<String>,
    pub(super) wait: Option<String>,
    pub(super) until: Option<RawMatch>,
    #[serde(default)]
    pub(super) fail_on: Vec<RawMatch>,
    pub(super) clock: Option<Clock>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) json: Option<toml::Value>,
    pub(super) body: Option<String>,
    pub(super) multipart: Option<Vec<RawPart>>,
    #[serde(default, deserialize_with = "de_expect")]
    pub(super) expect: Option<Vec<u16>>,
    #[serde(default)]
    pub(super) capture: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) collect: BTreeMap<String, String>,
    pub(super) when: Option<String>,
    pub(super) repeat: Option<u32>,
    pub(super) for_each: Option<String>,
    pub(super) timeout_s: Option<f64>,
}

/// Which events a `stream`/`wait` step looks for.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMatch {
    pub(super) event: Option<String>,
    #[serde(default)]
    pub(super) data: BTreeMap<String, toml::Value>,
}

/// Where a step puts the operation's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Clock {
    /// The operation's time starts just before this step.
    Start,
    /// It stops when this step is done (for a `wait`: when the matching event arrived).
    Stop,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPart {
    pub(super) name: String,
    pub(super) filename: Option<String>,
    pub(super) content_type: Option<String>,
    pub(super) text: Option<String>,
    pub(super) base64: Option<String>,
    pub(super) tar_gz: Option<BTreeMap<String, String>>,
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
