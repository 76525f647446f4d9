//! `ambuild`: collect every row's vector and heap TID, build the engine index, and write it
//! into the index's own relation (RFC 0001 §7).
//!
//! Steps: scan the heap (rows checked as they arrive, memory bounded by
//! `maintenance_work_mem`: once the rows outgrow an in-memory build they go to a spool file
//! in `base/pgsql_tmp`, and the build becomes the memory-bounded one,
//! `navis_engine::relation::build_relation_partitioned`, RFC 0005); `build_relation` with
//! `max_parallel_maintenance_workers + 1` compute threads, progress reported to
//! `pg_stat_progress_create_index` and cancellation polled through `InterruptPending`; its
//! pages go into the new relfilenode through [`PgStore`] as `BULK_IMAGES` records, the
//! metapage (block 0) last. Everything the index has is in its relation: REINDEX, TRUNCATE,
//! DROP, SET TABLESPACE and CREATE DATABASE handle it as they handle any relation.

use crate::build_rows::RowReader;
use crate::datum::VectorInput;
use crate::errors::raise;
use crate::options::BuildOptions;
use crate::pgstore::PgStore;
use crate::shmem;
use navis_engine::index::partitioned::PartitionPlan;
use navis_engine::index::spool::RowSpool;
use navis_engine::index::{BuildPhase, IndexError, IndexParams};
use navis_engine::relation::{build_relation, build_relation_partitioned};
use navis_engine::storage::HeapTid;
use navis_engine::store::PageStore;
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use std::ffi::CStr;

/// Sub-phase numbers shown in `pg_stat_progress_create_index.phase` (1 is PostgreSQL's
/// "initializing").
const PHASE_SCAN: i64 = 2;
/// The engine's phases, numbered from 3 in this order (partitioning last, so the numbers
/// of the others did not change when it came).
const ENGINE_PHASES: [BuildPhase; 7] = [
    BuildPhase::Sampling,
    BuildPhase::PqTraining,
    BuildPhase::GraphBuild,
    BuildPhase::Placement,
    BuildPhase::Entrance,
    BuildPhase::Writing,
    BuildPhase::Partitioning,
];

fn phase_number(p: BuildPhase) -> i64 {
    3 + ENGINE_PHASES.iter().position(|&q| q == p).unwrap_or(0) as i64
}

/// `ambuildphasename`.
#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildphasename(phase: i64) -> *mut std::ffi::c_char {
    let name: &'static CStr = match phase {
        PHASE_SCAN => c"scanning table",
        3 => c"sampling",
        4 => c"training PQ",
        5 => c"building graph",
        6 => c"placing edge lists and training PQ",
        7 => c"building entrance graph",
        8 => c"writing index pages",
        9 => c"partitioning rows (memory-bounded build)",
        _ => return std::ptr::null_mut(),
    };
    name.as_ptr() as *mut _
}

fn progress(param: u32, value: i64) {
    // SAFETY: plain progress-reporting call in the backend that runs CREATE INDEX.
    unsafe { pg_sys::pgstat_progress_update_param(param as i32, value) };
}

/// The metric an index orders by, from the ORDER BY operator of its opclass.
pub fn index_metric(index: pg_sys::Relation) -> Metric {
    crate::am::index_metric(index)
}

/// What sizes the in-memory part of a build: the index options and the thread count.
#[derive(Clone, Copy)]
struct Sizing {
    max_degree: usize,
    build_list: usize,
    pq_bytes: Option<usize>,
    threads: usize,
    budget: u64,
}

impl Sizing {
    /// The sizing of a build of `options` in this session: `maintenance_work_mem` and
    /// `max_parallel_maintenance_workers + 1` threads.
    fn of(options: &BuildOptions) -> Sizing {
        // SAFETY: reading integer GUC globals.
        let (budget_kb, workers) = unsafe {
            (
                pg_sys::maintenance_work_mem as u64,
                pg_sys::max_parallel_maintenance_workers,
            )
        };
        Sizing {
            max_degree: options.max_degree as usize,
            build_list: options.build_list as usize,
            pq_bytes: (options.pq_bytes > 0).then_some(options.pq_bytes as usize),
            threads: (workers.max(0) as usize) + 1,
            budget: budget_kb * 1024,
        }
    }

    /// The PQ code size of a `dim`-dimensional index with these options.
    fn pq_bytes_for(&self, dim: usize) -> usize {
        IndexParams {
            pq_bytes: self.pq_bytes,
            ..IndexParams::default()
        }
        .pq_bytes_for(dim)
    }

    /// Rows of `dim` dimensions whose in-memory build (with the 8-byte heap TID the scan keeps
    /// per row) fits in maintenance_work_mem.
    fn rows_in_memory(&self, dim: usize) -> usize {
        navis_engine::graph::rows_within_budget(
            self.budget,
            8,
            dim,
            self.max_degree,
            self.pq_bytes_for(dim),
            self.build_list,
            self.threads,
        )
    }

