//! The run's own prefix reuse, for the warm-cache check of `result.json`'s validity: for each
//! request, the longest prefix (in the plan's estimated tokens) it shares with another request
//! the run sent before it ended. A prefix cache that was empty when the run began can hit at
//! most that much (rounded down to its block size); a server reporting more cached tokens was
//! warm before the run.
//!
//! Each session play keeps a [`Chain`] over the bytes of its requests as sent (the tools, the
//! system prompt, then every message's JSON), cut into [`CHUNK`]-byte pieces: one hash per
//! piece, each seeded with the previous one, so a hash names a whole prefix; beside it the
//! estimated tokens up to there (each element's tokens spread over its bytes). A conversation
//! only grows, so a play hashes each byte once. The run keeps one [`PrefixIndex`]: how many
//! plays have sent each prefix. Counts only fall along a chain, so the longest prefix another
//! play also sent is found by binary search; a play's own earlier requests count too.
//! Sharing is found to within one piece (about 32 tokens), and content shared inside a message
//! (traces whose sessions share blocks of text) counts.
//!
//! Memory is bounded: past [`PrefixIndex::CAP`] prefixes nothing more is counted and every
//! later request gets no figure (`None`) rather than an underestimate that would wrongly flag
//! the server as warm.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes per piece (about 32 tokens of text at ~4 bytes per token).
pub(crate) const CHUNK: usize = 128;

const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// One play's requests so far: a hash and the estimated tokens at the end of every piece.
///
/// The leading pieces can be shared between plays ([`Chain::template`]): every play of a
/// shared system prompt starts with the same ~260 pieces for 8K tokens, held once rather than
/// by each of 50,000 sessions.
#[derive(Clone)]
pub(crate) struct Chain {
    /// Pieces shared with other plays, before this play's own.
    base: Option<Arc<Pieces>>,
    own: Pieces,
    /// The open piece's bytes so far (`fill` of them), hashed whole once it is complete: a
    /// one-shot xxh3 of 128 bytes, seeded with the previous piece's hash, costs less than a
    /// streaming hasher's state (and its seeded secret) rebuilt for every piece.
    buf: [u8; CHUNK],
    /// The previous piece's hash ([`SEED`] before the first).
    seed: u64,
    fill: usize,
    tokens_so_far: f64,
    /// Pieces already counted in the index for this play.
    counted: usize,
    /// Leading pieces found sent by two plays at the last [`PrefixIndex::shared`]: counts only
    /// grow, so the next search starts there (a later turn's usually ends at one lookup).
    lead: usize,
}

/// Hashes and, beside each, the estimated tokens up to the end of its piece.
#[derive(Clone, Default)]
struct Pieces {
    hashes: Vec<u64>,
    /// As `f32` (exact to 16M tokens; these are estimates): a play holds one per 128 bytes it
    /// sent.
    tokens: Vec<f32>,
}

impl Default for Chain {
    fn default() -> Self {
        Chain {
            base: None,
            own: Pieces::default(),
            buf: [0; CHUNK],
            seed: SEED,
            fill: 0,
            tokens_so_far: 0.0,
            counted: 0,
            lead: 0,
        }
    }
}

impl Chain {
    /// Appends an element: its bytes as sent and its estimated tokens.
    pub(crate) fn push(&mut self, parts: &[&[u8]], tokens: u64) {
        let bytes: usize = parts.iter().map(|p| p.len()).sum::<usize>() + 1;
        let per_byte = tokens as f64 / bytes as f64;
        // Room for exactly the pieces this element completes (no doubling past them).
        let more = (self.fill + bytes) / CHUNK;
        self.own.hashes.reserve_exact(more);
        self.own.tokens.reserve_exact(more);
        for part in parts.iter().copied().chain(std::iter::once(&[0xff_u8][..])) {
            let mut rest = part;
            while !rest.is_empty() {
                let take = (CHUNK - self.fill).min(rest.len());
                self.tokens_so_far += take as f64 * per_byte;
                let piece = if self.fill == 0 && take == CHUNK {
                    // A whole piece in place: hashed without a copy.
                    Some(&rest[..CHUNK])
                } else {
                    self.buf[self.fill..self.fill + take].copy_from_slice(&rest[..take]);
                    self.fill += take;
                    (self.fill == CHUNK).then_some(&self.buf[..])
                };
                rest = &rest[take..];
                if let Some(piece) = piece {
                    let h = xxhash_rust::xxh3::xxh3_64_with_seed(piece, self.seed);
                    self.own.hashes.push(h);
                    self.own.tokens.push(self.tokens_so_far as f32);
                    self.seed = h;
                    self.fill = 0;
                }
            }
        }
    }

