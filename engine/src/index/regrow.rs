//! Growing an index from empty or few rows (RFC 0002): when should an index rebuild itself
//! from its own rows, what rows does it hold, and what changed while a rebuild ran.
//!
//! PQ is trained by the build, on the rows the build sees. An index built over an empty table
//! has no quantizer, and one built over a handful of rows has one that knows nothing of the
//! rows inserted later. Rather than re-encode in place under searches, the index is rebuilt
//! from its own vertices (their exact vectors and heap TIDs), online, each time its live rows
//! reach a multiple of the rows its build saw: a fresh build of the same rows, so the growing
//! index keeps a fresh build's recall. The rebuild writes after the old build and switches the
//! metapage (`crate::relation::RelationWriter::append`); the old build's blocks are retired.
//!
//! The thresholds trade retired space against how stale the quantizer may get. A build sees
//! its first row, then 16, then 256 (a codebook trained on fewer rows than it has centroids
//! reproduces the rows it saw exactly, and below a few hundred rows scans read every vector
//! anyway), then every eightfold growth, and none once a build saw as many rows as a build
//! trains PQ on ([`TRAINED_ENOUGH`]). Each retired build is at most an eighth of the next
//! (plus its codebook, 1 KiB per dimension), so retired blocks stay below a seventh of the
//! index right after a rebuild and shrink as it grows.

use super::{DiskReader, Index, IndexError};
use crate::search::IndexSource;
use crate::storage::HeapTid;
use crate::VertexId;
use rustc_hash::FxHashMap as HashMap;

/// No rebuild once a build saw this many rows: PQ trains on a sample of at most this many.
pub const TRAINED_ENOUGH: usize = crate::pq::DEFAULT_TRAINING_SAMPLE;
/// After these first builds, a rebuild at every [`GROWTH`]-fold growth.
const FIRST_BUILDS: [usize; 3] = [1, 16, 256];
pub const GROWTH: usize = 8;
/// Vectors read per batch by [`Index::snapshot_rows`].
const SNAPSHOT_BATCH: usize = 256;

/// The number of live rows at which an index whose build saw `built` rows rebuilds itself
/// from its rows; `None` once it never does. An empty build rebuilds on its first row.
pub fn regrow_threshold(built: usize) -> Option<usize> {
    if built >= TRAINED_ENOUGH {
        return None;
    }
    let first = FIRST_BUILDS.iter().find(|&&rows| rows > built).copied();
    Some(first.unwrap_or(GROWTH * built))
}

/// The rows an index held at one moment: every published, not deleted vertex with its exact
/// vector (unit length for cosine) and heap TID, in id order.
#[derive(Debug, Default)]
pub struct RowSnapshot {
    pub ids: Vec<VertexId>,
    pub tids: Vec<HeapTid>,
    pub vectors: Vec<f32>,
}

/// What happened to an index's rows since a [`RowSnapshot`]: rows deleted (flagged or freed)
/// or replaced, by the TID the snapshot has for them, and vertices published since.
#[derive(Debug, Default, PartialEq)]
pub struct RowChanges {
    pub gone: Vec<HeapTid>,
    pub added: Vec<VertexId>,
}

impl RowChanges {
    pub fn is_empty(&self) -> bool {
        self.gone.is_empty() && self.added.is_empty()
    }
}

impl Index {
    /// The index's rows as of now, read through `reader` (vector pages in id order).
    pub fn snapshot_rows(&self, reader: &mut DiskReader<'_>) -> Result<RowSnapshot, IndexError> {
        let dim = self.dim();
        let mut snapshot = RowSnapshot::default();
        if self.is_empty() {
            return Ok(snapshot);
        }
        let bound = reader.id_bound();
        let mut vectors = Vec::with_capacity(SNAPSHOT_BATCH * dim);
        let mut tids = Vec::with_capacity(SNAPSHOT_BATCH);
        for first in (0..bound).step_by(SNAPSHOT_BATCH) {
            let count = (bound - first).min(SNAPSHOT_BATCH as VertexId);
            vectors.clear();
            tids.clear();
            reader.load_vector_run(first, count as usize, &mut vectors, &mut tids)?;
            for (k, v) in (first..first + count).enumerate() {
                let vector = &vectors[k * dim..(k + 1) * dim];
                // Not a result (never published, deleted, freed): NaN, see load_vector_run.
                if !self.is_live_undeleted(v) || vector.iter().any(|x| x.is_nan()) {
                    continue;
                }
                snapshot.ids.push(v);
                snapshot.tids.push(tids[k]);
                snapshot.vectors.extend_from_slice(vector);
            }
        }
        Ok(snapshot)
    }

    /// How the rows of this index differ from `snapshot`, taken of it earlier. Callers
    /// exclude writers while they act on the answer.
    pub fn rows_changed_since(&self, snapshot: &RowSnapshot) -> RowChanges {
        let table = self.files().indirection();
        let mut changes = RowChanges::default();
        let mut seen: HashMap<VertexId, HeapTid> = HashMap::default();
        seen.reserve(snapshot.ids.len());
        for (&v, &tid) in snapshot.ids.iter().zip(&snapshot.tids) {
            seen.insert(v, tid);
            let still = table
                .entry(v)
                .is_some_and(|e| e.is_live() && !e.is_deleted() && e.tid == tid);
            if !still {
                changes.gone.push(tid);
            }
        }
        let bound = (self.files().state().get(crate::storage::Field::NextVertex) as usize)
            .min(table.capacity()) as VertexId;
        for v in 0..bound {
            let Some(e) = table.entry(v) else { continue };
            if e.is_live() && !e.is_deleted() && seen.get(&v) != Some(&e.tid) {
                changes.added.push(v);
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_step_up_then_stop() {
        assert_eq!(regrow_threshold(0), Some(1));
        assert_eq!(regrow_threshold(1), Some(16));
        assert_eq!(regrow_threshold(15), Some(16));
        assert_eq!(regrow_threshold(16), Some(256));
        assert_eq!(regrow_threshold(256), Some(2048));
        assert_eq!(regrow_threshold(700), Some(5600));
        assert_eq!(
            regrow_threshold(TRAINED_ENOUGH - 1),
            Some(8 * (TRAINED_ENOUGH - 1))
        );
        assert_eq!(regrow_threshold(TRAINED_ENOUGH), None);
    }

    /// Rows of retired builds stay below a seventh of the newest from 2048 rows on.
    #[test]
    fn retired_rows_stay_a_small_share() {
        let mut built = 0usize;
        let mut retired = 0usize;
        while let Some(next) = regrow_threshold(built) {
            retired += built;
            built = next;
            if built >= 2048 {
                assert!(7 * retired <= built, "{retired} retired behind {built}");
            }
        }
        assert!(built >= TRAINED_ENOUGH);
    }
}
