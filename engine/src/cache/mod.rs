//! NAVIS-Cache: a graph-aware cache of edge pages, shared by every reader of every index
//! (digest §1.6, NAVIS paper §7). A region's frames all have one size, chosen when it is
//! formatted: 4 KiB for side-file indexes, 8 KiB for indexes in their relation (RFC 0001),
//! whose edge pages are PostgreSQL pages; an index attaches only to a region whose frames are
//! its edge pages (`IndexFiles::attach_cache`).
//!
//! Side files are read with O_DIRECT, so without this cache every edge page costs a device read
//! even when memory is plentiful. A recency cache (PostgreSQL's clock sweep, plain LRU) lets the
//! one-off pages of each query's exploration push out the pages near the entry points that every
//! query and every insert crosses. NAVIS-Cache splits its frames in two regions:
//!
//! * the **admission window** (10% by default): a page read from disk enters here, and the
//!   window evicts by recency (CLOCK, the usual one-bit LRU approximation);
//! * the **mostly-frozen region** (the rest): a window page is promoted when it is hit again
//!   while in the window, twice counting its admission when the accesses come from inserts'
//!   position seeking, and only after a much higher count (`search_promote_hits`) when they
//!   come from user searches, so transient query traffic cannot churn the region. When it is
//!   full the earliest-promoted page is evicted (the NAVIS README), or a random one (the
//!   paper's variant, [`FrozenEviction::Random`]).
//!
//! [`Policy::Lru`] runs the same frames as one CLOCK pool (the ablation), [`Policy::Off`]
//! caches nothing.
//!
//! ## Consistency
//!
//! The cache is write-through and never holds a page older than the disk: a writer calls
//! [`PageCache::refresh`] after its page write returned and before it publishes the new
//! location in the indirection table, and a page whose slots all became invalid is dropped
//! ([`PageCache::drop_page`]). A reader that misses takes a [`Ticket`] (the partition's write
//! epoch) *before* its disk read and admits the page only if no refresh or drop of that
//! partition happened meanwhile, so a read that raced with a write can never plant the old
//! bytes after the refresh went by.
//!
//! ## Concurrency
//!
//! A hit takes only the lock of the page's mapping partition (one of 128) and copies the page
//! out under it, so no reader ever sees a torn page and nothing is pinned: a backend that
//! errors or is cancelled holds nothing. Misses take the replacement lock to pick a frame; it
//! serialises admissions, promotions and evictions, which happen at the rate of device reads.
//! Lock order: replacement, then partition; a partition lock is never held while taking the
//! replacement lock.

mod config;
mod map;
mod region;
mod replacement;
pub(crate) mod spin;
mod stats;
pub mod trace;
mod view;

use region::{Layout, NO_FRAME};
use std::fmt;
use std::ptr::NonNull;
// The tests reach `AtomicU32` through `use super::*`, as before the split.
#[cfg(test)]
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;

use config::validate;
use stats::Stat;

pub use config::{CacheConfig, Caller, FrozenEviction, Policy, DEFAULT_SEARCH_PROMOTE_HITS};
pub use region::FRAME_SIZES;
pub use spin::{SpinGuard, SpinLock};
pub use stats::CacheStats;

/// Identity of a cached page: which index build, which edge page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageKey {
    /// Distinguishes indexes and builds (PostgreSQL: the random build id of the metapage).
    pub tag: u64,
    pub page: u32,
}

/// One index's use of a cache: the shared cache and the tag of this index build.
#[derive(Clone, Debug)]
pub struct CacheBinding {
    pub cache: std::sync::Arc<PageCache>,
    pub tag: u64,
}

impl CacheBinding {
    pub fn key(&self, page: u32) -> PageKey {
        PageKey {
            tag: self.tag,
            page,
        }
    }
}

/// A partition's write epoch taken before a disk read; see [`PageCache::admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u32);

#[derive(Debug)]
pub struct CacheError(String);

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CacheError {}

const FREE: u32 = 0;
const WINDOW: u32 = 1;
const FROZEN: u32 = 2;