    /// Memory an in-memory build of `rows` rows needs.
    fn bytes_for(&self, rows: usize, dim: usize) -> u64 {
        navis_engine::graph::memory::estimate_build_memory_detailed(
            rows,
            dim,
            self.max_degree,
            self.pq_bytes_for(dim),
            self.build_list,
            self.threads,
        )
        .total()
            + rows as u64 * 8
    }
}

/// The engine's build parameters for `index` with its `options`, `dim` known or not, in this
/// session (threads and memory budget as for CREATE INDEX).
pub(crate) fn index_params(
    index: pg_sys::Relation,
    options: &BuildOptions,
    dim: Option<usize>,
) -> IndexParams {
    let sizing = Sizing::of(options);
    IndexParams {
        metric: index_metric(index),
        dim,
        max_degree: options.max_degree as usize,
        build_list: options.build_list as usize,
        alpha: options.alpha,
        pq_bytes: sizing.pq_bytes,
        entrance_ratio: options.entrance_ratio as f32,
        entrance_degree: options.entrance_degree as usize,
        threads: sizing.threads,
        memory_budget: Some(sizing.budget),
        ..IndexParams::default()
    }
}

/// Rows of `dim` dimensions an in-memory build of `index` may take in this session (what
/// maintenance_work_mem holds).
pub(crate) fn rows_in_memory(options: &BuildOptions, dim: usize) -> usize {
    Sizing::of(options).rows_in_memory(dim)
}

/// Rows collected by the build scan: in memory while an in-memory build of them fits in
/// maintenance_work_mem, then all of them in a spool file (the heap TIDs stay in memory).
struct BuildScan {
    rows: RowReader,
    sizing: Sizing,
    metric: Metric,
    /// How many rows the in-memory build takes, once the first row gave the dimension.
    in_memory: Option<usize>,
    vectors: Vec<f32>,
    tids: Vec<HeapTid>,
    spool: Option<RowSpool>,
}

impl BuildScan {
    /// Moves the rows collected so far into a new spool file, which takes every later row.
    fn start_spool(&mut self, dim: usize) -> &mut RowSpool {
        let name = format!(
            "pgsql_tmp_navis_build_{}_{:016x}",
            std::process::id(),
            new_build_id()
        );
        let mut spool = RowSpool::create(std::path::Path::new(SPOOL_DIR), &name, dim, self.metric)
            .unwrap_or_else(|e| {
                raise(
                    PgSqlErrorCode::ERRCODE_IO_ERROR,
                    format!(
                        "navis: could not create the build's spool file {SPOOL_DIR}/{name}: {e}"
                    ),
                    None,
                )
            });
        for row in self.vectors.chunks_exact(dim) {
            spool_push(&mut spool, row);
        }
        self.vectors = Vec::new();
        self.spool.insert(spool)
    }
}

/// Where a memory-bounded build keeps its spool and list files: PostgreSQL's temporary-file
/// directory of the default tablespace, whose `pgsql_tmp*` files a restart removes.
const SPOOL_DIR: &str = "base/pgsql_tmp";

