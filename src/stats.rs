//! Introspection: `navis_index_stats(regclass)`, `navis_side_directories()` and
//! `navis_cleanup()`.

use crate::errors::raise;
use crate::scan;
use crate::sidefiles;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{PgRelation, PgSqlErrorCode};

/// Opens `index` (a regclass) as a navis index, with AccessShareLock, and runs `f`.
fn with_index<R>(index: pg_sys::Oid, f: impl FnOnce(pg_sys::Relation) -> R) -> R {
    // SAFETY: index_open takes the lock and errors for a non-index; we check the AM and
    // close it again with the same lock.
    unsafe {
        let rel = pg_sys::relation_open(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let am = pg_sys::get_am_oid(c"navis".as_ptr(), false);
        if (*(*rel).rd_rel).relkind != pg_sys::RELKIND_INDEX as std::ffi::c_char
            || (*(*rel).rd_rel).relam != am
        {
            let name = sidefiles::relation_name(rel);
            pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            raise(
                PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
                format!("\"{name}\" is not a navis index"),
                None,
            );
        }
        let r = f(rel);
        pg_sys::relation_close(rel, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        r
    }
}

/// Everything about one navis index: sizes, build parameters, the CASR window calibrated in
/// this backend and the engine counters summed over this backend's scans.
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
        name!(side_file_bytes, i64),
        name!(side_directory, String),
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
        name!(rerank_vector_loads, i64),
        name!(bytes_read, i64),
        name!(resumes, i64),
    ),
> {
    let row = with_index(index.oid(), |rel| {
        let open = scan::open_index(rel);
        let files = open.index.files();
        let m = files.manifest();
        let deleted = (0..m.vertex_count)
            .filter(|&v| files.indirection().entry(v).is_some_and(|e| e.is_deleted()))
            .count();
        let cal = open.calibrator.lock().unwrap();
        let c = *open.counters.lock().unwrap();
        let scans = *open.scans.lock().unwrap();
        (
            m.vertex_count as i64 - deleted as i64,
            deleted as i64,
            m.dim as i32,
            m.metric.operator().to_string(),
            m.edge_pages as i64,
            sidefiles::dir_bytes(&open.dir) as i64,
            open.dir.display().to_string(),
            format!("{:016x}", open.build_id),
            m.max_degree as i32,
            m.params.build_list as i32,
            round6(m.params.alpha as f64),
            m.pq_bytes as i32,
            round6(m.params.entrance_ratio as f64),
            m.params.entrance_degree as i32,
            open.index.entrance().len() as i64,
            cal.window().map(|w| w as i32),
            cal.samples() as i64,
            scans as i64,
            c.hops as i64,
            c.edge_pages_read as i64,
            c.rerank_vector_loads as i64,
            c.bytes_read as i64,
            c.resumes as i64,
        )
    });
    TableIterator::once(row)
}

/// Every navis side directory of the current database (all tablespaces), with whether it is
/// an orphan that `navis_cleanup()` would remove.
#[pg_extern(volatile, parallel_unsafe)]
fn navis_side_directories() -> TableIterator<
    'static,
    (
        name!(path, String),
        name!(temporary, bool),
        name!(orphan, bool),
        name!(bytes, i64),
    ),
> {
    let rows: Vec<_> = sidefiles::list_side_dirs()
        .into_iter()
        .map(|f| {
            let orphan = sidefiles::is_orphan(&f);
            (
                f.path.display().to_string(),
                f.tmp_pid.is_some(),
                orphan,
                sidefiles::dir_bytes(&f.path) as i64,
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// Removes orphan side directories of the current database (left by a crash); returns how
/// many it removed.
#[pg_extern(volatile, parallel_unsafe)]
fn navis_cleanup() -> i64 {
    sidefiles::sweep().len() as i64
}

/// Build parameters are stored as f32: show them as written (1.2, not 1.2000000476837158).
fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
