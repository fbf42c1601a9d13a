//! Cost and energy (#33): `--cost-per-hour`/`--gpus` and `--scrape` of a DCGM exporter (`bench
//! sim --gpu-metrics` plays one), checked against hand computations from the scraped counters.

use serde_json::Value;

use crate::{random_run_args, read_jsonl, run, spawn_sim, stop_sim, tempdir};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn cost_and_energy_equal_hand_computations_from_the_scraped_counters() {
    let (sim, url) = spawn_sim(&["--gpu-metrics", "--time-scale", "0.2"]);
    let tmp = tempdir("energy");
    let dir = tmp.join("run");
    let exporter = format!("{url}/metrics");
    let down = "http://127.0.0.1:9/metrics";
    let out = run(&random_run_args(
        3,
        16,
        &dir,
        &[
            "--base-url",
            &url,
            "-c",
            "4",
            "--output-len",
            "64",
            "--metrics-interval",
            "200ms",
            "--scrape",
            &exporter,
            "--scrape",
            down,
            "--cost-per-hour",
            "2.5",
            "--gpus",
            "4",
        ],
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // The exporter that is down costs the run a warning, nothing else.
    assert!(
        stderr.contains(&format!("warning: scrape target disabled: --scrape {down}")),
        "{stderr}"
    );
    let r: Value =
        serde_json::from_slice(&std::fs::read(dir.join("result.json")).unwrap()).unwrap();

    // By hand, from the exporter's records in scrapes.jsonl: the energy counter's increase from
    // the last scrape before measuring to the last one.
    let scrapes: Vec<Value> = read_jsonl(&dir.join("scrapes.jsonl"))
        .into_iter()
        .filter(|s| s["target"] == exporter.as_str())
        .collect();
    assert!(scrapes.len() >= 3, "{} exporter scrapes", scrapes.len());
    let phase = |s: &Value| s["phase"].as_str().unwrap().to_owned();
    let start = scrapes
        .iter()
        .rev()
        .find(|s| ["baseline", "warmup"].contains(&phase(s).as_str()))
        .unwrap();
    let end = scrapes
        .iter()
        .rev()
        .find(|s| ["measuring", "draining", "final"].contains(&phase(s).as_str()))
        .unwrap();
    let energy = |s: &Value| s["snapshot"]["gpu_energy_j"].as_f64().unwrap();
    let joules = energy(end) - energy(start);
    assert!(joules > 0.0);
    let turns = r["overall"]["turns"].as_f64().unwrap();
    let sessions = r["sessions"]["completed"].as_f64().unwrap();
    assert_eq!((turns, sessions), (48.0, 16.0));
    let e = &r["energy"];
    assert_eq!(e["method"], "counter", "{e}");
    assert_eq!(e["sources"], serde_json::json!([exporter]), "{e}");
    assert!(
        close(e["joules"].as_f64().unwrap(), joules),
        "{e} vs {joules}"
    );
    assert!(
        close(e["j_per_turn"].as_f64().unwrap(), joules / turns),
        "{e}"
    );
    assert!(
        close(e["j_per_session"].as_f64().unwrap(), joules / sessions),
        "{e}"
    );
    // The simulated GPU draws 70–350 W: the energy over the measured phase says so.
    let span = r["overall"]["span_s"].as_f64().unwrap();
    let watts = joules / (end["t_s"].as_f64().unwrap() - start["t_s"].as_f64().unwrap());
    assert!((70.0..=350.0).contains(&watts), "{watts} W");

    // Cost: $2.50 per GPU-hour × 4 GPUs over the measured phase.
    let usd = 2.5 * 4.0 * span / 3600.0;
    let c = &r["cost"];
    assert!(close(c["usd"].as_f64().unwrap(), usd), "{c}");
    assert!(
        close(c["usd_per_turn"].as_f64().unwrap(), usd / turns),
        "{c}"
    );
    assert!(
        close(c["usd_per_session"].as_f64().unwrap(), usd / sessions),
        "{c}"
    );
    let output: f64 = read_jsonl(&dir.join("turns.jsonl"))
        .iter()
        .filter(|t| t["status"] == "ok" && t["warmup"] != true)
        .filter_map(|t| t["output_tokens"].as_f64())
        .sum();
    assert!(
        close(
            c["usd_per_m_output_tokens"].as_f64().unwrap(),
            usd * 1e6 / output
        ),
        "{c}"
    );
    assert!(stdout.contains("energy         "), "{stdout}");
    assert!(stdout.contains("cost           $"), "{stdout}");

    // Each target is summarized like the server's /metrics; the one that was down is not there.
    let t = r["scrape_targets"].as_array().unwrap();
    assert_eq!(t.len(), 1, "{t:?}");
    assert!(t[0]["summary"]["gpu_power_mean_w"].as_f64().unwrap() >= 70.0);

    // The report draws the power over time.
    let html = tmp.join("report.html");
    let out = run(&[
        "report",
        dir.to_str().unwrap(),
        "--format",
        "html",
        "--output",
        html.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    let at = page
        .find("data-chart=\"gpu_power_over_time\"")
        .expect("the power chart");
    let fig = &page[at..at + page[at..].find("</figure>").unwrap()];
    assert!(
        fig.contains("<g class=\"marks\">") && fig.contains("<polyline"),
        "{fig}"
    );
    stop_sim(sim);
}
