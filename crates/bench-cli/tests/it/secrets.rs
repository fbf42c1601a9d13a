//! Secrets never reach a file, a log, an output, the control plane's API or an error message
//! (docs/secrets.md). Every command that can carry one runs with distinctive values — an API
//! key from the environment, an `Authorization`, a `Cookie`, an `X-Api-Key`, an `X-Custom`
//! named by `--secret-header`, a journey's `{{env.NAME}}` and literal header — against a server
//! that answers 401 echoing every request header (a server repeating the key in its error is
//! the usual leak), padded so the 200 bytes an error detail keeps end in the middle of the
//! second secret (the first one is whole in them). Then every file under each output directory and everything printed is searched:
//! every secret holds `SECRET`, so even a secret cut short is found. Each test also checks that
//! `***` shows where a value was, so a scrubber that does nothing cannot pass.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{bench, signal, spawn_sim, stop_sim, tempdir};

/// `OPENAI_API_KEY` (sent as a bearer token).
const ENV_KEY: &str = "sk-SECRET-env-1234abcd";
/// `ANTHROPIC_API_KEY` (sent as `x-api-key` to the Messages API).
const ANTHROPIC_KEY: &str = "sk-ant-SECRET-anth-4321";
const AUTH: &str = "Bearer tok-SECRET-hdr-5678";
const COOKIE: &str = "session=ck-SECRET-cookie-9012";
const X_API_KEY: &str = "xk-SECRET-apikey-3456";
/// `X-Custom`: secret only because `--secret-header X-Custom` says so.
const CUSTOM: &str = "cu-SECRET-custom-7890";
/// Read by the journeys file as `{{env.JOURNEY_TOKEN}}` (a header) and `{{env.JOURNEY_PATH}}`
/// (a path).
const JOURNEY_TOKEN: &str = "jt-SECRET-journey-2468";
const JOURNEY_PATH: &str = "jp-SECRET-path-1357";
/// A literal value of a secret-named header in the journeys file.
const TOML_LITERAL: &str = "lit-SECRET-toml-1111";

/// In every secret: found anywhere, something leaked (whole or cut short).
const MARK: &str = "SECRET";

const ALL: [&str; 9] = [
    ENV_KEY,
    ANTHROPIC_KEY,
    AUTH,
    COOKIE,
    X_API_KEY,
    CUSTOM,
    JOURNEY_TOKEN,
    JOURNEY_PATH,
    TOML_LITERAL,
];

/// `bench` with the secrets in its environment.
fn cmd() -> Command {
    let mut c = bench();
    c.env("OPENAI_API_KEY", ENV_KEY)
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("JOURNEY_TOKEN", JOURNEY_TOKEN)
        .env("JOURNEY_PATH", JOURNEY_PATH)
        .env_remove("BENCH_SERVE_TOKEN");
    c
}

/// The secret headers, and `--secret-header X-Custom`.
fn header_args() -> Vec<String> {
    [
        "--header".to_owned(),
        format!("Authorization={AUTH}"),
        "--header".to_owned(),
        format!("Cookie={COOKIE}"),
        "--header".to_owned(),
        format!("X-Api-Key={X_API_KEY}"),
        "--header".to_owned(),
        format!("X-Custom={CUSTOM}"),
        "--header".to_owned(),
        "X-Team=infra-team".to_owned(),
        "--secret-header".to_owned(),
        "X-Custom".to_owned(),
    ]
    .into()
}

/// The small synthetic workload every replay here plays.
fn workload_args() -> Vec<String> {
    [
        "--tokenizer",
        "none",
        "--dataset",
        "random",
        "--turns",
        "2",
        "--num-sessions",
        "2",
        "--output-len",
        "8",
        "--no-gaps",
        "-c",
        "1",
        "-q",
    ]
    .map(String::from)
    .into()
}

/// Everything a test saw: printed text and files, by where it came from.
#[derive(Default)]
struct Seen(Vec<(String, String)>);

impl Seen {
    fn text(&mut self, what: impl Into<String>, text: impl Into<String>) {
        self.0.push((what.into(), text.into()));
    }

    /// A finished command's stdout and stderr.
    fn output(&mut self, what: &str, o: &Output) {
        self.text(
            format!("{what}: stdout"),
            String::from_utf8_lossy(&o.stdout),
        );
        self.text(
            format!("{what}: stderr"),
            String::from_utf8_lossy(&o.stderr),
        );
    }

