//! The per-query ADC table, and the one spare allocation each thread keeps for the next.
//!
//! A table is `pq_bytes` rows of 256 floats: 128 KiB for a 128-byte code. A backend answers
//! one scan after another, and each used to allocate its table afresh and fill it with
//! infinity before the real distances overwrote it: 9 K instructions per Fashion-MNIST query
//! of about 1.0 M (callgrind, navis-bench), a small cost next to computing the table. A
//! dropped table leaves its rows to its thread, and the next
//! [`QueryTable::new`] on that thread takes them; the contents are overwritten before use
//! ([`super::ProductQuantizer::table_under`] writes every entry below `k` and fills the rest).

use std::cell::Cell;

use super::MAX_CENTROIDS;

type Row = [f32; MAX_CENTROIDS];

thread_local! {
    /// The rows of the last table this thread dropped, kept for its next table. One is
    /// enough: a backend holds at most a scan's table and an insert's few at a time, and a
    /// build thread its own.
    static SPARE_ROWS: Cell<Vec<Row>> = const { Cell::new(Vec::new()) };
}

/// Per-query ADC table: `[pq_bytes][256]` distances from each query subvector to each
/// centroid (squared L2, or negative dot for inner product).
#[derive(Clone, Debug)]
pub struct QueryTable {
    pub(super) rows: Vec<Row>,
}

impl QueryTable {
    /// A table to fill with [`super::ProductQuantizer::query_table_into`], reusing the rows
    /// of one this thread dropped before, if any. Its contents are unspecified until filled.
    pub fn new() -> Self {
        // `try_with` fails only while the thread is being torn down: start empty then.
        let rows = SPARE_ROWS.try_with(Cell::take).unwrap_or_default();
        QueryTable { rows }
    }

    pub fn pq_bytes(&self) -> usize {
        self.rows.len()
    }

    /// The table's rows resized to `pq_bytes`, for the quantizer to overwrite. Rows kept
    /// from a reused allocation hold stale values.
    pub(super) fn rows_for(&mut self, pq_bytes: usize) -> &mut [Row] {
        self.rows.resize(pq_bytes, [f32::INFINITY; MAX_CENTROIDS]);
        &mut self.rows
    }

    /// The approximate distance of the vertex with this code. A code must have `pq_bytes()`
    /// bytes; a shorter one is summed over its length (checked in debug builds only: this
    /// runs millions of times per second).
    #[inline]
    pub fn distance(&self, code: &[u8]) -> f32 {
        debug_assert_eq!(code.len(), self.rows.len(), "PQ code of the wrong length");
        // Four independent sums hide the add latency; a u8 index into a 256-entry array
        // needs no bounds check.
        let (code4, code_rest) = code.as_chunks::<4>();
        let (rows4, rows_rest) = self.rows.as_chunks::<4>();
        let mut acc = [0f32; 4];
        for (c, r) in code4.iter().zip(rows4) {
            acc[0] += r[0][c[0] as usize];
            acc[1] += r[1][c[1] as usize];
            acc[2] += r[2][c[2] as usize];
            acc[3] += r[3][c[3] as usize];
        }
        let mut sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        for (&c, r) in code_rest.iter().zip(rows_rest) {
            sum += r[c as usize];
        }
        sum
    }

    /// Distances of consecutive codes (`codes.len() == out.len() * pq_bytes()`).
    pub fn distances(&self, codes: &[u8], out: &mut [f32]) {
        debug_assert_eq!(codes.len(), out.len() * self.rows.len());
        for (d, code) in out.iter_mut().zip(codes.chunks_exact(self.rows.len())) {
            *d = self.distance(code);
        }
    }
}

impl Default for QueryTable {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for QueryTable {
    fn drop(&mut self) {
        if self.rows.capacity() == 0 {
            return;
        }
        let rows = std::mem::take(&mut self.rows);
        // Keep the larger of the two allocations; during thread teardown drop it.
        let _ = SPARE_ROWS.try_with(|spare| {
            let kept = spare.take();
            spare.set(if kept.capacity() >= rows.capacity() {
                kept
            } else {
                rows
            });
        });
    }
}
