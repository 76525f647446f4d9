//! Where everything lives: the region header, one directory slot per partition, and inside
//! each partition's body the fixed arrays of the cache, addressed by word offsets.
//!
//! ```text
//! RegionHeader              magic, partition count and size, the directory spin lock
//! Slot[P]                   per partition: the index it serves (tag, oids), claim count,
//!                           last use, statistics
//! body[P] (words)           header words, then
//!     entries[E]            representatives, aliases and filter tombstones
//!     objects[O]            neighbour objects: refcount, heap TID, vector
//!     log[L]                the insert log ring: heap TID, vector
//!     query table[2E]       query hash -> entry (equality lookups)
//!     object table[2O]      heap TID -> object (sharing and deletes)
//!     free entries[E], free objects[O]   stacks of free slots
//!     fifo[E]               representatives in admission order
//! ```
//!
//! A body is formatted for one index (its dimension fixes every size) when the index claims
//! the partition; its header words record the claim it was formatted under, so a backend
//! that still holds an older claim sees the mismatch and treats the partition as a miss.

use crate::cache::spin::SpinLock;
use std::sync::atomic::{AtomicU32, AtomicU64};

pub(super) const MAGIC: u64 = 0x4e41_5649_5341_4b52; // "NAVISAKR"
pub(super) const VERSION: u32 = 2;
/// A slot, stack entry or link that names nothing.
pub(super) const NONE: u32 = u32::MAX;

/// Most rows an entry keeps (k + Δ).
pub const NRL_CAPACITY: usize = 64;
/// Out-degree of the query filter graph.
pub(super) const FILTER_DEGREE: usize = 8;

#[repr(C)]
pub(super) struct RegionHeader {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub partitions: AtomicU32,
    pub body_words: AtomicU64,
    /// Guards the directory: which index holds which partition.
    pub directory: SpinLock,
    /// A logical clock for least-recent use of partitions.
    pub clock: AtomicU64,
}

/// Statistics counters of a partition (`Stat` indexes them).
pub(super) const STATS: usize = 20;

#[repr(C, align(64))]
pub(super) struct Slot {
    /// The index's cache tag; 0 while unclaimed.
    pub tag: AtomicU64,
    /// Bumped at every claim: a body formatted under an older claim belongs to another index.
    pub claim: AtomicU64,
    pub last_use: AtomicU64,
    /// Database and relation OIDs of the index, for the statistics view.
    pub db_oid: AtomicU32,
    pub rel_oid: AtomicU32,
    pub stats: [AtomicU64; STATS],
}

impl Slot {
    /// Frees the partition (under the directory lock): unclaimed, and a body formatted under
    /// the old claim no longer opens, so a backend still holding it sees a miss.
    pub fn release(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.tag.store(0, Relaxed);
        self.claim.fetch_add(1, Relaxed);
        self.last_use.store(0, Relaxed);
    }
}

// Partition header words.
pub(super) const H_CLAIM: usize = 0; // u64
pub(super) const H_DIM: usize = 2; // 0: not formatted
pub(super) const H_ENTRIES: usize = 4;
pub(super) const H_OBJECTS: usize = 5;
pub(super) const H_LOG: usize = 6;
pub(super) const H_FREE_ENTRIES: usize = 7;
pub(super) const H_FREE_OBJECTS: usize = 8;
pub(super) const H_FIFO_HEAD: usize = 9; // u64
pub(super) const H_FIFO_TAIL: usize = 11; // u64
pub(super) const H_LOG_HEAD: usize = 13; // u64
pub(super) const H_LOG_TAIL: usize = 15; // u64
pub(super) const H_ACTIVE_EPOCH: usize = 17;
/// Per filter (by epoch parity): entry point, live and tombstone counts.
pub(super) const H_FILTER: usize = 18; // 2 x 3 words
pub(super) const H_VACUUM: usize = 24;
pub(super) const H_ROUND_ROBIN: usize = 25;
pub(super) const H_REPRESENTATIVES: usize = 26;
pub(super) const H_ALIASES: usize = 27;
pub(super) const H_OBJECTS_USED: usize = 28;
/// Sums over the representatives that make the risk model O(1) per insert: of their
/// d_k / d_(k+Δ) ratios in 1/65536ths, and of their log checkpoints.
pub(super) const H_RATIO_SUM: usize = 32; // u64
pub(super) const H_CHECKPOINT_SUM: usize = 34; // u64
/// No representative's log checkpoint is below this (the log-wrap check scans only when the
/// log's head passes it).
pub(super) const H_CHECKPOINT_FLOOR: usize = 36; // u64
pub(super) const HEADER_WORDS: usize = 40;

// Entry words.
pub(super) const E_STATE: usize = 0;
pub(super) const E_EPOCH: usize = 1;
/// Representative: its first alias; alias: its representative.
pub(super) const E_LINK: usize = 2;
/// Alias: the next alias of the same representative.
pub(super) const E_NEXT: usize = 3;
pub(super) const E_TAU: usize = 4;
/// Euclidean distance from the query to its nearest cached row.
pub(super) const E_MIN_D: usize = 5;
/// The index metric's distance from the query to its farthest cached row.
pub(super) const E_MAX_D: usize = 6;
/// Rows the entry must keep valid (k) and rows it wants (k + Δ).
pub(super) const E_K: usize = 7;
pub(super) const E_WANT: usize = 8;
pub(super) const E_LEN: usize = 9;
pub(super) const E_LOG_CHECKPOINT: usize = 10; // u64
pub(super) const E_HASH: usize = 12; // u64
pub(super) const E_GENERATION: usize = 14; // u64
pub(super) const E_FIFO: usize = 16; // u64
/// The index metric's distance to the k-th row (the risk model's d_k).
pub(super) const E_D_K: usize = 18;
pub(super) const E_DEGREE: usize = 19;
pub(super) const E_NEIGHBOURS: usize = 20;
pub(super) const E_ROWS: usize = E_NEIGHBOURS + FILTER_DEGREE;
pub(super) const E_QUERY: usize = E_ROWS + NRL_CAPACITY;

