//! `navis.*` settings for query time and insert time.
//!
//! Defaults follow the NAVIS paper (digest §1.9), except `navis.insert_list` (RFC 0009).
//! Build-time parameters are index options instead (see `options.rs`), because they are fixed
//! once the index exists.

use navis_engine::search::BeamAdvisor;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// `navis.search_list`: |E_search|, candidates kept during a search (paper: 40).
pub static SEARCH_LIST: GucSetting<i32> = GucSetting::<i32>::new(40);
/// `navis.insert_list`: |E_pos|, candidates kept while an insert seeks its position. 64, the
/// list pgvector's ef_construction gives its inserts, not the paper's 100: RFC 0009.
pub static INSERT_LIST: GucSetting<i32> = GucSetting::<i32>::new(64);
/// `navis.beam_width`: edge pages read per traversal hop; 0 chooses ([`beam_width`]).
pub static BEAM_WIDTH: GucSetting<i32> = GucSetting::<i32>::new(0);
/// `navis.expand_colocated`: while edge pages need device reads, a search also expands the
/// unexpanded candidates whose edge lists lie on a page it read (RFC 0010 addendum 2).
pub static EXPAND_COLOCATED: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `navis.entry_points`: search list on the entrance graph, i.e. entry points (paper: 10).
pub static ENTRY_POINTS: GucSetting<i32> = GucSetting::<i32>::new(10);
/// `navis.rerank_top_k`: K whose stability ends a CASR rerank (paper: 10).
pub static RERANK_TOP_K: GucSetting<i32> = GucSetting::<i32>::new(10);
/// `navis.casr_percentile_search`: percentile of warm-up windows used for searches (README: 99).
pub static CASR_PERCENTILE_SEARCH: GucSetting<f64> = GucSetting::<f64>::new(99.0);
/// `navis.casr_percentile_insert`: the same for inserts (README: 90).
pub static CASR_PERCENTILE_INSERT: GucSetting<f64> = GucSetting::<f64>::new(90.0);
/// `navis.casr_warmup`: reranks per path used to calibrate the CASR window (README: 1000).
pub static CASR_WARMUP: GucSetting<i32> = GucSetting::<i32>::new(1000);
/// `navis.casr`: switch CASR off to rerank every explored candidate (ablation).
pub static CASR_ENABLED: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `navis.direct_io`: read edge and vector pages with O_DIRECT (on) or through the page cache (off).
pub static DIRECT_IO: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `navis.max_scan_tuples`: bound on rows an ordered scan may produce when the executor keeps
/// asking for more (LIMIT above the list, or a selective WHERE), like `hnsw.max_scan_tuples`.
/// Below it a scan ends only when the index has no row left to return.
pub static MAX_SCAN_TUPLES: GucSetting<i32> = GucSetting::<i32>::new(20_000);
/// `navis.iterative_scan`: pgvector's `hnsw.iterative_scan`, on navis's cursor.
pub static ITERATIVE_SCAN: GucSetting<IterativeScan> =
    GucSetting::<IterativeScan>::new(IterativeScan::StrictOrder);
/// NAVIS-Cache size in MB (postmaster). 0 turns the cache off.
pub static CACHE_SIZE_MB: GucSetting<i32> = GucSetting::<i32>::new(64);
pub static CACHE_POLICY: GucSetting<CachePolicy> =
    GucSetting::<CachePolicy>::new(CachePolicy::Navis);
pub static CACHE_FROZEN_EVICTION: GucSetting<FrozenEvictionSetting> =
    GucSetting::<FrozenEvictionSetting>::new(FrozenEvictionSetting::Fifo);
pub static CACHE_SEARCH_PROMOTE_HITS: GucSetting<i32> =
    GucSetting::<i32>::new(navis_engine::cache::DEFAULT_SEARCH_PROMOTE_HITS as i32);