fn spool_push(spool: &mut RowSpool, row: &[f32]) {
    if let Err(e) = spool.push(row) {
        raise(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!(
                "navis: could not spool a row of the build to {}: {e}",
                spool.path().display()
            ),
            None,
        )
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn build_callback(
    _index: pg_sys::Relation,
    tid: pg_sys::ItemPointer,
    values: *mut pg_sys::Datum,
    isnull: *mut bool,
    _tuple_is_alive: bool,
    state: *mut std::ffi::c_void,
) {
    // SAFETY: PostgreSQL passes one value/isnull pair per key column (we have one), a valid
    // TID, and the state pointer we handed to the build scan; the datum is of the opclass's
    // input type.
    let (state, row) = unsafe {
        let state = &mut *(state as *mut BuildScan);
        let row = state.rows.read(*values, *isnull, *tid);
        (state, row)
    };
    let Some((v, tid)) = row else { return };
    let dim = v.len();
    let sizing = state.sizing;
    let in_memory = *state
        .in_memory
        .get_or_insert_with(|| sizing.rows_in_memory(dim));
    if state.spool.is_none() && state.tids.len() >= in_memory {
        state.start_spool(dim);
    }
    match state.spool.as_mut() {
        Some(spool) => spool_push(spool, &v),
        None => state.vectors.extend_from_slice(&v),
    }
    state.tids.push(tid);
    progress(
        pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE,
        state.tids.len() as i64,
    );
}

/// The ERROR of a memory-bounded build whose budget is below its floor.
fn below_floor(sizing: &Sizing, n: usize, dim: usize, floor: u64) -> ! {
    let suggestion = (floor + floor / 4).div_ceil(1 << 20);
    raise(
        PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!(
            "maintenance_work_mem ({} kB) is below what a navis build of {n} rows of {dim} \
             dimensions needs: about {} MB",
            sizing.budget / 1024,
            floor.div_ceil(1 << 20)
        ),
        Some(&format!(
            "Raise maintenance_work_mem for this session (SET maintenance_work_mem = '{suggestion}MB'), \
             or lower max_degree or build_list."
        )),
    )
}

/// Whether a cancel, statement timeout or termination is pending. `InterruptPending` alone
/// is not enough: it is also set for interrupts that do not end the query (barriers,
/// parallel messages), which ProcessInterrupts handles without raising.
pub(crate) fn interrupt_pending() -> bool {
    // SAFETY: these are sig_atomic_t flags set by signal handlers; a volatile read from any
    // thread is a plain load and calls nothing in PostgreSQL.
    unsafe {
        std::ptr::read_volatile(std::ptr::addr_of!(pg_sys::InterruptPending)) != 0
            && (std::ptr::read_volatile(std::ptr::addr_of!(pg_sys::QueryCancelPending)) != 0
                || std::ptr::read_volatile(std::ptr::addr_of!(pg_sys::ProcDiePending)) != 0)
    }
}

#[pg_guard]
pub unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    shmem::require("CREATE INDEX ... USING navis");
    // SAFETY: an open index relation has at least one entry in rd_opcintype.
    let type_oid = unsafe { *(*index).rd_opcintype };
    let input = VectorInput::for_type(type_oid);
    let metric = index_metric(index);
    let options = BuildOptions::of_index(index);
    let sizing = Sizing::of(&options);
    let budget = sizing.budget;
    progress(pg_sys::PROGRESS_CREATEIDX_SUBPHASE, PHASE_SCAN);
    let mut scan = BuildScan {
        rows: RowReader::new(input, metric),
        sizing,
        metric,
        in_memory: None,
        vectors: Vec::new(),
        tids: Vec::new(),
        spool: None,
    };
    // Heap tuples the scan considered, whether indexed or not (NULLs, zero vectors, rows a
    // partial index's predicate leaves out): PostgreSQL sets the table's reltuples from it,
    // so it must count the table, not the index.
    let heap_tuples =
        crate::build_rows::scan_heap(heap, index, index_info, build_callback, &mut scan);
    let dim = scan.rows.dim;
    if let Some(dim) = dim {
        options.validate_for(dim);
    }
    let n = scan.tids.len();
    progress(pg_sys::PROGRESS_CREATEIDX_TUPLES_TOTAL, n as i64);
    let params = index_params(index, &options, dim);
    let plan = scan.spool.as_mut().map(|spool| {
        if let Err(e) = spool.finish() {
            raise(
                PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!(
                    "navis: could not write the build's spool file {}: {e}",
                    spool.path().display()
                ),
                None,
            )
        }
        let dim = spool.dim();
        let plan = PartitionPlan::new(n, dim, &params, budget).unwrap_or_else(|_| {
            below_floor(&sizing, n, dim, PartitionPlan::floor(n, dim, &params))
        });
        pgrx::notice!(
            "navis: maintenance_work_mem ({} kB) holds an in-memory build of {} of the {n} rows \
             of this index; building it in about {} overlapping partitions of at most {} rows and \
             merging them (memory-bounded build; about {} MB of maintenance_work_mem would \
             build it in one piece)",
            budget / 1024,
            scan.in_memory.unwrap_or(0),
            plan.partitions,
            plan.partition_rows,
            sizing.bytes_for(n, dim).div_ceil(1 << 20)
        );
        plan
    });

    let store = PgStore::for_new_relation(index).unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("navis index build: {e}"),
            None,
        )
    });
    let on_progress = |phase: BuildPhase, done: u64, total: u64| {
        // Runs on the calling thread only (engine contract), so it may call PostgreSQL. One
        // update of the three, so that a reader never sees one phase's count against
        // another's total.
        let params = [
            pg_sys::PROGRESS_CREATEIDX_SUBPHASE as i32,
            pg_sys::PROGRESS_CREATEIDX_TUPLES_TOTAL as i32,
            pg_sys::PROGRESS_CREATEIDX_TUPLES_DONE as i32,
        ];
        let values = [phase_number(phase), total as i64, done.min(total) as i64];
        // SAFETY: two arrays of three, in the backend that runs CREATE INDEX.
        unsafe { pg_sys::pgstat_progress_update_multi_param(3, params.as_ptr(), values.as_ptr()) };
    };
    let cancel = interrupt_pending;
    let build_id = new_build_id();
    let result = match (&scan.spool, plan) {
        (Some(spool), Some(_)) => build_relation_partitioned(
            &store,
            spool,
            &scan.tids,
            &params,
            build_id,
            &on_progress,
            &cancel,
        )
        .map(|(report, meta, _)| (report, meta)),
        _ => build_relation(
            &store,
            &scan.vectors,
            &scan.tids,
            &params,
            build_id,
            &on_progress,
            &cancel,
        ),
    }
    .and_then(|built| store.sync().map(|()| built).map_err(IndexError::from));
    drop(std::mem::take(&mut scan.vectors));
    // The spool and list files go now, whatever happened.
    drop(scan.spool.take());
    // A failed build leaves pages in the relation; the transaction aborts and PostgreSQL
    // removes the relfilenode, so there is nothing to undo here.
    if let Err(e) = result {
        build_failed(e);
    }
    // (REINDEX, TRUNCATE, VACUUM FULL: LIOS tasks queued for the build this one replaces
    // are stale)
    crate::lios::new_build(index, build_id);
    // The build held the vectors and the graph (up to maintenance_work_mem); the session
    // lives on after CREATE INDEX (navis_engine::heap).
    navis_engine::heap::return_freed_memory();

    // SAFETY: alloc0 returns a zeroed IndexBuildResult in the current memory context, which
    // is what ambuild must hand back to PostgreSQL.
    let mut result = unsafe { PgBox::<pg_sys::IndexBuildResult>::alloc0() };
    result.heap_tuples = heap_tuples;
    result.index_tuples = n as f64;
    result.into_pg()
}

