//! The Aker result cache in postmaster shared memory (RFC 0003): sizing from
//! `navis.result_cache_size` and `navis.result_cache_indexes`, the region's creation in the
//! startup hook, one LWLock per partition (tranche `navis_result_cache`), each backend's view
//! of it, and its statistics in SQL (`navis_result_cache_stats`).
//!
//! The cache itself (entries, thresholds, query filter, refresh) is
//! `navis_engine::result_cache`; scans use it through `scan_cache.rs`, inserts and VACUUM
//! keep it true through [`record_insert`] and [`vacuum_begin`] / [`vacuum_end`].

use crate::guc;
use navis_engine::result_cache::{Partition, PartitionLocks, ResultCache, Stat};
use navis_engine::storage::HeapTid;
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

const SHMEM_NAME: &CStr = c"navis result cache";
const LOCK_TRANCHE: &CStr = c"navis_result_cache";

/// Set in the postmaster's startup hook and inherited by every forked backend.
static REGION: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static LOCKS: AtomicPtr<pg_sys::LWLockPadded> = AtomicPtr::new(std::ptr::null_mut());
static REGION_LEN: AtomicUsize = AtomicUsize::new(0);

fn configured_bytes() -> usize {
    (guc::RESULT_CACHE_SIZE_MB.get().max(0) as usize).saturating_mul(1 << 20)
}

fn partitions() -> usize {
    guc::RESULT_CACHE_INDEXES.get().max(1) as usize
}

/// Shared memory to request in the shmem-request hook.
pub fn region_bytes() -> usize {
    let bytes = configured_bytes();
    if bytes == 0 || ResultCache::layout(bytes, partitions()).is_none() {
        return 0;
    }
    bytes
}

/// Requests the region and its locks (shmem-request hook).
///
/// # Safety
/// Only from the shmem-request hook.
pub unsafe fn request() {
    let bytes = region_bytes();
    if bytes > 0 {
        // SAFETY: the caller is the shmem-request hook, where these requests belong.
        unsafe {
            pg_sys::RequestAddinShmemSpace(bytes);
            pg_sys::RequestNamedLWLockTranche(
                LOCK_TRANCHE.as_ptr(),
                navis_engine::result_cache::MAX_PARTITIONS as i32,
            );
        }
    }
}

/// Creates (or, after a crash-restart that kept the segment, re-creates) the region.
///
/// # Safety
/// Only from the shmem startup hook while holding AddinShmemInitLock.
pub unsafe fn init_shared() {
    let len = region_bytes();
    if len == 0 {
        return;
    }
    let mut found = false;
    // SAFETY: the caller holds AddinShmemInitLock in the startup hook, and `len` bytes and
    // the tranche were requested in the request hook with the same (postmaster) settings.
    let (base, locks) = unsafe {
        (
            pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), len, &mut found) as *mut u8,
            pg_sys::GetNamedLWLockTranche(LOCK_TRANCHE.as_ptr()),
        )
    };
    if !found {
        // SAFETY: ShmemInitStruct returned `len` fresh, cache-line aligned bytes of shared
        // memory that live as long as the postmaster; nobody else uses them yet.
        if unsafe { ResultCache::init_at(base, len, partitions()) }.is_none() {
            pgrx::warning!("navis: result cache disabled: navis.result_cache_size is too small");
            return;
        }
    }
    REGION_LEN.store(len, Ordering::Release);
    LOCKS.store(locks, Ordering::Release);
    REGION.store(base, Ordering::Release);
}

/// This backend's view of the region, or `None` when there is none.
pub fn shared() -> Option<&'static ResultCache> {
    thread_local! {
        static VIEW: std::cell::Cell<Option<(usize, &'static ResultCache)>> =
            const { std::cell::Cell::new(None) };
    }
    let base = REGION.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    VIEW.with(|v| {
        if let Some((at, cache)) = v.get() {
            if at == base as usize {
                return Some(cache);
            }
        }
        // SAFETY: REGION describes the region init_shared formatted in this server's shared
        // memory, which outlives every backend. One view per region per backend is leaked.
        let cache: &'static ResultCache =
            Box::leak(Box::new(unsafe { ResultCache::attach(base) }?));
        v.set(Some((base as usize, cache)));
        Some(cache)
    })
}

