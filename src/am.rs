//! The `navis` index access method: handler, opclass SQL and callbacks.
//!
//! Until the index build lands (issue 4), CREATE INDEX runs every check a real build makes
//! (shared memory, operator class, options, every row's vector) and then stops with a clear
//! "not implemented yet" ERROR, so nothing ever pretends an index exists.

use crate::errors::raise;
use crate::options::BuildOptions;
use crate::shmem;
use crate::datum::VectorInput;
use navis_engine::Metric;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;
use std::ffi::CStr;

#[pg_extern(sql = "
CREATE FUNCTION navis_handler(internal) RETURNS index_am_handler
    PARALLEL SAFE IMMUTABLE STRICT LANGUAGE c AS 'MODULE_PATHNAME', '@FUNCTION_NAME@';
CREATE ACCESS METHOD navis TYPE INDEX HANDLER navis_handler;
COMMENT ON ACCESS METHOD navis IS 'navis: on-SSD graph index (NAVIS) for approximate nearest-neighbour search';
")]
fn navis_handler(_fcinfo: pg_sys::FunctionCallInfo) -> PgBox<pg_sys::IndexAmRoutine> {
    // SAFETY: alloc_node returns a zeroed IndexAmRoutine node in the current memory context.
    let mut am =
        unsafe { PgBox::<pg_sys::IndexAmRoutine>::alloc_node(pg_sys::NodeTag::T_IndexAmRoutine) };
    // Strategy numbers are not fixed (0): each opclass has exactly one ORDER BY operator.
    am.amstrategies = 0;
    am.amsupport = 0;
    am.amoptsprocnum = 0;
    am.amcanorder = false;
    am.amcanorderbyop = true;
    am.amcanbackward = false;
    am.amcanunique = false;
    am.amcanmulticol = false;
    am.amoptionalkey = true;
    am.amsearcharray = false;
    am.amsearchnulls = false;
    am.amstorage = false;
    am.amclusterable = false;
    am.ampredlocks = false;
    am.amcanparallel = false;
    am.amcaninclude = false;
    am.amusemaintenanceworkmem = true;
    am.amparallelvacuumoptions = 0;
    am.amkeytype = pg_sys::InvalidOid;

    am.ambuild = Some(ambuild);
    am.ambuildempty = Some(ambuildempty);
    am.aminsert = Some(aminsert);
    am.ambulkdelete = Some(ambulkdelete);
    am.amvacuumcleanup = Some(amvacuumcleanup);
    am.amcostestimate = Some(amcostestimate);
    am.amoptions = Some(crate::options::amoptions);
    am.amvalidate = Some(amvalidate);
    am.ambeginscan = Some(ambeginscan);
    am.amrescan = Some(amrescan);
    am.amgettuple = Some(amgettuple);
    am.amendscan = Some(amendscan);
    am.into_pg_boxed()
}

extension_sql!(
    r#"
CREATE OPERATOR CLASS navis_l2_ops DEFAULT FOR TYPE real[] USING navis AS
    OPERATOR 1 <-> (real[], real[]) FOR ORDER BY float_ops;
CREATE OPERATOR CLASS navis_ip_ops FOR TYPE real[] USING navis AS
    OPERATOR 1 <#> (real[], real[]) FOR ORDER BY float_ops;
CREATE OPERATOR CLASS navis_cosine_ops FOR TYPE real[] USING navis AS
    OPERATOR 1 <=> (real[], real[]) FOR ORDER BY float_ops;
"#,
    name = "navis_opclasses",
    requires = [navis_handler, "navis_operators"]
);

/// Name of the SQL operator of a navis opclass, mapped to the engine's metric.
fn metric_of_operator(name: &str) -> Option<Metric> {
    [Metric::L2, Metric::InnerProduct, Metric::Cosine].into_iter().find(|m| m.operator() == name)
}

