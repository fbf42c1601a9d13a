//! `prometheus`: `bench_telemetry::parse`, the `/metrics` normalizer, on arbitrary text (invalid
//! UTF-8 replaced, as a scrape's body would be). Never panics (errors are fine); a snapshot
//! survives the JSON round trip `scrapes.jsonl` puts it through, and the server summary of a
//! run made of it is computed without panicking.
#![no_main]

use bench_rundir::ScrapePhase;
use bench_telemetry::{Scrape, Snapshot, parse, summarize};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(snapshot) = parse(&text) else {
        return;
    };
    let json = serde_json::to_string(&snapshot).expect("a snapshot always serializes");
    if let Err(e) = serde_json::from_str::<Snapshot>(&json) {
        panic!("a snapshot does not read back ({e}): {json}");
    }
    let scrapes: Vec<Scrape> = [
        ScrapePhase::Baseline,
        ScrapePhase::Measuring,
        ScrapePhase::Final,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, phase)| Scrape {
        t_s: i as f64,
        utc: String::new(),
        phase,
        snapshot: snapshot.clone(),
    })
    .collect();
    let _ = summarize(&scrapes);
});
