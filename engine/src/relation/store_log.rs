//! [`StoreLog`]: the write seam ([`IndexLog`]) over a [`PageStore`] without WAL, for
//! navis-bench and engine tests on plain files. Each change is applied page by page with the
//! functions of [`super::apply`] (read, apply, write back), in its footprint's order: bulk
//! pages first, then the buffer-managed pages that make them reachable.
//!
//! Growth: a change may name an edge page, a vertex (indirection, code and vector pages) or a
//! promotion offset beyond the runs the relation has. The kind's next runs are then appended
//! at the end of the relation (`extent::run_len` blocks each, zero blocks from
//! [`PageStore::extend`]), the extent map's pages that hold the new entries are rewritten (an
//! extra extent-map page is appended when the map needs one, and then the metapage rewritten
//! to list it), and only then the new blocks are formatted as empty pages of their kind.
//! That order keeps every state a crash can leave readable by [`super::RelationImage`]: a
//! mapped block that is still new reads as an empty page, while a formatted block outside
//! every run would be refused. (One window remains on plain files: a crash between appending
//! a new extent-map page and rewriting the metapage leaves that page unlisted. PostgreSQL
//! logs the two in one record; here the rewrite follows at once, and a relation needs a
//! second extent-map page only after 1018 runs.) PostgreSQL's implementation does the same
//! steps with an `EXTEND` record for the zero blocks.
//!
//! Concurrency: many threads call it at once. The engine's allocator hands each caller
//! distinct edge pages and vertex ids, but neighbouring vertices share indirection, code and
//! vector pages, so each read-modify-write holds a lock striped by block; edge pages are
//! written whole and need none. Growth is serialised by one mutex and publishes the grown
//! extent map (a `RwLock` readers hold only to look up a block) after the new blocks are
//! formatted, so nobody writes into a block that is still being formatted.

use super::apply::{self, Change, Geometry, PageRef};
use super::RelationImage;
use crate::pages::extent::{run_first_ordinal, run_len, ExtentMap};
use crate::pages::meta::{Meta, MAX_EXTENT_MAP_PAGES};
use crate::pages::{self, PageKind, BLOCK_SIZE};
use crate::storage::StorageError;
use crate::store::PageStore;
use crate::update::{EdgePageChange, IndexLog, VectorChange};
use crate::VertexId;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, RwLock};

/// Read-modify-write lock stripes (by block).
const STRIPES: usize = 64;

