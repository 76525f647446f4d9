//! The vector SQL surface on `real[]`: distance functions and the `<->`, `<#>`, `<=>`, `<+>`
//! operators, with pgvector's meaning so queries port unchanged.
//!
//! Arrays are checked here for the things only PostgreSQL can see (shape and SQL NULL
//! elements); the values themselves are checked by `navis_engine::vector`, which every other
//! entry point (index build, inserts, scans) uses as well.

use crate::errors::{raise, raise_vector_error};
use navis_engine::{validate_pair, Metric};
use pgrx::array::RawArray;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// Borrows the elements of a one-dimensional `real[]` without NULLs, or raises `ERROR`.
///
/// The returned slice points into the detoasted array, which lives in the current memory
/// context for the rest of the function call.
pub fn array_as_vector<'a>(array: Array<'a, f32>, what: &str) -> &'a [f32] {
    // SAFETY: `array` was built by pgrx from a detoasted `real[]` datum, so it points at a
    // valid ArrayType; the pointer stays valid for the duration of the call ('a).
    let Some(mut raw) = (unsafe { RawArray::from_array(array) }) else {
        raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("{what} is not a valid array"),
            None,
        )
    };
    match raw.dims().len() {
        0 => raise_vector_error(navis_engine::VectorError::Empty),
        1 => {}
        n => raise(
            PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
            format!("{what} must be a one-dimensional array, not {n}-dimensional"),
            Some("Use a flat real[] such as ARRAY[1, 2, 3]::real[]."),
        ),
    }
    // SAFETY: the array is detoasted and its null bitmap (if any) covers every element.
    if unsafe { raw.any_nulls() } {
        raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            format!("{what} must not contain NULL elements"),
            Some("Replace NULL elements or filter such rows out."),
        )
    }
    // SAFETY: element type is float4 (the SQL signature says real[]), the array has no
    // NULLs, so the data area holds exactly len() properly aligned f32 values, all valid.
    unsafe { raw.data::<f32>().as_ref() }
}

fn distance(a: Array<'_, f32>, b: Array<'_, f32>, metric: Metric) -> f64 {
    let a = array_as_vector(a, "left vector");
    let b = array_as_vector(b, "right vector");
    if let Err(e) = validate_pair(a, b) {
        raise_vector_error(e)
    }
    metric.sql_distance(a, b)
}

/// Euclidean distance, the `<->` operator.
#[pg_extern(immutable, parallel_safe, strict)]
fn l2_distance(a: Array<'_, f32>, b: Array<'_, f32>) -> f64 {
    distance(a, b, Metric::L2)
}

/// Inner product (larger is more similar).
#[pg_extern(immutable, parallel_safe, strict)]
fn inner_product(a: Array<'_, f32>, b: Array<'_, f32>) -> f64 {
    -distance(a, b, Metric::InnerProduct)
}

/// Negative inner product, the `<#>` operator (smaller is closer, so it can be ordered by).
#[pg_extern(immutable, parallel_safe, strict)]
fn negative_inner_product(a: Array<'_, f32>, b: Array<'_, f32>) -> f64 {
    distance(a, b, Metric::InnerProduct)
}

/// Cosine distance `1 - cos(a, b)`, the `<=>` operator. NaN when either vector is zero, as
/// in pgvector.
#[pg_extern(immutable, parallel_safe, strict)]
fn cosine_distance(a: Array<'_, f32>, b: Array<'_, f32>) -> f64 {
    distance(a, b, Metric::Cosine)
}

/// L1 (Manhattan, taxicab) distance `sum |a_i - b_i|`, the `<+>` operator (pgvector's
/// `l1_distance`).
#[pg_extern(immutable, parallel_safe, strict)]
fn l1_distance(a: Array<'_, f32>, b: Array<'_, f32>) -> f64 {
    distance(a, b, Metric::L1)
}

/// Number of dimensions of a vector (after checking it is one).
#[pg_extern(immutable, parallel_safe, strict)]
fn navis_vector_dims(a: Array<'_, f32>) -> i32 {
    let v = array_as_vector(a, "vector");
    if let Err(e) = navis_engine::validate(v) {
        raise_vector_error(e)
    }
    v.len() as i32
}

/// Which distance kernels this server uses (`avx2+fma` or `scalar`).
#[pg_extern(immutable, parallel_safe)]
fn navis_distance_kernels() -> &'static str {
    navis_engine::kernels().kind.name()
}

extension_sql!(
    r#"
CREATE OPERATOR <-> (
    LEFTARG = real[], RIGHTARG = real[], FUNCTION = l2_distance, COMMUTATOR = '<->'
);
COMMENT ON OPERATOR <->(real[], real[]) IS 'navis: Euclidean distance';
CREATE OPERATOR <#> (
    LEFTARG = real[], RIGHTARG = real[], FUNCTION = negative_inner_product, COMMUTATOR = '<#>'
);
COMMENT ON OPERATOR <#>(real[], real[]) IS 'navis: negative inner product';
CREATE OPERATOR <=> (
    LEFTARG = real[], RIGHTARG = real[], FUNCTION = cosine_distance, COMMUTATOR = '<=>'
);
COMMENT ON OPERATOR <=>(real[], real[]) IS 'navis: cosine distance';
CREATE OPERATOR <+> (
    LEFTARG = real[], RIGHTARG = real[], FUNCTION = l1_distance, COMMUTATOR = '<+>'
);
COMMENT ON OPERATOR <+>(real[], real[]) IS 'navis: L1 (taxicab) distance';
"#,
    name = "navis_operators",
    requires = [
        l2_distance,
        negative_inner_product,
        cosine_distance,
        l1_distance
    ]
);
