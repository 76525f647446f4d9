//! In-memory Vamana build over full vectors (DiskANN, "DiskANN: Fast Accurate Billion-point
//! Nearest Neighbor Search on a Single Node", §2.3), the graph the on-disk index starts from.
//!
//! Steps:
//! 1. Start from an empty graph and take the vertex closest to the centroid (the medoid)
//!    as the start.
//! 2. One pass over a seeded random permutation with the configured alpha. For each
//!    vertex `p`: greedy search for `p` from the medoid with list `L`; RobustPrune of the
//!    expanded set plus p's current neighbours to `R`; then a back edge `j -> p` for every
//!    chosen `j`.
//! 3. A back edge is appended while `j`'s list is shorter than `ceil(1.3 R)` (DiskANN's
//!    "slack", which saves most prunes); a full list is pruned back to `R`. After the
//!    pass every list longer than `R` is pruned, so the result respects `R` exactly.
//!
//! This is how DiskANN's current in-memory build works, not the paper's two passes over a
//! random initial graph. Measured on 20K Fashion-MNIST rows (R = 64, L = 100, one thread):
//! the paper's scheme (random R/2-regular start, passes with alpha 1 then 1.2) computed
//! 57M distances and gave recall@10 0.9993 at L = 40; one pass from an empty graph computed
//! 24M and gave 0.9995. Searching a random graph is what costs: its long random edges make
//! every early search wander, and the second pass mostly repeats the first.
//!
//! The build is bound by memory traffic, not arithmetic: each distance reads a full vector
//! from a random place in memory. The search therefore names all new neighbours of an
//! expanded vertex before computing any distance (`greedy_search_prefetching`), so their
//! cache misses overlap (about 20% faster on that data set).
//!
//! For the same reason every build distance (the greedy search, the pool RobustPrune ranks
//! and the candidate-to-candidate ones) is computed on 8-bit scalar codes of the vectors
//! ([`super::sq8`], [`BuildDistances::Sq8`]), a quarter of the bytes. Pruning's distances
//! were the larger part: on 20K MiniLM rows (R = 64, L = 100, one thread) codes for the
//! search alone took the graph build from 26.9 s to 21.5 s, codes everywhere to 8.9 s, with
//! recall@10 at L = 40 of 0.9915, 0.9914 and 0.9912. 8-bit data (Fashion-MNIST pixels) is
//! encoded losslessly and builds the same graph. Inner product keeps exact distances.
//!
//! Parallelism: vertices are processed in chunks; inside a chunk `threads`
//! threads (the caller plus `threads - 1` scoped workers) take vertices from a shared
//! counter. Each neighbour list sits behind its own mutex and a thread holds at most one
//! at a time, so there is no lock order to get wrong. As in DiskANN, a back edge that
//! another thread adds between a list's copy-out and its pruned write-back can be lost;
//! the vertex keeps its own out-edges, so this only costs a little in-degree.
//!
//! Between chunks the calling thread alone reports progress and asks whether to stop;
//! worker threads never see the callbacks (they are not `Sync`), so a PostgreSQL caller
//! can run CHECK_FOR_INTERRUPTS and progress updates from them safely.
//!
//! With `threads = 1` the build is deterministic for a given seed; graphs below
//! [`SINGLE_THREAD_BELOW`] vertices always use one thread.

use std::fmt;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::prune::robust_prune;
use super::search::{greedy_search_prefetching, row, SearchScratch, PREFETCH_AHEAD};
use super::sq8::Sq8;
use super::Graph;
use crate::distance::{kernels, Metric};
use crate::VertexId;

/// Largest accepted `max_degree`. An edge list of 1,024 ids is 4 KiB, a whole edge page.
pub const MAX_DEGREE: usize = 1023;
/// Largest accepted build list.
pub const MAX_BUILD_LIST: usize = 10_000;
/// Largest accepted thread count.
pub const MAX_THREADS: usize = 256;
/// A list may grow to `SLACK * R` through back edges before it is pruned (DiskANN's
/// GRAPH_SLACK_FACTOR).
pub const SLACK: f64 = 1.3;
/// Vertices per thread between two progress/cancellation polls. At a few hundred
/// microseconds per vertex this keeps a poll well under a second apart.
const CHUNK_PER_THREAD: usize = 256;
/// Locks guarding the neighbour lists; vertex v uses `v % LOCK_STRIPES`. A thread holds
/// at most one, so two vertices sharing a stripe only ever cost a little contention.
pub const LOCK_STRIPES: usize = 4096;

