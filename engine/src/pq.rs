//! Product quantisation, as NAVIS uses it.
//!
//! Every vertex is kept in memory as a `pq_bytes`-byte code: the `dim` dimensions are split
//! into `pq_bytes` contiguous subspaces (as evenly as possible: the first `dim % pq_bytes`
//! get one extra dimension) and each subspace is replaced by the index of its nearest of up
//! to 256 centroids. Traversal ranks candidates by asymmetric distance (ADC): per query, a
//! [`QueryTable`] holds the distance from each query subvector to each centroid, and a code's
//! distance is the sum of `pq_bytes` table lookups. Inserts build the same tables for the
//! vertices whose lists they admit into ([`ProductQuantizer::table_under`]) and prune with
//! [`reconstruct`]ed ("deflated") vectors where the exact vector was not loaded.
//!
//! Distances approximate [`Metric::search_distance`]: squared L2 for `L2` and `Cosine` (cosine
//! indexes store unit vectors, so the caller trains and encodes normalised vectors), negative
//! inner product for `InnerProduct`. In every case the codebook is trained with L2 k-means
//! on the raw vectors, so a code approximates the vector itself and the ADC value is exactly
//! the metric's distance from the query to the reconstruction (up to float rounding).
//!
//! [`reconstruct`]: ProductQuantizer::reconstruct

use std::fmt;
use std::ops::Range;

use rand::seq::index::sample as sample_indices;
use rand_chacha::ChaCha8Rng;

use crate::kmeans::CentroidTable;
pub use crate::pq_training::PqTraining;
use crate::{Metric, MAX_DIM};

/// Centroids per subspace: a code byte indexes them.
pub const MAX_CENTROIDS: usize = 256;
/// Default upper bound on training rows: 128 per centroid. Faiss allows 256; on
/// Fashion-MNIST (60K rows, 128 subspaces) halving the sample halved training time (15 s to
/// 8 s of CPU) for 2.3% more reconstruction error, which the exact rerank absorbs.
pub const DEFAULT_TRAINING_SAMPLE: usize = 32_768;

/// What is wrong with a PQ request or a serialised codebook.
#[derive(Clone, Debug, PartialEq)]
pub enum PqError {
    /// A parameter is out of range (`pq_bytes`, dimensions, sample size).
    BadParameter(String),
    /// The training vectors cannot be used.
    BadInput(String),
    /// Serialised bytes are not a valid codebook.
    BadCodebook(String),
}

