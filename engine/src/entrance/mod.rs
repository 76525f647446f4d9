//! The NAVIS entrance graph (digest §1.1, §1.5, §1.9): a small in-memory Vamana graph over
//! a seeded sample of about `r_ent` = 1% of the vertices, with their full vectors, that
//! gives every search and insert its entry points.
//!
//! * Built with R_ent = 32 and L = 64 over the sample (release `--ent-R 32 --ent-L 64`).
//! * [`EntranceGraph::search`] walks it with exact distances and a list of 10 (`mem-L`)
//!   and returns the closest vertices as entry points, in *global* vertex ids, plus the
//!   explored set E_ent that an insert later reuses.
//! * NAVIS-Update (Algorithm 2): while `|G_ent| < r_ent |G|` a newly inserted vertex is
//!   promoted. Its neighbours are E_inter = E_pos ∩ G_ent first (vertices the on-disk
//!   traversal met that are already in the entrance graph; "typically closer"), then the
//!   best of E_ent, up to R_ent; each such neighbour gets a back edge, pruned to R_ent when
//!   its list overflows. The work is split into [`EntranceGraph::plan_promotion`], which
//!   only reads the graph and does every distance computation and prune, and
//!   [`EntranceGraph::apply_promotion`], which only swaps lists in, so a shared graph can
//!   run the plan under a read lock and hold the write lock (the paper's `Lock(G_ent)`)
//!   for the apply alone. Two promotions planned concurrently that touch the same
//!   neighbour keep the list of the one applied last (the paper accepts this).
//!
//! Vertices are only ever added, never removed, so a local id stays valid between plan and
//! apply. Deleted vertices stay traversable; [`EntranceGraph::search_live`] keeps them out
//! of the entry points while any of the nearest members is live.
//!
//! For `Metric::Cosine` every vector handed in must already be unit length, as the index
//! stores them.

use std::collections::HashMap;
use std::fmt;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::distance::Metric;
use crate::graph::search::row;
use crate::graph::{build_vamana, BuildControl, BuildError, VamanaParams};
use crate::VertexId;

/// r_ent: the entrance graph holds this fraction of the vertices.
pub const DEFAULT_RATIO: f64 = 0.01;
/// R_ent.
pub const DEFAULT_DEGREE: usize = 32;
/// The entrance graph's build list.
pub const DEFAULT_BUILD_LIST: usize = 64;
/// The search list (`mem-L`): ten entry points.
pub const DEFAULT_SEARCH_LIST: usize = 10;

const MAGIC: [u8; 8] = *b"NAVISENT";
const VERSION: u32 = 1;
const HEADER_SIZE: usize = 48;
/// Stands for the vertex being promoted in a plan's lists, before it has a local id.
const NEW_VERTEX: u32 = u32::MAX;

/// What a search returns: entry points, then the explored set with distances (global ids).
pub type EntrySearch = (Vec<VertexId>, Vec<(VertexId, f32)>);

mod format;
pub mod shared;
mod view;

use view::check_new_vertex;
pub use view::{plan_view, search_view, EntranceView};

/// Build parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct EntranceParams {
    /// Fraction of the vertices sampled (r_ent), also the promotion threshold.
    pub ratio: f64,
    /// The sample has at least `min(n, min_size)` vertices.
    pub min_size: usize,
    pub max_degree: usize,
    pub build_list: usize,
    pub alpha: f32,
    pub seed: u64,
    pub threads: usize,
}

impl Default for EntranceParams {
    fn default() -> Self {
        EntranceParams {
            ratio: DEFAULT_RATIO,
            min_size: 1,
            max_degree: DEFAULT_DEGREE,
            build_list: DEFAULT_BUILD_LIST,
            alpha: 1.2,
            seed: 0x656e_7472,
            threads: 1,
        }
    }
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum EntranceError {
    Build(BuildError),
    Invalid(String),
    /// `from_bytes` input that is not a valid entrance graph.
    Format(String),
}

impl fmt::Display for EntranceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntranceError::Build(e) => write!(f, "entrance graph build failed: {e}"),
            EntranceError::Invalid(m) => write!(f, "entrance graph: {m}"),
            EntranceError::Format(m) => write!(f, "corrupt entrance graph: {m}"),
        }
    }
}

impl std::error::Error for EntranceError {}

impl From<BuildError> for EntranceError {
    fn from(e: BuildError) -> Self {
        EntranceError::Build(e)
    }
}

/// The entrance graph. Internally vertices have dense local ids `0..len`; every id in the
/// public API is a global vertex id.
#[derive(Clone, Debug, PartialEq)]
pub struct EntranceGraph {
    metric: Metric,
    dim: usize,
    max_degree: usize,
    alpha: f32,
    ratio: f64,
    /// Local id -> global id.
    ids: Vec<VertexId>,
    /// Global id -> local id.
    local: HashMap<VertexId, u32>,
    /// Row-major full vectors by local id.
    vectors: Vec<f32>,
    /// Neighbour lists in local ids.
    adjacency: Vec<Vec<u32>>,
    /// Local id searches start from.
    start: u32,
}

