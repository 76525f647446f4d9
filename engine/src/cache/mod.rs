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

mod region;
pub(crate) mod spin;
pub mod trace;

use region::{FrameMeta, Header, Layout, MapSlot, Partition, MAGIC, NO_FRAME, STATS, VERSION};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use region::FRAME_SIZES;
pub use spin::{SpinGuard, SpinLock};

/// Which replacement policy the frames follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Admission window plus mostly-frozen region.
    Navis,
    /// One CLOCK pool over all frames (the ablation).
    Lru,
    /// No caching: every lookup misses, nothing is admitted.
    Off,
}

impl Policy {
    fn code(self) -> u32 {
        match self {
            Policy::Navis => 0,
            Policy::Lru => 1,
            Policy::Off => 2,
        }
    }

    fn from_code(code: u32) -> Policy {
        match code {
            0 => Policy::Navis,
            1 => Policy::Lru,
            _ => Policy::Off,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Navis => "navis",
            Policy::Lru => "lru",
            Policy::Off => "off",
        }
    }

    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "navis" => Some(Policy::Navis),
            "lru" => Some(Policy::Lru),
            "off" => Some(Policy::Off),
            _ => None,
        }
    }
}

/// How the frozen region makes room when it is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrozenEviction {
    /// The earliest-promoted page (NAVIS README).
    Fifo,
    /// A random frozen page (NAVIS paper).
    Random,
    /// The earliest-promoted page not hit since it was last passed over (second chance): a
    /// frozen page still in use goes to the back of the queue.
    Clock,
}

impl FrozenEviction {
    pub fn name(self) -> &'static str {
        match self {
            FrozenEviction::Fifo => "fifo",
            FrozenEviction::Random => "random",
            FrozenEviction::Clock => "clock",
        }
    }

    pub fn parse(s: &str) -> Option<FrozenEviction> {
        match s {
            "fifo" => Some(FrozenEviction::Fifo),
            "random" => Some(FrozenEviction::Random),
            "clock" => Some(FrozenEviction::Clock),
            _ => None,
        }
    }
}

/// Who is reading: promotion thresholds and statistics differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// A user search.
    Search,
    /// An insert's position seeking.
    Insert,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheConfig {
    pub frames: usize,
    /// Bytes per frame, one of [`FRAME_SIZES`]: the edge-page size of the indexes that will
    /// use the cache.
    pub frame_size: usize,
    pub policy: Policy,
    /// Share of the frames kept for the admission window (the rest may be frozen).
    pub window_share: f64,
    /// Accesses while in the window (the admitting one included) that promote a page when
    /// they come from inserts ...
    pub insert_promote_hits: u32,
    /// ... and from user searches.
    pub search_promote_hits: u32,
    pub frozen_eviction: FrozenEviction,
}

impl CacheConfig {
    /// The paper's defaults over `frames` frames of 4 KiB (side-file edge pages).
    pub fn navis(frames: usize) -> CacheConfig {
        CacheConfig {
            frames,
            frame_size: crate::storage::PAGE_SIZE,
            policy: Policy::Navis,
            window_share: 0.10,
            insert_promote_hits: 2,
            search_promote_hits: DEFAULT_SEARCH_PROMOTE_HITS,
            frozen_eviction: FrozenEviction::Fifo,
        }
    }

    fn frozen_capacity(&self) -> usize {
        match self.policy {
            Policy::Navis => ((self.frames as f64) * (1.0 - self.window_share)).floor() as usize,
            Policy::Lru | Policy::Off => 0,
        }
    }
}

/// The paper only says "much higher" than the insert path's 2.
pub const DEFAULT_SEARCH_PROMOTE_HITS: u32 = 8;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
enum Stat {
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
    /// Bytes a region with `frames` frames of 4 KiB needs (side-file edge pages; see
    /// [`PageCache::region_size_with`]).
    pub fn region_size(frames: usize) -> usize {
        Self::region_size_with(crate::storage::PAGE_SIZE, frames)
    }