/// The metric an index orders by, from the ORDER BY operator of its opclass.
fn index_metric(index: pg_sys::Relation) -> Metric {
    // SAFETY: `index` is an open index relation with one key column, so rd_opfamily and
    // rd_opcintype have one entry; get_opname returns a palloc'd string or NULL.
    let name = unsafe {
        let family = *(*index).rd_opfamily;
        let input_type = *(*index).rd_opcintype;
        let op = pg_sys::get_opfamily_member(family, input_type, input_type, 1);
        let name = if op == pg_sys::InvalidOid { std::ptr::null_mut() } else { pg_sys::get_opname(op) };
        if name.is_null() { None } else { Some(CStr::from_ptr(name).to_string_lossy().into_owned()) }
    };
    name.as_deref().and_then(metric_of_operator).unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "navis operator class has no supported ORDER BY operator".into(),
            Some("Use navis_l2_ops (<->), navis_ip_ops (<#>) or navis_cosine_ops (<=>)."),
        )
    })
}

/// Rows seen by the build scan, checked the way the real build will check them.
struct BuildScan {
    input: VectorInput,
    metric: Metric,
    dim: Option<usize>,
    rows: u64,
    skipped_nulls: u64,
    skipped_zero: u64,
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
    // TID, and the state pointer we handed to IndexBuildHeapScan.
    let (state, datum, is_null, tid) =
        unsafe { (&mut *(state as *mut BuildScan), *values, *isnull, *tid) };
    if is_null {
        state.skipped_nulls += 1; // NULL vectors are not indexed (as in pgvector)
        return;
    }
    let block = pgrx::itemptr::item_pointer_get_block_number(&tid);
    let offset = pgrx::itemptr::item_pointer_get_offset_number(&tid);
    let what = format!("vector in row ({block},{offset})");
    // SAFETY: the datum is non-NULL and of the indexed column's type, checked before the scan.
    let v = unsafe { state.input.as_vector(datum, &what) };
    if let Err(e) = navis_engine::validate(v) {
        raise(
            crate::errors::vector_error_code(&e),
            format!("cannot index row ({block},{offset}): {e}"),
            Some("Fix or delete the row, or exclude it with a partial index (WHERE ...)."),
        )
    }
    match state.dim {
        None => state.dim = Some(v.len()),
        Some(d) if d != v.len() => raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!(
                "cannot index row ({block},{offset}): it has {} dimensions, earlier rows have {d}",
                v.len()
            ),
            Some("All vectors in a navis index must have the same number of dimensions."),
        ),
        Some(_) => {}
    }
    // A zero vector has no direction, so its cosine distance to anything is NaN; like
    // pgvector's HNSW, a cosine index leaves such rows out.
    if state.metric == Metric::Cosine && v.iter().all(|x| *x == 0.0) {
        state.skipped_zero += 1;
        return;
    }
    state.rows += 1;
}

#[pg_guard]
unsafe extern "C-unwind" fn ambuild(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    index_info: *mut pg_sys::IndexInfo,
) -> *mut pg_sys::IndexBuildResult {
    shmem::require("CREATE INDEX ... USING navis");
    // SAFETY: an index relation has at least one entry in rd_opcintype.
    let input = VectorInput::for_type(unsafe { *(*index).rd_opcintype });
    let metric = index_metric(index);
    let options = BuildOptions::of_index(index);
    let mut scan = BuildScan { input, metric, dim: None, rows: 0, skipped_nulls: 0, skipped_zero: 0 };
    // SAFETY: heap and index are the open relations PostgreSQL passed to ambuild; the
    // callback only touches `scan`, which outlives the call.
    unsafe {
        pg_sys::IndexBuildHeapScan(heap, index, index_info, Some(build_callback), &mut scan);
    }
    if let Some(dim) = scan.dim {
        options.validate_for(dim);
    }
    raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!(
            "navis index build is not implemented yet (checked {} rows{}; skipped {} NULL and {} zero vectors)",
            scan.rows,
            scan.dim.map(|d| format!(" of {d} dimensions")).unwrap_or_default(),
            scan.skipped_nulls,
            scan.skipped_zero
        ),
        Some("This navis version provides the distance operators; index builds arrive in a later version."),
    )
}

#[pg_guard]
unsafe extern "C-unwind" fn ambuildempty(_index: pg_sys::Relation) {
    raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        "navis indexes on unlogged tables are not implemented yet".into(),
        None,
    )
}

fn not_implemented(what: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!("navis {what} is not implemented yet"),
        None,
    )
}

// No navis index can exist yet (ambuild always fails), so the callbacks below cannot be
// reached from SQL; they fail loudly rather than return a plausible-looking result.

