//! `cargo xtask fuzz [--seconds N] [--target NAME...] [--jobs J] [--sanitizer S]`: the cargo-fuzz
//! targets of `xtask/fuzz/` (one per parser, `docs/fuzzing.md`), each for N seconds.
//!
//! Before running it checks the nightly toolchain (`cargo +nightly`) and finds `cargo fuzz` (on
//! `PATH`, else `target/tools/bin`, else it installs it there with `cargo install cargo-fuzz
//! --locked --root target/tools` and says so). It copies the root `Cargo.lock` into
//! `xtask/fuzz/` when it changed (the targets link the workspace's dependency versions), writes
//! each target's seeds from `fixtures/` (and the journey packs and `docs/journeys.md`), with
//! their boundary-number variants, into `target/fuzz-corpus/<target>/` (which also keeps what
//! earlier runs found) and builds the targets. Each target then runs as `cargo +nightly fuzz
//! run --fuzz-dir xtask/fuzz -s S <target> <corpus> -- -max_total_time=N ...`, its libFuzzer
//! output in `target/fuzz-logs/<target>.log`; one line per target, a final table and
//! `target/fuzz-summary.json` report executions, corpus size and crashes (artifacts in
//! `xtask/fuzz/artifacts/<target>/`). Exit 1 when a target crashed, hung, ran out of memory or
//! did not build.
//!
//! Not part of CI (`.ci/run`): it needs nightly and minutes per target.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The fuzz project, relative to the root.
const FUZZ_DIR: &str = "xtask/fuzz";
/// libFuzzer's memory limit per target.
const RSS_LIMIT_MB: u32 = 2048;
/// One input running longer than this is a hang (reported as a crash).
const TIMEOUT_S: u32 = 10;

const HELP: &str = "\
usage: cargo xtask fuzz [--seconds N] [--target NAME...] [--jobs J] [--sanitizer S] [--list]

Runs the cargo-fuzz targets of xtask/fuzz/ (docs/fuzzing.md), each for N seconds, and exits 1
if any crashed (a panic, a broken invariant, a hang over 10 s or more than 2048 MB).

  --seconds N     fuzzing time per target, build time not included (default 60)
  --target NAME   fuzz only these targets (repeatable; several names may follow one flag)
  --jobs J        fuzz J targets at a time, one libFuzzer process each (default 1)
  --sanitizer S   cargo fuzz's sanitizer: none (default: our crates forbid unsafe code, and
                  without one a target runs about twice as fast) or address
  --list          list the targets and exit

Needs the nightly toolchain (rustup toolchain install nightly). `cargo fuzz` is used from PATH
when there is one, else installed into target/tools (cargo install cargo-fuzz --locked).
Seeds are copied from fixtures/ into target/fuzz-corpus/<target>/ before each run (the corpus
grows there across runs); libFuzzer's output is in target/fuzz-logs/<target>.log, crash inputs
in xtask/fuzz/artifacts/<target>/, the summary in target/fuzz-summary.json. A crash's input
becomes a regression test in the crate at fault (docs/fuzzing.md says how).";

/// A fuzz target: its name (the binary in `xtask/fuzz/Cargo.toml`), its longest input and
/// where its seeds come from.
struct Target {
    name: &'static str,
    max_len: usize,
    seeds: fn(&Path, &mut Seeds) -> Result<()>,
}

const TARGETS: &[Target] = &[
    Target {
        name: "sse",
        max_len: 65536,
        seeds: seeds_sse,
    },
    Target {
        name: "chat_chunk",
        max_len: 4096,
        seeds: seeds_chat_chunk,
    },
    Target {
        name: "stream_chat",
        max_len: 65536,
        seeds: seeds_stream_chat,
    },
    Target {
        name: "stream_completions",
        max_len: 65536,
        seeds: |r, s| seeds_stream_dir(r, s, "completions"),
    },
    Target {
        name: "stream_responses",
        max_len: 65536,
        seeds: |r, s| seeds_stream_dir(r, s, "responses"),
    },
    Target {
        name: "stream_messages",
        max_len: 65536,
        seeds: |r, s| seeds_stream_dir(r, s, "messages"),
    },
    Target {
        name: "http_response",
        max_len: 65536,
        seeds: seeds_http_response,
    },
    Target {
        name: "trace_native",
        max_len: 65536,
        seeds: seeds_trace_native,
    },
    Target {
        name: "import_lmcache",
        max_len: 65536,
        seeds: seeds_lmcache,
    },
    Target {
        name: "import_mooncake",
        max_len: 65536,
        seeds: seeds_mooncake,
    },
    Target {
        name: "import_sharegpt",
        max_len: 65536,
        seeds: seeds_sharegpt,
    },
    Target {
        name: "import_openai_messages",
        max_len: 65536,
        seeds: seeds_openai_messages,
    },
    Target {
        name: "import_swe_agent",
        max_len: 65536,
        seeds: seeds_swe_agent,
    },
    Target {
        name: "prometheus",
        max_len: 65536,
        seeds: seeds_prometheus,
    },
    Target {
        name: "journey_toml",
        max_len: 32768,
        seeds: seeds_journey_toml,
    },
    Target {
        name: "rundir",
        max_len: 65536,
        seeds: seeds_rundir,
    },
    Target {
        name: "report_load",
        max_len: 65536,
        seeds: seeds_rundir,
    },
];

// ---------------------------------------------------------------------------------------------
// Arguments

#[derive(Debug, PartialEq)]
struct Opts {
    seconds: u32,
    targets: Vec<String>,
    jobs: usize,
    sanitizer: String,
    list: bool,
    help: bool,
}

