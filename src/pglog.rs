//! The engine's write seam on a PostgreSQL relation (RFC 0001 §5, §10): [`PgLog`] makes every
//! change of an open index durable in the relation's pages and in WAL, and [`PgBufStore`]
//! reads a committed relation's pages through shared_buffers for the engine (opening an
//! index, re-reading the extent map).
//!
//! Each change is one `CHANGE` record (`wal::change`) whose block references are every page
//! it touches: the buffer-managed pages (indirection, codes, promotions) changed in their
//! buffers, and the bulk pages (a fresh edge page, always logged whole; the vector pages of a
//! new vertex's slot, read-modify-written under a page lock since neighbouring slots share
//! them, logged whole only on their first change after a checkpoint, as PostgreSQL decides
//! for buffers) written around shared_buffers right after the record (RFC 0001 §5). Pages are
//! computed outside the critical section (the engine's functions can fail on a corrupt page)
//! and only copied into the buffers inside it; redo runs the same engine functions.

//! Growth: a change that names a page beyond the extent map's runs grows the relation under
//! the relation extension lock: zero blocks (`EXTEND`), then the extent-map pages (and the
//! metapage when the map needs another page) rewritten in their buffers and logged as
//! full-page images. New pages stay zero until a change formats them (`apply` formats a new
//! page first), so growth writes no page contents of its own.
//!
//! Both types may only be used on the backend's own thread: they refuse compute threads.

use crate::relstore::{self, BLOCK_SIZE};
use crate::wal;
use navis_engine::pages::extent::{run_len, ExtentMap};
use navis_engine::pages::meta::Meta;
use navis_engine::pages::{self, PageKind};
use navis_engine::relation::apply::{self, Change, Geometry, PageRef};
use navis_engine::relation::{map_pages, RelationImage};
use navis_engine::storage::StorageError;
use navis_engine::store::PageStore;
use navis_engine::update::{EdgePageChange, IndexLog, VectorChange};
use navis_engine::VertexId;
use pgrx::pg_sys;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

fn check_thread(owner: ThreadId) -> Result<(), StorageError> {
    if std::thread::current().id() == owner {
        Ok(())
    } else {
        Err(StorageError::invalid(
            "a navis relation was used from a compute thread",
        ))
    }
}

/// Reads of a committed relation's pages for the engine (buffer-managed pages through
/// shared_buffers, bulk pages from disk); writes are refused (they go through [`PgLog`]).
pub struct PgBufStore {
    /// The open relation of the current access-method call ([`PgBufStore::bind`]); null
    /// between calls, since a relcache entry may move once its relation is closed.
    rel: AtomicPtr<pg_sys::RelationData>,
    owner: ThreadId,
}

// SAFETY: the relation pointer is dereferenced only on the thread that created the store
// (checked by every method), so sharing the value cannot make PostgreSQL run off it.
unsafe impl Send for PgBufStore {}
// SAFETY: as above; there is no mutable state.
unsafe impl Sync for PgBufStore {}

impl PgBufStore {
    /// A store over `rel`'s main fork; `rel` must stay open while the store is used.
    pub fn new(rel: pg_sys::Relation) -> PgBufStore {
        PgBufStore {
            rel: AtomicPtr::new(rel),
            owner: std::thread::current().id(),
        }
    }

    /// Points the store at `rel` (the same relation, opened for the current call) and
    /// returns what it pointed at before, for [`PgBufStore::bind`]'s caller to restore.
    pub fn bind(&self, rel: pg_sys::Relation) -> pg_sys::Relation {
        self.rel.swap(rel, Ordering::AcqRel)
    }

    /// The relation bound now, or an error outside an access-method call.
    fn rel(&self) -> Result<pg_sys::Relation, StorageError> {
        check_thread(self.owner)?;
        let rel = self.rel.load(Ordering::Acquire);
        if rel.is_null() {
            return Err(StorageError::invalid(
                "a navis relation was used outside an access-method call",
            ));
        }
        Ok(rel)
    }
}