/// A view of one cache region. Cheap to share between threads (`Sync`); in PostgreSQL each
/// backend builds its own view of the one shared region.
pub struct PageCache {
    base: NonNull<u8>,
    layout: Layout,
    /// The allocation behind `base` when the cache owns its memory.
    _owned: Option<Vec<crate::io::AlignedPage>>,
}

// SAFETY: all shared state in the region is atomics and spin locks, and the page bytes are
// only touched under the locking protocol described in the module comment.
unsafe impl Send for PageCache {}
// SAFETY: as above.
unsafe impl Sync for PageCache {}

impl fmt::Debug for PageCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageCache")
            .field("frames", &self.layout.nframes)
            .field("frame_size", &self.layout.frame_size)
            .field("policy", &self.policy())
            .finish()
    }
}

impl PageCache {
    pub fn policy(&self) -> Policy {
        Policy::from_code(self.header().policy.load(Ordering::Relaxed))
    }

    pub fn frames(&self) -> usize {
        self.layout.nframes
    }

    /// Bytes per frame: the size of the edge pages this cache holds.
    pub fn frame_size(&self) -> usize {
        self.layout.frame_size
    }

    /// Frames the frozen region may hold.
    pub fn frozen_capacity(&self) -> usize {
        self.header().frozen_capacity.load(Ordering::Relaxed) as usize
    }

    pub fn frozen_eviction(&self) -> FrozenEviction {
        match self.header().frozen_eviction.load(Ordering::Relaxed) {
            1 => FrozenEviction::Random,
            2 => FrozenEviction::Clock,
            _ => FrozenEviction::Fifo,
        }
    }

    pub fn search_promote_hits(&self) -> u32 {
        self.header().search_promote_hits.load(Ordering::Relaxed)
    }

    /// Copies the cached page `key` into `out` ([`PageCache::frame_size`] bytes) and returns
    /// true, or returns false on a miss. A hit in the window may promote the page.
    pub fn lookup(&self, key: PageKey, caller: Caller, out: &mut [u8]) -> bool {
        assert_eq!(
            out.len(),
            self.frame_size(),
            "cache lookups copy whole pages"
        );
        trace::record(key, trace::TraceKind::Lookup(caller));
        let (partition, start) = self.partition_of(key);
        let policy = self.policy();
        let mut promote = None;
        {
            let part = &self.partitions()[partition];
            let _guard = part.lock.lock();
            let found = if policy == Policy::Off {
                None
            } else {
                self.find(partition, start, key)
            };
            let Some((_, frame)) = found else {
                self.count(
                    partition,
                    match caller {
                        Caller::Search => Stat::SearchMiss,
                        Caller::Insert => Stat::InsertMiss,
                    },
                );
                return false;
            };
            self.copy_out(frame, out);
            let meta = &self.metas()[frame as usize];
            meta.referenced.store(1, Ordering::Relaxed);
            let frozen = meta.region.load(Ordering::Relaxed) == FROZEN;
            self.count(
                partition,
                match (caller, frozen) {
                    (Caller::Search, true) => Stat::SearchHitFrozen,
                    (Caller::Search, false) => Stat::SearchHitWindow,
                    (Caller::Insert, true) => Stat::InsertHitFrozen,
                    (Caller::Insert, false) => Stat::InsertHitWindow,
                },
            );
            if !frozen && policy == Policy::Navis {
                let h = self.header();
                let (hits, threshold) = match caller {
                    Caller::Insert => (
                        meta.insert_hits.fetch_add(1, Ordering::Relaxed) + 1,
                        h.insert_promote_hits.load(Ordering::Relaxed),
                    ),
                    Caller::Search => (
                        meta.search_hits.fetch_add(1, Ordering::Relaxed) + 1,
                        h.search_promote_hits.load(Ordering::Relaxed),
                    ),
                };
                if hits >= threshold {
                    promote = Some(frame);
                }
            }
        }
        if let Some(frame) = promote {
            self.promote(frame, key);
        }
        true
    }

    /// The write epoch of `key`'s partition; take it before reading the page from disk.
    pub fn ticket(&self, key: PageKey) -> Ticket {
        let (partition, _) = self.partition_of(key);
        Ticket(self.partitions()[partition].epoch.load(Ordering::Acquire))
    }

