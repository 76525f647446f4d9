//! Ordered index scans: `ORDER BY col <op> const [LIMIT k]`.
//!
//! The scan opens the index (`open.rs`), starts a resumable [`SearchCursor`] on the query
//! vector from `orderbys[0]`, and hands the executor one heap TID per `amgettuple` in
//! non-decreasing exact distance (`xs_recheckorderby = false`). When the executor asks for
//! more rows than the first pass produced (LIMIT above `navis.search_list`, or a WHERE clause
//! that drops rows) the cursor goes on: graph passes, then exhaustive rounds over every live
//! vertex (`navis_engine::search`), so a scan ends only when every row of the index has been
//! returned (or skipped: found after a farther row) or after `navis.max_scan_tuples` rows.
//! The cursor's state is bounded by `work_mem`. With `navis.result_cache = on` the scan may
//! be answered from the result cache first (`scan_cache.rs`).

use crate::datum::VectorInput;
use crate::errors::raise;
use crate::guc;
use crate::io_stats;
use crate::open::{open_index, OpenIndex};
use crate::read_ahead::ReadAhead;
use crate::runtime;
use crate::scan_cache::{self, Admission, Lookup, ServedRows};
use navis_engine::cache::Caller;
use navis_engine::index::DiskReader;
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::storage::HeapTid;
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{PgMemoryContexts, PgSqlErrorCode};
use std::rc::Rc;

/// The running search of one scan. Field order matters: the cursor borrows the reader, which
/// borrows the index; [`Drop`] releases them in that order.
struct Running {
    cursor: Option<SearchCursor<'static, DiskReader<'static>>>,
    reader: *mut DiskReader<'static>,
    open: Rc<OpenIndex>,
    calibrating: bool,
    /// The search list whose calibration sample this scan's rerank joins.
    calibration_list: usize,
    returned: u64,
    limit: u64,
    /// A read failed: the reader is not reused.
    failed: bool,
    /// Reads already added to PostgreSQL's buffer counters.
    reported: io_stats::Reported,
    /// A missed result-cache lookup: admit the first pass's rows once it has run.
    admission: Option<Admission>,
    /// How far the queued rows' heap and TOAST pages were read ahead of the executor.
    read_ahead: ReadAhead,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(cursor) = self.cursor.take() {
            let counters = cursor.counters();
            self.open.beam.observe(&counters);
            let mut total = self.open.counters.lock().unwrap();
            total.merge(&counters);
            drop(cursor);
        }
        if !self.reader.is_null() {
            // SAFETY: `reader` came from Box::into_raw in `start` and the cursor that
            // borrowed it is gone.
            let reader = unsafe { Box::from_raw(self.reader) };
            self.reader = std::ptr::null_mut();
            if !self.failed {
                self.open.recycle(*reader);
            }
        }
    }
}

