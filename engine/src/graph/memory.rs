//! What a graph build will allocate, known before it starts, and the budget check.
//!
//! The estimate (bytes) is built from:
//!
//! * **vectors**: `n * dim * 4`, the full vectors the build reads (held by the caller);
//! * **adjacency**: per vertex, one `Mutex<Vec<u32>>` (32 bytes) plus a list allocated
//!   once for `ceil(1.3 R)` ids (the back-edge slack, see `vamana`) plus
//!   [`ALLOC_OVERHEAD`] for the allocator's header; plus the finished `Vec<Vec<u32>>`'s
//!   24-byte headers, which exist beside the mutex array while the result is assembled;
//!   plus the 4-byte insertion order;
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
//!   holds every vertex's incoming list (a `Vec` each, whose doubling growth can reach
//!   twice the in-degree, and in-degrees sum to at most `n R`) plus per-vertex page and
//!   slot arrays. On 100K MiniLM vectors at R = 64 this phase set the peak (238 MB), above
//!   an estimate that had left it out (204 MB).
//!
//! Phases free their working memory before the next starts, so the peak is the vectors
//! and codes plus the largest of: PQ training; adjacency + entrance + scratch (the graph
//! build); adjacency + placement.
//!
//! The test `estimate_covers_what_a_build_allocates` in this module builds graphs and
//! checks the estimate against the capacities of the structures actually allocated.

use super::vamana::{slack_degree, MAX_THREADS};
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
    pub pq_codes: u64,
    pub entrance: u64,
    pub scratch: u64,
    pub pq_training: u64,
    pub placement: u64,
}

impl BuildMemory {
    /// The peak over the build's phases (see the module comment).
    pub fn total(&self) -> u64 {
        let graph_build = self.adjacency + self.entrance + self.scratch;
        let placement = self.adjacency + self.placement;
        self.vectors + self.pq_codes + graph_build.max(placement).max(self.pq_training)
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
    BuildMemory {
        vectors: n64 * dim as u64 * 4,
        adjacency: n64 * adjacency_bytes_per_vertex(max_degree),
        pq_codes: n64 * pq_bytes as u64,
        entrance: entrance_bytes(n, dim),
        scratch: threads * (visited_bytes(n) + per_thread_buffers(build_list, max_degree)),
        pq_training: pq_training_bytes(n, dim, threads),
        placement: n64 * placement_bytes_per_vertex(max_degree),
    }
}

/// The training sample's values plus, per concurrently trained subspace (one per thread),
/// a label and a distance per row.
fn pq_training_bytes(n: usize, dim: usize, threads: u64) -> u64 {
    let rows = n.min(DEFAULT_TRAINING_SAMPLE) as u64;
    rows * dim as u64 * 4 + threads * rows * 8
}

/// An incoming-list header and allocation with room for twice the mean in-degree bound
/// (R), plus 16 bytes of page, slot and page-cell arrays.
fn placement_bytes_per_vertex(max_degree: usize) -> u64 {
    let header = std::mem::size_of::<Vec<VertexId>>() as u64;
    header + ALLOC_OVERHEAD + 2 * max_degree as u64 * 4 + 16
}

fn adjacency_bytes_per_vertex(max_degree: usize) -> u64 {
    let lock = std::mem::size_of::<std::sync::Mutex<Vec<VertexId>>>() as u64;
    let list = slack_degree(max_degree) as u64 * 4 + ALLOC_OVERHEAD;
    let result_header = std::mem::size_of::<Vec<VertexId>>() as u64;
    let order = 4;
    lock + list + result_header + order
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

fn entrance_bytes(n: usize, dim: usize) -> u64 {
    let sampled = (n as f64 * ENTRANCE_RATIO).ceil() as u64;
    // Vector, list with slack, global id, and a hash-map entry (id pair plus control byte,
    // at a load factor of 7/8).
    let per = dim as u64 * 4 + adjacency_bytes_per_vertex(ENTRANCE_DEGREE) + 4 + 10;
    sampled * per + visited_bytes(sampled as usize) + per_thread_buffers(64, ENTRANCE_DEGREE)
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
        let m = estimate_build_memory_detailed(1000, 128, 32, 16, 64, 2);
        assert_eq!(m.vectors, 1000 * 128 * 4);
        assert_eq!(m.pq_codes, 16_000);
        let lock = std::mem::size_of::<std::sync::Mutex<Vec<VertexId>>>() as u64;
        assert_eq!(
            m.adjacency,
            1000 * (lock + 42 * 4 + ALLOC_OVERHEAD + 24 + 4)
        );
        assert_eq!(m.scratch, 2 * (16 * 12 + per_thread_buffers(64, 32)));
        assert_eq!(m.pq_training, 1000 * 128 * 4 + 2 * 1000 * 8);
        assert_eq!(m.placement, 1000 * (24 + ALLOC_OVERHEAD + 2 * 32 * 4 + 16));
        // Here the placement phase beside the finished graph is the largest; only one
        // phase's working memory is held at a time.
        assert!(m.placement > m.entrance + m.scratch);
        assert!(m.adjacency + m.placement > m.pq_training);
        assert_eq!(
            m.total(),
            m.vectors + m.pq_codes + m.adjacency + m.placement
        );
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
            let result_headers = graph.adjacency.capacity() * std::mem::size_of::<Vec<VertexId>>();
            let actual_adjacency = stats.adjacency_bytes + stats.order_bytes + result_headers;
            assert!(
                actual_adjacency as u64 <= est.adjacency,
                "{actual_adjacency} > {}",
                est.adjacency
            );
            // Allocator headers are the only part of the estimate not measured here.
            let slop = n as u64 * ALLOC_OVERHEAD;
            assert!(
                est.adjacency - actual_adjacency as u64 <= slop,
                "estimate too loose"
            );
            assert!(
                stats.scratch_bytes as u64 <= est.scratch,
                "{} > {}",
                stats.scratch_bytes,
                est.scratch
            );
            assert_eq!(est.vectors as usize, std::mem::size_of_val(data.as_slice()));
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
}
