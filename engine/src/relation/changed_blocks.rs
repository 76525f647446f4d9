//! Which blocks of an index redo changed, for a hot standby's runtime copies (RFC 0001 §3).
//!
//! Redo (one writer: the startup process) announces the blocks of each change here, changes
//! the pages, then advances the generation. A backend whose copy is synced to generation `s` asks for
//! every block changed after `s`, re-reads those pages and applies them to the copy, instead
//! of making a whole new copy after every replayed change. The record is a small ring that
//! lives in shared memory, so it is made of atomics only and has a fixed size; when the
//! blocks a backend needs were pushed out of it, [`ChangedBlocks::since`] says so and the
//! backend makes a new copy, as it would without the ring.
//!
//! A block already in the ring is not added twice: its entry takes the newer generation, and
//! a new block replaces the entry changed longest ago, so the ring holds the last
//! `RING_ENTRIES` distinct blocks however often some of them change. A reader takes every
//! entry newer than its copy (including ones newer than the generation it read: re-reading a
//! page that changed again only brings the copy further forward). Lost entries are known by
//! `evicted`: the newest generation ever pushed out of the ring, raised before the entry is
//! overwritten, so a reader that saw the overwrite also sees the raise.

use std::sync::atomic::{AtomicU64, Ordering};

/// Entries in one ring: enough for the distinct blocks a few hundred replayed changes of one
/// index touch (an insert touches a handful; a scan on a busy standby syncs every few).
pub const RING_ENTRIES: usize = 256;

/// The changed blocks of one index (or of the indexes that share its slot: a shared slot
/// only makes backends re-read pages they did not need).
#[repr(C)]
pub struct ChangedBlocks {
    /// Changes replayed so far.
    generation: AtomicU64,
    /// The newest generation of an entry pushed out of the ring (0: none yet).
    evicted: AtomicU64,
    /// Each entry: generation (low 32 bits) << 32 | block; 0 is an empty entry.
    ring: [AtomicU64; RING_ENTRIES],
}

fn pack(generation: u64, block: u32) -> u64 {
    (generation as u32 as u64) << 32 | block as u64
}

fn block_of(entry: u64) -> u32 {
    entry as u32
}

/// Whether an entry's generation (its low 32 bits) is newer than `synced`: compared modulo
/// 2^32, so an entry four billion changes old may count as new (one page re-read for
/// nothing), never the other way round within 2^31 changes.
fn newer_than(entry: u64, synced: u64) -> bool {
    let generation = (entry >> 32) as u32;
    (generation.wrapping_sub(synced as u32) as i32) > 0
}

impl ChangedBlocks {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> ChangedBlocks {
        ChangedBlocks {
            generation: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            ring: [const { AtomicU64::new(0) }; RING_ENTRIES],
        }
    }

    /// Changes replayed so far. Read it before reading any page: the pages are then at least
    /// that new.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Announces the blocks one change is about to touch, at the generation it will have,
    /// before redo changes their pages; [`ChangedBlocks::advance`] follows once it has. A
    /// reader that sees a changed page therefore finds its block here on its next look (the
    /// PostgreSQL layer relies on it to write out an edge page before it publishes the entry
    /// that points at it). Single writer: only redo calls it.
    pub fn announce(&self, blocks: &[u32]) {
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        for &block in blocks {
            // The block's own entry if it has one, else the entry changed longest ago (an
            // empty one first): blocks that change often stay, so `evicted` only ever reaches
            // the oldest of the last RING_ENTRIES distinct blocks.
            let mut victim = 0;
            let mut victim_age = 0u64;
            let mut own = None;
            for (i, e) in self.ring.iter().enumerate() {
                let e = e.load(Ordering::Relaxed);
                if e != 0 && block_of(e) == block {
                    own = Some(i);
                    break;
                }
                let age = if e == 0 {
                    u64::MAX
                } else {
                    generation.wrapping_sub((e >> 32) as u32 as u64) as u32 as u64
                };
                if age > victim_age || i == 0 {
                    (victim, victim_age) = (i, age);
                }
            }
            let slot = &self.ring[own.unwrap_or(victim)];
            if own.is_none() && victim_age != u64::MAX {
                // Raised before the entry is overwritten: a reader that sees the new entry
                // sees the raise too.
                self.evicted
                    .fetch_max(generation - victim_age, Ordering::Release);
            }
            slot.store(pack(generation, block), Ordering::Release);
        }
    }

    /// Advances the generation past the change announced last, once its pages are changed.
    pub fn advance(&self) {
        let generation = self.generation.load(Ordering::Relaxed) + 1;
        self.generation.store(generation, Ordering::Release);
    }

    /// [`ChangedBlocks::announce`] and [`ChangedBlocks::advance`] at once (the tests' writer).
    #[cfg(test)]
    pub fn record(&self, blocks: &[u32]) {
        self.announce(blocks);
        self.advance();
    }