/// Per-scan state, owned by the scan's memory context (dropped when it is deleted, also
/// after an ERROR) and emptied by amendscan.
struct ScanState {
    input: VectorInput,
    metric: Metric,
    running: Option<Running>,
    /// A result-cache hit being returned, before any search runs.
    served: Option<ServedRows>,
    /// How far the hit's rows were read ahead of the executor.
    served_ahead: ReadAhead,
    /// What a fall-through from `served` starts its search with.
    deferred: Option<(Rc<OpenIndex>, Vec<f32>)>,
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambeginscan(
    index: pg_sys::Relation,
    nkeys: std::ffi::c_int,
    norderbys: std::ffi::c_int,
) -> pg_sys::IndexScanDesc {
    // SAFETY: RelationGetIndexScan allocates the descriptor in the current context.
    let scan = unsafe { pg_sys::RelationGetIndexScan(index, nkeys, norderbys) };
    // SAFETY: an open index relation has rd_opcintype[0].
    let input = VectorInput::for_type(unsafe { *(*index).rd_opcintype });
    let state = ScanState {
        input,
        metric: crate::am::index_metric(index),
        running: None,
        served: None,
        served_ahead: ReadAhead::default(),
        deferred: None,
    };
    let ptr = PgMemoryContexts::CurrentMemoryContext.leak_and_drop_on_delete(state);
    // SAFETY: the descriptor is ours to fill; orderby arrays sized by norderbys.
    unsafe {
        (*scan).opaque = ptr as *mut std::ffi::c_void;
        if norderbys > 0 {
            (*scan).xs_orderbyvals =
                pg_sys::palloc0(std::mem::size_of::<pg_sys::Datum>() * norderbys as usize)
                    as *mut pg_sys::Datum;
            (*scan).xs_orderbynulls =
                pg_sys::palloc(std::mem::size_of::<bool>() * norderbys as usize) as *mut bool;
            for i in 0..norderbys as usize {
                *(*scan).xs_orderbynulls.add(i) = true;
            }
        }
    }
    scan
}

fn state_of<'a>(scan: pg_sys::IndexScanDesc) -> &'a mut ScanState {
    // SAFETY: opaque was set in ambeginscan to a ScanState that lives as long as the scan.
    unsafe { &mut *((*scan).opaque as *mut ScanState) }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amrescan(
    scan: pg_sys::IndexScanDesc,
    keys: pg_sys::ScanKey,
    nkeys: std::ffi::c_int,
    orderbys: pg_sys::ScanKey,
    norderbys: std::ffi::c_int,
) {
    // SAFETY: copying the keys the executor passes into the descriptor's own arrays.
    unsafe {
        if !keys.is_null() && nkeys > 0 {
            std::ptr::copy(keys, (*scan).keyData, nkeys as usize);
        }
        if !orderbys.is_null() && norderbys > 0 {
            std::ptr::copy(orderbys, (*scan).orderByData, norderbys as usize);
        }
    }
    let state = state_of(scan);
    state.running = None;
    state.served = None;
    state.served_ahead = ReadAhead::default();
    state.deferred = None;
    // SAFETY: orderByData has numberOfOrderBys entries.
    let (n_orderbys, index) = unsafe { ((*scan).numberOfOrderBys, (*scan).indexRelation) };
    if n_orderbys == 0 {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "a navis index can only be scanned with ORDER BY <distance operator> <vector>".into(),
            None,
        )
    }
    count_index_scan(index);
    // SAFETY: the first ORDER BY key.
    let key = unsafe { &*(*scan).orderByData };
    if key.sk_flags & pg_sys::SK_ISNULL as i32 != 0 {
        return; // ORDER BY distance to NULL: no rows, as in pgvector
    }
    // SAFETY: a non-NULL argument of the opclass's input type.
    let query: Vec<f32> =
        unsafe { state.input.as_vector(key.sk_argument, "query vector") }.to_vec();
    if let Err(e) = navis_engine::validate(&query) {
        crate::errors::raise_vector_error(e);
    }
    if state.metric == Metric::Cosine && query.iter().all(|x| *x == 0.0) {
        return; // every cosine distance to a zero query is NaN: nothing to order
    }
    let open = open_index(index);
    let _bound = open.bind(index);
    if !open.index.is_empty() && query.len() != open.index.dim() {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!(
                "query vector has {} dimensions, index \"{}\" has {}",
                query.len(),
                runtime::relation_name(index),
                open.index.dim()
            ),
            Some("Use a query vector with the same number of dimensions as the indexed column."),
        )
    }
    match scan_cache::lookup(index, &open, state.metric, &query) {
        Lookup::Hit(served) => {
            state.served = Some(served);
            state.deferred = Some((Rc::clone(&open), query));
        }
        Lookup::Miss(admission) => {
            state.running = Some(start(Rc::clone(&open), &query, admission, 0));
        }
    }
}

/// PostgreSQL's `pgstat_count_index_scan`: one more scan of `index` in
/// `pg_stat_user_indexes.idx_scan` (btree counts one per `_bt_first`, navis one per rescan
/// with an ORDER BY key). The executor already counts the tuples (`idx_tup_read`).
fn count_index_scan(index: pg_sys::Relation) {
    // SAFETY: `index` is the scan's open relation; this is the macro pair
    // pgstat_should_count_relation / pgstat_count_index_scan spelled out.
    unsafe {
        if (*index).pgstat_info.is_null() && (*index).pgstat_enabled {
            pg_sys::pgstat_assoc_relation(index);
        }
        let info = (*index).pgstat_info;
        if !info.is_null() {
            (*info).t_counts.t_numscans += 1;
        }
    }
}

