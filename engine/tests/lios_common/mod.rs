//! Shared by the LIOS tests (deferred back-edges, repair tasks): row numbers as heap TIDs, a
//! built index copied so that two paths start from the same graph, and an index opened ready
//! for writes.

use navis_engine::index::{Index, IndexParams};
use navis_engine::storage::HeapTid;
use navis_engine::update::write::read_current_list;
use navis_engine::update::{recover, LocalLocks};
use navis_engine::{Metric, VertexId};
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

/// Build parameters with a small degree, so that back-edges and repairs overflow lists and
/// re-prune often.
#[allow(dead_code)] // (the sliced-task tests use it)
pub fn small_degree_params() -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree: 12,
        build_list: 32,
        pq_bytes: Some(8),
        threads: 2,
        ..IndexParams::default()
    }
}

/// `v`'s current edge list; `None` for a vertex without an entry.
#[allow(dead_code)] // (the sliced-task tests use it)
pub fn current_list(index: &Index, v: VertexId) -> Option<Vec<VertexId>> {
    let files = index.files();
    let entry = files.indirection().entry(v)?;
    let mut buf = vec![0u8; files.edge_layout().page_size()];
    Some(read_current_list(files, v, entry.edge, &mut buf).unwrap())
}
