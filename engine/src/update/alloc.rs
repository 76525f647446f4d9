//! Out-of-place allocation without scans: vertex ids (with their vector slots and PQ codes)
//! and whole edge pages come from explicit free lists in `state.dat`, or from the end of the
//! files. Nothing walks pages looking for room and nothing can "rewind" to an old position
//! (pgvector's insertPage problem, seeds/004): every operation here is O(1) apart from file
//! growth, which is amortised.
//!
//! A page is handed out whole to one writer, which fills it with the edge lists it rewrites
//! and publishes them; from then on the page's live count drops by one each time one of
//! those lists moves away, and the page returns to the free list when it reaches zero. A
//! reader that still holds an old location of a list on a reused page notices through the
//! slot's owner stamp (or the page checksum, for a read that raced the rewrite) and
//! re-resolves.
//!
//! All of it is derivable from the indirection table: [`recover`] rebuilds the free lists and
//! counts when the first backend opens the index after a server start or a crash.

use super::locks::{AllocatorGuard, WriteLocks};
use crate::storage::state::{Counter, Field, NONE};
use crate::storage::{IndexFiles, StorageError};
use crate::VertexId;
use std::sync::atomic::Ordering;

/// A vertex id for a new vertex: a freed one when there is one (its vector slot and PQ code
/// are reused with it), else the next id, growing the files as needed.
pub fn allocate_vertex(
    files: &IndexFiles,
    locks: &dyn WriteLocks,
) -> Result<VertexId, StorageError> {
    let _guard = AllocatorGuard::lock(locks);
    let state = files.state();
    let head = state.get(Field::FreeVertexHead);
    if head != NONE {
        let next = files.indirection().free_link(head)?;
        state.set(Field::FreeVertexHead, next);
        state.add(Field::FreeVertexCount, -1);
        state.count(Counter::VerticesReused, 1);
        return Ok(head);
    }
    let v = state.get(Field::NextVertex);
    files.grow_vertices(v as usize + 1)?;
    // The build's vector file ends at its last vertex; cover the table's whole capacity.
    files.extend_vector_file(files.indirection().capacity())?;
    state.set(Field::NextVertex, v + 1);
    Ok(v)
}

/// Returns an allocated or published id to the free list. Callers make sure nothing new
/// will point at it (see `vacuum`); stale pointers are harmless (module comment).
pub fn release_vertex(
    files: &IndexFiles,
    locks: &dyn WriteLocks,
    v: VertexId,
) -> Result<(), StorageError> {
    let _guard = AllocatorGuard::lock(locks);
    push_free_vertex(files, v)
}

fn push_free_vertex(files: &IndexFiles, v: VertexId) -> Result<(), StorageError> {
    let state = files.state();
    files
        .indirection()
        .release(v, state.get(Field::FreeVertexHead))?;
    state.set(Field::FreeVertexHead, v);
    state.add(Field::FreeVertexCount, 1);
    Ok(())
}

/// A whole edge page for one writer: a freed page when there is one, else a new page at the
/// end of the edge file.
pub fn allocate_page(files: &IndexFiles, locks: &dyn WriteLocks) -> Result<u32, StorageError> {
    let _guard = AllocatorGuard::lock(locks);
    let state = files.state();
    if let Some(page) = state.pop_free_page() {
        state.count(Counter::PagesReused, 1);
        return Ok(page);
    }
    let page = state.get(Field::EdgePages);
    state.ensure_pages(page as usize + 1)?;
    state.page_live(page).store(0, Ordering::Release);
    state.set(Field::EdgePages, page + 1);
    state.count(Counter::PagesAppended, 1);
    Ok(page)
}

