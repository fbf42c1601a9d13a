//! `--mlflow URL [--mlflow-experiment NAME]`: a finished run logged to an MLflow tracking server
//! through its REST API (no MLflow library): the experiment found or created, one run named
//! after the run directory with the spec as parameters, the headline figures as metrics, the
//! validity verdict as a tag and `result.json` and the HTML report as artifacts; a sweep logs a
//! parent run (`sweep.json`, `sweep.html`, the search's answer) with one child run per point
//! (tag `mlflow.parentRunId`).
//!
//! Logging happens after the run's own files are written; a server that is down or refuses a
//! call costs the run a warning only (docs/report.md).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bench_transport::{Client, ClientConfig};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// `exports.mlflow`: where a run is logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MlflowSpec {
    /// The tracking server, e.g. `http://127.0.0.1:5000`.
    pub url: String,
    /// The experiment (created when missing) [default: `bench`].
    #[serde(default = "default_experiment")]
    pub experiment: String,
    /// Log the run as a child of this MLflow run (a sweep sets it for its points).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
}

fn default_experiment() -> String {
    "bench".to_owned()
}

/// MLflow's limits: parameters per `log-batch` call, and the longest key.
const PARAMS_PER_BATCH: usize = 100;
const MAX_KEY: usize = 250;
/// Parameter values the server keeps (longer ones it truncates).
const MAX_PARAM_VALUE: usize = 6000;

impl MlflowSpec {
    /// Checks the URL: `http(s)://host[:port]`, no credentials (the spec is recorded).
    pub fn validate(&self) -> Result<(), String> {
        let rest = self
            .url
            .strip_prefix("http://")
            .or_else(|| self.url.strip_prefix("https://"))
            .ok_or_else(|| {
                format!(
                    "--mlflow {:?}: give the tracking server's http:// or https:// URL, e.g. http://127.0.0.1:5000",
                    self.url
                )
            })?;
        let authority = rest.split('/').next().unwrap_or("");
        if authority.is_empty() || authority.contains('@') {
            return Err(format!(
                "--mlflow {:?}: a host is needed, and no credentials (user:pass@)",
                self.url
            ));
        }
        if self.experiment.trim().is_empty() || self.experiment.len() > 500 {
            return Err("--mlflow-experiment: a name of 1 to 500 characters".to_owned());
        }
        Ok(())
    }
}

