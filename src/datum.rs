//! Index input types: which column types a navis index accepts and how their datums become
//! `&[f32]`.
//!
//! Every place that reads an indexed value (build, insert, scan keys) goes through
//! [`VectorInput`], so each input type is one variant here: `real[]`, and pgvector's `vector`
//! and `halfvec` when that extension is installed (see `pgvector.rs` for their operator
//! classes).

use crate::errors::raise;
use crate::vector_sql::array_as_vector;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};

/// A column type navis can index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VectorInput {
    /// `real[]` (float4[]), one-dimensional, no NULL elements.
    RealArray,
    /// pgvector's `vector`: a varlena holding `int16 dim`, `int16 unused`, `float4 x[dim]`
    /// (pgvector's src/vector.h), read in place.
    PgVector,
    /// pgvector's `halfvec`: `int16 dim`, `int16 unused`, `half x[dim]` (IEEE binary16,
    /// pgvector's src/halfvec.h), widened to float4 into a buffer of the current memory
    /// context (exactly, as pgvector widens them for its own distances).
    PgHalfvec,
}

/// Bytes before the first element of a pgvector `vector` (4-byte varlena header, dim, unused).
const PGVECTOR_HEADER: usize = 8;

impl VectorInput {
    /// The input kind for a type OID, or `ERROR` naming the supported types.
    pub fn for_type(type_oid: pg_sys::Oid) -> VectorInput {
        if type_oid == pg_sys::FLOAT4ARRAYOID {
            return VectorInput::RealArray;
        }
        match crate::pgvector::pgvector_type(type_oid) {
            Some(crate::pgvector::PgvectorType::Vector) => return VectorInput::PgVector,
            Some(crate::pgvector::PgvectorType::Halfvec) => return VectorInput::PgHalfvec,
            None => {}
        }
        raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            "navis indexes support real[] columns and pgvector's vector and halfvec columns only"
                .into(),
            Some("Store the embedding as real[], or install pgvector and run SELECT navis_enable_pgvector()."),
        )
    }

    /// Borrows the vector in a non-NULL datum of this type, checking its shape (not its
    /// values: callers run `navis_engine::validate` with their own wording).
    ///
    /// # Safety
    /// `datum` must be a non-NULL datum of the type this input was made for; the returned
    /// slice lives as long as the current memory context.
    pub unsafe fn as_vector<'a>(self, datum: pg_sys::Datum, what: &str) -> &'a [f32] {
        match self {
            VectorInput::RealArray => {
                // SAFETY: the caller guarantees a non-NULL real[] datum.
                let array = unsafe { Array::<f32>::from_datum(datum, false) }
                    .expect("a non-NULL datum gives an array");
                array_as_vector(array, what)
            }
            // SAFETY: the caller guarantees a non-NULL pgvector `vector` datum.
            VectorInput::PgVector => unsafe { pgvector_as_vector(datum, what) },
            // SAFETY: the caller guarantees a non-NULL pgvector `halfvec` datum.
            VectorInput::PgHalfvec => unsafe { halfvec_as_vector(datum, what) },
        }
    }
}

/// The detoasted value of a pgvector `vector` or `halfvec` datum, checked to hold `dim`
/// elements of `element` bytes after its header: (pointer to the first element, dim).
///
/// # Safety
/// `datum` must be a non-NULL datum of pgvector's `vector` or `halfvec` type.
unsafe fn pgvector_elements(
    datum: pg_sys::Datum,
    element: usize,
    what: &str,
) -> (*const u8, usize) {
    // SAFETY: a non-NULL varlena datum; pg_detoast_datum returns it unchanged when it is
    // plain (4-byte header, inline, uncompressed) or a palloc'd plain copy otherwise, so the
    // result always has a 4-byte header and lives in the current memory context.
    let ptr = unsafe { pg_sys::pg_detoast_datum(datum.cast_mut_ptr::<pg_sys::varlena>()) };
    // SAFETY: `ptr` is a plain varlena (see above), so its 4-byte header gives its size.
    let total = unsafe { pgrx::varlena::varsize(ptr) };
    if total < PGVECTOR_HEADER {
        bad(
            what,
            format!("it is {total} bytes long, shorter than its header"),
        );
    }
    let base = ptr as *const u8;
    // SAFETY: the value is at least PGVECTOR_HEADER bytes long; dim is the int16 after the
    // 4-byte varlena header (read unaligned to make no assumption about the datum's address).
    let dim = unsafe { std::ptr::read_unaligned(base.add(4) as *const i16) };
    let expected = PGVECTOR_HEADER + element * dim.max(0) as usize;
    if dim < 0 || expected != total {
        bad(
            what,
            format!("its header says {dim} dimensions but it holds {total} bytes"),
        );
    }
    // SAFETY: the value is longer than its header (checked above).
    (unsafe { base.add(PGVECTOR_HEADER) }, dim as usize)
}

/// The elements of a pgvector `halfvec` datum widened to float4, in a palloc'd buffer of the
/// current memory context (as long-lived as a detoasted copy would be).
///
/// # Safety
/// `datum` must be a non-NULL datum of pgvector's `halfvec` type.
unsafe fn halfvec_as_vector<'a>(datum: pg_sys::Datum, what: &str) -> &'a mut [f32] {
    // SAFETY: per the contract.
    let (data, dim) = unsafe { pgvector_elements(datum, 2, what) };
    // SAFETY: palloc returns at least MAXALIGN-aligned memory of the requested size in the
    // current context (or raises); every element is written before the slice is read.
    let out = unsafe {
        let buf = pg_sys::palloc(dim.max(1) * std::mem::size_of::<f32>()) as *mut f32;
        std::slice::from_raw_parts_mut(buf, dim)
    };
    for (k, x) in out.iter_mut().enumerate() {
        // SAFETY: `data` holds `dim` two-byte elements (checked by pgvector_elements).
        let bits = unsafe { std::ptr::read_unaligned(data.add(2 * k) as *const u16) };
        *x = half::f16::from_bits(bits).to_f32();
    }
    out
}

/// Borrows the elements of a pgvector `vector` datum without copying them (beyond the
/// detoasting PostgreSQL does for compressed, external or short-header values).
///
/// # Safety
/// `datum` must be a non-NULL datum of pgvector's `vector` type.
unsafe fn pgvector_as_vector<'a>(datum: pg_sys::Datum, what: &str) -> &'a [f32] {
    // SAFETY: per the contract.
    let (data, dim) = unsafe { pgvector_elements(datum, 4, what) };
    let data = data as *const f32;
    if !(data as usize).is_multiple_of(std::mem::align_of::<f32>()) {
        // Never seen: detoasted values are palloc'd (MAXALIGN) and inline ones start at the
        // type's 4-byte alignment. Refuse rather than read unaligned floats.
        bad(what, "its elements are not 4-byte aligned".into());
    }
    // SAFETY: `data` is 4-byte aligned and the value holds exactly `dim` float4s after the
    // header (checked above); they live as long as the detoasted value (current context).
    unsafe { std::slice::from_raw_parts(data, dim) }
}

fn bad(what: &str, detail: String) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
        format!("{what} is not a valid pgvector value: {detail}"),
        None,
    )
}
