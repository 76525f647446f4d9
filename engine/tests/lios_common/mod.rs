//! Shared by the LIOS tests (deferred back-edges, repair tasks): row numbers as heap TIDs, a
//! built index copied so that two paths start from the same graph, and an index opened ready
//! for writes.

use navis_engine::index::Index;
use navis_engine::storage::HeapTid;
use navis_engine::update::{recover, LocalLocks};
use std::path::Path;

pub fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

#[allow(dead_code)] // (not every test that shares this module maps rows back)
pub fn row_of(t: HeapTid) -> usize {
    t.block as usize * 100 + t.offset as usize - 1
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The index in `dir`, its allocator state derived, ready for writes.
pub fn open(dir: &Path, locks: &LocalLocks) -> Index {
    let index = Index::open(dir).unwrap();
    recover(index.files(), locks, 1).unwrap();
    index
}
