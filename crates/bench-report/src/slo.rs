//! Service-level objectives for goodput (`--slo ttft_ms=500,tpot_ms=50`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::record::TurnRecord;

/// Per-turn latency bounds; a turn meets the SLO when it meets every bound given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// Bound on time to first token, ms.
    pub ttft_ms: Option<f64>,
    /// Bound on time per output token, ms.
    pub tpot_ms: Option<f64>,
    /// Bound on the turn latency (request sent → end of body), ms.
    pub e2e_ms: Option<f64>,
}

/// Why an `--slo` string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SloParseError {
    /// No bound was given.
    #[error("empty SLO: expected e.g. `ttft_ms=500,tpot_ms=50`")]
    Empty,
    /// An item is not `key=value`.
    #[error("`{0}` is not key=value (expected e.g. `ttft_ms=500`)")]
    NotKeyValue(String),
    /// The key is not one of `ttft_ms`, `tpot_ms`, `e2e_ms`.
    #[error("unknown SLO key `{0}` (known: ttft_ms, tpot_ms, e2e_ms)")]
    UnknownKey(String),
    /// A session SLO's key is not one of `ttft_ms`, `tpot_ms`, `e2e_ms`, `session_s`.
    #[error("unknown session SLO key `{0}` (known: ttft_ms, tpot_ms, e2e_ms per turn; session_s)")]
    UnknownSessionKey(String),
    /// The same key was given twice.
    #[error("SLO key `{0}` given twice")]
    Duplicate(String),
    /// The value is not a number.
    #[error("SLO `{key}`: `{value}` is not a number")]
    NotANumber {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
    },
    /// The value is zero, negative or not finite.
    #[error(
        "SLO `{key}`: must be a positive number of {}, got `{value}`",
        unit_of(key)
    )]
    NotPositive {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
    },
}

/// The unit of an SLO key's value, by its suffix.
fn unit_of(key: &str) -> &'static str {
    if key.ends_with("_s") {
        "seconds"
    } else {
        "milliseconds"
    }
}

/// Parses `key=value,…` into one bound per name of `keys` (`unknown` reports any other key):
/// every value a positive number, no key twice, at least one given.
fn parse_bounds<const N: usize>(
    s: &str,
    keys: [&str; N],
    unknown: fn(String) -> SloParseError,
) -> Result<[Option<f64>; N], SloParseError> {
    let mut out = [None; N];
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(SloParseError::NotKeyValue(item.to_owned()));
        };
        let (key, value) = (key.trim(), value.trim());
        let Some(i) = keys.iter().position(|k| *k == key) else {
            return Err(unknown(key.to_owned()));
        };
        if out[i].is_some() {
            return Err(SloParseError::Duplicate(key.to_owned()));
        }
        let v: f64 = value.parse().map_err(|_| SloParseError::NotANumber {
            key: key.to_owned(),
            value: value.to_owned(),
        })?;
        if !(v.is_finite() && v > 0.0) {
            return Err(SloParseError::NotPositive {
                key: key.to_owned(),
                value: value.to_owned(),
            });
        }
        out[i] = Some(v);
    }
    if out.iter().all(Option::is_none) {
        return Err(SloParseError::Empty);
    }
    Ok(out)
}

impl FromStr for Slo {
    type Err = SloParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let [ttft_ms, tpot_ms, e2e_ms] = parse_bounds(
            s,
            ["ttft_ms", "tpot_ms", "e2e_ms"],
            SloParseError::UnknownKey,
        )?;
        Ok(Slo {
            ttft_ms,
            tpot_ms,
            e2e_ms,
        })
    }
}

impl fmt::Display for Slo {
    /// The `--slo` form, e.g. `ttft_ms=500,tpot_ms=50`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for (k, v) in [
            ("ttft_ms", self.ttft_ms),
            ("tpot_ms", self.tpot_ms),
            ("e2e_ms", self.e2e_ms),
        ] {
            if let Some(v) = v {
                write!(f, "{sep}{k}={v}")?;
                sep = ",";
            }
        }
        Ok(())
    }
}

impl Slo {
    /// Whether an ok turn meets every bound given (a value equal to its bound meets it).
    ///
    /// A turn without TPOT (one output token or fewer: no decode phase) meets a TPOT bound; a turn
    /// without TTFT or e2e misses a bound on it.
    pub fn is_met_by(&self, turn: &TurnRecord) -> bool {
        let within = |bound: Option<f64>, value: Option<f64>, missing_ok: bool| match bound {
            None => true,
            Some(b) => value.map_or(missing_ok, |v| v <= b),
        };
        within(self.ttft_ms, turn.ttft_ms, false)
            && within(self.tpot_ms, turn.tpot_ms, true)
            && within(self.e2e_ms, turn.e2e_ms, false)
    }
}

/// A session-level objective (`--session-slo ttft_ms=2000,tpot_ms=50,session_s=600`): a
/// session play meets it when it completed, every turn was ok and met the per-turn bounds, and
/// its end-to-end time (first send → last byte) is within `session_s`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionSlo {
    /// The bounds every turn must meet (none given: every ok turn meets them).
    pub turn: Slo,
    /// Bound on the play's end-to-end time, s.
    pub session_s: Option<f64>,
}

impl FromStr for SessionSlo {
    type Err = SloParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let [ttft_ms, tpot_ms, e2e_ms, session_s] = parse_bounds(
            s,
            ["ttft_ms", "tpot_ms", "e2e_ms", "session_s"],
            SloParseError::UnknownSessionKey,
        )?;
        Ok(SessionSlo {
            turn: Slo {
                ttft_ms,
                tpot_ms,
                e2e_ms,
            },
            session_s,
        })
    }
}

impl fmt::Display for SessionSlo {
    /// The `--session-slo` form, e.g. `ttft_ms=2000,session_s=600`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let turn = self.turn.to_string();
        f.write_str(&turn)?;
        if let Some(s) = self.session_s {
            let sep = if turn.is_empty() { "" } else { "," };
            write!(f, "{sep}session_s={s}")?;
        }
        Ok(())
    }
}