    /// Places `data`, the page `key` as read from disk after `ticket` was taken, in the
    /// admission window, unless a write-through or drop of its partition happened since
    /// (the bytes might be older than the disk) or the page is already cached.
    pub fn admit(&self, key: PageKey, caller: Caller, data: &[u8], ticket: Ticket) {
        assert_eq!(data.len(), self.frame_size(), "the cache holds whole pages");
        if self.policy() == Policy::Off {
            return;
        }
        let (partition, start) = self.partition_of(key);
        let part = &self.partitions()[partition];
        let h = self.header();
        let _replacement = h.replacement.lock();
        {
            let _guard = part.lock.lock();
            if let Some(reason) = self.admit_refused(partition, start, key, ticket) {
                self.count(partition, reason);
                return;
            }
        }
        let Some(frame) = self.take_frame() else {
            self.count(partition, Stat::AdmitSkipped);
            return;
        };
        // No map entry points at `frame` and we hold the replacement lock: nobody reads it.
        self.copy_in(frame, data);
        let meta = &self.metas()[frame as usize];
        meta.tag.store(key.tag, Ordering::Relaxed);
        meta.page.store(key.page, Ordering::Relaxed);
        meta.referenced.store(0, Ordering::Relaxed);
        meta.insert_hits
            .store((caller == Caller::Insert) as u32, Ordering::Relaxed);
        meta.search_hits
            .store((caller == Caller::Search) as u32, Ordering::Relaxed);
        let _guard = part.lock.lock();
        // Re-checked: a refresh may have run while the frame was filled.
        let refused = self
            .admit_refused(partition, start, key, ticket)
            .or_else(|| {
                (!self.map_insert(partition, start, key, frame)).then_some(Stat::AdmitSkipped)
            });
        match refused {
            None => {
                meta.region.store(WINDOW, Ordering::Relaxed);
                self.count(partition, Stat::Admitted);
            }
            Some(reason) => {
                self.release_frame(frame);
                self.count(partition, reason);
            }
        }
    }

    /// Why `key` read after `ticket` may not be admitted now, if it may not (partition lock
    /// held).
    fn admit_refused(
        &self,
        partition: usize,
        start: usize,
        key: PageKey,
        ticket: Ticket,
    ) -> Option<Stat> {
        if self.partitions()[partition].epoch.load(Ordering::Relaxed) != ticket.0 {
            Some(Stat::AdmitRaced)
        } else if self.find(partition, start, key).is_some() {
            Some(Stat::AdmitDuplicate)
        } else {
            None
        }
    }

    /// Write-through: call after `data` was written to disk as page `key`, before the new
    /// location is published. Overwrites the cached copy if there is one, and makes reads
    /// that started before this call unable to admit their (possibly older) bytes.
    pub fn refresh(&self, key: PageKey, data: &[u8]) {
        assert_eq!(data.len(), self.frame_size(), "the cache holds whole pages");
        trace::record(key, trace::TraceKind::Write);
        let (partition, start) = self.partition_of(key);
        let part = &self.partitions()[partition];
        let _guard = part.lock.lock();
        part.epoch.fetch_add(1, Ordering::AcqRel);
        if let Some((_, frame)) = self.find(partition, start, key) {
            self.copy_in(frame, data);
            self.count(partition, Stat::Refreshed);
        }
    }

    /// The allocator's hint: every slot of page `key` became invalid (it went to the free
    /// list). Frees its frame if it is cached.
    pub fn drop_page(&self, key: PageKey) {
        trace::record(key, trace::TraceKind::Drop);
        let (partition, start) = self.partition_of(key);
        let part = &self.partitions()[partition];
        {
            let _guard = part.lock.lock();
            part.epoch.fetch_add(1, Ordering::AcqRel);
            if self.find(partition, start, key).is_none() {
                return;
            }
        }
        let _replacement = self.header().replacement.lock();
        let _guard = part.lock.lock();
        if let Some((at, frame)) = self.find(partition, start, key) {
            self.map_remove(partition, at);
            self.release_frame(frame);
            self.count(partition, Stat::Dropped);
        }
    }
}

#[cfg(test)]
mod tests;
