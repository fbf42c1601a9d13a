//! The bad-input corpus (`fixtures/bad/`): realistic mistakes and hostile inputs, each a file
//! (or a run directory, or a command line, or a server's raw answer) and an entry in its
//! folder's `cases.toml`. Adding a case is adding a file and an entry: this module only reads
//! the manifests. What every case must show:
//!
//! - **traces/, journeys/, flags/, rundirs/**: the command exits as the case says (2 unless
//!   the documented behaviour is to read on); on a failure stderr has exactly one `error:` line
//!   (after `warning:`/`note:` lines only, before clap's hint lines only), naming the input and
//!   holding every `error` needle (the place: line, key or flag, and what is wrong); the
//!   working directory, the command's cwd holding a copy of the input, is unchanged afterwards
//!   (no run directory, no `-o` file, no temporary file); no panic (exit 101 or `panicked`);
//!   no hang (each command gets 120 s).
//! - **responses/**: a tiny TCP server answers every chat request with the case's bytes; the
//!   one planned turn is recorded in `turns.jsonl` with the case's status and error kind, its
//!   session ends, and the exit code is the case's.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use crate::{bench, read_request, serial, tempdir};

/// One folder's `cases.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    /// Named command lines; `{input}`, `{work}` and `{url}` are replaced.
    #[serde(default)]
    templates: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    defaults: Defaults,
    #[serde(rename = "case")]
    cases: Vec<Case>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    /// The templates a case runs when it names none.
    #[serde(default)]
    commands: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    /// Why the input is bad (README.md says the same, at more length).
    why: String,
    /// A file or directory of the folder (may start with `../`), copied into the working
    /// directory; `{input}` is the copy.
    input: Option<String>,
    /// An input too large to check in, written into the working directory at test time.
    generate: Option<Generate>,
    /// Templates to run (default: the folder's `defaults.commands`).
    commands: Option<Vec<String>>,
    /// An explicit command line instead of templates.
    args: Option<Vec<String>>,
    /// Appended to every command line of the case.
    #[serde(default)]
    extra_args: Vec<String>,
    /// The expected exit code (2; 1 in responses/).
    exit: Option<i32>,
    /// Needles of the one `error:` line.
    #[serde(default)]
    error: Vec<String>,
    /// Whether the error line must name the input (default: when the case runs templates).
    names_input: Option<bool>,
    /// Needles anywhere in stderr.
    #[serde(default)]
    stderr: Vec<String>,
    /// Needles anywhere in stdout.
    #[serde(default)]
    stdout: Vec<String>,
    /// responses/: the turn record's `status`.
    status: Option<String>,
    /// responses/: its `error_kind` (absent: `null`).
    error_kind: Option<String>,
    /// responses/: needles of its `error` text.
    #[serde(default)]
    detail: Vec<String>,
    /// responses/: keep the connection open after the bytes.
    #[serde(default)]
    hold: bool,
}

/// A file of `head` (a line), then one line of `prefix`, `fill_bytes` × `fill`, `suffix`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Generate {
    name: String,
    #[serde(default)]
    head: String,
    prefix: String,
    fill: String,
    fill_bytes: u64,
    suffix: String,
}

fn corpus(folder: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/bad")
        .join(folder)
}