/// The partition locks as LWLocks: released by PostgreSQL's error recovery if a backend
/// fails while holding one, and waits show in pg_stat_activity as `navis_result_cache`.
pub struct PgCacheLocks;

fn lock(partition: usize) -> *mut pg_sys::LWLock {
    let base = LOCKS.load(Ordering::Acquire);
    // SAFETY: the tranche holds MAX_PARTITIONS padded locks and partition < MAX_PARTITIONS
    // (the region never has more).
    unsafe { &raw mut (*base.add(partition)).lock }
}

impl PartitionLocks for PgCacheLocks {
    fn shared(&self, partition: usize, f: &mut dyn FnMut()) {
        // SAFETY: a valid LWLock in shared memory; interrupts are held off until release.
        unsafe { pg_sys::LWLockAcquire(lock(partition), pg_sys::LWLockMode::LW_SHARED) };
        f();
        // SAFETY: the lock acquired above.
        unsafe { pg_sys::LWLockRelease(lock(partition)) };
    }

    fn exclusive(&self, partition: usize, f: &mut dyn FnMut()) {
        // SAFETY: as in `shared`.
        unsafe { pg_sys::LWLockAcquire(lock(partition), pg_sys::LWLockMode::LW_EXCLUSIVE) };
        f();
        // SAFETY: the lock acquired above.
        unsafe { pg_sys::LWLockRelease(lock(partition)) };
    }

    fn try_exclusive(&self, partition: usize, f: &mut dyn FnMut()) -> bool {
        // SAFETY: as in `shared`; a conditional acquire never waits.
        let got = unsafe {
            pg_sys::LWLockConditionalAcquire(lock(partition), pg_sys::LWLockMode::LW_EXCLUSIVE)
        };
        if got {
            f();
            // SAFETY: the lock acquired above.
            unsafe { pg_sys::LWLockRelease(lock(partition)) };
        }
        got
    }
}

/// The index's redo generation on a hot standby (entries of another one never answer: a
/// standby cannot apply deletes to its cache); 0 on a primary.
pub fn generation_of(index: pg_sys::Relation) -> u64 {
    // SAFETY: RecoveryInProgress reads shared state; rd_node of an open relation.
    if !unsafe { pg_sys::RecoveryInProgress() } {
        return 0;
    }
    let node = unsafe { (*index).rd_node };
    crate::shmem::shared().map_or(0, |s| s.redo_changes(&node).generation())
}

/// The partition the index holds, without claiming one (inserts and VACUUM).
fn held_partition(
    index: pg_sys::Relation,
    build_id: u64,
    metric: Metric,
) -> Option<Partition<'static>> {
    shared()?.find(crate::open::relation_cache_tag(index, build_id), metric)
}

/// An inserted row reaches the index's cached entries lazily: the insert log, the fast
/// path, and the slow path when the risk model asks. Nothing happens unless the index holds
/// a partition (some session looked it up with the cache on).
pub fn record_insert(
    index: pg_sys::Relation,
    open: &crate::open::OpenIndex,
    tid: HeapTid,
    vector: &[f32],
) {
    let metric = open.index.metric();
    let Some(p) = held_partition(index, open.build_id, metric) else {
        return;
    };
    // As the index stores it (unit length for cosine); the insert validated it already.
    if let Ok(stored) = navis_engine::search::prepare_query(metric, open.index.dim(), vector) {
        p.record_insert(&PgCacheLocks, tid, &stored);
    }
}

/// VACUUM of the index starts: cached rows VACUUM removes go now, and no search overlapping
/// this VACUUM may admit an entry.
pub fn vacuum_begin(
    index: pg_sys::Relation,
    build_id: u64,
    metric: Metric,
    is_dead: &mut dyn FnMut(HeapTid) -> bool,
) {
    if let Some(p) = held_partition(index, build_id, metric) {
        p.begin_vacuum(&PgCacheLocks, is_dead);
    }
}

