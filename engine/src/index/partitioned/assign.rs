//! Step 3 of the memory-bounded build: the partitions' centres, by balanced hierarchical
//! k-means over the sample, and each row's one or two partitions, by two passes over the spool.

use super::{PartitionPlan, NONE};
use crate::index::spool::RowSpool;
use crate::index::{BuildPhase, IndexError, IndexParams, Progress};
use crate::kmeans::{self, CentroidTable, KMeansConfig, RowsView};
use crate::VertexId;

/// Partition centres from the sample by balanced hierarchical k-means: a cluster of more than
/// `target` sample rows is split by k-means into `ceil(size / target)` (at most 16) and its
/// parts split again, until every cluster holds at most `target`. Flat k-means cannot be
/// used: on clustered data its clusters differ in size by 10× and more, and a partition
/// cannot take more rows than a graph build fits, so most rows of the large clusters spilled
/// to far partitions (measured: 105,000 of 200,000 rows of the 1M set's first 200K, and
/// recall@10 at L = 40 fell from 0.986 to 0.889). L2 throughout: for cosine the rows are
/// normalised, and for inner product nearby rows are what a partition should hold either way.
pub(super) fn partition_centres(
    sample: &[f32],
    dim: usize,
    target: usize,
    params: &IndexParams,
) -> Result<CentroidTable, IndexError> {
    let target = target.max(1);
    let rows = sample.len() / dim;
    let mut pending: Vec<Vec<u32>> = vec![(0..rows as u32).collect()];
    let mut leaves: Vec<f32> = Vec::new();
    let mut gathered = Vec::new();
    let mut splits = 0u64;
    while let Some(ids) = pending.pop() {
        gathered.clear();
        for &i in &ids {
            gathered.extend_from_slice(&sample[i as usize * dim..(i as usize + 1) * dim]);
        }
        if ids.len() <= target {
            leaves.extend(mean_row(&gathered, dim));
            continue;
        }
        let k = ids.len().div_ceil(target).clamp(2, 16);
        let view =
            RowsView::full(&gathered, dim).map_err(|e| IndexError::Invalid(e.to_string()))?;
        let mut config = KMeansConfig::new(k, params.seed ^ 0x6b6d ^ splits);
        config.threads = params.threads.max(1);
        splits += 1;
        let means = kmeans::train(&view, &config)
            .map_err(|e| IndexError::Invalid(format!("partitioning: {e}")))?;
        let table = CentroidTable::new(&means.centroids, means.k, dim);
        let mut parts = vec![Vec::new(); means.k];
        for (row, &i) in gathered.chunks_exact(dim).zip(&ids) {
            parts[table.nearest(row).0 as usize].push(i);
        }
        if parts.iter().any(|p| p.len() == ids.len()) {
            // Identical rows k-means cannot separate: split them evenly instead.
            let size = ids.len().div_ceil(k);
            parts = ids.chunks(size).map(<[u32]>::to_vec).collect();
        }
        pending.extend(parts.into_iter().filter(|p| !p.is_empty()));
    }
    let k = leaves.len() / dim;
    if k >= NONE as usize {
        return Err(IndexError::Invalid(format!(
            "{k} partitions; a memory-bounded build makes at most {}",
            NONE - 1
        )));
    }
    Ok(CentroidTable::new(&leaves, k, dim))
}

pub(super) fn mean_row(rows: &[f32], dim: usize) -> Vec<f32> {
    let mut mean = vec![0f64; dim];
    for row in rows.chunks_exact(dim) {
        for (m, &x) in mean.iter_mut().zip(row) {
            *m += f64::from(x);
        }
    }
    let count = (rows.len() / dim).max(1) as f64;
    mean.into_iter().map(|m| (m / count) as f32).collect()
}

/// Partitions nearest first, as far as `order` needs them: the nearest [`NEAREST`] sorted,
/// then, only when all of those are full, the rest.
const NEAREST: usize = 8;

