//! Spec files: `bench run --spec FILE`, `--print-spec`, flags over a spec, and the examples in
//! examples/specs/.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde_json::Value;

use crate::{run, run_json, serial};

fn json_file(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A quick run's flags: synthetic sessions, instant simulator.
const FLAGS: &[&str] = &[
    "--tokenizer",
    "none",
    "--dataset",
    "random",
    "--turns",
    "3",
    "--num-sessions",
    "4",
    "-c",
    "2",
    "--seed",
    "5",
    "--sim-instant",
    "--slo",
    "ttft_ms=500",
    "--temperature",
    "0.2",
    "-q",
];

#[test]
fn a_printed_spec_plays_the_same_plan_as_its_flags() {
    let _s = serial();
    let tmp = tempfile::tempdir().unwrap();
    let by_flags = tmp.path().join("flags");
    let mut args = vec!["run", "--run-dir", by_flags.to_str().unwrap()];
    args.extend(FLAGS);
    ok(&run(&args));

    let mut print = vec!["run", "--print-spec"];
    print.extend(FLAGS);
    let toml = ok(&run(&print));
    let file = tmp.path().join("s.toml");
    std::fs::write(&file, &toml).unwrap();
    let by_spec = tmp.path().join("spec");
    ok(&run(&[
        "run",
        "--spec",
        file.to_str().unwrap(),
        "--run-dir",
        by_spec.to_str().unwrap(),
        "-q",
    ]));

    let (a, b) = (
        json_file(&by_flags.join("run.json")),
        json_file(&by_spec.join("run.json")),
    );
    assert_eq!(a["plan_digest"], b["plan_digest"]);
    assert_eq!(a["config_digest"], b["config_digest"]);
    assert_eq!(a["spec"], b["spec"]);
    assert_eq!(b["spec"]["request"]["extra_body"]["temperature"], 0.2);
    let result = json_file(&by_spec.join("result.json"));
    assert_eq!(result["summary"]["turns_ok"], 12, "{result}");
}

#[test]
fn flags_beside_a_spec_override_only_what_they_name() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.toml");
    std::fs::write(
        &file,
        "warmup_sessions = 2\n[plan]\ndataset = \"sample\"\nconcurrency = 16\n\
         [load.closed]\nconcurrency = 16\nramp_up = \"5s\"\n[judge]\nslo = \"ttft_ms=100\"\n",
    )
    .unwrap();
    let spec = |extra: &[&str]| -> toml::Table {
        let mut a = vec!["run", "--spec", file.to_str().unwrap(), "--print-spec"];
        a.extend(extra);
        toml::from_str(&ok(&run(&a))).unwrap()
    };
    let s = spec(&[]);
    assert_eq!(s["load"]["closed"]["concurrency"].as_integer(), Some(16));
    assert_eq!(s["load"]["closed"]["ramp_up"].as_str(), Some("5s"));
    // A flag given at its default value still overrides the file.
    let s = spec(&["-c", "8"]);
    assert_eq!(s["load"]["closed"]["concurrency"].as_integer(), Some(8));
    assert_eq!(s["plan"]["concurrency"].as_integer(), Some(8));
    assert_eq!(s["load"]["closed"]["ramp_up"].as_str(), Some("5s"));
    assert_eq!(s["judge"]["slo"].as_str(), Some("ttft_ms=100"));
    assert_eq!(s["warmup_sessions"].as_integer(), Some(2));
    // A flag that changes the load's kind replaces the load.
    let s = spec(&["--rate", "3"]);
    assert_eq!(s["load"]["open"]["arrival"]["rate"].as_float(), Some(3.0));
    assert!(s["load"].get("closed").is_none());
    // Judge flags replace their own keys only.
    let s = spec(&["--steady-frac", "0.5"]);
    assert_eq!(s["judge"]["slo"].as_str(), Some("ttft_ms=100"));
    assert_eq!(s["judge"]["steady_frac"].as_float(), Some(0.5));
}

