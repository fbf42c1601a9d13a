//! Deterministic filler text with an exact token count.
//!
//! Every word is one token with its leading space in common BPE tokenizers (checked against
//! the embedded Qwen3 tokenizer in tests), and the pre-tokenizer splits at each space, so `n`
//! words are `n` tokens and concatenations never merge across words. The Mooncake importer
//! builds its prefix blocks from the same words.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One-token words (with a leading space).
pub const WORDS: [&str; 64] = [
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " was", " with",
    " be", " by", " on", " not", " he", " this", " are", " or", " his", " from", " at", " which",
    " but", " have", " an", " had", " they", " you", " were", " their", " one", " all", " we",
    " can", " her", " has", " there", " been", " if", " more", " when", " will", " would", " who",
    " so", " no", " time", " people", " year", " way", " day", " man", " thing", " world", " life",
    " hand", " part", " child", " eye", " place", " work", " week",
];

/// `tokens` words chosen by a ChaCha8 RNG seeded with `seed`: a pure function of its inputs.
pub fn filler(seed: u64, tokens: u32) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut s = String::with_capacity(tokens as usize * 6);
    for _ in 0..tokens {
        s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    s
}
