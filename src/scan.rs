//! Ordered index scans: `ORDER BY col <op> const [LIMIT k]`.
//!
//! The scan opens the index (cached per backend by relfilenode and build id, after checking
//! the metapage against the side directory's `navis_build`), starts a resumable
//! [`SearchCursor`] on the query vector from `orderbys[0]`, and hands the executor one heap TID
//! per `amgettuple` in non-decreasing exact distance (`xs_recheckorderby = false`). When the
//! executor asks for more rows than the first pass produced (LIMIT above `navis.search_list`,
//! or a WHERE clause that drops rows) the cursor goes on: graph passes, then exhaustive
//! rounds over every live vertex (`navis_engine::search`), so a scan ends only when every
//! row of the index has been returned (or skipped: found after a farther row) or after
//! `navis.max_scan_tuples` rows. The cursor's state is bounded by `work_mem`.

use crate::datum::VectorInput;
use crate::errors::raise;
use crate::guc;
use crate::sidefiles;
use navis_engine::cache::Caller;
use navis_engine::casr::WindowCalibrator;
use navis_engine::counters::SearchCounters;
use navis_engine::index::{DiskReader, Index, SpareReader};
use navis_engine::search::{CasrMode, SearchCursor, SearchParams};
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{PgMemoryContexts, PgSqlErrorCode};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Mutex;

/// `navis.casr_warmup` and the bits of the path's percentile setting.
type CalibrationSettings = (i32, u64);
/// A CASR window found for (warm-up, percentile bits, search list): (.., .., .., window).
type KnownWindow = (i32, u64, usize, usize);

/// An opened index and its per-backend runtime state.
pub struct OpenIndex {
    pub index: Index,
    pub build_id: u64,
    pub dir: PathBuf,
    /// The last CASR window this backend found per path, with the settings (warm-up,
    /// percentile bits) and search list it was found for.
    casr_windows: Cell<[Option<KnownWindow>; 2]>,
    /// Per-backend calibration of lists the pooled one does not serve, by (path, list), with
    /// the settings (warm-up, percentile bits) each was made with.
    local_calibrators: RefCell<HashMap<(usize, usize), (CalibrationSettings, WindowCalibrator)>>,
    /// Engine counters summed over this backend's scans of the index.
    pub counters: Mutex<SearchCounters>,
    pub scans: Mutex<u64>,
    /// Identity of the relation (tablespace, database, relfilenode) for its allocator lock.
    pub lock_key: u64,
    /// The files, io_uring queue and buffers of this backend's last finished reader, with the
    /// `navis.direct_io` setting it was kept under, for the next scan or insert (a reader per
    /// statement would cost two opens, an io_uring setup and fresh buffers every time).
    spare_reader: RefCell<Option<(bool, SpareReader)>>,
}

impl OpenIndex {
    /// The CASR window of `caller`'s path with search list `list` at the current
    /// `navis.casr_warmup` and percentile, once its warm-up is complete; `None` while it is
    /// not: the rerank then loads every candidate and its minimal safe window goes to
    /// [`OpenIndex::record_casr_sample`]. The warm-up is pooled by all backends (in the shared
    /// entrance file) for the first list calibrated; other lists calibrate in this backend.
    pub fn casr_window(&self, caller: Caller, list: usize) -> Option<usize> {
        let (warmup, percentile) = casr_settings(caller);
        let slot = caller as usize;
        let mut known = self.casr_windows.get();
        if let Some((w_warmup, w_percentile, w_list, window)) = known[slot] {
            if (w_warmup, w_percentile, w_list) == (warmup, percentile.to_bits(), list) {
                return Some(window);
            }
        }
        let pooled =
            self.index
                .entrance()
                .calibration(caller, list, warmup.max(1) as usize, percentile);
        let window = match pooled {
            Some((_, window)) => window,
            None => self.local_calibration(caller, list, |c| c.window()),
        };
        if let Some(w) = window {
            known[slot] = Some((warmup, percentile.to_bits(), list, w));
            self.casr_windows.set(known);
        }
        window
    }

