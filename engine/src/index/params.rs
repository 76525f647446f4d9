//! The index options a build takes ([`IndexParams`]), their defaults and their checks.

use super::IndexError;
use crate::distance::Metric;
use crate::graph::VamanaParams;
use crate::storage::EdgePageLayout;

/// The fewest PQ subspaces (code bytes) a default code has; vectors of fewer dimensions get
/// one per dimension (8-bit scalar quantization, by k-means).
///
/// A subspace's 256 centroids resolve each of its `s` coordinates into about `256^(1/s)`
/// levels. In many dimensions `dim / 4` subspaces of 4 levels per coordinate rank well
/// enough, because the errors of many subspaces average out and CASR reranks the rest. In few
/// dimensions there is nothing to average: 3-d vectors got a 1-byte code, 256 cells for
/// 10,000 rows, so about 40 rows tie at each PQ distance, the search list filled with ties
/// and the true neighbours fell off it (recall@10 0.65 at the default list, also with CASR
/// off). One subspace per dimension gives 1.0; 12 subspaces lift uniform 16-, 24- and 32-d
/// data from 0.95 to 0.997 or more. The cost is at most 12 bytes of memory per vector, and
/// 12 is what `dim / 4` gives at 48 dimensions, so codes change only below that (no
/// benchmark set: glove-50 keeps its 12 bytes). In 1 or 2 dimensions 256 levels per
/// coordinate still tie once there are many more rows than levels (1-d, 10,000 rows:
/// recall@10 0.84); only exact distances would help there.
pub const MIN_PQ_SUBSPACES: usize = 12;

/// Build-time parameters (index options).
#[derive(Clone, Debug, PartialEq)]
pub struct IndexParams {
    pub metric: Metric,
    /// The column's declared dimension, if it has one: rows must match it, and an index
    /// over zero rows takes it. `None` lets the rows decide (zero rows: a placeholder).
    pub dim: Option<usize>,
    /// R.
    pub max_degree: usize,
    /// Vamana build list L.
    pub build_list: usize,
    pub alpha: f32,
    /// PQ code bytes per vector; `None` picks [`IndexParams::pq_bytes_for`].
    pub pq_bytes: Option<usize>,
    /// Entrance graph size as a fraction of the vertices (r_ent).
    pub entrance_ratio: f32,
    /// Entrance graph degree (R_ent).
    pub entrance_degree: usize,
    /// Worker threads for PQ training, encoding and the graph build.
    pub threads: usize,
    /// Refuse to start a build whose estimate exceeds this many bytes.
    pub memory_budget: Option<u64>,
    pub seed: u64,
}

/// The build list of an index whose options do not name one, unless its max_degree is larger
/// (L = R at the default R; RFC 0007).
pub const DEFAULT_GRAPH_BUILD_LIST: usize = 96;

impl Default for IndexParams {
    fn default() -> IndexParams {
        IndexParams {
            metric: Metric::L2,
            dim: None,
            max_degree: 96,
            // L = R, the smallest the option check accepts (RFC 0007): 22-28% less graph-build
            // time than the NAVIS release's 128 on 200K MiniLM and 1M synthetic rows, for
            // 0.1-0.35 points of recall@10 in the same run (benchmarks/results/compare.md).
            build_list: DEFAULT_GRAPH_BUILD_LIST,
            alpha: 1.2,
            pq_bytes: None,
            entrance_ratio: 0.01,
            entrance_degree: 32,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_budget: None,
            seed: 0x6e61_7669,
        }
    }
}

impl IndexParams {
    /// The PQ code size used for `dim` dimensions: `dim / 4` (4 dimensions per subspace),
    /// at most 128, and at least [`MIN_PQ_SUBSPACES`] (or one per dimension below that).
    pub fn pq_bytes_for(&self, dim: usize) -> usize {
        self.pq_bytes
            .unwrap_or((dim / 4).clamp(dim.min(MIN_PQ_SUBSPACES), 128))
    }

    /// The main graph's build parameters (the in-memory build's, and each partition's of a
    /// memory-bounded build).
    pub(super) fn vamana(&self) -> VamanaParams {
        VamanaParams {
            max_degree: self.max_degree,
            build_list: self.build_list,
            alpha: self.alpha,
            seed: self.seed,
            threads: self.threads,
        }
    }

    pub(super) fn validate(&self, dim: usize) -> Result<(), IndexError> {
        let bad = |m: String| Err(IndexError::Invalid(m));
        let pq = self.pq_bytes_for(dim);
        if pq == 0 || pq > dim {
            return bad(format!(
                "pq_bytes must be between 1 and the dimension {dim}, got {pq}"
            ));
        }
        if !(self.entrance_ratio > 0.0 && self.entrance_ratio <= 1.0) {
            return bad(format!(
                "entrance_ratio must be in (0, 1], got {}",
                self.entrance_ratio
            ));
        }
        if self.entrance_degree == 0 {
            return bad("entrance_degree must be at least 1".into());
        }
        if self.threads == 0 {
            return bad("threads must be at least 1".into());
        }
        EdgePageLayout::new(self.max_degree)?;
        Ok(())
    }
}