/// Copies block `block` of `rel` out of its buffer under a share lock.
pub fn read_buffered(rel: pg_sys::Relation, block: u32, out: &mut [u8]) {
    // SAFETY: the buffer is pinned and share-locked while BLCKSZ bytes are copied out.
    unsafe {
        let buf = pg_sys::ReadBuffer(rel, block);
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_SHARE as i32);
        let page = pg_sys::BufferGetPage(buf) as *const u8;
        std::ptr::copy_nonoverlapping(page, out.as_mut_ptr(), BLOCK_SIZE);
        pg_sys::UnlockReleaseBuffer(buf);
    }
}

impl PageStore for PgBufStore {
    fn nblocks(&self) -> Result<u32, StorageError> {
        Ok(relstore::nblocks(self.rel()?))
    }

    fn read_block(&self, block: u32, out: &mut [u8]) -> Result<(), StorageError> {
        let rel = self.rel()?;
        if out.len() != BLOCK_SIZE || block >= relstore::nblocks(rel) {
            return Err(StorageError::invalid(format!(
                "block {block} is beyond the relation, or the buffer is not a block"
            )));
        }
        // Bulk pages are written around shared_buffers, so a buffer of one may be stale:
        // read the block from disk first, and only a page that is not a bulk page (or not
        // written yet) through its buffer, which may be newer than the disk.
        relstore::read_block(rel, block, out);
        let bulk = matches!(
            PageKind::from_u8(pages::kind_code(out)),
            Some(PageKind::Edge | PageKind::Vector)
        );
        if !bulk || pages::is_new(out) {
            read_buffered(rel, block, out);
        }
        Ok(())
    }

    fn write_block(&self, block: u32, _page: &[u8]) -> Result<(), StorageError> {
        Err(StorageError::invalid(format!(
            "block {block}: pages of a navis relation change only through its log"
        )))
    }

    fn extend(&self, _blocks: u32) -> Result<u32, StorageError> {
        Err(StorageError::invalid(
            "a navis relation grows only through its log",
        ))
    }

    fn sync(&self) -> Result<(), StorageError> {
        Ok(())
    }
}

/// The write seam on an open relation (module documentation).
pub struct PgLog {
    /// The relation, bound per access-method call through the store.
    store: Arc<PgBufStore>,
    owner: ThreadId,
    geometry: Geometry,
    /// The extent map and the metapage as this backend last read or wrote them.
    layout: Mutex<(Meta, ExtentMap)>,
}

// SAFETY: as for PgBufStore: every method checks it runs on the creating thread first.
unsafe impl Send for PgLog {}
// SAFETY: as above; the mutable state is behind a Mutex.
unsafe impl Sync for PgLog {}

