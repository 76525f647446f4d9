//! Introspection: `navis_index_stats(regclass)`, `navis_index_counters(regclass)` and
//! `navis_verify(regclass)`.

use crate::errors::raise;
use crate::open;
use crate::relstore;
use crate::runtime;
use navis_engine::cache::Caller;
use navis_engine::storage::state::{Counter, Field};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

/// Opens `index` (a regclass) as a navis index, with AccessShareLock, and runs `f`.
fn with_index<R>(index: pg_sys::Oid, f: impl FnOnce(pg_sys::Relation) -> R) -> R {
    with_index_locked(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE, f)
}

/// [`with_index`] with another lock mode.
fn with_index_locked<R>(
    index: pg_sys::Oid,
    mode: pg_sys::LOCKMODE,
    f: impl FnOnce(pg_sys::Relation) -> R,
) -> R {
    // SAFETY: index_open takes the lock and errors for a non-index; we check the AM and
    // close it again with the same lock.
    unsafe {
        let rel = pg_sys::relation_open(index, mode);
        let am = pg_sys::get_am_oid(c"navis".as_ptr(), false);
        if (*(*rel).rd_rel).relkind != pg_sys::RELKIND_INDEX as std::ffi::c_char
            || (*(*rel).rd_rel).relam != am
        {
            let name = runtime::relation_name(rel);
            pg_sys::relation_close(rel, mode);
            raise(
                PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a navis index"),
                None,
            );
        }
        let r = f(rel);
        pg_sys::relation_close(rel, mode);
        r
    }
}

/// Everything about one navis index: sizes, build parameters, the search CASR window at this
/// session's settings (`navis.search_list`, warm-up, percentile) and the warm-up samples
/// behind it (pooled by all backends since the server started, for the first list
/// calibrated), and the engine counters summed over this backend's scans.
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn navis_index_stats(
    index: PgRelation,
) -> TableIterator<
    'static,
    (
        name!(vertices, i64),
        name!(deleted, i64),
        name!(dimensions, i32),
        name!(metric, String),
        name!(edge_pages, i64),
        name!(relation_bytes, i64),
        name!(runtime_bytes, i64),
        name!(runtime_directory, String),
        name!(build_id, String),
        name!(max_degree, i32),
        name!(build_list, i32),
        name!(alpha, f64),
        name!(pq_bytes, i32),
        name!(entrance_ratio, f64),
        name!(entrance_degree, i32),
        name!(entrance_vertices, i64),
        name!(casr_window, Option<i32>),
        name!(casr_warmup_samples, i64),
        name!(scans, i64),
        name!(hops, i64),
        name!(edge_pages_read, i64),
        name!(edge_page_cache_hits, i64),
        name!(cached_frozen_pages, i64),
        name!(cached_window_pages, i64),
        name!(rerank_vector_loads, i64),
        name!(bytes_read, i64),
        name!(resumes, i64),
        name!(built_rows, i64),
        name!(retired_bytes, i64),
        // New columns go last: a database not yet updated keeps an older declaration of this
        // function, which reads the leading columns by position.
        name!(page_cache_bytes, i64),
    ),
> {
    let row = with_index(index.oid(), |rel| {
        let open = open::open_index(rel);
        let _bound = open.bind(rel);
        let files = open.index.files();
        let m = files.manifest();
        let entrance_vertices = open.index.entrance().len() as i64;
        let list = crate::guc::SEARCH_LIST.get().max(1) as usize;
        let casr_window = open.casr_window(Caller::Search, list);
        let casr_samples = open.casr_samples(Caller::Search, list);
        let c = *open.counters.lock().unwrap();
        let scans = *open.scans.lock().unwrap();
        let resident = files
            .page_cache()
            .map_or((0, 0), |b| b.cache.resident(b.tag));
        (
            open.index.live_len() as i64,
            open.index.deleted_len() as i64,
            m.dim as i32,
            m.metric.operator().to_string(),
            files.state().get(Field::EdgePages) as i64,
            relstore::nblocks(rel) as i64 * relstore::BLOCK_SIZE as i64,
            runtime::dir_bytes(&open.dir) as i64,
            open.dir.display().to_string(),
            format!("{:016x}", open.build_id),
            m.max_degree as i32,
            m.params.build_list as i32,
            round6(m.params.alpha as f64),
            m.pq_bytes as i32,
            round6(m.params.entrance_ratio as f64),
            m.params.entrance_degree as i32,
            entrance_vertices,
            casr_window.map(|w| w as i32),
            casr_samples as i64,
            scans as i64,
            c.hops as i64,
            c.edge_pages_read as i64,
            c.edge_page_cache_hits as i64,
            resident.0 as i64,
            resident.1 as i64,
            c.rerank_vector_loads as i64,
            c.bytes_read as i64,
            c.resumes as i64,
            m.vertex_count as i64,
            // Blocks of earlier builds an online rebuild left behind (regrow.rs).
            open::read_meta(rel).map_or(0, |meta| {
                (meta.first_block.saturating_sub(1)) as i64 * relstore::BLOCK_SIZE as i64
            }),
            c.page_cache_bytes as i64,
        )
    });
    TableIterator::once(row)
}