    /// A chain to start plays from: this one's pieces shared, none counted yet. Cloning it
    /// copies no piece.
    pub(crate) fn template(mut self) -> Chain {
        let mut all = self.base.take().map(|b| (*b).clone()).unwrap_or_default();
        all.hashes.append(&mut self.own.hashes);
        all.tokens.append(&mut self.own.tokens);
        all.hashes.shrink_to_fit();
        all.tokens.shrink_to_fit();
        Chain {
            base: Some(Arc::new(all)),
            own: Pieces::default(),
            counted: 0,
            lead: 0,
            ..self
        }
    }

    fn base(&self) -> &[u64] {
        self.base.as_ref().map_or(&[], |b| &b.hashes)
    }

    /// Whole pieces so far.
    pub(crate) fn len(&self) -> usize {
        self.base().len() + self.own.hashes.len()
    }

    /// The hash of piece `i` (`i < len()`).
    fn hash_at(&self, i: usize) -> u64 {
        let base = self.base();
        base.get(i)
            .copied()
            .unwrap_or_else(|| self.own.hashes[i - base.len()])
    }

    /// The hashes of pieces `from..`, shared ones first.
    fn hashes_from(&self, from: usize) -> impl Iterator<Item = &u64> {
        let base = self.base();
        base.iter().chain(self.own.hashes.iter()).skip(from)
    }

    fn tokens_at(&self, pieces: usize) -> u64 {
        let n = match pieces {
            0 => return 0,
            n => n - 1,
        };
        let base = self.base.as_ref().map_or(&[][..], |b| &b.tokens[..]);
        let t = base
            .get(n)
            .or_else(|| self.own.tokens.get(n - base.len().min(n)));
        t.map_or(0, |t| t.floor() as u64)
    }
}

/// How many plays sent each prefix.
///
/// Sharded by bits from the middle of the prefix hash: the map grows by doubling, and
/// rehashing one big map under one lock stalled every worker for milliseconds (seen as late
/// first tokens); a shard rehashes a sixty-fourth of it.
pub(crate) struct PrefixIndex {
    shards: Box<[Mutex<Shard>]>,
    len: AtomicUsize,
    full: AtomicBool,
}

/// One shard's prefixes: an open-addressing table of packed slots, probed linearly. A slot
/// holds a prefix's hash with its two low bits replaced by how many plays sent it (1, or 2 for
/// two or more: the search only asks "at least two?"); 0 is an empty slot. A lookup or insert
/// reads one slot, usually one cache line (a general map read a control byte and a separate
/// bucket: two cache misses per piece, most of the index's cost in a short turn).
struct Shard {
    slots: Vec<u64>,
    len: usize,
}

impl Shard {
    /// Slots kept at most half full.
    #[allow(clippy::slow_vector_initialization)] // on purpose: see below
    fn with_capacity(n: usize) -> Shard {
        // Written, not `vec![0; n]` (which may map pages touched only in the run): the pages
        // are faulted in here, before the run's clock starts.
        let mut slots = Vec::new();
        slots.resize((n * 2).next_power_of_two().max(16), 0);
        Shard { slots, len: 0 }
    }

    /// The slot value of hash `h` (without its count): never 0.
    fn key(h: u64) -> u64 {
        match h & !3 {
            0 => 4,
            k => k,
        }
    }