/// `navis.result_cache`: answer ordered scans from the Aker result cache (session; a hit is
/// approximate, so it is opt-in).
pub static RESULT_CACHE: GucSetting<bool> = GucSetting::<bool>::new(false);
/// `navis.result_cache_size`: MB of shared memory for the result cache (postmaster; 0: none).
pub static RESULT_CACHE_SIZE_MB: GucSetting<i32> = GucSetting::<i32>::new(0);
/// `navis.result_cache_indexes`: indexes that may hold a cache partition at once (postmaster).
pub static RESULT_CACHE_INDEXES: GucSetting<i32> = GucSetting::<i32>::new(4);
/// `navis.result_cache_reserve`: Δ, rows an entry keeps beyond the k it answers with.
pub static RESULT_CACHE_RESERVE: GucSetting<i32> = GucSetting::<i32>::new(10);
/// `navis.result_cache_fixed_threshold`: one global reuse radius instead of Aker's adaptive
/// per-entry ones (the paper's Proximity+ baseline); 0 means adaptive.
pub static RESULT_CACHE_FIXED_THRESHOLD: GucSetting<f64> = GucSetting::<f64>::new(0.0);
/// `navis.lios`: leave inserts' neighbour back-edges to searches' read stalls (LIOS).
pub static LIOS: GucSetting<bool> = GucSetting::<bool>::new(false);
/// `navis.lios_latency_budget`: θ, the share of mean search latency update work may add.
pub static LIOS_LATENCY_BUDGET: GucSetting<f64> = GucSetting::<f64>::new(0.05);
/// `navis.lios_queue_size`: deferred back-edges the server can hold (postmaster; 0: none).
/// `navis.lios_worker`: a background worker per database drains LIOS tasks while no search runs.
pub static LIOS_WORKER: GucSetting<bool> = GucSetting::<bool>::new(true);
pub static LIOS_QUEUE_SIZE: GucSetting<i32> = GucSetting::<i32>::new(65_536);

/// `navis.iterative_scan`.
#[derive(pgrx::PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum IterativeScan {
    /// The first pass only: at most `navis.search_list` rows, as pgvector without iterative
    /// scans.
    #[name = c"off"]
    Off,
    /// Exact ascending distance; a row found after a farther one is skipped.
    #[name = c"strict_order"]
    StrictOrder,
    /// Nearly ascending; a row found late is returned late, and no row is left out.
    #[name = c"relaxed_order"]
    RelaxedOrder,
}

/// `navis.cache_policy`.
#[derive(pgrx::PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum CachePolicy {
    #[name = c"navis"]
    Navis,
    #[name = c"lru"]
    Lru,
    #[name = c"off"]
    Off,
}

/// `navis.cache_frozen_eviction`.
#[derive(pgrx::PostgresGucEnum, Clone, Copy, PartialEq, Eq, Debug)]
pub enum FrozenEvictionSetting {
    #[name = c"fifo"]
    Fifo,
    #[name = c"random"]
    Random,
    #[name = c"clock"]
    Clock,
}

