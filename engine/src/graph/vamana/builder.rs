//! The shared state of a parallel build (flat neighbour lists behind striped locks) and the
//! chunked scheduling of its per-vertex work over threads.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::{
    prune_metric, BuildControl, BuildDistances, BuildError, VamanaParams, CHUNK_PER_THREAD,
    LOCK_STRIPES,
};
use crate::distance::Metric;
use crate::graph::prune::robust_prune;
use crate::graph::search::{greedy_search_prefetching, row, SearchScratch, PREFETCH_AHEAD};
use crate::graph::sq8::Sq8;
use crate::graph::Graph;
use crate::VertexId;

/// Per-thread reusable buffers.
pub(super) struct WorkerScratch {
    search: SearchScratch,
    pool: Vec<(VertexId, f32)>,
    list: Vec<VertexId>,
}

impl WorkerScratch {
    pub(super) fn new(n: usize) -> WorkerScratch {
        WorkerScratch {
            search: SearchScratch::new(n),
            pool: Vec::new(),
            list: Vec::new(),
        }
    }

    pub(super) fn heap_bytes(&self) -> usize {
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
pub(super) struct Builder<'a> {
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
    pub(super) approx: Option<Sq8>,
}

impl<'a> Builder<'a> {
    pub(super) fn new(
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
    pub(super) fn insert_vertex(&self, p: VertexId, alpha: f32, s: &mut WorkerScratch) {
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
    pub(super) fn shrink_to_degree(&self, v: VertexId, alpha: f32, s: &mut WorkerScratch) {
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

    pub(super) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(self.ids.as_slice())
            + std::mem::size_of_val(self.counts.as_slice())
            + std::mem::size_of_val(self.stripes.as_slice())
    }

    /// The finished lists as exact-length `Vec`s. They are copied out from the last vertex
    /// down while the flat array is truncated and shrunk behind them, so the copy never
    /// holds both whole structures (a large array is its own mapping, which shrinking
    /// returns to the system in place).
    pub(super) fn into_graph(self) -> Graph {
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

/// Runs `work` on every vertex of `order`, `scratches.len()` threads at a time, in chunks;
/// between chunks checks for cancellation and (when `progress` gives the count done
/// before this call and the total) reports progress, both on the calling thread.
pub(super) fn run_chunked<F>(
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
