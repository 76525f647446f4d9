//! NAVIS-Cache in postmaster shared memory: sizing from the `navis.cache_*` settings, the
//! region's creation in the startup hook, each backend's view of it, and its statistics in
//! SQL (`navis_cache_stats()` and the `navis_cache_stats` view).
//!
//! The cache itself (policy, locking, write-through) is `navis_engine::cache`; every navis
//! index a backend opens reads and writes its edge pages through the one shared region, keyed
//! by the index's build id.

use crate::guc;
use navis_engine::cache::{CacheConfig, FrozenEviction, PageCache, Policy};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Arc;

const SHMEM_NAME: &CStr = c"navis edge-page cache";

/// Set in the postmaster's startup hook and inherited by every forked backend.
static REGION: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static REGION_LEN: AtomicUsize = AtomicUsize::new(0);

/// The configuration the settings ask for, or `None` for no cache (`navis.cache_size = 0`).
fn configured() -> Option<CacheConfig> {
    let bytes = (guc::CACHE_SIZE_MB.get().max(0) as usize).saturating_mul(1 << 20);
    let policy = match guc::CACHE_POLICY.get() {
        guc::CachePolicy::Navis => Policy::Navis,
        guc::CachePolicy::Lru => Policy::Lru,
        guc::CachePolicy::Off => Policy::Off,
    };
    // With the policy off a one-frame region still carries the miss counters. A frame holds
    // one edge page of an index's relation: a PostgreSQL block.
    let frame_size = crate::relstore::BLOCK_SIZE;
    let frames = match policy {
        Policy::Off => 1,
        _ => PageCache::frames_for_bytes_with(frame_size, bytes),
    };
    if bytes == 0 || frames == 0 {
        return None;
    }
    Some(CacheConfig {
        policy,
        frozen_eviction: match guc::CACHE_FROZEN_EVICTION.get() {
            guc::FrozenEvictionSetting::Fifo => FrozenEviction::Fifo,
            guc::FrozenEvictionSetting::Random => FrozenEviction::Random,
            guc::FrozenEvictionSetting::Clock => FrozenEviction::Clock,
        },
        search_promote_hits: guc::CACHE_SEARCH_PROMOTE_HITS.get().max(1) as u32,
        frame_size,
        ..CacheConfig::navis(frames)
    })
}

/// Shared memory to request in the shmem-request hook.
pub fn region_bytes() -> usize {
    configured().map_or(0, |c| PageCache::region_size_with(c.frame_size, c.frames))
}

/// Creates (or, after a crash-restart that kept the segment, re-creates) the region. Called
/// from the startup hook under AddinShmemInitLock.
///
/// # Safety
/// Only from the shmem startup hook while holding AddinShmemInitLock.
pub unsafe fn init_shared() {
    let Some(config) = configured() else {
        return;
    };
    let len = PageCache::region_size_with(config.frame_size, config.frames);
    let mut found = false;
    // SAFETY: the caller holds AddinShmemInitLock in the startup hook, and `len` bytes were
    // requested in the request hook with the same settings (postmaster-only GUCs).
    let base = unsafe { pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), len, &mut found) } as *mut u8;
    if !found {
        // SAFETY: ShmemInitStruct returned `len` fresh, cache-line aligned bytes of shared
        // memory that live as long as the postmaster; nobody else uses them yet.
        if let Err(e) = unsafe { PageCache::init_at(base, len, config) } {
            pgrx::warning!("navis: edge-page cache disabled: {e}");
            return;
        }
    }
    REGION_LEN.store(len, Ordering::Release);
    REGION.store(base, Ordering::Release);
}

/// This backend's view of the shared cache, or `None` when there is none (not preloaded, or
/// `navis.cache_size = 0`).
pub fn shared_cache() -> Option<Arc<PageCache>> {
    thread_local! {
        static VIEW: std::cell::RefCell<Option<(usize, Arc<PageCache>)>> =
            const { std::cell::RefCell::new(None) };
    }
    let base = REGION.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    VIEW.with(|v| {
        let mut v = v.borrow_mut();
        if let Some((at, cache)) = v.as_ref() {
            if *at == base as usize {
                return Some(Arc::clone(cache));
            }
        }
        // SAFETY: REGION and REGION_LEN describe the region init_shared formatted in this
        // server's shared memory, which outlives every backend.
        let cache = unsafe { PageCache::attach(base, REGION_LEN.load(Ordering::Acquire)) }.ok()?;
        let cache = Arc::new(cache);
        *v = Some((base as usize, Arc::clone(&cache)));
        Some(cache)
    })
}

/// NAVIS-Cache counters since server start, summed over all navis indexes and backends: one
/// row per counter, plus the settings it runs with.
#[pg_extern(volatile, parallel_safe)]
fn navis_cache_stats() -> TableIterator<'static, (name!(name, String), name!(value, String))> {
    let Some(cache) = shared_cache() else {
        let why = if crate::shmem::shared().is_none() {
            "navis is not in shared_preload_libraries"
        } else {
            "navis.cache_size is 0"
        };
        return TableIterator::new(vec![
            ("enabled".to_string(), "false".to_string()),
            ("reason".to_string(), why.to_string()),
        ]);
    };
    let s = cache.stats();
    let mut rows = vec![
        ("enabled".to_string(), "true".to_string()),
        ("policy".to_string(), cache.policy().name().to_string()),
        (
            "frozen_eviction".to_string(),
            cache.frozen_eviction().name().to_string(),
        ),
        (
            "search_promote_hits".to_string(),
            cache.search_promote_hits().to_string(),
        ),
        (
            "frozen_capacity".to_string(),
            cache.frozen_capacity().to_string(),
        ),
    ];
    rows.extend(
        s.rows()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    rows.extend([
        ("hit_rate".to_string(), format!("{:.4}", s.hit_rate())),
        (
            "search_hit_rate".to_string(),
            format!("{:.4}", s.search_hit_rate()),
        ),
        (
            "insert_hit_rate".to_string(),
            format!("{:.4}", s.insert_hit_rate()),
        ),
    ]);
    TableIterator::new(rows)
}

pgrx::extension_sql!(
    r#"
CREATE VIEW navis_cache_stats AS SELECT name, value FROM navis_cache_stats();
COMMENT ON VIEW navis_cache_stats IS
    'NAVIS-Cache: settings, frame counts and hit/miss counters by region and caller since server start';
"#,
    name = "navis_cache_stats_view",
    requires = [navis_cache_stats]
);
