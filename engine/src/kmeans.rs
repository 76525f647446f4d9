//! k-means for product-quantisation training.
//!
//! PQ trains one small k-means (256 centroids over a few dimensions) per subspace, on the
//! same row sample. [`RowsView`] lets a run read some columns of a row-major matrix without
//! copying them. PQ itself copies its sample once, subspace by subspace, and gives each run a
//! contiguous view: reading 8 of 384 floats per row in place costs a cache line per row and
//! made training twice as slow.
//!
//! The algorithm is the textbook one, made predictable:
//!
//! * seeded k-means++ initialisation over a sub-sample of at most `init_rows_per_centroid·k`
//!   rows (k-means++ costs as much as a Lloyd iteration on the full sample otherwise);
//! * Lloyd iterations up to `max_iters`, stopping early when no point changes cluster or the
//!   inertia improves by less than `tolerance` (relative);
//! * assignment parallel over contiguous row ranges, centroid update serial in `f64` and in
//!   row order, so the result is the same for every thread count;
//! * an empty cluster is re-seeded by splitting the largest one: it moves halfway from that
//!   cluster's mean towards its farthest member.
//!
//! [`CentroidTable`] is the hot kernel shared with PQ encoding and query tables: centroids
//! stored in panels of 64 so that one row's distances to all centroids are computed with the
//! 64 accumulators held in registers. It is compiled twice, for the baseline target and for
//! AVX2+FMA, and chosen at run time. The two differ only in rounding (FMA rounds once per
//! multiply-add), so on one machine results are reproducible; across machines with and
//! without AVX2 a near-tie may resolve to a different centroid.

use std::fmt;

use rand::seq::index::sample as sample_indices;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Why k-means could not run.
#[derive(Clone, Debug, PartialEq)]
pub enum KMeansError {
    /// The view's geometry does not fit the data (message says how).
    BadShape(String),
    /// Fewer rows than requested clusters.
    TooFewRows { rows: usize, k: usize },
    /// `k` or `max_iters` is zero.
    BadParameter(String),
}

impl fmt::Display for KMeansError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KMeansError::BadShape(m) | KMeansError::BadParameter(m) => write!(f, "k-means: {m}"),
            KMeansError::TooFewRows { rows, k } => {
                write!(
                    f,
                    "k-means: {k} clusters requested but only {rows} rows to train on"
                )
            }
        }
    }
}

impl std::error::Error for KMeansError {}

/// Columns `offset..offset + width` of every row of a row-major matrix with `stride` columns.
#[derive(Copy, Clone, Debug)]
pub struct RowsView<'a> {
    data: &'a [f32],
    rows: usize,
    stride: usize,
    offset: usize,
    width: usize,
}

impl<'a> RowsView<'a> {
    /// A view of columns `offset..offset + width` of `data`, whose rows have `stride` columns.
    pub fn new(
        data: &'a [f32],
        stride: usize,
        offset: usize,
        width: usize,
    ) -> Result<Self, KMeansError> {
        if stride == 0 || width == 0 {
            return Err(KMeansError::BadShape(
                "row stride and view width must be positive".into(),
            ));
        }
        if !data.len().is_multiple_of(stride) {
            return Err(KMeansError::BadShape(format!(
                "{} values do not form whole rows of {stride}",
                data.len()
            )));
        }
        if offset.checked_add(width).is_none_or(|end| end > stride) {
            return Err(KMeansError::BadShape(format!(
                "columns {offset}..{} exceed the row width {stride}",
                offset.saturating_add(width)
            )));
        }
        Ok(RowsView {
            data,
            rows: data.len() / stride,
            stride,
            offset,
            width,
        })
    }

    /// All columns of a row-major matrix with `dim` columns.
    pub fn full(data: &'a [f32], dim: usize) -> Result<Self, KMeansError> {
        Self::new(data, dim, 0, dim)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// Row `i` of the view. Panics if `i >= rows()`.
    #[inline]
    pub fn row(&self, i: usize) -> &'a [f32] {
        let start = i * self.stride + self.offset;
        &self.data[start..start + self.width]
    }
}

/// Parameters of one k-means run.
#[derive(Clone, Debug)]
pub struct KMeansConfig {
    /// Number of clusters.
    pub k: usize,
    /// Upper bound on Lloyd iterations.
    pub max_iters: usize,
    /// Stop when the inertia improves by less than this fraction in one iteration.
    pub tolerance: f64,
    /// Seed of the initialisation (the only random step).
    pub seed: u64,
    /// Threads for the assignment step (1 = the calling thread only).
    pub threads: usize,
    /// k-means++ runs on at most this many rows per centroid.
    pub init_rows_per_centroid: usize,
}

impl KMeansConfig {
    /// Defaults suited to PQ training: 12 iterations (as DiskANN), tolerance 1e-4, one thread.
    pub fn new(k: usize, seed: u64) -> Self {
        KMeansConfig {
            k,
            max_iters: 12,
            tolerance: 1e-4,
            seed,
            threads: 1,
            init_rows_per_centroid: 16,
        }
    }
}

