//! `trace_native`: the native trace loader (`bench_workload::load`) on arbitrary bytes. Byte 0
//! picks how they are read (see `MODES`; bit 3: skip invalid records; bit 4: a 256-byte line
//! cap); the rest is the file.
//! Never panics (errors are fine), and a session the loader hands on passes `check`.
#![no_main]

use std::io::Cursor;
use std::path::Path;

use bench_fuzz::{scratch_dir, write_file, zstd};
use bench_workload::format::TraceSession;
use bench_workload::load::{LoadOptions, LoadReport, for_each_session, read_sessions};
use libfuzzer_sys::fuzz_target;

/// Byte 0 % 8: the file name the bytes are read under (the loader goes by it), whether the
/// target zstd-compresses them first, whether they are written into a dataset directory.
const MODES: [(&str, bool, bool); 8] = [
    ("trace.jsonl", false, false),
    ("trace.json", false, false),
    ("trace.jsonl.zst", true, false),
    ("trace.jsonl.zst", false, false),
    ("trace.jsonl", false, true),
    ("trace.json", false, true),
    ("trace.jsonl.zst", true, true),
    // A dataset directory whose manifest.json holds the bytes (and one valid session file).
    ("manifest.json", false, true),
];

const ONE_SESSION: &[u8] = br#"{"session_id":"s","turns":[{"index":0,"input_delta":[{"role":"user","content":"hi"}],"assistant_text":"yo"}]}"#;

fn sink(s: TraceSession) -> Result<(), bench_workload::PlanError> {
    assert!(s.check().is_ok(), "the loader handed on an invalid session");
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, payload)) = data.split_first() else {
        return;
    };
    let (name, compress, in_dir) = MODES[usize::from(mode % 8)];
    let mut opts = LoadOptions {
        skip_invalid: mode & 8 != 0,
        ..LoadOptions::default()
    };
    if mode & 16 != 0 {
        // A small line cap, so that the cap is hit.
        opts.max_line_bytes = 256;
    }
    let bytes = if compress {
        zstd(payload)
    } else {
        payload.to_vec()
    };
    if !in_dir {
        let mut report = LoadReport::default();
        let _ = read_sessions(
            Path::new(name),
            Cursor::new(bytes),
            opts,
            &mut report,
            &mut sink,
        );
        return;
    }
    let dir = scratch_dir("trace_native").join("dataset");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("cannot create the dataset directory");
    write_file(&dir, name, &bytes);
    if name == "manifest.json" {
        write_file(&dir, "sessions.jsonl", ONE_SESSION);
    }
    let _ = for_each_session(&dir, opts, &mut sink);
});
