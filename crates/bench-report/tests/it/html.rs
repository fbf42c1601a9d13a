//! The HTML reports (`bench_report::html`): every chart is there and draws marks when there is
//! data (an empty note when not), data strings are escaped, nothing is fetched from outside,
//! and the size stays bounded at 100,000 turns.
//!
//! With `BENCH_HTML_DEV_DIR=DIR` set, the reports built here are also written to `DIR`
//! (`dev.html`, `dev-empty.html`, `dev-100k.html`, `dev-sweep.html`) for looking at them in a browser.

use std::time::Instant;

use bench_report::html::{html, sweep_html};
use bench_report::sweep::{FindMax, SweepAxis, SweepPoint, SweepStop, SweepSummary};
use bench_report::{
    ReportData, RunInfo, ServerPoint, SessionRecord, SessionStatus, Slo, TurnRecord, Verdict,
    compute,
};

use crate::common::{failed, session, turn};

/// Every chart of a run's report.
const RUN_CHARTS: [&str; 9] = [
    "ttft_cdf",
    "e2e_cdf",
    "ttft_by_turn",
    "ttft_vs_input",
    "throughput_over_time",
    "kv_usage_over_time",
    "queue_depth_over_time",
    "prefix_hit_over_time",
    "session_timeline",
];
const SERVER_CHARTS: [&str; 3] = [
    "kv_usage_over_time",
    "queue_depth_over_time",
    "prefix_hit_over_time",
];

/// `sessions` plays of `turns` turns each: session `i` starts at `i × stagger` s; turn `t` has
/// `500 + 300 t` input tokens, a TTFT growing with it (first turns +200 ms, cold), 64 output
/// tokens over 640 ms and a tool wait of 0.5–1.4 s after it.
fn records(sessions: usize, turns: u32, stagger: f64) -> (Vec<TurnRecord>, Vec<SessionRecord>) {
    let mut out = Vec::with_capacity(sessions * turns as usize);
    let mut plays = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let id = format!("s{i:05}");
        let mut t_s = i as f64 * stagger;
        let start = t_s;
        for t in 0..turns {
            let input = 500 + 300 * u64::from(t);
            let jitter = ((i * 31 + t as usize * 17) % 97) as f64;
            let ttft = 40.0 + input as f64 * 0.02 + if t == 0 { 200.0 } else { 0.0 } + jitter;
            let e2e = ttft + 640.0;
            let mut r = turn(&id, t, t_s);
            r.input_tokens = Some(input);
            r.output_tokens = Some(64);
            r.ttft_ms = Some(ttft);
            r.e2e_ms = Some(e2e);
            r.tpot_ms = Some(10.0);
            r.chunk_gaps_ms = vec![10.0; 3];
            r.first_token_s = Some(t_s + ttft / 1000.0);
            r.end_s = t_s + e2e / 1000.0;
            t_s = r.end_s + 0.5 + ((i * 7 + t as usize * 3) % 10) as f64 / 10.0;
            out.push(r);
        }
        plays.push(SessionRecord {
            turns_played: turns,
            turns_planned: turns,
            output_tokens: 64 * u64::from(turns),
            start_s: start,
            end_s: t_s,
            ..session(&id, SessionStatus::Completed)
        });
    }
    (out, plays)
}

/// One scrape a second over `[0, secs)`, every figure reported.
fn scrapes(secs: usize) -> Vec<ServerPoint> {
    (0..secs)
        .map(|s| {
            let x = s as f64;
            ServerPoint {
                t_s: x,
                measured: s > 0 && s + 1 < secs,
                kv_usage: Some(0.3 + 0.2 * (x / 7.0).sin().abs()),
                waiting: Some((s % 5) as f64),
                running: Some(8.0 + (s % 3) as f64),
                prefix_hit_rate: Some(0.6 + 0.3 * (x / 5.0).cos().abs()),
                gpu_power_w: None,
            }
        })
        .collect()
}