    /// Every file under `dir`.
    fn dir(&mut self, dir: &Path) {
        let mut n = 0;
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    n += 1;
                    let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                    self.text(p.display().to_string(), text);
                }
            }
        }
        assert!(n > 0, "nothing written under {}", dir.display());
    }

    /// No secret anywhere, not even cut short.
    fn assert_clean(&self) {
        for (what, text) in &self.0 {
            for s in ALL {
                assert!(!text.contains(s), "{what} holds {s:?}:\n{text}");
            }
            if let Some(i) = text.find(MARK) {
                let from = i.saturating_sub(120);
                let to = (i + 120).min(text.len());
                panic!(
                    "{what} holds part of a secret: …{}…",
                    text.get(from..to).unwrap_or(text)
                );
            }
        }
        assert!(!self.0.is_empty());
    }

    /// Some text from `what` shows `***` where a value was.
    fn assert_masked(&self, what: &str) {
        assert!(
            self.0
                .iter()
                .any(|(w, t)| w.contains(what) && t.contains("***")),
            "no *** in {what}: {:?}",
            self.0
                .iter()
                .filter(|(w, _)| w.contains(what))
                .map(|(w, _)| w)
                .collect::<Vec<_>>()
        );
    }
}

/// A server answering `GET /v1/models` (so runs get ready) and everything else with 401 and a
/// JSON body echoing every request header, padded so that its 200th byte falls ten bytes into
/// the second secret (a detail cut there would end inside it; the first secret is whole).
fn echo_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { continue };
            std::thread::spawn(move || answer(s));
        }
    });
    format!("http://{addr}")
}