    /// Adds a warm-up rerank's minimal safe window to the calibration sample of its list.
    pub fn record_casr_sample(&self, caller: Caller, list: usize, needed: usize) {
        if !self
            .index
            .entrance()
            .record_calibration(caller, list, needed)
        {
            self.local_calibration(caller, list, |c| c.record_window(needed));
        }
    }

    /// Warm-up samples behind [`OpenIndex::casr_window`] so far.
    pub fn casr_samples(&self, caller: Caller, list: usize) -> u64 {
        let (warmup, percentile) = casr_settings(caller);
        match self
            .index
            .entrance()
            .calibration(caller, list, warmup.max(1) as usize, percentile)
        {
            Some((samples, _)) => samples,
            None => self.local_calibration(caller, list, |c| c.samples() as u64),
        }
    }

    /// This backend's own calibrator for a list the pooled sample does not serve, made anew
    /// when the warm-up or percentile setting changed.
    fn local_calibration<T>(
        &self,
        caller: Caller,
        list: usize,
        f: impl FnOnce(&mut WindowCalibrator) -> T,
    ) -> T {
        let (warmup, percentile) = casr_settings(caller);
        let key = (warmup, percentile.to_bits());
        let mut calibrators = self.local_calibrators.borrow_mut();
        let entry = calibrators
            .entry((caller as usize, list))
            .or_insert_with(|| (key, new_calibrator(caller, warmup, percentile)));
        if entry.0 != key {
            *entry = (key, new_calibrator(caller, warmup, percentile));
        }
        f(&mut entry.1)
    }

    /// A reader over this index, reusing the spare one when there is one.
    pub fn reader(&self) -> DiskReader<'_> {
        let direct = guc::DIRECT_IO.get();
        navis_engine::io::set_direct_io(direct);
        let spare = self.spare_reader.borrow_mut().take();
        let spare = spare.and_then(|(was_direct, s)| (was_direct == direct).then_some(s));
        match self.index.reader_reusing(spare) {
            Ok(r) => r,
            Err(e) => raise(
                PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!("navis could not open a reader: {e}"),
                None,
            ),
        }
    }

    /// Keeps a finished reader for the next [`OpenIndex::reader`]. Not while unwinding: an
    /// error may have interrupted the reader's work.
    pub fn recycle(&self, reader: DiskReader<'_>) {
        if !std::thread::panicking() {
            *self.spare_reader.borrow_mut() = Some((guc::DIRECT_IO.get(), reader.into_spare()));
        }
    }

    /// The writer locks of this index (LWLocks in shared memory).
    pub fn locks(&self) -> crate::shmem::PgLocks {
        crate::shmem::PgLocks::new(crate::shmem::require("navis index writes"), self.lock_key)
    }
}

/// Opened indexes of this backend by (tablespace, database, relfilenode, build id).
type OpenIndexCache = HashMap<(u32, u32, u32, u64), Rc<OpenIndex>>;

thread_local! {
    static CACHE: RefCell<OpenIndexCache> = RefCell::new(HashMap::new());
}

/// Drops cached indexes whose side directory is `dir` (it is being removed).
pub fn evict_dir(dir: &Path) {
    CACHE.with(|c| c.borrow_mut().retain(|_, v| v.dir != dir));
}

fn missing(index: pg_sys::Relation, detail: String) -> ! {
    let name = sidefiles::relation_name(index);
    crate::errors::raise_detail(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("navis index {name} is missing its side files (or they belong to another build): REINDEX INDEX {name}"),
        detail,
        Some(&format!("Run REINDEX INDEX {name} to rebuild it from the table.")),
    )
}

