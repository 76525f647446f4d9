//! Frame replacement under the replacement lock: the free stack, CLOCK over the window,
//! the frozen region's eviction and FIFO, promotion, and purging a dropped index.

use super::stats::Stat;
use super::{FrozenEviction, PageCache, PageKey, FREE, FROZEN, WINDOW};
use std::sync::atomic::Ordering;

impl PageCache {
    /// A free frame, evicting one if there is none (replacement lock held). The frame is
    /// unmapped and marked free.
    pub(super) fn take_frame(&self) -> Option<u32> {
        let h = self.header();
        let free = h.free_len.load(Ordering::Relaxed);
        if free > 0 {
            h.free_len.store(free - 1, Ordering::Relaxed);
            return Some(self.free_stack()[free as usize - 1].load(Ordering::Relaxed));
        }
        self.evict_window().or_else(|| self.evict_frozen())
    }

    /// Returns `frame` to the free stack (replacement lock held, frame unmapped).
    pub(super) fn release_frame(&self, frame: u32) {
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
    pub(super) fn promote(&self, frame: u32, key: PageKey) {
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
}