fn data(
    turns: Vec<TurnRecord>,
    sessions: Vec<SessionRecord>,
    server: Vec<ServerPoint>,
) -> ReportData {
    let config = serde_json::json!({
        "base_url": "http://127.0.0.1:8000/v1",
        "api_key": "***",
        "note": "</pre><script>alert('config')</script>",
    });
    let info = RunInfo {
        concurrency: 10,
        judge: bench_report::Judge::with_slo(Some("ttft_ms=500".parse::<Slo>().expect("an SLO"))),
        config: config.clone(),
        ..RunInfo::default()
    };
    // As the run-directory loader does: superseded records are not part of the result.
    let kept: Vec<TurnRecord> = turns.iter().filter(|t| !t.superseded).cloned().collect();
    ReportData {
        title: "run <b>one</b>".to_owned(),
        result: compute(&kept, &sessions, &info),
        turns,
        sessions,
        server,
        config,
        recomputed: None,
        notes: Vec::new(),
    }
}

/// A small run: 12 plays of 5 turns, one failed turn, one warmup and one superseded record,
/// a hostile session id, 40 scrapes.
fn small() -> ReportData {
    let (mut turns, mut sessions) = records(12, 5, 1.5);
    turns[7].session_id = "<script>x</script>".to_owned();
    let after = turns[3 * 5 + 4].end_s + 1.0;
    let mut f = failed("s00003", 5, after, Some("http_status"));
    f.error = Some("HTTP 500: <img src=x onerror=alert(1)>".to_owned());
    turns.push(f);
    let mut w = turn("warm", 0, 0.0);
    w.warmup = true;
    w.ttft_ms = Some(99_999.0);
    turns.push(w);
    let mut sup = turn("s00004", 0, 0.0);
    sup.superseded = true;
    sup.ttft_ms = Some(88_888.0);
    turns.push(sup);
    sessions.push(SessionRecord {
        session_id: "<img src=x onerror=alert(1)>".to_owned(),
        ..session("x", SessionStatus::Failed)
    });
    data(turns, sessions, scrapes(40))
}

/// The `<figure>` of `name` (panics when it is not there exactly once).
fn figure<'a>(page: &'a str, name: &str) -> &'a str {
    let open = format!("<figure class=\"chart\" data-chart=\"{name}\"");
    assert_eq!(page.matches(&open).count(), 1, "figure {name} exactly once");
    let at = page.find(&open).expect("the figure");
    let end = page[at..].find("</figure>").expect("its end") + at;
    &page[at..end]
}

/// The data marks of a figure's chart (empty when it has none).
fn marks(fig: &str) -> &str {
    let Some(at) = fig.find("<g class=\"marks\">") else {
        return "";
    };
    let end = fig[at..].find("</g>").expect("the end of the marks") + at;
    &fig[at..end]
}

fn count(s: &str, tag: &str) -> usize {
    s.matches(&format!("<{tag} ")).count()
}

/// Elements that draw something: rect, circle, polyline, line, path, polygon.
fn drawing(s: &str) -> usize {
    ["rect", "circle", "polyline", "line", "path", "polygon"]
        .iter()
        .map(|t| count(s, t))
        .sum()
}

/// Every tag of the page (the text between `<` and `>`): data is escaped, so these are the
/// page's own.
fn tags(page: &str) -> Vec<&str> {
    page.split('<')
        .skip(1)
        .filter_map(|t| t.split_once('>').map(|(tag, _)| tag))
        .collect()
}

/// The page without its configuration `<pre>`.
fn outside_config(page: &str) -> String {
    let at = page.find("<pre class=\"config\">").expect("the config pre");
    let end = page[at..].find("</pre>").expect("its end") + at;
    format!("{}{}", &page[..at], &page[end..])
}

fn dev_write(name: &str, page: &str) {
    if let Some(dir) = std::env::var_os("BENCH_HTML_DEV_DIR") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("the dev dir");
        std::fs::write(dir.join(name), page).expect("write the dev page");
    }
}