/// Build parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct VamanaParams {
    /// R: the largest out-degree.
    pub max_degree: usize,
    /// L: the candidate list of the build's searches. Should be at least `max_degree`.
    pub build_list: usize,
    /// The second pass's RobustPrune alpha (the first uses 1).
    pub alpha: f32,
    /// Seed of the insertion order.
    pub seed: u64,
    /// Threads doing the work, the calling thread included.
    pub threads: usize,
}

impl Default for VamanaParams {
    /// The NAVIS release defaults: R = 96, L = 128, alpha = 1.2, one thread.
    fn default() -> Self {
        VamanaParams {
            max_degree: 96,
            build_list: 128,
            alpha: 1.2,
            seed: 0x6e_6176_6973,
            threads: 1,
        }
    }
}

impl VamanaParams {
    pub fn validate(&self) -> Result<(), BuildError> {
        let bad = |m: String| Err(BuildError::InvalidParams(m));
        if self.max_degree == 0 || self.max_degree > MAX_DEGREE {
            return bad(format!(
                "max_degree must be between 1 and {MAX_DEGREE}, got {}",
                self.max_degree
            ));
        }
        if self.build_list == 0 || self.build_list > MAX_BUILD_LIST {
            return bad(format!(
                "build list must be between 1 and {MAX_BUILD_LIST}, got {}",
                self.build_list
            ));
        }
        if !(self.alpha.is_finite() && (1.0..=4.0).contains(&self.alpha)) {
            return bad(format!("alpha must be between 1 and 4, got {}", self.alpha));
        }
        if self.threads == 0 || self.threads > MAX_THREADS {
            return bad(format!(
                "threads must be between 1 and {MAX_THREADS}, got {}",
                self.threads
            ));
        }
        Ok(())
    }

    /// How long a list may grow through back edges before it is pruned.
    pub fn slack_degree(&self) -> usize {
        slack_degree(self.max_degree)
    }
}

/// `ceil(SLACK * max_degree)`.
pub fn slack_degree(max_degree: usize) -> usize {
    (max_degree as f64 * SLACK).ceil() as usize
}

/// Why a build did not produce a graph.
#[derive(Clone, Debug, PartialEq)]
pub enum BuildError {
    InvalidParams(String),
    InvalidInput(String),
    /// The caller's stop check returned true.
    Cancelled,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::InvalidParams(m) => write!(f, "invalid graph build parameters: {m}"),
            BuildError::InvalidInput(m) => write!(f, "invalid graph build input: {m}"),
            BuildError::Cancelled => write!(f, "graph build cancelled"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Hooks the caller's thread runs between chunks of work.
#[derive(Clone, Copy, Default)]
pub struct BuildControl<'a> {
    /// Called with (vertex insertions done, total) where total is `n`.
    pub progress: Option<&'a dyn Fn(u64, u64)>,
    /// Returning true stops the build with [`BuildError::Cancelled`].
    pub should_stop: Option<&'a dyn Fn() -> bool>,
}

impl<'a> BuildControl<'a> {
    pub fn none() -> BuildControl<'static> {
        BuildControl {
            progress: None,
            should_stop: None,
        }
    }

    fn report(&self, done: u64, total: u64) {
        if let Some(p) = self.progress {
            p(done, total);
        }
    }

    fn check(&self) -> Result<(), BuildError> {
        match self.should_stop {
            Some(stop) if stop() => Err(BuildError::Cancelled),
            _ => Ok(()),
        }
    }
}

/// What the build allocated, for checking the memory estimate.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BuildStats {
    /// Neighbour lists: the flat id array, the per-vertex counts and the lock stripes.
    pub adjacency_bytes: usize,
    /// Heap held by all per-thread scratch at the end of the build.
    pub scratch_bytes: usize,
    /// The insertion order permutation.
    pub order_bytes: usize,
    /// The 8-bit codes of [`BuildDistances::Sq8`] (0 for an exact build).
    pub codes_bytes: usize,
}

/// Which distances the build computes (the search and prune inside the build; the index's
/// own searches always rerank with the full vectors).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BuildDistances {
    /// Full-precision vectors for every distance (the build before 8-bit codes).
    Exact,
    /// 8-bit scalar codes of the vectors ([`super::sq8`]) for L2 and cosine; inner product
    /// stays exact. The graph build of 100K MiniLM rows (384-d, one thread) took 52-55 s
    /// instead of 120-124 s (benchmarks/results/engine.md, target (a)).
    #[default]
    Sq8,
}