impl PgLog {
    /// The log of the index in `rel`, which must stay open while the log is used (tests).
    #[cfg_attr(
        not(any(test, feature = "pg_test", feature = "test_functions")),
        allow(dead_code)
    )]
    pub fn open(rel: pg_sys::Relation) -> Result<PgLog, StorageError> {
        Self::over(Arc::new(PgBufStore::new(rel)))
    }

    /// The log of the index `store` reads: it writes to the relation the store is bound to.
    pub fn over(store: Arc<PgBufStore>) -> Result<PgLog, StorageError> {
        let (meta, map) = RelationImage::read_layout(&*store, Path::new("<navis relation>"))?;
        Ok(PgLog {
            store,
            owner: std::thread::current().id(),
            geometry: Geometry::of(&meta)?,
            layout: Mutex::new((meta, map)),
        })
    }

    fn layout(&self) -> std::sync::MutexGuard<'_, (Meta, ExtentMap)> {
        self.layout.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks of `refs`, growing the relation for those beyond the runs.
    fn blocks(&self, refs: &[PageRef]) -> Result<Vec<u32>, StorageError> {
        let rel = self.store.rel()?;
        let known: Option<Vec<u32>> = {
            let layout = self.layout();
            refs.iter()
                .map(|r| layout.1.block(r.kind, r.ordinal))
                .collect()
        };
        if let Some(blocks) = known {
            return Ok(blocks);
        }
        // The extension lock serialises growth with every other backend.
        let _extension = relstore::ExtensionLock::take(rel);
        self.grow(refs)
    }

    /// Under the extension lock: re-reads the layout (another backend may have grown the
    /// relation), appends the runs `refs` need, rewrites the extent map.
    fn grow(&self, refs: &[PageRef]) -> Result<Vec<u32>, StorageError> {
        let rel = self.store.rel()?;
        let (mut meta, mut map) =
            RelationImage::read_layout(&*self.store, Path::new("<navis relation>"))?;
        let logged = map.allocation_log().len();
        for r in refs {
            while map.capacity(r.kind) <= r.ordinal {
                let run = map.runs(r.kind).len() as u32;
                let first = relstore::nblocks(rel);
                relstore::extend_zeroed(rel, first + run_len(run));
                map.push_run(r.kind, first);
            }
        }
        if map.allocation_log().len() != logged {
            self.write_map(&mut meta, &map, logged)?;
        }
        let blocks = refs
            .iter()
            .map(|r| map.block(r.kind, r.ordinal).expect("grown to hold it"))
            .collect();
        *self.layout() = (meta, map);
        Ok(blocks)
    }

    /// Rewrites the extent-map pages from the one holding run `logged` on (appending pages
    /// the map now needs, then the metapage that lists them), each as a logged full image.
    fn write_map(
        &self,
        meta: &mut Meta,
        map: &ExtentMap,
        logged: usize,
    ) -> Result<(), StorageError> {
        let rel = self.store.rel()?;
        let new_block = || {
            let b = relstore::nblocks(rel);
            relstore::extend_zeroed(rel, b + 1);
            Ok(b)
        };
        for (block, page) in map_pages(meta, map, logged, new_block)? {
            self.replace_buffered(rel, block, &page);
        }
        Ok(())
    }

    /// Replaces a buffer-managed page with `page`, logged as a full-page image.
    fn replace_buffered(&self, rel: pg_sys::Relation, block: u32, page: &[u8]) {
        let needs_wal = wal::relation_needs_wal(rel);
        // SAFETY: the buffer is pinned and exclusively locked; the critical section keeps a
        // changed page from ever lacking its record (log_newpage_buffer stamps the LSN).
        unsafe {
            let buf = pg_sys::ReadBuffer(rel, block);
            pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
            pg_sys::CritSectionCount += 1;
            let dst = pg_sys::BufferGetPage(buf) as *mut u8;
            std::ptr::copy_nonoverlapping(page.as_ptr(), dst, BLOCK_SIZE);
            pg_sys::MarkBufferDirty(buf);
            if needs_wal {
                pg_sys::log_newpage_buffer(buf, true);
            }
            pg_sys::CritSectionCount -= 1;
            pg_sys::UnlockReleaseBuffer(buf);
        }
    }

    /// Writes one change: all its pages in one `CHANGE` record (module documentation).
    fn write_change(
        &self,
        change: &Change<'_>,
        refs: &[(PageRef, u32)],
    ) -> Result<(), StorageError> {
        let rel = self.store.rel()?;
        if refs.len() > pg_sys::XLR_MAX_BLOCK_ID as usize + 1 {
            return Err(StorageError::invalid(format!(
                "a navis change touches {} pages, one record holds {}",
                refs.len(),
                pg_sys::XLR_MAX_BLOCK_ID + 1
            )));
        }
        let is_bulk = |k: PageKind| matches!(k, PageKind::Edge | PageKind::Vector);
        // Locks in block order, page locks (vector pages, read-modify-written around the
        // buffer manager) before buffer locks, so that two backends never wait for each other.
        let mut vector_blocks: Vec<u32> = refs
            .iter()
            .filter(|r| r.0.kind == PageKind::Vector)
            .map(|r| r.1)
            .collect();
        vector_blocks.sort_unstable();
        vector_blocks.dedup();
        let mut order: Vec<usize> = (0..refs.len())
            .filter(|&i| !is_bulk(refs[i].0.kind))
            .collect();
        order.sort_by_key(|&i| refs[i].1);
        let needs_wal = wal::relation_needs_wal(rel);
        let data = wal::change::encode(
            &self.geometry,
            change,
            &refs.iter().map(|r| r.0).collect::<Vec<_>>(),
        );
        // SAFETY: page locks and buffer pins/locks are taken here and released before
        // returning (and by the transaction's cleanup on ERROR); every page is computed
        // before the critical section, which only copies pages and inserts the record.
        unsafe {
            for &b in &vector_blocks {
                pg_sys::LockPage(rel, b, pg_sys::ExclusiveLock as i32);
            }
            let mut buffers = vec![pg_sys::InvalidBuffer as pg_sys::Buffer; refs.len()];
            for &i in &order {
                buffers[i] = pg_sys::ReadBuffer(rel, refs[i].1);
                pg_sys::LockBuffer(buffers[i], pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
            }
            let mut computed: Vec<Vec<u8>> = Vec::with_capacity(refs.len());
            let mut failed = None;
            for (i, &(at, block)) in refs.iter().enumerate() {
                let mut page = vec![0u8; BLOCK_SIZE];
                match at.kind {
                    PageKind::Edge => {} // written whole
                    PageKind::Vector => relstore::read_block(rel, block, &mut page),
                    _ => {
                        let src = pg_sys::BufferGetPage(buffers[i]) as *const u8;
                        std::ptr::copy_nonoverlapping(src, page.as_mut_ptr(), BLOCK_SIZE);
                    }
                }
                if let Err(e) = apply::apply(&self.geometry, change, &mut page, at, block) {
                    failed = Some(e);
                    break;
                }
                computed.push(page);
            }
            if failed.is_none() {
                self.log_and_write(rel, refs, &buffers, &mut computed, &data, needs_wal);
            }
            for &buf in &buffers {
                if buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
                    pg_sys::UnlockReleaseBuffer(buf);
                }
            }
            for &b in &vector_blocks {
                pg_sys::UnlockPage(rel, b, pg_sys::ExclusiveLock as i32);
            }
            failed.map_or(Ok(()), Err)
        }
    }

    /// The record and the writes of a computed change (RFC 0001 §5): buffers changed and the
    /// record inserted in one critical section, then the bulk pages stamped and written
    /// around the buffer manager, all inside the checkpoint delay. A vector page whose record
    /// carries its full image (its first change since the checkpoint) holds other vertices'
    /// slots, so WAL is flushed first: a torn write of it can then always be repaired. An
    /// edge page needs no flush: until the record is durable nothing points at it.
    ///
    /// # Safety
    /// `buffers[i]` is pinned and exclusively locked for every buffer-managed `refs[i]`, and
    /// the caller holds the page lock of every vector page.
    unsafe fn log_and_write(
        &self,
        rel: pg_sys::Relation,
        refs: &[(PageRef, u32)],
        buffers: &[pg_sys::Buffer],
        computed: &mut [Vec<u8>],
        data: &[u8],
        needs_wal: bool,
    ) {
        // SAFETY: per the function's contract.
        unsafe {
            if needs_wal {
                // Outside any critical section, as it requires.
                pg_sys::XLogEnsureRecordSpace(refs.len() as i32 - 1, 0);
            }
            let redo = pg_sys::GetRedoRecPtr();
            let flush_first = refs
                .iter()
                .zip(computed.iter())
                .any(|(r, page)| r.0.kind == PageKind::Vector && pages::lsn(page) <= redo);
            let mut node = (*rel).rd_node;
            (*pg_sys::MyProc).delayChkptFlags |= pg_sys::DELAY_CHKPT_START as i32;
            pg_sys::CritSectionCount += 1;
            for (i, page) in computed.iter().enumerate() {
                if buffers[i] != pg_sys::InvalidBuffer as pg_sys::Buffer {
                    let dst = pg_sys::BufferGetPage(buffers[i]) as *mut u8;
                    std::ptr::copy_nonoverlapping(page.as_ptr(), dst, BLOCK_SIZE);
                    pg_sys::MarkBufferDirty(buffers[i]);
                }
            }
            let mut lsn = 0;
            if needs_wal {
                pg_sys::XLogBeginInsert();
                pg_sys::XLogRegisterData(data.as_ptr() as *mut std::ffi::c_char, data.len() as i32);
                for (i, (at, block)) in refs.iter().enumerate() {
                    match at.kind {
                        PageKind::Edge | PageKind::Vector => {
                            // A fresh edge page is always logged whole (redo writes it
                            // whole); a vector page as PostgreSQL decides from its LSN.
                            let flags = if at.kind == PageKind::Edge {
                                pg_sys::REGBUF_FORCE_IMAGE | pg_sys::REGBUF_STANDARD
                            } else {
                                pg_sys::REGBUF_STANDARD
                            };
                            pg_sys::XLogRegisterBlock(
                                i as u8,
                                &mut node,
                                pg_sys::ForkNumber::MAIN_FORKNUM,
                                *block,
                                computed[i].as_mut_ptr().cast(),
                                flags as u8,
                            );
                        }
                        _ => pg_sys::XLogRegisterBuffer(
                            i as u8,
                            buffers[i],
                            pg_sys::REGBUF_STANDARD as u8,
                        ),
                    }
                }
                lsn = pg_sys::XLogInsert(wal::RM_NAVIS_ID, wal::change::XLOG_NAVIS_CHANGE);
                for &buf in buffers {
                    if buf != pg_sys::InvalidBuffer as pg_sys::Buffer {
                        wal::page_set_lsn(pg_sys::BufferGetPage(buf), lsn);
                    }
                }
            }
            pg_sys::CritSectionCount -= 1;
            let computed = std::panic::AssertUnwindSafe(computed);
            pgrx::PgTryBuilder::new(move || {
                let mut computed = computed;
                if needs_wal && flush_first {
                    pg_sys::XLogFlush(lsn);
                }
                let smgr = pg_sys::RelationGetSmgr(rel);
                for (i, (at, block)) in refs.iter().enumerate() {
                    if matches!(at.kind, PageKind::Edge | PageKind::Vector) {
                        let page = computed[i].as_mut_ptr();
                        if needs_wal {
                            wal::page_set_lsn(page.cast(), lsn);
                        }
                        relstore::write_block_at(
                            smgr,
                            pg_sys::ForkNumber::MAIN_FORKNUM,
                            *block,
                            page.cast(),
                        );
                    }
                }
            })
            .finally(|| {
                (*pg_sys::MyProc).delayChkptFlags &= !(pg_sys::DELAY_CHKPT_START as i32);
            })
            .execute();
        }
    }

    fn log(&self, change: &Change<'_>) -> Result<(), StorageError> {
        check_thread(self.owner)?;
        let refs = apply::footprint(&self.geometry, change);
        let blocks = self.blocks(&refs)?;
        let refs: Vec<(PageRef, u32)> = refs.into_iter().zip(blocks).collect();
        self.write_change(change, &refs)
    }
}

