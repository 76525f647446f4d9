//! Greedy (best-first) search over an in-memory graph, as in DiskANN's `GreedySearch`.
//!
//! The search keeps the `list_size` closest vertices seen so far, repeatedly expands the
//! closest one not yet expanded, and stops when every listed vertex has been expanded.
//! It is generic over where neighbour lists and distances come from, so the Vamana build
//! (lists behind locks, exact vectors), the entrance graph and the tests share one
//! implementation. The on-disk traversal with PQ distances lives in `crate::search`.

use super::Graph;
use crate::distance::Metric;
use crate::VertexId;

/// One entry of the candidate list.
#[derive(Copy, Clone, Debug)]
struct Candidate {
    id: VertexId,
    dist: f32,
    expanded: bool,
}

/// The `capacity` closest candidates seen so far, sorted by (distance, id), with a cursor
/// at the first one not yet expanded (DiskANN's `NeighborPriorityQueue`).
#[derive(Debug, Default)]
struct CandidateList {
    items: Vec<Candidate>,
    capacity: usize,
    cursor: usize,
}

impl CandidateList {
    fn reset(&mut self, capacity: usize) {
        self.items.clear();
        self.items.reserve(capacity + 1);
        self.capacity = capacity;
        self.cursor = 0;
    }

    fn insert(&mut self, id: VertexId, dist: f32) {
        let before = |c: &Candidate| c.dist.total_cmp(&dist).then(c.id.cmp(&id)).is_lt();
        if self.items.len() >= self.capacity {
            match self.items.last() {
                Some(worst) if before(worst) => return,
                None => return,
                Some(_) => {}
            }
        }
        let pos = self.items.partition_point(before);
        self.items.insert(
            pos,
            Candidate {
                id,
                dist,
                expanded: false,
            },
        );
        self.items.truncate(self.capacity);
        self.cursor = self.cursor.min(pos);
    }

    fn next_unexpanded(&mut self) -> Option<(VertexId, f32)> {
        while let Some(c) = self.items.get_mut(self.cursor) {
            self.cursor += 1;
            if !c.expanded {
                c.expanded = true;
                return Some((c.id, c.dist));
            }
        }
        None
    }
}

/// A set of vertex ids in `0..n` that can be emptied in time proportional to its size:
/// a bitmap plus the list of words that were touched.
#[derive(Debug, Default)]
pub struct VisitedSet {
    bits: Vec<u64>,
    touched: Vec<u32>,
}

impl VisitedSet {
    pub fn new(n: usize) -> VisitedSet {
        VisitedSet {
            bits: vec![0; n.div_ceil(64)],
            touched: Vec::new(),
        }
    }

    /// Makes room for ids below `n` (keeps current members).
    pub fn ensure(&mut self, n: usize) {
        let words = n.div_ceil(64);
        if self.bits.len() < words {
            self.bits.resize(words, 0);
        }
    }

    /// Adds `v`; returns whether it was new. Ids outside the set's range count as visited,
    /// so a corrupt neighbour id is skipped instead of indexing out of bounds.
    pub fn insert(&mut self, v: VertexId) -> bool {
        let word = (v / 64) as usize;
        let mask = 1u64 << (v % 64);
        let Some(w) = self.bits.get_mut(word) else {
            return false;
        };
        if *w & mask != 0 {
            return false;
        }
        if *w == 0 {
            self.touched.push(word as u32);
        }
        *w |= mask;
        true
    }

    pub fn clear(&mut self) {
        for &w in &self.touched {
            self.bits[w as usize] = 0;
        }
        self.touched.clear();
    }

    /// Heap bytes held, for the memory estimate test.
    pub fn heap_bytes(&self) -> usize {
        self.bits.capacity() * 8 + self.touched.capacity() * 4
    }
}

/// Reusable state of one search; one per thread.
#[derive(Debug, Default)]
pub struct SearchScratch {
    visited: VisitedSet,
    list: CandidateList,
    /// Expanded vertices with their distance to the query, in expansion order.
    pub explored: Vec<(VertexId, f32)>,
    neighbors: Vec<VertexId>,
    /// Distances computed by the last search.
    pub distance_computations: usize,
}

