//! How a run's result is judged: the settings a run spec's `judge` table holds, read by
//! [`crate::compute`] (the steady window, goodput's SLO, the warm-cache check's block size)
//! and by the caller's gate (`bench_run::gate`: the error rate, `require_valid`).

use serde::{Deserialize, Serialize};

/// How the result is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Judge {
    /// A turn counts in the steady window when at least ceil(F × C) sessions were active.
    pub steady_frac: f64,
    /// More failed turns than this fraction fail the run.
    pub max_error_rate: f64,
    /// Service-level objectives for goodput, e.g. `ttft_ms=500,tpot_ms=50`.
    pub slo: Option<String>,
    /// The session-level objective for session goodput, e.g. `ttft_ms=2000,session_s=600`
    /// ([`crate::SessionSlo`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_slo: Option<String>,
    /// Fail the run unless `result.json`'s validity verdict is `valid`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub require_valid: bool,
    /// Tokens per KV-cache block of the server, for the warm-cache check when its `/metrics`
    /// does not say (vLLM's does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_block_size: Option<u32>,
    /// The deployment's price, for `result.json` `cost` (`--cost-per-hour`, `--gpus`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<crate::cost::CostModel>,
}

impl Default for Judge {
    fn default() -> Self {
        Judge {
            steady_frac: crate::DEFAULT_STEADY_FRAC,
            max_error_rate: 0.0,
            slo: None,
            session_slo: None,
            require_valid: false,
            cache_block_size: None,
            cost: None,
        }
    }
}

impl Judge {
    /// The default judging with goodput measured against `slo`.
    pub fn with_slo(slo: Option<crate::Slo>) -> Judge {
        Judge {
            slo: slo.map(|s| s.to_string()),
            ..Judge::default()
        }
    }

    /// [`Judge::slo`] parsed; `None` without one or when it does not parse (a run spec's
    /// validation refuses that before a run starts).
    pub fn slo(&self) -> Option<crate::Slo> {
        self.slo.as_deref().and_then(|s| s.parse().ok())
    }

    /// [`Judge::session_slo`] parsed, as [`Judge::slo`].
    pub fn session_slo(&self) -> Option<crate::SessionSlo> {
        self.session_slo.as_deref().and_then(|s| s.parse().ok())
    }
}
