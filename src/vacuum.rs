//! VACUUM of a navis index: `ambulkdelete` flags the vertices of dead heap tuples (lazy
//! deletes, `Index::bulk_delete`); `amvacuumcleanup` consolidates once the deleted share
//! reaches the index's `consolidate_threshold` (`Index::consolidate`: repair the lists that
//! point at deleted vertices, free those vertices, compact sparse pages, reconnect vertices
//! no search can reach), and otherwise, if rows were inserted since the last VACUUM, only
//! restores reachability (`Index::reconnect`). Both check for cancellation between batches
//! and leave a consistent index when interrupted. With `navis.lios = on` in the VACUUM's
//! session, consolidation hands its list repairs out to the LIOS task queue
//! (`Index::consolidate_handing_out`): the deleted vertices those lists lead to stay until the
//! next VACUUM, which runs the repairs still queued and frees them.

use crate::build::interrupt_pending;
use crate::errors::raise_index_error;
use crate::open::{open_index, read_meta, OpenIndex};
use crate::options::BuildOptions;
use crate::regrow;
use crate::runtime;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::rc::Rc;

/// The index as VACUUM sees it, or `None` for an index without a navis metapage (VACUUM of
/// a table must not fail because one of its indexes needs a REINDEX; scans report that).
/// With `Some`, the writers lock is held shared (no online rebuild switches builds under
/// VACUUM, `regrow.rs`) until [`regrow::unlock_writers_shared`].
fn open_for_vacuum(index: pg_sys::Relation) -> Option<Rc<OpenIndex>> {
    read_meta(index)?;
    regrow::lock_writers_shared(index);
    Some(open_index(index))
}

fn result_of(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    if !stats.is_null() {
        return stats;
    }
    // SAFETY: a zeroed result in the current memory context; `info->index` is open.
    unsafe {
        let mut s = PgBox::<pg_sys::IndexBulkDeleteResult>::alloc0();
        s.num_pages = pg_sys::RelationGetNumberOfBlocksInFork(
            (*info).index,
            pg_sys::ForkNumber::MAIN_FORKNUM,
        );
        s.estimated_count = true;
        s.into_pg()
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambulkdelete(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
    callback: pg_sys::IndexBulkDeleteCallback,
    callback_state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    let stats = result_of(info, stats);
    // SAFETY: VACUUM passes an open index in `info`.
    let index = unsafe { (*info).index };
    // (the callback first: open_for_vacuum takes the writers lock)
    let Some(callback) = callback else {
        return stats;
    };
    let Some(open) = open_for_vacuum(index) else {
        return stats;
    };
    let _bound = open.bind(index);
    let is_dead = |tid: navis_engine::storage::HeapTid| {
        let mut item = pg_sys::ItemPointerData::default();
        pgrx::itemptr::item_pointer_set_all(&mut item, tid.block, tid.offset);
        // SAFETY: VACUUM's callback with its own state; it only looks the TID up.
        unsafe { callback(&mut item, callback_state) }
    };
    // Cached rows VACUUM removes leave the result cache first, before the heap may reuse
    // their TIDs; no search overlapping this VACUUM admits an entry (RFC 0003 §6).
    let (build_id, metric) = (open.build_id, open.index.metric());
    crate::result_cache::vacuum_begin(index, build_id, metric, &mut |tid| is_dead(tid));
    // An ERROR in the bulk delete must not leave admissions refused until the next VACUUM.
    let bulk_delete =
        std::panic::AssertUnwindSafe(|| open.index.bulk_delete(is_dead, &interrupt_pending));
    let deleted = pgrx::PgTryBuilder::new(bulk_delete)
        .finally(|| crate::result_cache::vacuum_end(index, build_id, metric))
        .execute();
    match deleted {
        Ok(report) => {
            // SAFETY: `stats` is the palloc'd result returned to VACUUM.
            unsafe {
                (*stats).tuples_removed += report.newly_deleted as f64;
                (*stats).num_index_tuples = report.live as f64;
                (*stats).estimated_count = false;
            }
        }
        Err(e) => raise_index_error(
            &format!(
                "vacuum of navis index \"{}\"",
                runtime::relation_name(index)
            ),
            e,
        ),
    }
    regrow::unlock_writers_shared(index);
    // Bulk delete and consolidation hold per-vertex state for the whole index; the backend
    // (autovacuum's or a session's) lives on after them.
    navis_engine::heap::return_freed_memory();
    stats
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amvacuumcleanup(
    info: *mut pg_sys::IndexVacuumInfo,
    stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    let stats = result_of(info, stats);
    // SAFETY: VACUUM passes an open index in `info`.
    let (index, analyze_only) = unsafe { ((*info).index, (*info).analyze_only) };
    if analyze_only {
        return stats;
    }
    let Some(open) = open_for_vacuum(index) else {
        return stats;
    };
    let _bound = open.bind(index);
    // Queued back-edges first: they name vertices consolidation may free, and they are
    // links the reconnect pass would otherwise make up for.
    let drained = crate::lios::drain(index, &open);
    // With LIOS on, queued back-edges lost in a shutdown or crash are given back too.
    open.index
        .set_restore_lost_back_edges(crate::guc::LIOS.get());
    let threshold = BuildOptions::of_index(index).consolidate_threshold;
    let locks = open.locks();
    let context = || {
        format!(
            "vacuum of navis index \"{}\"",
            runtime::relation_name(index)
        )
    };
    if open.index.deleted_len() > 0 && open.index.deleted_fraction() >= threshold {
        // With LIOS, the list repairs go to the task queue (searches and the background
        // worker run them; the next VACUUM runs what is left, then frees what they kept).
        let consolidated = crate::lios::with_task_sink(index, &open, |sink| match sink {
            Some(sink) => open
                .index
                .consolidate_handing_out(&locks, &interrupt_pending, sink),
            None => open.index.consolidate(&locks, &interrupt_pending),
        });
        let report = consolidated.unwrap_or_else(|e| raise_index_error(&context(), e));
        if report.repairs_deferred > 0 {
            crate::lios::count(crate::lios::Count::RepairsQueued, report.repairs_deferred);
            crate::lios_worker::after_deferring(index, crate::lios::tag_of(index, open.build_id));
        }
        // At DEBUG1: PostgreSQL 15 hands index AMs DEBUG2 even under VACUUM VERBOSE.
        pgrx::debug1!(
            "navis index \"{}\": {drained} queued LIOS tasks run; {} lists repaired, {} \
             repairs handed out as tasks; {} deleted vertices freed, {} kept for the next \
             VACUUM; {} lists compacted",
            runtime::relation_name(index),
            report.lists_repaired,
            report.repairs_deferred,
            report.vertices_freed,
            report.vertices_held,
            report.lists_compacted
        );
    } else if let Err(e) = open.index.reconnect(&locks, &interrupt_pending) {
        // Inserts since the last VACUUM may have left vertices without a path from the
        // entry points (back-edge pruning); link them again.
        raise_index_error(&context(), e)
    }
    // SAFETY: `stats` is the palloc'd result returned to VACUUM.
    unsafe {
        (*stats).num_index_tuples = open.index.live_len() as f64;
        (*stats).estimated_count = false;
    }
    regrow::unlock_writers_shared(index);
    // Bulk delete and consolidation hold per-vertex state for the whole index; the backend
    // (autovacuum's or a session's) lives on after them.
    navis_engine::heap::return_freed_memory();
    stats
}
