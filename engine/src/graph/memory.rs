//! What a graph build will allocate, known before it starts, and the budget check.
//!
//! The estimate (bytes) is built from:
//!
//! * **vectors**: `n * dim * 4`, the full vectors the build reads (held by the caller);
//! * **adjacency**: the build's flat list array, `ceil(1.3 R)` ids per vertex (the
//!   back-edge slack, see `vamana`), a 2-byte count per vertex and the 4-byte insertion
//!   order, plus [`LOCK_STRIPES`] locks;
//! * **graph**: the finished lists, a 24-byte `Vec` header and at most R ids plus
//!   [`ALLOC_OVERHEAD`] per vertex. They are copied out of the flat array a sixteenth at
//!   a time while the array shrinks behind them: with `F` bytes of flat array and `G` of
//!   finished lists per vertex, the copy holds at most `n max(F, G) + n F / 16`;
//! * **build_codes**: `n * dim`, the 8-bit codes the graph build computes its distances on
//!   (`sq8`; held during the graph build only, freed before the copy-out);
//! * **pq_codes**: `n * pq_bytes`, the compressed vectors the index keeps beside the graph;
//! * **entrance**: the 1% entrance sample's vectors, lists and id maps;
//! * **scratch**, per thread: the visited bitmap with its touched-word list
//!   (`12 * ceil(n / 64)` bytes) plus buffers that scale with the build list `L` and the
//!   slack degree (candidate list, expanded set, prune pool; [`per_thread_buffers`]);
//! * **pq_training**: PQ training's copy of its row sample (at most
//!   [`DEFAULT_TRAINING_SAMPLE`] rows) plus per-row k-means labels and distances. It is
//!   freed before the graph build starts, so the peak is the vectors and codes plus the
//!   larger of this and the graph's parts (adjacency, entrance, scratch). At 784-d the
//!   sample (100 MB) outweighs the graph (25 MB for 60K vertices at R = 64);
//! * **placement**: page placement runs after the build, beside the finished graph, and
//!   holds every vertex's incoming ids in one CSR array (an 8-byte offset per vertex, and
//!   in-degrees sum to at most `n R`), a bit per out-edge marking mutual pairs (which are
//!   then left out of the in-lists) with its own offsets, 16 bytes of per-vertex state (page,
//!   count of links on it, weighted degree, place in its page's member list) and, per
//!   refining thread, a 4-byte link weight per vertex.
//!   Until commit 0b2724b it kept a `Vec` per vertex, whose doubling growth reached twice
//!   the in-degree; on 390K GloVe-50 vectors that phase set the peak.
//!
//! Phases free their working memory before the next starts, so the peak is the vectors
//! and codes plus the largest of: PQ training; adjacency + build codes + entrance + scratch
//! (the graph build); the copy into the finished graph; graph + placement (the entrance graph is
//! built after placement, beside the graph, and is smaller).
//!
//! The test `estimate_covers_what_a_build_allocates` in this module builds graphs and
//! checks the estimate against the capacities of the structures actually allocated.

use super::vamana::{slack_degree, LOCK_STRIPES, MAX_THREADS};
use crate::pq::DEFAULT_TRAINING_SAMPLE;
use crate::VertexId;

/// Bytes malloc adds to each allocation (glibc: an 8-byte header, 16-byte alignment).
pub const ALLOC_OVERHEAD: u64 = 16;
/// The entrance graph's sampling ratio and degree assumed by the estimate (NAVIS defaults).
const ENTRANCE_RATIO: f64 = 0.01;
const ENTRANCE_DEGREE: usize = 32;

/// The estimate, by component.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildMemory {
    pub vectors: u64,
    pub adjacency: u64,
    pub build_codes: u64,
    pub pq_codes: u64,
    pub entrance: u64,
    pub scratch: u64,
    pub pq_training: u64,
    pub graph: u64,
    /// What the copy into the finished graph adds to the adjacency at its peak.
    pub graph_copy: u64,
    pub placement: u64,
}

