//! A partition's memory seen as 32-bit words.
//!
//! Every word is an `AtomicU32`, so any bit pattern is a valid value and the region can be
//! viewed through shared references while other processes change it. The partition lock
//! orders the accesses (`Relaxed` loads and stores under a lock are enough: taking and
//! releasing it are the barriers); the one field changed under the shared lock, an entry's
//! threshold, is updated with a compare-and-swap.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

#[derive(Clone, Copy)]
pub(super) struct Words<'a>(pub &'a [AtomicU32]);

impl<'a> Words<'a> {
    #[inline]
    pub fn get(self, i: usize) -> u32 {
        self.0[i].load(Relaxed)
    }

    #[inline]
    pub fn set(self, i: usize, v: u32) {
        self.0[i].store(v, Relaxed)
    }

    #[inline]
    pub fn f32(self, i: usize) -> f32 {
        f32::from_bits(self.get(i))
    }

    #[inline]
    pub fn set_f32(self, i: usize, v: f32) {
        self.set(i, v.to_bits())
    }

    /// A u64 kept in two words, low word first.
    #[inline]
    pub fn u64(self, i: usize) -> u64 {
        self.get(i) as u64 | (self.get(i + 1) as u64) << 32
    }

    #[inline]
    pub fn set_u64(self, i: usize, v: u64) {
        self.set(i, v as u32);
        self.set(i + 1, (v >> 32) as u32);
    }

    /// Applies `f` to the f32 in word `i` atomically (a compare-and-swap loop).
    pub fn update_f32(self, i: usize, f: impl Fn(f32) -> f32) -> f32 {
        let prev = self.0[i]
            .fetch_update(Relaxed, Relaxed, |bits| {
                Some(f(f32::from_bits(bits)).to_bits())
            })
            .expect("the closure always returns Some");
        f(f32::from_bits(prev))
    }

    /// The floats at words `i..i + len`, read in place.
    ///
    /// Every caller holds the partition lock, and words are written only under its exclusive
    /// mode, never while a view of them is alive (the body writes a vector only into a slot
    /// it is filling or has just allocated), so no write races with these reads.
    #[inline]
    pub fn floats(self, i: usize, len: usize) -> &'a [f32] {
        let words = &self.0[i..i + len];
        // SAFETY: AtomicU32 has the size, alignment and bit validity of f32, and by the rule
        // above nothing writes these words while the returned slice lives.
        unsafe { std::slice::from_raw_parts(words.as_ptr() as *const f32, len) }
    }

    pub fn write_floats(self, i: usize, v: &[f32]) {
        for (w, x) in self.0[i..i + v.len()].iter().zip(v) {
            w.store(x.to_bits(), Relaxed);
        }
    }

    /// Whether the floats at word `i` are bit for bit `v`.
    pub fn floats_equal(self, i: usize, v: &[f32]) -> bool {
        self.0[i..i + v.len()]
            .iter()
            .zip(v)
            .all(|(w, x)| w.load(Relaxed) == x.to_bits())
    }

    pub fn fill(self, from: usize, len: usize, v: u32) {
        for w in &self.0[from..from + len] {
            w.store(v, Relaxed);
        }
    }
}