/// The opened index behind a relation, from the cache or freshly checked and opened.
pub fn open_index(index: pg_sys::Relation) -> Rc<OpenIndex> {
    let Some(meta) = sidefiles::read_metapage(index) else {
        missing(index, "the index has no navis metapage".into())
    };
    if meta.version != sidefiles::META_VERSION {
        missing(
            index,
            format!(
                "metapage format version {} is not {}",
                meta.version,
                sidefiles::META_VERSION
            ),
        );
    }
    // SAFETY: an open relation's rd_node.
    let node = unsafe { (*index).rd_node };
    let key = (
        node.spcNode.to_u32(),
        node.dbNode.to_u32(),
        node.relNode.to_u32(),
        meta.build_id,
    );
    let dir = sidefiles::side_dir(index);
    if let Some(hit) = CACHE.with(|c| c.borrow().get(&key).cloned()) {
        if hit.dir.exists() {
            return hit;
        }
    }
    reopen(index, key, meta.build_id, dir)
}

fn new_calibrator(caller: Caller, warmup: i32, percentile: f64) -> WindowCalibrator {
    WindowCalibrator::new(warmup.max(1) as usize, percentile).unwrap_or_else(|_| match caller {
        Caller::Search => WindowCalibrator::for_search(),
        Caller::Insert => WindowCalibrator::for_insert(),
    })
}

/// `navis.casr_warmup` and the path's percentile setting.
fn casr_settings(caller: Caller) -> (i32, f64) {
    let percentile = match caller {
        Caller::Search => guc::CASR_PERCENTILE_SEARCH.get(),
        Caller::Insert => guc::CASR_PERCENTILE_INSERT.get(),
    };
    (guc::CASR_WARMUP.get(), percentile)
}

fn reopen(
    index: pg_sys::Relation,
    key: (u32, u32, u32, u64),
    build_id: u64,
    dir: PathBuf,
) -> Rc<OpenIndex> {
    let meta_name = sidefiles::read_metapage(index)
        .map(|m| m.dir_name())
        .unwrap_or_default();
    if dir.file_name().map(|n| n.to_string_lossy().into_owned()) != Some(meta_name.clone()) {
        missing(
            index,
            format!(
                "the metapage names side directory \"{meta_name}\", expected \"{}\"",
                dir.display()
            ),
        );
    }
    match sidefiles::read_build_file(&dir) {
        None => missing(
            index,
            format!(
                "\"{}\" has no readable {} file",
                dir.display(),
                sidefiles::BUILD_FILE
            ),
        ),
        Some(b) if b.build_id != build_id => missing(
            index,
            format!(
                "\"{}\" holds build {:016x}, the metapage expects {:016x}",
                dir.display(),
                b.build_id,
                build_id
            ),
        ),
        Some(_) => {}
    }
    let opened = Index::open(&dir).unwrap_or_else(|e| missing(index, e.to_string()));
    // Edge pages go through the shared NAVIS-Cache, keyed by this build.
    if let Some(cache) = crate::cache::shared_cache() {
        opened
            .files()
            .attach_cache(navis_engine::cache::CacheBinding {
                cache,
                tag: build_id,
            });
    }
    let lock_key = key.0 as u64 ^ (key.1 as u64).rotate_left(21) ^ (key.2 as u64).rotate_left(42);
    // The first backend to open the index in this lifetime of shared memory rebuilds the
    // allocator state from the indirection table (a crash may have cut an insert short).
    let shared = crate::shmem::require("navis indexes");
    let locks = crate::shmem::PgLocks::new(shared, lock_key);
    if let Err(e) = navis_engine::update::recover(opened.files(), &locks, shared.epoch()) {
        missing(index, format!("recovering the allocator state failed: {e}"));
    }
    let open = Rc::new(OpenIndex {
        index: opened,
        build_id,
        dir: dir.clone(),
        casr_windows: Cell::new([None; 2]),
        local_calibrators: RefCell::new(HashMap::new()),
        counters: Mutex::new(SearchCounters::default()),
        scans: Mutex::new(0),
        lock_key,
        spare_reader: RefCell::new(None),
    });
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        // Another build of the same relfilenode (or a removed one) is never used again.
        c.retain(|k, _| !(k.0 == key.0 && k.1 == key.1 && k.2 == key.2));
        c.insert(key, open.clone());
    });
    open
}

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
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(cursor) = self.cursor.take() {
            let mut total = self.open.counters.lock().unwrap();
            total.merge(cursor.counters());
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
    // SAFETY: orderByData has numberOfOrderBys entries.
    let (n_orderbys, index) = unsafe { ((*scan).numberOfOrderBys, (*scan).indexRelation) };
    if n_orderbys == 0 {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "a navis index can only be scanned with ORDER BY <distance operator> <vector>".into(),
            None,
        )
    }
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
    if !open.index.is_empty() && query.len() != open.index.dim() {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!(
                "query vector has {} dimensions, index \"{}\" has {}",
                query.len(),
                sidefiles::relation_name(index),
                open.index.dim()
            ),
            Some("Use a query vector with the same number of dimensions as the indexed column."),
        )
    }
    state.running = Some(start(open, &query));
}

