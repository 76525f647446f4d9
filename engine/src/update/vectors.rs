//! The vectors RobustPrune and back-edge admission compare when a list changes after the build.

use crate::distance::Metric;
use crate::index::Index;
use crate::VertexId;
use rustc_hash::FxHashMap as HashMap;

/// PQ reconstructions ("deflated" vectors), `dim` floats each, end to end in one buffer.
///
/// An insert into a full neighbourhood reconstructs thousands of vertices (every member of
/// every list a back-edge is admitted into). One heap vector per reconstruction made the
/// allocator and its frees about 5% of an inserting backend's CPU; one buffer is a few
/// allocations per insert.
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

/// Vectors a prune works with: exact ones the caller adds (an insert: those position seeking
/// loaded, and the new vector), PQ reconstructions for the rest, each made once.
pub(crate) struct VectorCache<'a> {
    index: &'a Index,
    exact: HashMap<VertexId, Vec<f32>>,
    deflated: Deflated,
}

impl<'a> VectorCache<'a> {
    pub(crate) fn new(index: &'a Index) -> Self {
        VectorCache {
            index,
            exact: HashMap::default(),
            deflated: Deflated::default(),
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
        };
        let result = f(&mut cache);
        *kept = cache.deflated;
        result
    }

    /// Makes `vector` the one compared for `id`.
    pub(crate) fn add_exact(&mut self, id: VertexId, vector: &[f32]) {
        self.exact.insert(id, vector.to_vec());
    }

    /// Starts loading the codes of `ids` into the CPU cache: a list's members are scattered
    /// over the code array, and each code is a cache miss that would otherwise wait in turn.
    pub(crate) fn prefetch(&self, ids: &[VertexId]) {
        for &id in ids {
            if let Some(code) = self.index.files().pq_code(id) {
                crate::prefetch::bytes(code);
            }
        }
    }

    /// `id`'s exact vector if the caller added it, else its reconstruction (made once). A
    /// vertex without a code (freed) reconstructs as infinities.
    pub(crate) fn get(&mut self, id: VertexId) -> &[f32] {
        let dim = self.index.dim();
        if !self.exact.contains_key(&id) && !self.deflated.slot.contains_key(&id) {
            let index = self.index;
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
        match self.exact.get(&id) {
            Some(v) => v,
            None => self.deflated.get(id, dim).expect("made above"),
        }
    }

    pub(crate) fn distance(&mut self, metric: Metric, a: VertexId, b: VertexId) -> f32 {
        self.get(a);
        self.get(b);
        let dim = self.index.dim();
        let vector = |id| {
            self.exact
                .get(&id)
                .map(Vec::as_slice)
                .or_else(|| self.deflated.get(id, dim))
                .expect("made above")
        };
        metric.search_distance(vector(a), vector(b))
    }

    /// The distance from `from` to `id`'s vector.
    pub(crate) fn distance_from(&mut self, metric: Metric, from: &[f32], id: VertexId) -> f32 {
        metric.search_distance(from, self.get(id))
    }
}
