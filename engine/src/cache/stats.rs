//! What the cache counts: per-partition counters of lookups, admissions and evictions, and
//! their sums with the frame counts.

use super::region::STATS;
use super::{PageCache, FROZEN, WINDOW};
use std::sync::atomic::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(super) enum Stat {
    SearchHitFrozen,
    SearchHitWindow,
    SearchMiss,
    InsertHitFrozen,
    InsertHitWindow,
    InsertMiss,
    Admitted,
    /// No frame or map slot could be had.
    AdmitSkipped,
    /// A write-through or drop of the partition happened during the read.
    AdmitRaced,
    /// Another reader had already placed the page.
    AdmitDuplicate,
    Promoted,
    WindowEvicted,
    FrozenEvicted,
    Refreshed,
    Dropped,
}

/// Cumulative counters (all indexes), and the frames in use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub search_hits_frozen: u64,
    pub search_hits_window: u64,
    pub search_misses: u64,
    pub insert_hits_frozen: u64,
    pub insert_hits_window: u64,
    pub insert_misses: u64,
    /// Pages read from disk and placed in the window.
    pub admitted: u64,
    /// Pages read from disk and not placed: a write or drop raced with the read, another
    /// reader placed it first, or its partition's map was full.
    pub admit_skipped: u64,
    /// Of `admit_skipped`: a write or drop of the page's partition raced with the read ...
    pub admit_raced: u64,
    /// ... or another reader had placed the page first.
    pub admit_duplicate: u64,
    pub promoted: u64,
    pub window_evictions: u64,
    pub frozen_evictions: u64,
    /// Write-throughs that found the page cached and overwrote it.
    pub refreshed: u64,
    /// Pages dropped on the allocator's hint.
    pub dropped: u64,
    pub frames: u64,
    pub frozen_frames: u64,
    pub window_frames: u64,
    pub free_frames: u64,
}

impl CacheStats {
    pub fn search_lookups(&self) -> u64 {
        self.search_hits_frozen + self.search_hits_window + self.search_misses
    }

    pub fn insert_lookups(&self) -> u64 {
        self.insert_hits_frozen + self.insert_hits_window + self.insert_misses
    }

    pub fn hits(&self) -> u64 {
        self.search_hits_frozen
            + self.search_hits_window
            + self.insert_hits_frozen
            + self.insert_hits_window
    }

    pub fn lookups(&self) -> u64 {
        self.search_lookups() + self.insert_lookups()
    }

    /// Hits over lookups, 0 when nothing was looked up.
    pub fn hit_rate(&self) -> f64 {
        ratio(self.hits(), self.lookups())
    }

    pub fn search_hit_rate(&self) -> f64 {
        ratio(
            self.search_hits_frozen + self.search_hits_window,
            self.search_lookups(),
        )
    }

    pub fn insert_hit_rate(&self) -> f64 {
        ratio(
            self.insert_hits_frozen + self.insert_hits_window,
            self.insert_lookups(),
        )
    }

    /// Counter differences `self - earlier` (frame counts are kept as in `self`).
    pub fn since(&self, earlier: &CacheStats) -> CacheStats {
        CacheStats {
            search_hits_frozen: self.search_hits_frozen - earlier.search_hits_frozen,
            search_hits_window: self.search_hits_window - earlier.search_hits_window,
            search_misses: self.search_misses - earlier.search_misses,
            insert_hits_frozen: self.insert_hits_frozen - earlier.insert_hits_frozen,
            insert_hits_window: self.insert_hits_window - earlier.insert_hits_window,
            insert_misses: self.insert_misses - earlier.insert_misses,
            admitted: self.admitted - earlier.admitted,
            admit_skipped: self.admit_skipped - earlier.admit_skipped,
            admit_raced: self.admit_raced - earlier.admit_raced,
            admit_duplicate: self.admit_duplicate - earlier.admit_duplicate,
            promoted: self.promoted - earlier.promoted,
            window_evictions: self.window_evictions - earlier.window_evictions,
            frozen_evictions: self.frozen_evictions - earlier.frozen_evictions,
            refreshed: self.refreshed - earlier.refreshed,
            dropped: self.dropped - earlier.dropped,
            ..*self
        }
    }

    /// `(name, value)` pairs in a fixed order, for tables and SQL.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("frames", self.frames),
            ("frozen_frames", self.frozen_frames),
            ("window_frames", self.window_frames),
            ("free_frames", self.free_frames),
            ("search_hits_frozen", self.search_hits_frozen),
            ("search_hits_window", self.search_hits_window),
            ("search_misses", self.search_misses),
            ("insert_hits_frozen", self.insert_hits_frozen),
            ("insert_hits_window", self.insert_hits_window),
            ("insert_misses", self.insert_misses),
            ("admitted", self.admitted),
            ("admit_skipped", self.admit_skipped),
            ("admit_raced", self.admit_raced),
            ("admit_duplicate", self.admit_duplicate),
            ("promoted", self.promoted),
            ("window_evictions", self.window_evictions),
            ("frozen_evictions", self.frozen_evictions),
            ("refreshed", self.refreshed),
            ("dropped", self.dropped),
        ]
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl PageCache {
    pub(super) fn count(&self, partition: usize, stat: Stat) {
        self.partitions()[partition].stats[stat as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counters summed over the partitions, and the current frame counts.
    pub fn stats(&self) -> CacheStats {
        let mut sums = [0u64; STATS];
        for p in self.partitions() {
            for (sum, s) in sums.iter_mut().zip(&p.stats) {
                *sum += s.load(Ordering::Relaxed);
            }
        }
        let h = self.header();
        let frozen = h.frozen_len.load(Ordering::Relaxed) as u64;
        let free = h.free_len.load(Ordering::Relaxed) as u64;
        let frames = self.layout.nframes as u64;
        let s = |stat: Stat| sums[stat as usize];
        CacheStats {
            search_hits_frozen: s(Stat::SearchHitFrozen),
            search_hits_window: s(Stat::SearchHitWindow),
            search_misses: s(Stat::SearchMiss),
            insert_hits_frozen: s(Stat::InsertHitFrozen),
            insert_hits_window: s(Stat::InsertHitWindow),
            insert_misses: s(Stat::InsertMiss),
            admitted: s(Stat::Admitted),
            admit_skipped: s(Stat::AdmitSkipped) + s(Stat::AdmitRaced) + s(Stat::AdmitDuplicate),
            admit_raced: s(Stat::AdmitRaced),
            admit_duplicate: s(Stat::AdmitDuplicate),
            promoted: s(Stat::Promoted),
            window_evictions: s(Stat::WindowEvicted),
            frozen_evictions: s(Stat::FrozenEvicted),
            refreshed: s(Stat::Refreshed),
            dropped: s(Stat::Dropped),
            frames,
            frozen_frames: frozen,
            window_frames: frames.saturating_sub(frozen + free),
            free_frames: free,
        }
    }

    /// Frames holding pages of `tag`: (frozen, window). A racy snapshot, for statistics.
    pub fn resident(&self, tag: u64) -> (u64, u64) {
        let mut frozen = 0;
        let mut window = 0;
        for meta in self.metas() {
            if meta.tag.load(Ordering::Relaxed) != tag {
                continue;
            }
            match meta.region.load(Ordering::Relaxed) {
                FROZEN => frozen += 1,
                WINDOW => window += 1,
                _ => {}
            }
        }
        (frozen, window)
    }
}
