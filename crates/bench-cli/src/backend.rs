//! Which server we talk to (vLLM, SGLang, llama.cpp or another OpenAI-compatible one), and the
//! few things that depend on it: the cache-flush endpoint and SGLang's cache-hit split.

use std::time::Duration;

use bench_transport::Client;
use bytes::Bytes;
use clap::ValueEnum;
use http::Method;
use serde::Serialize;

use crate::CliError;

/// A server family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// vLLM (`owned_by: "vllm"`, `vllm:` metrics).
    Vllm,
    /// SGLang (`owned_by: "sglang"`, `sglang:` metrics).
    Sglang,
    /// llama.cpp's server (`owned_by: "llamacpp"`, `llamacpp:` metrics).
    Llamacpp,
    /// Any other OpenAI-compatible server.
    Openai,
}

impl Backend {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Vllm => "vllm",
            Backend::Sglang => "sglang",
            Backend::Llamacpp => "llamacpp",
            Backend::Openai => "openai",
        }
    }

    /// The endpoint that empties the server's prefix cache, if the family has one.
    pub fn flush_path(self) -> Option<&'static str> {
        match self {
            Backend::Vllm => Some("/reset_prefix_cache"),
            Backend::Sglang => Some("/flush_cache"),
            Backend::Llamacpp | Backend::Openai => None,
        }
    }
}

/// What detection found, and from what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detected {
    /// The family.
    pub backend: Backend,
    /// The evidence, e.g. `owned_by "vllm" in /v1/models`.
    pub evidence: String,
}

/// Reads the family from a `/v1/models` answer, else from the names on `/metrics`.
pub async fn detect(client: &Client, models: &serde_json::Value) -> Detected {
    let owned_by = models["data"][0]["owned_by"].as_str().unwrap_or("");
    if let Some(b) = from_owned_by(owned_by) {
        return Detected {
            backend: b,
            evidence: format!("owned_by {owned_by:?} in /v1/models"),
        };
    }
    if let Ok(r) = client.get("/metrics", Some(Duration::from_secs(5))).await {
        if r.status.is_success() {
            if let Some((b, prefix)) = from_metrics(&String::from_utf8_lossy(&r.body)) {
                return Detected {
                    backend: b,
                    evidence: format!("{prefix} names on /metrics"),
                };
            }
        }
    }
    Detected {
        backend: Backend::Openai,
        evidence: "no vLLM, SGLang or llama.cpp marks in /v1/models or /metrics".into(),
    }
}

fn from_owned_by(owned_by: &str) -> Option<Backend> {
    match owned_by.to_ascii_lowercase().as_str() {
        "vllm" => Some(Backend::Vllm),
        "sglang" => Some(Backend::Sglang),
        "llamacpp" | "llama.cpp" => Some(Backend::Llamacpp),
        _ => None,
    }
}

/// The family whose metric prefix appears first on a sample line of a Prometheus text.
fn from_metrics(text: &str) -> Option<(Backend, &'static str)> {
    const PREFIXES: [(&str, Backend); 3] = [
        ("vllm:", Backend::Vllm),
        ("sglang:", Backend::Sglang),
        ("llamacpp:", Backend::Llamacpp),
    ];
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        PREFIXES
            .iter()
            .find(|(p, _)| l.starts_with(p))
            .map(|(p, b)| (*b, *p))
    })
}

/// Empties the server's prefix cache; an error names the endpoint and what to do.
pub async fn flush_cache(client: &Client, backend: Backend) -> Result<&'static str, CliError> {
    let Some(path) = backend.flush_path() else {
        return Err(CliError::Failed(format!(
            "--flush-cache: no cache-flush endpoint is known for backend {} (drop \
             --flush-cache, or pass --backend vllm|sglang if the server is one)",
            backend.name()
        )));
    };
    let hint = match backend {
        Backend::Vllm => " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)",
        _ => "",
    };
    match client
        .request(
            Method::POST,
            path,
            Bytes::new(),
            Some(Duration::from_secs(60)),
        )
        .await
    {
        Ok(r) if r.status.is_success() => Ok(path),
        Ok(r) => Err(CliError::Failed(format!(
            "--flush-cache: POST {path} answered HTTP {}{hint}",
            r.status.as_u16()
        ))),
        Err(e) => Err(CliError::Failed(format!(
            "--flush-cache: POST {path}: {e}{hint}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_by_names_the_family() {
        assert_eq!(from_owned_by("vllm"), Some(Backend::Vllm));
        assert_eq!(from_owned_by("sglang"), Some(Backend::Sglang));
        assert_eq!(from_owned_by("llamacpp"), Some(Backend::Llamacpp));
        assert_eq!(from_owned_by("openai"), None);
        assert_eq!(from_owned_by(""), None);
    }

    #[test]
    fn metric_prefixes_name_the_family() {
        let vllm = "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{model_name=\"m\"} 0.0\n";
        assert_eq!(from_metrics(vllm), Some((Backend::Vllm, "vllm:")));
        let sglang = "python_gc_objects_collected_total 3\nsglang:num_running_reqs 1\n";
        assert_eq!(from_metrics(sglang), Some((Backend::Sglang, "sglang:")));
        assert_eq!(
            from_metrics("llamacpp:prompt_tokens_total 4\n"),
            Some((Backend::Llamacpp, "llamacpp:"))
        );
        assert_eq!(from_metrics("# HELP vllm:x only a comment\nup 1\n"), None);
    }
}