/// `ambuildempty`: the init fork of an index on an unlogged table, which PostgreSQL copies
/// over the main fork after a crash: an empty index (metapage, placeholder codebook, extent
/// map), WAL-logged page by page as `btbuildempty` does. The first insert after the reset
/// builds it from its first row (regrow.rs).
#[pg_guard]
pub unsafe extern "C-unwind" fn ambuildempty(index: pg_sys::Relation) {
    let options = BuildOptions::of_index(index);
    let params = index_params(index, &options, None);
    let image = navis_engine::store::MemStore::new();
    let built = build_relation(
        &image,
        &[],
        &[],
        &params,
        new_build_id(),
        &|_, _, _| {},
        &|| false,
    );
    if let Err(e) = built {
        build_failed(e);
    }
    let blocks = image.nblocks().unwrap_or(0);
    let mut page = crate::relstore::AlignedBlock::zeroed();
    // SAFETY: the init fork exists (PostgreSQL created it before calling us) and nobody else
    // can see this relation yet; each page is logged, then checksummed and written, and the
    // fork is synced before commit, as for every init fork.
    unsafe {
        let smgr = pg_sys::RelationGetSmgr(index);
        let fork = pg_sys::ForkNumber::INIT_FORKNUM;
        for block in 0..blocks {
            if let Err(e) = image.read_block(block, page.bytes_mut()) {
                build_failed(e.into());
            }
            let mut node = (*smgr).smgr_rnode.node;
            pg_sys::log_newpage(&mut node, fork, block, page.as_mut_ptr().cast(), true);
            pg_sys::PageSetChecksumInplace(page.as_mut_ptr().cast(), block);
            pg_sys::smgrextend(smgr, fork, block, page.as_mut_ptr(), false);
        }
        pg_sys::smgrimmedsync(smgr, fork);
    }
}

/// A fresh random build id (never 0): it keys NAVIS-Cache frames and runtime copies, so two
/// builds of one relfilenode (TRUNCATE of a table created in the same transaction) never
/// share either.
pub(crate) fn new_build_id() -> u64 {
    let mut id = 0u64;
    // SAFETY: pg_strong_random fills exactly 8 bytes of a local.
    let ok = unsafe { pg_sys::pg_strong_random(&mut id as *mut u64 as *mut std::ffi::c_void, 8) };
    if !ok || id == 0 {
        id = std::process::id() as u64
            ^ 0x9e37_79b9_7f4a_7c15
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
    }
    id
}

fn build_failed(e: IndexError) -> ! {
    match e {
        IndexError::Cancelled => {
            // The engine has unwound and its files are gone; now let PostgreSQL raise the
            // cancel (or timeout) error that set InterruptPending.
            pgrx::check_for_interrupts!();
            raise(PgSqlErrorCode::ERRCODE_QUERY_CANCELED, "navis index build cancelled".into(), None)
        }
        IndexError::Memory(m) => raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("navis index build needs more memory than maintenance_work_mem allows: {m}"),
            Some("Raise maintenance_work_mem for this session (SET maintenance_work_mem = '2GB'), or lower max_degree / build_list."),
        ),
        IndexError::Invalid(m) => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("navis index build failed: {m}"),
            None,
        ),
        other => raise(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("navis index build failed: {other}"),
            None,
        ),
    }
}