fn manifest(folder: &str) -> Manifest {
    let path = corpus(folder).join("cases.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let m: Manifest = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let readme = std::fs::read_to_string(corpus(folder).join("README.md")).unwrap();
    let mut names = std::collections::HashSet::new();
    for c in &m.cases {
        assert!(names.insert(&c.name), "{folder}: case {} twice", c.name);
        assert!(
            readme.contains(&format!("`{}`", c.name)),
            "{folder}/README.md does not list case `{}`",
            c.name
        );
        assert!(!c.why.is_empty());
    }
    m
}

/// The command lines of a case.
fn command_lines(m: &Manifest, c: &Case) -> Vec<(String, Vec<String>)> {
    let mut lines = match (&c.args, &c.commands) {
        (Some(args), _) => vec![("args".to_string(), args.clone())],
        (None, cmds) => cmds
            .as_ref()
            .unwrap_or(&m.defaults.commands)
            .iter()
            .map(|t| {
                let argv = m
                    .templates
                    .get(t)
                    .unwrap_or_else(|| panic!("case {}: no template {t}", c.name));
                (t.clone(), argv.clone())
            })
            .collect(),
    };
    assert!(!lines.is_empty(), "case {} runs nothing", c.name);
    for (_, argv) in &mut lines {
        argv.extend(c.extra_args.iter().cloned());
    }
    lines
}

fn copy_into(src: &Path, dst: &Path) {
    if src.is_dir() {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            copy_into(&e.path(), &dst.join(e.file_name()));
        }
    } else {
        std::fs::copy(src, dst).unwrap();
    }
}

/// Writes a case's generated input into `work`, in pieces (it may be tens of MB).
fn generate(g: &Generate, work: &Path) -> PathBuf {
    let path = work.join(&g.name);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    if !g.head.is_empty() {
        writeln!(f, "{}", g.head).unwrap();
    }
    f.write_all(g.prefix.as_bytes()).unwrap();
    let piece = g.fill.repeat(1 << 16);
    let mut left = g.fill_bytes;
    assert_eq!(g.fill.len(), 1, "fill is one byte");
    while left > 0 {
        let n = left.min(piece.len() as u64) as usize;
        f.write_all(&piece.as_bytes()[..n]).unwrap();
        left -= n as u64;
    }
    writeln!(f, "{}", g.suffix).unwrap();
    f.flush().unwrap();
    path
}

/// Every file and directory under `dir`: its path, size, modification time and (for small
/// files) a hash of its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, Option<std::time::SystemTime>, u64)> {
    use std::hash::{Hash, Hasher};
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if meta.is_dir() {
                stack.push(p);
                out.insert(rel, (0, None, 0));
            } else {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                if meta.len() <= 1 << 20 {
                    std::fs::read(&p).unwrap().hash(&mut h);
                }
                out.insert(rel, (meta.len(), meta.modified().ok(), h.finish()));
            }
        }
    }
    out
}

/// Runs `bench argv` in `cwd`, killed after `limit` (a hang is a failure, not a stuck test).
fn run_in(cwd: &Path, argv: &[String], limit: Duration) -> Result<Output, String> {
    let mut child = bench()
        .args(argv)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = se.read_to_end(&mut b);
        b
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("did not finish within {limit:?} (a hang)"));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    })
}

/// Lines clap prints below its `error:` line.
fn is_clap_hint(l: &str) -> bool {
    let t = l.trim_start();
    t.is_empty()
        || t.starts_with("Usage:")
        || t.starts_with("For more information")
        || t.starts_with("tip:")
        || t.starts_with("[possible values")
}

/// The one `error:` line of `stderr`, or why there is not exactly one where it belongs.
fn error_line(stderr: &str) -> Result<&str, String> {
    let lines: Vec<&str> = stderr.lines().collect();
    let Some(i) = lines.iter().position(|l| l.starts_with("error:")) else {
        return Err("no `error:` line".into());
    };
    if let Some(l) = lines[..i]
        .iter()
        .find(|l| !(l.starts_with("warning:") || l.starts_with("note:")))
    {
        return Err(format!("a line before the error: {l:?}"));
    }
    if let Some(l) = lines[i + 1..].iter().find(|l| !is_clap_hint(l)) {
        return Err(format!("more than one line of error: {l:?}"));
    }
    Ok(lines[i])
}

fn substitute(argv: &[String], input: Option<&Path>, work: &Path, url: &str) -> Vec<String> {
    argv.iter()
        .map(|a| {
            let mut a = a.replace("{work}", work.to_str().unwrap());
            if let Some(i) = input {
                a = a.replace("{input}", i.to_str().unwrap());
            }
            a.replace("{url}", url)
        })
        .collect()
}