#[test]
fn a_spec_over_a_server_keeps_it_and_its_load() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.json");
    std::fs::write(
        &file,
        r#"{"target": {"url": {"base_url": "http://127.0.0.1:9", "ready_timeout": "2m"}},
            "load": {"open": {"arrival": {"rate": 2.0, "process": {"gamma": {"burstiness": 0.5}}, "seed": 1}, "max_in_flight": 32}}}"#,
    )
    .unwrap();
    let print = |extra: &[&str]| -> toml::Table {
        let mut a = vec!["run", "--spec", file.to_str().unwrap(), "--print-spec"];
        a.extend(extra);
        toml::from_str(&ok(&run(&a))).unwrap()
    };
    let s = print(&["--ready-timeout", "5s", "-c", "4", "--insecure"]);
    let url = &s["target"]["url"];
    assert_eq!(url["base_url"].as_str(), Some("http://127.0.0.1:9"));
    assert_eq!(url["ready_timeout"].as_str(), Some("5s"));
    assert_eq!(url["tls"]["insecure"].as_bool(), Some(true));
    let open = &s["load"]["open"];
    assert_eq!(open["max_in_flight"].as_integer(), Some(4));
    assert_eq!(open["arrival"]["rate"].as_float(), Some(2.0));
    assert_eq!(
        open["arrival"]["process"]["gamma"]["burstiness"].as_float(),
        Some(0.5)
    );
    let s = print(&["--burstiness", "2"]);
    assert_eq!(
        s["load"]["open"]["arrival"]["process"]["gamma"]["burstiness"].as_float(),
        Some(2.0)
    );
}

#[test]
fn a_bad_spec_is_one_line_naming_the_file_and_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, text, want) in [
        (
            "a.toml",
            "[load.closed]\nconcurency = 4\n",
            "load.closed: line 2: unexpected keys in table: concurency",
        ),
        (
            "b.toml",
            "[limits]\nturn_timeout = \"soon\"\n",
            "limits.turn_timeout",
        ),
        (
            "c.json",
            r#"{"judge": {"steady_frac": "high"}}"#,
            "judge.steady_frac",
        ),
        ("d.toml", "[plan\n", "line 1"),
    ] {
        let file = tmp.path().join(name);
        std::fs::write(&file, text).unwrap();
        let out = run(&["run", "--spec", file.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(name) && err.contains(want), "{name}: {err}");
    }
    let out = run(&["run", "--spec", "/nonexistent/s.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/s.toml"));
}

#[test]
fn every_run_flag_is_a_spec_key_or_said_not_to_be() {
    let cmd = bench_cli::Cli::command();
    let run = cmd.find_subcommand("run").unwrap();
    let keys: Vec<&str> = bench_cli::SPEC_KEYS.iter().map(|(id, _)| *id).collect();
    for a in run.get_arguments() {
        let id = a.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        assert!(
            keys.contains(&id) ^ bench_cli::NOT_IN_SPEC.contains(&id),
            "--{id}: in neither SPEC_KEYS nor NOT_IN_SPEC, or in both"
        );
    }
    for k in keys.iter().chain(bench_cli::NOT_IN_SPEC) {
        assert!(
            run.get_arguments().any(|a| a.get_id() == k),
            "{k} is not a bench run flag"
        );
    }
}

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/specs");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml" || e == "json"))
        .collect();
    v.sort();
    assert!(v.len() >= 4, "{v:?}");
    v
}