    /// Where `key` is, or the empty slot where it would go.
    fn find(&self, key: u64) -> usize {
        let mask = self.slots.len() - 1;
        // The low bits of the hash (above the count's) pick the slot; the shard was picked by
        // bits from the middle.
        let mut i = (key >> 2) as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 || s & !3 == key {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// Counts a play sending prefix `h`; true when no play had sent it before.
    fn add(&mut self, h: u64) -> bool {
        let key = Self::key(h);
        let i = self.find(key);
        match self.slots[i] {
            0 => {
                self.slots[i] = key | 1;
                self.len += 1;
                if self.len * 2 > self.slots.len() {
                    self.grow();
                }
                true
            }
            s => {
                self.slots[i] = key | (s & 3).saturating_add(1).min(2);
                false
            }
        }
    }

    /// Whether at least two plays sent prefix `h`.
    fn sent_twice(&self, h: u64) -> bool {
        self.slots[self.find(Self::key(h))] & 3 >= 2
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        self.slots = vec![0; old.len() * 2];
        for s in old.into_iter().filter(|&s| s != 0) {
            let i = self.find(s & !3);
            self.slots[i] = s;
        }
    }
}

impl Default for PrefixIndex {
    fn default() -> Self {
        Self::with_expected(0)
    }
}

impl PrefixIndex {
    /// Prefixes counted at most (tens of MB).
    pub(crate) const CAP: usize = 3_000_000;
    const SHARDS: usize = 64;

    /// An index sized for about `pieces` prefixes (capped at [`PrefixIndex::CAP`]): growing
    /// from empty rehashed every shard a dozen times, ~1.6% of a short turn's client CPU.
    pub(crate) fn with_expected(pieces: usize) -> Self {
        let per_shard = pieces.min(Self::CAP) / Self::SHARDS;
        PrefixIndex {
            shards: (0..Self::SHARDS)
                .map(|_| Mutex::new(Shard::with_capacity(per_shard)))
                .collect(),
            len: AtomicUsize::new(0),
            full: AtomicBool::new(false),
        }
    }

    /// About how many distinct prefixes playing `plan` once sends: every message's JSON cut
    /// into [`CHUNK`]-byte pieces (the shared system prompt once).
    pub(crate) fn expected_pieces(plan: &bench_workload::plan::Plan) -> usize {
        let msg = |m: &bench_workload::plan::Msg| m.content_json.len() + 32;
        let mut bytes = 0usize;
        let mut systems = std::collections::HashSet::new();
        for s in &plan.sessions {
            if let Some(sys) = s.system.as_ref().filter(|m| systems.insert(Arc::as_ptr(m))) {
                bytes = bytes.saturating_add(msg(sys));
            }
            for t in &s.turns {
                bytes = bytes.saturating_add(t.input_delta.iter().map(msg).sum::<usize>());
                bytes = bytes.saturating_add(msg(&t.assistant));
            }
        }
        bytes / CHUNK
    }

    /// The hashes are xxh3 values, used as they are: the shard is picked by bits from the
    /// middle, the slot in it by the low bits.
    fn shard_of(h: u64) -> usize {
        (h >> 32) as usize % Self::SHARDS
    }

    fn shard(&self, h: u64) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[Self::shard_of(h)]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts the pieces of `chain` not yet counted for its play (call when a request is sent).
    pub(crate) fn sent(&self, chain: &mut Chain) {
        if self.full.load(Ordering::Relaxed) {
            return;
        }
        let new = chain.len() - chain.counted;
        if self.len.load(Ordering::Relaxed) + new > Self::CAP {
            self.full.store(true, Ordering::Relaxed);
            return;
        }
        let mut added = 0;
        let mut count = |shard: &mut Shard, h: u64| {
            added += usize::from(shard.add(h));
        };
        if new <= 16 {
            // A later turn's few pieces: a lock each costs less than sorting them.
            for h in chain.hashes_from(chain.counted) {
                count(&mut self.shard(*h), *h);
            }
        } else {
            // One lock per shard touched, not per piece: a first turn of an 8K-token prompt
            // has ~260 new pieces.
            let mut new: Vec<u64> = chain.hashes_from(chain.counted).copied().collect();
            new.sort_unstable_by_key(|h| Self::shard_of(*h));
            for run in new.chunk_by(|a, b| Self::shard_of(*a) == Self::shard_of(*b)) {
                let mut shard = self.shard(run[0]);
                for h in run {
                    count(&mut shard, *h);
                }
            }
        }
        self.len.fetch_add(added, Ordering::Relaxed);
        chain.counted = chain.len();
    }

    /// The estimated tokens of the longest prefix of `chain` that another play also sent, or
    /// that this play sent in an earlier request (its first `own` pieces). `None` once the
    /// index is full.
    pub(crate) fn shared(&self, chain: &mut Chain, own: usize) -> Option<u64> {
        if self.full.load(Ordering::Relaxed) {
            return None;
        }
        // Counts only fall along a chain and only grow over time: the pieces sent twice are a
        // prefix, at least as long as at the last call. One lookup past it usually ends the
        // search (content no other play sent); otherwise a binary search of the rest.
        let sent_twice = |i: usize| {
            let h = chain.hash_at(i);
            self.shard(h).sent_twice(h)
        };
        let all = chain.len();
        let mut lo = chain.lead.min(all);
        if lo < all && sent_twice(lo) {
            let mut hi = all;
            lo += 1;
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if sent_twice(mid) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
        }
        chain.lead = lo;
        Some(chain.tokens_at(lo.max(own.min(all))))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A text of `n` bytes made of `seed`'s bytes.
    fn text(seed: &str, n: usize) -> Vec<u8> {
        seed.bytes().cycle().take(n).collect()
    }

    #[test]
    fn a_request_shares_what_another_play_or_its_own_earlier_turn_sent() {
        let idx = PrefixIndex::default();
        let sys = text("system prompt ", 1024); // 8 pieces
        // Play A, turn 1: nothing sent before it.
        let mut a = Chain::default();
        a.push(&[&sys], 256);
        a.push(&[&text("question one ", 512)], 128);
        idx.sent(&mut a);
        assert_eq!(idx.shared(&mut a, 0), Some(0));
        // Play B starts with the same system prompt: shares it (to within a piece).
        let mut b = Chain::default();
        b.push(&[&sys], 256);
        b.push(&[&text("another question ", 512)], 128);
        idx.sent(&mut b);
        let shared = idx.shared(&mut b, 0).unwrap();
        assert!((224..=256).contains(&shared), "{shared}");
        // A's second turn extends its first: shares all of it, though no other play sent it.
        let own = a.len();
        a.push(&[&text("answer ", 300)], 75);
        a.push(&[&text("question two ", 200)], 50);
        idx.sent(&mut a);
        let shared = idx.shared(&mut a, own).unwrap();
        assert!((352..=384).contains(&shared), "{shared}");
        // A different system prompt shares nothing.
        let mut c = Chain::default();
        c.push(&[&text("other prompt ", 1024)], 256);
        idx.sent(&mut c);
        assert_eq!(idx.shared(&mut c, 0), Some(0));
    }

    #[test]
    fn sharing_inside_a_message_counts_and_element_boundaries_matter() {
        let idx = PrefixIndex::default();
        let common = text("shared block ", 640); // 5 pieces
        let mut a = Chain::default();
        a.push(&[&common, &text("tail a ", 256)], 224);
        idx.sent(&mut a);
        let mut b = Chain::default();
        b.push(&[&common, &text("tail b ", 256)], 224);
        idx.sent(&mut b);
        let shared = idx.shared(&mut b, 0).unwrap();
        assert!((120..=160).contains(&shared), "{shared}");
    }

    #[test]
    fn plays_started_from_a_shared_template_count_as_plays_built_alone() {
        // A prompt that does not end on a piece boundary: the template carries the partial
        // piece's hasher state.
        let sys = text("system prompt ", 1000);
        let template = {
            let mut t = Chain::default();
            t.push(&[b"system", &sys], 250);
            t.template()
        };
        let (alone, shared) = (PrefixIndex::default(), PrefixIndex::default());
        for play in 0..3 {
            let q = text(&format!("question {play} "), 700);
            let mut a = Chain::default();
            a.push(&[b"system", &sys], 250);
            let mut b = template.clone();
            for c in [&mut a, &mut b] {
                c.push(&[&q], 175);
            }
            alone.sent(&mut a);
            shared.sent(&mut b);
            assert_eq!(a.len(), b.len());
            assert!(a.hashes_from(0).eq(b.hashes_from(0)));
            assert_eq!(
                alone.shared(&mut a, 0),
                shared.shared(&mut b, 0),
                "play {play}"
            );
            // A second turn: own pieces after the shared ones.
            let own = b.len();
            for c in [&mut a, &mut b] {
                c.push(&[&text("answer ", 300)], 75);
            }
            alone.sent(&mut a);
            shared.sent(&mut b);
            assert_eq!(
                alone.shared(&mut a, own),
                shared.shared(&mut b, own),
                "play {play}"
            );
        }
        // The third play shares the whole prompt with the first two.
        let mut c = template.clone();
        c.push(&[&text("last ", 300)], 75);
        shared.sent(&mut c);
        let got = shared.shared(&mut c, 0).unwrap();
        assert!((218..=250).contains(&got), "{got}");
        // Its new prefixes are all but the prompt's whole pieces ("system", the text, the end).
        let prompt_pieces = (6 + sys.len() + 1) / CHUNK;
        assert_eq!(
            shared.len.load(Ordering::Relaxed),
            alone.len.load(Ordering::Relaxed) + c.len() - prompt_pieces
        );
    }

    #[test]
    fn what_others_send_later_extends_a_play_s_shared_prefix() {
        // The search starts where the last one ended: a prefix found shared stays shared, and
        // one found unshared is looked at again when another play has sent it since.
        let idx = PrefixIndex::default();
        let sys = text("system prompt ", 512); // 4 pieces
        let mut a = Chain::default();
        a.push(&[&sys], 128);
        a.push(&[&text("question ", 512)], 128);
        idx.sent(&mut a);
        assert_eq!(idx.shared(&mut a, 0), Some(0));
        let mut b = Chain::default();
        b.push(&[&sys], 128);
        idx.sent(&mut b);
        let got = idx.shared(&mut a, 0).unwrap();
        assert!((96..=128).contains(&got), "{got}");
        let mut c = Chain::default();
        c.push(&[&sys], 128);
        c.push(&[&text("question ", 512)], 128);
        idx.sent(&mut c);
        let got = idx.shared(&mut a, 0).unwrap();
        assert!((224..=256).contains(&got), "{got}");
        assert_eq!(idx.shared(&mut a, 0), Some(got));
    }

    #[test]
    fn a_shard_counts_each_prefix_up_to_two_and_keeps_them_as_it_grows() {
        let mut shard = Shard::with_capacity(0);
        let keys: Vec<u64> = (0..1000u64)
            .map(|i| xxhash_rust::xxh3::xxh3_64(&i.to_le_bytes()))
            .chain([0, 1, 2, 3]) // all packed into the same slot value: one prefix
            .collect();
        for &h in &keys[..1000] {
            assert!(shard.add(h));
            assert!(!shard.sent_twice(h));
        }
        assert!(shard.add(0));
        for h in [1, 2, 3] {
            assert!(!shard.add(h));
        }
        assert_eq!(shard.len, 1001);
        assert!(shard.slots.len() >= 2 * shard.len, "{}", shard.slots.len());
        for &h in keys.iter().step_by(2) {
            assert!(!shard.add(h));
        }
        for (i, &h) in keys[..1000].iter().enumerate() {
            assert_eq!(shard.sent_twice(h), i % 2 == 0, "key {i}");
        }
        assert!(shard.sent_twice(3));
        assert!(!shard.sent_twice(xxhash_rust::xxh3::xxh3_64(b"never sent")));
        assert_eq!(shard.len, 1001);
    }

    #[test]
    fn a_full_index_gives_no_figure() {
        let idx = PrefixIndex::default();
        idx.full.store(true, Ordering::Relaxed);
        let mut a = Chain::default();
        a.push(&[&text("x", 1024)], 256);
        idx.sent(&mut a);
        assert_eq!(idx.shared(&mut a, 0), None);
    }
}