/// Registers every setting. Called once from `_PG_init`.
pub fn register() {
    int(
        c"navis.search_list",
        c"Size of the candidate list kept by a navis search (|E_search|).",
        c"Larger values raise recall and cost. The NAVIS paper uses 40.",
        &SEARCH_LIST,
        1,
        10_000,
    );
    int(
        c"navis.insert_list",
        c"Size of the candidate list used by a navis insert to find its neighbours (|E_pos|).",
        c"Larger values improve graph quality and slow inserts. The NAVIS paper uses 100; navis defaults to 64 (RFC 0009).",
        &INSERT_LIST,
        10,
        10_000,
    );
    int(
        c"navis.beam_width",
        c"Edge pages read per traversal hop in navis searches and inserts.",
        c"0 chooses: while the index's edge pages need device reads, one page per 5 candidates \
          of navis.search_list (4, the NAVIS paper's width, up to 16) in searches and 4 in \
          inserts; 1 while they come from memory.",
        &BEAM_WIDTH,
        0,
        64,
    );
    int(
        c"navis.entry_points",
        c"Search list on the in-memory entrance graph, i.e. the number of entry points.",
        c"The NAVIS paper uses 10.",
        &ENTRY_POINTS,
        1,
        1_000,
    );
    int(c"navis.rerank_top_k", c"K whose stability ends a convergence-aware rerank (CASR).",
        c"Reranking stops once the exact top-K has not changed for a calibrated number of loads. The NAVIS paper uses 10.",
        &RERANK_TOP_K, 1, 1_000);
    real(
        c"navis.casr_percentile_search",
        c"Percentile of warm-up windows that sets the CASR window for searches.",
        c"100 takes the largest window seen during warm-up (NAVIS default).",
        &CASR_PERCENTILE_SEARCH,
        1.0,
        100.0,
    );
    real(
        c"navis.casr_percentile_insert",
        c"Percentile of warm-up windows that sets the CASR window for inserts.",
        c"NAVIS default 90.",
        &CASR_PERCENTILE_INSERT,
        1.0,
        100.0,
    );
    int(
        c"navis.casr_warmup",
        c"Reranks per path that load every candidate to calibrate the CASR window.",
        c"NAVIS default 1000.",
        &CASR_WARMUP,
        1,
        1_000_000,
    );
    GucRegistry::define_bool_guc(
        c"navis.direct_io",
        c"Read navis edge and vector pages with O_DIRECT (on) or through the operating system's page cache (off).",
        c"On keeps edge pages and vectors out of the page cache (NAVIS-Cache holds the hot edge \
          pages); off lets the page cache hold them too, which pays when index and table fit in \
          memory (benchmarks/results/compare.md).",
        &DIRECT_IO,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"navis.casr",
        c"Use convergence-aware speculative reranking (CASR).",
        c"Off reranks every explored candidate; for ablation measurements.",
        &CASR_ENABLED,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"navis.expand_colocated",
        c"While edge pages need device reads, a navis search also expands the candidates whose edge lists lie on pages it read.",
        c"A page holds about 20 lists, placed near their neighbours: candidates found on a page \
          already read are expanded without reading their pages again (1M rows out of memory: \
          22-29% fewer edge pages and hops, mostly NAVIS-Cache hits; 3% fewer device reads; the \
          same recall). Never while the pages come from memory, where it only costs work.",
        &EXPAND_COLOCATED,
        GucContext::Userset,
        GucFlags::default(),
    );
    int(
        c"navis.max_scan_tuples",
        c"Maximum rows a navis index scan returns when the executor keeps asking for more.",
        c"Bounds the work of LIMIT above the search list and of selective filters. Below it a \
          scan goes on (graph passes, then exhaustive rounds) until every row of the index was \
          returned; its state is bounded by work_mem.",
        &MAX_SCAN_TUPLES,
        1,
        i32::MAX,
    );
    GucRegistry::define_enum_guc(
        c"navis.iterative_scan",
        c"How an ordered navis scan goes on past its first pass: off, strict_order or relaxed_order.",
        c"As pgvector's hnsw.iterative_scan. off returns at most navis.search_list rows; \
          strict_order (the default) returns rows in exact distance order and skips a row found \
          after a farther one; relaxed_order returns such a row late, so an unbounded scan \
          returns every row, nearly in order.",
        &ITERATIVE_SCAN,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"navis.result_cache",
        c"Answer ordered navis scans from the shared result cache (Aker) when a cached query is close enough.",
        c"A hit is approximate: it returns the rows cached for a nearby query, re-ranked exactly. \
          Rows inserted after an entry was cached may be missing from its answers until the \
          cache's refresh reaches them; deleted rows never appear. Needs navis.result_cache_size.",
        &RESULT_CACHE,
        GucContext::Userset,
        GucFlags::default(),
    );
    int(
        c"navis.result_cache_reserve",
        c"Rows a result-cache entry keeps beyond the navis.rerank_top_k it must answer with (Aker's delta).",
        c"Reserved rows replace deleted ones without a new search; each costs cache memory.",
        &RESULT_CACHE_RESERVE,
        0,
        (navis_engine::result_cache::NRL_CAPACITY - 1) as i32,
    );
    real(
        c"navis.result_cache_fixed_threshold",
        c"One fixed reuse distance for result-cache hits instead of adaptive per-entry thresholds.",
        c"For comparisons (the Aker paper's Proximity+ baseline). 0, the default, uses Aker's \
          adaptive thresholds and aliases. In the index's Euclidean geometry (unit vectors for cosine).",
        &RESULT_CACHE_FIXED_THRESHOLD,
        0.0,
        1e12,
    );
    GucRegistry::define_bool_guc(
        c"navis.lios",
        c"Let inserts leave their neighbours' back-edges as tasks that searches run in their read stalls (LIOS).",
        c"An insert still writes its own row's edges and its nearest neighbour's back-edge, so \
          the row is searchable at once; the other back-edges wait in a shared queue \
          (navis.lios_queue_size) until a search, the background worker, VACUUM or, when \
          the queue is full, the inserting session runs them. Needs navis in \
          shared_preload_libraries.",
        &LIOS,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"navis.lios_worker",
        c"Start a background worker per database that runs queued LIOS tasks while no search runs.",
        c"Inserts with navis.lios on start it when their database has none; it exits after 10 \
          seconds without tasks. Off leaves the tasks to searches, inserting sessions and \
          VACUUM. Each worker takes one of max_worker_processes while it runs.",
        &LIOS_WORKER,
        GucContext::Sighup,
        GucFlags::default(),
    );
    real(
        c"navis.lios_latency_budget",
        c"How much LIOS may slow searches down: the share of mean search latency its tasks may add.",
        c"Theta of the LIOS paper: a search runs tasks only in read stalls, within a budget \
          whose expected overrun is at most this share of the stall, and the share of the \
          budget used adapts so that mean search latency stays within (1 + theta) of a \
          baseline measured without tasks.",
        &LIOS_LATENCY_BUDGET,
        0.0,
        1.0,
    );
    // Unknown navis.* names (typos such as navis.serch_list) become errors instead of
    // silently creating placeholder settings.
    // SAFETY: called from _PG_init with a NUL-terminated static string.
    // Postmaster-level settings can only be defined while shared_preload_libraries is being
    // processed (as pg_stat_statements does); without preloading there is no cache anyway.
    // SAFETY: reading a PostgreSQL global flag in _PG_init.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        register_cache();
    }
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"navis".as_ptr()) };
}

