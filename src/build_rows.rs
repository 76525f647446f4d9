//! The rows a navis build takes from the heap: one value per row read, detoasted in a
//! per-row memory context, validated (dimensions, NaN/Infinity, NULL elements: ERROR naming
//! the row) and filtered (NULL vectors, and zero vectors under cosine, are not indexed). Both
//! passes of a build read rows through this, so they index exactly the same rows.

use crate::datum::VectorInput;
use crate::errors::raise;
use navis_engine::storage::HeapTid;
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::{PgMemoryContexts, PgSqlErrorCode};

pub struct RowReader {
    input: VectorInput,
    metric: Metric,
    /// The dimension of the first row, which every later row must have.
    pub dim: Option<usize>,
    tuple_cxt: PgMemoryContexts,
}

impl RowReader {
    pub fn new(input: VectorInput, metric: Metric) -> RowReader {
        RowReader {
            input,
            metric,
            dim: None,
            tuple_cxt: PgMemoryContexts::new("navis build tuple"),
        }
    }

    /// The row's vector and TID, or `None` for a row that is not indexed.
    ///
    /// # Safety
    /// `datum` is the indexed column's value (of the opclass's input type) unless `is_null`.
    pub unsafe fn read(
        &mut self,
        datum: pg_sys::Datum,
        is_null: bool,
        tid: pg_sys::ItemPointerData,
    ) -> Option<(Vec<f32>, HeapTid)> {
        if is_null {
            return None; // NULL vectors are not indexed (as in pgvector)
        }
        let block = pgrx::itemptr::item_pointer_get_block_number(&tid);
        let offset = pgrx::itemptr::item_pointer_get_offset_number(&tid);
        let input = self.input;
        // Detoasted copies go into a per-tuple context that is reset after each row.
        // SAFETY: the datum is non-NULL and of the indexed column's type (the caller's word).
        let v = unsafe {
            self.tuple_cxt.switch_to(|_| {
                let what = format!("vector in row ({block},{offset})");
                let v = input.as_vector(datum, &what);
                check_row(v, block, offset);
                v.to_vec()
            })
        };
        // SAFETY: nothing allocated in the tuple context outlives this call.
        unsafe { self.tuple_cxt.reset() };
        match self.dim {
            None => self.dim = Some(v.len()),
            Some(d) if d != v.len() => raise(
                PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                format!(
                    "cannot index row ({block},{offset}): it has {} dimensions, earlier rows have {d}",
                    v.len()
                ),
                Some("All vectors in a navis index must have the same number of dimensions."),
            ),
            Some(_) => {}
        }
        // A zero vector has no direction, so its cosine distance to anything is NaN; like
        // pgvector's HNSW, a cosine index leaves such rows out.
        if self.metric == Metric::Cosine && v.iter().all(|x| *x == 0.0) {
            return None;
        }
        Some((v, HeapTid { block, offset }))
    }
}

/// The callback `index_build_range_scan` calls per heap tuple.
pub type RowCallback = unsafe extern "C-unwind" fn(
    pg_sys::Relation,
    pg_sys::ItemPointer,
    *mut pg_sys::Datum,
    *mut bool,
    bool,
    *mut std::ffi::c_void,
);

/// Scans `heap` for a build of `index`, calling `callback` with `state` for every tuple to
/// index (both passes of a build); returns the heap tuples considered, which PostgreSQL
/// makes the table's `reltuples`.
pub fn scan_heap<S>(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    callback: RowCallback,
    state: &mut S,
) -> f64 {
    // SAFETY: heap and index are the open relations PostgreSQL passed to ambuild, whose table
    // AM provides index_build_range_scan (as table_index_build_scan calls it); the callback
    // only touches `state`, which outlives the call.
    unsafe {
        let scan_range = (*(*heap).rd_tableam)
            .index_build_range_scan
            .expect("every table access method can scan for an index build");
        scan_range(
            heap,
            index,
            index_info,
            true,
            false,
            true,
            0,
            pg_sys::InvalidBlockNumber,
            Some(callback),
            (state as *mut S).cast(),
            std::ptr::null_mut(),
        )
    }
}

/// Validates one row's values.
fn check_row(v: &[f32], block: u32, offset: u16) {
    if let Err(e) = navis_engine::validate(v) {
        raise(
            crate::errors::vector_error_code(&e),
            format!("cannot index row ({block},{offset}): {e}"),
            Some("Fix or delete the row, or exclude it with a partial index (WHERE ...)."),
        )
    }
}