/// Runs every input-file case of `folder`; returns the failures, one paragraph each.
fn run_file_cases(folder: &str) -> Vec<String> {
    let m = manifest(folder);
    let mut failures = Vec::new();
    for case in &m.cases {
        for (label, argv) in command_lines(&m, case) {
            let what = format!("{folder}/{} [{label}]", case.name);
            if let Err(e) = check_file_case(folder, case, &argv) {
                failures.push(format!("{what}: {e}"));
            }
        }
    }
    failures
}

fn check_file_case(folder: &str, case: &Case, argv: &[String]) -> Result<(), String> {
    let work = tempdir(&format!("bad-{folder}-{}", case.name));
    let input = match (&case.input, &case.generate) {
        (Some(i), _) => {
            let src = corpus(folder).join(i);
            assert!(src.exists(), "{}: no such input", src.display());
            let dst = work.join(src.file_name().unwrap());
            copy_into(&src, &dst);
            Some(dst)
        }
        (None, Some(g)) => Some(generate(g, &work)),
        (None, None) => None,
    };
    let argv = substitute(argv, input.as_deref(), &work, "");
    let before = snapshot(&work);
    let out = run_in(&work, &argv, Duration::from_secs(120))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ctx = || format!("\n  argv: {argv:?}\n  stderr: {stderr}");
    if out.status.code() == Some(101) || stderr.contains("panicked") {
        return Err(format!("panicked{}", ctx()));
    }
    let want = case.exit.unwrap_or(2);
    if out.status.code() != Some(want) {
        return Err(format!(
            "exit {:?}, want {want}{}",
            out.status.code(),
            ctx()
        ));
    }
    if want != 0 {
        let line = error_line(&stderr).map_err(|e| format!("{e}{}", ctx()))?;
        let mut needles = case.error.clone();
        if case.names_input.unwrap_or(case.args.is_none()) {
            if let Some(i) = &input {
                needles.push(i.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        if needles.is_empty() {
            return Err("a failing case names no `error` needle".into());
        }
        for n in &needles {
            if !line.contains(n.as_str()) {
                return Err(format!("error line lacks {n:?}: {line:?}{}", ctx()));
            }
        }
        let after = snapshot(&work);
        if after != before {
            let changed: Vec<&PathBuf> = after
                .iter()
                .filter(|(k, v)| before.get(*k) != Some(v))
                .map(|(k, _)| k)
                .chain(before.keys().filter(|k| !after.contains_key(*k)))
                .collect();
            return Err(format!(
                "left files behind or changed: {changed:?}{}",
                ctx()
            ));
        }
    }
    for n in &case.stderr {
        if !stderr.contains(n.as_str()) {
            return Err(format!("stderr lacks {n:?}{}", ctx()));
        }
    }
    for n in &case.stdout {
        if !stdout.contains(n.as_str()) {
            return Err(format!("stdout lacks {n:?}\n  stdout: {stdout}{}", ctx()));
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

fn assert_no_failures(folder: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} case(s) of fixtures/bad/{folder} failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn bad_traces_are_refused_in_one_line_naming_file_and_line() {
    let _serial = serial();
    assert_no_failures("traces", run_file_cases("traces"));
}

#[test]
fn bad_journeys_files_are_refused_in_one_line_naming_file_and_key() {
    let _serial = serial();
    assert_no_failures("journeys", run_file_cases("journeys"));
}

#[test]
fn bad_flags_are_refused_in_one_line_naming_the_flag_before_anything_is_written() {
    let _serial = serial();
    assert_no_failures("flags", run_file_cases("flags"));
}

#[test]
fn damaged_run_directories_are_refused_or_read_as_documented() {
    let _serial = serial();
    assert_no_failures("rundirs", run_file_cases("rundirs"));
}

// ---------------------------------------------------------------------------------------------
// responses/

/// A server that answers `GET /v1/models` with one model, other GETs with 404, and every
/// other request with `raw`, then closes the connection (or, with `hold`, keeps it open and
/// silent until the client goes). One thread per connection. Returns its base URL.
fn raw_server(raw: Vec<u8>, hold: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let raw = std::sync::Arc::new(raw);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let raw = raw.clone();
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                let Some(head) = read_request(&mut s) else {
                    return;
                };
                if head.starts_with("GET /v1/models") {
                    let body = r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#;
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    return;
                }
                if head.starts_with("GET ") {
                    let _ = s.write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    );
                    return;
                }
                let _ = s.write_all(&raw);
                if hold {
                    // Silent until the client closes (its turn timeout).
                    let mut sink = [0u8; 1024];
                    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
                } else {
                    let _ = s.shutdown(Shutdown::Write);
                }
            });
        }
    });
    format!("http://{addr}")
}

