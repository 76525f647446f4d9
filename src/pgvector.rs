//! pgvector interoperability: navis operator classes for pgvector's `vector` and `halfvec`
//! types, so an existing pgvector table can switch to `USING navis` with no data change.
//!
//! pgvector is optional and never a build dependency. Its types are recognised at run time
//! ([`pgvector_type`]); `vector` values are read in place by `datum::VectorInput::PgVector`,
//! `halfvec` values widened to float4 by `datum::VectorInput::PgHalfvec`. The operator classes
//! use pgvector's own `<->`, `<#>` and `<=>` on `(vector, vector)` and `(halfvec, halfvec)`
//! (pgvector 0.7 and later has `halfvec`; older versions get the `vector` classes only) and are
//! created by `navis_enable_pgvector()`: at CREATE EXTENSION navis when pgvector is already
//! installed, or by the user after installing pgvector later. They belong to neither extension
//! (a navis member that depends on pgvector would make DROP EXTENSION vector CASCADE drop all of
//! navis): DROP EXTENSION vector CASCADE drops them and the navis indexes on vector columns,
//! DROP EXTENSION navis drops them too (their operator families depend on the access method
//! automatically), and pg_dump dumps them like any user-created operator class.

use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::CStr;

extension_sql!(
    r#"
CREATE FUNCTION navis_enable_pgvector() RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $navis$
DECLARE
    vector_nsp name;
    navis_nsp name;
    navis_am oid;
    created integer := 0;
    c record;
BEGIN
    SELECT n.nspname INTO vector_nsp
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'vector';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgvector is not installed in this database'
            USING ERRCODE = 'undefined_object',
                  HINT = 'Run CREATE EXTENSION vector first, then SELECT navis_enable_pgvector().';
    END IF;
    SELECT n.nspname INTO navis_nsp
    FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
    WHERE e.extname = 'navis';
    SELECT oid INTO navis_am FROM pg_am WHERE amname = 'navis';
    FOR c IN SELECT * FROM (VALUES (1, 'vector', 'navis_vector_l2_ops', '<->'),
                                   (2, 'vector', 'navis_vector_ip_ops', '<#>'),
                                   (3, 'vector', 'navis_vector_cosine_ops', '<=>'),
                                   (4, 'halfvec', 'navis_halfvec_l2_ops', '<->'),
                                   (5, 'halfvec', 'navis_halfvec_ip_ops', '<#>'),
                                   (6, 'halfvec', 'navis_halfvec_cosine_ops', '<=>'),
                                   (7, 'vector', 'navis_vector_l1_ops', '<+>'),
                                   (8, 'halfvec', 'navis_halfvec_l1_ops', '<+>')) AS v(ord, typ, name, op)
             ORDER BY ord
    LOOP
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_opclass
                              WHERE opcname = c.name AND opcmethod = navis_am);
        -- halfvec and <+> came with pgvector 0.7
        CONTINUE WHEN to_regtype(format('%I.%I', vector_nsp, c.typ)) IS NULL;
        CONTINUE WHEN to_regoperator(format('%I.%s(%I.%I,%I.%I)', vector_nsp, c.op,
                                            vector_nsp, c.typ, vector_nsp, c.typ)) IS NULL;
        EXECUTE format(
            'CREATE OPERATOR CLASS %I.%I %s FOR TYPE %I.%I USING navis AS '
            'OPERATOR 1 %I.%s (%I.%I, %I.%I) FOR ORDER BY pg_catalog.float_ops',
            navis_nsp, c.name,
            -- L2 is the default unless some other navis opclass for the type already is
            CASE WHEN c.op = '<->' AND NOT EXISTS (
                     SELECT 1 FROM pg_opclass
                     WHERE opcmethod = navis_am AND opcdefault
                       AND opcintype = format('%I.%I', vector_nsp, c.typ)::regtype)
                 THEN 'DEFAULT' ELSE '' END,
            vector_nsp, c.typ, vector_nsp, c.op, vector_nsp, c.typ, vector_nsp, c.typ);
        -- Not members of either extension: a member of navis depending on pgvector would make
        -- DROP EXTENSION vector CASCADE drop all of navis. Inside CREATE EXTENSION navis the new
        -- objects became members automatically, so release them.
        IF EXISTS (SELECT 1 FROM pg_depend d JOIN pg_opclass oc ON oc.oid = d.objid
                   WHERE d.classid = 'pg_opclass'::regclass AND d.deptype = 'e'
                     AND oc.opcname = c.name AND oc.opcmethod = navis_am) THEN
            EXECUTE format('ALTER EXTENSION navis DROP OPERATOR CLASS %I.%I USING navis',
                           navis_nsp, c.name);
            EXECUTE format('ALTER EXTENSION navis DROP OPERATOR FAMILY %I.%I USING navis',
                           navis_nsp, c.name);
        END IF;
        created := created + 1;
    END LOOP;
    RETURN created;
