//! Empty and growing indexes (RFC 0002): an index rebuilds itself from its own rows, online,
//! when its live rows reach the next threshold of `navis_engine::index::regrow` (its first
//! row, 16, 256, then every eightfold growth while the build trained PQ on fewer rows than a
//! build samples, and while the rows fit in maintenance_work_mem).
//!
//! The inserting backend whose row crosses the threshold does the rebuild, with its row in it:
//!
//! 1. takes the rebuild lock (one rebuild at a time; a backend that finds it taken inserts
//!    its row into the current build, except into an empty index, where it waits);
//! 2. snapshots the index's rows (exact vectors and heap TIDs from the vector pages) and
//!    builds in memory while other backends go on inserting, deleting and searching;
//! 3. takes the writers lock exclusively (inserts and VACUUM hold it shared), so that no
//!    other writer runs; if rows were inserted or deleted since the snapshot, builds again
//!    from the rows as they are now (writers wait for that build);
//! 4. appends the new build after the old one (`BULK_IMAGES`), switches the metapage (one
//!    full-page image) and releases both locks. The switch is the last write: a crash before
//!    it leaves the old build in use, complete; after it the new one is complete. Searches
//!    never wait; a scan that started on the old build finishes on it, as its blocks are
//!    retired, never overwritten.
//!
//! The locks are PostgreSQL heavyweight page locks on tags that name no page (0 and 1), so
//! the deadlock detector sees them and transaction abort releases them.

use crate::build::{index_params, interrupt_pending, new_build_id, rows_in_memory};
use crate::errors::raise_index_error;
use crate::open::{open_index, OpenIndex};
use crate::options::BuildOptions;
use crate::pgstore::PgStore;
use crate::{relstore, runtime, wal};
use navis_engine::index::regrow::{regrow_threshold, RowSnapshot};
use navis_engine::index::{build_in_memory, BuiltIndex, DiskReader, EdgePageFormat, IndexError};
use navis_engine::relation::RelationWriter;
use navis_engine::storage::HeapTid;
use navis_engine::store::PageStore;
use pgrx::pg_sys;
use std::rc::Rc;

/// Inserts and VACUUM hold this shared; a rebuild's switch holds it exclusively.
const WRITERS_LOCK: u32 = 0;
/// Held exclusively by the one rebuild of an index in progress.
const REBUILD_LOCK: u32 = 1;

/// Holds the writers lock shared: around an insert or a VACUUM pass, so that no rebuild
/// switches builds under it. Released explicitly; an ERROR releases it with the transaction.
pub fn lock_writers_shared(index: pg_sys::Relation) {
    // SAFETY: an open relation; page locks are plain heavyweight locks on (rel, tag).
    unsafe { pg_sys::LockPage(index, WRITERS_LOCK, pg_sys::ShareLock as i32) };
}

pub fn unlock_writers_shared(index: pg_sys::Relation) {
    // SAFETY: taken by lock_writers_shared in this transaction.
    unsafe { pg_sys::UnlockPage(index, WRITERS_LOCK, pg_sys::ShareLock as i32) };
}

/// Built rows of the index `open` holds (what its build saw).
fn built_rows(open: &OpenIndex) -> usize {
    open.index.files().manifest().vertex_count as usize
}

/// Whether the insert of one more row into `open` should rebuild it first. An empty index
/// always does (it has neither a dimension nor a quantizer); a built one when its live rows
/// reach the next threshold and a build of them fits in maintenance_work_mem.
pub fn due(index: pg_sys::Relation, open: &OpenIndex) -> bool {
    let built = built_rows(open);
    let Some(threshold) = regrow_threshold(built) else {
        return false;
    };
    if built == 0 {
        return true;
    }
    let rows = open.index.live_len() + 1;
    rows >= threshold && rows <= rows_in_memory(&BuildOptions::of_index(index), open.index.dim())
}

/// Rebuilds `index` with the row (`vector`, `tid`) in it, if it is still due once this
/// backend holds the rebuild lock (an `empty` index has no build to insert into, so its
/// inserter waits for that lock). Returns whether the row went in; if not, the caller
/// inserts it into the current build. The caller must not hold the writers lock.
pub fn rebuild_with(index: pg_sys::Relation, empty: bool, vector: &[f32], tid: HeapTid) -> bool {
    // SAFETY: an open relation; see lock_writers_shared.
    unsafe {
        if empty {
            pg_sys::LockPage(index, REBUILD_LOCK, pg_sys::ExclusiveLock as i32);
        } else if !pg_sys::ConditionalLockPage(index, REBUILD_LOCK, pg_sys::ExclusiveLock as i32) {
            return false; // another backend is rebuilding; this row goes into the old build
        }
    }
    // Another backend may have rebuilt while this one waited.
    let open = open_index(index);
    let done = due(index, &open) && {
        rebuild(index, &open, vector, tid);
        true
    };
    // SAFETY: taken above.
    unsafe { pg_sys::UnlockPage(index, REBUILD_LOCK, pg_sys::ExclusiveLock as i32) };
    done
}

