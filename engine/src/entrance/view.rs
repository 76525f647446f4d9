//! What any entrance graph offers to read ([`EntranceView`]), and the search and promotion
//! planning written against it, for a process's own graph and the shared one alike.

use crate::distance::Metric;
use crate::graph::prune::robust_prune;
use crate::graph::search::{greedy_search, row, SearchScratch};
use crate::graph::vamana::prune_metric;
use crate::VertexId;

use super::{EntranceError, EntranceGraph, EntrySearch, PromotionPlan, NEW_VERTEX};

/// Read access to an entrance graph, whether it is a process's own [`EntranceGraph`] or the
/// [`shared::SharedEntrance`](super::shared::SharedEntrance) every backend maps: searching and
/// planning promotions work on either. Ids are local (dense `0..len`) unless a method says
/// global.
pub trait EntranceView {
    fn metric(&self) -> Metric;
    fn dim(&self) -> usize;
    fn max_degree(&self) -> usize;
    fn alpha(&self) -> f32;
    /// Members (published ones, for a shared graph).
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Local id searches start from.
    fn start(&self) -> u32;
    fn global_id(&self, local: u32) -> VertexId;
    fn local_id(&self, global: VertexId) -> Option<u32>;
    fn local_vector(&self, local: u32) -> &[f32];
    /// Appends the neighbours of `local` to `out`.
    fn local_list(&self, local: u32, out: &mut Vec<u32>);
}

