//! KV block accounting with a prefix cache over chained block hashes and LRU eviction.
//!
//! Every KV block is in exactly one state:
//! - *free*;
//! - *cached*: holds a full prompt block, keyed by a chained hash so that equal keys mean an equal
//!   prefix. A cached block is *pinned* while at least one running request uses it and
//!   *evictable* (in LRU order) otherwise;
//! - *private*: held by one running request and not shareable (the partial last prompt block and
//!   the blocks reserved for the completion).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Chained key of the block after `prev` whose contents are `data` (xxh3 seeded with the
/// previous key: stable across runs and machines, several GB/s).
fn chain(prev: u64, data: &[u8]) -> u64 {
    xxh3_64_with_seed(data, prev)
}

/// Keys of the full blocks of a token-id sequence.
pub(crate) fn block_keys_from_ids(ids: &[u32], block_size: u32) -> Vec<u64> {
    let bs = block_size.max(1) as usize;
    let mut prev = 0u64;
    let mut buf = Vec::with_capacity(bs * 4);
    ids.chunks_exact(bs)
        .map(|block| {
            buf.clear();
            buf.extend(block.iter().flat_map(|id| id.to_le_bytes()));
            prev = chain(prev, &buf);
            prev
        })
        .collect()
}

/// The block keys are already hashes: the map uses them as they are.
#[derive(Debug, Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `u64` keys; anything else is folded in.
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<KeyHasher>>;

/// Keys of the full blocks of a text counted as one token per 4 bytes.
pub(crate) fn block_keys_from_bytes(bytes: &[u8], block_size: u32) -> Vec<u64> {
    let per_block = block_size.max(1) as usize * 4;
    let mut prev = 0u64;
    bytes
        .chunks_exact(per_block)
        .map(|block| {
            prev = chain(prev, block);
            prev
        })
        .collect()
}

#[derive(Debug)]
struct Entry {
    refs: u32,
    tick: u64,
}

/// Blocks held by one admitted request; give it back with [`BlockManager::release`].
#[derive(Debug, Default)]
pub(crate) struct Alloc {
    /// Cached blocks pinned by the request, in prompt order.
    pinned: Vec<u64>,
    /// Private blocks.
    private: u64,
    /// Leading prompt blocks that were already cached at admission.
    pub(crate) hit_blocks: u32,
}

/// KV block pool with a prefix cache.
///
/// The LRU order is a queue of `(tick, key)` with lazy deletion, so that pinning, releasing
/// and evicting are O(1) (a `BTreeMap` by tick cost ~45 % of the simulator's CPU on 100K-token
/// prompts): releasing a block pushes it with a new tick; pinning it leaves its old item in the
/// queue, which is skipped when it comes up because the block is pinned or has a newer tick.
/// The queue is compacted when stale items outnumber live ones.
#[derive(Debug)]
pub(crate) struct BlockManager {
    total: u64,
    entries: KeyMap<Entry>,
    /// Evictable blocks as `(tick, key)`, oldest first, plus stale items (see above).
    lru: VecDeque<(u64, u64)>,
    /// Evictable (cached, unpinned) blocks: the live items of `lru`.
    evictable: u64,
    tick: u64,
    private: u64,
    pinned: u64,
    evicted_total: u64,
}

impl BlockManager {
    /// A pool of `total` blocks.
    pub(crate) fn new(total: u64) -> Self {
        // Sized for the whole pool up front (at most a million blocks, ~40 MB): growing the map
        // rehashes every entry under the simulator's lock, a stall every request waits out.
        let room = usize::try_from(total.min(1 << 20)).unwrap_or(1 << 20);
        Self {
            total,
            entries: KeyMap::with_capacity_and_hasher(room, BuildHasherDefault::default()),
            lru: VecDeque::with_capacity(room),
            evictable: 0,
            tick: 0,
            private: 0,
            pinned: 0,
            evicted_total: 0,
        }
    }

    /// Blocks in the pool.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Blocks neither cached nor held.
    pub(crate) fn free(&self) -> u64 {
        self.total
            .saturating_sub(self.entries.len() as u64 + self.private)
    }

    /// Cached blocks no running request uses (evictable).
    pub(crate) fn evictable(&self) -> u64 {
        self.evictable
    }

    /// Blocks held by running requests (pinned cached + private).
    pub(crate) fn used(&self) -> u64 {
        self.pinned + self.private
    }