fn rebuild(index: pg_sys::Relation, open: &Rc<OpenIndex>, vector: &[f32], tid: HeapTid) {
    let bound = open.bind(index);
    let mut reader = open.reader();
    let first = rows_with(index, open, &mut reader, vector, tid);
    let built = build(index, &first);
    // SAFETY: see lock_writers_shared.
    unsafe { pg_sys::LockPage(index, WRITERS_LOCK, pg_sys::ExclusiveLock as i32) };
    if open.index.rows_changed_since(&first.snapshot).is_empty() {
        drop(bound);
        open.recycle(reader);
        write_and_switch(index, &built);
    } else {
        // Rows were inserted or deleted meanwhile: build again from the rows as they are now,
        // with writers waiting. Carrying the changes over after the switch instead would
        // leave them out of the index if the server crashed before they were all written.
        drop(built);
        let now = rows_with(index, open, &mut reader, vector, tid);
        drop(bound);
        open.recycle(reader);
        write_and_switch(index, &build(index, &now));
    }
    // SAFETY: taken above.
    unsafe { pg_sys::UnlockPage(index, WRITERS_LOCK, pg_sys::ExclusiveLock as i32) };
}

/// The rows of a rebuild: the index's rows (as snapshot) and the inserted one.
struct Rows {
    snapshot: RowSnapshot,
    vectors: Vec<f32>,
    tids: Vec<HeapTid>,
}

fn rows_with(
    index: pg_sys::Relation,
    open: &OpenIndex,
    reader: &mut DiskReader<'_>,
    vector: &[f32],
    tid: HeapTid,
) -> Rows {
    let snapshot = open
        .index
        .snapshot_rows(reader)
        .unwrap_or_else(|e| fail(index, e));
    let mut vectors = snapshot.vectors.clone();
    vectors.extend_from_slice(vector);
    let mut tids = snapshot.tids.clone();
    tids.push(tid);
    Rows {
        snapshot,
        vectors,
        tids,
    }
}

/// The in-memory build of `rows` with the index's options and this session's
/// maintenance_work_mem and threads, as CREATE INDEX would.
fn build<'r>(index: pg_sys::Relation, rows: &'r Rows) -> BuiltIndex<'r> {
    let dim = rows.vectors.len() / rows.tids.len();
    let options = BuildOptions::of_index(index);
    options.validate_for(dim);
    let params = index_params(index, &options, Some(dim));
    let no_progress = |_, _, _| {};
    let built = build_in_memory(
        &rows.vectors,
        &rows.tids,
        &params,
        EdgePageFormat::Relation,
        &no_progress,
        &interrupt_pending,
    );
    match built {
        Ok(b) => b,
        Err(IndexError::Cancelled) => {
            pgrx::check_for_interrupts!();
            fail(index, IndexError::Cancelled)
        }
        Err(e) => fail(index, e),
    }
}

/// Appends `built` after the build in use and switches the metapage to it. An ERROR or a
/// crash before the switch leaves the old build in use, whole (the pages written are dead
/// space); after it the new build is complete.
fn write_and_switch(index: pg_sys::Relation, built: &BuiltIndex<'_>) {
    let store = PgStore::appending(index);
    let page = RelationWriter::append(&store, &built.input(), built.medoid, new_build_id())
        .and_then(|(_, page)| store.sync().map(|()| page))
        .unwrap_or_else(|e| fail(index, e.into()));
    let replaced = crate::open::read_meta(index).map(|m| m.build_id);
    switch_metapage(index, page);
    // The old build's queued back-edges name its vertex ids, which mean nothing now.
    if let Some(build_id) = replaced {
        crate::lios::forget(crate::lios::tag_of(index, build_id));
    }
}

fn fail(index: pg_sys::Relation, e: IndexError) -> ! {
    raise_index_error(
        &format!(
            "rebuild of navis index \"{}\"",
            runtime::relation_name(index)
        ),
        e,
    )
}

/// Replaces block 0 with the new build's metapage through its buffer, logged as a full-page
/// image: every later access-method call reads it and opens the new build. Under the
/// relation extension lock, as every change of the layout is, so that an open reading the
/// layout under it sees one build throughout (open.rs).
fn switch_metapage(index: pg_sys::Relation, mut page: Vec<u8>) {
    let needs_wal = wal::relation_needs_wal(index);
    // SAFETY: the buffer is pinned and exclusively locked; the critical section keeps the
    // changed page from ever lacking its record (log_newpage_buffer stamps the LSN).
    let _extension = relstore::ExtensionLock::take(index);
    unsafe {
        let buf = pg_sys::ReadBuffer(index, 0);
        pg_sys::LockBuffer(buf, pg_sys::BUFFER_LOCK_EXCLUSIVE as i32);
        pg_sys::CritSectionCount += 1;
        let dst = pg_sys::BufferGetPage(buf) as *mut u8;
        std::ptr::copy_nonoverlapping(page.as_mut_ptr(), dst, relstore::BLOCK_SIZE);
        pg_sys::MarkBufferDirty(buf);
        if needs_wal {
            pg_sys::log_newpage_buffer(buf, true);
        }
        pg_sys::CritSectionCount -= 1;
        pg_sys::UnlockReleaseBuffer(buf);
    }
}
