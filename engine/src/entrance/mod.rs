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
use crate::graph::prune::robust_prune;
use crate::graph::search::{greedy_search, row, SearchScratch};
use crate::graph::vamana::prune_metric;
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

pub mod shared;

/// Read access to an entrance graph, whether it is a process's own [`EntranceGraph`] or the
/// [`shared::SharedEntrance`] every backend maps: searching and planning promotions work on
/// either. Ids are local (dense `0..len`) unless a method says global.
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

fn check_new_vertex<G: EntranceView + ?Sized>(
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

    /// Serialises the plan (little-endian u32s and f32s), so that every process sharing an
    /// index can apply the same promotion to its copy of the graph (`update::promote`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |x: u32| out.extend_from_slice(&x.to_le_bytes());
        put(self.vertex);
        put(self.vector.len() as u32);
        put(self.neighbors.len() as u32);
        put(self.updates.len() as u32);
        for x in &self.vector {
            put(x.to_bits());
        }
        for &l in &self.neighbors {
            put(l);
        }
        for (p, list) in &self.updates {
            put(*p);
            put(list.len() as u32);
            for &l in list {
                put(l);
            }
        }
        out
    }

    /// Reads a plan written by [`PromotionPlan::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<PromotionPlan, EntranceError> {
        let mut r = Reader { bytes, pos: 0 };
        let vertex = r.u32()?;
        let (dim, neighbors, updates) = (r.u32()? as usize, r.u32()? as usize, r.u32()? as usize);
        if dim > crate::MAX_DIM || neighbors > bytes.len() || updates > bytes.len() {
            return Err(format_err("promotion plan with impossible sizes"));
        }
        let vector = (0..dim)
            .map(|_| r.u32().map(f32::from_bits))
            .collect::<Result<Vec<f32>, _>>()?;
        let neighbors = (0..neighbors)
            .map(|_| r.u32())
            .collect::<Result<Vec<u32>, _>>()?;
        let mut lists = Vec::with_capacity(updates);
        for _ in 0..updates {
            let p = r.u32()?;
            let len = r.u32()? as usize;
            if len > bytes.len() {
                return Err(format_err("promotion plan with an impossible list"));
            }
            let list = (0..len).map(|_| r.u32()).collect::<Result<Vec<u32>, _>>()?;
            lists.push((p, list));
        }
        Ok(PromotionPlan {
            vertex,
            vector,
            neighbors,
            updates: lists,
        })
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

    /// Serialises the graph (little-endian):
    ///
    /// ```text
    /// 0 magic "NAVISENT" | 8 version u32 | 12 metric code u32 | 16 dim u32 | 20 count u32
    /// 24 max_degree u32 | 28 start (local id) u32 | 32 ratio f64 | 40 alpha f32 | 44 zero u32
    /// 48 global ids: count x u32 | vectors: count x dim x f32
    ///    lists: count x (degree u32, degree x local id u32)
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let edges: usize = self.adjacency.iter().map(Vec::len).sum();
        let mut out =
            Vec::with_capacity(HEADER_SIZE + 4 * (self.ids.len() * (2 + self.dim) + edges));
        out.extend_from_slice(&MAGIC);
        for v in [
            VERSION,
            self.metric.code(),
            self.dim as u32,
            self.ids.len() as u32,
            self.max_degree as u32,
            self.start,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.ratio.to_le_bytes());
        out.extend_from_slice(&self.alpha.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        self.ids
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        self.vectors
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        for list in &self.adjacency {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            list.iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        }
        out
    }

    /// Parses [`to_bytes`](Self::to_bytes) output, checking every field.
    pub fn from_bytes(bytes: &[u8]) -> Result<EntranceGraph, EntranceError> {
        let mut r = Reader { bytes, pos: 0 };
        if r.take(8)? != MAGIC {
            return Err(format_err("bad magic; not an entrance graph"));
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format_err(&format!(
                "version {version}, this build reads {VERSION}"
            )));
        }
        let code = r.u32()?;
        let metric =
            Metric::from_code(code).ok_or_else(|| format_err(&format!("metric code {code}")))?;
        let dim = r.u32()? as usize;
        let count = r.u32()? as usize;
        let max_degree = r.u32()? as usize;
        let start = r.u32()?;
        let ratio = f64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
        let alpha = r.f32()?;
        let _reserved = r.u32()?;
        check_header(dim, count, max_degree, start, ratio, alpha)?;
        // Every later field is at least 4 bytes per id, which bounds count before allocating.
        if count.saturating_mul(4 * (2 + dim)) > bytes.len() - HEADER_SIZE {
            return Err(format_err(&format!(
                "{count} vertices cannot fit in {} bytes",
                bytes.len()
            )));
        }
        let ids: Vec<VertexId> = (0..count).map(|_| r.u32()).collect::<Result<_, _>>()?;
        let mut local = HashMap::with_capacity(count);
        for (i, &g) in ids.iter().enumerate() {
            if local.insert(g, i as u32).is_some() {
                return Err(format_err(&format!("vertex {g} listed twice")));
            }
        }
        let vectors: Vec<f32> = (0..count * dim)
            .map(|_| r.f32())
            .collect::<Result<_, _>>()?;
        if let Some(bad) = vectors.iter().position(|x| !x.is_finite()) {
            return Err(format_err(&format!("vector value {bad} is not finite")));
        }
        let adjacency = (0..count)
            .map(|v| read_list(&mut r, v, count, max_degree))
            .collect::<Result<Vec<_>, _>>()?;
        if r.pos != bytes.len() {
            return Err(format_err(&format!(
                "{} trailing bytes",
                bytes.len() - r.pos
            )));
        }
        Ok(EntranceGraph {
            metric,
            dim,
            max_degree,
            alpha,
            ratio,
            ids,
            local,
            vectors,
            adjacency,
            start,
        })
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