/// The outcome of a k-means run.
#[derive(Clone, Debug)]
pub struct KMeans {
    /// `k` centroids of `width` values each, row-major.
    pub centroids: Vec<f32>,
    pub k: usize,
    pub width: usize,
    /// Lloyd iterations performed.
    pub iterations: usize,
    /// Sum of squared distances of the rows to their centroid at the last assignment.
    pub inertia: f64,
    /// How many times an empty cluster was re-seeded.
    pub reseeded: usize,
}

/// Runs k-means on the rows of `view`.
pub fn train(view: &RowsView, config: &KMeansConfig) -> Result<KMeans, KMeansError> {
    let (n, k, width) = (view.rows(), config.k, view.width());
    if k == 0 {
        return Err(KMeansError::BadParameter(
            "the number of clusters must be positive".into(),
        ));
    }
    if config.max_iters == 0 {
        return Err(KMeansError::BadParameter(
            "max_iters must be positive".into(),
        ));
    }
    if n < k {
        return Err(KMeansError::TooFewRows { rows: n, k });
    }
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut centroids = kmeans_plus_plus(view, k, config.init_rows_per_centroid, &mut rng);
    let mut assignment = vec![u32::MAX; n];
    let mut distances = vec![0f32; n];
    let mut previous_inertia = f64::INFINITY;
    let mut result = KMeans {
        centroids: Vec::new(),
        k,
        width,
        iterations: 0,
        inertia: 0.0,
        reseeded: 0,
    };
    for iteration in 0..config.max_iters {
        let table = CentroidTable::new(&centroids, k, width);
        let changed = assign_all(
            view,
            &table,
            &mut assignment,
            &mut distances,
            config.threads,
        );
        let inertia: f64 = distances.iter().map(|&d| d as f64).sum();
        result.iterations = iteration + 1;
        result.inertia = inertia;
        let counts = recompute_means(view, &assignment, k, &mut centroids);
        let reseeded =
            split_for_empty_clusters(view, &assignment, &distances, counts, &mut centroids);
        result.reseeded += reseeded;
        // The first iteration has no previous inertia to compare with (inf - x <= inf).
        let improved_little = previous_inertia.is_finite()
            && previous_inertia - inertia <= config.tolerance * previous_inertia;
        let converged = changed == 0 || improved_little;
        if converged && reseeded == 0 {
            break;
        }
        previous_inertia = inertia;
    }
    result.centroids = centroids;
    Ok(result)
}

