//! The partitioned page map: a key hashed to its partition and home slot, linear probing
//! without tombstones.

use super::region::NO_FRAME;
use super::{PageCache, PageKey};
use std::sync::atomic::Ordering;

impl PageCache {
    fn hash(key: PageKey) -> u64 {
        let mut h = key.tag ^ (key.page as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    pub(super) fn partition_of(&self, key: PageKey) -> (usize, usize) {
        let h = Self::hash(key);
        let partition = ((h >> 40) as usize) % self.layout.partitions;
        let start = (h as usize) & (self.layout.slots_per_partition - 1);
        (partition, start)
    }

    /// The frame mapped to `key` (the caller holds the partition lock).
    pub(super) fn find(
        &self,
        partition: usize,
        start: usize,
        key: PageKey,
    ) -> Option<(usize, u32)> {
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
    pub(super) fn map_insert(
        &self,
        partition: usize,
        start: usize,
        key: PageKey,
        frame: u32,
    ) -> bool {
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
    pub(super) fn map_remove(&self, partition: usize, mut at: usize) {
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
}
