//! `http_response`: the client's own HTTP/1.1 (`bench_transport::h1`) reading one response to a
//! `GET` from arbitrary bytes in arbitrary reads (a `bench_fuzz::Cut`), then the end of the
//! stream. Never panics, never waits on memory, and reads the same status, body and
//! reusability (or the same error) however the bytes are cut into reads.
#![no_main]

use bench_transport::fuzzing::{HTTP_WAITED, http_response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(cut) = bench_fuzz::Cut::parse(data) else {
        return;
    };
    let whole = http_response(&[cut.payload]);
    let pieces = http_response(&cut.chunks());
    assert_ne!(whole.as_ref().err().map(String::as_str), Some(HTTP_WAITED));
    assert_eq!(whole, pieces, "a response read whole and in pieces differ");
});