fn answer(mut s: TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        let Ok(n) = s.read(&mut tmp) else { return };
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                break end;
            }
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let (status, body) = if head.starts_with("GET /v1/models") {
        (
            "200 OK",
            r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#.to_owned(),
        )
    } else {
        let dump: Vec<&str> = head.lines().skip(1).collect();
        let dump = dump.join("\n");
        let body = |pad: usize| {
            serde_json::json!({"error": {
                "message": format!("Incorrect API key provided.{} Request headers: {dump}", ".".repeat(pad)),
                "type": "invalid_request_error",
            }})
            .to_string()
        };
        let b = body(0);
        let at = b
            .match_indices(MARK)
            .nth(1)
            .or(b.match_indices(MARK).next())
            .map_or(0, |(i, _)| i);
        ("401 Unauthorized", body(200usize.saturating_sub(at + 10)))
    };
    let _ = write!(
        s,
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn run_cmd(args: &[String]) -> Output {
    cmd().args(args).output().unwrap()
}

/// `bench run` failing against the echoing server and succeeding against `bench sim`, then
/// `bench report` in every format, `bench status` and `bench compare` on them.
#[test]
fn runs_reports_status_and_compare_never_show_a_secret() {
    let _g = crate::serial();
    let dir = tempdir("secrets-run");
    let echo = echo_server();
    let mut seen = Seen::default();

    // A failing run: every turn is answered 401 with the headers echoed. BENCH_LOG=debug: the
    // log lines go through the same scrub.
    let failed = dir.join("failed");
    let mut args = vec!["run".to_owned(), "--base-url".to_owned(), echo.clone()];
    args.extend(workload_args());
    args.extend(header_args());
    args.extend([
        "--run-dir".to_owned(),
        failed.display().to_string(),
        "--output".to_owned(),
        dir.join("failed-line.jsonl").display().to_string(),
        "--csv".to_owned(),
        dir.join("failed-turns.csv").display().to_string(),
    ]);
    let o = cmd()
        .args(&args)
        .env("BENCH_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    seen.output("bench run (failing)", &o);
    let turns = std::fs::read_to_string(failed.join("turns.jsonl")).unwrap();
    assert!(
        turns.contains("HTTP 401") && turns.contains("***"),
        "the error detail shows where the echoed values were: {turns}"
    );
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(failed.join("run.json")).unwrap()).unwrap();
    let url = &run_json["spec"]["target"]["url"];
    assert_eq!(
        url["header_names"],
        serde_json::json!(["Authorization", "Cookie", "X-Api-Key", "X-Custom", "X-Team"])
    );
    assert_eq!(url["secret_header_names"], serde_json::json!(["X-Custom"]));

    // A successful run against the simulator, with the same headers.
    let (sim, sim_url) = spawn_sim(&["--ttft-ms", "1", "--itl-ms", "1"]);
    let ok = dir.join("ok");
    let mut args = vec!["run".to_owned(), "--base-url".to_owned(), sim_url];
    args.extend(workload_args());
    args.extend(header_args());
    args.extend([
        "--run-dir".to_owned(),
        ok.display().to_string(),
        "--output".to_owned(),
        dir.join("ok-line.jsonl").display().to_string(),
    ]);
    let o = run_cmd(&args);
    stop_sim(sim);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    seen.output("bench run (ok)", &o);

    // Every report format, to stdout and to a file; status; compare.
    for run in [&failed, &ok] {
        let r = run.display().to_string();
        for format in ["text", "json", "csv", "markdown", "html"] {
            let o = run_cmd(&["report".into(), r.clone(), "--format".into(), format.into()]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            seen.output(&format!("bench report --format {format} {r}"), &o);
        }
        let file = dir.join(format!(
            "report-{}.html",
            run.file_name().unwrap().to_string_lossy()
        ));
        let o = run_cmd(&[
            "report".into(),
            format!("{r}/result.json"),
            "--format".into(),
            "html".into(),
            "-o".into(),
            file.display().to_string(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        seen.output("bench report -o", &o);
        for extra in [None, Some("--json")] {
            let mut a = vec!["status".to_owned(), r.clone()];
            a.extend(extra.map(String::from));
            let o = run_cmd(&a);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            seen.output("bench status", &o);
        }
    }
    for extra in [None, Some("--json")] {
        let mut a = vec![
            "compare".to_owned(),
            ok.display().to_string(),
            failed.display().to_string(),
            "--force".to_owned(),
            "--markdown".to_owned(),
            dir.join("compare.md").display().to_string(),
        ];
        a.extend(extra.map(String::from));
        let o = run_cmd(&a);
        seen.output("bench compare", &o);
    }
    seen.dir(&dir);
    seen.assert_masked("failed/turns.jsonl");
    seen.assert_masked("failed-turns.csv");
    seen.assert_masked("bench report --format csv");
    seen.assert_masked("bench report --format html");
    seen.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bench sweep` against the echoing server: its files, its points' run directories and what
/// it printed.
#[test]
fn a_sweep_never_shows_a_secret() {
    let _g = crate::serial();
    let dir = tempdir("secrets-sweep");
    let echo = echo_server();
    let mut seen = Seen::default();
    let mut args = vec![
        "sweep".to_owned(),
        "--base-url".to_owned(),
        echo,
        "--sweep-dir".to_owned(),
        dir.join("sweep").display().to_string(),
        "--no-metrics".to_owned(),
    ];
    args.extend(
        workload_args()
            .into_iter()
            .filter(|a| a != "-c" && a != "1"),
    );
    args.extend(["-c".to_owned(), "1,2".to_owned()]);
    args.extend(header_args());
    let o = run_cmd(&args);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    seen.output("bench sweep", &o);
    seen.dir(&dir);
    seen.assert_masked("turns.jsonl");
    seen.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A journeys file with a `{{env.NAME}}` header, an `{{env.NAME}}` path and a literal secret
/// header, every step answered 401 with the headers echoed.
fn journeys_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("journeys.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[defaults]
headers = {{ "X-Journey-Token" = "{{{{env.JOURNEY_TOKEN}}}}", "X-Auth-Literal" = "{TOML_LITERAL}" }}

[[journey]]
name = "guarded"
description = "its setup is refused"
setup = [{{ method = "GET", path = "/v1/items?k={{{{env.JOURNEY_PATH}}}}" }}]
measure = [{{ method = "GET", path = "/v1/models" }}]

[[journey]]
name = "always_refused"
description = "every operation is refused"
measure = [{{ method = "POST", path = "/v1/things/{{{{env.JOURNEY_PATH}}}}", json = {{ a = 1 }} }}]
"#
        ),
    )
    .unwrap();
    path
}

/// `bench journeys` against the echoing server: the report (console, JSON, markdown, the
/// `--output` file) and what it printed.
#[test]
fn journeys_never_show_a_secret() {
    let dir = tempdir("secrets-journeys");
    let file = journeys_file(&dir);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let echo = echo_server();
    let mut seen = Seen::default();
    for extra in [None, Some("--json")] {
        let mut args = vec![
            "journeys".to_owned(),
            "--file".to_owned(),
            file.display().to_string(),
            "--base-url".to_owned(),
            echo.clone(),
            "--iterations".to_owned(),
            "2".to_owned(),
            "--warmup".to_owned(),
            "0".to_owned(),
            "--output".to_owned(),
            out.join("report.json").display().to_string(),
            "--markdown".to_owned(),
            out.join("pr.md").display().to_string(),
        ];
        args.extend(header_args());
        args.extend(extra.map(String::from));
        let o = run_cmd(&args);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        seen.output("bench journeys", &o);
    }
    seen.dir(&out);
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let setup = report["journeys"]["guarded"]["runs"][0]["setup_failure"]
        .as_str()
        .unwrap();
    assert!(
        setup.starts_with("HTTP 401: GET /v1/items?k=***") && setup.matches("***").count() > 1,
        "the path's and the echoed values show as ***: {setup}"
    );
    seen.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `bench probe` against the echoing server, chat and Messages (whose `x-api-key` comes from
/// `ANTHROPIC_API_KEY`), as text and JSON: one error line each.
#[test]
fn probe_never_shows_a_secret() {
    let echo = echo_server();
    let mut seen = Seen::default();
    for endpoint in ["chat", "messages"] {
        for json in [false, true] {
            let mut args = vec![
                "probe".to_owned(),
                "--base-url".to_owned(),
                echo.clone(),
                "--endpoint".to_owned(),
                endpoint.to_owned(),
            ];
            args.extend(header_args());
            if json {
                args.push("--json".into());
            }
            let o = run_cmd(&args);
            assert_eq!(
                o.status.code(),
                Some(1),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
            seen.output(&format!("bench probe --endpoint {endpoint}"), &o);
        }
    }
    seen.assert_masked("bench probe --endpoint chat: stderr");
    seen.assert_masked("bench probe --endpoint messages: stderr");
    seen.assert_clean();
    // A header given as `NAME: VALUE` is refused without echoing the value.
    let o = run_cmd(&[
        "probe".into(),
        "--header".into(),
        format!("Authorization: {AUTH}"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("expected NAME=VALUE"), "{err}");
    assert!(!err.contains(MARK), "{err}");
}

/// One HTTP/1.1 request with `Connection: close`; the status and body (an SSE stream is read
/// until the server closes it, after the terminal event).
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = Vec::new();
    s.read_to_end(&mut text).unwrap();
    let text = String::from_utf8_lossy(&text).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|x| x.1)
        .unwrap_or("")
        .to_owned();
    (status, body)
}

/// A `bench serve` child, killed when dropped (a failing test does not leave it running).
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `GET /api/runs/ID` until the run ended.
fn until_ended(addr: &str, id: &str, seen: &mut Seen) -> Value {
    let t0 = Instant::now();
    loop {
        let (status, body) = http(addr, "GET", &format!("/api/runs/{id}"), "");
        seen.text(format!("GET /api/runs/{id}"), body.clone());
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        if !matches!(v["status"].as_str(), Some("starting" | "running")) {
            return v;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "never ended: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `bench serve`: a replay and a journeys suite started through the API with secret headers
/// (and a bad spec holding one); every response, each run's event stream, its result, the
/// runs directory and what the server printed.
#[test]
fn the_control_plane_never_shows_a_secret() {
    let _g = crate::serial();
    let dir = tempdir("secrets-serve");
    let runs = dir.join("runs");
    let file = journeys_file(&dir);
    let echo = echo_server();
    let mut seen = Seen::default();
    let mut child = Serve(
        cmd()
            .args(["serve", "--bind", "127.0.0.1:0", "--runs-dir"])
            .arg(&runs)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    seen.text("bench serve: stderr", line.clone());
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let headers = serde_json::json!({
        "Authorization": AUTH, "Cookie": COOKIE, "X-Api-Key": X_API_KEY, "X-Custom": CUSTOM,
        "X-Team": "infra-team",
    });
    let replay = serde_json::json!({
        "plan": {"dataset": {"random": {"turns": 2, "output_len": 8}}, "num_sessions": 2,
                 "tokenizer": "chars"},
        "target": {"url": {"base_url": echo}},
        "load": {"closed": {"concurrency": 1}},
        "scrape": "off",
        "headers": headers,
        "secret_headers": ["X-Custom"],
    });
    let journeys = serde_json::json!({
        "kind": "journeys", "file": file, "base_url": echo, "iterations": 2, "warmup": 0,
        "headers": headers, "secret_headers": ["X-Custom"],
    });
    // A spec the server cannot parse, holding a secret where a number goes: the 400 names the
    // field without the value.
    let bad = serde_json::json!({
        "plan": {"num_sessions": CUSTOM}, "headers": headers, "secret_headers": ["X-Custom"],
    });
    let (status, body) = http(&addr, "POST", "/api/runs", &bad.to_string());
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("num_sessions") && body.contains("***"),
        "{body}"
    );
    seen.text("POST /api/runs (bad spec)", body);
    let mut ids = Vec::new();
    for spec in [&replay, &journeys] {
        let (status, body) = http(&addr, "POST", "/api/runs", &spec.to_string());
        assert_eq!(status, 201, "{body}");
        seen.text("POST /api/runs", body.clone());
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        until_ended(&addr, &id, &mut seen);
        for route in ["", "/events", "/result"] {
            let (_, body) = http(&addr, "GET", &format!("/api/runs/{id}{route}"), "");
            seen.text(format!("GET /api/runs/{id}{route}"), body);
        }
        ids.push(id);
    }
    let (_, body) = http(&addr, "GET", "/api/runs", "");
    seen.text("GET /api/runs", body);
    let (_, body) = http(&addr, "GET", "/metrics", "");
    seen.text("GET /metrics", body);
    signal(&child.0, "-TERM");
    assert!(child.0.wait().unwrap().success());
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    seen.text("bench serve: stderr", rest);
    seen.dir(&runs);
    // The replay's records and the journeys' event stream show where the values were.
    seen.assert_masked(&format!("{}/turns.jsonl", ids[0]));
    seen.assert_masked(&format!("GET /api/runs/{}/events", ids[1]));
    seen.assert_masked(&format!("{}/report.json", ids[1]));
    seen.assert_clean();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A password in `--base-url` (`user:password@`).
const URL_PASS: &str = "pw-SECRET-url-2468";

#[test]
fn a_password_in_the_base_url_is_sent_and_never_shown() {
    let (sim, url) = spawn_sim(&["--instant"]);
    let with_pass = url.replacen("http://", &format!("http://alice:{URL_PASS}@"), 1);
    let tmp = tempdir("secrets-url");
    let dir = tmp.join("run");
    let mut args = vec!["run".to_owned(), "--base-url".into(), with_pass.clone()];
    args.extend(workload_args());
    args.extend(["--run-dir".into(), dir.display().to_string()]);
    let o = run_cmd(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut seen = Seen::default();
    seen.output("bench run", &o);
    seen.dir(&dir);
    // A server that cannot be reached: the error names the URL, not its password.
    let o = run_cmd(&[
        "probe".into(),
        "--base-url".into(),
        "http://alice:pw-SECRET-url-2468@127.0.0.1:1".into(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    seen.output("bench probe", &o);
    // Every command's --print-spec shows the URL with its password masked.
    for (command, extra) in [("run", None), ("sweep", Some("-c1,2")), ("journeys", None)] {
        let mut args = vec![command.into(), "--base-url".into(), with_pass.clone()];
        args.extend(extra.map(String::from));
        args.push("--print-spec".into());
        let o = run_cmd(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let spec = String::from_utf8_lossy(&o.stdout);
        assert!(
            spec.contains("alice:***@"),
            "bench {command} --print-spec:\n{spec}"
        );
        seen.output(&format!("bench {command} --print-spec"), &o);
    }
    for (what, text) in &seen.0 {
        assert!(
            !text.contains(URL_PASS),
            "{what} holds the password:\n{text}"
        );
    }
    // run.json keeps the URL, the password masked.
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let recorded = run_json["spec"]["target"]["url"]["base_url"]
        .as_str()
        .unwrap();
    assert!(recorded.starts_with("http://alice:***@"), "{recorded}");
    // Resuming needs the credentials again, as a header (the masked password is never sent);
    // given, the resume goes on to its next check (this run finished).
    let resume = |extra: &[&str]| {
        let mut args = vec!["run", "--resume", dir.to_str().unwrap()];
        args.extend(extra);
        run_cmd(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    };
    let o = resume(&[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("base URL carried a password"), "{err}");
    assert!(err.contains("Authorization=Basic"), "{err}");
    let o = resume(&["--header", "Authorization=Basic YWxpY2U6cHc="]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("already finished"), "{err}");
    stop_sim(sim);
}

#[test]
fn a_panic_message_is_scrubbed() {
    let o = cmd()
        .env("BENCH_TEST_PANIC", format!("boom near {ENV_KEY}"))
        .env_remove("RUST_BACKTRACE")
        .args(["plan"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(101));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("internal error") && err.contains("boom near ***"),
        "{err}"
    );
    assert!(!err.contains(MARK), "{err}");
}
