//! Index input types: which column types a navis index accepts and how their datums become
//! `&[f32]`.
//!
//! Every place that reads an indexed value (build, insert, scan keys) goes through
//! [`VectorInput`], so adding an input type (pgvector's `vector`) is one variant here.

use crate::errors::raise;
use crate::vector_sql::array_as_vector;
use pgrx::prelude::*;
use pgrx::{pg_sys, PgSqlErrorCode};

/// A column type navis can index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VectorInput {
    /// `real[]` (float4[]), one-dimensional, no NULL elements.
    RealArray,
}

impl VectorInput {
    /// The input kind for a type OID, or `ERROR` naming the supported types.
    pub fn for_type(type_oid: pg_sys::Oid) -> VectorInput {
        if type_oid == pg_sys::FLOAT4ARRAYOID {
            return VectorInput::RealArray;
        }
        raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            "navis indexes support real[] columns only".into(),
            None,
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
        }
    }
}