    /// Bytes a region with `frames` frames of `frame_size` bytes (one of [`FRAME_SIZES`];
    /// `init_at` refuses any other) needs.
    pub fn region_size_with(frame_size: usize, frames: usize) -> usize {
        Layout::for_frames(frame_size, frames).total
    }

    /// The most 4 KiB frames `bytes` bytes of region hold (see
    /// [`PageCache::frames_for_bytes_with`]).
    pub fn frames_for_bytes(bytes: usize) -> usize {
        Self::frames_for_bytes_with(crate::storage::PAGE_SIZE, bytes)
    }

    /// The most frames of `frame_size` bytes (one of [`FRAME_SIZES`]) `bytes` bytes of
    /// region hold.
    pub fn frames_for_bytes_with(frame_size: usize, bytes: usize) -> usize {
        assert!(
            FRAME_SIZES.contains(&frame_size),
            "cache frames are {FRAME_SIZES:?} bytes, not {frame_size}"
        );
        Layout::frames_for_bytes(frame_size, bytes)
    }

    /// A cache in memory of its own (tests, the bench binary).
    pub fn new(config: CacheConfig) -> Result<PageCache, CacheError> {
        validate(&config)?;
        let layout = Layout::for_frames(config.frame_size, config.frames);
        // Allocated in aligned 4 KiB units (the unit of `AlignedPage`, whatever the frame
        // size), so the region is page-aligned like PostgreSQL's shared memory.
        let unit = std::mem::size_of::<crate::io::AlignedPage>();
        let mut owned = crate::io::AlignedPage::vec(layout.total.div_ceil(unit));
        let base = NonNull::new(owned.as_mut_ptr().cast::<u8>()).expect("vec pointer");
        let cache = PageCache {
            base,
            layout,
            _owned: Some(owned),
        };
        cache.initialise(&config);
        Ok(cache)
    }

    /// Formats the region at `base` (`len` bytes, 64-byte aligned) and returns a view of it.
    ///
    /// # Safety
    /// `base..base+len` must be writable memory that stays mapped for as long as any view
    /// of it exists, and nobody may use it while it is being initialised.
    pub unsafe fn init_at(
        base: *mut u8,
        len: usize,
        config: CacheConfig,
    ) -> Result<PageCache, CacheError> {
        validate(&config)?;
        let layout = Layout::for_frames(config.frame_size, config.frames);
        let cache = Self::view(base, len, layout)?;
        cache.initialise(&config);
        Ok(cache)
    }

    /// A view of a region that [`PageCache::init_at`] formatted (possibly in another process),
    /// with the frame size its header records.
    ///
    /// # Safety
    /// As for [`PageCache::init_at`], and the region must have been initialised.
    pub unsafe fn attach(base: *mut u8, len: usize) -> Result<PageCache, CacheError> {
        if len < std::mem::size_of::<Header>() {
            return Err(CacheError("cache region too small for its header".into()));
        }
        if !(base as usize).is_multiple_of(64) {
            return Err(CacheError("cache region is not 64-byte aligned".into()));
        }
        // SAFETY: base is valid for len >= size_of::<Header>() bytes (caller's contract),
        // 64-byte aligned (checked above), and a Header is atomics only.
        let header = unsafe { &*(base as *const Header) };
        if header.magic.load(Ordering::Acquire) != MAGIC
            || header.version.load(Ordering::Relaxed) != VERSION
        {
            return Err(CacheError(
                "cache region is not initialised (or has another version)".into(),
            ));
        }
        let frame_size = header.frame_size.load(Ordering::Relaxed) as usize;
        if !FRAME_SIZES.contains(&frame_size) {
            return Err(CacheError(format!(
                "cache region has frames of {frame_size} bytes, not one of {FRAME_SIZES:?}"
            )));
        }
        let layout = Layout::with(
            frame_size,
            header.nframes.load(Ordering::Relaxed) as usize,
            header.partitions.load(Ordering::Relaxed) as usize,
            header.slots_per_partition.load(Ordering::Relaxed) as usize,
        );
        Self::view(base, len, layout)
    }

