//! Shared by the space tests: an index in either layout (side files, or a relation written
//! through `StoreLog`, built by `relation_common`), its size, and recall@10 against brute force.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use navis_engine::dataset::{brute_force_knn, recall_at_k};
use navis_engine::index::{build_index, CasrSetting, Index, IndexParams};
use navis_engine::search::{CasrMode, SearchParams};
use navis_engine::storage::{Field, HeapTid};
use navis_engine::store::PageStore;
use navis_engine::update::{recover, InsertParams, LocalLocks};
use navis_engine::{Metric, VertexId};

use crate::relation_common::{build_relation_index, row_of, tid};

pub const EPOCH: u64 = 11;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Side,
    Relation,
}

pub fn params(max_degree: usize) -> IndexParams {
    IndexParams {
        metric: Metric::L2,
        max_degree,
        build_list: 64,
        pq_bytes: Some(8),
        // One build thread: the graph a threaded build makes differs from run to run, and
        // with it how many of the last edge run's pages the reinserts fill (118-122 of 128 in
        // use over runs at 2 threads; once 129, a new 1 MiB run and bytes x1.44, a failure).
        // The space bounds are about inserts and VACUUM, so they are measured on one graph.
        threads: 1,
        ..IndexParams::default()
    }
}

/// An opened index in one layout, with what its size is measured on.
pub struct Fixture {
    pub index: Index,
    pub locks: LocalLocks,
    pub dir: PathBuf,
    pub store: Option<Arc<dyn PageStore>>,
    pub dim: usize,
}

/// The size of an index. `edge_pages` is the edge file's high-water mark (pages in use plus
/// free pages): neither layout ever gives pages back to the file system.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Size {
    pub edge_pages: u32,
    pub free_pages: u32,
    pub vector_ids: u32,
    /// Side files: the directory's durable files. Relation: its blocks × 8 KiB.
    pub bytes: u64,
}

impl Size {
    pub fn in_use(&self) -> u32 {
        self.edge_pages - self.free_pages
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} edge pages ({} in use, {} free), {} vector ids, {:.2} MB",
            self.edge_pages,
            self.in_use(),
            self.free_pages,
            self.vector_ids,
            self.bytes as f64 / 1e6
        )
    }
}

/// `after / before` for each of the allocated edge pages, the edge pages in use and the bytes.
pub fn ratios(after: Size, before: Size) -> (f64, f64, f64) {
    (
        after.edge_pages as f64 / before.edge_pages as f64,
        after.in_use() as f64 / before.in_use() as f64,
        after.bytes as f64 / before.bytes as f64,
    )
}

/// The durable files of a side directory: all but `entrance.shm`, the shared entrance graph
/// that every server lifetime rebuilds from `entrance.bin` and `entrance.log` (a relation
/// keeps it outside the relation too).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "entrance.shm")
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// The side directory's files and their sizes, for reports.
pub fn dir_listing(dir: &Path) -> String {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    files.sort();
    files
        .iter()
        .map(|(n, l)| format!("{n} {l}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Fixture {
    /// Builds over `rows` (row `i` gets `tid(first + i)`) in `root/name`.
    pub fn build(
        layout: Layout,
        root: &Path,
        name: &str,
        rows: &[f32],
        dim: usize,
        first: usize,
        max_degree: usize,
    ) -> Fixture {
        match layout {
            Layout::Side => {
                let n = rows.len() / dim;
                let tids: Vec<HeapTid> = (first..first + n).map(tid).collect();
                let dir = root.join(name);
                build_index(
                    &dir,
                    rows,
                    &tids,
                    &params(max_degree),
                    &|_, _, _| {},
                    &|| false,
                )
                .unwrap();
                let index = Index::open(&dir).unwrap();
                let locks = LocalLocks::new(64);
                recover(index.files(), &locks, EPOCH).unwrap();
                Fixture {
                    index,
                    locks,
                    dir,
                    store: None,
                    dim,
                }
            }
            Layout::Relation => {
                let opened =
                    build_relation_index(root, name, rows, dim, first, &params(max_degree), EPOCH);
                Fixture {
                    index: opened.index,
                    locks: opened.locks,
                    dir: opened.fork,
                    store: Some(opened.store),
                    dim,
                }
            }
        }
    }

    pub fn size(&self) -> Size {
        let state = self.index.files().state();
        let bytes = match &self.store {
            Some(store) => u64::from(store.nblocks().unwrap()) * 8192,
            None => dir_bytes(&self.dir),
        };
        Size {
            edge_pages: state.get(Field::EdgePages),
            free_pages: state.get(Field::FreePageCount),
            vector_ids: state.get(Field::NextVertex),
            bytes,
        }
    }

    /// Inserts `data`'s rows `rows` with their own row numbers as TIDs.
    pub fn insert(&self, data: &[f32], rows: std::ops::Range<usize>) {
        let dim = self.dim;
        let mut reader = self.index.reader().unwrap();
        let (mut written, mut absorbed, mut pages, n) = (0, 0, 0, rows.len());
        for row in rows {
            let r = self
                .index
                .insert(
                    &mut reader,
                    &self.locks,
                    &data[row * dim..(row + 1) * dim],
                    tid(row),
                    InsertParams::default(),
                )
                .unwrap();
            written += r.lists_written;
            absorbed += r.lists_absorbed;
            pages += r.pages_written;
        }
        eprintln!(
            "{n} inserts: {:.1} lists changed, {:.1} absorbed, {:.2} pages written per insert",
            written as f64 / n as f64,
            absorbed as f64 / n as f64,
            pages as f64 / n as f64
        );
    }

    /// VACUUM as `amvacuumcleanup` runs it: consolidation once anything is deleted
    /// (`consolidate_threshold` 0), else the reconnect pass.
    pub fn vacuum(&self) {
        if self.index.deleted_len() > 0 {
            self.index.consolidate(&self.locks, &|| false).unwrap();
        } else {
            self.index.reconnect(&self.locks, &|| false).unwrap();
        }
    }

    /// recall@10 of `queries` against the brute-force top 10 of `data`'s rows `live`.
    pub fn recall(&self, data: &[f32], live: std::ops::Range<usize>, queries: &[f32]) -> f64 {
        let dim = self.dim;
        let rows = &data[live.start * dim..live.end * dim];
        let truth: Vec<Vec<VertexId>> = brute_force_knn(rows, dim, queries, 10, Metric::L2, 2)
            .into_iter()
            .map(|l| l.into_iter().map(|i| i + live.start as VertexId).collect())
            .collect();
        let p = SearchParams {
            k: 10,
            list: self.index.widened_list(48),
            casr: CasrMode::Off,
            ..SearchParams::default()
        };
        let mut reader = self.index.reader().unwrap();
        let found: Vec<Vec<VertexId>> = queries
            .chunks_exact(dim)
            .map(|q| {
                let (hits, _) = self
                    .index
                    .search(&mut reader, q, p, CasrSetting::Off)
                    .unwrap();
                hits.iter().map(|h| row_of(h.tid) as VertexId).collect()
            })
            .collect();
        recall_at_k(&found, &truth, 10)
    }
}
