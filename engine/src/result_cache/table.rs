//! Open-addressing hash tables in a partition's words: u64 key -> u32 value, linear probing,
//! backward-shift deletion (no tombstones, so probes stay short however long the cache runs).
//! Key 0 marks an empty slot; callers never store it. Changed under the exclusive partition
//! lock only, read under the shared one.

use super::layout::TABLE_SLOT;
use super::words::Words;

#[derive(Clone, Copy)]
pub(super) struct Table<'a> {
    pub words: Words<'a>,
    pub at: usize,
    pub slots: usize,
}

/// A non-zero key for a u64 (a hash or a packed heap TID).
pub(super) fn key(x: u64) -> u64 {
    if x == 0 {
        1
    } else {
        x
    }
}

fn home(key: u64, slots: usize) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) as usize % slots
}

impl Table<'_> {
    fn slot(&self, i: usize) -> usize {
        self.at + i * TABLE_SLOT
    }

    fn key_at(&self, i: usize) -> u64 {
        self.words.u64(self.slot(i))
    }

    pub fn clear(&self) {
        self.words.fill(self.at, self.slots * TABLE_SLOT, 0);
    }

    /// Every value stored under `key` (a query hash may collide), through `f`; stops when `f`
    /// returns true.
    pub fn find(&self, key: u64, mut f: impl FnMut(u32) -> bool) -> Option<u32> {
        let mut i = home(key, self.slots);
        for _ in 0..self.slots {
            let k = self.key_at(i);
            if k == 0 {
                return None;
            }
            if k == key {
                let v = self.words.get(self.slot(i) + 2);
                if f(v) {
                    return Some(v);
                }
            }
            i = (i + 1) % self.slots;
        }
        None
    }

    /// Adds `key -> value`; false when the table is full (it is sized at twice its slots'
    /// owners, so only a bug fills it).
    pub fn insert(&self, key: u64, value: u32) -> bool {
        let mut i = home(key, self.slots);
        for _ in 0..self.slots {
            if self.key_at(i) == 0 {
                let s = self.slot(i);
                self.words.set(s + 2, value);
                self.words.set_u64(s, key);
                return true;
            }
            i = (i + 1) % self.slots;
        }
        false
    }

    /// Removes the pair `key -> value`; false when absent.
    pub fn remove(&self, key: u64, value: u32) -> bool {
        let mut i = home(key, self.slots);
        loop {
            let k = self.key_at(i);
            if k == 0 {
                return false;
            }
            if k == key && self.words.get(self.slot(i) + 2) == value {
                break;
            }
            i = (i + 1) % self.slots;
        }
        // Backward shift: move later members of the probe run into the hole when their home
        // does not lie cyclically in (hole, j].
        let mut hole = i;
        let mut j = (i + 1) % self.slots;
        loop {
            let k = self.key_at(j);
            if k == 0 {
                break;
            }
            let h = home(k, self.slots);
            let between = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !between {
                let (from, to) = (self.slot(j), self.slot(hole));
                self.words.set(to + 2, self.words.get(from + 2));
                self.words.set_u64(to, k);
                hole = j;
            }
            j = (j + 1) % self.slots;
        }
        self.words.set_u64(self.slot(hole), 0);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn agrees_with_a_hash_map_under_churn() {
        let mem: Vec<AtomicU32> = (0..64 * TABLE_SLOT).map(|_| AtomicU32::new(0)).collect();
        let t = Table {
            words: Words(&mem),
            at: 0,
            slots: 64,
        };
        let mut model: HashMap<u64, u32> = HashMap::new();
        let mut x = 12345u64;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct keys with the same low bits: long probe runs that wrap.
            let k = key((x % 40) * 64);
            if let Some(v) = model.remove(&k) {
                assert!(t.remove(k, v));
            } else if model.len() < 48 {
                assert!(t.insert(k, step));
                model.insert(k, step);
            }
            for (k, v) in &model {
                assert_eq!(t.find(*k, |_| true), Some(*v));
            }
        }
    }
}
