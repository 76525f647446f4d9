//! A hot standby's runtime copy kept current page by page (RFC 0001 §3).
//!
//! Redo records, per index, the generation it reached and the blocks it changed
//! (`ChangedBlocks` in shared memory). A scan on a hot standby must answer as of the WAL
//! replayed before it started (its snapshot may see rows that arrived with that WAL), so
//! [`bring_forward`] runs before each use of a copy whose synced generation is older: under
//! the index's allocator lock (a standby has no writers, so it only orders the backends that
//! bring the copy forward: none may apply an older page after another applied a newer one),
//! it writes out the buffers of changed edge and vector pages, which searches read from the
//! fork (and writes edge pages through to NAVIS-Cache), then applies changed code, indirection
//! and promotions pages to the copy (`navis_engine::relation::standby`). A change it cannot
//! apply page by page (blob pages, which only a build writes, or blocks pushed out of the
//! ring) makes the caller build a new copy from the pages, as every change did before.

use crate::open::OpenIndex;
use crate::shmem::{NavisShared, PgLocks};
use navis_engine::pages::meta::Meta;
use navis_engine::pages::{self, PageKind};
use navis_engine::relation::apply::Geometry;
use navis_engine::relation::standby::{resync, role, PageRole};
use navis_engine::update::AllocatorGuard;
use pgrx::pg_sys;

/// Brings `open`'s copy forward to redo generation `generation` (read before any page).
/// `false` when it cannot be done page by page: the caller makes a new copy.
pub fn bring_forward(
    rel: pg_sys::Relation,
    open: &OpenIndex,
    meta: &Meta,
    shared: &'static NavisShared,
    generation: u64,
) -> bool {
    let state = open.index.files().state();
    if state.synced_generation() >= generation {
        return true;
    }
    let locks = PgLocks::new(shared, open.lock_key);
    let _guard = AllocatorGuard::lock(&locks);
    let synced = state.synced_generation();
    if synced >= generation {
        return true; // another backend did it meanwhile
    }
    // SAFETY: an open relation's rd_node.
    let node = unsafe { (*rel).rd_node };
    let Some(blocks) = shared.redo_changes(&node).since(synced) else {
        return false;
    };
    let Ok(geometry) = Geometry::of(meta) else {
        return false;
    };
    let nblocks = crate::relstore::nblocks(rel);
    let read = |block: u32| {
        let mut page = vec![0u8; crate::relstore::BLOCK_SIZE];
        crate::pglog::read_buffered(rel, block, &mut page);
        page
    };
    let mut hot: Vec<Vec<u8>> = Vec::new();
    let mut bulk: Vec<u32> = Vec::new();
    for &block in blocks.iter().filter(|&&b| b < nblocks) {
        // (a block beyond the fork is another index's: ring slots are shared by hash)
        let page = read(block);
        match role(&page) {
            PageRole::Hot => hot.push(page),
            PageRole::Bulk => bulk.push(block),
            PageRole::Empty | PageRole::Layout => {}
            PageRole::Structural => return false,
        }
    }
    // A hot page read above may already carry a change redo applied after `generation`,
    // pointing at an edge or vector page of that change: its block was announced before
    // either page changed, so a second look finds it.
    let Some(again) = shared.redo_changes(&node).since(synced) else {
        return false;
    };
    for &block in again.iter().filter(|&&b| b < nblocks) {
        if blocks.binary_search(&block).is_err() {
            match role(&read(block)) {
                PageRole::Bulk => bulk.push(block),
                PageRole::Structural => return false,
                PageRole::Hot | PageRole::Empty | PageRole::Layout => {}
            }
        }
    }
    // Searches read edge and vector pages from the fork: write out redo's buffers of them
    // before any entry that points at them is published, and write edge pages through to
    // NAVIS-Cache as a primary's writer does (a search that read the older bytes before this
    // can no longer admit them).
    let cache = open.index.files().page_cache();
    for &block in &bulk {
        crate::relstore::flush_block(rel, block);
        if let Some(cache) = cache {
            let page = read(block);
            if pages::kind_code(&page) == PageKind::Edge as u8 {
                cache.cache.refresh(cache.key(pages::aux(&page)), &page);
            }
        }
    }
    let pages: Vec<&[u8]> = hot.iter().map(Vec::as_slice).collect();
    if resync(&open.index, &geometry, &pages).is_err() {
        return false;
    }
    state.set_synced_generation(generation);
    // A copy in use stays young: `runtime::sweep` removes a relation's other copies once
    // their directory is 10 s old, and a new backend may be about to open this one.
    let _ =
        std::fs::File::open(&open.dir).and_then(|d| d.set_modified(std::time::SystemTime::now()));
    true
}