#[test]
fn html_every_chart_is_there_and_draws_its_data() {
    let d = small();
    let page = html(&d);
    dev_write("dev.html", &page);
    assert!(page.starts_with("<!doctype html>"), "{}", &page[..40]);
    assert!(page.trim_end().ends_with("</html>"));
    for name in RUN_CHARTS {
        let f = figure(&page, name);
        assert!(f.contains("<svg "), "{name} has an svg");
        assert!(!f.contains("class=\"empty\""), "{name} is not empty");
        assert!(f.contains("<figcaption>"), "{name} has a caption");
        assert!(drawing(marks(f)) > 0, "{name} draws marks");
    }
    // 12 plays × 5 turns: 60 ok measured turns, the failed, warmup and superseded records aside.
    let ok = 60;
    let cdf = marks(figure(&page, "ttft_cdf"));
    assert_eq!(count(cdf, "polyline"), 1);
    assert_eq!(count(cdf, "circle"), 3, "p50, p90, p99");
    let scatter = marks(figure(&page, "ttft_vs_input"));
    assert_eq!(count(scatter, "circle"), ok, "one dot per ok turn");
    let by_turn = marks(figure(&page, "ttft_by_turn"));
    assert_eq!(count(by_turn, "polyline"), 2, "p50 and p90");
    assert!(
        count(by_turn, "circle") >= 5 + 2,
        "a dot per index plus turn 0's marks"
    );
    let tput = marks(figure(&page, "throughput_over_time"));
    assert_eq!(
        count(tput, "polyline"),
        2,
        "output tok/s and active sessions"
    );
    let queue = marks(figure(&page, "queue_depth_over_time"));
    assert_eq!(count(queue, "polyline"), 2, "waiting and running");
    for name in ["kv_usage_over_time", "prefix_hit_over_time"] {
        assert_eq!(count(marks(figure(&page, name)), "polyline"), 1, "{name}");
    }
    // Timeline: 13 plays (one turn moved to the hostile id's play, s00003 has a sixth, failed
    // turn), a bar per turn and a tool wait between consecutive turns of a play.
    let tl = marks(figure(&page, "session_timeline"));
    assert_eq!(count(tl, "rect"), 61 + 48, "61 turn bars and 48 tool waits");
    assert!(tl.contains("fill=\"#C81E1E\""), "the failed turn is red");
    // Skipped records are not plotted: their TTFTs would stretch the CDF's axis.
    assert!(!page.contains("99999") && !page.contains("88888"));
    assert!(figure(&page, "ttft_cdf").contains("warmup or superseded records are skipped"));
}

#[test]
fn html_page_order_verdict_first_then_summary_sessions_charts_config() {
    let mut d = small();
    d.recomputed = Some("result.json was missing <recomputed>".to_owned());
    let page = html(&d);
    let at = |needle: &str| {
        page.find(needle)
            .unwrap_or_else(|| panic!("{needle} not in the page"))
    };
    let order = [
        at("<h1>"),
        at("class=\"note recomputed\""),
        at("<section id=\"verdict\""),
        at("<section id=\"summary\""),
        at("<section id=\"sessions\""),
        at("<section id=\"charts\""),
        at("<section id=\"config\""),
    ];
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert!(page.contains("result.json was missing &lt;recomputed&gt;"));
    let verdict = d
        .result
        .validity
        .as_ref()
        .expect("assessed")
        .verdict
        .as_str();
    assert!(page.contains(&format!("data-verdict=\"{verdict}\"")));
    for check in &d.result.validity.as_ref().expect("assessed").checks {
        assert!(
            page.contains(&format!("<td>{}</td>", check.name)),
            "{}",
            check.name
        );
    }
    // The summary names its window and shows the SLO's goodput.
    assert!(page.contains("steady window: turns sent while at least 9 of 10 sessions"));
    assert!(page.contains("goodput (share meeting the SLO)"));
    assert!(page.contains("http_status: 1"));
    // The failed turn's error, escaped, in the failures table.
    assert!(page.contains(
        "<tr><td>http_status</td><td class=\"n\">1</td><td>HTTP 500: &lt;img src=x \
         onerror=alert(1)&gt;</td></tr>"
    ));
    // The page's own title, escaped.
    assert!(page.contains("<h1>run &lt;b&gt;one&lt;/b&gt;</h1>"));
}