fn check_response_case(m: &Manifest, case: &Case, argv: &[String]) -> Result<(), String> {
    let input = case.input.as_ref().expect("a responses case has an input");
    let raw = std::fs::read(corpus("responses").join(input)).unwrap();
    let url = raw_server(raw, case.hold);
    let work = tempdir(&format!("bad-responses-{}", case.name));
    let argv = substitute(argv, None, &work, &url);
    let t0 = Instant::now();
    let out = run_in(&work, &argv, Duration::from_secs(60))?;
    let elapsed = t0.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ctx = || format!("\n  argv: {argv:?}\n  stderr: {stderr}");
    if out.status.code() == Some(101) || stderr.contains("panicked") {
        return Err(format!("panicked{}", ctx()));
    }
    let want = case.exit.unwrap_or(1);
    if out.status.code() != Some(want) {
        return Err(format!(
            "exit {:?}, want {want}{}",
            out.status.code(),
            ctx()
        ));
    }
    let run = work.join("run");
    let turns: Vec<Value> = crate::read_jsonl(&run.join("turns.jsonl"))
        .into_iter()
        .filter(|t| t["superseded"] != true)
        .collect();
    if turns.len() != 1 {
        return Err(format!(
            "{} turn records, want 1: {turns:?}{}",
            turns.len(),
            ctx()
        ));
    }
    let t = &turns[0];
    let want_status = case.status.as_deref().unwrap_or("error");
    if t["status"] != want_status {
        return Err(format!("status {}, want {want_status}: {t}", t["status"]));
    }
    let kind = t["error_kind"].as_str();
    if kind != case.error_kind.as_deref() {
        return Err(format!(
            "error_kind {kind:?}, want {:?}: error {}",
            case.error_kind, t["error"]
        ));
    }
    let detail = t["error"].as_str().unwrap_or("");
    for n in &case.detail {
        if !detail.contains(n.as_str()) {
            return Err(format!("error {detail:?} lacks {n:?}"));
        }
    }
    let sessions = crate::read_jsonl(&run.join("sessions.jsonl"));
    if sessions.iter().filter(|s| s["superseded"] != true).count() != 1 {
        return Err(format!("the session did not end: {sessions:?}"));
    }
    // A held connection ends at the turn timeout, not at the test's limit.
    if elapsed > Duration::from_secs(30) {
        return Err(format!("took {elapsed:?}"));
    }
    let _ = m;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

#[test]
fn hostile_server_answers_are_recorded_turn_errors_of_the_right_kind() {
    let _serial = serial();
    let m = manifest("responses");
    let mut failures = Vec::new();
    for case in &m.cases {
        for (label, argv) in command_lines(&m, case) {
            if let Err(e) = check_response_case(&m, case, &argv) {
                failures.push(format!("responses/{} [{label}]: {e}", case.name));
            }
        }
    }
    assert_no_failures("responses", failures);
}