/// Entry points for `query` in any entrance graph: the `list` closest members found (global
/// ids, closest first; those for which `is_live` is false are left out unless none of them
/// is live), the explored set E_ent (global ids with exact distances, closest first), and the
/// distances computed.
pub fn search_view<G: EntranceView + ?Sized>(
    graph: &G,
    query: &[f32],
    list: usize,
    is_live: impl Fn(VertexId) -> bool,
) -> Result<(EntrySearch, usize), EntranceError> {
    if query.len() != graph.dim() {
        return Err(EntranceError::Invalid(format!(
            "query has {} dimensions, the entrance graph {}",
            query.len(),
            graph.dim()
        )));
    }
    let n = graph.len();
    if n == 0 || list == 0 {
        return Ok(((Vec::new(), Vec::new()), 0));
    }
    let metric = graph.metric();
    let mut scratch = SearchScratch::new(n);
    greedy_search(
        &[graph.start()],
        list,
        &mut scratch,
        // A shared graph may have grown since `n` was read: members beyond it are skipped.
        |v, out| {
            let at = out.len();
            graph.local_list(v, out);
            let mut i = at;
            while i < out.len() {
                if out[i] as usize >= n {
                    out.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        },
        |v| metric.search_distance(query, graph.local_vector(v)),
    );
    let nearest: Vec<VertexId> = scratch
        .top(list)
        .into_iter()
        .map(|(l, _)| graph.global_id(l))
        .collect();
    let live: Vec<VertexId> = nearest.iter().copied().filter(|&g| is_live(g)).collect();
    // When every nearby member is deleted (a table deleted down to a few rows), start from
    // them anyway: deleted members are kept while they are entry points and still route, and
    // the medoid alone (the caller's fallback for no entry points) can be far from the few
    // live vertices that are left, or have no path to them.
    let entry = if live.is_empty() { nearest } else { live };
    let mut explored: Vec<(VertexId, f32)> = scratch
        .explored
        .iter()
        .map(|&(l, d)| (graph.global_id(l), d))
        .collect();
    explored.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    Ok(((entry, explored), scratch.distance_computations))
}

/// Computes a promotion of `vertex` into any entrance graph without changing it (see
/// [`EntranceGraph::plan_promotion`]).
pub fn plan_view<G: EntranceView + ?Sized>(
    graph: &G,
    vertex: VertexId,
    vector: &[f32],
    e_ent: &[VertexId],
    e_pos: &[VertexId],
) -> Result<PromotionPlan, EntranceError> {
    check_new_vertex(graph, vertex, vector)?;
    let neighbors = choose_neighbors(graph, vector, e_ent, e_pos);
    let updates = neighbors
        .iter()
        .map(|&p| (p, list_with_new(graph, p, vector)))
        .collect();
    Ok(PromotionPlan {
        vertex,
        vector: vector.to_vec(),
        neighbors,
        updates,
    })
}

pub(super) fn check_new_vertex<G: EntranceView + ?Sized>(
    graph: &G,
    vertex: VertexId,
    vector: &[f32],
) -> Result<(), EntranceError> {
    if vector.len() != graph.dim() {
        return Err(EntranceError::Invalid(format!(
            "vector has {} dimensions, the entrance graph {}",
            vector.len(),
            graph.dim()
        )));
    }
    crate::vector::validate(vector).map_err(|e| EntranceError::Invalid(e.to_string()))?;
    if graph.local_id(vertex).is_some() {
        return Err(EntranceError::Invalid(format!(
            "vertex {vertex} is already a member"
        )));
    }
    if graph.len() >= NEW_VERTEX as usize {
        return Err(EntranceError::Invalid("the entrance graph is full".into()));
    }
    Ok(())
}

/// N_ent: E_inter by exact distance, then E_ent in its order, at most R_ent, no repeats.
fn choose_neighbors<G: EntranceView + ?Sized>(
    graph: &G,
    vector: &[f32],
    e_ent: &[VertexId],
    e_pos: &[VertexId],
) -> Vec<u32> {
    let metric = graph.metric();
    let mut inter: Vec<(u32, f32)> = e_pos
        .iter()
        .filter_map(|&g| graph.local_id(g))
        .map(|l| (l, metric.search_distance(graph.local_vector(l), vector)))
        .collect();
    inter.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    inter.dedup_by_key(|c| c.0);
    let mut chosen: Vec<u32> = inter
        .into_iter()
        .map(|c| c.0)
        .take(graph.max_degree())
        .collect();
    for l in e_ent.iter().filter_map(|&g| graph.local_id(g)) {
        if chosen.len() >= graph.max_degree() {
            break;
        }
        if !chosen.contains(&l) {
            chosen.push(l);
        }
    }
    chosen
}

/// p's list with the new vertex appended, pruned to R_ent if that overflows it.
fn list_with_new<G: EntranceView + ?Sized>(graph: &G, p: u32, vector: &[f32]) -> Vec<u32> {
    let mut list = Vec::new();
    graph.local_list(p, &mut list);
    if list.contains(&NEW_VERTEX) {
        return list;
    }
    list.push(NEW_VERTEX);
    if list.len() <= graph.max_degree() {
        return list;
    }
    let vec_of = |l: u32| {
        if l == NEW_VERTEX {
            vector
        } else {
            graph.local_vector(l)
        }
    };
    let p_vec = graph.local_vector(p);
    // The same prune distance as the build (L2 geometry for inner product).
    let metric = prune_metric(graph.metric());
    let mut pool: Vec<(VertexId, f32)> = list
        .iter()
        .map(|&u| (u, metric.search_distance(p_vec, vec_of(u))))
        .collect();
    robust_prune(&mut pool, graph.alpha(), graph.max_degree(), |a, b| {
        metric.search_distance(vec_of(a), vec_of(b))
    })
}

impl EntranceView for EntranceGraph {
    fn metric(&self) -> Metric {
        self.metric
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn max_degree(&self) -> usize {
        self.max_degree
    }
    fn alpha(&self) -> f32 {
        self.alpha
    }
    fn len(&self) -> usize {
        self.ids.len()
    }
    fn start(&self) -> u32 {
        self.start
    }
    fn global_id(&self, local: u32) -> VertexId {
        self.ids[local as usize]
    }
    fn local_id(&self, global: VertexId) -> Option<u32> {
        self.local.get(&global).copied()
    }
    fn local_vector(&self, local: u32) -> &[f32] {
        row(&self.vectors, self.dim, local)
    }
    fn local_list(&self, local: u32, out: &mut Vec<u32>) {
        out.extend_from_slice(&self.adjacency[local as usize]);
    }
}
