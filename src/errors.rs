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

/// Raises the `ERROR` for an engine failure while `context` (e.g. `insert into navis index
/// "x"`): cancellation as the pending cancel, damaged pages as data corruption with a
/// REINDEX hint, limits and I/O failures with their own SQLSTATEs.
pub fn raise_index_error(context: &str, e: navis_engine::index::IndexError) -> ! {
    use navis_engine::index::IndexError;
    use navis_engine::storage::StorageError;
    match e {
        IndexError::Cancelled => {
            // The engine stopped between batches with the index consistent; let PostgreSQL
            // raise the cancel or timeout that asked for it.
            pgrx::check_for_interrupts!();
            raise(
                PgSqlErrorCode::ERRCODE_QUERY_CANCELED,
                format!("{context}: cancelled"),
                None,
            )
        }
        IndexError::Storage(StorageError::Corrupt { .. })
        | IndexError::Storage(StorageError::Version { .. }) => raise(
            PgSqlErrorCode::ERRCODE_DATA_CORRUPTED,
            format!("{context}: {e}"),
            Some("The index's pages are damaged or from another navis version; REINDEX the index."),
        ),
        IndexError::Storage(StorageError::Io { .. }) | IndexError::Io(_) => raise(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("{context}: {e}"),
            None,
        ),
        IndexError::Memory(_) | IndexError::Storage(StorageError::InvalidInput(_)) => raise(
            PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
            format!("{context}: {e}"),
            None,
        ),
        other => raise(
            PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("{context}: {other}"),
            None,
        ),
    }
}