fn nearest_first(distances: &[f32], order: &mut Vec<usize>, all: bool) {
    order.clear();
    order.extend(0..distances.len());
    let by = |a: &usize, b: &usize| distances[*a].total_cmp(&distances[*b]);
    if !all && order.len() > NEAREST {
        order.select_nth_unstable_by(NEAREST, by);
        order.truncate(NEAREST);
    }
    order.sort_unstable_by(by);
}

/// Each row's partitions, in two passes over the spool: first its nearest partition with
/// room (at most `partition_rows` rows each), then, among the nearest few, the next one
/// that still has room after every row's first ([`NONE`] when none does: that row links no
/// two partitions). The first pass also finds the medoid, the row nearest `mean`.
pub(super) fn assign(
    spool: &RowSpool,
    centres: &CentroidTable,
    plan: &PartitionPlan,
    mean: &[f32],
    progress: Progress,
) -> std::io::Result<(Vec<[u16; 2]>, VertexId)> {
    let k = centres.k();
    let n = spool.len() as u64;
    let mut sizes = vec![0usize; k];
    let mut pairs = Vec::with_capacity(spool.len());
    let mut distances = vec![0f32; k];
    let mut order = Vec::with_capacity(k);
    let mut medoid = (0, f32::INFINITY);
    let kernels = crate::distance::kernels();
    let room = |sizes: &[usize], c: usize| sizes[c] < plan.partition_rows;
    spool.for_each(|v, row| {
        let to_mean = kernels.l2_squared(row, mean);
        if to_mean < medoid.1 {
            medoid = (v, to_mean);
        }
        centres.squared_distances(row, &mut distances);
        nearest_first(&distances, &mut order, false);
        if !order.iter().any(|&c| room(&sizes, c)) {
            nearest_first(&distances, &mut order, true);
        }
        let first = order
            .iter()
            .copied()
            .find(|&c| room(&sizes, c))
            .unwrap_or(0);
        sizes[first] += 1;
        pairs.push([first as u16, NONE]);
        if v % 65536 == 0 {
            progress(BuildPhase::Partitioning, u64::from(v), 2 * n);
        }
    })?;
    spool.for_each(|v, row| {
        centres.squared_distances(row, &mut distances);
        nearest_first(&distances, &mut order, false);
        let pair = &mut pairs[v as usize];
        if let Some(&c) = order
            .iter()
            .find(|&&c| c != pair[0] as usize && room(&sizes, c))
        {
            sizes[c] += 1;
            pair[1] = c as u16;
        }
        if v % 65536 == 0 {
            progress(BuildPhase::Partitioning, n + u64::from(v), 2 * n);
        }
    })?;
    Ok((pairs, medoid.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_stay_balanced_on_clusters_of_very_different_sizes() {
        // 3,000 rows: one cluster of 2,400 and six of 100.
        let dim = 16;
        let mut sample = crate::dataset::synthetic_clustered(2400, dim, 1, 3);
        sample.extend(crate::dataset::synthetic_clustered(600, dim, 6, 4));
        let params = IndexParams {
            threads: 2,
            ..IndexParams::default()
        };
        let centres = partition_centres(&sample, dim, 100, &params).unwrap();
        assert!(centres.k() >= 30, "{} partitions", centres.k());
        let mut sizes = vec![0usize; centres.k()];
        for row in sample.chunks_exact(dim) {
            sizes[centres.nearest(row).0 as usize] += 1;
        }
        let largest = *sizes.iter().max().unwrap();
        assert!(
            largest <= 200,
            "largest partition {largest} of target 100: {sizes:?}"
        );
        // Identical rows cannot be told apart by k-means, and are split evenly.
        let same = vec![0.5f32; 500 * dim];
        let centres = partition_centres(&same, dim, 100, &params).unwrap();
        assert!(
            centres.k() >= 5,
            "{} partitions of identical rows",
            centres.k()
        );
    }
}
