//! Views of a region: its size, formatting it, attaching to it, and addressing its arrays
//! and frames.

use super::region::{FrameMeta, Header, Layout, MapSlot, Partition, MAGIC, NO_FRAME, VERSION};
use super::{validate, CacheConfig, CacheError, FrozenEviction, PageCache, FRAME_SIZES, FREE};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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

    pub(super) fn header(&self) -> &Header {
        &self.slice::<Header>(0, 1)[0]
    }

    pub(super) fn partitions(&self) -> &[Partition] {
        self.slice(self.layout.partitions_at, self.layout.partitions)
    }

    pub(super) fn map(&self, partition: usize) -> &[MapSlot] {
        let s = self.layout.slots_per_partition;
        &self.slice::<MapSlot>(self.layout.map_at, self.layout.partitions * s)
            [partition * s..(partition + 1) * s]
    }

    pub(super) fn metas(&self) -> &[FrameMeta] {
        self.slice(self.layout.meta_at, self.layout.nframes)
    }

    pub(super) fn free_stack(&self) -> &[AtomicU32] {
        self.slice(self.layout.free_at, self.layout.nframes)
    }

    pub(super) fn fifo(&self) -> &[AtomicU64] {
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
    pub(super) fn copy_out(&self, frame: u32, out: &mut [u8]) {
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
    pub(super) fn copy_in(&self, frame: u32, data: &[u8]) {
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
}
