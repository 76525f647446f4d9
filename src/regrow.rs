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
//! 3. takes the writers lock exclusively (inserts and VACUUM hold it shared), appends the new
//!    build after the old one (`BULK_IMAGES`), switches the metapage (one full-page image),
//!    then carries over what changed since the snapshot: deletes first, then the rows inserted
//!    meanwhile, through the normal insert path;
//! 4. releases both locks. Inserts waited only for step 3; searches never wait. A scan that
//!    started on the old build finishes on it: its blocks are retired, never overwritten.
//!
//! The locks are PostgreSQL heavyweight page locks on tags that name no page (0 and 1), so
//! the deadlock detector sees them and transaction abort releases them.

use crate::build::{index_params, interrupt_pending, new_build_id, rows_in_memory};
use crate::errors::raise_index_error;
use crate::insert::insert_row;
use crate::open::{open_index, OpenIndex};
use crate::options::BuildOptions;
use crate::pgstore::PgStore;
use crate::{relstore, runtime, wal};
use navis_engine::index::regrow::regrow_threshold;
use navis_engine::index::{build_in_memory, EdgePageFormat, IndexError};
use navis_engine::relation::RelationWriter;
use navis_engine::storage::HeapTid;
use navis_engine::store::PageStore;
use pgrx::pg_sys;
use std::collections::HashSet;
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
/// backend holds the rebuild lock. Returns whether the row went in; if not, the caller
/// inserts it into the current build.
pub fn rebuild_with(index: pg_sys::Relation, vector: &[f32], tid: HeapTid) -> bool {
    let empty = built_rows(&open_index(index)) == 0;
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
    let name = || runtime::relation_name(index);
    let fail = |e: IndexError| -> ! {
        raise_index_error(&format!("rebuild of navis index \"{}\"", name()), e)
    };
    let bound = open.bind(index);
    let mut reader = open.reader();
    let snapshot = open
        .index
        .snapshot_rows(&mut reader)
        .unwrap_or_else(|e| fail(e));
    let mut vectors = snapshot.vectors.clone();
    vectors.extend_from_slice(vector);
    let mut tids = snapshot.tids.clone();
    tids.push(tid);
    let options = BuildOptions::of_index(index);
    options.validate_for(vector.len());
    let params = index_params(index, &options, Some(vector.len()));
    let no_progress = |_, _, _| {};
    let built = build_in_memory(
        &vectors,
        &tids,
        &params,
        EdgePageFormat::Relation,
        &no_progress,
        &interrupt_pending,
    );
    let built = match built {
        Ok(b) => b,
        Err(IndexError::Cancelled) => {
            pgrx::check_for_interrupts!();
            fail(IndexError::Cancelled)
        }
        Err(e) => fail(e),
    };

    // From here on no other writer runs: carry over what they did since the snapshot.
    // SAFETY: see lock_writers_shared.
    unsafe { pg_sys::LockPage(index, WRITERS_LOCK, pg_sys::ExclusiveLock as i32) };
    let changes = open.index.rows_changed_since(&snapshot);
    let (added, added_tids) = open
        .index
        .load_rows(&mut reader, &changes.added)
        .unwrap_or_else(|e| fail(e));
    open.recycle(reader);
    drop(bound);

    let store = PgStore::appending(index);
    let page = RelationWriter::append(&store, &built.input(), built.medoid, new_build_id())
        .and_then(|(_, page)| store.sync().map(|()| page))
        .unwrap_or_else(|e| fail(e.into()));
    drop(built);
    switch_metapage(index, page);

    let new = open_index(index);
    let _bound = new.bind(index);
    if !changes.gone.is_empty() {
        let gone: HashSet<HeapTid> = changes.gone.iter().copied().collect();
        new.index
            .bulk_delete(|t| gone.contains(&t), &|| false)
            .unwrap_or_else(|e| fail(e));
    }
    for (v, t) in added.chunks_exact(vector.len()).zip(added_tids) {
        insert_row(index, &new, v, t);
    }
    // SAFETY: taken above.
    unsafe { pg_sys::UnlockPage(index, WRITERS_LOCK, pg_sys::ExclusiveLock as i32) };
}

/// Replaces block 0 with the new build's metapage through its buffer, logged as a full-page
/// image: every later access-method call reads it and opens the new build.
fn switch_metapage(index: pg_sys::Relation, mut page: Vec<u8>) {
    let needs_wal = wal::relation_needs_wal(index);
    // SAFETY: the buffer is pinned and exclusively locked; the critical section keeps the
    // changed page from ever lacking its record (log_newpage_buffer stamps the LSN).
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
