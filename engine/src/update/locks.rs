//! The locks writers take, supplied by the caller: PostgreSQL's LWLocks in the server (they
//! are released by the transaction machinery on ERROR and show up as wait events), plain
//! in-process locks in tests and tools. Readers never lock (DESIGN.md §6).
//!
//! Two kinds, always taken in this order, so no two writers can deadlock:
//! 1. vertex stripes: whoever rewrites a vertex's edge list holds the stripe of that vertex.
//!    A writer that rewrites several lists takes all their stripes at once, in ascending
//!    stripe order ([`StripeGuard`]);
//! 2. the index's allocator lock: free lists, high-water marks, file growth, recovery. It is
//!    held for a few stores at a time and never while waiting for a stripe.

use crate::VertexId;
use std::sync::atomic::{AtomicBool, Ordering};

/// Exclusive locks for one index. Implementations must block until the lock is free; the
/// engine pairs every `lock_*` with the matching `unlock_*` (through the guards below), also
/// when it returns an error or unwinds.
pub trait WriteLocks: Sync {
    fn stripe_count(&self) -> usize;
    fn lock_stripe(&self, stripe: usize);
    /// Takes the stripe if it is free, without waiting; true when taken.
    fn try_lock_stripe(&self, stripe: usize) -> bool;
    fn unlock_stripe(&self, stripe: usize);
    fn lock_allocator(&self);
    fn unlock_allocator(&self);

    fn stripe_of(&self, v: VertexId) -> usize {
        // Multiplicative hashing spreads neighbouring ids (which are often locked together)
        // over different stripes.
        (v.wrapping_mul(0x9E37_79B1) as usize) % self.stripe_count().max(1)
    }
}

/// The stripes of a set of vertices, locked in ascending order; unlocked on drop.
pub struct StripeGuard<'a> {
    locks: &'a dyn WriteLocks,
    stripes: Vec<usize>,
}

impl<'a> StripeGuard<'a> {
    pub fn lock(locks: &'a dyn WriteLocks, vertices: &[VertexId]) -> StripeGuard<'a> {
        let mut stripes: Vec<usize> = vertices.iter().map(|&v| locks.stripe_of(v)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        for &s in &stripes {
            locks.lock_stripe(s);
        }
        StripeGuard { locks, stripes }
    }
}

impl<'a> StripeGuard<'a> {
    /// The stripes of `vertices` if every one is free now; `None` (holding none) otherwise.
    /// Never waits, so it cannot deadlock whatever the caller holds.
    pub fn try_lock(locks: &'a dyn WriteLocks, vertices: &[VertexId]) -> Option<StripeGuard<'a>> {
        let mut stripes: Vec<usize> = vertices.iter().map(|&v| locks.stripe_of(v)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        for (taken, &s) in stripes.iter().enumerate() {
            if !locks.try_lock_stripe(s) {
                for &held in stripes[..taken].iter().rev() {
                    locks.unlock_stripe(held);
                }
                return None;
            }
        }
        Some(StripeGuard { locks, stripes })
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        for &s in self.stripes.iter().rev() {
            self.locks.unlock_stripe(s);
        }
    }
}

/// The allocator lock, unlocked on drop.
pub struct AllocatorGuard<'a> {
    locks: &'a dyn WriteLocks,
}

impl<'a> AllocatorGuard<'a> {
    pub fn lock(locks: &'a dyn WriteLocks) -> AllocatorGuard<'a> {
        locks.lock_allocator();
        AllocatorGuard { locks }
    }
}

impl Drop for AllocatorGuard<'_> {
    fn drop(&mut self) {
        self.locks.unlock_allocator();
    }
}

/// In-process locks for tests, tools and single-process use: spin-then-yield flags. Only
/// threads of one process see them; the server supplies LWLocks instead.
pub struct LocalLocks {
    stripes: Vec<AtomicBool>,
    allocator: AtomicBool,
}

impl LocalLocks {
    pub fn new(stripes: usize) -> LocalLocks {
        LocalLocks {
            stripes: (0..stripes.max(1))
                .map(|_| AtomicBool::new(false))
                .collect(),
            allocator: AtomicBool::new(false),
        }
    }
}

impl Default for LocalLocks {
    fn default() -> Self {
        LocalLocks::new(1024)
    }
}

fn acquire(flag: &AtomicBool) {
    let mut spins = 0u32;
    while flag
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

impl WriteLocks for LocalLocks {
    fn stripe_count(&self) -> usize {
        self.stripes.len()
    }

    fn lock_stripe(&self, stripe: usize) {
        acquire(&self.stripes[stripe]);
    }

    fn try_lock_stripe(&self, stripe: usize) -> bool {
        self.stripes[stripe]
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    fn unlock_stripe(&self, stripe: usize) {
        self.stripes[stripe].store(false, Ordering::Release);
    }

    fn lock_allocator(&self) {
        acquire(&self.allocator);
    }

    fn unlock_allocator(&self) {
        self.allocator.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn stripe_guards_exclude_each_other_and_never_deadlock() {
        let locks = LocalLocks::new(8);
        let counter = AtomicU64::new(0);
        let in_section = AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (locks, counter, in_section) = (&locks, &counter, &in_section);
                s.spawn(move || {
                    for i in 0..2000u32 {
                        // Overlapping sets in different orders: ascending stripe order
                        // makes this deadlock-free.
                        let set = [i % 13, (i + t) % 7, 3];
                        let _g = StripeGuard::lock(locks, &set);
                        assert!(!in_section.swap(true, Ordering::AcqRel));
                        counter.fetch_add(1, Ordering::Relaxed);
                        in_section.store(false, Ordering::Release);
                    }
                });
            }
        });
        assert_eq!(counter.load(Ordering::Relaxed), 8000);
        // Every stripe was released.
        for s in 0..8 {
            assert!(!locks.stripes[s].load(Ordering::Relaxed));
        }
    }
}