fn parse_args(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        seconds: 60,
        targets: Vec::new(),
        jobs: 1,
        sanitizer: "none".to_owned(),
        list: false,
        help: false,
    };
    let mut it = args.iter().peekable();
    let value = |it: &mut std::iter::Peekable<std::slice::Iter<'_, String>>, flag: &str| {
        it.next()
            .cloned()
            .with_context(|| format!("{flag} needs a value"))
    };
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        let val = |it: &mut std::iter::Peekable<std::slice::Iter<'_, String>>| match &inline {
            Some(v) => Ok(v.clone()),
            None => value(it, flag),
        };
        match flag {
            "-h" | "--help" => o.help = true,
            "--list" => o.list = true,
            "--seconds" => {
                let v = val(&mut it)?;
                o.seconds = v
                    .parse()
                    .ok()
                    .filter(|&s| s > 0)
                    .with_context(|| format!("--seconds: {v:?} is not a positive integer"))?;
            }
            "--jobs" | "-j" => {
                let v = val(&mut it)?;
                o.jobs = v
                    .parse()
                    .ok()
                    .filter(|&j| j > 0)
                    .with_context(|| format!("--jobs: {v:?} is not a positive integer"))?;
            }
            "--sanitizer" => {
                let v = val(&mut it)?;
                if !matches!(v.as_str(), "none" | "address") {
                    bail!("--sanitizer: {v:?} is not none or address");
                }
                o.sanitizer = v;
            }
            "--target" => {
                o.targets.push(val(&mut it)?);
                // Several names may follow one --target.
                while let Some(next) = it.next_if(|n| !n.starts_with('-')) {
                    o.targets.push(next.clone());
                }
            }
            other if !other.starts_with('-') => o.targets.push(other.to_owned()),
            other => bail!("unknown option {other:?} (see cargo xtask fuzz --help)"),
        }
    }
    for t in &o.targets {
        if !TARGETS.iter().any(|k| k.name == t) {
            bail!("unknown target {t:?} (known: {})", names().join(", "));
        }
    }
    Ok(o)
}

fn names() -> Vec<&'static str> {
    TARGETS.iter().map(|t| t.name).collect()
}

// ---------------------------------------------------------------------------------------------
// The task

/// Runs `cargo xtask fuzz`.
pub fn run(args: &[String]) -> Result<()> {
    let o = parse_args(args)?;
    if o.help {
        println!("{HELP}");
        return Ok(());
    }
    if o.list {
        for t in TARGETS {
            println!("{:<24} max_len {}", t.name, t.max_len);
        }
        return Ok(());
    }
    let root = root();
    let selected: Vec<&Target> = if o.targets.is_empty() {
        TARGETS.iter().collect()
    } else {
        TARGETS
            .iter()
            .filter(|t| o.targets.iter().any(|n| n == t.name))
            .collect()
    };
    check_nightly()?;
    let path = cargo_fuzz_path(&root)?;
    sync_lock(&root)?;

    // Seeds first (cheap), so a seed problem shows before the long build.
    let corpus_root = root.join("target/fuzz-corpus");
    for t in &selected {
        let dir = corpus_root.join(t.name);
        let mut seeds = Seeds::new(&dir, t.max_len)?;
        (t.seeds)(&root, &mut seeds).with_context(|| format!("seeds of {}", t.name))?;
        let from_fixtures = seeds.written;
        seeds.add_boundary_variants()?;
        eprintln!(
            "xtask fuzz: {}: {} seed files into {} ({} with boundary numbers; {} over max_len {} \
             left out)",
            t.name,
            seeds.written,
            rel(&root, &dir),
            seeds.written - from_fixtures,
            seeds.too_long,
            t.max_len
        );
    }

    // One build of everything selected (each `cargo fuzz run` then finds it built).
    let build_started = Instant::now();
    let mut build = fuzz_cmd(&root, &path, &o.sanitizer, "build");
    if selected.len() == 1 {
        build.arg(selected[0].name);
    }
    eprintln!(
        "xtask fuzz: building the fuzz targets (cargo +nightly fuzz build --fuzz-dir {FUZZ_DIR} -s {})",
        o.sanitizer
    );
    let status = build
        .status()
        .context("cannot run cargo +nightly fuzz build")?;
    if !status.success() {
        bail!("cargo +nightly fuzz build failed ({status})");
    }
    eprintln!(
        "xtask fuzz: built in {:.0} s; fuzzing {} target(s) for {} s each, {} at a time",
        build_started.elapsed().as_secs_f64(),
        selected.len(),
        o.seconds,
        o.jobs
    );

    let logs = root.join("target/fuzz-logs");
    let tmp = root.join("target/fuzz-tmp");
    std::fs::create_dir_all(&logs)?;
    let queue = Mutex::new(selected.iter().copied().enumerate());
    let results: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..o.jobs.min(selected.len()) {
            s.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                    let Some((i, t)) = next else { break };
                    let outcome = fuzz_one(&root, &path, &o, t, &logs, &tmp);
                    eprintln!("{}", outcome.line(&root));
                    if let Ok(mut r) = results.lock() {
                        r.push((i, outcome));
                    }
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&tmp);
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|(i, _)| *i);
    let outcomes: Vec<Outcome> = results.into_iter().map(|(_, o)| o).collect();

    println!("\n{}", table(&root, &outcomes));
    let summary = serde_json::json!({
        "seconds": o.seconds,
        "sanitizer": o.sanitizer,
        "targets": outcomes.iter().map(|x| x.json(&root)).collect::<Vec<_>>(),
    });
    let summary_path = root.join("target/fuzz-summary.json");
    std::fs::write(
        &summary_path,
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    println!("summary: {}", rel(&root, &summary_path));
    let bad: Vec<&str> = outcomes
        .iter()
        .filter(|x| x.failure.is_some())
        .map(|x| x.name)
        .collect();
    if !bad.is_empty() {
        bail!(
            "{} target(s) failed: {} (make each input a regression test: docs/fuzzing.md)",
            bad.len(),
            bad.join(", ")
        );
    }
    Ok(())
}

/// Copies the root `Cargo.lock` into `xtask/fuzz/` when it changed since the last copy (cargo
/// then adds only the fuzzing crates to it; an unchanged lock is left as cargo completed it,
/// so a rerun resolves nothing).
fn sync_lock(root: &Path) -> Result<()> {
    let lock = std::fs::read(root.join("Cargo.lock")).context("cannot read Cargo.lock")?;
    let stamp = root.join("target/fuzz-lock.fnv");
    let hash = format!("{:016x}\n", fnv1a(&lock));
    let copy = root.join(FUZZ_DIR).join("Cargo.lock");
    if copy.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == hash) {
        return Ok(());
    }
    std::fs::write(&copy, &lock).context("cannot copy Cargo.lock into xtask/fuzz")?;
    std::fs::create_dir_all(root.join("target"))?;
    std::fs::write(&stamp, hash)?;
    Ok(())
}

