//! Shared by the tests of indexes grown by inserts (`grown_degree.rs`, `grown_reach.rs`):
//! row numbers as heap TIDs, and an index built in the relation layout, opened ready for
//! inserts as PostgreSQL opens it (a `StoreLog` for its changes, allocator state recovered).

use std::path::Path;
use std::sync::Arc;

use navis_engine::index::{Index, IndexParams};
use navis_engine::relation::{build_relation, open_index, StoreLog};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, LocalLocks};

pub fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

pub fn row_of(t: HeapTid) -> usize {
    t.block as usize * 100 + t.offset as usize - 1
}

/// An index over `rows` (row `i` gets `tid(i)`) built in `root/name`, opened for writes.
pub fn build_relation_index(
    root: &Path,
    name: &str,
    rows: &[f32],
    dim: usize,
    params: &IndexParams,
) -> (Index, LocalLocks) {
    let n = rows.len() / dim;
    let tids: Vec<HeapTid> = (0..n).map(tid).collect();
    let fork = root.join(name);
    let store = FileStore::create(&fork).unwrap();
    build_relation(&store, rows, &tids, params, 11, &|_, _, _| {}, &|| false).unwrap();
    let store: Arc<dyn PageStore> = Arc::new(store);
    let index = open_index(Arc::clone(&store), &fork, &root.join(format!("{name}.rt"))).unwrap();
    assert!(index.set_log(Arc::new(StoreLog::open(Arc::clone(&store)).unwrap())));
    let locks = LocalLocks::new(64);
    recover(index.files(), &locks, 1).unwrap();
    (index, locks)
}
