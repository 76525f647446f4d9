//! One place that turns engine errors into PostgreSQL `ERROR`s with SQLSTATEs.
//!
//! Every user-visible failure goes through here so the wording and error codes stay
//! consistent between the SQL operators, index build and scans.

use navis_engine::VectorError;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// Raises `ERROR` with an optional hint. Never returns.
pub fn raise(code: PgSqlErrorCode, message: String, hint: Option<&str>) -> ! {
    let mut report = ErrorReport::new(code, message, "navis");
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}

/// The SQLSTATE PostgreSQL users expect for each kind of bad vector, matching pgvector.
pub fn vector_error_code(e: &VectorError) -> PgSqlErrorCode {
    match e {
        VectorError::TooManyDimensions { .. } => PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        VectorError::NotFinite { .. }
        | VectorError::Empty
        | VectorError::DimensionMismatch { .. } => PgSqlErrorCode::ERRCODE_DATA_EXCEPTION,
    }
}

/// Raises the `ERROR` for an invalid vector.
pub fn raise_vector_error(e: VectorError) -> ! {
    let hint = match e {
        VectorError::NotFinite { .. } => Some("Replace NaN and infinite elements before storing or comparing the vector."),
        VectorError::TooManyDimensions { .. } => Some("Reduce the dimensionality, for example with a projection or a smaller embedding model."),
        _ => None,
    };
    raise(vector_error_code(&e), e.to_string(), hint)
}

/// Raises the `ERROR` for a feature that needs `shared_preload_libraries`.
pub fn raise_not_preloaded(feature: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("{feature} requires navis to be loaded via shared_preload_libraries"),
        Some("Add shared_preload_libraries = 'navis' to postgresql.conf (append to the list if it already has entries) and restart PostgreSQL."),
    )
}

/// Raises `ERROR` with a DETAIL line and an optional hint. Never returns.
pub fn raise_detail(
    code: PgSqlErrorCode,
    message: String,
    detail: String,
    hint: Option<&str>,
) -> ! {
    let mut report = ErrorReport::new(code, message, "navis").set_detail(detail);
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}
