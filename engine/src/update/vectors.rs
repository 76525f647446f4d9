//! The vectors RobustPrune and back-edge admission compare when a list changes after the build.

use crate::distance::Metric;
use crate::index::Index;
use crate::pq::QueryTable;
use crate::VertexId;
use rustc_hash::FxHashMap as HashMap;

/// PQ reconstructions ("deflated" vectors), `dim` floats each, end to end in one buffer.
///
/// Reconstructed are the vertices compared without a table on either side: the candidates of
/// the new vertex's own prune (about `navis.insert_list` per insert), list owners, and a
/// repair's pool. One heap vector per reconstruction made the allocator and its frees about 5%
/// of an inserting backend's CPU when every list member was reconstructed; one buffer is a few
/// allocations.
#[derive(Debug, Default)]
pub(crate) struct Deflated {
    slot: HashMap<VertexId, u32>,
    data: Vec<f32>,
}

impl Deflated {
    fn get(&self, id: VertexId, dim: usize) -> Option<&[f32]> {
        self.slot.get(&id).map(|&i| {
            let at = i as usize * dim;
            &self.data[at..at + dim]
        })
    }
}

/// ADC tables kept at once: the vertex being admitted into lists (one per insert) and the
/// list owner whose members are being measured; a few more spare rebuilding a table when
/// tasks alternate between new vertices. One table is `pq_bytes` × 1 KiB.
const MAX_TABLES: usize = 4;

/// Vectors a prune works with: exact ones the caller adds (an insert: those position seeking
/// loaded, and the new vector), PQ reconstructions for the rest, each made once.
///
/// A vertex compared with many others that have only codes gets an ADC table
/// ([`VectorCache::with_table`]): admission compares a list's owner with each of its ~R
/// members, and the new vertex with the members of every list it enters. Reconstructing each
/// member was the largest part of an insert's CPU (perf of a PostgreSQL backend, 180K
/// MiniLM: `VectorCache::get` 18%, most of it cache misses on centroids); a table costs one
/// pass over the codebook and then a lookup per subspace.
pub(crate) struct VectorCache<'a> {
    index: &'a Index,
    exact: HashMap<VertexId, Vec<f32>>,
    deflated: Deflated,
    /// Most recently asked for last.
    tables: Vec<(VertexId, Metric, QueryTable)>,
}

impl<'a> VectorCache<'a> {
    pub(crate) fn new(index: &'a Index) -> Self {
        VectorCache {
            index,
            exact: HashMap::default(),
            deflated: Deflated::default(),
            tables: Vec::new(),
        }
    }