fn check_header(
    dim: usize,
    count: usize,
    max_degree: usize,
    start: u32,
    ratio: f64,
    alpha: f32,
) -> Result<(), EntranceError> {
    if dim == 0 || dim > crate::vector::MAX_DIM {
        return Err(format_err(&format!("dimension {dim}")));
    }
    if max_degree == 0 || max_degree > crate::graph::vamana::MAX_DEGREE {
        return Err(format_err(&format!("max degree {max_degree}")));
    }
    if count > 0 && start as usize >= count {
        return Err(format_err(&format!(
            "start {start} outside {count} vertices"
        )));
    }
    let ratio_ok = ratio > 0.0 && ratio <= 1.0;
    let alpha_ok = alpha.is_finite() && alpha >= 1.0;
    if !(ratio_ok && alpha_ok) {
        return Err(format_err(&format!(
            "ratio {ratio} or alpha {alpha} out of range"
        )));
    }
    Ok(())
}

fn read_list(
    r: &mut Reader,
    v: usize,
    count: usize,
    max_degree: usize,
) -> Result<Vec<u32>, EntranceError> {
    let degree = r.u32()? as usize;
    if degree > max_degree {
        return Err(format_err(&format!(
            "vertex {v} has degree {degree} over {max_degree}"
        )));
    }
    let list: Vec<u32> = (0..degree).map(|_| r.u32()).collect::<Result<_, _>>()?;
    if let Some(bad) = list
        .iter()
        .find(|&&u| u as usize >= count || u as usize == v)
    {
        return Err(format_err(&format!(
            "vertex {v} has invalid neighbour {bad}"
        )));
    }
    Ok(list)
}

fn format_err(m: &str) -> EntranceError {
    EntranceError::Format(m.to_string())
}

/// Bounds-checked little-endian reads.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], EntranceError> {
        let end = self.pos.checked_add(len).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format_err(&format!("truncated at byte {}", self.pos)))?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn u32(&mut self) -> Result<u32, EntranceError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn f32(&mut self) -> Result<f32, EntranceError> {
        Ok(f32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests;
