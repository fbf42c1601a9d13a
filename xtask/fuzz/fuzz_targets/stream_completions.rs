//! `stream_completions`: `ChatStreamConsumer::with_endpoint(_, streamed, Endpoint::Completions)`
//! fed arbitrary bytes in arbitrary chunks, then finished. Byte 0: bit 0 says non-streamed (a whole
//! JSON body), bit 1 small size caps (`bench_fuzz::SMALL_LIMITS`); then a `bench_fuzz::Cut`. Never
//! panics (errors are fine), and reads the same however the body is cut (see
//! `bench_fuzz::stream_target`).
#![no_main]

use bench_transport::Endpoint;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| bench_fuzz::stream_target(Endpoint::Completions, data));
