//! `journey_toml`: the declarative journeys parser (`bench_journeys::declarative::parse`) on
//! arbitrary text (invalid UTF-8 replaced). Never panics (errors are fine); a file that parses
//! lists its journeys and parameters, and parses again with every parameter given a value.
#![no_main]

use std::collections::BTreeMap;

use bench_journeys::declarative::{parse, parse_with};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(file) = parse("fuzz.toml", &text) else {
        return;
    };
    for j in file.journeys() {
        let _ = (j.name(), j.description(), j.kind(), j.concurrency_safe());
        let _ = (j.needs_mock_llm(), j.needs_runner(), j.max_iterations());
    }
    let _ = file.missing_params();
    let params: BTreeMap<String, String> = file
        .params()
        .iter()
        .map(|p| (p.name.clone(), "x".to_owned()))
        .collect();
    let _ = parse_with("fuzz.toml", &text, &params);
});
