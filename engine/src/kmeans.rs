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

/// Centroids are processed in panels of this many, one accumulator register set per panel:
/// 64 lanes are eight AVX2 registers, enough independent sums to hide the add latency.
pub const PANEL: usize = GROUPS * GROUP;
/// A panel is kept as four 16-lane groups, each its own local array: the compiler keeps
/// such small arrays in registers, where one 64-lane array would live on the stack.
const GROUP: usize = 16;
const GROUPS: usize = 4;
type Lanes = [f32; GROUP];
type Panel = [Lanes; GROUPS];

/// `k` centroids of `width` values laid out for fast one-row-against-all-centroids kernels:
/// panel `p` holds centroids `64p..64p+64` column by column (`width` groups of 64 values).
/// The last panel is padded; padded centroids have an infinite norm so they never win
/// [`CentroidTable::nearest`], and the table kernels never write them out.
#[derive(Clone, Debug)]
pub struct CentroidTable {
    k: usize,
    width: usize,
    panels: Vec<Panel>,
    norms: Vec<Panel>,
    avx2: bool,
}

impl CentroidTable {
    /// Builds the table from `k` row-major centroids of `width` values. Panics if
    /// `centroids.len() != k * width` (the callers construct both).
    pub fn new(centroids: &[f32], k: usize, width: usize) -> Self {
        assert_eq!(
            centroids.len(),
            k * width,
            "centroid table of the wrong size"
        );
        let panel_count = k.div_ceil(PANEL);
        let mut panels = vec![[[0f32; GROUP]; GROUPS]; panel_count * width];
        let mut norms = vec![[[f32::INFINITY; GROUP]; GROUPS]; panel_count];
        for (c, centroid) in centroids.chunks_exact(width).enumerate() {
            let (p, g, lane) = (c / PANEL, c % PANEL / GROUP, c % GROUP);
            for (j, &v) in centroid.iter().enumerate() {
                panels[p * width + j][g][lane] = v;
            }
            norms[p][g][lane] = centroid.iter().map(|v| v * v).sum();
        }
        CentroidTable {
            k,
            width,
            panels,
            norms,
            avx2: avx2_available(),
        }
    }

    pub fn k(&self) -> usize {
        self.k
    }

    pub fn width(&self) -> usize {
        self.width
    }

    /// The nearest centroid to `x` (smallest index among ties) and its squared distance.
    /// Scores are `|c|² - 2x·c`, which ranks like `|x - c|²` at half the arithmetic; the
    /// returned distance adds `|x|²` back (clamped at 0 against cancellation).
    #[inline]
    pub fn nearest(&self, x: &[f32]) -> (u32, f32) {
        assert_eq!(
            x.len(),
            self.width,
            "vector width does not match the centroid table"
        );
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only if the CPU reported AVX2 and FMA at construction.
            let (label, score) = unsafe { nearest_avx2(&self.panels, &self.norms, x) };
            return (label, (score + squared_norm(x)).max(0.0));
        }
        let (label, score) = nearest_body::<false>(&self.panels, &self.norms, x);
        (label, (score + squared_norm(x)).max(0.0))
    }

    /// `out[c] = |x - c|²` for every centroid; `out` must hold at least `k` values.
    #[inline]
    pub fn squared_distances(&self, x: &[f32], out: &mut [f32]) {
        self.check_table_args(x, out);
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only if the CPU reported AVX2 and FMA at construction.
            unsafe { table_avx2::<true>(&self.panels, x, &mut out[..self.k]) };
            return;
        }
        table_body::<true, false>(&self.panels, x, &mut out[..self.k]);
    }

    /// `out[c] = -(x·c)` for every centroid; `out` must hold at least `k` values.
    #[inline]
    pub fn negative_dots(&self, x: &[f32], out: &mut [f32]) {
        self.check_table_args(x, out);
        #[cfg(target_arch = "x86_64")]
        if self.avx2 {
            // SAFETY: `avx2` is true only if the CPU reported AVX2 and FMA at construction.
            unsafe { table_avx2::<false>(&self.panels, x, &mut out[..self.k]) };
            return;
        }
        table_body::<false, false>(&self.panels, x, &mut out[..self.k]);
    }

    fn check_table_args(&self, x: &[f32], out: &[f32]) {
        assert_eq!(
            x.len(),
            self.width,
            "vector width does not match the centroid table"
        );
        assert!(
            out.len() >= self.k,
            "output holds {} values, the table has {}",
            out.len(),
            self.k
        );
    }
}

fn squared_norm(x: &[f32]) -> f32 {
    x.iter().map(|v| v * v).sum()
}

fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Smallest `|c|² - 2x·c` over all centroids, as (centroid index, score).
#[inline(always)]
fn nearest_body<const FMA: bool>(panels: &[Panel], norms: &[Panel], x: &[f32]) -> (u32, f32) {
    // The running minimum is kept per lane of a 16-wide group. Group numbers are f32 (exact
    // below 2^24) so that the bookkeeping is float compares and selects only, which
    // vectorise; a u32 select does not.
    let mut best = [f32::INFINITY; GROUP];
    let mut best_group = [0f32; GROUP];
    for (p, (panel, norm)) in panels.chunks_exact(x.len()).zip(norms).enumerate() {
        let [mut a0, mut a1, mut a2, mut a3] = *norm;
        for (&xj, column) in x.iter().zip(panel) {
            let m = -2.0 * xj;
            add_scaled::<FMA>(&mut a0, m, &column[0]);
            add_scaled::<FMA>(&mut a1, m, &column[1]);
            add_scaled::<FMA>(&mut a2, m, &column[2]);
            add_scaled::<FMA>(&mut a3, m, &column[3]);
        }
        for (g, scores) in [a0, a1, a2, a3].iter().enumerate() {
            let group_number = (p * GROUPS + g) as f32;
            for lane in 0..GROUP {
                let better = scores[lane] < best[lane];
                best_group[lane] = if better {
                    group_number
                } else {
                    best_group[lane]
                };
                best[lane] = if better { scores[lane] } else { best[lane] };
            }
        }
    }
    let mut winner = (0u32, f32::INFINITY);
    for lane in 0..GROUP {
        let index = best_group[lane] as u32 * GROUP as u32 + lane as u32;
        if best[lane] < winner.1 || (best[lane] == winner.1 && index < winner.0) {
            winner = (index, best[lane]);
        }
    }
    winner
}

/// `acc += m · column`, fused when `FMA` (only instantiated where the CPU has FMA: elsewhere
/// `mul_add` is a slow library call).
#[inline(always)]
fn add_scaled<const FMA: bool>(acc: &mut Lanes, m: f32, column: &Lanes) {
    for lane in 0..GROUP {
        acc[lane] = if FMA {
            column[lane].mul_add(m, acc[lane])
        } else {
            acc[lane] + m * column[lane]
        };
    }
}

/// `acc += (x - column)²`, fused when `FMA`.
#[inline(always)]
fn add_squared_difference<const FMA: bool>(acc: &mut Lanes, x: f32, column: &Lanes) {
    for lane in 0..GROUP {
        let d = x - column[lane];
        acc[lane] = if FMA {
            d.mul_add(d, acc[lane])
        } else {
            acc[lane] + d * d
        };
    }
}

/// `out[c] = Σ (x_j - c_j)²` when `L2`, else `out[c] = Σ (-x_j)·c_j`.
#[inline(always)]
fn table_body<const L2: bool, const FMA: bool>(panels: &[Panel], x: &[f32], out: &mut [f32]) {
    for (panel, out) in panels.chunks_exact(x.len()).zip(out.chunks_mut(PANEL)) {
        let [mut a0, mut a1, mut a2, mut a3] = [[0f32; GROUP]; GROUPS];
        for (&xj, column) in x.iter().zip(panel) {
            if L2 {
                add_squared_difference::<FMA>(&mut a0, xj, &column[0]);
                add_squared_difference::<FMA>(&mut a1, xj, &column[1]);
                add_squared_difference::<FMA>(&mut a2, xj, &column[2]);
                add_squared_difference::<FMA>(&mut a3, xj, &column[3]);
            } else {
                add_scaled::<FMA>(&mut a0, -xj, &column[0]);
                add_scaled::<FMA>(&mut a1, -xj, &column[1]);
                add_scaled::<FMA>(&mut a2, -xj, &column[2]);
                add_scaled::<FMA>(&mut a3, -xj, &column[3]);
            }
        }
        let scores: Panel = [a0, a1, a2, a3];
        match <&mut [f32; PANEL]>::try_from(&mut *out) {
            // A fixed-size store; a variable-length copy would be a memcpy call per panel.
            Ok(full) => *full = bytemuck::cast(scores),
            Err(_) => out.copy_from_slice(&scores.as_flattened()[..out.len()]),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn nearest_avx2(panels: &[Panel], norms: &[Panel], x: &[f32]) -> (u32, f32) {
    nearest_body::<true>(panels, norms, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn table_avx2<const L2: bool>(panels: &[Panel], x: &[f32], out: &mut [f32]) {
    table_body::<L2, true>(panels, x, out)
}

#[cfg(test)]
mod tests;
