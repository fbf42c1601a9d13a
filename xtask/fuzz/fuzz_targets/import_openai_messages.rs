//! `import_openai_messages`: the OpenAI-messages importer (`bench_workload::import`,
//! `ImportFormat::OpenaiMessages`) on arbitrary bytes written as a file named one of
//! `messages.json`, `messages.jsonl`, `local.traj.json`. See `bench_fuzz::import_target` for the
//! header byte and the invariants.
#![no_main]

use bench_workload::import::ImportFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bench_fuzz::import_target(
        ImportFormat::OpenaiMessages,
        &["messages.json", "messages.jsonl", "local.traj.json"],
        data,
    );
});