impl BuildMemory {
    /// The peak over the build's phases (see the module comment).
    pub fn total(&self) -> u64 {
        let graph_build = self.adjacency + self.build_codes + self.entrance + self.scratch;
        let copy_out = self.adjacency + self.graph_copy;
        let placement = self.graph + self.placement.max(self.entrance);
        let phases = [self.pq_training, graph_build, copy_out, placement];
        self.vectors + self.pq_codes + phases.into_iter().max().unwrap_or(0)
    }
}

/// Estimated peak bytes of building a graph of `n` vectors of `dim` floats with out-degree
/// `max_degree` and `pq_bytes`-byte PQ codes. Conservative in what it does not know: it
/// assumes a build list of `max(128, 2 R)` and [`MAX_THREADS`] threads (the per-thread part
/// is about `n / 5` bytes, small next to the vectors). Use [`estimate_build_memory_detailed`]
/// when the build list and thread count are known.
pub fn estimate_build_memory(n: usize, dim: usize, max_degree: usize, pq_bytes: usize) -> u64 {
    let build_list = (2 * max_degree).max(128);
    estimate_build_memory_detailed(n, dim, max_degree, pq_bytes, build_list, MAX_THREADS).total()
}

/// The estimate for a known build list and thread count, by component.
pub fn estimate_build_memory_detailed(
    n: usize,
    dim: usize,
    max_degree: usize,
    pq_bytes: usize,
    build_list: usize,
    threads: usize,
) -> BuildMemory {
    let n64 = n as u64;
    let threads = threads.clamp(1, n.max(1)) as u64;
    let flat = n64 * flat_list_bytes(max_degree);
    let graph = n64 * finished_list_bytes(max_degree);
    BuildMemory {
        vectors: n64 * dim as u64 * 4,
        adjacency: n64 * adjacency_bytes_per_vertex(max_degree)
            + LOCK_STRIPES.min(n) as u64 * std::mem::size_of::<std::sync::Mutex<()>>() as u64,
        // Counted for every metric: inner-product builds skip the codes, and the estimate
        // does not know the metric.
        build_codes: n64 * dim as u64,
        graph,
        graph_copy: graph.saturating_sub(flat) + flat.div_ceil(16),
        pq_codes: n64 * pq_bytes as u64,
        entrance: entrance_bytes(n, dim),
        scratch: threads * (visited_bytes(n) + per_thread_buffers(build_list, max_degree)),
        pq_training: pq_training_bytes(n, dim, threads),
        // Each CSR offset array has one entry more than there are vertices, and the bit
        // array is whole 8-byte words.
        placement: n64 * placement_bytes_per_vertex(max_degree, threads) + 24 * u64::from(n > 0),
    }
}

/// The training sample's values plus, per concurrently trained subspace (one per thread),
/// a label and a distance per row.
pub(crate) fn pq_training_bytes(n: usize, dim: usize, threads: u64) -> u64 {
    let rows = n.min(DEFAULT_TRAINING_SAMPLE) as u64;
    rows * dim as u64 * 4 + threads * rows * 8
}

/// Two CSR offsets (in-lists, out-slot bits), at most R incoming ids (in-degrees sum to
/// the out-degrees, at most `n R`; mutual pairs are kept as bits instead, so this is the
/// bound for a graph without any), a mutual-pair bit per out-slot, 16 bytes of refinement
/// state, and each refining thread's link weights.
fn placement_bytes_per_vertex(max_degree: usize, threads: u64) -> u64 {
    2 * 8 + max_degree as u64 * 4 + (max_degree as u64).div_ceil(8) + 16 + 4 * threads
}

/// The flat array's slots for one vertex: the back-edge slack.
fn flat_list_bytes(max_degree: usize) -> u64 {
    slack_degree(max_degree) as u64 * 4
}

/// A finished exact-length list of at most R ids.
fn finished_list_bytes(max_degree: usize) -> u64 {
    std::mem::size_of::<Vec<VertexId>>() as u64 + max_degree as u64 * 4 + ALLOC_OVERHEAD
}