    /// Cached blocks evicted to make room, since start.
    pub(crate) fn evicted_total(&self) -> u64 {
        self.evicted_total
    }

    /// How many leading `keys` are cached.
    #[cfg(test)]
    pub(crate) fn cached_prefix_blocks(&self, keys: &[u64]) -> usize {
        keys.iter()
            .take_while(|k| self.entries.contains_key(k))
            .count()
    }

    /// Admits a request whose full prompt blocks have `keys` and which needs `need_blocks` blocks
    /// in all (prompt + completion). Cached leading blocks are pinned; the others are taken from
    /// free blocks, then by evicting least-recently-used evictable blocks.
    ///
    /// Returns `None` (changing nothing) when it does not fit, unless `force`, in which case the
    /// request gets what is available (it over-commits rather than deadlocks).
    pub(crate) fn admit(&mut self, keys: &[u64], need_blocks: u64, force: bool) -> Option<Alloc> {
        // The cached prefix and how many of its blocks are unpinned, in one pass.
        let (mut hit, mut unpinned_hits) = (0usize, 0u64);
        for k in keys {
            match self.entries.get(k) {
                Some(e) => {
                    hit += 1;
                    unpinned_hits += u64::from(e.refs == 0);
                }
                None => break,
            }
        }
        let need = need_blocks.max(keys.len() as u64);
        let new_needed = need - hit as u64;
        let available = self.free() + self.evictable() - unpinned_hits;
        if new_needed > available && !force {
            return None;
        }
        let mut alloc = Alloc {
            pinned: Vec::with_capacity(keys.len()),
            private: 0,
            hit_blocks: u32::try_from(hit).unwrap_or(u32::MAX),
        };
        for &k in &keys[..hit] {
            self.pin(k);
            alloc.pinned.push(k);
        }
        for &k in &keys[hit..] {
            if self.entries.contains_key(&k) {
                // Present although an earlier block is not (hash chains make this rare).
                self.pin(k);
                alloc.pinned.push(k);
            } else if self.make_room(1) {
                self.entries.insert(k, Entry { refs: 1, tick: 0 });
                self.pinned += 1;
                alloc.pinned.push(k);
            } else {
                break;
            }
        }
        let private_needed = need - keys.len() as u64;
        self.make_room(private_needed);
        let private = private_needed.min(self.free());
        self.private += private;
        alloc.private = private;
        Some(alloc)
    }

    /// Gives back a request's blocks: private blocks become free, its prompt blocks stay cached
    /// and become evictable once no other request pins them (tail blocks first in LRU order).
    pub(crate) fn release(&mut self, alloc: Alloc) {
        self.private = self.private.saturating_sub(alloc.private);
        for k in alloc.pinned.into_iter().rev() {
            if let Some(e) = self.entries.get_mut(&k) {
                e.refs = e.refs.saturating_sub(1);
                if e.refs == 0 {
                    self.tick += 1;
                    e.tick = self.tick;
                    self.lru.push_back((self.tick, k));
                    self.evictable += 1;
                    self.pinned = self.pinned.saturating_sub(1);
                }
            }
        }
        self.compact();
    }

    /// Drops every evictable cached block; returns how many.
    pub(crate) fn flush(&mut self) -> u64 {
        let n = self.evictable;
        for (tick, k) in std::mem::take(&mut self.lru) {
            if self.is_live(tick, k) {
                self.entries.remove(&k);
            }
        }
        self.evictable = 0;
        n
    }

    /// Whether the queue item `(tick, k)` stands for an evictable block.
    fn is_live(&self, tick: u64, k: u64) -> bool {
        self.entries
            .get(&k)
            .is_some_and(|e| e.refs == 0 && e.tick == tick)
    }

    /// Drops stale queue items once they outnumber the live ones (amortized O(1) per release).
    fn compact(&mut self) {
        if self.lru.len() as u64 > 2 * self.evictable + 1024 {
            let mut lru = std::mem::take(&mut self.lru);
            lru.retain(|&(tick, k)| self.is_live(tick, k));
            self.lru = lru;
        }
    }

    fn pin(&mut self, k: u64) {
        if let Some(e) = self.entries.get_mut(&k) {
            if e.refs == 0 {
                // Its queue item goes stale (skipped when it comes up).
                self.evictable -= 1;
                self.pinned += 1;
            }
            e.refs += 1;
        }
    }