/// A promotion computed against the graph as it was; see the module comment.
#[derive(Clone, Debug, PartialEq)]
pub struct PromotionPlan {
    vertex: VertexId,
    vector: Vec<f32>,
    /// The new vertex's neighbours (local ids), E_inter first.
    neighbors: Vec<u32>,
    /// New lists for those neighbours, with [`NEW_VERTEX`] for the promoted vertex.
    updates: Vec<(u32, Vec<u32>)>,
}

impl PromotionPlan {
    /// The promoted vertex (global id).
    pub fn vertex(&self) -> VertexId {
        self.vertex
    }

    /// Global ids of the promoted vertex's neighbours in `graph`.
    pub fn neighbors(&self, graph: &EntranceGraph) -> Vec<VertexId> {
        self.neighbors
            .iter()
            .map(|&l| graph.ids[l as usize])
            .collect()
    }
}

/// How many vertices to sample out of `n`: `ceil(ratio n)`, at least `min(n, min_size)`.
pub fn sample_size(n: usize, ratio: f64, min_size: usize) -> usize {
    let wanted = (n as f64 * ratio.clamp(0.0, 1.0)).ceil() as usize;
    wanted.max(min_size).min(n)
}

/// A seeded sample of `sample_size(n, ratio, min_size)` distinct ids, ascending.
pub fn sample_ids(n: usize, ratio: f64, min_size: usize, seed: u64) -> Vec<VertexId> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let size = sample_size(n, ratio, min_size);
    let mut ids: Vec<VertexId> = rand::seq::index::sample(&mut rng, n, size)
        .into_iter()
        .map(|i| i as VertexId)
        .collect();
    ids.sort_unstable();
    ids
}

impl EntranceGraph {
    /// Samples `params.ratio` of the `n = data.len() / dim` vectors and builds the graph.
    pub fn build(
        data: &[f32],
        dim: usize,
        metric: Metric,
        params: &EntranceParams,
        control: &BuildControl,
    ) -> Result<EntranceGraph, EntranceError> {
        if dim == 0 || !data.len().is_multiple_of(dim) {
            return Err(EntranceError::Invalid(format!(
                "{} floats is not a whole number of {dim}-dimensional vectors",
                data.len()
            )));
        }
        let ids = sample_ids(data.len() / dim, params.ratio, params.min_size, params.seed);
        EntranceGraph::build_from_ids(ids, data, dim, metric, params, control)
    }

    /// Builds over a caller-chosen sample `ids` of the rows of `data`.
    pub fn build_from_ids(
        ids: Vec<VertexId>,
        data: &[f32],
        dim: usize,
        metric: Metric,
        params: &EntranceParams,
        control: &BuildControl,
    ) -> Result<EntranceGraph, EntranceError> {
        check_params(params)?;
        let n = data.len().checked_div(dim).unwrap_or(0);
        let mut vectors = Vec::with_capacity(ids.len() * dim);
        for &g in &ids {
            if g as usize >= n {
                return Err(EntranceError::Invalid(format!(
                    "sample id {g} is not below {n}"
                )));
            }
            vectors.extend_from_slice(row(data, dim, g));
        }
        EntranceGraph::build_from_gathered(ids, vectors, dim, metric, params, control)
    }