/// Flat slots, a 2-byte count and the 4-byte insertion order.
fn adjacency_bytes_per_vertex(max_degree: usize) -> u64 {
    flat_list_bytes(max_degree) + 2 + 4
}

/// Visited bitmap (8 bytes per 64 vertices) and its list of touched words (4 bytes each).
fn visited_bytes(n: usize) -> u64 {
    n.div_ceil(64) as u64 * 12
}

/// Buffers of one thread that do not depend on n. A search expands about L to 2 L
/// vertices; the vectors holding them double as they grow, so 4 L entries bound the
/// capacity. The prune pool holds the expanded set plus a list; the prune itself keeps a
/// 5-byte flag/factor pair per candidate and returns at most R ids.
pub fn per_thread_buffers(build_list: usize, max_degree: usize) -> u64 {
    let l = build_list as u64;
    let slack = slack_degree(max_degree) as u64;
    let candidates = (l + 1) * 12;
    let explored = 4 * l * 8;
    let pool = (4 * l + 2 * slack) * 8;
    let prune = (4 * l + 2 * slack) * 5 + max_degree as u64 * 4;
    let neighbours = 2 * slack * 4 * 2;
    candidates + explored + pool + prune + neighbours + 8 * ALLOC_OVERHEAD
}

pub(crate) fn entrance_bytes(n: usize, dim: usize) -> u64 {
    entrance_member_bytes((n as f64 * ENTRANCE_RATIO).ceil() as usize, dim)
}

/// An entrance graph of `sampled` members of `dim` dimensions.
pub(crate) fn entrance_member_bytes(sampled: usize, dim: usize) -> u64 {
    let sampled = sampled as u64;
    // Vector, list with slack, global id, and a hash-map entry (id pair plus control byte,
    // at a load factor of 7/8).
    // Flat lists and finished lists both, as the copy between them is bounded by their sum.
    let graph = adjacency_bytes_per_vertex(ENTRANCE_DEGREE) + finished_list_bytes(ENTRANCE_DEGREE);
    let per = dim as u64 * 4 + graph + 4 + 10;
    let locks = LOCK_STRIPES.min(sampled as usize) as u64 * 8;
    sampled * per
        + locks
        + visited_bytes(sampled as usize)
        + per_thread_buffers(64, ENTRANCE_DEGREE)
}

/// The most rows whose in-memory build fits in `budget` bytes, counting `row_overhead` bytes
/// the caller holds per row besides the vectors (a heap TID, say), or 0 when not even one
/// does. The estimate grows with the row count, so a binary search finds the boundary. A
/// memory-bounded build indexes this many rows in memory and inserts the rest.
pub fn rows_within_budget(
    budget: u64,
    row_overhead: u64,
    dim: usize,
    max_degree: usize,
    pq_bytes: usize,
    build_list: usize,
    threads: usize,
) -> usize {
    let need = |n: usize| {
        estimate_build_memory_detailed(n, dim, max_degree, pq_bytes, build_list, threads).total()
            + n as u64 * row_overhead
    };
    // Each row costs at least its floats, so the answer is below budget / (4 dim).
    most_within(
        budget,
        (budget / (4 * dim.max(1) as u64)) as usize + 2,
        need,
    )
}

/// The largest `n` below `too_many` whose `need(n)`, growing with `n`, is within `budget`
/// (0 when not even 1 is): a binary search.
pub(crate) fn most_within(budget: u64, too_many: usize, need: impl Fn(usize) -> u64) -> usize {
    if too_many <= 1 || need(1) > budget {
        return 0;
    }
    let (mut fits, mut too_many) = (1usize, too_many);
    while too_many - fits > 1 {
        let mid = fits + (too_many - fits) / 2;
        if need(mid) <= budget {
            fits = mid;
        } else {
            too_many = mid;
        }
    }
    fits
}