/// The write seam over a page store (module documentation).
pub struct StoreLog<S: PageStore> {
    store: S,
    geometry: Geometry,
    map: RwLock<ExtentMap>,
    /// Serialises growth; holds the metapage as last written.
    growth: Mutex<Meta>,
    stripes: Vec<Mutex<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves whole pages behind (each write is one block): continue.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: PageStore> StoreLog<S> {
    /// Opens the relation in `store` (metapage and extent map) for changes.
    pub fn open(store: S) -> Result<Self, StorageError> {
        let (meta, map) = RelationImage::read_layout(&store, Path::new("<relation>"))?;
        Ok(StoreLog {
            geometry: Geometry::of(&meta)?,
            store,
            map: RwLock::new(map),
            growth: Mutex::new(meta),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        })
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The extent map as it is now.
    pub fn extent_map(&self) -> ExtentMap {
        self.map.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The metapage as last written.
    pub fn meta(&self) -> Meta {
        lock(&self.growth).clone()
    }

    /// Applies `change` to every page of its footprint.
    pub fn apply(&self, change: &Change<'_>) -> Result<(), StorageError> {
        let mut page = vec![0u8; BLOCK_SIZE];
        for at in apply::footprint(&self.geometry, change) {
            let block = self.block(at)?;
            if at.kind == PageKind::Edge {
                // Written whole: what was there before is neither read nor checked.
                apply::apply(&self.geometry, change, &mut page, at, block)?;
                self.store.write_block(block, &page)?;
                continue;
            }
            let _stripe = lock(&self.stripes[block as usize % STRIPES]);
            self.store.read_block(block, &mut page)?;
            apply::apply(&self.geometry, change, &mut page, at, block)?;
            self.store.write_block(block, &page)?;
        }
        Ok(())
    }

    /// The block of `at`, growing the relation when it lies beyond its kind's runs.
    fn block(&self, at: PageRef) -> Result<u32, StorageError> {
        let known = self
            .map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .block(at.kind, at.ordinal);
        match known {
            Some(block) => Ok(block),
            None => self.grow(at),
        }
    }

    fn grow(&self, at: PageRef) -> Result<u32, StorageError> {
        let mut meta = lock(&self.growth);
        let mut map = self.extent_map();
        if let Some(block) = map.block(at.kind, at.ordinal) {
            return Ok(block); // another thread grew it meanwhile
        }
        let logged = map.allocation_log().len();
        let mut added = Vec::new();
        while map.capacity(at.kind) <= at.ordinal {
            let run = map.runs(at.kind).len() as u32;
            let first = self.store.extend(run_len(run))?;
            map.push_run(at.kind, first);
            added.push((run, first));
        }
        self.write_map(&mut meta, &map, logged)?;
        let mut page = vec![0u8; BLOCK_SIZE];
        for (run, first) in added {
            for i in 0..run_len(run) {
                let ordinal = run_first_ordinal(run) + i;
                let this = PageRef {
                    kind: at.kind,
                    ordinal,
                };
                apply::init_page(&self.geometry, &mut page, this, first + i);
                pages::seal(&mut page);
                self.store.write_block(first + i, &page)?;
            }
        }
        let block = map.block(at.kind, at.ordinal).expect("grown to hold it");
        *self.map.write().unwrap_or_else(|e| e.into_inner()) = map;
        Ok(block)
    }

    /// Rewrites the extent-map pages from the one holding entry `logged` (the first new run)
    /// on, appending pages the map now needs and then the metapage that lists them.
    fn write_map(
        &self,
        meta: &mut Meta,
        map: &ExtentMap,
        logged: usize,
    ) -> Result<(), StorageError> {
        for (block, page) in map_pages(meta, map, logged, || self.store.extend(1))? {
            self.store.write_block(block, &page)?;
        }
        Ok(())
    }
}

/// The pages growth rewrites, in write order: the extent-map pages from the one holding
/// entry `logged` (the first new run) on, with blocks from `new_block` for pages the map
/// needs beyond those `meta` lists (added to `meta`), and then, only when the list changed,
/// the metapage. Shared by every store's growth (`StoreLog`, PostgreSQL's `PgLog`).
pub fn map_pages(
    meta: &mut Meta,
    map: &ExtentMap,
    logged: usize,
    mut new_block: impl FnMut() -> Result<u32, StorageError>,
) -> Result<Vec<(u32, Vec<u8>)>, StorageError> {
    let needed = map.pages_needed();
    if needed > MAX_EXTENT_MAP_PAGES {
        return Err(StorageError::invalid(format!(
            "{needed} extent-map pages; the metapage lists at most {MAX_EXTENT_MAP_PAGES}"
        )));
    }
    let listed = meta.extent_map_pages.len();
    let mut out = Vec::new();
    let first = logged / crate::pages::extent::ENTRIES_PER_PAGE;
    for i in first.min(listed)..needed {
        let block = match meta.extent_map_pages.get(i) {
            Some(&b) => b,
            None => {
                let b = new_block()?;
                meta.extent_map_pages.push(b);
                b
            }
        };
        let mut page = vec![0u8; BLOCK_SIZE];
        pages::init(&mut page, PageKind::ExtentMap, block);
        pages::set_aux(&mut page, i as u32);
        map.encode_page(i, &mut page);
        pages::seal(&mut page);
        out.push((block, page));
    }
    if meta.extent_map_pages.len() != listed {
        let mut page = vec![0u8; BLOCK_SIZE];
        pages::init(&mut page, PageKind::Meta, 0);
        meta.encode(&mut page);
        pages::seal(&mut page);
        out.push((0, page));
    }
    Ok(out)
}

impl<S: PageStore> IndexLog for StoreLog<S> {
    fn edge_page(&self, change: &EdgePageChange<'_>) -> Result<(), StorageError> {
        self.apply(&Change::EdgePage(change))
    }

    fn vector(&self, change: &VectorChange<'_>) -> Result<(), StorageError> {
        self.apply(&Change::Vector(change))
    }

    fn delete_flags(&self, vertices: &[VertexId]) -> Result<(), StorageError> {
        self.apply(&Change::DeleteFlags(vertices))
    }

    fn free_vertices(&self, vertices: &[VertexId]) -> Result<(), StorageError> {
        self.apply(&Change::Free(vertices))
    }

    fn promote(&self, offset: u64, record: &[u8]) -> Result<(), StorageError> {
        self.apply(&Change::Promote { offset, record })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pages::extent::ENTRIES_PER_PAGE;
    use crate::relation::RelationWriter;
    use crate::storage::{BuildInput, BuildParams};
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Blocks that were never written read as zeros and cost nothing, so a relation can have
    /// a thousand runs in a test.
    #[derive(Default)]
    struct Sparse {
        blocks: Mutex<HashMap<u32, Vec<u8>>>,
        n: AtomicU32,
    }

    impl PageStore for Sparse {
        fn nblocks(&self) -> Result<u32, StorageError> {
            Ok(self.n.load(Ordering::Acquire))
        }
        fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
            match lock(&self.blocks).get(&block) {
                Some(page) => out.copy_from_slice(page),
                None => out.fill(0),
            }
            Ok(())
        }
        fn write_block(&self, block: u32, page: &[u8]) -> Result<(), StorageError> {
            assert!(block < self.n.load(Ordering::Acquire));
            lock(&self.blocks).insert(block, page.to_vec());
            Ok(())
        }
        fn extend(&self, blocks: u32) -> Result<u32, StorageError> {
            Ok(self.n.fetch_add(blocks, Ordering::AcqRel))
        }
        fn sync(&self) -> Result<(), StorageError> {
            Ok(())
        }
    }

    #[test]
    fn a_map_that_outgrows_its_page_gets_another_and_the_metapage_lists_it() {
        let store = Sparse::default();
        let input = BuildInput {
            dim: 4,
            metric: crate::Metric::L2,
            max_degree: 8,
            pq_bytes: 1,
            params: BuildParams {
                build_list: 16,
                alpha: 1.2,
                entrance_ratio: 0.01,
                entrance_degree: 8,
            },
            vectors: &[],
            heap_tids: &[],
            adjacency: &[],
            placement: &crate::placement::greedy_placement(&[], 203).unwrap(),
            pq_codes: &[],
            pq_codebook: &[1, 2, 3],
            entrance: &[4, 5],
        };
        RelationWriter::write(&store, &input, 0, 1).unwrap();
        let log = StoreLog::open(&store).unwrap();
        assert_eq!(log.meta().extent_map_pages.len(), 1);
        let mut map = log.extent_map();
        let logged = map.allocation_log().len();
        while map.allocation_log().len() <= ENTRIES_PER_PAGE + 5 {
            for kind in [PageKind::Edge, PageKind::Vector] {
                let run = map.runs(kind).len() as u32;
                map.push_run(kind, store.extend(run_len(run)).unwrap());
            }
        }
        let mut meta = log.meta();
        log.write_map(&mut meta, &map, logged).unwrap();
        assert_eq!(meta.extent_map_pages.len(), 2);
        let (read, back) = RelationImage::read_layout(&store, Path::new("<sparse>")).unwrap();
        assert_eq!(read, meta);
        assert_eq!(back, map);
    }
}
