//! `import_swe_agent`: the SWE-agent importer (`bench_workload::import`, `ImportFormat::SweAgent`)
//! on arbitrary bytes written as a file named one of `run.traj`, `run.traj.json`. See
//! `bench_fuzz::import_target` for the header byte and the invariants.
#![no_main]

use bench_workload::import::ImportFormat;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bench_fuzz::import_target(ImportFormat::SweAgent, &["run.traj", "run.traj.json"], data);
});