/// Peak bytes of a graph build alone over `n` vectors: the vectors, and the larger of the
/// graph build (adjacency, 8-bit codes, scratch) and the copy into the finished lists. What
/// one partition of a memory-bounded build holds (`crate::index::partitioned`): PQ training,
/// placement and the entrance graph happen once, outside the partitions.
pub fn graph_build_bytes(
    n: usize,
    dim: usize,
    max_degree: usize,
    build_list: usize,
    threads: usize,
) -> u64 {
    let m = estimate_build_memory_detailed(n, dim, max_degree, 0, build_list, threads);
    let graph_build = m.adjacency + m.build_codes + m.scratch;
    let copy_out = m.adjacency + m.graph_copy;
    // After the copy the finished lists stay beside the vectors while they are spooled.
    m.vectors + graph_build.max(copy_out).max(m.graph)
}

/// The most rows whose [`graph_build_bytes`] fit in `budget` (0 when not one does).
pub fn graph_rows_within(
    budget: u64,
    dim: usize,
    max_degree: usize,
    build_list: usize,
    threads: usize,
) -> usize {
    let need = |n: usize| graph_build_bytes(n, dim, max_degree, build_list, threads);
    most_within(
        budget,
        (budget / (4 * dim.max(1) as u64)) as usize + 2,
        need,
    )
}

/// Ok when `estimate` fits in `budget` bytes; otherwise a message saying how much is needed
/// and what to change.
pub fn check_budget(estimate: u64, budget: u64) -> Result<(), String> {
    if estimate <= budget {
        return Ok(());
    }
    let suggestion = estimate.div_ceil(1 << 20).next_multiple_of(64);
    Err(format!(
        "building this index needs about {} of memory but only {} is allowed; raise \
         maintenance_work_mem to at least {suggestion}MB (for example SET maintenance_work_mem \
         = '{suggestion}MB'), or lower max_degree or pq_bytes",
        human_bytes(estimate),
        human_bytes(budget)
    ))
}