    /// [`EntranceGraph::build_from_ids`] with the sample's vectors already gathered:
    /// `vectors` holds row `ids[i]` at position `i`. A memory-bounded build reads them from
    /// its spool instead of holding every row.
    pub fn build_from_gathered(
        ids: Vec<VertexId>,
        vectors: Vec<f32>,
        dim: usize,
        metric: Metric,
        params: &EntranceParams,
        control: &BuildControl,
    ) -> Result<EntranceGraph, EntranceError> {
        check_params(params)?;
        if vectors.len() != ids.len() * dim {
            return Err(EntranceError::Invalid(format!(
                "{} values for {} sample vectors of {dim} dimensions",
                vectors.len(),
                ids.len()
            )));
        }
        let mut local = HashMap::with_capacity(ids.len());
        for (i, &g) in ids.iter().enumerate() {
            if local.insert(g, i as u32).is_some() {
                return Err(EntranceError::Invalid(format!(
                    "sample id {g} appears twice"
                )));
            }
        }
        let vamana = VamanaParams {
            max_degree: params.max_degree,
            build_list: params.build_list,
            alpha: params.alpha,
            seed: params.seed,
            threads: params.threads,
        };
        let graph = build_vamana(&vectors, dim, metric, &vamana, control)?;
        Ok(EntranceGraph {
            metric,
            dim,
            max_degree: params.max_degree,
            alpha: params.alpha,
            ratio: params.ratio,
            ids,
            local,
            vectors,
            adjacency: graph.adjacency,
            start: graph.medoid,
        })
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether global vertex `v` is in the entrance graph.
    pub fn contains(&self, v: VertexId) -> bool {
        self.local.contains_key(&v)
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    pub fn max_degree(&self) -> usize {
        self.max_degree
    }

    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Global ids of the members, in local-id order.
    pub fn ids(&self) -> &[VertexId] {
        &self.ids
    }

    /// v's neighbours as global ids, if v is a member.
    pub fn neighbors(&self, v: VertexId) -> Option<Vec<VertexId>> {
        let &l = self.local.get(&v)?;
        Some(
            self.adjacency[l as usize]
                .iter()
                .map(|&u| self.ids[u as usize])
                .collect(),
        )
    }

    /// v's full vector, if v is a member.
    pub fn vector(&self, v: VertexId) -> Option<&[f32]> {
        let &l = self.local.get(&v)?;
        Some(row(&self.vectors, self.dim, l))
    }

    /// Algorithm 2's trigger: promote while `|G_ent| < r_ent |G|`.
    pub fn should_promote(&self, graph_vertices: u64) -> bool {
        (self.len() as f64) < self.ratio * graph_vertices as f64
    }

    /// Entry points for `query`: the `list` closest members found (global ids, closest
    /// first), and the explored set E_ent (global ids with exact distances, closest first).
    pub fn search(&self, query: &[f32], list: usize) -> Result<EntrySearch, EntranceError> {
        self.search_live(query, list, |_| true)
    }

    /// [`search`](Self::search) that leaves out of the entry points the vertices for which
    /// `is_live` is false (lazily deleted ones), while still walking through them; when none
    /// of the `list` nearest is live, they are all returned, as they still route. Pass a
    /// widened `list` to keep the same number of entry points.
    pub fn search_live(
        &self,
        query: &[f32],
        list: usize,
        is_live: impl Fn(VertexId) -> bool,
    ) -> Result<EntrySearch, EntranceError> {
        self.search_live_counted(query, list, is_live)
            .map(|(found, _)| found)
    }

    /// [`search_live`](Self::search_live) that also returns how many exact distances it
    /// computed, for the per-query counters.
    pub fn search_live_counted(
        &self,
        query: &[f32],
        list: usize,
        is_live: impl Fn(VertexId) -> bool,
    ) -> Result<(EntrySearch, usize), EntranceError> {
        search_view(self, query, list, is_live)
    }

    /// Adds `vertex` (Algorithm 2): [`plan_promotion`](Self::plan_promotion) then
    /// [`apply_promotion`](Self::apply_promotion). The caller decides whether to promote
    /// (see [`should_promote`](Self::should_promote)).
    pub fn promote(
        &mut self,
        vertex: VertexId,
        vector: &[f32],
        e_ent: &[VertexId],
        e_pos: &[VertexId],
    ) -> Result<(), EntranceError> {
        let plan = self.plan_promotion(vertex, vector, e_ent, e_pos)?;
        self.apply_promotion(plan)
    }

    /// Computes a promotion without changing the graph. `e_ent` is the explored set of this
    /// insert's entrance search and `e_pos` the on-disk explored set, both global ids,
    /// closest first; ids that are not members are ignored. E_inter is ordered by exact
    /// distance to `vector`, which the members' in-memory vectors make cheap.
    pub fn plan_promotion(
        &self,
        vertex: VertexId,
        vector: &[f32],
        e_ent: &[VertexId],
        e_pos: &[VertexId],
    ) -> Result<PromotionPlan, EntranceError> {
        plan_view(self, vertex, vector, e_ent, e_pos)
    }

    /// Installs a plan made by [`plan_promotion`](Self::plan_promotion) on this graph.
    pub fn apply_promotion(&mut self, plan: PromotionPlan) -> Result<(), EntranceError> {
        check_new_vertex(self, plan.vertex, &plan.vector)?;
        let n = self.len() as u32;
        let in_range = |l: &u32| *l < n || *l == NEW_VERTEX;
        if !plan.neighbors.iter().all(|l| *l < n)
            || !plan
                .updates
                .iter()
                .all(|(p, list)| *p < n && list.iter().all(in_range))
        {
            return Err(EntranceError::Invalid(
                "promotion plan was made for another graph".into(),
            ));
        }
        let new_local = n;
        self.ids.push(plan.vertex);
        self.local.insert(plan.vertex, new_local);
        self.vectors.extend_from_slice(&plan.vector);
        self.adjacency.push(plan.neighbors);
        for (p, mut list) in plan.updates {
            list.iter_mut()
                .filter(|l| **l == NEW_VERTEX)
                .for_each(|l| *l = new_local);
            self.adjacency[p as usize] = list;
        }
        if new_local == 0 {
            self.start = 0;
        }
        Ok(())
    }
}

fn check_params(p: &EntranceParams) -> Result<(), EntranceError> {
    if !(p.ratio > 0.0 && p.ratio <= 1.0) {
        return Err(EntranceError::Invalid(format!(
            "ratio must be in (0, 1], got {}",
            p.ratio
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