/// Each example is played as written, cut short (a few sessions of a few turns, no waits),
/// against the embedded simulator or, when it names a server, a `bench sim`.
#[test]
fn every_example_spec_runs() {
    let _s = serial();
    let (sim, url) = crate::spawn_sim(&["--instant"]);
    let tmp = tempfile::tempdir().unwrap();
    for (i, file) in examples().iter().enumerate() {
        let text = std::fs::read_to_string(file).unwrap();
        let dir = tmp.path().join(format!("r{i}"));
        let name = file.file_name().unwrap().to_str().unwrap();
        if name.starts_with("journeys-") {
            let out = run(&[
                "journeys",
                "--spec",
                file.to_str().unwrap(),
                "--iterations",
                "2",
                "--json",
                "--run-dir",
                dir.to_str().unwrap(),
            ]);
            let report: Value = serde_json::from_str(&ok(&out)).unwrap();
            assert!(
                report.to_string().contains("chat_completion"),
                "{name}: {report}"
            );
            continue;
        }
        if name.starts_with("sweep") {
            // A sweep spec is refused by bench run, and played by bench sweep as written.
            let out = run(&["run", "--spec", file.to_str().unwrap()]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            assert!(
                stderr.contains("play it with bench sweep --spec"),
                "{stderr}"
            );
            let out = run(&[
                "sweep",
                "--spec",
                file.to_str().unwrap(),
                "--sweep-dir",
                dir.to_str().unwrap(),
                "--num-sessions",
                "2",
                "--max-turns",
                "2",
                "--sim-instant",
                "--duration",
                "2s",
                "-q",
                "--json",
            ]);
            let sweep: Value = serde_json::from_str(&ok(&out)).unwrap();
            let levels = std::fs::read_to_string(file).unwrap();
            let n = sweep["points"].as_array().map_or(0, Vec::len);
            assert!(n >= 2, "{name}: {sweep}");
            assert!(levels.contains("levels = [1, 4"), "{name}");
            assert_eq!(sweep["points"][1]["level"], 4.0, "{name}: {sweep}");
            assert_eq!(
                sweep["config"]["spec"]["limits"]["duration"], "2s",
                "{sweep}"
            );
            continue;
        }
        let mut args = vec![
            "run",
            "--spec",
            file.to_str().unwrap(),
            "--run-dir",
            dir.to_str().unwrap(),
            "--num-sessions",
            "3",
            "--max-turns",
            "3",
            "--no-gaps",
            "--json",
            "-q",
            "--warmup-sessions",
            "0",
            "--duration",
            "2s",
            "--ready-timeout",
            "5s",
        ];
        if text.contains("[target.url]") {
            args.extend(["--base-url", url.as_str()]);
        } else {
            args.push("--sim-instant");
        }
        if text.contains("[load.open") {
            args.extend(["--rate", "50"]);
        } else {
            args.extend(["--ramp-up", "1ms"]);
        }
        let result = run_json(&args);
        let turns = &result["summary"];
        assert!(
            turns["turns_ok"].as_u64().unwrap() >= 3,
            "{}: {result}",
            file.display()
        );
        assert_eq!(turns["turns_failed"], 0, "{}: {result}", file.display());
        let rj = json_file(&dir.join("run.json"));
        assert_eq!(rj["spec"]["limits"]["duration"], "2s", "{}", file.display());
    }
    // A sweep takes the same document: each point is the spec at its level.
    let quick = examples()
        .into_iter()
        .find(|p| p.ends_with("quickstart.toml"))
        .unwrap();
    let sweep_dir = tmp.path().join("sweep");
    let out = run(&[
        "sweep",
        "--spec",
        quick.to_str().unwrap(),
        "-c",
        "1,2",
        "--num-sessions",
        "2",
        "--max-turns",
        "2",
        "--sim-instant",
        "--sweep-dir",
        sweep_dir.to_str().unwrap(),
        "-q",
        "--json",
    ]);
    let sweep: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(sweep["points"].as_array().map(Vec::len), Some(2), "{sweep}");
    crate::stop_sim(sim);
}

/// `bench sweep --print-spec` writes a sweep spec that `bench sweep --spec` plays as the
/// flags would: the same levels, search and shared run.
#[test]
fn a_printed_sweep_spec_is_the_sweep_of_its_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let flags = [
        "--rates",
        "0.5,1,2",
        "--arrival",
        "gamma",
        "--burstiness",
        "0.5",
        "--max-concurrency",
        "12",
        "--find-max",
        "--slo",
        "ttft_ms=300",
        "--goodput-target",
        "0.8",
    ];
    let mut a = vec!["sweep", "--print-spec"];
    a.extend(flags);
    let text = ok(&run(&a));
    assert!(
        text.contains("[sweep]") && text.contains("axis = \"rate\""),
        "{text}"
    );
    let file = tmp.path().join("s.toml");
    std::fs::write(&file, &text).unwrap();
    let again = ok(&run(&[
        "sweep",
        "--print-spec",
        "--spec",
        file.to_str().unwrap(),
    ]));
    assert_eq!(again, text);
    // As JSON: what bench serve's POST /api/runs takes.
    let mut a = vec!["sweep", "--print-spec", "--json"];
    a.extend(flags);
    let v: Value = serde_json::from_str(&ok(&run(&a))).unwrap();
    assert_eq!(v["sweep"]["levels"], serde_json::json!([0.5, 1.0, 2.0]));
    assert_eq!(v["sweep"]["find_max"]["goodput_target"], 0.8);
    assert_eq!(v["load"]["open"]["max_in_flight"], 12);
    assert_eq!(
        v["load"]["open"]["arrival"]["process"]["gamma"]["burstiness"], 0.5,
        "{v}"
    );
}