impl SearchScratch {
    /// Scratch for graphs of up to `n` vertices.
    pub fn new(n: usize) -> SearchScratch {
        SearchScratch {
            visited: VisitedSet::new(n),
            ..Default::default()
        }
    }

    /// The closest `k` vertices the last search listed, closest first.
    pub fn top(&self, k: usize) -> Vec<(VertexId, f32)> {
        self.list
            .items
            .iter()
            .take(k)
            .map(|c| (c.id, c.dist))
            .collect()
    }

    /// Heap bytes held, for the memory estimate test.
    pub fn heap_bytes(&self) -> usize {
        self.visited.heap_bytes()
            + self.list.items.capacity() * std::mem::size_of::<Candidate>()
            + self.explored.capacity() * std::mem::size_of::<(VertexId, f32)>()
            + self.neighbors.capacity() * std::mem::size_of::<VertexId>()
    }
}

/// Best-first search from `entry` keeping `list_size` candidates. `neighbors_of(v, out)`
/// fills `out` with v's out-neighbours (it is cleared first); `distance(v)` is the distance
/// from the query to `v`. Results are left in `scratch` ([`SearchScratch::top`],
/// [`SearchScratch::explored`]). Ids must be below the `n` the scratch was made for;
/// larger ones are ignored.
pub fn greedy_search(
    entry: &[VertexId],
    list_size: usize,
    scratch: &mut SearchScratch,
    neighbors_of: impl FnMut(VertexId, &mut Vec<VertexId>),
    distance: impl FnMut(VertexId) -> f32,
) {
    greedy_search_prefetching(entry, list_size, scratch, neighbors_of, |_| {}, distance);
}

/// How many rows ahead of the distance being computed [`greedy_search_prefetching`] (and
/// the build's prunes) keep prefetches in flight. Announcing a whole expansion's new
/// neighbours at once (25-30 rows of 6-13 cache lines) asks for more misses than the core
/// can track, and the ones it drops are waited for later; a short pipeline keeps the
/// misses overlapped without overflowing. Measured on one-thread builds (R = 64, L = 100;
/// benchmarks/results/engine.md): MiniLM-100K graph 64-67 s with the whole batch, 44-46 s
/// at 4 or 8 ahead; Fashion-MNIST 15.2 s against 12.1 s at 2 or 4, 14.9 s at 16; GloVe-50
/// (one cache line per row) 20.0 s against 20.4 s at 4, 23.8 s at 2.
pub const PREFETCH_AHEAD: usize = 4;

/// [`greedy_search`] that calls `prefetch(u)` for the new neighbours of an expanded vertex
/// [`PREFETCH_AHEAD`] rows before their distances are computed. Vectors of a large graph
/// are read from memory at random, so computing distances one by one without a prefetch
/// waits for one cache miss after another.
pub fn greedy_search_prefetching(
    entry: &[VertexId],
    list_size: usize,
    scratch: &mut SearchScratch,
    mut neighbors_of: impl FnMut(VertexId, &mut Vec<VertexId>),
    mut prefetch: impl FnMut(VertexId),
    mut distance: impl FnMut(VertexId) -> f32,
) {
    scratch.visited.clear();
    scratch.list.reset(list_size.max(1));
    scratch.explored.clear();
    scratch.distance_computations = 0;
    for &e in entry {
        if scratch.visited.insert(e) {
            scratch.list.insert(e, distance(e));
            scratch.distance_computations += 1;
        }
    }
    let mut buf = std::mem::take(&mut scratch.neighbors);
    while let Some((v, d)) = scratch.list.next_unexpanded() {
        scratch.explored.push((v, d));
        buf.clear();
        neighbors_of(v, &mut buf);
        buf.retain(|&u| scratch.visited.insert(u));
        buf.iter().take(PREFETCH_AHEAD).for_each(|&u| prefetch(u));
        for (i, &u) in buf.iter().enumerate() {
            if let Some(&next) = buf.get(i + PREFETCH_AHEAD) {
                prefetch(next);
            }
            scratch.list.insert(u, distance(u));
        }
        scratch.distance_computations += buf.len();
    }
    scratch.neighbors = buf;
}

