//! Test helpers: clustered synthetic data and brute-force ground truth.

use crate::distance::Metric;
use crate::VertexId;

/// `n` rows of `dim` clustered, low-intrinsic-dimension data (`dataset::synthetic_clustered`).
pub fn clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    crate::dataset::synthetic_clustered(n, dim, clusters, seed)
}

/// The exact `k` nearest rows of `data` to `query`.
pub fn brute_force(
    data: &[f32],
    dim: usize,
    metric: Metric,
    query: &[f32],
    k: usize,
) -> Vec<VertexId> {
    let mut all: Vec<(f32, VertexId)> = data
        .chunks_exact(dim)
        .enumerate()
        .map(|(i, v)| (metric.search_distance(query, v), i as VertexId))
        .collect();
    all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    all.into_iter().take(k).map(|p| p.1).collect()
}

/// |found ∩ truth| / |truth|.
pub fn recall(found: &[VertexId], truth: &[VertexId]) -> f64 {
    if truth.is_empty() {
        return 1.0;
    }
    let hits = truth.iter().filter(|t| found.contains(t)).count();
    hits as f64 / truth.len() as f64
}
