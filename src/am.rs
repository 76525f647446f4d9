//! The `navis` index access method: handler, opclass SQL and callbacks.
//!
//! The build lives in `build.rs`, opening an index in `open.rs`, ordered scans in `scan.rs`,
//! the cost model in `cost.rs`, inserts in `insert.rs` and VACUUM in `vacuum.rs`.

use crate::errors::raise;
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

    am.ambuild = Some(crate::build::ambuild);
    am.ambuildempty = Some(crate::build::ambuildempty);
    am.ambuildphasename = Some(crate::build::ambuildphasename);
    am.aminsert = Some(crate::insert::aminsert);
    am.ambulkdelete = Some(crate::vacuum::ambulkdelete);
    am.amvacuumcleanup = Some(crate::vacuum::amvacuumcleanup);
    am.amcostestimate = Some(crate::cost::amcostestimate);
    am.amoptions = Some(crate::options::amoptions);
    am.amvalidate = Some(amvalidate);
    am.ambeginscan = Some(crate::scan::ambeginscan);
    am.amrescan = Some(crate::scan::amrescan);
    am.amgettuple = Some(crate::scan::amgettuple);
    am.amendscan = Some(crate::scan::amendscan);
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
CREATE OPERATOR CLASS navis_l1_ops FOR TYPE real[] USING navis AS
    OPERATOR 1 <+> (real[], real[]) FOR ORDER BY float_ops;
"#,
    name = "navis_opclasses",
    requires = [navis_handler, "navis_operators"]
);

/// Name of the SQL operator of a navis opclass, mapped to the engine's metric.
fn metric_of_operator(name: &str) -> Option<Metric> {
    [Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::L1]
        .into_iter()
        .find(|m| m.operator() == name)
}

/// The metric an index orders by, from the ORDER BY operator of its opclass.
pub fn index_metric(index: pg_sys::Relation) -> Metric {
    // SAFETY: `index` is an open index relation with one key column, so rd_opfamily and
    // rd_opcintype have one entry; get_opname returns a palloc'd string or NULL.
    let name = unsafe {
        let family = *(*index).rd_opfamily;
        let input_type = *(*index).rd_opcintype;
        let op = pg_sys::get_opfamily_member(family, input_type, input_type, 1);
        let name = if op == pg_sys::InvalidOid {
            std::ptr::null_mut()
        } else {
            pg_sys::get_opname(op)
        };
        if name.is_null() {
            None
        } else {
            Some(CStr::from_ptr(name).to_string_lossy().into_owned())
        }
    };
    name.as_deref()
        .and_then(metric_of_operator)
        .unwrap_or_else(|| {
            raise(
                PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                "navis operator class has no supported ORDER BY operator".into(),
                Some("Use navis_l2_ops (<->), navis_ip_ops (<#>), navis_cosine_ops (<=>) or navis_l1_ops (<+>)."),
            )
        })
}

/// Checks that an operator class gives navis what it needs: one ORDER BY operator at
/// strategy 1 that is one of the four distance operators.
#[pg_guard]
unsafe extern "C-unwind" fn amvalidate(opclass: pg_sys::Oid) -> bool {
    let query = "SELECT count(*) FILTER (WHERE ao.amopstrategy = 1 AND ao.amoppurpose = 'o'
                                          AND o.oprname IN ('<->', '<#>', '<=>', '<+>')),
                        count(*)
                 FROM pg_opclass c
                 JOIN pg_amop ao ON ao.amopfamily = c.opcfamily
                 JOIN pg_operator o ON o.oid = ao.amopopr
                 WHERE c.oid = $1";
    let counts = Spi::get_two_with_args::<i64, i64>(query, &[opclass.into()]);
    matches!(counts, Ok((Some(1), Some(1))))
}
