//! Reads of a relation that another process may be growing at the same moment.
//!
//! A reader learns the relation's length, then reads the extent map; a writer that extends
//! the relation and rewrites a map page in between leaves the reader with runs reaching past
//! the length it read, which looks exactly like damage. PostgreSQL's writers grow a relation
//! under its extension lock, but readers (scans, a hot standby's backends while redo runs)
//! do not take it, and the engine's own stores have no lock at all. Such a read is tried
//! again a few times, a little apart; real damage fails every try and is reported.
//!
//! Every read of that kind goes through [`retry_racing_growth`], and only once: a retried
//! read must not call another retried read, or the tries multiply.

use crate::storage::StorageError;
use std::time::Duration;

/// Tries in all, the first included. Growth is one extension and one map-page write, so a
/// second try almost always succeeds; the rest cover a busy machine.
pub(crate) const TRIES: u32 = 5;

/// Runs `read` until it succeeds, at most [`TRIES`] times, sleeping 2, 4, 8 and 16 ms
/// between tries (30 ms in all before real damage is reported). Returns the last error.
pub(crate) fn retry_racing_growth<T>(
    mut read: impl FnMut() -> Result<T, StorageError>,
) -> Result<T, StorageError> {
    let mut tries = 1;
    loop {
        match read() {
            Ok(value) => return Ok(value),
            Err(_) if tries < TRIES => {
                std::thread::sleep(Duration::from_millis(1 << tries));
                tries += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_read_that_fails_a_few_times_is_tried_until_it_succeeds() {
        let calls = Cell::new(0);
        let got = retry_racing_growth(|| {
            calls.set(calls.get() + 1);
            if calls.get() < TRIES {
                Err(StorageError::corrupt(
                    std::path::Path::new("growing"),
                    "runs reach past the end",
                ))
            } else {
                Ok(calls.get())
            }
        });
        assert_eq!(got.unwrap(), TRIES, "the last allowed try succeeds");
    }

    #[test]
    fn a_read_that_always_fails_is_tried_exactly_tries_times() {
        let calls = Cell::new(0);
        let got: Result<(), _> = retry_racing_growth(|| {
            calls.set(calls.get() + 1);
            Err(StorageError::corrupt(
                std::path::Path::new("damaged"),
                "bad page",
            ))
        });
        assert!(got.is_err());
        assert_eq!(calls.get(), TRIES);
    }
}
