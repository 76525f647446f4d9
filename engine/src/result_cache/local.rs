//! The cache outside PostgreSQL: a region on the heap and process-local locks (tests, the
//! benchmark binary).

use super::{PartitionLocks, ResultCache, MAX_PARTITIONS};
use std::sync::atomic::AtomicU64;

/// A region on the heap, for tests and the benchmark binary.
pub struct HeapRegion {
    _mem: Vec<AtomicU64>,
    pub cache: ResultCache,
}

impl HeapRegion {
    pub fn new(bytes: usize, partitions: usize) -> Option<HeapRegion> {
        let mut mem: Vec<AtomicU64> = (0..bytes.div_ceil(64) * 8 + 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        let base = mem.as_mut_ptr() as *mut u8;
        let aligned = base.wrapping_add(base.align_offset(64));
        // SAFETY: `aligned..aligned + bytes` lies in `mem`, which lives as long as the
        // region and is used through nothing else.
        let cache = unsafe { ResultCache::init_at(aligned, bytes, partitions) }?;
        Some(HeapRegion { _mem: mem, cache })
    }
}

/// Partition locks for tests and single-process use: one reader-writer lock per partition.
pub struct LocalLocks(Vec<std::sync::RwLock<()>>);

impl Default for LocalLocks {
    fn default() -> Self {
        LocalLocks((0..MAX_PARTITIONS).map(|_| Default::default()).collect())
    }
}

impl PartitionLocks for LocalLocks {
    fn shared(&self, p: usize, f: &mut dyn FnMut()) {
        let _g = self.0[p].read().unwrap_or_else(|e| e.into_inner());
        f()
    }

    fn exclusive(&self, p: usize, f: &mut dyn FnMut()) {
        let _g = self.0[p].write().unwrap_or_else(|e| e.into_inner());
        f()
    }

    fn try_exclusive(&self, p: usize, f: &mut dyn FnMut()) -> bool {
        match self.0[p].try_write() {
            Ok(_g) => {
                f();
                true
            }
            Err(_) => false,
        }
    }
}
