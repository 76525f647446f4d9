//! The one error type of the storage layer. Messages name the file and what is wrong with
//! it, because they end up verbatim in a PostgreSQL ERROR.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub enum StorageError {
    /// An operating-system call on a side file failed.
    Io {
        path: PathBuf,
        op: &'static str,
        source: io::Error,
    },
    /// The caller passed parameters or data that cannot be stored.
    InvalidInput(String),
    /// A file exists but its contents are not what the format says.
    Corrupt { path: PathBuf, detail: String },
    /// A file was written by a different format version.
    Version {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
}

impl StorageError {
    pub fn io(path: &Path, op: &'static str, source: io::Error) -> Self {
        StorageError::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }

    pub fn corrupt(path: &Path, detail: impl Into<String>) -> Self {
        StorageError::Corrupt {
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }

    pub fn invalid(detail: impl Into<String>) -> Self {
        StorageError::InvalidInput(detail.into())
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Io { path, op, source } => {
                write!(
                    f,
                    "could not {op} navis index file \"{}\": {source}",
                    path.display()
                )
            }
            StorageError::InvalidInput(detail) => write!(f, "{detail}"),
            StorageError::Corrupt { path, detail } => {
                write!(
                    f,
                    "navis index file \"{}\" is corrupt: {detail}",
                    path.display()
                )
            }
            StorageError::Version {
                path,
                found,
                expected,
            } => write!(
                f,
                "index format version {found}, this build reads {expected}: REINDEX (file \"{}\")",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StorageError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