/// Builds a Vamana graph over `data` (`n` rows of `dim` floats). Vectors must be finite;
/// for `Metric::Cosine` they must already be unit length (see `distance::normalize`).
/// Uses [`BuildDistances::Sq8`].
pub fn build_vamana(
    data: &[f32],
    dim: usize,
    metric: Metric,
    params: &VamanaParams,
    control: &BuildControl,
) -> Result<Graph, BuildError> {
    build_vamana_with_stats(data, dim, metric, params, control).map(|(g, _)| g)
}

/// [`build_vamana`] that also reports what it allocated.
pub fn build_vamana_with_stats(
    data: &[f32],
    dim: usize,
    metric: Metric,
    params: &VamanaParams,
    control: &BuildControl,
) -> Result<(Graph, BuildStats), BuildError> {
    build_vamana_using(
        data,
        dim,
        metric,
        params,
        control,
        BuildDistances::default(),
    )
}

/// Graphs of fewer vertices are built on one thread: it takes well under a second, and is
/// deterministic. Several threads can lose a back edge (module comment), which in a small graph
/// can leave a vertex without an in-edge: growing.sql's 300-row index of 8-d rows (rebuilt at
/// 256 rows with 3 threads) answered 29 of 30 queries exactly in a loaded CI run and 30 in
/// six idle runs; tiny indexes are promised exact answers.
pub const SINGLE_THREAD_BELOW: usize = 1024;