#[test]
fn html_escapes_data_and_fetches_nothing() {
    let page = html(&small());
    assert!(
        !page.contains("<script"),
        "no script at all, and none from the data"
    );
    assert!(!page.contains("<img"));
    assert!(!page.contains("<b>one"));
    assert!(page.contains("&lt;/pre&gt;&lt;script&gt;alert(&#39;config&#39;)"));
    for tag in tags(&page) {
        let name = tag
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        assert!(
            ![
                "script", "link", "img", "iframe", "object", "embed", "image", "use"
            ]
            .contains(&name.as_str()),
            "<{tag}>"
        );
        for attr in ["src=", "href=", "url("] {
            assert!(!tag.contains(attr), "{attr} in <{tag}>");
        }
    }
    assert!(!page.contains("@import") && !page.contains("url("));
    // URLs only inside the configuration (its base_url), never in markup.
    let rest = outside_config(&page);
    assert!(!rest.contains("http://") && !rest.contains("https://"));
    assert!(
        page.contains("http://127.0.0.1:8000/v1"),
        "the config is shown"
    );
}

#[test]
fn html_lists_the_longest_plays_with_escaped_session_ids() {
    let (mut turns, mut sessions) = records(3, 2, 1.0);
    let evil = "<script>x</script>";
    for r in turns.iter_mut().filter(|r| r.session_id == "s00001") {
        r.session_id = evil.to_owned();
        r.end_s += 5.0; // the longest play
    }
    sessions[1].session_id = evil.to_owned();
    let page = html(&data(turns, sessions, Vec::new()));
    assert!(!page.contains("<script"), "the id is never raw");
    let table = &page[page
        .find("<table class=\"plays\">")
        .expect("the plays table")..];
    let table = &table[..table.find("</table>").expect("its end")];
    let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 3, "{table}");
    assert!(
        rows[0].starts_with("<td class=\"id\">&lt;script&gt;x&lt;/script&gt;</td>"),
        "the longest play first, its id escaped: {}",
        rows[0]
    );
    assert!(
        rows[0].contains("<td class=\"n\">#2</td>"),
        "its timeline row"
    );
    assert!(rows[0].contains("<td>completed</td>"));
}

#[test]
fn html_without_scrapes_says_why_in_the_server_charts() {
    let mut d = small();
    d.server.clear();
    let page = html(&d);
    for name in SERVER_CHARTS {
        let f = figure(&page, name);
        assert!(!f.contains("<svg"), "{name} has no chart");
        assert!(
            f.contains("<p class=\"empty\">No /metrics scrapes"),
            "{name}: {f}"
        );
    }
    // A server that never reports a figure: that chart alone says so.
    d.server = scrapes(20)
        .into_iter()
        .map(|p| ServerPoint {
            kv_usage: None,
            running: None,
            ..p
        })
        .collect();
    let page = html(&d);
    let kv = figure(&page, "kv_usage_over_time");
    assert!(
        kv.contains("reported no KV-cache usage in any of the 20 scrapes"),
        "{kv}"
    );
    let queue = marks(figure(&page, "queue_depth_over_time"));
    assert_eq!(count(queue, "polyline"), 1, "waiting only");
    assert!(figure(&page, "prefix_hit_over_time").contains("<svg"));
}

#[test]
fn html_of_a_run_without_turns_has_every_figure_empty() {
    let d = data(Vec::new(), Vec::new(), Vec::new());
    let page = html(&d);
    dev_write("dev-empty.html", &page);
    for name in RUN_CHARTS {
        let f = figure(&page, name);
        assert!(f.contains("<p class=\"empty\">"), "{name}: {f}");
        assert_eq!(drawing(marks(f)), 0, "{name}");
    }
}

#[test]
fn html_survives_odd_records() {
    // Non-finite and far-away times, a zero-length turn, missing figures: still a page, quickly.
    // (The result is computed from the clean records: this is about the renderer.)
    let (turns, sessions) = records(4, 3, 1.0);
    let mut d = data(turns, sessions, scrapes(5));
    let t = &mut d.turns;
    t[0].first_token_s = Some(-1e15);
    t[1].end_s = f64::NAN;
    t[2].ttft_ms = Some(f64::INFINITY);
    t[3].sent_s = f64::NAN;
    t[4].end_s = t[4].sent_s;
    t[5].input_tokens = None;
    t[6].e2e_ms = None;
    t[7].end_s = 1e12;
    d.server[2].t_s = f64::NAN;
    d.server[3].kv_usage = Some(f64::NAN);
    let started = Instant::now();
    let page = html(&d);
    assert!(started.elapsed().as_secs() < 10);
    for name in RUN_CHARTS {
        assert!(figure(&page, name).contains("<svg "), "{name}");
    }
}