pub(super) const STATE_FREE: u32 = 0;
pub(super) const STATE_REPRESENTATIVE: u32 = 1;
pub(super) const STATE_ALIAS: u32 = 2;
/// Evicted, but still a node of its filter graph (routing only) until the filter is dropped.
pub(super) const STATE_TOMBSTONE: u32 = 3;

// Object words.
pub(super) const O_REFS: usize = 0;
pub(super) const O_TID: usize = 1; // block, offset
pub(super) const O_VECTOR: usize = 3;

// Log record words.
pub(super) const L_TID: usize = 0; // block (NONE: removed by VACUUM), offset
pub(super) const L_VECTOR: usize = 2;

/// Words per hash-table slot: key (u64), value.
pub(super) const TABLE_SLOT: usize = 3;

/// The sizes and word offsets of one formatted body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Geometry {
    pub dim: usize,
    pub entries: usize,
    pub objects: usize,
    pub log: usize,
    pub entries_at: usize,
    pub objects_at: usize,
    pub log_at: usize,
    pub query_table_at: usize,
    pub object_table_at: usize,
    pub free_entries_at: usize,
    pub free_objects_at: usize,
    pub fifo_at: usize,
    pub words: usize,
}

impl Geometry {
    pub fn entry_words(dim: usize) -> usize {
        E_QUERY + dim
    }

    pub fn object_words(dim: usize) -> usize {
        O_VECTOR + dim
    }

    pub fn log_words(dim: usize) -> usize {
        L_VECTOR + dim
    }

    fn with_counts(dim: usize, entries: usize, objects: usize, log: usize) -> Geometry {
        let entries_at = HEADER_WORDS;
        let objects_at = entries_at + entries * Self::entry_words(dim);
        let log_at = objects_at + objects * Self::object_words(dim);
        let query_table_at = log_at + log * Self::log_words(dim);
        let object_table_at = query_table_at + 2 * entries * TABLE_SLOT;
        let free_entries_at = object_table_at + 2 * objects * TABLE_SLOT;
        let free_objects_at = free_entries_at + entries;
        let fifo_at = free_objects_at + objects;
        Geometry {
            dim,
            entries,
            objects,
            log,
            entries_at,
            objects_at,
            log_at,
            query_table_at,
            object_table_at,
            free_entries_at,
            free_objects_at,
            fifo_at,
            words: fifo_at + entries,
        }
    }

    /// The largest geometry for `dim` that fits `words`: about 60% of the body for neighbour
    /// objects (the pool that caps the cache, as in the paper), 28% for entries (query
    /// vectors, row lists, filter links) and 12% for the insert log. `None` when the body
    /// cannot hold a minimal cache of this dimension.
    pub fn fit(dim: usize, words: usize) -> Option<Geometry> {
        let usable = words.checked_sub(HEADER_WORDS)?;
        let per_object = Self::object_words(dim) + 2 * TABLE_SLOT + 1;
        let per_entry = Self::entry_words(dim) + 2 * TABLE_SLOT + 2;
        let objects = usable * 60 / 100 / per_object;
        let entries = usable * 28 / 100 / per_entry;
        let log = usable * 12 / 100 / Self::log_words(dim);
        if objects < NRL_CAPACITY || entries < 4 || log < 16 {
            return None;
        }
        let g = Self::with_counts(dim, entries, objects, log);
        debug_assert!(g.words <= words);
        Some(g)
    }

    pub fn entry(&self, e: u32) -> usize {
        self.entries_at + e as usize * Self::entry_words(self.dim)
    }

    pub fn object(&self, o: u32) -> usize {
        self.objects_at + o as usize * Self::object_words(self.dim)
    }

    pub fn log_record(&self, seq: u64) -> usize {
        self.log_at + (seq % self.log as u64) as usize * Self::log_words(self.dim)
    }

    pub fn bytes_per_entry(&self) -> usize {
        4 * (Self::entry_words(self.dim) + 2 * TABLE_SLOT + 2)
    }

    pub fn bytes_per_object(&self) -> usize {
        4 * (Self::object_words(self.dim) + 2 * TABLE_SLOT + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_do_not_overlap_and_fit() {
        for dim in [3, 128, 384, 768, 2000] {
            let words = (8 << 20) / 4;
            let g = Geometry::fit(dim, words).unwrap();
            assert!(g.words <= words);
            assert!(g.objects_at >= g.entries_at + g.entries * Geometry::entry_words(dim));
            assert!(g.log_at >= g.objects_at + g.objects * Geometry::object_words(dim));
            assert_eq!(g.fifo_at + g.entries, g.words);
            assert!(g.objects >= NRL_CAPACITY);
        }
        assert!(Geometry::fit(768, 10_000).is_none());
    }
}
