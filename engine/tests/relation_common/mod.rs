//! Shared by the tests that grow or shrink an index in the relation layout (`space.rs`,
//! `grown_degree.rs`, `grown_reach.rs`): row numbers as heap TIDs, and an index built in the
//! relation layout, opened ready for inserts as PostgreSQL opens it (a `StoreLog` for its
//! changes, allocator state recovered), and the sizes the measurements take from the
//! environment.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use navis_engine::index::{Index, IndexParams};
use navis_engine::relation::{build_relation, open_index, StoreLog};
use navis_engine::storage::HeapTid;
use navis_engine::store::{FileStore, PageStore};
use navis_engine::update::{recover, LocalLocks};

/// The number in environment variable `name`, or `default` when it is unset or not a number.
#[allow(dead_code)] // (the measurements read it; grown_degree.rs is a fixed test)
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn tid(row: usize) -> HeapTid {
    HeapTid {
        block: row as u32 / 100,
        offset: (row % 100 + 1) as u16,
    }
}

pub fn row_of(t: HeapTid) -> usize {
    t.block as usize * 100 + t.offset as usize - 1
}

/// A relation index opened for writes, with the store its size is read from.
pub struct OpenedRelation {
    pub index: Index,
    pub locks: LocalLocks,
    /// The relation's file (its fork).
    #[allow(dead_code)] // (the space tests measure the relation; the grown ones do not)
    pub fork: PathBuf,
    #[allow(dead_code)] // (as `fork`)
    pub store: Arc<dyn PageStore>,
}

/// An index over `rows` (row `i` gets `tid(first_row + i)`) built in `root/name`, opened for
/// writes, its allocator state recovered in `epoch`.
pub fn build_relation_index(
    root: &Path,
    name: &str,
    rows: &[f32],
    dim: usize,
    first_row: usize,
    params: &IndexParams,
    epoch: u64,
) -> OpenedRelation {
    let n = rows.len() / dim;
    let tids: Vec<HeapTid> = (first_row..first_row + n).map(tid).collect();
    let fork = root.join(name);
    let store = FileStore::create(&fork).unwrap();
    build_relation(&store, rows, &tids, params, 11, &|_, _, _| {}, &|| false).unwrap();
    let store: Arc<dyn PageStore> = Arc::new(store);
    let runtime = root.join(format!("{name}.runtime"));
    let index = open_index(Arc::clone(&store), &fork, &runtime).unwrap();
    assert!(index.set_log(Arc::new(StoreLog::open(Arc::clone(&store)).unwrap())));
    let locks = LocalLocks::new(64);
    recover(index.files(), &locks, epoch).unwrap();
    OpenedRelation {
        index,
        locks,
        fork,
        store,
    }
}