    /// Every block changed after generation `synced`, or `None` when some of them are no
    /// longer known (a new copy is needed). May include blocks changed after the generation
    /// the caller read, and blocks of other indexes sharing the slot.
    pub fn since(&self, synced: u64) -> Option<Vec<u32>> {
        let mut blocks: Vec<u32> = self
            .ring
            .iter()
            .map(|e| e.load(Ordering::Acquire))
            .filter(|&e| e != 0 && newer_than(e, synced))
            .map(block_of)
            .collect();
        if self.evicted.load(Ordering::Acquire) > synced {
            return None;
        }
        blocks.sort_unstable();
        blocks.dedup();
        Some(blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_exactly_the_blocks_changed_since_its_generation() {
        let ring = ChangedBlocks::new();
        assert_eq!(ring.since(0), Some(vec![]));
        ring.record(&[5, 7]);
        ring.record(&[9]);
        assert_eq!(ring.generation(), 2);
        assert_eq!(ring.since(0), Some(vec![5, 7, 9]));
        assert_eq!(ring.since(1), Some(vec![9]));
        assert_eq!(ring.since(2), Some(vec![]));
        // a block changed again moves forward: a copy synced to 2 needs it once more
        ring.record(&[5]);
        assert_eq!(ring.since(2), Some(vec![5]));
        assert_eq!(ring.since(1), Some(vec![5, 9]));
    }

    #[test]
    fn a_reader_behind_the_ring_is_told_to_make_a_new_copy() {
        let ring = ChangedBlocks::new();
        ring.record(&[1]);
        let synced = ring.generation();
        for b in 0..RING_ENTRIES as u32 {
            ring.record(&[1000 + b]);
        }
        // block 1's entry (generation 1) was pushed out by the last record; a copy synced
        // to 1 lost nothing it needed, one synced to 0 did
        assert_eq!(ring.since(0), None);
        let needed = ring
            .since(synced)
            .expect("every change after 1 is still in the ring");
        assert_eq!(needed.len(), RING_ENTRIES);
        assert!(!needed.contains(&1));
        // one more push evicts generation 2's block: a copy synced to 1 now needs a new one
        ring.record(&[5000]);
        assert_eq!(ring.since(synced), None);
        assert!(ring.since(synced + 1).is_some());
    }

    #[test]
    fn announced_blocks_are_seen_before_the_generation_moves() {
        let ring = ChangedBlocks::new();
        ring.record(&[1]);
        ring.announce(&[2, 3]);
        assert_eq!(ring.generation(), 1);
        assert_eq!(ring.since(1), Some(vec![2, 3]));
        ring.advance();
        assert_eq!(ring.generation(), 2);
        assert_eq!(ring.since(1), Some(vec![2, 3]));
        assert_eq!(ring.since(2), Some(vec![]));
    }

    #[test]
    fn blocks_that_change_often_are_never_evicted() {
        let ring = ChangedBlocks::new();
        // block 1 changes with every change, while a stream of new blocks passes by
        for b in 0..4 * RING_ENTRIES as u32 {
            ring.record(&[1, 1000 + b]);
        }
        let g = ring.generation();
        // what was evicted is old: a copy a few changes behind needs nothing it lost
        assert_eq!(ring.since(g - 10).map(|b| b.len()), Some(11));
        assert!(ring.since(g - 10).unwrap().contains(&1));
    }

    #[test]
    fn repeated_blocks_take_no_new_entries() {
        let ring = ChangedBlocks::new();
        for _ in 0..10 * RING_ENTRIES {
            ring.record(&[3, 4]);
        }
        assert_eq!(ring.since(0), Some(vec![3, 4]));
        let g = ring.generation();
        assert_eq!(ring.since(g - 1), Some(vec![3, 4]));
        assert_eq!(ring.since(g), Some(vec![]));
    }

    #[test]
    fn concurrent_readers_never_miss_a_block_changed_before_the_generation_they_read() {
        use std::sync::atomic::AtomicBool;
        let ring = ChangedBlocks::new();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // change n touches block n % 600: the ring keeps recent blocks, evicts old ones
                for n in 0..200_000u32 {
                    ring.record(&[n % 600]);
                }
                done.store(true, Ordering::Release);
            });
            for _ in 0..2 {
                s.spawn(|| {
                    let mut synced = 0u64;
                    let mut checked = 0;
                    while !done.load(Ordering::Acquire) {
                        let now = ring.generation();
                        if let Some(blocks) = ring.since(synced) {
                            // every change in (synced, now] touched block (g - 1) % 600
                            for g in synced + 1..=now {
                                let block = ((g - 1) % 600) as u32;
                                assert!(blocks.binary_search(&block).is_ok(), "lost {g}");
                            }
                            checked += 1;
                        }
                        synced = now;
                    }
                    assert!(checked > 0);
                });
            }
        });
    }
}