/// A run being logged.
#[derive(Debug, Clone)]
pub struct MlflowRun {
    client: Client,
    prefix: String,
    /// Its id.
    pub run_id: String,
    /// Where its artifacts go (`mlflow-artifacts:/<experiment>/<run>/artifacts`).
    artifact_uri: String,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The base URL and the path prefix of the tracking server's URL.
fn split(url: &str) -> (String, String) {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    match url[scheme_end..].find('/') {
        Some(i) => (
            url[..scheme_end + i].to_owned(),
            url[scheme_end + i..].trim_end_matches('/').to_owned(),
        ),
        None => (url.to_owned(), String::new()),
    }
}

async fn call(
    client: &Client,
    method: http::Method,
    path: &str,
    body: Bytes,
) -> Result<(u16, Value), String> {
    let r = client
        .request(method, path, body, Some(Duration::from_secs(30)))
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    Ok((r.status.as_u16(), v))
}

async fn post(client: &Client, path: &str, body: &Value) -> Result<Value, String> {
    match call(
        client,
        http::Method::POST,
        path,
        Bytes::from(body.to_string()),
    )
    .await?
    {
        (200, v) => Ok(v),
        (code, v) => Err(format!(
            "{path} answered HTTP {code}: {}",
            v["message"].as_str().unwrap_or("")
        )),
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl MlflowRun {
    /// Finds or creates the experiment and starts a run named `name` with `tags`.
    pub async fn start(
        spec: &MlflowSpec,
        name: &str,
        tags: &[(&str, String)],
    ) -> Result<MlflowRun, String> {
        let (base, prefix) = split(&spec.url);
        let client = Client::new(ClientConfig::new(base)).map_err(|e| e.to_string())?;
        let api = format!("{prefix}/api/2.0/mlflow");
        let get = format!(
            "{api}/experiments/get-by-name?experiment_name={}",
            percent_encode(&spec.experiment)
        );
        let experiment_id = match call(&client, http::Method::GET, &get, Bytes::new()).await? {
            (200, v) => v["experiment"]["experiment_id"].as_str().map(str::to_owned),
            (404, _) => None,
            (code, v) => {
                return Err(format!(
                    "experiments/get-by-name answered HTTP {code}: {}",
                    v["message"].as_str().unwrap_or("")
                ));
            }
        };
        let experiment_id = match experiment_id {
            Some(id) => id,
            None => {
                let body = json!({ "name": spec.experiment });
                match post(&client, &format!("{api}/experiments/create"), &body).await {
                    Ok(v) => v["experiment_id"].as_str().unwrap_or_default().to_owned(),
                    // Created by someone else meanwhile: read it again.
                    Err(e) if e.contains("HTTP 400") => {
                        match call(&client, http::Method::GET, &get, Bytes::new()).await? {
                            (200, v) => v["experiment"]["experiment_id"]
                                .as_str()
                                .unwrap_or_default()
                                .to_owned(),
                            _ => return Err(e),
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let mut all_tags: Vec<Value> = tags
            .iter()
            .map(|(k, v)| json!({ "key": k, "value": v }))
            .collect();
        if let Some(p) = &spec.parent_run_id {
            all_tags.push(json!({ "key": "mlflow.parentRunId", "value": p }));
        }
        let body = json!({
            "experiment_id": experiment_id,
            "start_time": now_ms(),
            "run_name": name,
            "tags": all_tags,
        });
        let v = post(&client, &format!("{api}/runs/create"), &body).await?;
        let info = &v["run"]["info"];
        let run_id = info["run_id"]
            .as_str()
            .ok_or("runs/create returned no run_id")?
            .to_owned();
        Ok(MlflowRun {
            client,
            artifact_uri: info["artifact_uri"].as_str().unwrap_or_default().to_owned(),
            prefix,
            run_id,
        })
    }

    /// Logs parameters (in batches of MLflow's limit), metrics and tags.
    pub async fn log(
        &self,
        params: &[(String, String)],
        metrics: &[(String, f64)],
        tags: &[(&str, String)],
    ) -> Result<(), String> {
        let path = format!("{}/api/2.0/mlflow/runs/log-batch", self.prefix);
        let ts = now_ms();
        let metrics: Vec<Value> = metrics
            .iter()
            .filter(|(_, v)| v.is_finite())
            .map(|(k, v)| json!({ "key": k, "value": v, "timestamp": ts, "step": 0 }))
            .collect();
        let tags: Vec<Value> = tags
            .iter()
            .map(|(k, v)| json!({ "key": k, "value": v }))
            .collect();
        let batches: Vec<&[(String, String)]> = if params.is_empty() {
            vec![&[]]
        } else {
            params.chunks(PARAMS_PER_BATCH).collect()
        };
        for (i, batch) in batches.into_iter().enumerate() {
            let params: Vec<Value> = batch
                .iter()
                .map(|(k, v)| json!({ "key": k, "value": v }))
                .collect();
            let mut body = json!({ "run_id": self.run_id, "params": params });
            if i == 0 {
                body["metrics"] = Value::Array(metrics.clone());
                body["tags"] = Value::Array(tags.clone());
            }
            post(&self.client, &path, &body).await?;
        }
        Ok(())
    }

    /// Uploads `bytes` as the artifact `name` through the server's artifact proxy.
    pub async fn artifact(&self, name: &str, bytes: Vec<u8>) -> Result<(), String> {
        let rel = self
            .artifact_uri
            .strip_prefix("mlflow-artifacts:/")
            .ok_or_else(|| {
                format!(
                    "the run's artifact store is {:?}, not the server's proxy (start mlflow server with --serve-artifacts)",
                    self.artifact_uri
                )
            })?;
        let path = format!(
            "{}/api/2.0/mlflow-artifacts/artifacts/{}/{}",
            self.prefix,
            rel.trim_matches('/'),
            percent_encode(name)
        );
        match call(&self.client, http::Method::PUT, &path, Bytes::from(bytes)).await? {
            (200, _) => Ok(()),
            (code, v) => Err(format!(
                "uploading {name} answered HTTP {code}: {}",
                v["message"].as_str().unwrap_or("")
            )),
        }
    }

    /// Ends the run: `FINISHED`, or `FAILED`.
    pub async fn finish(&self, ok: bool) -> Result<(), String> {
        let body = json!({
            "run_id": self.run_id,
            "status": if ok { "FINISHED" } else { "FAILED" },
            "end_time": now_ms(),
        });
        post(
            &self.client,
            &format!("{}/api/2.0/mlflow/runs/update", self.prefix),
            &body,
        )
        .await
        .map(|_| ())
    }
}

/// A JSON document flattened into MLflow parameters: `a.b.c = value` (strings as they are,
/// other scalars and arrays as JSON; nulls left out), keys cut to MLflow's limit and to the
/// characters it accepts, values to the length it keeps.
pub fn params_of(doc: &Value) -> Vec<(String, String)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&key, v, out);
                }
            }
            Value::Null => {}
            Value::String(s) => out.push((prefix.to_owned(), s.clone())),
            other => out.push((prefix.to_owned(), other.to_string())),
        }
    }
    let mut out = Vec::new();
    walk("", doc, &mut out);
    out.into_iter()
        .map(|(k, v)| {
            let k: String = k
                .chars()
                .map(|c| {
                    if c.is_alphanumeric() || "/_.- :".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .take(MAX_KEY)
                .collect();
            let v: String = v.chars().take(MAX_PARAM_VALUE).collect();
            (k, v)
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// The headline figures of a result as metrics (those measured).
pub fn metrics_of(r: &bench_report::RunResult) -> Vec<(String, f64)> {
    let s = &r.summary;
    let m = &s.steady;
    let mut out: Vec<(String, Option<f64>)> = vec![
        ("turns_ok".into(), Some(s.turns_ok as f64)),
        ("turns_failed".into(), Some(s.turns_failed as f64)),
        ("ttft_p50_ms".into(), m.ttft_ms.p50),
        ("ttft_p99_ms".into(), m.ttft_ms.p99),
        ("tpot_p50_ms".into(), m.tpot_ms.p50),
        ("e2e_p50_ms".into(), m.e2e_ms.p50),
        ("e2e_p99_ms".into(), m.e2e_ms.p99),
        ("output_tok_s".into(), m.output_throughput_tok_s),
        ("turns_s".into(), m.request_throughput_turns_s),
        ("per_user_tok_s_p50".into(), m.per_user_output_tok_s.p50),
        ("goodput".into(), m.slo_attainment),
        ("prefix_cache_ratio".into(), r.overall.prefix_cache_ratio),
    ];
    if let Some(ss) = r.sessions.as_ref().and_then(|s| s.session_slo.as_ref()) {
        out.push(("session_goodput".into(), ss.share));
    }
    if let Some(e) = &r.energy {
        out.push(("energy_j_per_turn".into(), e.j_per_turn));
        out.push(("energy_j_per_session".into(), e.j_per_session));
    }
    if let Some(c) = &r.cost {
        out.push(("usd_per_m_output_tokens".into(), c.usd_per_m_output_tokens));
        out.push(("usd_per_turn".into(), c.usd_per_turn));
        out.push(("usd_per_session".into(), c.usd_per_session));
    }
    out.into_iter().filter_map(|(k, v)| Some((k, v?))).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn specs_flatten_into_params_within_mlflow_limits() {
        let p = params_of(&json!({
            "load": {"closed": {"concurrency": 8}},
            "plan": {"dataset": "sample", "seed": null, "levels": [1, 2]},
            "odd key!": "x".repeat(7000),
        }));
        assert_eq!(
            p[..3],
            [
                ("load.closed.concurrency".to_owned(), "8".to_owned()),
                ("odd key_".to_owned(), "x".repeat(6000)),
                ("plan.dataset".to_owned(), "sample".to_owned()),
            ]
        );
        assert_eq!(p[3], ("plan.levels".to_owned(), "[1,2]".to_owned()));
        assert_eq!(p.len(), 4, "null left out");
        assert_eq!(
            split("http://h:5000/mlflow/"),
            ("http://h:5000".to_owned(), "/mlflow".to_owned())
        );
        assert_eq!(
            split("http://h:5000"),
            ("http://h:5000".to_owned(), String::new())
        );
        let bad = MlflowSpec {
            url: "h:5000".into(),
            experiment: "e".into(),
            parent_run_id: None,
        };
        assert!(bad.validate().unwrap_err().contains("http://"));
        assert_eq!(percent_encode("a b/c.html"), "a%20b/c.html");
    }
}