    fn view(base: *mut u8, len: usize, layout: Layout) -> Result<PageCache, CacheError> {
        if !(base as usize).is_multiple_of(64) {
            return Err(CacheError("cache region is not 64-byte aligned".into()));
        }
        if len < layout.total {
            return Err(CacheError(format!(
                "cache region of {len} bytes is smaller than the {} its {} frames need",
                layout.total, layout.nframes
            )));
        }
        let base = NonNull::new(base).ok_or_else(|| CacheError("null cache region".into()))?;
        Ok(PageCache {
            base,
            layout,
            _owned: None,
        })
    }

    /// `len` values of `T` at byte `offset` of the region.
    fn slice<T>(&self, offset: usize, len: usize) -> &[T] {
        debug_assert!(offset + len * std::mem::size_of::<T>() <= self.layout.total);
        debug_assert_eq!(
            (self.base.as_ptr() as usize + offset) % std::mem::align_of::<T>(),
            0
        );
        // SAFETY: the layout places `len` values of T at `offset`, inside the region and
        // aligned (region base 64-aligned, offsets rounded up); every T used here is made of
        // atomics, valid for any bit pattern and meant to be shared; the region outlives self.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset).cast::<T>(), len) }
    }

    fn header(&self) -> &Header {
        &self.slice::<Header>(0, 1)[0]
    }

    fn partitions(&self) -> &[Partition] {
        self.slice(self.layout.partitions_at, self.layout.partitions)
    }

    fn map(&self, partition: usize) -> &[MapSlot] {
        let s = self.layout.slots_per_partition;
        &self.slice::<MapSlot>(self.layout.map_at, self.layout.partitions * s)
            [partition * s..(partition + 1) * s]
    }

    fn metas(&self) -> &[FrameMeta] {
        self.slice(self.layout.meta_at, self.layout.nframes)
    }

    fn free_stack(&self) -> &[AtomicU32] {
        self.slice(self.layout.free_at, self.layout.nframes)
    }

    fn fifo(&self) -> &[AtomicU64] {
        self.slice(self.layout.fifo_at, self.layout.nframes)
    }

    fn frame_ptr(&self, frame: u32) -> *mut u8 {
        debug_assert!((frame as usize) < self.layout.nframes);
        // SAFETY: frame < nframes, so the page lies inside the region.
        unsafe {
            self.base
                .as_ptr()
                .add(self.layout.frames_at + frame as usize * self.layout.frame_size)
        }
    }

