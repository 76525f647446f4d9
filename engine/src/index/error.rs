//! Why a build or an open failed: [`IndexError`] and its conversions.

use std::fmt;
use std::io;

use crate::graph::BuildError;
use crate::storage::StorageError;

/// Why a build or an open failed. Messages are meant for a PostgreSQL ERROR.
#[derive(Debug)]
pub enum IndexError {
    /// Bad parameters or input rows.
    Invalid(String),
    /// The memory estimate exceeds the budget.
    Memory(String),
    /// The caller's cancel check returned true.
    Cancelled,
    Storage(StorageError),
    Io(io::Error),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Invalid(m) | IndexError::Memory(m) => f.write_str(m),
            IndexError::Cancelled => f.write_str("navis operation cancelled"),
            IndexError::Storage(e) => write!(f, "{e}"),
            IndexError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for IndexError {}

impl From<StorageError> for IndexError {
    fn from(e: StorageError) -> Self {
        IndexError::Storage(e)
    }
}

impl From<io::Error> for IndexError {
    fn from(e: io::Error) -> Self {
        IndexError::Io(e)
    }
}

impl From<BuildError> for IndexError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Cancelled => IndexError::Cancelled,
            other => IndexError::Invalid(other.to_string()),
        }
    }
}