/// [`build_vamana_with_stats`] with a choice of build distances.
pub fn build_vamana_using(
    data: &[f32],
    dim: usize,
    metric: Metric,
    params: &VamanaParams,
    control: &BuildControl,
    distances: BuildDistances,
) -> Result<(Graph, BuildStats), BuildError> {
    params.validate()?;
    let n = check_input(data, dim)?;
    control.check()?;
    if n <= 1 {
        control.report(n as u64, n as u64);
        return Ok((
            Graph {
                adjacency: vec![Vec::new(); n],
                medoid: 0,
            },
            BuildStats::default(),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(params.seed);
    let medoid = find_medoid(data, dim);
    let builder = Builder::new(data, dim, metric, params, medoid, distances);
    let threads = if n < SINGLE_THREAD_BELOW {
        1
    } else {
        params.threads.min(n)
    };
    let mut scratches: Vec<WorkerScratch> = (0..threads).map(|_| WorkerScratch::new(n)).collect();
    let mut order: Vec<VertexId> = (0..n as VertexId).collect();
    let total = n as u64;
    control.report(0, total);
    order.shuffle(&mut rng);
    run_chunked(&order, &mut scratches, control, Some((0, total)), |p, s| {
        builder.insert_vertex(p, params.alpha, s)
    })?;
    order.sort_unstable();
    run_chunked(&order, &mut scratches, control, None, |v, s| {
        builder.shrink_to_degree(v, params.alpha, s)
    })?;
    let stats = BuildStats {
        adjacency_bytes: builder.heap_bytes(),
        scratch_bytes: scratches.iter().map(WorkerScratch::heap_bytes).sum(),
        order_bytes: order.capacity() * std::mem::size_of::<VertexId>(),
        codes_bytes: builder.approx.as_ref().map_or(0, Sq8::heap_bytes),
    };
    drop(scratches);
    drop(order);
    Ok((builder.into_graph(), stats))
}

/// Checks shape and values; returns the number of vectors.
fn check_input(data: &[f32], dim: usize) -> Result<usize, BuildError> {
    if dim == 0 {
        return Err(BuildError::InvalidInput(
            "dimension must be at least 1".into(),
        ));
    }
    if !data.len().is_multiple_of(dim) {
        return Err(BuildError::InvalidInput(format!(
            "{} floats is not a whole number of {dim}-dimensional vectors",
            data.len()
        )));
    }
    let n = data.len() / dim;
    if n >= VertexId::MAX as usize {
        return Err(BuildError::InvalidInput(format!(
            "{n} vectors is more than a graph can index"
        )));
    }
    for (i, v) in data.chunks_exact(dim).enumerate() {
        crate::vector::validate(v)
            .map_err(|e| BuildError::InvalidInput(format!("vector {i}: {e}")))?;
    }
    Ok(n)
}

/// The vertex closest (L2) to the centroid of all vectors: DiskANN's start point. L2 for
/// every metric, because "central" is a geometric notion here.
pub fn find_medoid(data: &[f32], dim: usize) -> VertexId {
    let n = data.len() / dim.max(1);
    if n == 0 {
        return 0;
    }
    let mut sum = vec![0f64; dim];
    for v in data.chunks_exact(dim) {
        sum.iter_mut().zip(v).for_each(|(s, &x)| *s += x as f64);
    }
    let centroid: Vec<f32> = sum.iter().map(|s| (s / n as f64) as f32).collect();
    let k = kernels();
    let mut best = (0, f32::INFINITY);
    for (i, v) in data.chunks_exact(dim).enumerate() {
        let d = k.l2_squared(&centroid, v);
        if d < best.1 {
            best = (i as VertexId, d);
        }
    }
    best.0
}

/// Per-thread reusable buffers.
struct WorkerScratch {
    search: SearchScratch,
    pool: Vec<(VertexId, f32)>,
    list: Vec<VertexId>,
}

impl WorkerScratch {
    fn new(n: usize) -> WorkerScratch {
        WorkerScratch {
            search: SearchScratch::new(n),
            pool: Vec::new(),
            list: Vec::new(),
        }
    }

    fn heap_bytes(&self) -> usize {
        self.search.heap_bytes()
            + self.pool.capacity() * std::mem::size_of::<(VertexId, f32)>()
            + self.list.capacity() * std::mem::size_of::<VertexId>()
    }
}

/// Shared state of a build: the vectors and the neighbour lists.
///
/// The lists live in one flat array with `slack_degree` slots per vertex and a count
/// each, rather than a `Mutex<Vec>` per vertex: at 50 dimensions the per-vertex mutex,
/// `Vec` header and allocator header added 76 bytes to each 336-byte list and the lists
/// outweighed the vectors. Ids and counts are atomics only so that they can be written
/// through a shared reference; every access happens under the vertex's stripe lock, which
/// orders it, so relaxed loads and stores suffice.
struct Builder<'a> {
    data: &'a [f32],
    dim: usize,
    metric: Metric,
    prune_metric: Metric,
    max_degree: usize,
    slack_degree: usize,
    build_list: usize,
    medoid: VertexId,
    ids: Vec<AtomicU32>,
    counts: Vec<AtomicU16>,
    stripes: Vec<Mutex<()>>,
    /// The 8-bit codes every build distance uses, when the build runs on them.
    approx: Option<Sq8>,
}

impl<'a> Builder<'a> {
    fn new(
        data: &'a [f32],
        dim: usize,
        metric: Metric,
        params: &VamanaParams,
        medoid: VertexId,
        distances: BuildDistances,
    ) -> Builder<'a> {
        let n = data.len() / dim;
        let slack = params.slack_degree();
        Builder {
            data,
            dim,
            metric,
            prune_metric: prune_metric(metric),
            max_degree: params.max_degree,
            slack_degree: slack,
            build_list: params.build_list,
            medoid,
            ids: (0..n * slack).map(|_| AtomicU32::new(0)).collect(),
            counts: (0..n).map(|_| AtomicU16::new(0)).collect(),
            stripes: (0..LOCK_STRIPES.min(n)).map(|_| Mutex::new(())).collect(),
            approx: match (distances, metric) {
                // Inner product has no squared-difference form to quantize, and the codes
                // give squared differences, not L1 (see `sq8`).
                (_, Metric::InnerProduct | Metric::L1) | (BuildDistances::Exact, _) => None,
                (BuildDistances::Sq8, _) => Some(Sq8::encode(data, dim)),
            },
        }
    }

    /// The distance RobustPrune uses: [`prune_metric`] over the codes or the vectors.
    fn prune_dist(&self, a: VertexId, b: VertexId) -> f32 {
        match &self.approx {
            Some(q) => q.l2_squared(a, b),
            None => self.dist(a, b),
        }
    }

    fn vector(&self, v: VertexId) -> &[f32] {
        row(self.data, self.dim, v)
    }

    /// Asks the CPU to start loading v's vector into cache; see `greedy_search_prefetching`.
    fn prefetch_vector(&self, v: VertexId) {
        crate::prefetch::floats(self.vector(v));
    }

    /// The distance RobustPrune uses; see [`prune_metric`].
    fn dist(&self, a: VertexId, b: VertexId) -> f32 {
        self.prune_metric
            .search_distance(self.vector(a), self.vector(b))
    }

    fn lock(&self, v: VertexId) -> MutexGuard<'_, ()> {
        // A panic elsewhere cannot leave a list half-written in a way later readers
        // misread (the count is stored after the ids), so a poisoned lock is still usable.
        self.stripes[v as usize % self.stripes.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn slots(&self, v: VertexId) -> &[AtomicU32] {
        &self.ids[v as usize * self.slack_degree..][..self.slack_degree]
    }

    fn count(&self, v: VertexId) -> usize {
        self.counts[v as usize].load(Ordering::Relaxed) as usize
    }

    /// Appends v's list to `out`; the caller holds v's stripe lock.
    fn read_locked(&self, v: VertexId, out: &mut Vec<VertexId>) {
        let slots = &self.slots(v)[..self.count(v)];
        out.extend(slots.iter().map(|id| id.load(Ordering::Relaxed)));
    }

    /// Appends v's list to `out`.
    fn read_list(&self, v: VertexId, out: &mut Vec<VertexId>) {
        let _guard = self.lock(v);
        self.read_locked(v, out);
    }

    /// Overwrites v's list; `new` holds at most the slack degree ids.
    fn set_list(&self, v: VertexId, new: &[VertexId]) {
        let _guard = self.lock(v);
        for (slot, &id) in self.slots(v).iter().zip(new) {
            slot.store(id, Ordering::Relaxed);
        }
        self.counts[v as usize].store(new.len() as u16, Ordering::Relaxed);
    }

    /// One Vamana step for `p`: search, prune, link, back edges.
    fn insert_vertex(&self, p: VertexId, alpha: f32, s: &mut WorkerScratch) {
        let query = self.vector(p);
        match &self.approx {
            // The codes are p's own: the query is quantized like the points.
            Some(q) => greedy_search_prefetching(
                &[self.medoid],
                self.build_list,
                &mut s.search,
                |v, out| self.read_list(v, out),
                |v| crate::prefetch::bytes(q.row(v)),
                |v| q.l2_squared(p, v),
            ),
            None => greedy_search_prefetching(
                &[self.medoid],
                self.build_list,
                &mut s.search,
                |v, out| self.read_list(v, out),
                |v| self.prefetch_vector(v),
                |v| self.metric.search_distance(query, self.vector(v)),
            ),
        }
        s.pool.clear();
        // The search ranked by the prune distance already unless inner product is pruned by
        // L2 (codes are never used for inner product).
        let reuse = self.prune_metric == self.metric;
        let explored = s.search.explored.iter().filter(|c| c.0 != p);
        s.pool
            .extend(explored.map(|&(c, d)| (c, if reuse { d } else { self.dist(p, c) })));
        s.list.clear();
        self.read_list(p, &mut s.list);
        for &u in &s.list {
            s.pool.push((u, self.prune_dist(p, u)));
        }
        let chosen = robust_prune(&mut s.pool, alpha, self.max_degree, |a, b| {
            self.prune_dist(a, b)
        });
        self.set_list(p, &chosen);
        for &j in &chosen {
            self.add_back_edge(j, p, alpha, s);
        }
    }

    /// Adds `j -> p`, pruning j's list back to R when it is at the slack limit.
    fn add_back_edge(&self, j: VertexId, p: VertexId, alpha: f32, s: &mut WorkerScratch) {
        {
            let _guard = self.lock(j);
            let len = self.count(j);
            let slots = self.slots(j);
            if slots[..len]
                .iter()
                .any(|id| id.load(Ordering::Relaxed) == p)
            {
                return;
            }
            if len < self.slack_degree {
                slots[len].store(p, Ordering::Relaxed);
                self.counts[j as usize].store(len as u16 + 1, Ordering::Relaxed);
                return;
            }
            s.list.clear();
            self.read_locked(j, &mut s.list);
        }
        s.list.push(p);
        self.prune_list_of(j, alpha, s);
    }

    /// Cleanup after the passes: prunes a list that back edges left above R.
    fn shrink_to_degree(&self, v: VertexId, alpha: f32, s: &mut WorkerScratch) {
        {
            let _guard = self.lock(v);
            if self.count(v) <= self.max_degree {
                return;
            }
            s.list.clear();
            self.read_locked(v, &mut s.list);
        }
        self.prune_list_of(v, alpha, s);
    }

    /// Prunes the ids in `s.list` as v's neighbours and stores the result as v's list.
    /// Runs without holding v's lock; see the module comment on lost back edges.
    fn prune_list_of(&self, v: VertexId, alpha: f32, s: &mut WorkerScratch) {
        s.pool.clear();
        // These lists were not touched by the search that led here: their rows are cold,
        // so they are prefetched a few rows ahead as in the greedy search.
        let prefetch = |u: VertexId| {
            if let Some(q) = &self.approx {
                crate::prefetch::bytes(q.row(u));
            }
        };
        s.list
            .iter()
            .take(PREFETCH_AHEAD)
            .for_each(|&u| prefetch(u));
        for (i, &u) in s.list.iter().enumerate() {
            if let Some(&next) = s.list.get(i + PREFETCH_AHEAD) {
                prefetch(next);
            }
            s.pool.push((u, self.prune_dist(v, u)));
        }
        let chosen = robust_prune(&mut s.pool, alpha, self.max_degree, |a, b| {
            self.prune_dist(a, b)
        });
        self.set_list(v, &chosen);
    }

    fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(self.ids.as_slice())
            + std::mem::size_of_val(self.counts.as_slice())
            + std::mem::size_of_val(self.stripes.as_slice())
    }

    /// The finished lists as exact-length `Vec`s. They are copied out from the last vertex
    /// down while the flat array is truncated and shrunk behind them, so the copy never
    /// holds both whole structures (a large array is its own mapping, which shrinking
    /// returns to the system in place).
    fn into_graph(self) -> Graph {
        let Builder {
            ids,
            counts,
            slack_degree,
            medoid,
            approx,
            ..
        } = self;
        // The codes are done with; free them before the copy needs its room.
        drop(approx);
        let n = counts.len();
        let mut ids: Vec<u32> = ids.into_iter().map(AtomicU32::into_inner).collect();
        let step = n.div_ceil(16).max(1);
        let mut adjacency = Vec::with_capacity(n);
        for v in (0..n).rev() {
            let len = counts[v].load(Ordering::Relaxed) as usize;
            adjacency.push(ids[v * slack_degree..][..len].to_vec());
            if v % step == 0 {
                ids.truncate(v * slack_degree);
                ids.shrink_to_fit();
            }
        }
        adjacency.reverse();
        Graph { adjacency, medoid }
    }
}

/// The distance the build prunes with. Searches always rank by `metric`; for inner
/// product, pruning by the (negative) inner product itself lets a few long vectors occlude
/// almost everything (`<s, t>` is large for every `t` when `|s|` is), which left graphs with
/// an average out-degree of 4 at R = 24 and 15% of the vertices unreachable in tests. So the
/// inner-product build selects candidates by inner product but diversifies them by L2
/// geometry, with the usual alpha rule.
pub fn prune_metric(metric: Metric) -> Metric {
    match metric {
        Metric::InnerProduct => Metric::L2,
        other => other,
    }
}

/// Runs `work` on every vertex of `order`, `scratches.len()` threads at a time, in chunks;
/// between chunks checks for cancellation and (when `progress` gives the count done
/// before this call and the total) reports progress, both on the calling thread.
fn run_chunked<F>(
    order: &[VertexId],
    scratches: &mut [WorkerScratch],
    control: &BuildControl,
    progress: Option<(u64, u64)>,
    work: F,
) -> Result<(), BuildError>
where
    F: Fn(VertexId, &mut WorkerScratch) + Sync,
{
    let threads = scratches.len().max(1);
    let mut done = 0u64;
    for chunk in order.chunks(CHUNK_PER_THREAD * threads) {
        control.check()?;
        run_chunk(chunk, scratches, &work);
        done += chunk.len() as u64;
        if let Some((base, total)) = progress {
            control.report(base + done, total);
        }
    }
    Ok(())
}

/// One chunk: the caller and `scratches.len() - 1` scoped threads share a counter.
fn run_chunk<F>(chunk: &[VertexId], scratches: &mut [WorkerScratch], work: &F)
where
    F: Fn(VertexId, &mut WorkerScratch) + Sync,
{
    let Some((mine, others)) = scratches.split_first_mut() else {
        return;
    };
    let next = AtomicUsize::new(0);
    let drain = |s: &mut WorkerScratch| loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        match chunk.get(i) {
            Some(&v) => work(v, s),
            None => break,
        }
    };
    if others.is_empty() {
        drain(mine);
        return;
    }
    std::thread::scope(|scope| {
        for s in others {
            // If the OS refuses a thread, the threads that did start (at least the caller)
            // still drain the whole chunk.
            let _ = std::thread::Builder::new().spawn_scoped(scope, || drain(s));
        }
        drain(mine);
    });
}

#[cfg(test)]
mod tests;
