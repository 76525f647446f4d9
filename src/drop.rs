//! DROP of a navis index frees its NAVIS-Cache frames and its result-cache partition at once: the cache is shared by every
//! index, and a dropped build's frames would otherwise sit in the frozen region, which
//! evicts slowly by design. Everything else a dropped index had is its relation, which
//! PostgreSQL removes at commit, and its runtime copy, which `runtime::sweep` removes when
//! the next copy is made. Purging before commit is harmless if the DROP rolls back: the
//! frames are only a cache and fill again.

use pgrx::pg_sys;
use pgrx::prelude::*;

static mut PREV_OBJECT_ACCESS: pg_sys::object_access_hook_type = None;

/// Installs the hook. Called from `_PG_init` in every process that loads navis.
pub fn register() {
    // SAFETY: hook chaining in _PG_init, single-threaded, as PostgreSQL expects.
    unsafe {
        PREV_OBJECT_ACCESS = pg_sys::object_access_hook;
        pg_sys::object_access_hook = Some(on_object_access);
    }
}

/// The NAVIS-Cache tag of relation `oid` if it is a navis index with a readable metapage.
fn navis_cache_tag(oid: pg_sys::Oid) -> Option<u64> {
    // SAFETY: catalog lookup by name (missing_ok); RelationIdGetRelation returns NULL or a
    // relcache entry that is closed again before returning. The caller holds the lock DROP
    // took on the relation.
    unsafe {
        let am = pg_sys::get_am_oid(c"navis".as_ptr(), true);
        if am == pg_sys::InvalidOid {
            return None;
        }
        let rel = pg_sys::RelationIdGetRelation(oid);
        if rel.is_null() {
            return None;
        }
        let is_navis = (*(*rel).rd_rel).relkind == pg_sys::RELKIND_INDEX as std::ffi::c_char
            && (*(*rel).rd_rel).relam == am;
        let tag = if is_navis {
            crate::open::read_meta(rel).map(|m| crate::open::relation_cache_tag(rel, m.build_id))
        } else {
            None
        };
        pg_sys::RelationClose(rel);
        tag
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_object_access(
    access: pg_sys::ObjectAccessType::Type,
    class_id: pg_sys::Oid,
    object_id: pg_sys::Oid,
    sub_id: std::ffi::c_int,
    arg: *mut std::ffi::c_void,
) {
    // SAFETY: chaining to the previous hook with the arguments we were given.
    unsafe {
        if let Some(prev) = PREV_OBJECT_ACCESS {
            prev(access, class_id, object_id, sub_id, arg);
        }
    }
    if access == pg_sys::ObjectAccessType::OAT_DROP
        && class_id == pg_sys::RelationRelationId
        && sub_id == 0
        // SAFETY: reading the backend's transaction state.
        && unsafe { pg_sys::IsTransactionState() }
    {
        if let Some(tag) = navis_cache_tag(object_id) {
            if let Some(cache) = crate::cache::shared_cache() {
                cache.purge(tag);
            }
            // The result cache is keyed by the same tag: the index's partition becomes free.
            if let Some(cache) = crate::result_cache::shared() {
                cache.purge(tag);
            }
            // Its queued LIOS tasks name vertices of a build that is going away.
            crate::lios::forget(tag);
        }
    }
}