impl IndexLog for PgLog {
    fn edge_page(&self, change: &EdgePageChange<'_>) -> Result<(), StorageError> {
        self.log(&Change::EdgePage(change))
    }

    fn vector(&self, change: &VectorChange<'_>) -> Result<(), StorageError> {
        self.log(&Change::Vector(change))
    }

    fn delete_flags(&self, vertices: &[VertexId]) -> Result<(), StorageError> {
        // One record holds 32 pages: a batch spanning more is logged in parts.
        for part in split_by_pages(vertices) {
            self.log(&Change::DeleteFlags(part))?;
        }
        Ok(())
    }

    fn free_vertices(&self, vertices: &[VertexId]) -> Result<(), StorageError> {
        for part in split_by_pages(vertices) {
            self.log(&Change::Free(part))?;
        }
        Ok(())
    }

    fn promote(&self, offset: u64, record: &[u8]) -> Result<(), StorageError> {
        self.log(&Change::Promote { offset, record })
    }
}

/// `ids` cut into parts whose indirection pages fit one record's block references.
fn split_by_pages(ids: &[VertexId]) -> Vec<&[VertexId]> {
    let max_pages = pg_sys::XLR_MAX_BLOCK_ID as usize + 1;
    let mut parts = Vec::new();
    let mut pages: Vec<u32> = Vec::new();
    let mut start = 0;
    for (i, &v) in ids.iter().enumerate() {
        let page = navis_engine::pages::indirection::locate(v).0;
        if !pages.contains(&page) {
            if pages.len() == max_pages {
                parts.push(&ids[start..i]);
                start = i;
                pages.clear();
            }
            pages.push(page);
        }
    }
    if start < ids.len() {
        parts.push(&ids[start..]);
    }
    parts
}
