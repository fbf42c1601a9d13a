//! Spec files: a [`crate::RunSpec`] (or any spec document) kept in a TOML or JSON file,
//! read with errors that name the file, the key and the line, written back as TOML, and
//! overlaid by the settings given beside it ([`overlay`]).
//!
//! ```
//! use bench_run::{RunSpec, specfile};
//!
//! let text = specfile::to_toml(&RunSpec::default()).unwrap();
//! let back: RunSpec = specfile::parse("s.toml", &text).unwrap();
//! assert_eq!(back, RunSpec::default());
//! let e = specfile::parse::<RunSpec>("s.toml", "[load.closed]\nconcurency = 4\n").unwrap_err();
//! assert!(e.to_string().contains("load.closed: line 2: unexpected keys in table: concurency"), "{e}");
//! ```

use std::path::{Path, PathBuf};

use bench_workload::plan::DatasetSpec;
use bench_workload::tokenize::TokenizerSpec;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::sweep::{SweepPlan, SweepSpec};
use crate::{RunError, RunSpec, Target};

/// Reads the spec in `path`: JSON when the name ends in `.json`, TOML otherwise.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<T, RunError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RunError::Invalid(format!("{}: cannot read the spec: {e}", path.display())))?;
    parse(&path.display().to_string(), &text)
}

/// Parses `text` (from `file`: JSON when it ends in `.json`, TOML otherwise). An unknown key,
/// a wrong type or a bad value is one line naming the file, the key's path and, in TOML, the
/// line.
pub fn parse<T: DeserializeOwned>(file: &str, text: &str) -> Result<T, RunError> {
    let bad = |m: String| RunError::Invalid(format!("{file}: {m}"));
    if file.ends_with(".json") {
        let de = &mut serde_json::Deserializer::from_str(text);
        return serde_path_to_error::deserialize(de).map_err(|e| {
            let inner = e.inner();
            let at = e.path().to_string();
            bad(format!("{at}: {inner}")
                .trim_start_matches(".: ")
                .to_owned())
        });
    }
    let de = toml::Deserializer::parse(text).map_err(|e| bad(with_line(text, &e)))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let at = e.path().to_string();
        let what = with_line(text, e.inner());
        if at == "." {
            bad(what)
        } else {
            bad(format!("{at}: {what}"))
        }
    })
}

/// `line L: message` when the error knows where it is.
fn with_line(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}

/// The [`RunSpec`] in `path` ([`read`]), its relative paths (dataset, tokenizer, TLS files,
/// exports) taken from the file's folder. A sweep spec (one with a `sweep` table) is refused,
/// naming `bench sweep`.
pub fn read_run_spec(path: &Path) -> Result<RunSpec, RunError> {
    match read_run_or_sweep(path)? {
        (spec, None) => Ok(spec),
        (_, Some(_)) => Err(RunError::Invalid(format!(
            "{}: sweep: this is a sweep spec (it has a sweep table): play it with bench sweep \
             --spec",
            path.display()
        ))),
    }
}

/// The [`SweepSpec`] in `path`, relative paths as [`read_run_spec`] takes them; a file
/// without a `sweep` table is refused.
pub fn read_sweep_spec(path: &Path) -> Result<SweepSpec, RunError> {
    match read_run_or_sweep(path)? {
        (run, Some(sweep)) => Ok(SweepSpec { run, sweep }),
        (_, None) => Err(RunError::Invalid(format!(
            "{}: no sweep table: a sweep spec is a run spec with a [sweep] table (axis, \
             levels; docs/spec.md)",
            path.display()
        ))),
    }
}

/// The run spec in `path` and its `sweep` table if it has one (what `bench sweep --spec`
/// takes: the levels may come from flags instead), relative paths from the file's folder.
pub fn read_run_or_sweep(path: &Path) -> Result<(RunSpec, Option<SweepPlan>), RunError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RunError::Invalid(format!("{}: cannot read the spec: {e}", path.display())))?;
    let (mut spec, sweep) = parse_run_or_sweep(&path.display().to_string(), &text)?;
    let dir = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_default();
    let fix = |p: &mut PathBuf| {
        if p.is_relative() {
            *p = dir.join(&*p);
        }
    };
    if let DatasetSpec::Path(p) = &mut spec.plan.dataset {
        fix(p);
    }
    if let TokenizerSpec::Path(p) = &mut spec.plan.tokenizer {
        fix(p);
    }
    if let Target::Url { tls, .. } = &mut spec.target {
        for p in [&mut tls.ca_cert, &mut tls.client_cert, &mut tls.client_key]
            .into_iter()
            .flatten()
        {
            fix(p);
        }
    }
    for p in [&mut spec.exports.result_line, &mut spec.exports.turns_csv]
        .into_iter()
        .flatten()
    {
        fix(p);
    }
    Ok((spec, sweep))
}