/// The edge-page cache lives in postmaster shared memory, so its settings can only change
/// with a restart.
fn register_cache() {
    GucRegistry::define_int_guc(
        c"navis.cache_size",
        c"Shared memory for NAVIS-Cache, the edge-page cache shared by all navis indexes.",
        c"navis reads edge pages with O_DIRECT, around shared_buffers, so edge pages not in this cache cost a device \
          read. 0 disables the cache. Needs navis in shared_preload_libraries; takes effect at \
          server start.",
        &CACHE_SIZE_MB,
        0,
        i32::MAX / 2,
        GucContext::Postmaster,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_enum_guc(
        c"navis.cache_policy",
        c"Replacement policy of NAVIS-Cache: navis, lru or off.",
        c"navis keeps a 10% admission window and a mostly-frozen region that pages enter after \
          repeated use by inserts (2 accesses) or searches (navis.cache_search_promote_hits); lru \
          is plain recency over the same memory, off caches nothing (for comparisons).",
        &CACHE_POLICY,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"navis.cache_frozen_eviction",
        c"How NAVIS-Cache's frozen region makes room: fifo (earliest promoted), random or clock.",
        c"fifo is the NAVIS release's rule, random the NAVIS paper's; clock is fifo that passes over \
          pages hit since they were last considered (second chance).",
        &CACHE_FROZEN_EVICTION,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"navis.cache_search_promote_hits",
        c"Accesses by user searches that promote a page into NAVIS-Cache's frozen region.",
        c"Inserts promote after 2 accesses; searches need more so that one-off query traffic \
          cannot churn the frozen region.",
        &CACHE_SEARCH_PROMOTE_HITS,
        1,
        1_000_000,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"navis.result_cache_size",
        c"Shared memory for the Aker result cache of navis scans; 0 allocates none.",
        c"Sessions use it with navis.result_cache = on. Its neighbour objects cap what it holds: \
          about 1-5% of an index's vectors is the range the Aker paper measured. Takes effect \
          at server start.",
        &RESULT_CACHE_SIZE_MB,
        0,
        i32::MAX / 2,
        GucContext::Postmaster,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"navis.lios_queue_size",
        c"Deferred back-edges (LIOS tasks) the server can hold; 0 allocates no queue.",
        c"16 bytes each in shared memory. When the queue is full an inserting session runs its \
          back-edges itself. Takes effect at server start.",
        &LIOS_QUEUE_SIZE,
        0,
        i32::MAX / 64,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"navis.result_cache_indexes",
        c"How many navis indexes may hold result-cache memory at once.",
        c"navis.result_cache_size is split into this many equal partitions; an index takes one \
          on its first cached scan, and the least recently used index gives its partition up \
          when all are taken.",
        &RESULT_CACHE_INDEXES,
        1,
        navis_engine::result_cache::MAX_PARTITIONS as i32,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

fn int(
    name: &'static std::ffi::CStr,
    short: &'static std::ffi::CStr,
    long: &'static std::ffi::CStr,
    setting: &'static GucSetting<i32>,
    min: i32,
    max: i32,
) {
    GucRegistry::define_int_guc(
        name,
        short,
        long,
        setting,
        min,
        max,
        GucContext::Userset,
        GucFlags::default(),
    );
}

fn real(
    name: &'static std::ffi::CStr,
    short: &'static std::ffi::CStr,
    long: &'static std::ffi::CStr,
    setting: &'static GucSetting<f64>,
    min: f64,
    max: f64,
) {
    GucRegistry::define_float_guc(
        name,
        short,
        long,
        setting,
        min,
        max,
        GucContext::Userset,
        GucFlags::default(),
    );
}

/// The beam width for a search or insert on an index whose searches `advisor` watched:
/// `navis.beam_width`, or with 0 the advisor's choice between `device` and 1. Searches pass
/// [`navis_engine::search::device_width`] of their list; inserts the paper's 4
/// ([`navis_engine::search::DEVICE_WIDTH`]), since a wider beam was measured for searches only.
pub fn beam_width(advisor: &BeamAdvisor, device: usize) -> usize {
    match BEAM_WIDTH.get() {
        0 => advisor.width(device),
        fixed => fixed.max(1) as usize,
    }
}