END
$navis$;
COMMENT ON FUNCTION navis_enable_pgvector() IS
    'navis: create the navis operator classes for pgvector''s vector and halfvec types (run after CREATE EXTENSION vector, and again after updating it; returns how many were created, 0 when all exist)';

-- pgvector installed before navis: enable it now.
DO $navis$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'vector') THEN
        PERFORM navis_enable_pgvector();
    END IF;
END
$navis$;
"#,
    name = "navis_pgvector",
    requires = ["navis_opclasses"]
);

/// pgvector's types that navis indexes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PgvectorType {
    Vector,
    Halfvec,
}

thread_local! {
    /// Type OIDs already classified in this backend. Cleared by a pg_type syscache
    /// invalidation, so DROP/CREATE EXTENSION vector is seen.
    static KNOWN: RefCell<Vec<(pg_sys::Oid, Option<PgvectorType>)>> = const { RefCell::new(Vec::new()) };
    static CALLBACK_REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_types(_arg: pg_sys::Datum, _cache_id: i32, _hash: u32) {
    KNOWN.with(|k| k.borrow_mut().clear());
}

/// Which of pgvector's types `type_oid` is: a type named `vector` or `halfvec` that is a
/// member of the extension named `vector`. Answers are remembered per backend until pg_type
/// changes.
pub fn pgvector_type(type_oid: pg_sys::Oid) -> Option<PgvectorType> {
    if let Some(known) = KNOWN.with(|k| {
        k.borrow()
            .iter()
            .find(|(o, _)| *o == type_oid)
            .map(|(_, b)| *b)
    }) {
        return known;
    }
    if !CALLBACK_REGISTERED.with(|c| c.replace(true)) {
        // SAFETY: registers a plain function for this backend's lifetime; TYPEOID is a valid
        // syscache id. The callback only clears a backend-local vector.
        unsafe {
            pg_sys::CacheRegisterSyscacheCallback(
                pg_sys::SysCacheIdentifier::TYPEOID as i32,
                Some(forget_types),
                pg_sys::Datum::from(0),
            )
        };
    }
    let answer = lookup(type_oid);
    KNOWN.with(|k| k.borrow_mut().push((type_oid, answer)));
    answer
}

fn lookup(type_oid: pg_sys::Oid) -> Option<PgvectorType> {
    // SAFETY: catalog lookups by OID; the syscache tuple is released before returning and
    // the name is copied out of it first.
    unsafe {
        let ext = pg_sys::get_extension_oid(c"vector".as_ptr(), true);
        if ext == pg_sys::InvalidOid {
            return None;
        }
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::TYPEOID as i32,
            pg_sys::Datum::from(type_oid),
        );
        if tuple.is_null() {
            return None;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_type>(tuple);
        let kind = match CStr::from_ptr((*form).typname.data.as_ptr()).to_bytes() {
            b"vector" => Some(PgvectorType::Vector),
            b"halfvec" => Some(PgvectorType::Halfvec),
            _ => None,
        }
        .filter(|_| (*form).typlen == -1);
        pg_sys::ReleaseSysCache(tuple);
        kind.filter(|_| pg_sys::getExtensionOfObject(pg_sys::TypeRelationId, type_oid) == ext)
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use crate::datum::VectorInput;
    use pgrx::prelude::*;

    // These run without pgvector (CI has none); pg_test/sql/pgvector.sql covers the rest.

    #[pg_test]
    fn real_array_input_without_pgvector() {
        assert_eq!(
            VectorInput::for_type(pg_sys::FLOAT4ARRAYOID),
            VectorInput::RealArray
        );
        assert_eq!(crate::pgvector::pgvector_type(pg_sys::INT4OID), None);
        assert_eq!(crate::pgvector::pgvector_type(pg_sys::FLOAT4ARRAYOID), None);
        // asked twice: the remembered answer is the same
        assert_eq!(crate::pgvector::pgvector_type(pg_sys::INT4OID), None);
    }

    #[pg_test]
    fn a_user_type_named_vector_is_not_pgvector() {
        Spi::run("CREATE TYPE vector AS (x real)").unwrap();
        let oid = Spi::get_one::<pg_sys::Oid>("SELECT 'vector'::regtype::oid")
            .unwrap()
            .unwrap();
        assert_eq!(crate::pgvector::pgvector_type(oid), None);
    }

    #[pg_test(
        error = "navis indexes support real[] columns and pgvector's vector and halfvec columns only"
    )]
    fn other_types_are_refused_naming_both_supported_types() {
        VectorInput::for_type(pg_sys::TEXTOID);
    }

    #[pg_test(error = "pgvector is not installed in this database")]
    fn enable_pgvector_without_pgvector_is_a_clear_error() {
        let none = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_opclass WHERE opcname LIKE 'navis_vector_%'",
        );
        assert_eq!(none, Ok(Some(0)));
        Spi::run("SELECT navis_enable_pgvector()").unwrap();
    }
}
