//! The cache's memory: one flat region that may be PostgreSQL shared memory (every backend
//! maps it at the same address after fork) or a heap allocation (tests, the bench binary).
//!
//! ```text
//! Header        configuration, the replacement lock and what it guards
//! Partition[P]  a lock, the write epoch and the statistics of each mapping partition
//! MapSlot[P*S]  per partition an open-addressing table (tag, page) -> frame
//! FrameMeta[N]  per frame: the page it holds, its region, reference bit, hit counts
//! free[N]       stack of free frames (under the replacement lock)
//! fifo[N]       frozen frames in promotion order, (frame, seq) packed in a u64
//! frames[N]     the page copies, `frame_size` bytes each (4 KiB side-file edge pages or
//!               8 KiB relation edge pages; one size per region, fixed when it is formatted)
//! ```
//!
//! Every field is an atomic or a [`SpinLock`], so any bit pattern is a valid value and the
//! whole region can be viewed through shared references while other processes change it.
//! The page bytes are plain memory guarded by the locking protocol in `cache/mod.rs`.

use super::spin::SpinLock;
use std::sync::atomic::{AtomicU32, AtomicU64};

pub(super) const MAGIC: u64 = 0x4e41_5649_5343_4143; // "NAVISCAC"
/// 3: the frame size is a field of the header (2 had 4 KiB frames only).
pub(super) const VERSION: u32 = 3;
/// The frame sizes a region may have: a side-file edge page (`storage::PAGE_SIZE`) or a
/// relation edge page (`pages::BLOCK_SIZE`).
pub const FRAME_SIZES: [usize; 2] = [crate::storage::PAGE_SIZE, crate::pages::BLOCK_SIZE];
/// A map slot or stack entry that holds no frame.
pub(super) const NO_FRAME: u32 = u32::MAX;
/// Statistics counters kept per partition (see `Stat`).
pub(super) const STATS: usize = 15;

#[repr(C)]
pub(super) struct Header {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    /// Bytes per frame (one of [`FRAME_SIZES`]): a process that attaches learns it here.
    pub frame_size: AtomicU32,
    pub nframes: AtomicU32,
    pub partitions: AtomicU32,
    pub slots_per_partition: AtomicU32,
    pub frozen_capacity: AtomicU32,
    pub policy: AtomicU32,
    pub insert_promote_hits: AtomicU32,
    pub search_promote_hits: AtomicU32,
    pub frozen_eviction: AtomicU32,
    /// Guards frame ownership: the free stack, the clock hand, the frozen FIFO, and every
    /// change of a frame's page or region.
    pub replacement: SpinLock,
    pub free_len: AtomicU32,
    pub clock_hand: AtomicU32,
    pub frozen_len: AtomicU32,
    pub fifo_head: AtomicU32,
    pub fifo_len: AtomicU32,
    pub promote_seq: AtomicU32,
    pub rng: AtomicU64,
}

/// One mapping partition. Cache-line aligned so that partitions never share a line.
#[repr(C, align(64))]
pub(super) struct Partition {
    pub lock: SpinLock,
    /// Bumped (under `lock`) by every write-through and drop of a page of this partition; a
    /// page read from disk is admitted only if the epoch did not move while it was read.
    pub epoch: AtomicU32,
    pub stats: [AtomicU64; STATS],
}

#[repr(C)]
pub(super) struct MapSlot {
    pub tag: AtomicU64,
    pub page: AtomicU32,
    pub frame: AtomicU32,
}

#[repr(C)]
pub(super) struct FrameMeta {
    pub tag: AtomicU64,
    pub page: AtomicU32,
    pub region: AtomicU32,
    pub referenced: AtomicU32,
    pub insert_hits: AtomicU32,
    pub search_hits: AtomicU32,
    /// Promotion sequence number while frozen (matches its FIFO entry).
    pub seq: AtomicU32,
}

/// Byte offsets of the parts of a region with `nframes` frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub frame_size: usize,
    pub nframes: usize,
    pub partitions: usize,
    pub slots_per_partition: usize,
    pub partitions_at: usize,
    pub map_at: usize,
    pub meta_at: usize,
    pub free_at: usize,
    pub fifo_at: usize,
    pub frames_at: usize,
    pub total: usize,
}

/// Mapping partitions: enough that concurrent backends rarely meet on one lock.
const PARTITIONS: usize = 128;

fn align_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

impl Layout {
    pub fn for_frames(frame_size: usize, nframes: usize) -> Layout {
        let partitions = PARTITIONS;
        // Load factor at most ~1/4 on average; uneven hashing still leaves room.
        let slots_per_partition = (4 * nframes / partitions + 16).next_power_of_two();
        Self::with(frame_size, nframes, partitions, slots_per_partition)
    }

    pub fn with(
        frame_size: usize,
        nframes: usize,
        partitions: usize,
        slots_per_partition: usize,
    ) -> Layout {
        let line = 64;
        let header = std::mem::size_of::<Header>();
        let partitions_at = align_up(header, line);
        let map_at = partitions_at + partitions * std::mem::size_of::<Partition>();
        let map_at = align_up(map_at, line);
        let meta_at = align_up(
            map_at + partitions * slots_per_partition * std::mem::size_of::<MapSlot>(),
            line,
        );
        let free_at = align_up(meta_at + nframes * std::mem::size_of::<FrameMeta>(), line);
        let fifo_at = align_up(free_at + nframes * 4, line);
        // Frames start on a frame boundary (of the region), as pages do in a file.
        let frames_at = align_up(fifo_at + nframes * 8, frame_size);
        let total = frames_at + nframes * frame_size;
        Layout {
            frame_size,
            nframes,
            partitions,
            slots_per_partition,
            partitions_at,
            map_at,
            meta_at,
            free_at,
            fifo_at,
            frames_at,
            total,
        }
    }

    /// The most frames of `frame_size` bytes a region of `bytes` bytes holds.
    pub fn frames_for_bytes(frame_size: usize, bytes: usize) -> usize {
        // `total` grows with n (in steps where the map doubles): binary search.
        let (mut lo, mut hi) = (0usize, bytes / frame_size + 1);
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            if Self::for_frames(frame_size, mid).total <= bytes {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }
}
