//! `import_sharegpt`: the ShareGPT importer (`bench_workload::import`, `ImportFormat::Sharegpt`) on
//! arbitrary bytes written as a file named one of `conversations.json`, `conversations.jsonl`. See
//! `bench_fuzz::import_target` for the header byte and the invariants.
#![no_main]

use bench_workload::import::ImportFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bench_fuzz::import_target(
        ImportFormat::Sharegpt,
        &["conversations.json", "conversations.jsonl"],
        data,
    );
});
