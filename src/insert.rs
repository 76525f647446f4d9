//! `aminsert`: one row into a navis index, from any backend, concurrently with other inserts
//! and scans (`navis_engine::update::insert` does the work; this layer reads the datum,
//! applies the same row rules as the build, and turns engine errors into ERRORs).

use crate::datum::VectorInput;
use crate::errors::raise;
use crate::guc;
use crate::io_stats;
use crate::open::{open_index, OpenIndex};
use crate::regrow;
use crate::runtime;
use navis_engine::cache::Caller;
use navis_engine::storage::HeapTid;
use navis_engine::update::InsertParams;
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

#[pg_guard]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C-unwind" fn aminsert(
    index: pg_sys::Relation,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    heap_tid: pg_sys::ItemPointer,
    _heap: pg_sys::Relation,
    _check_unique: pg_sys::IndexUniqueCheck::Type,
    _index_unchanged: bool,
    _index_info: *mut pg_sys::IndexInfo,
) -> bool {
    // SAFETY: one key column, so one value/isnull pair; heap_tid is the new tuple's TID.
    let (datum, is_null, tid) = unsafe { (*values, *isnull, *heap_tid) };
    if is_null {
        return false; // NULL vectors are not indexed (as in the build, and pgvector)
    }
    let block = pgrx::itemptr::item_pointer_get_block_number(&tid);
    let offset = pgrx::itemptr::item_pointer_get_offset_number(&tid);
    // SAFETY: an open index relation with one key column.
    let type_oid = unsafe { *(*index).rd_opcintype };
    let metric = crate::am::index_metric(index);
    // SAFETY: a non-NULL datum of the indexed column's type.
    let vector = unsafe { VectorInput::for_type(type_oid).as_vector(datum, "vector") };
    if let Err(e) = navis_engine::validate(vector) {
        raise(
            crate::errors::vector_error_code(&e),
            format!("cannot index row ({block},{offset}): {e}"),
            Some("Fix the value before storing it, or exclude such rows with a partial index (WHERE ...)."),
        )
    }
    if metric == Metric::Cosine && vector.iter().all(|x| *x == 0.0) {
        return false; // no direction, no cosine distance: left out, as the build does
    }
    let tid = HeapTid { block, offset };
    let name = || runtime::relation_name(index);
    let check_dim = |open: &OpenIndex| {
        if open.index.accepts_inserts() && vector.len() != open.index.dim() {
            raise(
                PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                format!(
                    "cannot index row ({block},{offset}): it has {} dimensions, index \"{}\" has {}",
                    vector.len(),
                    name(),
                    open.index.dim()
                ),
                Some("All vectors in a navis index must have the same number of dimensions."),
            )
        }
    };
    // Held across the insert so that no rebuild switches builds under it.
    regrow::lock_writers_shared(index);
    let mut open = open_index(index);
    check_dim(&open);
    if regrow::due(index, &open) {
        // An empty index, or one whose rows reached the next rebuild threshold: rebuilt from
        // its rows with this one (regrow.rs), unless another backend is rebuilding it right
        // now. The rebuild takes the writers lock exclusively, so this one is given up first;
        // afterwards the index is opened again, as a rebuild may have switched builds.
        let empty = !open.index.accepts_inserts();
        drop(open);
        regrow::unlock_writers_shared(index);
        if regrow::rebuild_with(index, empty, vector, tid) {
            return false;
        }
        regrow::lock_writers_shared(index);
        open = open_index(index);
        check_dim(&open);
    }
    let _bound = open.bind(index);
    if !open.index.accepts_inserts() {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("navis index \"{}\" has no build to insert into", name()),
            Some(&format!("Run REINDEX INDEX {}.", name())),
        )
    }
    insert_row(index, &open, vector, tid);
    regrow::unlock_writers_shared(index);
    false
}

/// Inserts one validated row into an open, bound index: the engine's insert with this
/// session's settings (with `navis.lios`, back-edges left to the task queue, `lios.rs`),
/// errors raised as ERRORs.
pub fn insert_row(index: pg_sys::Relation, open: &OpenIndex, vector: &[f32], tid: HeapTid) {
    let list = guc::INSERT_LIST.get().max(1) as usize;
    let casr_window = if guc::CASR_ENABLED.get() {
        open.casr_window(Caller::Insert, list)
    } else {
        None
    };
    let params = InsertParams {
        list,
        beam_width: guc::beam_width(&open.beam, navis_engine::search::DEVICE_WIDTH),
        entry_list: guc::ENTRY_POINTS.get().max(1) as usize,
        rerank_k: guc::RERANK_TOP_K.get().max(1) as usize,
        casr_window,
    };
    let mut reader = open.reader();
    let locks = open.locks();
    let outcome = crate::lios::with_task_sink(index, open, |sink| match sink {
        Some(sink) => open
            .index
            .insert_deferring(&mut reader, &locks, vector, tid, params, sink),
        None => open.index.insert(&mut reader, &locks, vector, tid, params),
    });
    if outcome.is_ok() {
        open.recycle(reader);
    }
    match outcome {
        Ok(report) => {
            io_stats::report(index, &report.search, &mut io_stats::Reported::default());
            open.beam.observe(&report.search);
            crate::result_cache::record_insert(index, open, tid, vector);
            crate::lios::count(crate::lios::Count::Deferred, report.back_edges_deferred);
            if report.back_edges_deferred > 0 {
                crate::lios_worker::after_deferring(
                    index,
                    crate::lios::tag_of(index, open.build_id),
                );
            }
            crate::lios::count(
                crate::lios::Count::RunByInserters,
                report.back_edges_refused,
            );
            if casr_window.is_none() && guc::CASR_ENABLED.get() {
                if let Some(w) = report.calibration_sample {
                    open.record_casr_sample(Caller::Insert, list, w);
                }
            }
        }
        Err(e) => crate::errors::raise_index_error(
            &format!(
                "insert into navis index \"{}\"",
                runtime::relation_name(index)
            ),
            e,
        ),
    }
}