impl fmt::Display for PqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PqError::BadParameter(m) | PqError::BadInput(m) | PqError::BadCodebook(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for PqError {}

/// Training knobs beyond the shape; [`PqTrainConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
pub struct PqTrainConfig {
    pub seed: u64,
    /// Threads for training (subspaces are trained in parallel).
    pub threads: usize,
    /// Train on a seeded sample of at most this many rows.
    pub max_sample: usize,
    /// Lloyd iterations per subspace.
    pub max_iters: usize,
}

impl PqTrainConfig {
    pub fn new(seed: u64, threads: usize) -> Self {
        PqTrainConfig {
            seed,
            threads,
            max_sample: DEFAULT_TRAINING_SAMPLE,
            max_iters: 12,
        }
    }
}

/// A trained PQ codebook.
#[derive(Clone, Debug)]
pub struct ProductQuantizer {
    metric: Metric,
    dim: usize,
    /// Centroids per subspace (256 unless the training sample was smaller).
    k: usize,
    /// Subspace `s` covers dimensions `bounds[s]..bounds[s + 1]`.
    bounds: Vec<usize>,
    /// Subspace `s`'s `k` centroids, row-major, start at `k * bounds[s]`.
    codebook: Vec<f32>,
    /// The same centroids in the layout of the encoding and table kernels.
    tables: Vec<CentroidTable>,
}

/// Boundaries of `m` contiguous subspaces of `dim` dimensions, the first `dim % m` one wider.
pub(crate) fn subspace_bounds(dim: usize, m: usize) -> Vec<usize> {
    let (base, wider) = (dim / m, dim % m);
    (0..=m).map(|s| s * base + s.min(wider)).collect()
}

pub(crate) fn check_shape(dim: usize, pq_bytes: usize) -> Result<(), PqError> {
    if dim == 0 || dim > MAX_DIM {
        return Err(PqError::BadParameter(format!(
            "PQ needs between 1 and {MAX_DIM} dimensions, got {dim}"
        )));
    }
    if pq_bytes == 0 || pq_bytes > dim {
        return Err(PqError::BadParameter(format!(
            "pq_bytes must be between 1 and the dimension {dim}, got {pq_bytes}"
        )));
    }
    Ok(())
}

impl ProductQuantizer {
    /// Trains a codebook on `n` rows of `dim` values (`data.len() == n * dim`) with default
    /// sample size and iterations. For `Metric::Cosine`, pass normalised vectors.
    pub fn train(
        data: &[f32],
        dim: usize,
        n: usize,
        pq_bytes: usize,
        metric: Metric,
        seed: u64,
        threads: usize,
    ) -> Result<Self, PqError> {
        Self::train_with(
            data,
            dim,
            n,
            pq_bytes,
            metric,
            &PqTrainConfig::new(seed, threads),
        )
    }

    /// [`ProductQuantizer::train`] with every knob explicit.
    pub fn train_with(
        data: &[f32],
        dim: usize,
        n: usize,
        pq_bytes: usize,
        metric: Metric,
        config: &PqTrainConfig,
    ) -> Result<Self, PqError> {
        let job = PqTraining::prepare(data, dim, n, pq_bytes, metric, config)?;
        job.train_on(config.threads);
        job.finish()
    }

    /// A quantizer from an existing codebook: subspace `s`'s `k` centroids, row-major, at
    /// offset `k * first_dimension(s)` (the layout [`ProductQuantizer::codebook`] returns).
    pub fn from_codebook(
        metric: Metric,
        dim: usize,
        pq_bytes: usize,
        k: usize,
        codebook: Vec<f32>,
    ) -> Result<Self, PqError> {
        check_shape(dim, pq_bytes)?;
        if k == 0 || k > MAX_CENTROIDS {
            return Err(PqError::BadCodebook(format!(
                "PQ codebook must have 1 to {MAX_CENTROIDS} centroids per subspace, got {k}"
            )));
        }
        if codebook.len() != k * dim {
            return Err(PqError::BadCodebook(format!(
                "PQ codebook has {} values, expected {k} x {dim}",
                codebook.len()
            )));
        }
        if let Some(i) = codebook.iter().position(|v| !v.is_finite()) {
            return Err(PqError::BadCodebook(format!(
                "PQ codebook value {i} is {}",
                codebook[i]
            )));
        }
        Ok(Self::assemble(
            metric,
            dim,
            k,
            subspace_bounds(dim, pq_bytes),
            codebook,
        ))
    }

    pub(crate) fn assemble(
        metric: Metric,
        dim: usize,
        k: usize,
        bounds: Vec<usize>,
        codebook: Vec<f32>,
    ) -> Self {
        let tables = bounds
            .windows(2)
            .map(|b| CentroidTable::new(&codebook[k * b[0]..k * b[1]], k, b[1] - b[0]))
            .collect();
        ProductQuantizer {
            metric,
            dim,
            k,
            bounds,
            codebook,
            tables,
        }
    }

    pub fn metric(&self) -> Metric {
        self.metric
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Bytes per code, which is also the number of subspaces.
    pub fn pq_bytes(&self) -> usize {
        self.tables.len()
    }

    pub fn centroids_per_subspace(&self) -> usize {
        self.k
    }

    /// The dimensions subspace `s` covers. Panics if `s >= pq_bytes()`.
    pub fn subspace(&self, s: usize) -> Range<usize> {
        self.bounds[s]..self.bounds[s + 1]
    }

    /// All centroids, subspace by subspace (see [`ProductQuantizer::from_codebook`]).
    pub fn codebook(&self) -> &[f32] {
        &self.codebook
    }

    /// Centroid `c` of subspace `s`. Panics if either is out of range.
    pub fn centroid(&self, s: usize, c: usize) -> &[f32] {
        let width = self.bounds[s + 1] - self.bounds[s];
        let start = self.k * self.bounds[s] + c * width;
        &self.codebook[start..start + width]
    }

    /// The code of `v`. Panics if `v.len() != dim()` (callers validate vectors first).
    pub fn encode(&self, v: &[f32]) -> Vec<u8> {
        let mut code = vec![0u8; self.pq_bytes()];
        self.encode_into(v, &mut code);
        code
    }

    /// Writes the code of `v` into `out`. Panics if `v.len() != dim()` or
    /// `out.len() != pq_bytes()`.
    pub fn encode_into(&self, v: &[f32], out: &mut [u8]) {
        assert_eq!(
            v.len(),
            self.dim,
            "PQ encode: vector has the wrong dimension"
        );
        assert_eq!(
            out.len(),
            self.pq_bytes(),
            "PQ encode: code buffer has the wrong length"
        );
        for (s, (table, byte)) in self.tables.iter().zip(out.iter_mut()).enumerate() {
            // Fits: the table has at most 256 centroids.
            *byte = table.nearest(&v[self.bounds[s]..self.bounds[s + 1]]).0 as u8;
        }
    }

    /// Codes of all rows of `data` (rows of `dim()` values), concatenated, computed in parallel.
    /// Panics if `data` is not a whole number of rows.
    pub fn encode_batch(&self, data: &[f32], threads: usize) -> Vec<u8> {
        assert_eq!(
            data.len() % self.dim,
            0,
            "PQ encode: data is not a whole number of rows"
        );
        let (m, rows) = (self.pq_bytes(), data.len() / self.dim);
        let mut codes = vec![0u8; rows * m];
        if threads <= 1 {
            self.encode_rows(data, &mut codes);
            return codes;
        }
        let rows_per_thread = rows.div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for (chunk, out) in codes.chunks_mut(rows_per_thread * m).enumerate() {
                let input = &data[chunk * rows_per_thread * self.dim..];
                scope.spawn(move || self.encode_rows(input, out));
            }
        });
        codes
    }

    /// Encodes consecutive rows into consecutive codes (`out` decides how many), subspace by
    /// subspace over small blocks of rows: one subspace's centroids then stay in L1 across
    /// the block, where row by row the whole codebook (384 KiB at 384-d) would stream
    /// through the cache for every vector.
    fn encode_rows(&self, rows: &[f32], out: &mut [u8]) {
        const BLOCK_ROWS: usize = 32;
        let (dim, m) = (self.dim, self.pq_bytes());
        for (block, codes) in rows
            .chunks(BLOCK_ROWS * dim)
            .zip(out.chunks_mut(BLOCK_ROWS * m))
        {
            for (s, table) in self.tables.iter().enumerate() {
                let dims = self.subspace(s);
                for (v, code) in block.chunks_exact(dim).zip(codes.chunks_exact_mut(m)) {
                    // Fits: the table has at most 256 centroids.
                    code[s] = table.nearest(&v[dims.clone()]).0 as u8;
                }
            }
        }
    }

    /// The vector a code stands for (the "deflated" vector). Panics if
    /// `code.len() != pq_bytes()`.
    pub fn reconstruct(&self, code: &[u8]) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        self.reconstruct_into(code, &mut v);
        v
    }

    /// Writes the vector a code stands for into `out`. Panics on length mismatches; a byte
    /// naming a centroid that does not exist (only possible if fewer than 256 were trained)
    /// reconstructs as zeros.
    pub fn reconstruct_into(&self, code: &[u8], out: &mut [f32]) {
        assert_eq!(
            code.len(),
            self.pq_bytes(),
            "PQ reconstruct: code has the wrong length"
        );
        assert_eq!(
            out.len(),
            self.dim,
            "PQ reconstruct: output has the wrong dimension"
        );
        for (s, &c) in code.iter().enumerate() {
            let target = &mut out[self.bounds[s]..self.bounds[s + 1]];
            if (c as usize) < self.k {
                copy_centroid(target, self.centroid(s, c as usize));
            } else {
                target.fill(0.0);
            }
        }
    }

    /// The distance table of query `q`. Panics if `q.len() != dim()`.
    pub fn query_table(&self, q: &[f32]) -> QueryTable {
        let mut table = QueryTable::new();
        self.query_table_into(q, &mut table);
        table
    }

    /// Fills `table` for query `q`, reusing its allocation (for per-query reuse in a search
    /// loop). Panics if `q.len() != dim()`.
    pub fn query_table_into(&self, q: &[f32], table: &mut QueryTable) {
        self.table_under(self.metric, q, table);
    }

    /// [`ProductQuantizer::query_table_into`] under `metric` instead of the quantizer's own
    /// (an inner-product index prunes in L2). Panics if `q.len() != dim()`.
    pub fn table_under(&self, metric: Metric, q: &[f32], table: &mut QueryTable) {
        assert_eq!(
            q.len(),
            self.dim,
            "PQ query table: query has the wrong dimension"
        );
        // Every entry below `k` is written below; entries past `k` belong to no centroid, and
        // infinity ranks a corrupt code last. A reused table is not filled first.
        let rows = table.rows_for(self.pq_bytes());
        if self.k < MAX_CENTROIDS {
            for row in rows.iter_mut() {
                row[self.k..].fill(f32::INFINITY);
            }
        }
        for (s, (centroids, row)) in self.tables.iter().zip(rows.iter_mut()).enumerate() {
            let sub = &q[self.bounds[s]..self.bounds[s + 1]];
            match metric {
                Metric::L2 | Metric::Cosine => centroids.squared_distances(sub, row),
                Metric::InnerProduct => centroids.negative_dots(sub, row),
                // The sum over subspaces of L1 distances to the centroids is the L1 distance
                // to the reconstruction, as squared L2 is for L2. The centroids are still
                // means (k-means in L2), which approximate well enough to steer a search
                // whose results are reranked exactly.
                Metric::L1 => {
                    for (c, out) in row.iter_mut().enumerate().take(self.k) {
                        *out = crate::distance::l1(sub, self.centroid(s, c));
                    }
                }
            }
        }
    }
}