fn search_params() -> (SearchParams, bool) {
    let list = guc::SEARCH_LIST.get().max(1) as usize;
    // SAFETY: reading a PostgreSQL GUC variable (kilobytes) in a backend.
    let work_mem_kb = unsafe { pg_sys::work_mem }.max(64) as usize;
    let params = SearchParams {
        k: (guc::RERANK_TOP_K.get().max(1) as usize).min(list),
        list,
        beam_width: guc::BEAM_WIDTH.get().max(1) as usize,
        entry_list: guc::ENTRY_POINTS.get().max(1) as usize,
        casr: CasrMode::Off,
        // What one scan may hold past its first pass, as a sort node may (pgvector bounds its
        // iterative scans by work_mem too).
        scan_memory: work_mem_kb.saturating_mul(1024),
        max_results: guc::MAX_SCAN_TUPLES.get().max(1) as usize,
        ..SearchParams::default()
    };
    (params, guc::CASR_ENABLED.get())
}

fn start(open: Rc<OpenIndex>, query: &[f32]) -> Running {
    let (mut params, casr_on) = search_params();
    // The setting's list, before widening: the calibration sample it belongs to.
    let calibration_list = params.list;
    // Lazily deleted vertices take list places without being results: widen as NAVIS does.
    params.list = open.index.widened_list(params.list);
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
        returned: 0,
        limit: guc::MAX_SCAN_TUPLES.get().max(1) as u64,
        failed: false,
    }
}

/// The value the SQL operator returns, from the engine's search distance.
fn sql_distance(metric: Metric, d: f32) -> f64 {
    match metric {
        Metric::L2 => (d.max(0.0) as f64).sqrt(),
        Metric::InnerProduct => d as f64,
        // unit vectors: |a - b|^2 = 2 - 2 cos
        Metric::Cosine => (d as f64 / 2.0).clamp(0.0, 2.0),
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amgettuple(
    scan: pg_sys::IndexScanDesc,
    _direction: pg_sys::ScanDirection::Type,
) -> bool {
    let state = state_of(scan);
    let metric = state.metric;
    let Some(run) = state.running.as_mut() else {
        return false;
    };
    if run.returned >= run.limit {
        return false;
    }
    pgrx::check_for_interrupts!();
    let cursor = run.cursor.as_mut().expect("cursor present while running");
    let passes_before = cursor.passes();
    let hit = match cursor.next_hit() {
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
    if run.calibrating && passes_before == 0 && cursor.passes() > 0 {
        if let Some(w) = cursor.calibration_sample() {
            run.open
                .record_casr_sample(Caller::Search, run.calibration_list, w);
        }
        run.calibrating = false;
    }
    let Some(hit) = hit else { return false };
    run.returned += 1;
    // SAFETY: filling the descriptor's output fields for this tuple.
    unsafe {
        let tid = &mut (*scan).xs_heaptid;
        pgrx::itemptr::item_pointer_set_all(tid, hit.tid.block, hit.tid.offset);
        (*scan).xs_recheck = false;
        (*scan).xs_recheckorderby = false;
        if (*scan).numberOfOrderBys > 0 {
            *(*scan).xs_orderbyvals = sql_distance(metric, hit.distance).into_datum().unwrap();
            *(*scan).xs_orderbynulls = false;
        }
    }
    true
}

#[pg_guard]
pub unsafe extern "C-unwind" fn amendscan(scan: pg_sys::IndexScanDesc) {
    state_of(scan).running = None;
}