#[test]
fn html_of_100k_turns_stays_small() {
    // 2,000 plays of 50 turns, a scrape a second.
    let (turns, sessions) = records(2_000, 50, 0.2);
    assert_eq!(turns.len(), 100_000);
    let d = data(turns, sessions, scrapes(3_600));
    let started = Instant::now();
    let page = html(&d);
    let took = started.elapsed();
    dev_write("dev-100k.html", &page);
    assert!(
        page.len() < 3_000_000,
        "{} bytes for 100k turns",
        page.len()
    );
    assert!(took.as_secs() < 30, "took {took:?}");
    let scatter = marks(figure(&page, "ttft_vs_input"));
    assert_eq!(
        count(scatter, "circle"),
        5_000,
        "the scatter is thinned to 5,000"
    );
    assert!(figure(&page, "ttft_vs_input").contains("5,000 of the 100,000 turns are drawn"));
    for name in ["ttft_cdf", "e2e_cdf"] {
        let cdf = marks(figure(&page, name));
        let points: usize = cdf
            .split("points=\"")
            .skip(1)
            .map(|p| p[..p.find('"').expect("end")].split_whitespace().count())
            .sum();
        assert!(points <= 2 * 1_000, "{name}: {points} polyline points");
    }
    let tl = figure(&page, "session_timeline");
    assert!(tl.contains("Only the first 200 of the 2,000 plays by start time are shown"));
    assert!(count(marks(tl), "rect") <= 8_000);
}

fn point(level: f64, tps: f64, per_user: f64, client_bound: bool) -> SweepPoint {
    SweepPoint {
        level,
        run_dir: format!("c{level}"),
        turns_ok: 100,
        turns_failed: 0,
        output_tps: Some(tps),
        per_user_tps: Some(per_user),
        ttft_p50_ms: Some(50.0 * level),
        ttft_p99_ms: Some(90.0 * level),
        goodput: Some(0.99),
        session_goodput: None,
        verdict: if client_bound {
            Verdict::Invalid
        } else {
            Verdict::Valid
        },
        client_bound,
        failed_checks: if client_bound {
            vec!["client_saturation".to_owned()]
        } else {
            Vec::new()
        },
        later_cache_ratio: None,
        ttft_later_p50_ms: None,
    }
}

fn sweep() -> SweepSummary {
    let mut last = point(16.0, 900.0, 20.0, true);
    last.run_dir = "c16 <x>".to_owned();
    SweepSummary {
        generated_by: "bench test".to_owned(),
        axis: SweepAxis::Concurrency,
        points: vec![
            point(1.0, 100.0, 100.0, false),
            point(2.0, 190.0, 95.0, false),
            point(4.0, 360.0, 90.0, false),
            point(8.0, 640.0, 80.0, false),
            last,
        ],
        stop: SweepStop::Saturated {
            reason: "saturated at 16: <too slow>".to_owned(),
        },
        find_max: Some(FindMax {
            target: 0.95,
            best: Some(8.0),
            first_failing: Some(16.0),
            step: 1.0,
            of: bench_report::sweep::GoodputOf::Turns,
            client_bound: Vec::new(),
        }),
        retention: None,
        config: serde_json::json!({"base_url": "https://example.invalid/v1"}),
    }
}