    /// Runs `f` with a cache that starts with the reconstructions in `kept` and leaves them
    /// there, with the ones `f` added, for the caller's next call (a task run in slices).
    pub(crate) fn resuming<R>(
        index: &'a Index,
        kept: &mut Deflated,
        f: impl FnOnce(&mut VectorCache<'a>) -> R,
    ) -> R {
        let mut cache = VectorCache {
            index,
            exact: HashMap::default(),
            deflated: std::mem::take(kept),
            tables: Vec::new(),
        };
        let result = f(&mut cache);
        *kept = cache.deflated;
        result
    }

    /// Makes `vector` the one compared for `id`.
    pub(crate) fn add_exact(&mut self, id: VertexId, vector: &[f32]) {
        self.exact.insert(id, vector.to_vec());
    }

    /// Starts loading the codes and indirection entries of `ids` into the CPU cache: a list's
    /// members are scattered over both arrays, and each is a cache miss that would otherwise
    /// wait in turn.
    pub(crate) fn prefetch(&self, ids: &[VertexId]) {
        let files = self.index.files();
        for &id in ids {
            // The entry too: callers check that each is live (perf: that load was 70% of
            // the admission pool's own time before it was prefetched).
            files.indirection().prefetch(id);
            if let Some(code) = files.pq_code(id) {
                crate::prefetch::bytes(code);
            }
        }
    }

    /// `id`'s exact vector if the caller added it, else its reconstruction (made once). A
    /// vertex without a code (freed) reconstructs as infinities.
    pub(crate) fn get(&mut self, id: VertexId) -> &[f32] {
        if self.stored(id).is_none() {
            let (index, dim) = (self.index, self.index.dim());
            let at = self.deflated.data.len();
            self.deflated.data.resize(at + dim, f32::INFINITY);
            if let Some(code) = index.files().pq_code(id) {
                index
                    .pq()
                    .reconstruct_into(code, &mut self.deflated.data[at..at + dim]);
            }
            let slot = u32::try_from(at / dim).expect("fewer than 2^32 reconstructions");
            self.deflated.slot.insert(id, slot);
        }
        self.stored(id).expect("made above")
    }

    /// `id`'s exact vector or its reconstruction, if either is at hand.
    fn stored(&self, id: VertexId) -> Option<&[f32]> {
        self.exact
            .get(&id)
            .map(Vec::as_slice)
            .or_else(|| self.deflated.get(id, self.index.dim()))
    }

    /// Builds (once) the ADC table of `id`'s vector under `metric`, so that distances from
    /// `id` to vertices known only by their codes are table lookups.
    pub(crate) fn with_table(&mut self, metric: Metric, id: VertexId) {
        if let Some(at) = self.table_position(metric, id) {
            // Least recently asked for is evicted first.
            let entry = self.tables.remove(at);
            self.tables.push(entry);
            return;
        }
        let vector = self.get(id).to_vec();
        let mut table = match self.tables.len() {
            n if n >= MAX_TABLES => self.tables.remove(0).2,
            _ => QueryTable::new(),
        };
        self.index.pq().table_under(metric, &vector, &mut table);
        self.tables.push((id, metric, table));
    }

    fn table_position(&self, metric: Metric, id: VertexId) -> Option<usize> {
        self.tables
            .iter()
            .position(|(t, m, _)| *t == id && *m == metric)
    }

    /// The distance from a vertex with a table to `other`: exact when both vectors are at
    /// hand, else from `other`'s code (the distance to its reconstruction, as before).
    fn distance_by_table(
        &self,
        metric: Metric,
        with_table: VertexId,
        other: VertexId,
    ) -> Option<f32> {
        let (_, _, table) = &self.tables[self.table_position(metric, with_table)?];
        if self.stored(other).is_some() {
            return None;
        }
        Some(match self.index.files().pq_code(other) {
            Some(code) => table.distance(code),
            None => f32::INFINITY,
        })
    }

    pub(crate) fn distance(&mut self, metric: Metric, a: VertexId, b: VertexId) -> f32 {
        if !self.tables.is_empty() {
            if let Some(d) = self.distance_by_table(metric, a, b) {
                return d;
            }
            if let Some(d) = self.distance_by_table(metric, b, a) {
                return d;
            }
        }
        self.get(a);
        self.get(b);
        let vector = |id| self.stored(id).expect("made above");
        metric.search_distance(vector(a), vector(b))
    }

    /// The distance from `from` to `id`'s vector.
    pub(crate) fn distance_from(&mut self, metric: Metric, from: &[f32], id: VertexId) -> f32 {
        metric.search_distance(from, self.get(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{build_index, BuildPhase, IndexParams};
    use crate::storage::HeapTid;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn distances_by_table_match_distances_to_reconstructions() {
        let (n, dim) = (400, 24);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let data: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let tids: Vec<HeapTid> = (0..n as u32)
            .map(|i| HeapTid {
                block: i,
                offset: 1,
            })
            .collect();
        for metric in [Metric::L2, Metric::InnerProduct, Metric::L1] {
            let tmp = tempfile::tempdir().unwrap();
            let params = IndexParams {
                metric,
                max_degree: 16,
                build_list: 32,
                pq_bytes: Some(6),
                threads: 1,
                ..IndexParams::default()
            };
            build_index(
                tmp.path(),
                &data,
                &tids,
                &params,
                &|_: BuildPhase, _, _| {},
                &|| false,
            )
            .unwrap();
            let index = Index::open(tmp.path()).unwrap();
            let prune = crate::graph::vamana::prune_metric(metric);
            let exact: Vec<f32> = (0..dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let (new, owner) = (n as VertexId + 7, 5);

            // From the new vertex and from the owner to every other member; the tabled cache
            // is asked with the new vertex second, so a table serves either side of a pair.
            let members = |cache: &mut VectorCache, new_first: bool| -> Vec<(f32, f32)> {
                (0..n as VertexId)
                    .filter(|&m| m != owner)
                    .map(|m| {
                        let (a, b) = if new_first { (new, m) } else { (m, new) };
                        (cache.distance(prune, a, b), cache.distance(prune, owner, m))
                    })
                    .collect()
            };
            let mut plain = VectorCache::new(&index);
            plain.add_exact(new, &exact);
            let expected = members(&mut plain, true);

            let mut tabled = VectorCache::new(&index);
            tabled.add_exact(new, &exact);
            tabled.with_table(prune, new);
            tabled.with_table(prune, owner);
            let got = members(&mut tabled, false);
            assert!(
                tabled.deflated.slot.len() <= 1,
                "members were not reconstructed"
            );
            for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
                for (x, y) in [(e.0, g.0), (e.1, g.1)] {
                    assert!(
                        (x - y).abs() <= 1e-4 * x.abs().max(1.0),
                        "{metric:?} member {i}: table {y}, reconstruction {x}"
                    );
                }
            }
        }
    }
}
