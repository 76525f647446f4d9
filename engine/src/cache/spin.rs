//! A spin lock that works across processes: one `AtomicU32` in shared memory.
//!
//! PostgreSQL's LWLocks would need the server, and `parking_lot`/`std` locks keep their wait
//! queues in process-local memory, so neither can guard a structure that several backends map.
//! Every critical section of the cache is a few hundred nanoseconds of pure Rust (a hash probe
//! and at most one 4 KiB copy, no system call, no PostgreSQL call, nothing that can raise an
//! ERROR), so spinning with a yield after a short while is the right tool, as PostgreSQL's own
//! `s_lock` does for its spinlocks.

use std::sync::atomic::{AtomicU32, Ordering};

/// The lock word. Zero is unlocked, so zeroed memory is a valid unlocked lock.
#[repr(transparent)]
pub struct SpinLock(AtomicU32);

impl Default for SpinLock {
    fn default() -> Self {
        SpinLock(AtomicU32::new(0))
    }
}

impl SpinLock {
    pub fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        loop {
            if self
                .0
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinGuard(&self.0);
            }
            // Wait on a plain load, not on the CAS, to keep the cache line shared.
            while self.0.load(Ordering::Relaxed) != 0 {
                spins += 1;
                if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    // The holder may have been descheduled: let it run.
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Resets the word at initialisation (shared memory may hold garbage).
    pub fn init(&self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Releases the lock when dropped, also on unwinding.
pub struct SpinGuard<'a>(&'a AtomicU32);

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_concurrent_holders() {
        struct Shared {
            lock: SpinLock,
            // Updated with separate load and store: lost updates would show without the lock.
            count: AtomicU32,
        }
        let shared = Arc::new(Shared {
            lock: SpinLock(AtomicU32::new(0)),
            count: AtomicU32::new(0),
        });
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = Arc::clone(&shared);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let _g = s.lock.lock();
                        let c = s.count.load(Ordering::Relaxed);
                        s.count.store(c + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(shared.count.load(Ordering::Relaxed), 80_000);
    }
}