/// The index's shared update counters (cumulative over every backend since the build) and
/// allocator state, one row per counter: what inserts, VACUUM and the allocator did.
#[pg_extern(volatile, parallel_unsafe)]
fn navis_index_counters(
    index: PgRelation,
) -> TableIterator<'static, (name!(counter, String), name!(value, i64))> {
    let rows = with_index(index.oid(), |rel| {
        let open = open::open_index(rel);
        let _bound = open.bind(rel);
        let state = open.index.files().state();
        let mut rows: Vec<(String, i64)> = Counter::ALL
            .iter()
            .map(|&c| (c.name().to_string(), state.counter(c) as i64))
            .collect();
        for (name, field) in [
            ("vertex_ids", Field::NextVertex),
            ("free_vertices", Field::FreeVertexCount),
            ("edge_pages", Field::EdgePages),
            ("free_edge_pages", Field::FreePageCount),
        ] {
            rows.push((name.to_string(), state.get(field) as i64));
        }
        rows
    });
    TableIterator::new(rows)
}

/// Checks the structure of a navis index: every live vertex reachable from the entry
/// points, slot owner stamps, indirection entries, degree bounds, page live counts, free
/// lists and counts. Takes a SHARE lock on the index, so it waits for running inserts and
/// VACUUM and holds new ones off while it reads (on a hot standby an ACCESS SHARE lock).
#[pg_extern(volatile, parallel_unsafe)]
#[allow(clippy::type_complexity)]
fn navis_verify(
    index: PgRelation,
) -> TableIterator<
    'static,
    (
        name!(clean, bool),
        name!(vertices, i64),
        name!(deleted, i64),
        name!(free_vertices, i64),
        name!(edge_pages, i64),
        name!(free_edge_pages, i64),
        name!(edges, i64),
        name!(dangling_edges, i64),
        name!(edges_to_deleted, i64),
        name!(unreachable, i64),
        name!(problems, i64),
        name!(details, Vec<String>),
    ),
> {
    // A hot standby has no writers to hold off (and allows no SHARE lock): its copy changes
    // only when a scan brings it forward, under the allocator lock, which the check holds.
    // SAFETY: reads shared recovery state.
    let standby = unsafe { pg_sys::RecoveryInProgress() };
    let mode = if standby {
        pg_sys::AccessShareLock
    } else {
        pg_sys::ShareLock
    };
    let row = with_index_locked(index.oid(), mode as pg_sys::LOCKMODE, |rel| {
        let open = open::open_index(rel);
        let _bound = open.bind(rel);
        let checked = if standby {
            // Brought forward page by page, the copy's entries moved without its allocator
            // state (free lists, live counts), which the check compares: derive it again.
            let locks = open.locks();
            let _held = navis_engine::update::AllocatorGuard::lock(&locks);
            navis_engine::update::rederive_allocator(open.index.files())
                .map_err(|e| e.to_string())
                .and_then(|_| open.index.verify().map_err(|e| e.to_string()))
        } else {
            open.index.verify().map_err(|e| e.to_string())
        };
        // The check holds every vertex's list and reachability; give the memory back.
        navis_engine::heap::return_freed_memory();
        let r = checked.unwrap_or_else(|e| {
            raise(
                PgSqlErrorCode::ERRCODE_IO_ERROR,
                format!(
                    "navis_verify could not read index \"{}\": {e}",
                    runtime::relation_name(rel)
                ),
                None,
            )
        });
        (
            r.is_clean(),
            r.vertices as i64,
            r.deleted as i64,
            r.free_vertices as i64,
            r.edge_pages as i64,
            r.free_pages as i64,
            r.edges as i64,
            r.dangling_edges as i64,
            r.edges_to_deleted as i64,
            r.unreachable as i64,
            r.problem_count as i64,
            r.problems,
        )
    });
    TableIterator::once(row)
}

/// Build parameters are stored as f32: show them as written (1.2, not 1.2000000476837158).
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