/// "1.5 GB", "820 MB", "12 kB", "512 bytes", in PostgreSQL's units (powers of 1024).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TB", 1 << 40),
        ("GB", 1 << 30),
        ("MB", 1 << 20),
        ("kB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if b >= size {
            let v = b as f64 / size as f64;
            return if v < 10.0 {
                format!("{v:.1} {unit}")
            } else {
                format!("{v:.0} {unit}")
            };
        }
    }
    format!("{b} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::Metric;
    use crate::graph::testutil::clustered;
    use crate::graph::vamana::{build_vamana_with_stats, BuildControl, VamanaParams};

    #[test]
    fn components_follow_the_formula() {
        let m = estimate_build_memory_detailed(1000, 16, 32, 16, 64, 2);
        assert_eq!(m.vectors, 1000 * 16 * 4);
        assert_eq!(m.pq_codes, 16_000);
        assert_eq!(m.build_codes, 16_000);
        let lock = std::mem::size_of::<std::sync::Mutex<()>>() as u64;
        assert_eq!(m.adjacency, 1000 * (42 * 4 + 2 + 4) + 1000 * lock);
        assert_eq!(m.graph, 1000 * (24 + 32 * 4 + ALLOC_OVERHEAD));
        assert_eq!(m.graph_copy, (1000 * 42 * 4_u64).div_ceil(16));
        assert_eq!(m.scratch, 2 * (16 * 12 + per_thread_buffers(64, 32)));
        assert_eq!(m.pq_training, 1000 * 16 * 4 + 2 * 1000 * 8);
        assert_eq!(m.placement, 1000 * (16 + 32 * 4 + 4 + 16 + 2 * 4) + 24);
        // At 16-d the placement phase beside the finished graph is the largest; only one
        // phase's working memory is held at a time.
        assert!(m.graph + m.placement > m.adjacency + m.build_codes + m.entrance + m.scratch);
        assert!(m.graph + m.placement > m.adjacency + m.graph_copy);
        assert!(m.graph + m.placement > m.pq_training);
        assert_eq!(m.total(), m.vectors + m.pq_codes + m.graph + m.placement);
        // At 784-d the training sample (all 1000 rows) outweighs the graph parts.
        let wide = estimate_build_memory_detailed(1000, 784, 32, 16, 64, 2);
        assert_eq!(
            wide.total(),
            wide.vectors + wide.pq_codes + wide.pq_training
        );
        // The sample is capped, so at scale the graph parts dominate again.
        let big = estimate_build_memory_detailed(10_000_000, 128, 64, 32, 128, 2);
        assert_eq!(
            big.pq_training,
            DEFAULT_TRAINING_SAMPLE as u64 * (128 * 4 + 16)
        );
        // The default estimate assumes more threads and a longer list, never less memory.
        assert!(estimate_build_memory(1000, 128, 32, 16) >= m.total());
        assert_eq!(
            estimate_build_memory(0, 128, 32, 16),
            per_thread_buffers(128, 32) + per_thread_buffers(64, 32)
        );
    }

    #[test]
    fn estimate_covers_what_a_build_allocates() {
        for (n, dim, r, l, threads) in [
            (3000, 16, 16, 32, 1),
            (4000, 8, 24, 48, 2),
            (50, 4, 64, 64, 2),
        ] {
            let data = clustered(n, dim, 10, n as u64);
            let params = VamanaParams {
                max_degree: r,
                build_list: l,
                alpha: 1.2,
                seed: 1,
                threads,
            };
            let (graph, stats) =
                build_vamana_with_stats(&data, dim, Metric::L2, &params, &BuildControl::none())
                    .unwrap();
            let est = estimate_build_memory_detailed(n, dim, r, 0, l, threads);
            let actual_adjacency = stats.adjacency_bytes + stats.order_bytes;
            assert_eq!(actual_adjacency as u64, est.adjacency);
            let headers = graph.adjacency.capacity() * std::mem::size_of::<Vec<VertexId>>();
            let lists: usize = graph.adjacency.iter().map(|l| l.capacity() * 4).sum();
            assert_eq!(graph.adjacency.capacity(), n, "no spare headers");
            assert!(graph.adjacency.iter().all(|l| l.capacity() == l.len()));
            // Allocator headers are the only part of the estimate not measured here.
            let actual_graph = (headers + lists) as u64 + n as u64 * ALLOC_OVERHEAD;
            assert!(actual_graph <= est.graph, "{actual_graph} > {}", est.graph);
            assert!(
                stats.scratch_bytes as u64 <= est.scratch,
                "{} > {}",
                stats.scratch_bytes,
                est.scratch
            );
            assert_eq!(est.vectors as usize, std::mem::size_of_val(data.as_slice()));
            assert_eq!(
                stats.codes_bytes as u64, est.build_codes,
                "one byte per value"
            );
        }
    }

    #[test]
    fn budget_message_names_the_need_and_the_fix() {
        assert!(check_budget(100, 100).is_ok());
        let err = check_budget(3 << 30, 64 << 20).unwrap_err();
        assert!(err.contains("3.0 GB"), "{err}");
        assert!(err.contains("64 MB"), "{err}");
        assert!(err.contains("maintenance_work_mem"), "{err}");
        assert!(err.contains("3072MB"), "{err}");
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(1536), "1.5 kB");
        assert_eq!(human_bytes(820 << 20), "820 MB");
    }

    #[test]
    fn rows_within_budget_is_the_largest_count_that_fits() {
        let (dim, r, pq, l, t) = (384, 64, 96, 128, 2);
        for budget in [4u64 << 20, 64 << 20, 1 << 30] {
            let n = rows_within_budget(budget, 8, dim, r, pq, l, t);
            assert!(n > 0, "{budget}");
            let at = |n: usize| {
                estimate_build_memory_detailed(n, dim, r, pq, l, t).total() + 8 * n as u64
            };
            assert!(at(n) <= budget, "{n} rows need {} > {budget}", at(n));
            assert!(
                at(n + 1) > budget,
                "{} rows would fit in {budget} too",
                n + 1
            );
        }
        assert_eq!(rows_within_budget(1024, 8, dim, r, pq, l, t), 0);
    }
}
