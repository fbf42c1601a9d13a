//! `report_load`: `bench_run::report::load` (what `bench report` reads) on a run directory
//! unpacked from arbitrary bytes (see `bench_fuzz::write_rundir`), then every rendering of the
//! report (text, markdown, JSON, CSV, HTML). Never panics (errors are fine).
#![no_main]

use bench_fuzz::{scratch_dir, write_rundir};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = scratch_dir("report_load").join("run");
    std::fs::create_dir_all(&dir).expect("cannot create the run directory");
    write_rundir(&dir, data);
    let Ok(report) = bench_run::report::load(&dir) else {
        return;
    };
    let _ = report.result.console();
    let _ = report.result.markdown(&report.title);
    let _ = serde_json::to_vec_pretty(&report.result);
    let _ = bench_report::export::turns_csv(&report.turns);
    let _ = bench_report::html::html(&report);
});