    /// Copies frame `frame` into `out`. The caller holds the lock of the partition that maps
    /// a page to this frame, so no writer touches it meanwhile.
    fn copy_out(&self, frame: u32, out: &mut [u8]) {
        debug_assert_eq!(out.len(), self.layout.frame_size);
        // SAFETY: the frame is frame_size bytes inside the region and `out` as long; writers
        // of a mapped frame hold the same partition lock, writers of an unmapped frame are
        // unreachable from here (the caller found the frame through the map under that lock).
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.frame_ptr(frame),
                out.as_mut_ptr(),
                self.layout.frame_size,
            )
        }
    }

    /// Copies `data` into `frame`. The caller holds the partition lock of the page mapped to
    /// it, or holds the replacement lock over a frame no map entry points at.
    fn copy_in(&self, frame: u32, data: &[u8]) {
        debug_assert_eq!(data.len(), self.layout.frame_size);
        // SAFETY: as in copy_out: no reader can reach the frame while it is written.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.frame_ptr(frame),
                self.layout.frame_size,
            )
        }
    }

    fn initialise(&self, config: &CacheConfig) {
        let h = self.header();
        h.magic.store(0, Ordering::Relaxed);
        h.version.store(VERSION, Ordering::Relaxed);
        h.frame_size
            .store(self.layout.frame_size as u32, Ordering::Relaxed);
        h.nframes
            .store(self.layout.nframes as u32, Ordering::Relaxed);
        h.partitions
            .store(self.layout.partitions as u32, Ordering::Relaxed);
        h.slots_per_partition
            .store(self.layout.slots_per_partition as u32, Ordering::Relaxed);
        h.frozen_capacity
            .store(config.frozen_capacity() as u32, Ordering::Relaxed);
        h.policy.store(config.policy.code(), Ordering::Relaxed);
        h.insert_promote_hits
            .store(config.insert_promote_hits, Ordering::Relaxed);
        h.search_promote_hits
            .store(config.search_promote_hits, Ordering::Relaxed);
        h.frozen_eviction.store(
            match config.frozen_eviction {
                FrozenEviction::Fifo => 0,
                FrozenEviction::Random => 1,
                FrozenEviction::Clock => 2,
            },
            Ordering::Relaxed,
        );
        h.replacement.init();
        h.clock_hand.store(0, Ordering::Relaxed);
        h.frozen_len.store(0, Ordering::Relaxed);
        h.fifo_head.store(0, Ordering::Relaxed);
        h.fifo_len.store(0, Ordering::Relaxed);
        h.promote_seq.store(0, Ordering::Relaxed);
        h.rng.store(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        for p in self.partitions() {
            p.lock.init();
            p.epoch.store(0, Ordering::Relaxed);
            p.stats.iter().for_each(|s| s.store(0, Ordering::Relaxed));
        }
        for p in 0..self.layout.partitions {
            for slot in self.map(p) {
                slot.frame.store(NO_FRAME, Ordering::Relaxed);
            }
        }
        let n = self.layout.nframes as u32;
        for (i, meta) in self.metas().iter().enumerate() {
            meta.tag.store(0, Ordering::Relaxed);
            meta.page.store(0, Ordering::Relaxed);
            meta.region.store(FREE, Ordering::Relaxed);
            meta.referenced.store(0, Ordering::Relaxed);
            meta.insert_hits.store(0, Ordering::Relaxed);
            meta.search_hits.store(0, Ordering::Relaxed);
            meta.seq.store(0, Ordering::Relaxed);
            // Popped from the top: frame 0 first.
            self.free_stack()[i].store(n - 1 - i as u32, Ordering::Relaxed);
        }
        h.free_len.store(n, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
    }

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

    fn hash(key: PageKey) -> u64 {
        let mut h = key.tag ^ (key.page as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn partition_of(&self, key: PageKey) -> (usize, usize) {
        let h = Self::hash(key);
        let partition = ((h >> 40) as usize) % self.layout.partitions;
        let start = (h as usize) & (self.layout.slots_per_partition - 1);
        (partition, start)
    }

    fn count(&self, partition: usize, stat: Stat) {
        self.partitions()[partition].stats[stat as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The frame mapped to `key` (the caller holds the partition lock).
    fn find(&self, partition: usize, start: usize, key: PageKey) -> Option<(usize, u32)> {
        let map = self.map(partition);
        let mask = map.len() - 1;
        for i in 0..map.len() {
            let at = (start + i) & mask;
            let slot = &map[at];
            let frame = slot.frame.load(Ordering::Relaxed);
            if frame == NO_FRAME {
                return None;
            }
            if slot.page.load(Ordering::Relaxed) == key.page
                && slot.tag.load(Ordering::Relaxed) == key.tag
            {
                return Some((at, frame));
            }
        }
        None
    }

    /// Maps `key` to `frame` (partition lock held, key absent). False when the partition's
    /// table is full.
    fn map_insert(&self, partition: usize, start: usize, key: PageKey, frame: u32) -> bool {
        let map = self.map(partition);
        let mask = map.len() - 1;
        for i in 0..map.len() {
            let slot = &map[(start + i) & mask];
            if slot.frame.load(Ordering::Relaxed) == NO_FRAME {
                slot.tag.store(key.tag, Ordering::Relaxed);
                slot.page.store(key.page, Ordering::Relaxed);
                slot.frame.store(frame, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Removes map slot `at` (partition lock held), shifting later entries of its probe run
    /// back so that lookups never stop early (linear probing without tombstones).
    fn map_remove(&self, partition: usize, mut at: usize) {
        let map = self.map(partition);
        let mask = map.len() - 1;
        let mut next = (at + 1) & mask;
        loop {
            let frame = map[next].frame.load(Ordering::Relaxed);
            if frame == NO_FRAME {
                break;
            }
            let key = PageKey {
                tag: map[next].tag.load(Ordering::Relaxed),
                page: map[next].page.load(Ordering::Relaxed),
            };
            let home = self.partition_of(key).1;
            // Move `next` into the hole unless its home lies cyclically in (at, next].
            let distance_home = next.wrapping_sub(home) & mask;
            let distance_hole = next.wrapping_sub(at) & mask;
            if distance_home >= distance_hole {
                map[at].tag.store(key.tag, Ordering::Relaxed);
                map[at].page.store(key.page, Ordering::Relaxed);
                map[at].frame.store(frame, Ordering::Relaxed);
                at = next;
            }
            next = (next + 1) & mask;
        }
        map[at].frame.store(NO_FRAME, Ordering::Relaxed);
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

    /// A free frame, evicting one if there is none (replacement lock held). The frame is
    /// unmapped and marked free.
    fn take_frame(&self) -> Option<u32> {
        let h = self.header();
        let free = h.free_len.load(Ordering::Relaxed);
        if free > 0 {
            h.free_len.store(free - 1, Ordering::Relaxed);
            return Some(self.free_stack()[free as usize - 1].load(Ordering::Relaxed));
        }
        self.evict_window().or_else(|| self.evict_frozen())
    }

    /// Returns `frame` to the free stack (replacement lock held, frame unmapped).
    fn release_frame(&self, frame: u32) {
        let h = self.header();
        let meta = &self.metas()[frame as usize];
        if meta.region.swap(FREE, Ordering::Relaxed) == FROZEN {
            h.frozen_len.fetch_sub(1, Ordering::Relaxed);
        }
        let free = h.free_len.load(Ordering::Relaxed);
        self.free_stack()[free as usize].store(frame, Ordering::Relaxed);
        h.free_len.store(free + 1, Ordering::Relaxed);
    }

    /// Unmaps `frame`'s page (replacement lock held) and marks the frame free (not on the
    /// stack: the caller reuses it).
    fn unmap(&self, frame: u32) {
        let meta = &self.metas()[frame as usize];
        let key = PageKey {
            tag: meta.tag.load(Ordering::Relaxed),
            page: meta.page.load(Ordering::Relaxed),
        };
        let (partition, start) = self.partition_of(key);
        let _guard = self.partitions()[partition].lock.lock();
        if let Some((at, f)) = self.find(partition, start, key) {
            debug_assert_eq!(f, frame);
            self.map_remove(partition, at);
        }
        if meta.region.swap(FREE, Ordering::Relaxed) == FROZEN {
            self.header().frozen_len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// CLOCK over the window frames: the first one not referenced since the hand last
    /// passed. Two sweeps at most.
    fn evict_window(&self) -> Option<u32> {
        let h = self.header();
        let n = self.layout.nframes as u32;
        let metas = self.metas();
        let mut hand = h.clock_hand.load(Ordering::Relaxed) % n;
        let mut victim = None;
        for _ in 0..2 * n as usize {
            let meta = &metas[hand as usize];
            let frame = hand;
            hand = (hand + 1) % n;
            if meta.region.load(Ordering::Relaxed) != WINDOW {
                continue;
            }
            if meta.referenced.swap(0, Ordering::Relaxed) == 1 {
                continue;
            }
            victim = Some(frame);
            break;
        }
        h.clock_hand.store(hand, Ordering::Relaxed);
        let frame = victim?;
        self.unmap(frame);
        let (partition, _) = self.partition_of(PageKey {
            tag: metas[frame as usize].tag.load(Ordering::Relaxed),
            page: metas[frame as usize].page.load(Ordering::Relaxed),
        });
        self.count(partition, Stat::WindowEvicted);
        Some(frame)
    }

    fn next_random(&self) -> u64 {
        // xorshift64*: the state only needs to wander, under the replacement lock.
        let h = self.header();
        let mut x = h.rng.load(Ordering::Relaxed);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        h.rng.store(x, Ordering::Relaxed);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Makes room in the frozen region (replacement lock held): the earliest-promoted page,
    /// or a random frozen page. Returns the freed frame (unmapped, not on the free stack).
    fn evict_frozen(&self) -> Option<u32> {
        let h = self.header();
        let metas = self.metas();
        let n = self.layout.nframes;
        let mut victim = None;
        if self.frozen_eviction() == FrozenEviction::Random
            && h.frozen_len.load(Ordering::Relaxed) > 0
        {
            // The paper: a random candidate, then a few more probes if it is not usable.
            for _ in 0..64 {
                let f = (self.next_random() % n as u64) as u32;
                if metas[f as usize].region.load(Ordering::Relaxed) == FROZEN {
                    victim = Some(f);
                    break;
                }
            }
        }
        if victim.is_none() {
            victim = self.pop_fifo(self.frozen_eviction() == FrozenEviction::Clock);
        }
        let frame = victim?;
        self.unmap(frame);
        let (partition, _) = self.partition_of(PageKey {
            tag: metas[frame as usize].tag.load(Ordering::Relaxed),
            page: metas[frame as usize].page.load(Ordering::Relaxed),
        });
        self.count(partition, Stat::FrozenEvicted);
        Some(frame)
    }

    /// The earliest-promoted frame still frozen under the same promotion (stale FIFO entries
    /// of frames that left the region are skipped).
    fn pop_fifo(&self, second_chance: bool) -> Option<u32> {
        let h = self.header();
        let fifo = self.fifo();
        let n = fifo.len() as u32;
        // With second chance, each live entry may be passed over once per call.
        let mut passes = h.fifo_len.load(Ordering::Relaxed);
        while h.fifo_len.load(Ordering::Relaxed) > 0 {
            let head = h.fifo_head.load(Ordering::Relaxed);
            let entry = fifo[head as usize].load(Ordering::Relaxed);
            h.fifo_head.store((head + 1) % n, Ordering::Relaxed);
            h.fifo_len.fetch_sub(1, Ordering::Relaxed);
            let (frame, seq) = ((entry >> 32) as u32, entry as u32);
            let meta = &self.metas()[frame as usize];
            if meta.region.load(Ordering::Relaxed) == FROZEN
                && meta.seq.load(Ordering::Relaxed) == seq
            {
                if second_chance && passes > 0 && meta.referenced.swap(0, Ordering::Relaxed) == 1 {
                    passes -= 1;
                    self.push_fifo(frame, seq);
                    continue;
                }
                return Some(frame);
            }
        }
        None
    }

    fn push_fifo(&self, frame: u32, seq: u32) {
        let h = self.header();
        let fifo = self.fifo();
        let n = fifo.len() as u32;
        if h.fifo_len.load(Ordering::Relaxed) == n {
            self.compact_fifo();
        }
        let len = h.fifo_len.load(Ordering::Relaxed);
        let head = h.fifo_head.load(Ordering::Relaxed);
        fifo[((head + len) % n) as usize]
            .store(((frame as u64) << 32) | seq as u64, Ordering::Relaxed);
        h.fifo_len.store(len + 1, Ordering::Relaxed);
    }

    /// Drops stale entries (frames dropped or evicted out of order) so the ring has room; it
    /// then holds at most one entry per frozen frame, fewer than the frames.
    fn compact_fifo(&self) {
        let h = self.header();
        let fifo = self.fifo();
        let n = fifo.len() as u32;
        let head = h.fifo_head.load(Ordering::Relaxed);
        let len = h.fifo_len.load(Ordering::Relaxed);
        let mut kept = 0u32;
        for i in 0..len {
            let entry = fifo[((head + i) % n) as usize].load(Ordering::Relaxed);
            let (frame, seq) = ((entry >> 32) as u32, entry as u32);
            let meta = &self.metas()[frame as usize];
            if meta.region.load(Ordering::Relaxed) == FROZEN
                && meta.seq.load(Ordering::Relaxed) == seq
            {
                fifo[((head + kept) % n) as usize].store(entry, Ordering::Relaxed);
                kept += 1;
            }
        }
        h.fifo_len.store(kept, Ordering::Relaxed);
    }

    /// Moves window frame `frame`, which held `key` when its hit was counted, into the frozen
    /// region, evicting from the frozen region first if it is full.
    fn promote(&self, frame: u32, key: PageKey) {
        let h = self.header();
        let _replacement = h.replacement.lock();
        let meta = &self.metas()[frame as usize];
        let still_there = meta.region.load(Ordering::Relaxed) == WINDOW
            && meta.tag.load(Ordering::Relaxed) == key.tag
            && meta.page.load(Ordering::Relaxed) == key.page;
        let capacity = h.frozen_capacity.load(Ordering::Relaxed);
        if !still_there || capacity == 0 {
            return;
        }
        if h.frozen_len.load(Ordering::Relaxed) >= capacity {
            // The evicted frame goes to the free stack: the window is one frame short now
            // and the next admission refills it.
            match self.evict_frozen() {
                Some(freed) => self.release_frame(freed),
                None => return,
            }
        }
        let seq = h
            .promote_seq
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1);
        meta.seq.store(seq, Ordering::Relaxed);
        meta.region.store(FROZEN, Ordering::Relaxed);
        h.frozen_len.fetch_add(1, Ordering::Relaxed);
        self.push_fifo(frame, seq);
        let (partition, _) = self.partition_of(key);
        self.count(partition, Stat::Promoted);
    }

    /// Frees every frame holding a page of `tag` (an index build that was dropped). Returns
    /// how many. Takes the replacement lock for one pass over the frames.
    pub fn purge(&self, tag: u64) -> usize {
        let _replacement = self.header().replacement.lock();
        let mut freed = 0;
        for (frame, meta) in self.metas().iter().enumerate() {
            if meta.region.load(Ordering::Relaxed) != FREE
                && meta.tag.load(Ordering::Relaxed) == tag
            {
                self.unmap(frame as u32);
                self.release_frame(frame as u32);
                freed += 1;
            }
        }
        freed
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

fn validate(config: &CacheConfig) -> Result<(), CacheError> {
    if !FRAME_SIZES.contains(&config.frame_size) {
        return Err(CacheError(format!(
            "cache frames are {FRAME_SIZES:?} bytes, not {}",
            config.frame_size
        )));
    }
    if config.frames == 0 || config.frames >= NO_FRAME as usize / 2 {
        return Err(CacheError(format!(
            "a cache needs between 1 and {} frames, got {}",
            NO_FRAME / 2 - 1,
            config.frames
        )));
    }
    if !(config.window_share > 0.0 && config.window_share <= 1.0) {
        return Err(CacheError(format!(
            "the window share must be in (0, 1], got {}",
            config.window_share
        )));
    }
    if config.insert_promote_hits == 0 || config.search_promote_hits == 0 {
        return Err(CacheError("promotion hit counts must be at least 1".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