#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn aminsert(
    _index: pg_sys::Relation,
    _values: *mut pg_sys::Datum,
    _isnull: *mut bool,
    _heap_tid: pg_sys::ItemPointer,
    _heap: pg_sys::Relation,
    _check_unique: pg_sys::IndexUniqueCheck::Type,
    _index_unchanged: bool,
    _index_info: *mut pg_sys::IndexInfo,
) -> bool {
    not_implemented("insert")
}

#[pg_guard]
unsafe extern "C-unwind" fn ambulkdelete(
    _info: *mut pg_sys::IndexVacuumInfo,
    _stats: *mut pg_sys::IndexBulkDeleteResult,
    _callback: pg_sys::IndexBulkDeleteCallback,
    _callback_state: *mut std::ffi::c_void,
) -> *mut pg_sys::IndexBulkDeleteResult {
    not_implemented("VACUUM")
}

#[pg_guard]
unsafe extern "C-unwind" fn amvacuumcleanup(
    _info: *mut pg_sys::IndexVacuumInfo,
    _stats: *mut pg_sys::IndexBulkDeleteResult,
) -> *mut pg_sys::IndexBulkDeleteResult {
    not_implemented("VACUUM")
}

/// Makes the planner consider a navis index only for `ORDER BY col <op> const`: without an
/// ORDER BY operator the path costs as much as PostgreSQL's disable_cost.
#[pg_guard]
#[allow(clippy::too_many_arguments)]
unsafe extern "C-unwind" fn amcostestimate(
    _root: *mut pg_sys::PlannerInfo,
    path: *mut pg_sys::IndexPath,
    _loop_count: f64,
    startup: *mut pg_sys::Cost,
    total: *mut pg_sys::Cost,
    selectivity: *mut pg_sys::Selectivity,
    correlation: *mut f64,
    pages: *mut f64,
) {
    const DISABLE_COST: f64 = 1.0e10;
    // SAFETY: the planner passes valid pointers for every output and a valid path.
    unsafe {
        let has_order_by = !(*path).indexorderbys.is_null();
        *startup = if has_order_by { 0.0 } else { DISABLE_COST };
        *total = if has_order_by { 1.0 } else { DISABLE_COST };
        *selectivity = 1.0;
        *correlation = 0.0;
        *pages = 1.0;
    }
}

/// Checks that an operator class gives navis what it needs: one ORDER BY operator at
/// strategy 1 that is one of the three distance operators.
#[pg_guard]
unsafe extern "C-unwind" fn amvalidate(opclass: pg_sys::Oid) -> bool {
    let query = "SELECT count(*) FILTER (WHERE ao.amopstrategy = 1 AND ao.amoppurpose = 'o'
                                          AND o.oprname IN ('<->', '<#>', '<=>')),
                        count(*)
                 FROM pg_opclass c
                 JOIN pg_amop ao ON ao.amopfamily = c.opcfamily
                 JOIN pg_operator o ON o.oid = ao.amopopr
                 WHERE c.oid = $1";
    let counts = Spi::get_two_with_args::<i64, i64>(query, &[opclass.into()]);
    matches!(counts, Ok((Some(1), Some(1))))
}

#[pg_guard]
unsafe extern "C-unwind" fn ambeginscan(
    _index: pg_sys::Relation,
    _nkeys: std::ffi::c_int,
    _norderbys: std::ffi::c_int,
) -> pg_sys::IndexScanDesc {
    not_implemented("index scan")
}

#[pg_guard]
unsafe extern "C-unwind" fn amrescan(
    _scan: pg_sys::IndexScanDesc,
    _keys: pg_sys::ScanKey,
    _nkeys: std::ffi::c_int,
    _orderbys: pg_sys::ScanKey,
    _norderbys: std::ffi::c_int,
) {
    not_implemented("index scan")
}

#[pg_guard]
unsafe extern "C-unwind" fn amgettuple(
    _scan: pg_sys::IndexScanDesc,
    _direction: pg_sys::ScanDirection::Type,
) -> bool {
    not_implemented("index scan")
}

#[pg_guard]
unsafe extern "C-unwind" fn amendscan(_scan: pg_sys::IndexScanDesc) {}