/// A spec document's `sweep` table, other keys ignored.
#[derive(serde::Deserialize)]
struct SweepTable {
    sweep: Option<SweepPlan>,
}

/// Parses a run spec that may hold a `sweep` table ([`parse`]'s errors, lines and paths):
/// the table is read on its own, and the run spec from the document without it (in TOML, its
/// lines blanked, so that every line number stays the file's).
pub fn parse_run_or_sweep(
    file: &str,
    text: &str,
) -> Result<(RunSpec, Option<SweepPlan>), RunError> {
    let SweepTable { sweep } = parse(file, text)?;
    if sweep.is_none() {
        return Ok((parse(file, text)?, None));
    }
    if file.ends_with(".json") {
        let mut v: Value = parse(file, text)?;
        if let Some(m) = v.as_object_mut() {
            m.remove("sweep");
        }
        let rest = serde_json::to_string(&v).unwrap_or_default();
        return Ok((parse(file, &rest)?, sweep));
    }
    // Blank the lines of `[sweep]` and `[sweep.*]` tables (up to the next other header).
    let mut inside = false;
    let rest: Vec<&str> = text
        .lines()
        .map(|line| {
            let t = line.trim_start();
            if t.starts_with('[') {
                let name = t.trim_start_matches('[').trim_start();
                inside = name.starts_with("sweep]")
                    || name.starts_with("sweep.")
                    || name.starts_with("sweep ");
            }
            if inside { "" } else { line }
        })
        .collect();
    Ok((parse(file, &rest.join("\n"))?, sweep))
}

/// `spec` as TOML (what `--print-spec` writes).
pub fn to_toml<T: Serialize>(spec: &T) -> Result<String, RunError> {
    toml::to_string(spec)
        .map_err(|e| RunError::Invalid(format!("cannot write the spec as TOML: {e}")))
}

/// `base` with the settings at `pointers` (JSON pointers into the spec's JSON, e.g.
/// `/load/closed/concurrency`) taken from `over`: what flags given beside a spec file do.
///
/// A setting `over` leaves out (a default that is not written) is removed from `base` too,
/// so it takes its default. Where the two differ in shape above the setting (another
/// variant: a closed loop against an open one, `skip` tool waits against honoured ones), the
/// innermost value both have is taken from `over` whole.
pub fn overlay<T: Serialize + DeserializeOwned>(
    base: &T,
    over: &T,
    pointers: &[&str],
) -> Result<T, RunError> {
    let enc = |v: &T| {
        serde_json::to_value(v)
            .map_err(|e| RunError::Invalid(format!("cannot encode the spec: {e}")))
    };
    let mut b = enc(base)?;
    let o = enc(over)?;
    for p in pointers {
        set(&mut b, &o, p);
    }
    serde_json::from_value(b)
        .map_err(|e| RunError::Invalid(format!("the spec with the flags given: {e}")))
}

/// Copies `o`'s value at `pointer` into `b` (or removes it from `b` when `o` has none). Where
/// the two part ways above it, the value at the parting is taken from `o` whole: a field one
/// of them has and the other not, or (a single-key object on each side with different keys)
/// another variant of an enum, which replaces `b`'s.
fn set(b: &mut Value, o: &Value, pointer: &str) {
    let segs: Vec<&str> = pointer.split('/').skip(1).collect();
    let Some((last, path)) = segs.split_last() else {
        return;
    };
    let mut bn = b;
    let mut on = o;
    for (i, k) in path.iter().enumerate() {
        let (Some(bm), Some(om)) = (bn.as_object(), on.as_object()) else {
            return;
        };
        let (bv, ov) = (bm.get(*k), om.get(*k));
        if !(bv.is_some_and(Value::is_object) && ov.is_some_and(Value::is_object)) {
            if bv.is_none() && ov.is_none() {
                return;
            }
            let variant = bm.len() == 1 && om.len() == 1 && bm.keys().ne(om.keys());
            let had = bv.is_some();
            let ov = ov.cloned();
            if variant {
                *bn = on.clone();
            } else if let Some(ov) = ov {
                if let Some(m) = bn.as_object_mut() {
                    m.insert((*k).to_owned(), ov);
                }
            } else if had {
                // `o` leaves it out (its default): so does `b`, at the setting named.
                remove(bn, &segs[i..]);
            }
            return;
        }
        let (Some(bv), Some(ov)) = (bn.get_mut(*k), on.get(*k)) else {
            return;
        };
        bn = bv;
        on = ov;
    }
    if let Some(m) = bn.as_object_mut() {
        match on.get(*last) {
            Some(v) => m.insert((*last).to_owned(), v.clone()),
            None => m.remove(*last),
        };
    }
}

