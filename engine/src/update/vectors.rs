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

    /// A cache that starts with the reconstructions `deflated` (kept by a caller across
    /// calls, [`Self::into_deflated`]).
    pub(crate) fn with_deflated(index: &'a Index, deflated: HashMap<VertexId, Vec<f32>>) -> Self {
        VectorCache {
            index,
            exact: HashMap::default(),
            deflated,
        }
    }

    pub(crate) fn into_deflated(self) -> HashMap<VertexId, Vec<f32>> {
        self.deflated
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
