//! The second pass of a memory-bounded build: the rows that did not fit in
//! maintenance_work_mem are inserted, one by one, into the index the first pass built from
//! the rows that did (issue 14, part 2). The heap is scanned again and every row the first
//! pass indexed (known by its TID) is skipped, so neither a synchronized scan starting
//! elsewhere nor a row that died between the passes can shift which rows are inserted.
//! Inserts write through the index's log like any later insert; the relfilenode is still
//! private to this transaction.

use crate::build_rows::RowReader;
use crate::datum::VectorInput;
use crate::open::{open_index, OpenIndex};
use navis_engine::storage::HeapTid;
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::rc::Rc;

struct InsertScan {
    rows: RowReader,
    index: pg_sys::Relation,
    open: Rc<OpenIndex>,
    /// The first pass's rows, sorted.
    built: Vec<HeapTid>,
    done: u64,
}

#[pg_guard]
unsafe extern "C-unwind" fn insert_callback(
    _index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    _tuple_is_alive: bool,
    state: *mut std::ffi::c_void,
) {
    // SAFETY: as for the first pass: one value/isnull pair, a valid TID, our state pointer,
    // a datum of the opclass's input type.
    let (state, row) = unsafe {
        let state = &mut *(state as *mut InsertScan);
        let row = state.rows.read(*values, *isnull, *tid);
        (state, row)
    };
    let Some((v, tid)) = row else { return };
    let key = |t: &HeapTid| (t.block, t.offset);
    if state.built.binary_search_by_key(&key(&tid), key).is_ok() {
        return;
    }
    pgrx::check_for_interrupts!();
    crate::insert::insert_row(state.index, &state.open, &v, tid);
    state.done += 1;
    // SAFETY: plain progress-reporting call in the backend that runs CREATE INDEX.
    unsafe {
        pg_sys::pgstat_progress_update_param(
            pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE as i32,
            (state.built.len() as u64 + state.done) as i64,
        )
    };
}

/// Scans `heap` again and inserts every indexable row that is not among `built`.
pub fn insert_beyond(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
    input: VectorInput,
    metric: Metric,
    mut built: Vec<HeapTid>,
) {
    built.sort_unstable_by_key(|t| (t.block, t.offset));
    let open = open_index(index);
    let _bound = open.bind(index);
    let mut scan = InsertScan {
        rows: RowReader::new(input, metric),
        index,
        open: Rc::clone(&open),
        built,
        done: 0,
    };
    crate::build_rows::scan_heap(heap, index, index_info, insert_callback, &mut scan);
}