/// Seeded k-means++ (D² sampling) over a sub-sample of the rows.
fn kmeans_plus_plus(
    view: &RowsView,
    k: usize,
    rows_per_centroid: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<f32> {
    let n = view.rows();
    let budget = k.saturating_mul(rows_per_centroid.max(1)).max(k);
    let mut candidates: Vec<usize> = if n > budget {
        sample_indices(rng, n, budget).into_vec()
    } else {
        (0..n).collect()
    };
    candidates.sort_unstable();
    let columns = column_major_copy(view, &candidates);
    let count = candidates.len();
    let mut centroids = Vec::with_capacity(k * view.width());
    let mut nearest = vec![f32::INFINITY; count];
    let mut scratch = vec![0f32; count];
    let mut chosen = rng.gen_range(0..count);
    for _ in 0..k {
        let centroid = view.row(candidates[chosen]);
        centroids.extend_from_slice(centroid);
        lower_to_distance(&columns, centroid, &mut scratch, &mut nearest);
        chosen = pick_proportional(&nearest, rng);
    }
    centroids
}

/// The rows `rows` of `view` stored column by column (`width` columns of `rows.len()`
/// values), so that one centroid's distances to all of them are computed by loops over
/// contiguous columns, which vectorise; row by row, a 4- to 8-wide subspace leaves most
/// of a SIMD register idle.
fn column_major_copy(view: &RowsView, rows: &[usize]) -> Vec<f32> {
    let count = rows.len();
    let mut columns = vec![0f32; view.width() * count];
    for (r, &i) in rows.iter().enumerate() {
        for (j, &x) in view.row(i).iter().enumerate() {
            columns[j * count + r] = x;
        }
    }
    columns
}

/// `nearest[r] = min(nearest[r], |row r - centroid|²)` over the column-major rows.
fn lower_to_distance(columns: &[f32], centroid: &[f32], scratch: &mut [f32], nearest: &mut [f32]) {
    scratch.fill(0.0);
    let count = scratch.len();
    for (column, &c) in columns.chunks_exact(count).zip(centroid) {
        for (s, &x) in scratch.iter_mut().zip(column) {
            *s += (x - c) * (x - c);
        }
    }
    for (d, &s) in nearest.iter_mut().zip(scratch.iter()) {
        *d = d.min(s);
    }
}

/// An index drawn with probability proportional to `weights`; uniform when all are zero.
fn pick_proportional(weights: &[f32], rng: &mut ChaCha8Rng) -> usize {
    let total: f64 = weights.iter().map(|&w| w as f64).sum();
    if total <= 0.0 || !total.is_finite() {
        return rng.gen_range(0..weights.len());
    }
    let mut target = rng.gen::<f64>() * total;
    for (i, &w) in weights.iter().enumerate() {
        let w = w as f64;
        if target < w {
            return i;
        }
        target -= w;
    }
    // Rounding left a sliver past the last positive weight.
    weights.iter().rposition(|&w| w > 0.0).unwrap_or(0)
}

/// Assigns every row to its nearest centroid, in parallel over contiguous row ranges.
/// Returns how many rows changed cluster.
fn assign_all(
    view: &RowsView,
    table: &CentroidTable,
    assignment: &mut [u32],
    distances: &mut [f32],
    threads: usize,
) -> usize {
    let n = view.rows();
    let chunk = n.div_ceil(threads.clamp(1, n.max(1)));
    let assign_range = |start: usize, labels: &mut [u32], dists: &mut [f32]| -> usize {
        let mut changed = 0;
        for (i, (label, dist)) in labels.iter_mut().zip(dists.iter_mut()).enumerate() {
            let (nearest, d) = table.nearest(view.row(start + i));
            changed += usize::from(*label != nearest);
            *label = nearest;
            *dist = d;
        }
        changed
    };
    std::thread::scope(|scope| {
        let mut parts = assignment
            .chunks_mut(chunk)
            .zip(distances.chunks_mut(chunk))
            .enumerate();
        let first = parts.next();
        let handles: Vec<_> = parts
            .map(|(c, (labels, dists))| scope.spawn(move || assign_range(c * chunk, labels, dists)))
            .collect();
        let mut changed = first.map_or(0, |(_, (labels, dists))| assign_range(0, labels, dists));
        for handle in handles {
            changed += handle.join().expect("k-means assignment thread panicked");
        }
        changed
    })
}

/// Replaces every non-empty centroid by the mean of its rows; returns the cluster sizes.
fn recompute_means(
    view: &RowsView,
    assignment: &[u32],
    k: usize,
    centroids: &mut [f32],
) -> Vec<usize> {
    let width = view.width();
    let mut sums = vec![0f64; k * width];
    let mut counts = vec![0usize; k];
    for (i, &label) in assignment.iter().enumerate() {
        let c = label as usize;
        counts[c] += 1;
        for (s, &x) in sums[c * width..(c + 1) * width].iter_mut().zip(view.row(i)) {
            *s += x as f64;
        }
    }
    for (c, &count) in counts.iter().enumerate() {
        if count > 0 {
            let mean = sums[c * width..(c + 1) * width]
                .iter()
                .map(|&s| (s / count as f64) as f32);
            centroids[c * width..(c + 1) * width]
                .iter_mut()
                .zip(mean)
                .for_each(|(dst, m)| *dst = m);
        }
    }
    counts
}

/// Gives every empty cluster half of the largest splittable one: the new centroid sits
/// halfway between that cluster's mean and its farthest member. A cluster is splittable
/// when it has two or more rows that are not all at its centroid, and is split at most once
/// per call (its farthest member is then used up). Returns how many were re-seeded.
///
/// Clusters of identical rows are never split: on data with fewer distinct rows than `k`
/// (the all-zero border pixels of Fashion-MNIST give whole subspaces of one value) the
/// split would put the new centroid on the same point, leave it empty again, and keep
/// k-means from converging while each attempt scanned every row.
fn split_for_empty_clusters(
    view: &RowsView,
    assignment: &[u32],
    distances: &[f32],
    mut counts: Vec<usize>,
    centroids: &mut [f32],
) -> usize {
    if counts.iter().all(|&c| c > 0) {
        return 0;
    }
    let width = view.width();
    let mut farthest = farthest_members(assignment, distances, counts.len());
    let mut reseeded = 0;
    for empty in 0..counts.len() {
        if counts[empty] != 0 {
            continue;
        }
        let splittable = (0..counts.len())
            .filter(|&c| counts[c] >= 2 && farthest[c].is_some_and(|(_, d)| d > 0.0))
            .max_by_key(|&c| (counts[c], std::cmp::Reverse(c)));
        let Some(largest) = splittable else {
            break;
        };
        let Some((row_index, _)) = farthest[largest].take() else {
            break;
        };
        let row = view.row(row_index);
        for j in 0..width {
            let mean = centroids[largest * width + j];
            centroids[empty * width + j] = mean + 0.5 * (row[j] - mean);
        }
        counts[empty] = counts[largest] / 2;
        counts[largest] -= counts[empty];
        reseeded += 1;
    }
    reseeded
}

/// Per cluster, its member farthest from the centroid as (row, distance); the smallest row
/// wins ties. One pass over the rows.
fn farthest_members(assignment: &[u32], distances: &[f32], k: usize) -> Vec<Option<(usize, f32)>> {
    let mut farthest: Vec<Option<(usize, f32)>> = vec![None; k];
    for (i, (&label, &d)) in assignment.iter().zip(distances).enumerate() {
        if let Some(slot) = farthest.get_mut(label as usize) {
            if slot.is_none_or(|(_, best)| d > best) {
                *slot = Some((i, d));
            }
        }
    }
    farthest
}

mod table;

pub use table::{CentroidTable, PANEL};

#[cfg(test)]
mod tests;