    /// Evicts LRU blocks until `n` blocks are free (or nothing is left to evict).
    fn make_room(&mut self, n: u64) -> bool {
        while self.free() < n {
            let Some((tick, k)) = self.lru.pop_front() else {
                return false;
            };
            // One lookup: the item is live (and then evicted) or stale (and skipped).
            match self.entries.entry(k) {
                std::collections::hash_map::Entry::Occupied(e)
                    if e.get().refs == 0 && e.get().tick == tick =>
                {
                    e.remove();
                    self.evictable -= 1;
                    self.evicted_total += 1;
                }
                _ => {}
            }
        }
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn keys(tag: u32, n: usize) -> Vec<u64> {
        let ids: Vec<u32> = (0..n as u32 * 4).map(|i| i + tag * 1000).collect();
        block_keys_from_ids(&ids, 4)
    }

    #[test]
    fn chained_keys_identify_prefixes() {
        let a = block_keys_from_ids(&[1, 2, 3, 4, 5, 6, 7, 8, 9], 4);
        let b = block_keys_from_ids(&[1, 2, 3, 4, 5, 6, 7, 0], 4);
        let c = block_keys_from_ids(&[0, 2, 3, 4, 5, 6, 7, 8], 4);
        assert_eq!(a.len(), 2);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        // Same second block contents, different prefix: different key.
        assert_ne!(a[1], c[1]);
        assert_eq!(block_keys_from_bytes(&[7u8; 130], 4).len(), 8);
    }

    #[test]
    fn second_request_hits_released_prefix() {
        let mut m = BlockManager::new(100);
        let k = keys(1, 5);
        let a = m.admit(&k, 8, false).unwrap();
        assert_eq!(a.hit_blocks, 0);
        assert_eq!(m.used(), 8);
        m.release(a);
        assert_eq!(m.used(), 0);
        assert_eq!(m.evictable(), 5);
        assert_eq!(m.free(), 95);
        let b = m.admit(&k[..3], 4, false).unwrap();
        assert_eq!(b.hit_blocks, 3);
        assert_eq!(m.evictable(), 2);
        assert_eq!(m.used(), 4);
        m.release(b);
    }

    #[test]
    fn concurrent_requests_share_pinned_blocks() {
        let mut m = BlockManager::new(100);
        let k = keys(1, 4);
        let a = m.admit(&k, 6, false).unwrap();
        let b = m.admit(&k, 6, false).unwrap();
        assert_eq!(b.hit_blocks, 4);
        assert_eq!(m.used(), 4 + 2 + 2);
        m.release(a);
        assert_eq!(m.evictable(), 0, "still pinned by b");
        m.release(b);
        assert_eq!(m.evictable(), 4);
    }

    /// Admits a request for exactly the blocks `k` and releases it; returns its hit blocks.
    fn touch(m: &mut BlockManager, k: &[u64]) -> u32 {
        let x = m.admit(k, k.len() as u64, false).unwrap();
        let hits = x.hit_blocks;
        m.release(x);
        hits
    }

    #[test]
    fn eviction_is_lru_and_tail_first() {
        let mut m = BlockManager::new(10);
        let a = keys(1, 3);
        let b = keys(2, 3);
        touch(&mut m, &a);
        touch(&mut m, &b);
        // Touch `a` again so that `b` is the least recently used.
        assert_eq!(touch(&mut m, &a), 3);
        assert_eq!(m.free(), 4);
        // Needs 6 blocks: 4 free + 2 evicted from b's tail.
        let c = keys(3, 6);
        let x = m.admit(&c, 6, false).unwrap();
        assert_eq!(m.evicted_total(), 2);
        assert_eq!(m.cached_prefix_blocks(&a), 3);
        assert_eq!(
            m.cached_prefix_blocks(&b),
            1,
            "b's head survives, its tail went first"
        );
        m.release(x);
    }

    #[test]
    fn pinned_blocks_are_never_evicted() {
        let mut m = BlockManager::new(10);
        let a = keys(1, 6);
        let held = m.admit(&a, 6, false).unwrap();
        // Only 4 free blocks; a's blocks are pinned, so 5 blocks do not fit.
        assert!(m.admit(&keys(2, 5), 5, false).is_none());
        assert_eq!(m.used(), 6);
        assert_eq!(m.evicted_total(), 0);
        // Forced admission over-commits instead of evicting pinned blocks.
        let forced = m.admit(&keys(2, 5), 5, true).unwrap();
        assert_eq!(m.cached_prefix_blocks(&a), 6);
        assert_eq!(m.evicted_total(), 0);
        m.release(forced);
        m.release(held);
        assert_eq!(m.used(), 0);
    }

    #[test]
    fn stale_queue_items_do_not_change_the_eviction_order() {
        let mut m = BlockManager::new(10);
        let a = keys(1, 3);
        let b = keys(2, 3);
        touch(&mut m, &a);
        touch(&mut m, &b);
        // Pin and release `a` many times: each leaves a stale item behind, and the queue is
        // compacted along the way.
        for _ in 0..5000 {
            assert_eq!(touch(&mut m, &a), 3);
            assert!(
                m.lru.len() as u64 <= 2 * m.evictable() + 1025,
                "{}",
                m.lru.len()
            );
        }
        assert_eq!(m.evictable(), 6);
        let x = m.admit(&keys(3, 6), 6, false).unwrap();
        assert_eq!(m.evicted_total(), 2);
        assert_eq!(m.cached_prefix_blocks(&a), 3);
        assert_eq!(m.cached_prefix_blocks(&b), 1);
        m.release(x);
    }

    /// Random admissions, releases and flushes: the counts stay consistent with the entries,
    /// and every eviction takes the least recently released evictable blocks first.
    #[test]
    fn random_operations_keep_counts_and_lru_order() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut m = BlockManager::new(64);
        let families: Vec<Vec<u64>> = (0..6).map(|f| keys(f, 24)).collect();
        let mut held: Vec<Alloc> = Vec::new();
        for step in 0..20_000 {
            let op = rng.random_range(0..10);
            if op < 5 {
                let f = &families[rng.random_range(0..families.len())];
                let k = &f[..rng.random_range(1..=f.len())];
                let need = k.len() as u64 + rng.random_range(0..4);
                // The evictable blocks, least recently released first.
                let mut order: Vec<(u64, u64)> = m
                    .entries
                    .iter()
                    .filter(|(_, e)| e.refs == 0)
                    .map(|(&key, e)| (e.tick, key))
                    .collect();
                order.sort_unstable();
                let before = m.evicted_total();
                if let Some(a) = m.admit(k, need, rng.random_bool(0.3)) {
                    held.push(a);
                }
                // Gone: evicted. Blocks of this request may have been pinned instead, so the
                // order is checked over the others: the evicted ones come first.
                let gone: Vec<bool> = order
                    .iter()
                    .map(|(_, key)| !m.entries.contains_key(key))
                    .collect();
                let evicted = (m.evicted_total() - before) as usize;
                assert_eq!(gone.iter().filter(|g| **g).count(), evicted, "step {step}");
                let others: Vec<bool> = order
                    .iter()
                    .zip(&gone)
                    .filter(|((_, key), _)| !k.contains(key))
                    .map(|(_, g)| *g)
                    .collect();
                let first_kept = others.iter().position(|g| !g).unwrap_or(others.len());
                assert!(
                    others[first_kept..].iter().all(|g| !g),
                    "step {step}: an eviction skipped an older block: {others:?}"
                );
            } else if op < 9 && !held.is_empty() {
                let a = held.swap_remove(rng.random_range(0..held.len()));
                m.release(a);
            } else if op == 9 && rng.random_bool(0.05) {
                let n = m.evictable();
                assert_eq!(m.flush(), n);
                assert_eq!(m.evictable(), 0);
            }
            let unpinned = m.entries.values().filter(|e| e.refs == 0).count() as u64;
            assert_eq!(m.evictable(), unpinned, "step {step}");
            assert_eq!(m.pinned, m.entries.len() as u64 - unpinned, "step {step}");
            assert!(m.entries.len() as u64 + m.private <= m.total, "step {step}");
            assert!(
                m.lru.len() as u64 <= 2 * m.evictable() + 1025,
                "step {step}"
            );
        }
        for a in held {
            m.release(a);
        }
        assert_eq!(m.used(), 0);
        assert_eq!(m.evictable(), m.entries.len() as u64);
    }

    #[test]
    fn flush_keeps_pinned_blocks() {
        let mut m = BlockManager::new(20);
        let a = m.admit(&keys(1, 3), 3, false).unwrap();
        let b = m.admit(&keys(2, 3), 3, false).unwrap();
        m.release(b);
        assert_eq!(m.flush(), 3);
        assert_eq!(m.cached_prefix_blocks(&keys(1, 3)), 3);
        assert_eq!(m.cached_prefix_blocks(&keys(2, 3)), 0);
        m.release(a);
        assert_eq!(m.free(), 17);
    }
}