/// Rows a scan returns at most: `navis.max_scan_tuples`, or the search list when
/// `navis.iterative_scan` is off (the first pass only, as pgvector's `ef_search`).
fn max_scan_tuples() -> u64 {
    let cap = guc::MAX_SCAN_TUPLES.get().max(1) as u64;
    match guc::ITERATIVE_SCAN.get() {
        guc::IterativeScan::Off => cap.min(guc::SEARCH_LIST.get().max(1) as u64),
        _ => cap,
    }
}

fn search_params() -> (SearchParams, bool) {
    let list = guc::SEARCH_LIST.get().max(1) as usize;
    // SAFETY: reading a PostgreSQL GUC variable (kilobytes) in a backend.
    let work_mem_kb = unsafe { pg_sys::work_mem }.max(64) as usize;
    let params = SearchParams {
        k: (guc::RERANK_TOP_K.get().max(1) as usize).min(list),
        list,
        entry_list: guc::ENTRY_POINTS.get().max(1) as usize,
        casr: CasrMode::Off,
        // What one scan may hold past its first pass, as a sort node may (pgvector bounds its
        // iterative scans by work_mem too).
        scan_memory: work_mem_kb.saturating_mul(1024),
        max_results: max_scan_tuples() as usize,
        relaxed_order: guc::ITERATIVE_SCAN.get() == guc::IterativeScan::RelaxedOrder,
        // SAFETY: RecoveryInProgress reads shared state.
        state_may_lag: unsafe { pg_sys::RecoveryInProgress() },
        ..SearchParams::default()
    };
    (params, guc::CASR_ENABLED.get())
}

/// Starts the search; `admission` asks it to keep its first pass's rows for the result
/// cache, `returned` rows were returned from the cache already.
fn start(
    open: Rc<OpenIndex>,
    query: &[f32],
    admission: Option<Admission>,
    returned: u64,
) -> Running {
    let (mut params, casr_on) = search_params();
    params.beam_width =
        guc::beam_width(&open.beam, navis_engine::search::device_width(params.list));
    params.keep_ranked = admission.as_ref().map_or(0, |a| a.keep());
    // The setting's list, before widening: the calibration sample it belongs to.
    let calibration_list = params.list;
    // Lazily deleted vertices take list places without being results: widen as NAVIS does.
    params.list = open.index.widened_list(params.list);
    // Out of memory only: from memory the extra expansions cost 7% at 1M, L = 80.
    params.colocated = guc::EXPAND_COLOCATED.get() && open.beam.from_device();
    let mut calibrating = false;
    if casr_on {
        match open.casr_window(Caller::Search, calibration_list) {
            Some(w) => params.casr = CasrMode::Window(w),
            None => calibrating = true,
        }
    }
    let reader = open.reader();
    // SAFETY: the reader borrows `open.index`, which lives in an Rc kept in the same
    // Running (heap address stable); Running drops the cursor, then the reader, then the Rc.
    let reader: *mut DiskReader<'static> = Box::into_raw(Box::new(unsafe {
        std::mem::transmute::<DiskReader<'_>, DiskReader<'static>>(reader)
    }));
    // SAFETY: `reader` is a live Box pointer used only through this cursor until Drop.
    let cursor = SearchCursor::new(unsafe { &mut *reader }, query, params);
    let cursor = match cursor {
        Ok(c) => c,
        Err(e) => {
            // SAFETY: no cursor borrowed the reader.
            drop(unsafe { Box::from_raw(reader) });
            raise(
                PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
                format!("navis search: {e}"),
                None,
            )
        }
    };
    *open.scans.lock().unwrap() += 1;
    Running {
        cursor: Some(cursor),
        reader,
        open,
        calibrating,
        calibration_list,
        returned,
        limit: max_scan_tuples(),
        failed: false,
        reported: io_stats::Reported::default(),
        admission,
        read_ahead: ReadAhead::default(),
    }
}

