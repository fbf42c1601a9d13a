//! `chat_chunk`: the chat-chunk fast path (`crates/bench-transport/src/fastchunk.rs`) against
//! serde. The input is one chunk's JSON text. Whenever the fast path takes a chunk, serde must
//! accept it too and read the same fields (choices present, reasoning/answer output, choice 0's
//! content, reasoning and finish reason, usage, error); the fast path declining is fine. An
//! input with a newline is also read as two chunks of one stream: after the first, the second
//! must read exactly as it does alone (the memo of what a stream's chunks share changes nothing).
#![no_main]

use bench_transport::fuzzing::{chat_chunk_fast, chat_chunk_fast_after, chat_chunk_serde};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some((first, second)) = text.split_once('\n') {
        assert_eq!(
            chat_chunk_fast_after(first, second),
            chat_chunk_fast(second),
            "after {first:?}, the fast path reads {second:?} unlike alone"
        );
    }
    let Some(fast) = chat_chunk_fast(text) else {
        return;
    };
    match chat_chunk_serde(text) {
        Ok(slow) => assert_eq!(fast, slow, "the fast path reads {text:?} unlike serde"),
        Err(e) => panic!("the fast path took {text:?}, which serde rejects: {e}"),
    }
});