#[test]
fn sweep_html_draws_the_pareto_and_flags_the_client_bound_point() {
    let page = sweep_html(&sweep());
    dev_write("dev-sweep.html", &page);
    for name in ["pareto", "throughput_vs_load", "ttft_vs_load"] {
        let f = figure(&page, name);
        assert!(f.contains("<svg "), "{name}");
        assert!(drawing(marks(f)) > 0, "{name} draws marks");
    }
    let pareto = figure(&page, "pareto");
    let m = marks(pareto);
    assert_eq!(
        count(m, "circle"),
        4,
        "one dot per level that was not client-bound"
    );
    assert_eq!(
        count(m, "line"),
        2,
        "a cross (two lines) for the client-bound level"
    );
    for level in ["1", "2", "4", "8", "16"] {
        assert!(
            pareto.contains(&format!(">\n{level}\n</text>"))
                || pareto.contains(&format!(">{level}</text>")),
            "level {level} labeled"
        );
    }
    assert!(
        pareto.contains("client was the bottleneck"),
        "named in the legend and caption"
    );
    // The table flags it in words.
    let row = page
        .split("<tr")
        .find(|r| r.contains("c16 &lt;x&gt;"))
        .expect("the client-bound row");
    assert!(row.contains("class=\"client-bound\""));
    assert!(row.contains("client was the bottleneck"));
    assert!(
        row.contains("href=\"c16%20%3Cx%3E/\""),
        "a relative, encoded link: {row}"
    );
    assert!(page.contains("saturated at 16: &lt;too slow&gt;"));
    assert!(page.contains("Goodput target 95.0%"));
    assert!(page.contains("the highest level that met it is 8"));
    // Links are relative; URLs only in the configuration.
    let rest = outside_config(&page);
    assert!(!rest.contains("http://") && !rest.contains("https://"));
    for tag in tags(&page) {
        assert!(!tag.starts_with("script") && !tag.starts_with("link") && !tag.contains("src="));
        if let Some((_, href)) = tag.split_once("href=\"") {
            assert!(
                !href.starts_with("http") && !href.starts_with("//") && !href.starts_with('/'),
                "a relative link: <{tag}>"
            );
        }
    }
}

/// An idle-gap sweep: 80% of later turns' tokens cached at 0 s, then 72%, 48%, 8%.
fn idle_gap_sweep() -> SweepSummary {
    let mut s = sweep();
    s.axis = SweepAxis::IdleGap;
    s.find_max = None;
    s.stop = SweepStop::Completed;
    s.points = [
        (0.0, 0.8, 40.0),
        (5.0, 0.72, 45.0),
        (15.0, 0.48, 90.0),
        (30.0, 0.08, 160.0),
    ]
    .into_iter()
    .map(|(gap, ratio, ttft)| {
        let mut p = point(gap, 500.0, 50.0, false);
        p.run_dir = format!("g{gap}s");
        p.later_cache_ratio = Some(ratio);
        p.ttft_later_p50_ms = Some(ttft);
        p
    })
    .collect();
    s.retention = bench_report::sweep::retention(&s.points);
    s
}

#[test]
fn idle_gap_sweep_html_names_the_half_life_and_draws_the_retention_curve() {
    let s = idle_gap_sweep();
    let r = s.retention.as_ref().expect("a retention curve");
    // Kept 0.9 at 5 s, 0.6 at 15 s, 0.1 at 30 s: half is gone at 15 + 0.1/0.5 × 15 = 18 s.
    let h = r.half_life_s.expect("a half-life");
    assert!((h - 18.0).abs() < 1e-9, "{h}");
    assert_eq!(r.bracket_s, Some([15.0, 30.0]));
    let page = sweep_html(&s);
    dev_write("dev-sweep-idle.html", &page);
    assert!(
        page.contains(
            "cache half-life: 18 s (idle 15 s kept 60% of the cache benefit, 30 s kept 10%)"
        ),
        "the half-life in words"
    );
    let f = figure(&page, "cache_retention");
    let m = marks(f);
    assert_eq!(count(m, "circle"), 4, "one dot per gap");
    assert!(count(m, "polyline") >= 2, "the curve and the half line");
    assert!(f.contains("half-life"), "the half-life in the legend");
    let ttft = figure(&page, "ttft_vs_load");
    assert!(ttft.contains("TTFT p50, later turns"));
    assert!(ttft.contains("idle gap before each later turn, s"));
    assert!(!page.contains("data-chart=\"pareto\""), "no load chart");
    // The table: a row per gap with its kept share.
    assert!(
        page.contains(
            "<td class=\"n\">15</td><td class=\"n\">48.0%</td><td class=\"n\">60.0%</td>"
        )
    );
    // And without cached tokens at the reference, it says why there is no half-life.
    let mut cold = s.clone();
    for p in &mut cold.points {
        p.later_cache_ratio = Some(0.0);
    }
    cold.retention = bench_report::sweep::retention(&cold.points);
    let page = sweep_html(&cold);
    assert!(page.contains(
        "no cache half-life: at the reference gap (0 s) later turns reported no cached tokens"
    ));
    assert!(figure(&page, "cache_retention").contains("<p class=\"empty\">"));
    // A cache that keeps more than half at every gap: longer than the longest.
    let mut warm = s;
    for p in &mut warm.points {
        p.later_cache_ratio = Some(0.8);
    }
    warm.retention = bench_report::sweep::retention(&warm.points);
    assert!(
        sweep_html(&warm)
            .contains("cache half-life: longer than 30 s, the longest gap tried (it kept 100%)")
    );
    let md = bench_report::sweep::markdown(&warm);
    assert!(md.contains("## Cache retention"), "{md}");
    assert!(md.contains("| 30 | 80.0% | 100% | 160.0 | 4.00× |"), "{md}");
}

