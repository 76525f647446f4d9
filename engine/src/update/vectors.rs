//! The vectors RobustPrune compares when a list changes after the build.

use crate::distance::Metric;
use crate::index::Index;
use crate::VertexId;
use rustc_hash::FxHashMap as HashMap;

/// Vectors a prune works with: exact ones the caller adds (an insert: those position seeking
/// loaded, and the new vector), PQ reconstructions for the rest, each computed once.
pub(crate) struct VectorCache<'a> {
    index: &'a Index,
    pub(crate) exact: HashMap<VertexId, Vec<f32>>,
    deflated: HashMap<VertexId, Vec<f32>>,
}

impl<'a> VectorCache<'a> {
    pub(crate) fn new(index: &'a Index) -> Self {
        VectorCache {
            index,
            exact: HashMap::default(),
            deflated: HashMap::default(),
        }
    }

    /// Runs `f` with a cache that starts with the reconstructions in `kept` and leaves them
    /// there, with the ones `f` added, for the caller's next call (a task run in slices).
    pub(crate) fn resuming<R>(
        index: &'a Index,
        kept: &mut HashMap<VertexId, Vec<f32>>,
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

    pub(crate) fn get(&mut self, id: VertexId) -> &[f32] {
        self.ensure(id);
        self.peek(id)
    }

    fn ensure(&mut self, id: VertexId) {
        if self.exact.contains_key(&id) || self.deflated.contains_key(&id) {
            return;
        }
        let index = self.index;
        let v = match index.files().pq_code(id) {
            Some(code) => index.pq().reconstruct(code),
            None => vec![f32::INFINITY; index.dim()],
        };
        self.deflated.insert(id, v);
    }

    fn peek(&self, id: VertexId) -> &[f32] {
        self.exact
            .get(&id)
            .or_else(|| self.deflated.get(&id))
            .expect("ensured")
    }

    pub(crate) fn distance(&mut self, metric: Metric, a: VertexId, b: VertexId) -> f32 {
        self.ensure(a);
        self.ensure(b);
        metric.search_distance(self.peek(a), self.peek(b))
    }
}