/// `path` relative to the root, for messages.
fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn check_nightly() -> Result<()> {
    let out = Command::new("cargo")
        .args(["+nightly", "--version"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => bail!(
            "the nightly toolchain is missing (cargo fuzz needs it): install it with \
             `rustup toolchain install nightly` ({})",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim()
        ),
        Err(e) => bail!("cannot run cargo +nightly --version: {e}"),
    }
}

/// `PATH` with `target/tools/bin` last (a `cargo fuzz` of the user's wins), after installing
/// cargo-fuzz there when no `cargo fuzz` is found.
fn cargo_fuzz_path(root: &Path) -> Result<OsString> {
    let tools = root.join("target/tools");
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.push(tools.join("bin"));
    let path = std::env::join_paths(dirs).context("PATH cannot hold target/tools/bin")?;
    let works = |path: &OsString| {
        Command::new("cargo")
            .args(["+nightly", "fuzz", "--version"])
            .env("PATH", path)
            .stdin(Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if works(&path) {
        return Ok(path);
    }
    eprintln!(
        "xtask fuzz: cargo fuzz is not installed; installing it into target/tools \
         (cargo install cargo-fuzz --locked --root target/tools, a few minutes, once)"
    );
    let status = Command::new("cargo")
        .args(["install", "cargo-fuzz", "--locked", "--root"])
        .arg(&tools)
        .status()
        .context("cannot run cargo install")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed ({status})");
    }
    if !works(&path) {
        bail!(
            "cargo-fuzz was installed into {} but `cargo +nightly fuzz --version` still fails",
            tools.display()
        );
    }
    Ok(path)
}

/// `cargo +nightly fuzz SUB --fuzz-dir xtask/fuzz -s SANITIZER`, run from the root.
fn fuzz_cmd(root: &Path, path: &OsString, sanitizer: &str, sub: &str) -> Command {
    let mut c = Command::new("cargo");
    c.args([
        "+nightly",
        "fuzz",
        sub,
        "--fuzz-dir",
        FUZZ_DIR,
        "-s",
        sanitizer,
    ])
    .current_dir(root)
    .env("PATH", path)
    .stdin(Stdio::null());
    c
}

/// What one target's run found.
#[derive(Debug, Default, PartialEq)]
struct Outcome {
    name: &'static str,
    execs: Option<u64>,
    execs_per_s: Option<u64>,
    new_units: Option<u64>,
    peak_rss_mb: Option<u64>,
    /// Seconds libFuzzer fuzzed (its `Done N runs in S second(s)`).
    fuzz_s: Option<u64>,
    corpus: usize,
    /// Why the run failed (`None`: it ran its time without finding anything).
    failure: Option<String>,
    artifact: Option<PathBuf>,
    log: PathBuf,
    seconds: f64,
    /// The sanitizer it was built with (for the command that reproduces a crash).
    sanitizer: String,
}

fn fuzz_one(
    root: &Path,
    path: &OsString,
    o: &Opts,
    t: &Target,
    logs: &Path,
    tmp: &Path,
) -> Outcome {
    let corpus = root.join("target/fuzz-corpus").join(t.name);
    let log = logs.join(format!("{}.log", t.name));
    let dict_path = logs.join(format!("{}.dict", t.name));
    let started = Instant::now();
    let mut out = Outcome {
        name: t.name,
        log: log.clone(),
        sanitizer: o.sanitizer.clone(),
        ..Outcome::default()
    };
    if let Err(e) = std::fs::write(&dict_path, dict(t.name)) {
        out.failure = Some(format!("cannot write {}: {e}", dict_path.display()));
        return out;
    }
    let file = match std::fs::File::create(&log) {
        Ok(f) => f,
        Err(e) => {
            out.failure = Some(format!("cannot create {}: {e}", log.display()));
            return out;
        }
    };
    let (stdout, stderr) = match file.try_clone() {
        Ok(f2) => (Stdio::from(f2), Stdio::from(file)),
        Err(e) => {
            out.failure = Some(format!("cannot open {} twice: {e}", log.display()));
            return out;
        }
    };
    let mut cmd = fuzz_cmd(root, path, &o.sanitizer, "run");
    cmd.arg(t.name)
        .arg(&corpus)
        .arg("--")
        .arg(format!("-max_total_time={}", o.seconds))
        .arg(format!("-max_len={}", t.max_len))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-timeout={TIMEOUT_S}"))
        .arg("-print_final_stats=1")
        .arg(format!("-dict={}", dict_path.display()))
        .env("BENCH_FUZZ_TMP", tmp)
        .stdout(stdout)
        .stderr(stderr);
    let status = cmd.status();
    out.seconds = started.elapsed().as_secs_f64();
    let text = std::fs::read(&log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    parse_log(&text, &mut out);
    out.corpus = std::fs::read_dir(&corpus).map(|d| d.count()).unwrap_or(0);
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            if out.failure.is_none() {
                out.failure = Some(match out.execs {
                    None => format!("did not run ({s}; see the log)"),
                    Some(_) => format!("exited with {s} (see the log)"),
                });
            }
        }
        Err(e) => out.failure = Some(format!("cannot run cargo +nightly fuzz run: {e}")),
    }
    out
}

/// Reads libFuzzer's final statistics, the artifact it wrote and why.
fn parse_log(text: &str, out: &mut Outcome) {
    let stat = |name: &str| {
        text.lines().rev().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|v| v.trim_start_matches(':').trim().parse::<u64>().ok())
        })
    };
    out.execs = stat("stat::number_of_executed_units");
    out.execs_per_s = stat("stat::average_exec_per_sec");
    out.new_units = stat("stat::new_units_added");
    out.peak_rss_mb = stat("stat::peak_rss_mb");
    out.fuzz_s = text.lines().rev().find_map(|l| {
        let rest = l.strip_prefix("Done ")?;
        let (_, secs) = rest.split_once(" runs in ")?;
        secs.split_whitespace().next()?.parse().ok()
    });
    if out.execs.is_none() {
        // Killed before the final statistics: the last status line (`#123 pulse ...`).
        out.execs = text.lines().rev().find_map(|l| {
            let n = l.strip_prefix('#')?.split_whitespace().next()?;
            n.parse().ok()
        });
    }
    out.artifact = text.lines().rev().find_map(|l| {
        let p = l.split("Test unit written to ").nth(1)?.trim();
        let name = Path::new(p).file_name()?.to_string_lossy().into_owned();
        (!name.starts_with("slow-unit-")).then(|| PathBuf::from(p))
    });
    let lines: Vec<&str> = text.lines().collect();
    let panic = lines.iter().enumerate().find_map(|(i, l)| {
        let at = l.split(" panicked at ").nth(1)?;
        let msg = lines.get(i + 1).copied().unwrap_or("").trim();
        Some(format!(
            "panic at {} {}",
            at.trim_end_matches(':'),
            cut(msg, 160)
        ))
    });
    let libfuzzer = lines.iter().find_map(|l| {
        let e = l.split("ERROR: libFuzzer: ").nth(1)?;
        Some(e.trim().to_owned())
    });
    out.failure = match (panic, libfuzzer) {
        (Some(p), _) => Some(p),
        (None, Some(e)) => Some(e),
        (None, None) if out.artifact.is_some() => Some("crash".to_owned()),
        (None, None) => None,
    };
}

