//! The first pass: the NAVIS search itself (entry points, traversal, CASR rerank), which
//! returns the exact top-`k` of what it explored.

use rustc_hash::FxHashSet as HashSet;
use std::io;

use super::{check_loaded, IndexSource, SearchCursor, SearchHit};
use crate::casr::{self, RerankPolicy};
use crate::distance::Metric;
use crate::search::CasrMode;
use crate::VertexId;

impl<S: IndexSource> SearchCursor<'_, S> {
    /// The NAVIS search: seed, traverse, rerank (CASR), return the exact top-`k`.
    pub(super) fn first_pass(&mut self) -> io::Result<()> {
        self.seed()?;
        self.traverse()?;
        self.counters.visited = self.visited.len() as u64;
        let metric = self.source.metric();
        let mut scored: Vec<(VertexId, f32)> = if self.params.packed {
            self.rerank_packed(metric)
        } else {
            self.rerank_casr(metric)?
        };
        casr::sort_by_distance(&mut scored);
        self.ranked = scored
            .iter()
            .filter(|s| !s.1.is_nan())
            .take(self.params.keep_ranked)
            .copied()
            .collect();
        let dim = self.query.len();
        let mut returned = HashSet::default();
        for &(id, distance) in scored.iter().take(self.pass_k) {
            if distance.is_nan() {
                continue; // the vertex vanished while this search ran (load_vectors)
            }
            let (_, tid) = self
                .loaded
                .get(id, dim)
                .expect("reranked vectors are loaded");
            self.emit(SearchHit { id, distance, tid });
            returned.insert(id);
        }
        for c in &mut self.list.items {
            c.finished |= returned.contains(&c.id);
        }
        Ok(())
    }

    fn seed(&mut self) -> io::Result<()> {
        let entries = if self.params.use_entrance {
            let mut e =
                self.source
                    .entry_points(&self.query, self.params.entry_list, &mut self.counters);
            if e.is_empty() {
                e.push(self.source.medoid());
            }
            e
        } else {
            vec![self.source.medoid()]
        };
        for &v in &entries {
            self.score(v);
        }
        self.entry_points = entries;
        Ok(())
    }

    /// Packed layout: every expanded vertex's vector is already here; rank them all.
    fn rerank_packed(&mut self, metric: Metric) -> Vec<(VertexId, f32)> {
        let dim = self.query.len();
        self.counters.reranks += 1;
        self.counters.explored_set += self.loaded.len() as u64;
        let mut out = Vec::with_capacity(self.loaded.len());
        for (&id, &slot) in &self.loaded.slot {
            if self.is_deleted(id) {
                continue;
            }
            let v = &self.loaded.data[slot * dim..(slot + 1) * dim];
            out.push((id, metric.search_distance(&self.query, v)));
            self.counters.exact_distances += 1;
        }
        out
    }

    fn rerank_casr(&mut self, metric: Metric) -> io::Result<Vec<(VertexId, f32)>> {
        let dim = self.query.len();
        let sorted: Vec<VertexId> = self
            .list
            .items
            .iter()
            .map(|c| c.id)
            .filter(|&id| !self.is_deleted(id))
            .collect();
        let policy = match self.params.casr {
            CasrMode::Window(w) => RerankPolicy::Window(w),
            CasrMode::Off => RerankPolicy::All,
        };
        let k = self.pass_k.min(sorted.len()).max(1);
        let window = match policy {
            RerankPolicy::Window(w) if self.params.read_rerank_tail => w,
            _ => 0,
        };
        let source = &mut *self.source;
        let loaded = &mut self.loaded;
        let counters = &mut self.counters;
        // CASR asks for contiguous runs of `sorted`; `asked` is where the next one starts.
        let mut asked = 0;
        let mut loader = |ids: &[VertexId], out: &mut Vec<f32>| -> io::Result<()> {
            asked += ids.len();
            let mut missing: Vec<VertexId> = ids
                .iter()
                .copied()
                .filter(|&id| loaded.get(id, dim).is_none())
                .collect();
            // At most w / 2 candidates left behind this batch: one more change of the top-K
            // would ask for all of them, and out of memory that is a device round trip for
            // one or two vectors (with L = 16, K = 10, w = 5: the 16th alone, in 80% of
            // queries). Read them with this batch instead. A longer tail is left to CASR:
            // absorbing up to w - 1 cost more reads than the round trips it saved (L = 20:
            // 1.6 more loads per query for 0.2 fewer batches).
            let rest = sorted.len().saturating_sub(asked);
            if rest > 0 && rest <= window / 2 {
                missing.extend(
                    sorted[asked..]
                        .iter()
                        .copied()
                        .filter(|&id| loaded.get(id, dim).is_none()),
                );
            }
            if !missing.is_empty() {
                let mut vectors = Vec::with_capacity(missing.len() * dim);
                let mut tids = Vec::with_capacity(missing.len());
                let bytes = source.load_vectors(&missing, &mut vectors, &mut tids)?;
                check_loaded(&missing, dim, &vectors, &tids)?;
                counters.rerank_vector_loads += missing.len() as u64;
                counters.bytes_read += bytes;
                counters.read_batches += 1;
                loaded.insert_batch(&missing, &vectors, &tids);
            }
            for &id in ids {
                out.extend_from_slice(loaded.get(id, dim).expect("just loaded").0);
            }
            Ok(())
        };
        let result = casr::rerank(&self.query, metric, &sorted, k, policy, &mut loader)?;
        self.counters.reranks += 1;
        self.counters.explored_set += sorted.len() as u64;
        self.counters.casr_window_sum += result.window as u64;
        self.counters.exact_distances += result.loads() as u64;
        if self.passes == 1 && policy == RerankPolicy::All && result.loads() > 0 {
            self.first_min_window = Some(result.min_safe_window());
        }
        Ok(result.scored)
    }
}