/// The value the SQL operator returns, from the engine's search distance.
fn sql_distance(metric: Metric, d: f32) -> f64 {
    match metric {
        Metric::L2 => (d.max(0.0) as f64).sqrt(),
        Metric::InnerProduct => d as f64,
        // unit vectors: |a - b|^2 = 2 - 2 cos
        Metric::Cosine => (d as f64 / 2.0).clamp(0.0, 2.0),
        Metric::L1 => d as f64,
    }
}

/// Fills the scan descriptor with one row.
fn set_tuple(scan: pg_sys::IndexScanDesc, metric: Metric, tid: HeapTid, distance: f32) {
    // SAFETY: filling the descriptor's output fields for this tuple.
    unsafe {
        let out = &mut (*scan).xs_heaptid;
        pgrx::itemptr::item_pointer_set_all(out, tid.block, tid.offset);
        (*scan).xs_recheck = false;
        (*scan).xs_recheckorderby = false;
        if (*scan).numberOfOrderBys > 0 {
            *(*scan).xs_orderbyvals = sql_distance(metric, distance).into_datum().unwrap();
            *(*scan).xs_orderbynulls = false;
        }
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgettuple(
    scan: pg_sys::IndexScanDesc,
    _direction: pg_sys::ScanDirection::Type,
) -> bool {
    let state = state_of(scan);
    let metric = state.metric;
    if let Some(served) = state.served.as_mut() {
        if served.returned() < max_scan_tuples() {
            state.served_ahead.top_up(scan, served.upcoming());
            if let Some((tid, distance)) = served.next_cached() {
                state.served_ahead.took_one();
                set_tuple(scan, metric, tid, distance);
                return true;
            }
        }
        // The executor wants more rows than the hit held: search, once.
        if let Some((open, query)) = state.deferred.take() {
            served.count_fall_through();
            state.running = Some(start(open, &query, None, served.returned()));
        }
    }
    let Some(run) = state.running.as_mut() else {
        return false;
    };
    let open = Rc::clone(&run.open);
    // SAFETY: the scan's index relation, open for the whole scan.
    let _bound = open.bind(unsafe { (*scan).indexRelation });
    loop {
        if run.returned >= run.limit {
            return false;
        }
        pgrx::check_for_interrupts!();
        crate::lios_worker::note_search();
        let cursor = run.cursor.as_mut().expect("cursor present while running");
        let passes_before = cursor.passes();
        let started = guc::LIOS.get().then(std::time::Instant::now);
        // SAFETY: the scan's index relation, open for the whole scan.
        let stalls = crate::lios_stalls::SearchStalls::new(unsafe { (*scan).indexRelation }, &open);
        let filled = match stalls {
            Some(mut work) => {
                navis_engine::io_wait::with_stall_work(&mut work, || cursor.fill_queue())
            }
            None => cursor.fill_queue(),
        };
        let next = filled.and_then(|()| {
            run.read_ahead.top_up(scan, cursor.queued().map(|h| h.tid));
            cursor.next_hit()
        });
        let hit = match next {
            Ok(h) => h,
            Err(e) => {
                run.failed = true;
                raise(
                    PgSqlErrorCode::ERRCODE_IO_ERROR,
                    format!("navis search failed: {e}"),
                    None,
                )
            }
        };
        // SAFETY: as above.
        io_stats::report(
            unsafe { (*scan).indexRelation },
            &cursor.counters(),
            &mut run.reported,
        );
        if passes_before == 0 && cursor.passes() > 0 {
            if let Some(started) = started {
                crate::lios_stalls::record_search(started.elapsed());
            }
            if run.calibrating {
                if let Some(w) = cursor.calibration_sample() {
                    run.open
                        .record_casr_sample(Caller::Search, run.calibration_list, w);
                }
                run.calibrating = false;
            }
            if let Some(admission) = run.admission.take() {
                admission.admit(cursor);
            }
        }
        let Some(hit) = hit else { return false };
        run.read_ahead.took_one();
        if let Some(served) = &state.served {
            if !served.admits(hit.tid, hit.distance) {
                continue; // returned from the cache, or closer than a row it returned
            }
        }
        run.returned += 1;
        set_tuple(scan, metric, hit.tid, hit.distance);
        return true;
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amendscan(scan: pg_sys::IndexScanDesc) {
    let state = state_of(scan);
    state.running = None;
    state.served = None;
    state.deferred = None;
}