/// One edge list on `page` stopped being current (it moved, or its vertex was freed). The
/// page goes back to the free list with its last live list.
pub fn retire_slot(
    files: &IndexFiles,
    locks: &dyn WriteLocks,
    page: u32,
) -> Result<(), StorageError> {
    let state = files.state();
    if page >= state.get(Field::EdgePages) {
        return Err(StorageError::invalid(format!(
            "edge page {page} is beyond the allocated {} pages",
            state.get(Field::EdgePages)
        )));
    }
    let before = state.page_live(page).fetch_sub(1, Ordering::AcqRel);
    if before == 0 {
        // Never below zero: undo and report, the counts will be rebuilt by recovery.
        state.page_live(page).fetch_add(1, Ordering::AcqRel);
        return Err(StorageError::invalid(format!(
            "edge page {page} has no live list to retire"
        )));
    }
    if before == 1 {
        let _guard = AllocatorGuard::lock(locks);
        // Re-check under the lock: the page stays free only if nobody wrote to it since.
        if state.page_live(page).load(Ordering::Acquire) == 0 {
            state.push_free_page(page);
            // The cache's hint: none of this page's slots is valid any more.
            if let Some(cache) = files.page_cache() {
                cache.cache.drop_page(cache.key(page));
            }
        }
    }
    Ok(())
}

/// What [`recover`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Whether this call rebuilt the state (false: another backend had already done so).
    pub rebuilt: bool,
    pub published: u32,
    pub deleted: u32,
    pub free_vertices: u32,
    pub free_pages: u32,
    pub edge_pages: u32,
}

/// Brings `state.dat` in line with the indirection table once per server lifetime `epoch`:
/// ids below the high-water mark that are not published go on the free-vertex list, each
/// page's live count is the number of published vertices whose list it holds, and pages
/// with none are free. An allocation or insert that a crash cut short therefore leaks
/// nothing. Cheap when the epoch already matches (one load).
pub fn recover(
    files: &IndexFiles,
    locks: &dyn WriteLocks,
    epoch: u64,
) -> Result<Recovery, StorageError> {
    let state = files.state();
    if state.epoch() == epoch {
        return Ok(Recovery::default());
    }
    let _guard = AllocatorGuard::lock(locks);
    if state.epoch() == epoch {
        return Ok(Recovery::default());
    }
    let report = derive_allocator(files)?;
    // The shared entrance graph is volatile: rebuild it for this server lifetime.
    super::promote::rebuild_shared_entrance(files, epoch)?;
    state.set_epoch(epoch);
    Ok(report)
}

/// Re-derives the allocator state (free lists, live counts per page, published and deleted
/// counts) from the indirection table, as [`recover`] does for a new server lifetime; for a
/// copy whose entries changed without the allocator (a hot standby's, brought forward page
/// by page). The caller holds the allocator lock.
pub fn rederive_allocator(files: &IndexFiles) -> Result<Recovery, StorageError> {
    derive_allocator(files)
}

fn derive_allocator(files: &IndexFiles) -> Result<Recovery, StorageError> {
    let state = files.state();
    let indirection = files.indirection();
    let edge_pages = files.bulk().edge_page_count()?;
    let next_vertex = (state.get(Field::NextVertex) as usize).min(indirection.capacity());
    let mut live = vec![0u32; edge_pages as usize];
    let mut report = Recovery {
        rebuilt: true,
        edge_pages,
        ..Recovery::default()
    };
    state.clear_free_lists();
    // Highest ids first onto the stack, so that allocation reuses low ids first.
    let mut free_ids = Vec::new();
    for v in 0..next_vertex as VertexId {
        match indirection.entry(v) {
            Some(e) if e.is_live() => {
                let page = e.edge.page as usize;
                if page >= live.len() {
                    return Err(StorageError::corrupt(
                        indirection.path(),
                        format!("vertex {v} points at edge page {page}, beyond the file"),
                    ));
                }
                live[page] += 1;
                report.published += 1;
                report.deleted += e.is_deleted() as u32;
            }
            _ => free_ids.push(v),
        }
    }
    for &v in free_ids.iter().rev() {
        push_free_vertex(files, v)?;
    }
    state.ensure_pages(edge_pages as usize)?;
    state.set(Field::NextVertex, next_vertex as u32);
    state.set(Field::EdgePages, edge_pages);
    for (page, &count) in live.iter().enumerate().rev() {
        state.page_live(page as u32).store(count, Ordering::Release);
        if count == 0 {
            state.push_free_page(page as u32);
            if let Some(cache) = files.page_cache() {
                cache.cache.drop_page(cache.key(page as u32));
            }
        }
    }
    state.set(Field::Published, report.published);
    state.set(Field::Deleted, report.deleted);
    report.free_vertices = free_ids.len() as u32;
    report.free_pages = state.get(Field::FreePageCount);
    Ok(report)
}