pub fn vacuum_end(index: pg_sys::Relation, build_id: u64, metric: Metric) {
    if let Some(p) = held_partition(index, build_id, metric) {
        p.end_vacuum(&PgCacheLocks);
    }
}

fn percentile(sorted: &[f32], p: f64) -> Option<f64> {
    (!sorted.is_empty()).then(|| {
        let i = ((sorted.len() - 1) as f64 * p).round() as usize;
        sorted[i] as f64
    })
}

/// One row per index holding a partition: its gauges, counters and threshold distribution.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_safe)]
fn navis_result_cache_stats() -> TableIterator<
    'static,
    (
        name!(index_oid, pg_sys::Oid),
        name!(database_oid, pg_sys::Oid),
        name!(partition, i32),
        name!(name, String),
        name!(value, f64),
    ),
> {
    let Some(cache) = shared() else {
        return TableIterator::new(Vec::new());
    };
    let mut rows = Vec::new();
    for st in cache.stats(&PgCacheLocks) {
        let (rel, db) = (pg_sys::Oid::from(st.rel_oid), pg_sys::Oid::from(st.db_oid));
        let mut add = |name: &str, value: f64| {
            rows.push((rel, db, st.partition as i32, name.to_string(), value))
        };
        add("dimensions", st.dim as f64);
        add("entries", st.representatives as f64);
        add("aliases", st.aliases as f64);
        add("objects", st.objects as f64);
        add("object_capacity", st.object_capacity as f64);
        add("entry_capacity", st.entry_capacity as f64);
        add("insert_log_length", st.log_length as f64);
        add("insert_log_capacity", st.log_capacity as f64);
        add("memory_bytes", st.bytes as f64);
        add("partition_bytes", cache.partition_bytes() as f64);
        for (label, p) in [
            ("threshold_min", 0.0),
            ("threshold_p50", 0.5),
            ("threshold_p90", 0.9),
            ("threshold_max", 1.0),
        ] {
            if let Some(v) = percentile(&st.thresholds, p) {
                add(label, v);
            }
        }
        for (stat, value) in &st.counters {
            add(stat.name(), *value as f64);
        }
        let hits: u64 = st
            .counters
            .iter()
            .filter(|(s, _)| {
                matches!(
                    s,
                    Stat::HitsEquality | Stat::HitsApproximate | Stat::HitsAlias
                )
            })
            .map(|c| c.1)
            .sum();
        let misses = st
            .counters
            .iter()
            .find(|c| c.0 == Stat::Misses)
            .map_or(0, |c| c.1);
        if hits + misses > 0 {
            add("hit_ratio", hits as f64 / (hits + misses) as f64);
        }
    }
    TableIterator::new(rows)
}

/// Empties the result cache of every index (all partitions become free).
#[pg_extern(volatile)]
fn navis_result_cache_reset() -> bool {
    match shared() {
        Some(cache) => {
            cache.purge_all();
            true
        }
        None => false,
    }
}

pgrx::extension_sql!(
    r#"
CREATE VIEW navis_result_cache_stats AS
    SELECT s.index_oid::regclass AS index, s.partition, s.name, s.value
    FROM navis_result_cache_stats() s
    WHERE s.database_oid = (SELECT oid FROM pg_database WHERE datname = current_database());
COMMENT ON VIEW navis_result_cache_stats IS
    'Aker result cache: per index of this database, entries, memory, thresholds, hits by kind, misses, fall-throughs, refreshes, evictions';
GRANT SELECT ON navis_result_cache_stats TO PUBLIC;
-- Emptying the cache costs every session its hits: superusers only, as pg_stat_reset().
REVOKE EXECUTE ON FUNCTION navis_result_cache_reset() FROM PUBLIC;
"#,
    name = "navis_result_cache_stats_view",
    requires = [navis_result_cache_stats, navis_result_cache_reset]
);