fn cut(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

fn num(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

impl Outcome {
    /// The one line printed when the target finishes.
    fn line(&self, root: &Path) -> String {
        let mut s = format!(
            "xtask fuzz: {}: {} executions in {} s ({}/s; {:.0} s with the build), corpus {} (+{} new), crash: ",
            self.name,
            num(self.execs),
            num(self.fuzz_s),
            num(self.execs_per_s),
            self.seconds,
            self.corpus,
            num(self.new_units),
        );
        match &self.failure {
            None => s.push_str("no"),
            Some(why) => {
                let _ = write!(s, "yes: {why}");
                match &self.artifact {
                    Some(a) => {
                        let _ = write!(
                            s,
                            "\n    input: {}\n    reproduce: cargo +nightly fuzz run --fuzz-dir {FUZZ_DIR} -s {} {} {}",
                            rel(root, a),
                            self.sanitizer,
                            self.name,
                            rel(root, a)
                        );
                    }
                    None => {
                        let _ = write!(s, "\n    log: {}", rel(root, &self.log));
                    }
                }
            }
        }
        s
    }

    fn json(&self, root: &Path) -> Value {
        serde_json::json!({
            "target": self.name,
            "executions": self.execs,
            "executions_per_s": self.execs_per_s,
            "new_units": self.new_units,
            "corpus_files": self.corpus,
            "peak_rss_mb": self.peak_rss_mb,
            "fuzz_s": self.fuzz_s,
            "crashed": self.failure.is_some(),
            "failure": self.failure,
            "artifact": self.artifact.as_deref().map(|a| rel(root, a)),
            "log": rel(root, &self.log),
            "wall_s": (self.seconds * 10.0).round() / 10.0,
        })
    }
}

/// The final table.
fn table(root: &Path, outcomes: &[Outcome]) -> String {
    let mut s = format!(
        "{:<24} {:>12} {:>9} {:>7} {:>6}  crash\n",
        "target", "executions", "exec/s", "corpus", "new"
    );
    for o in outcomes {
        let crash = match (&o.failure, &o.artifact) {
            (None, _) => "no".to_owned(),
            (Some(_), Some(a)) => format!("yes  {}", rel(root, a)),
            (Some(why), None) => format!("yes  {}", cut(why, 60)),
        };
        let _ = writeln!(
            s,
            "{:<24} {:>12} {:>9} {:>7} {:>6}  {crash}",
            o.name,
            num(o.execs),
            num(o.execs_per_s),
            o.corpus,
            num(o.new_units)
        );
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Dictionaries: tokens libFuzzer splices into inputs. Its comparison tracing finds the keys and
// literals the parsers compare against; these are what it cannot find that way (boundary
// numbers, which serde parses without comparing, and syntax).

const DICT_JSON: &str = r##""{"
"}"
"[]"
"{}"
"\":"
"\","
"\\u0000"
"\\ud83d\\ude00"
"\\ud800"
"\\udc00"
"\\\\"
"true"
"false"
"null"
"-0"
"-1"
"0.5"
"1e400"
"-1e400"
"1e-400"
"4294967295"
"4294967296"
"9007199254740993"
"9223372036854775807"
"9223372036854775808"
"-9223372036854775808"
"-9223372036854775809"
"18446744073709551615"
"18446744073709551616"
"NaN"
"Infinity"
"1.7976931348623157e308"
"##;

const DICT_SSE: &str = r##""data:"
"data: "
"event:"
"id:"
"retry:"
":"
"\x0d\x0a"
"\x0d"
"\x0a\x0a"
"\x0d\x0d"
"\xef\xbb\xbf"
"[DONE]"
"\x00"
"\xff"
"##;

const DICT_TOML: &str = r##""[params]"
"[defaults]"
"[[journey]]"
"[[setup]]"
"[[journey.steps]]"
"{{"
"}}"
"\"\"\""
"'''"
" = "
"inf"
"nan"
"-inf"
"1979-05-27T07:32:00Z"
"07:32:00"
"0x7fffffffffffffff"
"9223372036854775807"
"9223372036854775808"
"1e400"
"\x0d\x0a"
"##;

const DICT_PROM: &str = r##""# TYPE "
"# HELP "
" counter"
" gauge"
" histogram"
" summary"
"{"
"}"
"=\""
"\","
"NaN"
"+Inf"
"-Inf"
"1e400"
"-0"
"18446744073709551616"
"vllm:"
"sglang:"
"llamacpp:"
"_total"
"_bucket"
"le=\""
"tp_rank=\""
"dp_rank=\""
"engine=\""
"model_name=\""
"\x0a"
"##;

/// The dictionary of a target: JSON for everything reading JSON, plus the stream syntax for the
/// stream parsers.
fn dict(target: &str) -> String {
    match target {
        "sse" => DICT_SSE.to_owned(),
        t if t.starts_with("stream_") => format!("{DICT_JSON}{DICT_SSE}"),
        "journey_toml" => DICT_TOML.to_owned(),
        "prometheus" => DICT_PROM.to_owned(),
        _ => DICT_JSON.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds
//
// The input layouts are the fuzz targets' (`xtask/fuzz/src/lib.rs` and each target's doc):
// a `Cut` header `[0]` feeds the payload whole, `[n, len1, .., lenn]` in those chunks.

/// The seed files of one target's corpus directory, named by a hash of their bytes (so a rerun
/// rewrites the same files).
struct Seeds {
    dir: PathBuf,
    max_len: usize,
    seen: HashSet<u64>,
    /// The seeds from the fixtures, for their boundary variants.
    kept: Vec<Vec<u8>>,
    written: usize,
    too_long: usize,
}

/// Numbers a parser must survive where a count or a time is expected: random mutation rarely
/// writes them (serde parses numbers without comparing them to anything libFuzzer could trace).
const BOUNDARY_NUMBERS: &[&str] = &[
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "4294967296",
    "1e308",
    "-1e308",
    "-1",
];
/// Numbers of one seed replaced, at most, and boundary variants of one target, at most.
const BOUNDARY_PER_SEED: usize = 24;
const BOUNDARY_PER_TARGET: usize = 2000;

/// The byte ranges of the JSON-looking numbers of `b`: digits (with sign, fraction, exponent)
/// right after `:`, `[`, `,`, `=` or a space.
fn numbers(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 1;
    while i < b.len() {
        let starts = matches!(b[i - 1], b':' | b'[' | b',' | b' ' | b'=')
            && (b[i].is_ascii_digit()
                || (b[i] == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit)));
        if !starts {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < b.len()
            && (b[i].is_ascii_digit() || matches!(b[i], b'.' | b'e' | b'E' | b'+' | b'-'))
        {
            i += 1;
        }
        out.push((start, i));
    }
    out
}

impl Seeds {
    fn new(dir: &Path, max_len: usize) -> Result<Seeds> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Seeds {
            dir: dir.to_owned(),
            max_len,
            seen: HashSet::new(),
            kept: Vec::new(),
            written: 0,
            too_long: 0,
        })
    }

    /// Adds each seed with one of its first numbers replaced by each of [`BOUNDARY_NUMBERS`]
    /// (spread over the seeds, up to [`BOUNDARY_PER_TARGET`]): every run tries them first.
    fn add_boundary_variants(&mut self) -> Result<()> {
        let seeds = std::mem::take(&mut self.kept);
        let mut variants = Vec::new();
        for seed in &seeds {
            for (start, end) in numbers(seed).into_iter().take(BOUNDARY_PER_SEED) {
                for v in BOUNDARY_NUMBERS {
                    variants.push([&seed[..start], v.as_bytes(), &seed[end..]].concat());
                }
            }
        }
        // An even spread when there are too many: every k-th.
        let step = variants.len().div_ceil(BOUNDARY_PER_TARGET).max(1);
        for v in variants.into_iter().step_by(step) {
            self.add(v)?;
        }
        self.kept = seeds;
        Ok(())
    }

    fn add(&mut self, bytes: Vec<u8>) -> Result<()> {
        if bytes.len() > self.max_len {
            self.too_long += 1;
            return Ok(());
        }
        let h = fnv1a(&bytes);
        if !self.seen.insert(h) {
            return Ok(());
        }
        let path = self.dir.join(format!("seed-{h:016x}"));
        std::fs::write(&path, &bytes)
            .with_context(|| format!("cannot write {}", path.display()))?;
        self.written += 1;
        self.kept.push(bytes);
        Ok(())
    }

    /// `header` followed by `payload`.
    fn add_with(&mut self, header: &[u8], payload: &[u8]) -> Result<()> {
        let mut b = header.to_vec();
        b.extend_from_slice(payload);
        self.add(b)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn read(root: &Path, rel: &str) -> Result<Vec<u8>> {
    let p = root.join(rel);
    std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))
}

fn read_json(root: &Path, rel: &str) -> Result<Value> {
    serde_json::from_slice(&read(root, rel)?).with_context(|| format!("{rel} is not JSON"))
}

/// The files of `dir` (relative to the root) whose names end with one of `suffixes`, sorted.
fn files(root: &Path, dir: &str, suffixes: &[&str]) -> Result<Vec<PathBuf>> {
    let d = root.join(dir);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&d)
        .with_context(|| format!("cannot list {}", d.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| suffixes.iter().any(|s| n.ends_with(s)))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// [`files`] of a folder that may not exist (the bad-input corpus `fixtures/bad/`): none then.
fn files_opt(root: &Path, dir: &str, suffixes: &[&str]) -> Result<Vec<PathBuf>> {
    if root.join(dir).is_dir() {
        files(root, dir, suffixes)
    } else {
        Ok(Vec::new())
    }
}

/// The bodies of the broken servers' answers in `fixtures/bad/responses/` (raw HTTP: what
/// follows the head).
fn bad_response_bodies(root: &Path) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for f in files_opt(root, "fixtures/bad/responses", &[".http"])? {
        let raw = std::fs::read(&f)?;
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            out.push(raw[i + 4..].to_vec());
        }
    }
    Ok(out)
}

/// Groups of whole lines of `text`, each at most `budget` bytes and `max_lines` lines (a line
/// longer than the budget is left out).
fn line_groups(text: &[u8], budget: usize, max_lines: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut n = 0;
    for line in text.split_inclusive(|&b| b == b'\n') {
        if line.len() > budget {
            continue;
        }
        if cur.len() + line.len() > budget || n == max_lines {
            out.push(std::mem::take(&mut cur));
            n = 0;
        }
        cur.extend_from_slice(line);
        n += 1;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The captured chat streams (`data:` chunks of `chat.completion.chunk`s).
fn chat_streams(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = files(root, "fixtures/openai_stream", &[".sse"])?;
    out.extend(files(
        root,
        "fixtures/openai_stream/openai-python-recordings",
        &[".bin"],
    )?);
    out.extend(files(root, "fixtures/endpoint_streams/chat", &[".sse"])?);
    Ok(out)
}

/// Every event stream of `fixtures/` (chat, and the other endpoints' `.sse` and `.txt`).
fn all_streams(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = chat_streams(root)?;
    for e in ["completions", "responses", "messages"] {
        out.extend(files(
            root,
            &format!("fixtures/endpoint_streams/{e}"),
            &[".sse", ".txt"],
        )?);
    }
    Ok(out)
}

fn seeds_sse(root: &Path, s: &mut Seeds) -> Result<()> {
    // eventsource-parser's vectors: the chunks joined, and cut where the upstream test cut them.
    let v = read_json(root, "fixtures/sse/eventsource_parser_vectors.json")?;
    for case in v["cases"].as_array().into_iter().flatten() {
        let chunks: Vec<&str> = case["chunks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let whole = chunks.concat();
        s.add_with(&[0, 0], whole.as_bytes())?;
        let lens: Vec<usize> = chunks[..chunks.len().saturating_sub(1)]
            .iter()
            .map(|c| c.len())
            .collect();
        if !lens.is_empty() && lens.len() < 32 && lens.iter().all(|&l| l < 256) {
            let mut header = vec![0, lens.len() as u8];
            header.extend(lens.iter().map(|&l| l as u8));
            s.add_with(&header, whole.as_bytes())?;
        }
    }
    // The WHATWG web-platform-tests bodies (raw bytes where given).
    let v = read_json(root, "fixtures/sse/wpt_eventsource_vectors.json")?;
    for case in v["cases"].as_array().into_iter().flatten() {
        let body = match case["body_hex"].as_str() {
            Some(hex) => unhex(hex).context("a body_hex of the WPT vectors")?,
            None => case["body_utf8"]
                .as_str()
                .unwrap_or_default()
                .as_bytes()
                .to_vec(),
        };
        s.add_with(&[0, 0], &body)?;
    }
    for f in all_streams(root)? {
        let body = std::fs::read(&f)?;
        s.add_with(&[0, 0], &body)?;
        // Small ones a byte at a time (slow for big ones), and capped at 97 bytes a line.
        if body.len() < 4096 {
            s.add_with(&[0, 0xFF], &body)?;
            s.add_with(&[0x80 | 12, 0], &body)?;
        }
    }
    for body in bad_response_bodies(root)? {
        s.add_with(&[0, 0], &body)?;
    }
    Ok(())
}

fn unhex(hex: &str) -> Option<Vec<u8>> {
    let hex: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    hex.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

fn seeds_chat_chunk(root: &Path, s: &mut Seeds) -> Result<()> {
    for f in chat_streams(root)? {
        let text = std::fs::read(&f)?;
        for line in String::from_utf8_lossy(&text).lines() {
            if let Some(d) = line.strip_prefix("data:") {
                let d = d.trim_start();
                if d.starts_with('{') {
                    s.add(d.as_bytes().to_vec())?;
                }
            }
        }
    }
    Ok(())
}

/// A non-streamed chat completion (no capture of one is checked in).
const CHAT_WHOLE: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there","reasoning_content":"the user greets"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}}"#;

fn seeds_stream_chat(root: &Path, s: &mut Seeds) -> Result<()> {
    for f in chat_streams(root)? {
        let body = std::fs::read(&f)?;
        // Streamed, fed whole (flags 0, no cut).
        s.add_with(&[0, 0], &body)?;
    }
    // Broken servers' answers, streamed and whole.
    for body in bad_response_bodies(root)? {
        s.add_with(&[0, 0], &body)?;
        s.add_with(&[1, 0], &body)?;
    }
    s.add_with(&[1, 0], CHAT_WHOLE.as_bytes())
}

/// The client's HTTP/1.1: real streams under each framing (`content-length`, chunked with an
/// extension and a trailer, until the close), an informational answer before one, and broken
/// heads; each whole, a byte at a time, and cut after the head.
fn seeds_http_response(root: &Path, s: &mut Seeds) -> Result<()> {
    let body = std::fs::read(
        chat_streams(root)?
            .first()
            .context("no chat stream fixture")?,
    )?;
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n";
    let mut answers: Vec<Vec<u8>> = Vec::new();
    let mut length = format!("{head}content-length: {}\r\n\r\n", body.len()).into_bytes();
    length.extend_from_slice(&body);
    answers.push(length);
    let mut chunked = format!("{head}transfer-encoding: chunked\r\n\r\n").into_bytes();
    for piece in body.chunks(100) {
        chunked.extend_from_slice(format!("{:x};x=1\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\nx-trailer: t\r\n\r\n");
    answers.push(chunked);
    let mut close = format!("{head}connection: close\r\n\r\n").into_bytes();
    close.extend_from_slice(&body);
    answers.push(close);
    let mut continued = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\n".to_vec();
    continued.extend_from_slice(b"{\"ok\":true}");
    answers.push(continued);
    answers.push(b"HTTP/1.1 204 No Content\r\n\r\n".to_vec());
    answers.push(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab".to_vec());
    answers.push(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec());
    answers.push(b"\x00\x01garbage\r\n\r\n".to_vec());
    for a in &answers {
        s.add_with(&[0], a)?;
        s.add_with(&[0xFF], a)?; // bench_fuzz::BYTEWISE: a byte at a time
        if let Some(end) = a.windows(4).position(|w| w == b"\r\n\r\n")
            && end + 4 < 256
        {
            s.add_with(&[1, (end + 4) as u8], a)?;
        }
    }
    Ok(())
}

/// `fixtures/endpoint_streams/<e>`: `*.json` whole answers, every other file a stream.
fn seeds_stream_dir(root: &Path, s: &mut Seeds, e: &str) -> Result<()> {
    let dir = format!("fixtures/endpoint_streams/{e}");
    for f in files(root, &dir, &[".sse", ".txt"])? {
        s.add_with(&[0, 0], &std::fs::read(&f)?)?;
    }
    for f in files(root, &dir, &[".json"])? {
        s.add_with(&[1, 0], &std::fs::read(&f)?)?;
    }
    Ok(())
}

/// A dataset directory's `manifest.json` (agentic-bench's keys included).
const MANIFEST: &str = r#"{"description":"seed","min_turns":1,"max_turns":50,"system_prompt_len":64,"band":[1000,40000],"output_policy":"trace","dataset":"sample","tier":"small","version":1,"n_sessions":24}"#;

fn seeds_trace_native(root: &Path, s: &mut Seeds) -> Result<()> {
    let packed = read(root, "fixtures/datasets/sample.jsonl.zst")?;
    let text = zstd::decode_all(&packed[..]).context("fixtures/datasets/sample.jsonl.zst")?;
    let budget = s.max_len - 1;
    for (i, group) in line_groups(&text, budget, 4).into_iter().enumerate() {
        // Mode 0: `trace.jsonl`; mode 2: the same compressed by the target.
        s.add_with(&[if i % 2 == 0 { 0 } else { 2 }], &group)?;
        if i == 0 {
            // Mode 1: one session as a `.json` file, and an array of them.
            let mut sessions = group.split(|&b| b == b'\n').filter(|l| !l.is_empty());
            if let Some(first) = sessions.next() {
                s.add_with(&[1], first)?;
                let all: Vec<&[u8]> = std::iter::once(first).chain(sessions).collect();
                s.add_with(&[1], &[b"[", &all.join(&b","[..])[..], b"]"].concat())?;
            }
        }
    }
    // Mode 7: a dataset directory's manifest.
    s.add_with(&[7], MANIFEST.as_bytes())?;
    // The bad-input corpus: `.jsonl` (mode 0), `.json` (1), `.jsonl.zst` as they are (3), its
    // bad manifest (7).
    for (suffix, mode) in [(".jsonl", 0), (".json", 1), (".jsonl.zst", 3)] {
        for f in files_opt(root, "fixtures/bad/traces", &[suffix])? {
            s.add_with(&[mode], &std::fs::read(&f)?)?;
        }
    }
    for f in files_opt(root, "fixtures/bad/traces/bad-manifest", &["manifest.json"])? {
        s.add_with(&[7], &std::fs::read(&f)?)?;
    }
    Ok(())
}

fn seeds_jsonl(root: &Path, s: &mut Seeds, dir: &str, max_lines: usize) -> Result<()> {
    for f in files(root, dir, &[".jsonl"])? {
        let text = std::fs::read(&f)?;
        for group in line_groups(&text, s.max_len - 1, max_lines)
            .into_iter()
            .take(8)
        {
            s.add_with(&[0], &group)?;
        }
    }
    Ok(())
}

fn seeds_lmcache(root: &Path, s: &mut Seeds) -> Result<()> {
    seeds_jsonl(root, s, "fixtures/traces/lmcache-agent-trace/miniswe", 6)
}

fn seeds_mooncake(root: &Path, s: &mut Seeds) -> Result<()> {
    // Short groups: each line makes a prompt of thousands of words.
    seeds_jsonl(root, s, "fixtures/traces/mooncake", 8)
}

fn seeds_sharegpt(root: &Path, s: &mut Seeds) -> Result<()> {
    let v = read_json(
        root,
        "fixtures/traces/sharegpt/fastchat_dummy_conversation.json",
    )?;
    let items = v.as_array().cloned().unwrap_or_default();
    for group in items.chunks(6).take(8) {
        // Header 0: `conversations.json` (an array); 4: `conversations.jsonl`.
        s.add_with(&[0], serde_json::to_string(group)?.as_bytes())?;
        let mut lines = String::new();
        for c in group {
            lines.push_str(&serde_json::to_string(c)?);
            lines.push('\n');
        }
        s.add_with(&[4], lines.as_bytes())?;
    }
    Ok(())
}

fn seeds_openai_messages(root: &Path, s: &mut Seeds) -> Result<()> {
    // Header 8: `local.traj.json`, as the fixture is named.
    let local = read(root, "fixtures/traces/mini-swe-agent/local.traj.json")?;
    s.add_with(&[8], &local)?;
    // Header 4: `messages.jsonl`, one conversation per line.
    let v: Value = serde_json::from_slice(&local)?;
    s.add_with(&[4], format!("{v}\n{v}\n").as_bytes())?;
    // Header 0: `messages.json`, SWE-agent's history as plain messages.
    let traj = read_json(
        root,
        "fixtures/traces/swe-agent/swe-agent__test-repo-i1.traj",
    )?;
    let msgs: Vec<Value> = traj["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| serde_json::json!({"role": m["role"], "content": m["content"]}))
        .collect();
    s.add_with(&[0], serde_json::to_string(&msgs)?.as_bytes())?;
    s.add_with(&[0], serde_json::to_string(&[&msgs, &msgs])?.as_bytes())
}

fn seeds_swe_agent(root: &Path, s: &mut Seeds) -> Result<()> {
    let traj = read(
        root,
        "fixtures/traces/swe-agent/swe-agent__test-repo-i1.traj",
    )?;
    s.add_with(&[0], &traj)?;
    // A smaller one: the first few history entries.
    let mut v: Value = serde_json::from_slice(&traj)?;
    if let Some(h) = v["history"].as_array_mut() {
        h.truncate(4);
    }
    s.add_with(&[0], serde_json::to_string(&v)?.as_bytes())
}

fn seeds_prometheus(root: &Path, s: &mut Seeds) -> Result<()> {
    for f in files(root, "fixtures/metrics", &[".prom"])? {
        s.add(std::fs::read(&f)?)?;
    }
    Ok(())
}

fn seeds_journey_toml(root: &Path, s: &mut Seeds) -> Result<()> {
    for f in files(root, "crates/bench-journeys/src/packs", &[".toml"])? {
        s.add(std::fs::read(&f)?)?;
    }
    for f in files_opt(root, "fixtures/bad/journeys", &[".toml"])? {
        s.add(std::fs::read(&f)?)?;
    }
    let doc = String::from_utf8(read(root, "docs/journeys.md")?)?;
    for block in doc.split("```toml\n").skip(1) {
        if let Some((body, _)) = block.split_once("\n```") {
            s.add(format!("{body}\n").into_bytes())?;
        }
    }
    Ok(())
}

/// The files of a packed run directory, in section order (`bench_fuzz::RUNDIR_FILES`).
const RUNDIR_FILES: [&str; 6] = [
    "run.json",
    "events.jsonl",
    "turns.jsonl",
    "sessions.jsonl",
    "scrapes.jsonl",
    "result.json",
];

/// A run directory packed into one input: its files in [`RUNDIR_FILES`] order, separated by
/// `0xFF` (absent files empty), the JSONL files cut to whole lines so that it fits `max_len`.
fn pack_rundir(dir: &Path, max_len: usize) -> Result<Vec<u8>> {
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for name in RUNDIR_FILES {
        parts.push(std::fs::read(dir.join(name)).unwrap_or_default());
    }
    let fixed: usize =
        parts[0].len() + parts[5].len() + parts[1].len() + parts[4].len() + RUNDIR_FILES.len();
    // What is left goes to turns and sessions, three quarters to turns.
    let left = max_len.saturating_sub(fixed);
    for (i, share) in [(2, left * 3 / 4), (3, left / 4)] {
        if parts[i].len() > share {
            let groups = line_groups(&parts[i], share, usize::MAX);
            parts[i] = groups.into_iter().next().unwrap_or_default();
        }
    }
    Ok(parts.join(&[0xFF][..]))
}

fn seeds_rundir(root: &Path, s: &mut Seeds) -> Result<()> {
    for dir in [
        "fixtures/rundirs/pre-spec-completed",
        "fixtures/rundirs/pre-spec-crashed",
        "fixtures/baselines/replay",
        "fixtures/baselines/sweep-point",
    ] {
        s.add(pack_rundir(&root.join(dir), s.max_len)?)?;
    }
    // The damaged run directories of the bad-input corpus.
    let bad = root.join("fixtures/bad/rundirs");
    if bad.is_dir() {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&bad)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            s.add(pack_rundir(&d, s.max_len)?)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn arguments() {
        let o = parse_args(&args(&[])).unwrap();
        assert_eq!((o.seconds, o.jobs, o.targets.len()), (60, 1, 0));
        assert_eq!(o.sanitizer, "none");
        let o = parse_args(&args(&[
            "--seconds",
            "5",
            "--target",
            "sse",
            "chat_chunk",
            "--jobs=2",
            "--target=rundir",
            "prometheus",
        ]))
        .unwrap();
        assert_eq!(o.seconds, 5);
        assert_eq!(o.jobs, 2);
        assert_eq!(o.targets, ["sse", "chat_chunk", "rundir", "prometheus"]);
        for bad in [
            &["--seconds", "0"][..],
            &["--seconds"],
            &["--jobs", "x"],
            &["--target", "nope"],
            &["--sanitizer", "memory"],
            &["--frobnicate"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    /// Every target named here is a binary of the fuzz crate, and the other way round.
    #[test]
    fn targets_match_the_fuzz_crate() {
        let manifest = std::fs::read_to_string(root().join(FUZZ_DIR).join("Cargo.toml")).unwrap();
        let bins: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .filter_map(|l| l.strip_suffix('"'))
            .filter(|n| *n != "bench-fuzz" && *n != "bench_fuzz")
            .collect();
        assert_eq!(bins, names());
        for n in names() {
            assert!(
                root()
                    .join(FUZZ_DIR)
                    .join(format!("fuzz_targets/{n}.rs"))
                    .is_file(),
                "{n}"
            );
        }
    }

    /// Every target gets seeds from the fixtures, none over its max_len.
    #[test]
    fn every_target_has_seeds() {
        let tmp = tempfile::Builder::new()
            .prefix("xtask-fuzz-seeds-")
            .tempdir()
            .unwrap();
        let base = tmp.path();
        for t in TARGETS {
            let dir = base.join(t.name);
            let mut s = Seeds::new(&dir, t.max_len).unwrap();
            (t.seeds)(&root(), &mut s).unwrap();
            assert!(s.written >= 2, "{}: {} seeds", t.name, s.written);
            for e in std::fs::read_dir(&dir).unwrap() {
                let len = e.unwrap().metadata().unwrap().len() as usize;
                assert!(len <= t.max_len, "{}: a seed of {len} bytes", t.name);
            }
        }
    }

    #[test]
    fn a_packed_run_directory_fits_and_keeps_whole_lines() {
        let dir = root().join("fixtures/baselines/replay");
        let packed = pack_rundir(&dir, 65536).unwrap();
        assert!(packed.len() <= 65536, "{}", packed.len());
        let parts: Vec<&[u8]> = packed.split(|&b| b == 0xFF).collect();
        assert_eq!(parts.len(), 6);
        assert!(parts[0].starts_with(b"{"), "run.json first");
        assert!(parts[1].is_empty(), "the baseline has no events.jsonl");
        assert!(
            !parts[2].is_empty() && parts[2].ends_with(b"\n"),
            "whole turns"
        );
        let result: Value = serde_json::from_slice(parts[5]).unwrap();
        assert!(result.get("summary").is_some());
    }

    /// Every dictionary line is one quoted token, as libFuzzer reads them.
    #[test]
    fn dictionaries_are_quoted_tokens() {
        for t in TARGETS {
            for line in dict(t.name).lines() {
                assert!(
                    line.len() >= 3 && line.starts_with('"') && line.ends_with('"'),
                    "{}: {line:?}",
                    t.name
                );
            }
        }
    }

    #[test]
    fn boundary_variants_replace_one_number_at_a_time() {
        let b = br#"{"a":12,"b":[-3.5e2, 7],"c":"x9","d=4"}"#;
        let spans: Vec<&[u8]> = numbers(b).into_iter().map(|(s, e)| &b[s..e]).collect();
        // (`d=4` counts too: Prometheus and TOML write `=`; a string changed is harmless.)
        assert_eq!(spans, [&b"12"[..], b"-3.5e2", b"7", b"4"]);
        let tmp = tempfile::Builder::new()
            .prefix("xtask-fuzz-bv-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let mut s = Seeds::new(dir, 4096).unwrap();
        s.add(b.to_vec()).unwrap();
        s.add_boundary_variants().unwrap();
        assert_eq!(s.written, 1 + 4 * BOUNDARY_NUMBERS.len());
        let first = br#"{"a":18446744073709551615,"b":[-3.5e2, 7],"c":"x9","d=4"}"#;
        assert!(dir.join(format!("seed-{:016x}", fnv1a(first))).is_file());
    }

    #[test]
    fn line_groups_keep_whole_lines_within_the_budget() {
        let g = line_groups(b"aa\nbbb\ncccccccccc\nd\n", 7, 2);
        assert_eq!(g, [b"aa\nbbb\n".to_vec(), b"d\n".to_vec()]);
    }

    #[test]
    fn libfuzzer_logs_are_read() {
        let done = "\
INFO: Seed: 1
#2\tINITED cov: 10 ft: 12 corp: 3/30b exec/s: 0 rss: 30Mb
#4096\tpulse  cov: 10 ft: 12 corp: 3/30b lim: 4096 exec/s: 2048 rss: 31Mb
Done 123456 runs in 61 second(s)
stat::number_of_executed_units: 123456
stat::average_exec_per_sec:     2023
stat::new_units_added:          45
stat::slowest_unit_time_sec:    0
stat::peak_rss_mb:              100
";
        let mut o = Outcome::default();
        parse_log(done, &mut o);
        assert_eq!(o.execs, Some(123_456));
        assert_eq!(o.execs_per_s, Some(2023));
        assert_eq!(o.new_units, Some(45));
        assert_eq!(o.peak_rss_mb, Some(100));
        assert_eq!(o.fuzz_s, Some(61));
        assert_eq!((o.failure, o.artifact), (None, None));

        let crash = "\
#1000\tNEW    cov: 10 ft: 12 corp: 3/30b lim: 4096 exec/s: 2048 rss: 31Mb
thread '<unnamed>' panicked at fuzz_targets/sse.rs:40:5:
assertion `left == right` failed: the events depend on where the stream was cut
==99== ERROR: libFuzzer: deadly signal
artifact_prefix='/w/xtask/fuzz/artifacts/sse/'; Test unit written to /w/xtask/fuzz/artifacts/sse/crash-abc
Base64: AAE=
stat::number_of_executed_units: 1001
";
        let mut o = Outcome::default();
        parse_log(crash, &mut o);
        assert_eq!(o.execs, Some(1001));
        assert_eq!(
            o.artifact.as_deref(),
            Some(Path::new("/w/xtask/fuzz/artifacts/sse/crash-abc"))
        );
        let why = o.failure.unwrap();
        assert!(why.contains("fuzz_targets/sse.rs:40:5"), "{why}");
        assert!(why.contains("depend on where"), "{why}");

        let hang = "\
#77\tpulse  cov: 1
==7== ERROR: libFuzzer: timeout after 10 seconds
artifact_prefix='a/'; Test unit written to a/timeout-123
";
        let mut o = Outcome::default();
        parse_log(hang, &mut o);
        assert_eq!(o.execs, Some(77), "the last status line when no stats came");
        assert_eq!(o.failure.as_deref(), Some("timeout after 10 seconds"));
        assert_eq!(o.artifact.as_deref(), Some(Path::new("a/timeout-123")));
    }
}
