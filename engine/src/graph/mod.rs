//! The proximity graph: Vamana build, RobustPrune, in-memory greedy search and the build's
//! memory estimate.
//!
//! * [`admit`]: one new neighbour into a full, pruned list in O(R) distances (inserts).
//! * [`prune`]: RobustPrune, generic over where candidate-to-candidate distances come from
//!   (exact vectors at build time; exact or PQ-reconstructed ones on the insert path).
//! * [`vamana`]: the parallel two-pass in-memory build over full vectors.
//! * [`search`]: best-first search over an in-memory graph, used by the build, by the
//!   entrance graph and by tests.
//! * [`memory`]: what a build will allocate, computed before it starts, and the budget check.

pub mod admit;
pub mod memory;
pub mod prune;
pub mod search;
pub mod sq8;
pub mod vamana;

#[cfg(test)]
pub(crate) mod testutil;

pub use memory::{check_budget, estimate_build_memory, rows_within_budget, BuildMemory};
pub use prune::{robust_prune, ResumablePrune};
pub use search::{greedy_search, search_graph, SearchResult, SearchScratch};
pub use vamana::{build_vamana, BuildControl, BuildError, VamanaParams};

use crate::VertexId;

/// A directed graph over vertices `0..n` with the vertex searches start from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    /// `adjacency[v]` is v's out-neighbour list, closest first when it came from a prune.
    pub adjacency: Vec<Vec<VertexId>>,
    /// The start vertex (the point closest to the centroid). Meaningless when empty.
    pub medoid: VertexId,
}

impl Graph {
    pub fn len(&self) -> usize {
        self.adjacency.len()
    }

    pub fn is_empty(&self) -> bool {
        self.adjacency.is_empty()
    }

    /// v's out-neighbours; empty for an id outside the graph.
    pub fn neighbors(&self, v: VertexId) -> &[VertexId] {
        self.adjacency.get(v as usize).map_or(&[], Vec::as_slice)
    }

    pub fn max_out_degree(&self) -> usize {
        self.adjacency.iter().map(Vec::len).max().unwrap_or(0)
    }

    pub fn edge_count(&self) -> usize {
        self.adjacency.iter().map(Vec::len).sum()
    }

    /// How many vertices a traversal from the medoid can reach (breadth-first).
    pub fn reachable_from_medoid(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut seen = vec![false; self.len()];
        let mut queue = std::collections::VecDeque::new();
        seen[self.medoid as usize] = true;
        queue.push_back(self.medoid);
        let mut count = 1;
        while let Some(v) = queue.pop_front() {
            for &u in self.neighbors(v) {
                if let Some(s) = seen.get_mut(u as usize) {
                    if !*s {
                        *s = true;
                        count += 1;
                        queue.push_back(u);
                    }
                }
            }
        }
        count
    }

    /// Checks the invariants a consumer relies on: ids in range, no self-loops, no
    /// duplicate edges, degree at most `max_degree`, medoid in range when non-empty.
    pub fn validate(&self, max_degree: usize) -> Result<(), String> {
        let n = self.len();
        if n > 0 && self.medoid as usize >= n {
            return Err(format!(
                "medoid {} is outside a graph of {n} vertices",
                self.medoid
            ));
        }
        let mut seen = Vec::new();
        for (v, list) in self.adjacency.iter().enumerate() {
            if list.len() > max_degree {
                return Err(format!(
                    "vertex {v} has {} neighbours, over {max_degree}",
                    list.len()
                ));
            }
            seen.clear();
            seen.extend_from_slice(list);
            seen.sort_unstable();
            if seen.windows(2).any(|w| w[0] == w[1]) {
                return Err(format!("vertex {v} lists a neighbour twice"));
            }
            if let Some(&bad) = list.iter().find(|&&u| u as usize >= n || u as usize == v) {
                return Err(format!("vertex {v} has an invalid neighbour {bad}"));
            }
        }
        Ok(())
    }
}