/// Removes the value at `segs` below `v`, if there is one.
fn remove(v: &mut Value, segs: &[&str]) {
    let Some((last, path)) = segs.split_last() else {
        return;
    };
    let mut n = v;
    for k in path {
        match n.get_mut(*k) {
            Some(next) => n = next,
            None => return,
        }
    }
    if let Some(m) = n.as_object_mut() {
        m.remove(*last);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn over(b: Value, o: Value, p: &[&str]) -> Value {
        overlay(&b, &o, p).unwrap()
    }

    #[test]
    fn a_setting_is_taken_and_the_rest_kept() {
        let b = json!({"load": {"closed": {"concurrency": 16, "ramp_up": "5s"}}, "seed": 3});
        let o = json!({"load": {"closed": {"concurrency": 4}}, "seed": 0});
        assert_eq!(
            over(b, o, &["/load/closed/concurrency"]),
            json!({"load": {"closed": {"concurrency": 4, "ramp_up": "5s"}}, "seed": 3})
        );
    }

    #[test]
    fn another_variant_replaces_the_innermost_shared_value() {
        let b = json!({"load": {"closed": {"concurrency": 16}}, "x": 1});
        let o = json!({"load": {"open": {"rate": 2.0}}, "x": 2});
        assert_eq!(
            over(b, o, &["/load/open/rate"]),
            json!({"load": {"open": {"rate": 2.0}}, "x": 1})
        );
        let b = json!({"r": {"tool_waits": "skip", "k": 1}});
        let o = json!({"r": {"tool_waits": {"honour": {"scale": 2.0}}, "k": 0}});
        assert_eq!(
            over(b, o, &["/r/tool_waits/honour/scale"]),
            json!({"r": {"tool_waits": {"honour": {"scale": 2.0}}, "k": 1}})
        );
    }

    #[test]
    fn a_default_left_out_is_removed() {
        let b = json!({"judge": {"slo": "ttft_ms=5", "steady_frac": 0.5}});
        let o = json!({"judge": {"steady_frac": 0.9}});
        assert_eq!(
            over(b, o, &["/judge/slo"]),
            json!({"judge": {"steady_frac": 0.5}})
        );
    }

    /// Every object path of `v`.
    fn tables(v: &Value, at: String, out: &mut Vec<String>) {
        if let Value::Object(m) = v {
            out.push(at.clone());
            for (k, x) in m {
                tables(x, format!("{at}/{k}"), out);
            }
        }
    }

    #[test]
    fn an_unknown_key_in_any_table_of_a_spec_is_refused() {
        // A spec with every table present: a URL target with TLS, an open load, a random
        // dataset, graders and exports.
        let text = r#"
            [target.url]
            base_url = "https://127.0.0.1:1"
            [target.url.tls]
            insecure = true
            [plan.dataset.random]
            turns = 3
            [load.open]
            max_in_flight = 4
            [load.open.arrival]
            rate = 1.0
            process = "poisson"
            seed = 1
            [graders.slo]
            ttft_ms = 100
            [graders.output_length]
            [exports]
            tag = "t"
        "#;
        // And the other variants: the embedded simulator, a closed load, a trace dataset.
        let other = r#"
            [target.embedded.latency]
            mode = "fixed"
            ttft = "50ms"
            itl = "10ms"
            [plan.dataset.agentic]
            [load.closed]
            concurrency = 2
            ramp_up = "1s"
        "#;
        let mut paths = Vec::new();
        let mut specs = Vec::new();
        for text in [text, other] {
            let spec: RunSpec = parse("s.toml", text).unwrap();
            let full = serde_json::to_value(&spec).unwrap();
            let mut p = Vec::new();
            tables(&full, String::new(), &mut p);
            paths.extend(p.into_iter().map(|p| (specs.len(), p)));
            specs.push(full);
        }
        assert!(paths.len() > 10, "{paths:?}");
        // `extra_body` is the user's own JSON object, sent as it is.
        for (i, path) in paths
            .into_iter()
            .filter(|(_, p)| p != "/request/extra_body")
        {
            let mut v = specs[i].clone();
            let table = if path.is_empty() {
                &mut v
            } else {
                v.pointer_mut(&path).unwrap()
            };
            table
                .as_object_mut()
                .unwrap()
                .insert("zz_unknown".into(), Value::from(1));
            let json = serde_json::to_string(&v).unwrap();
            // The error names the key, or (in an enum's one-key table such as `load`) the
            // table.
            let named = path.trim_start_matches('/').replace('/', ".");
            match parse::<RunSpec>("s.json", &json) {
                Err(e) => assert!(
                    e.to_string().contains("zz_unknown") || e.to_string().contains(&named),
                    "{path}: {e}"
                ),
                Ok(_) => panic!("an unknown key in {path:?} was ignored"),
            }
        }
    }
}