/// What [`search_graph`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchResult {
    /// The `k` closest vertices found, closest first, with their distances.
    pub top: Vec<(VertexId, f32)>,
    /// Every expanded vertex with its distance, in expansion order.
    pub explored: Vec<(VertexId, f32)>,
    pub distance_computations: usize,
}

/// Searches `graph` over the full vectors `data` (row-major, `dim` wide) from its medoid.
pub fn search_graph(
    graph: &Graph,
    data: &[f32],
    dim: usize,
    metric: Metric,
    query: &[f32],
    k: usize,
    list_size: usize,
) -> Result<SearchResult, String> {
    let n = graph.len();
    if dim == 0 || data.len() != n * dim {
        return Err(format!(
            "graph has {n} vertices but the vector data holds {} floats for dimension {dim}",
            data.len()
        ));
    }
    if query.len() != dim {
        return Err(format!(
            "query has {} dimensions, the graph {dim}",
            query.len()
        ));
    }
    if n == 0 || k == 0 {
        return Ok(SearchResult {
            top: Vec::new(),
            explored: Vec::new(),
            distance_computations: 0,
        });
    }
    let mut scratch = SearchScratch::new(n);
    greedy_search(
        &[graph.medoid],
        list_size.max(k),
        &mut scratch,
        |v, out| out.extend_from_slice(graph.neighbors(v)),
        |v| metric.search_distance(query, row(data, dim, v)),
    );
    Ok(SearchResult {
        top: scratch.top(k),
        explored: std::mem::take(&mut scratch.explored),
        distance_computations: scratch.distance_computations,
    })
}

/// Vertex `v`'s vector in a row-major array.
#[inline]
pub fn row(data: &[f32], dim: usize, v: VertexId) -> &[f32] {
    let start = v as usize * dim;
    &data[start..start + dim]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidate_list_keeps_the_closest_in_order() {
        let mut l = CandidateList::default();
        l.reset(3);
        for (id, d) in [(1, 5.0), (2, 1.0), (3, 3.0), (4, 4.0), (5, 0.5), (6, 9.0)] {
            l.insert(id, d);
        }
        let ids: Vec<_> = l.items.iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![5, 2, 3]);
        assert_eq!(l.next_unexpanded(), Some((5, 0.5)));
        l.insert(7, 0.1);
        // A closer arrival moves the cursor back.
        assert_eq!(l.next_unexpanded(), Some((7, 0.1)));
        assert_eq!(l.next_unexpanded(), Some((2, 1.0)));
        assert_eq!(l.next_unexpanded(), None);
    }

    #[test]
    fn visited_set_clears_and_rejects_out_of_range() {
        let mut v = VisitedSet::new(130);
        assert!(v.insert(0));
        assert!(!v.insert(0));
        assert!(v.insert(129));
        assert!(!v.insert(200), "out of range counts as visited");
        v.clear();
        assert!(v.insert(0));
        assert!(v.insert(129));
    }

    #[test]
    fn greedy_search_on_a_path_finds_the_far_end() {
        // 1-d points 0..10 on a path graph; the query at 9.2 must walk the whole path.
        let n = 10;
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let adjacency: Vec<Vec<VertexId>> = (0..n as u32)
            .map(|i| {
                let mut v = Vec::new();
                if i > 0 {
                    v.push(i - 1);
                }
                if i + 1 < n as u32 {
                    v.push(i + 1);
                }
                v
            })
            .collect();
        let g = Graph {
            adjacency,
            medoid: 0,
        };
        let r = search_graph(&g, &data, 1, Metric::L2, &[9.2], 2, 2).unwrap();
        let ids: Vec<_> = r.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![9, 8]);
        assert_eq!(r.explored.len(), 10);
        assert_eq!(r.distance_computations, 10);
        assert!(search_graph(&g, &data, 1, Metric::L2, &[1.0, 2.0], 2, 2).is_err());
        assert!(search_graph(&g, &data[..3], 1, Metric::L2, &[1.0], 2, 2).is_err());
    }
}