#[test]
fn sweep_html_without_figures_says_why() {
    let mut s = sweep();
    for p in &mut s.points {
        p.output_tps = None;
        p.per_user_tps = None;
        p.ttft_p50_ms = None;
        p.ttft_p99_ms = None;
    }
    s.stop = SweepStop::Failed {
        reason: "every turn failed".to_owned(),
    };
    let page = sweep_html(&s);
    for name in ["pareto", "throughput_vs_load", "ttft_vs_load"] {
        assert!(
            figure(&page, name).contains("<p class=\"empty\">"),
            "{name}"
        );
    }
    assert!(page.contains("a point failed: every turn failed"));
}

/// A fork/join play: main:0, main:1, three subagents of one node each forked after main:1,
/// the join main:2 released by the slowest; plus a linear session beside it.
fn graph_records() -> (Vec<TurnRecord>, Vec<SessionRecord>) {
    use bench_report::record::NodeInfo;
    let node = |agent: &str, depth: u32, after: Vec<u32>, released_s: f64, by: Option<u32>| {
        Some(NodeInfo {
            agent: agent.to_owned(),
            depth,
            after,
            released_s,
            released_by: by,
            in_flight: 1,
        })
    };
    let mut turns = Vec::new();
    let mut t = |i: u32, sent: f64, dur: f64, n: Option<NodeInfo>| {
        let mut r = turn("g", i, sent);
        r.end_s = sent + dur;
        r.first_token_s = Some(sent + dur / 4.0);
        r.node = n;
        turns.push(r);
    };
    t(0, 0.0, 1.0, node("main", 0, vec![], 0.0, None));
    t(1, 1.5, 1.0, node("main", 0, vec![0], 1.0, Some(0)));
    t(3, 2.6, 1.0, node("a", 1, vec![1], 2.5, Some(1)));
    t(4, 2.7, 2.0, node("b", 1, vec![1], 2.5, Some(1)));
    t(5, 2.8, 1.5, node("c", 1, vec![1], 2.5, Some(1)));
    t(2, 5.0, 1.0, node("main", 0, vec![1, 3, 4, 5], 4.7, Some(4)));
    let (mut lin, mut sessions) = records(1, 3, 0.0);
    turns.append(&mut lin);
    sessions.push(SessionRecord {
        turns_played: 6,
        turns_planned: 6,
        start_s: 0.0,
        end_s: 6.0,
        ..session("g", SessionStatus::Completed)
    });
    (turns, sessions)
}

#[test]
fn html_an_agent_graph_run_draws_one_plays_branches() {
    let (turns, sessions) = graph_records();
    let page = html(&data(turns, sessions, scrapes(10)));
    dev_write("dev-graph.html", &page);
    let f = figure(&page, "graph_timeline");
    assert!(!f.contains("class=\"empty\""), "the graph timeline draws");
    let m = marks(f);
    // Four rows (main, a, b, c); six requests and, for every node after the first, a line
    // from the node that released it.
    assert!(f.contains("4: main at the top"), "{f}");
    assert_eq!(
        count(m, "path") + count(m, "polyline"),
        5,
        "one link per released node"
    );
    assert!(count(m, "rect") >= 6, "a bar per request");
    assert!(
        page.contains("<table class=\"graph-metrics\">"),
        "the graph block is reported"
    );
    assert!(page.contains("join wait"));
    // A run of chains has no graph timeline.
    let page = html(&small());
    assert!(!page.contains("data-chart=\"graph_timeline\""));
}