/// `to.copy_from_slice(from)` for a subspace's few floats. A copy of a length known only at
/// run time is a call to `memcpy`, one per subspace: reconstructions made that 17% of an
/// inserting backend's CPU (perf, 180K MiniLM rows, 96 subspaces of 4). The common widths
/// get a copy of constant length, which compiles to a few moves.
#[inline(always)]
fn copy_centroid(to: &mut [f32], from: &[f32]) {
    macro_rules! constant_width {
        ($($n:literal)*) => {
            match to.len() {
                $($n => to[..$n].copy_from_slice(&from[..$n]),)*
                _ => to.copy_from_slice(from),
            }
        };
    }
    constant_width!(1 2 3 4 5 6 7 8 12 16);
}

/// Rows to train on, ascending: all of them when there are at most `max_sample`, otherwise a
/// seeded sample.
pub(crate) fn sample_rows(n: usize, max_sample: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    if n <= max_sample {
        return (0..n).collect();
    }
    let mut rows = sample_indices(rng, n, max_sample).into_vec();
    rows.sort_unstable();
    rows
}

pub(crate) fn check_rows_finite(data: &[f32], dim: usize, rows: &[usize]) -> Result<(), PqError> {
    for &r in rows {
        let row = &data[r * dim..(r + 1) * dim];
        if let Some(j) = row.iter().position(|v| !v.is_finite()) {
            return Err(PqError::BadInput(format!(
                "PQ training row {r}, element {} is {}; NaN and infinity are not allowed",
                j + 1,
                row[j]
            )));
        }
    }
    Ok(())
}

/// The single copy of the training rows, subspace by subspace: subspace `s` is a contiguous
/// `rows × width_s` matrix at offset `rows · bounds[s]`. k-means then reads each subspace
/// sequentially; reading it in place from full rows would touch a whole cache line (and
/// often a new page) per row for a few floats, which made training memory-bound.
pub(crate) fn subspace_major_copy(
    data: &[f32],
    dim: usize,
    rows: &[usize],
    bounds: &[usize],
) -> Vec<f32> {
    let count = rows.len();
    let mut sample = vec![0f32; count * dim];
    for (i, &r) in rows.iter().enumerate() {
        let row = &data[r * dim..(r + 1) * dim];
        for b in bounds.windows(2) {
            let width = b[1] - b[0];
            let start = count * b[0] + i * width;
            sample[start..start + width].copy_from_slice(&row[b[0]..b[1]]);
        }
    }
    sample
}

mod format;
mod query_table;

pub use query_table::QueryTable;

#[cfg(test)]
mod tests;
