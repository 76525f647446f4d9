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

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::sq8::Sq8;
use super::Graph;
use crate::distance::{kernels, Metric};
use crate::VertexId;
use builder::{run_chunked, Builder, WorkerScratch};

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

mod builder;
#[cfg(test)]
mod tests;
