//! Dataset files in the DiskANN layout, exact nearest neighbours, recall, and a synthetic
//! generator.
//!
//! Used by tests and by the `navis-bench` binary, never by the index itself.
//!
//! * `.fbin` vectors: `[u32 n][u32 dim][n·dim f32]`, little-endian, row-major.
//! * ground truth `.bin`: `[u32 nq][u32 k][nq·k u32 ids][nq·k f32 distances]`, little-endian,
//!   row `q` holding the `k` nearest ids of query `q` nearest first. Files with the ids only
//!   (no distance block), which DiskANN also produces, are read with empty distances.
//!
//! Readers check that the file length matches the header exactly, so a truncated download or
//! a file of another format is an error rather than a silently shorter dataset.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Metric, VertexId};

/// Vectors read from an `.fbin` file.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub n: usize,
    pub dim: usize,
    /// `n · dim` values, row-major.
    pub data: Vec<f32>,
}

impl Dataset {
    /// Row `i`. Panics if `i >= n`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

fn invalid(path: &Path, message: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {message}", path.display()),
    )
}

fn read_header(reader: &mut impl Read) -> io::Result<(usize, usize)> {
    let mut header = [0u8; 8];
    reader.read_exact(&mut header)?;
    let first = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let second = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    Ok((first as usize, second as usize))
}

/// Checks that a file of `actual` bytes holds a header and `blocks` blocks of `rows·cols`
/// 4-byte values; returns the matching block count among `allowed`.
fn expect_length(
    path: &Path,
    actual: u64,
    rows: usize,
    cols: usize,
    allowed: &[usize],
) -> io::Result<usize> {
    let block = (rows as u64)
        .checked_mul(cols as u64)
        .and_then(|v| v.checked_mul(4));
    for &blocks in allowed {
        if block
            .and_then(|b| b.checked_mul(blocks as u64))
            .and_then(|b| b.checked_add(8))
            == Some(actual)
        {
            return Ok(blocks);
        }
    }
    Err(invalid(
        path,
        format!(
            "header says {rows} x {cols} but the file has {actual} bytes; \
             truncated or not in this format"
        ),
    ))
}

/// Reads `count` little-endian 4-byte values into a typed vector.
fn read_values<T: bytemuck::Pod + Default>(
    reader: &mut impl Read,
    count: usize,
) -> io::Result<Vec<T>> {
    let mut values = vec![T::default(); count];
    reader.read_exact(bytemuck::cast_slice_mut(&mut values))?;
    if cfg!(target_endian = "big") {
        for v in bytemuck::cast_slice_mut::<T, u32>(&mut values) {
            *v = u32::from_le(*v);
        }
    }
    Ok(values)
}

fn write_values<T: bytemuck::Pod>(writer: &mut impl Write, values: &[T]) -> io::Result<()> {
    if cfg!(target_endian = "little") {
        return writer.write_all(bytemuck::cast_slice(values));
    }
    for &v in bytemuck::cast_slice::<T, u32>(values) {
        writer.write_all(&v.to_le_bytes())?;
    }
    Ok(())
}

/// Reads a whole `.fbin` file.
pub fn read_fbin(path: impl AsRef<Path>) -> io::Result<Dataset> {
    read_fbin_rows(path, None)
}

/// Reads the first `limit` rows of an `.fbin` file (all of them when `None` or when the file
/// has fewer). The whole file's length is still checked against its header.
pub fn read_fbin_rows(path: impl AsRef<Path>, limit: Option<usize>) -> io::Result<Dataset> {
    let path = path.as_ref();
    let file = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let length = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let (n, dim) = read_header(&mut reader)
        .map_err(|_| invalid(path, "shorter than the 8-byte header".into()))?;
    if dim == 0 && n > 0 {
        return Err(invalid(
            path,
            format!("header says {n} rows of 0 dimensions"),
        ));
    }
    expect_length(path, length, n, dim, &[1])?;
    let rows = limit.map_or(n, |l| l.min(n));
    let data = read_values::<f32>(&mut reader, rows * dim)?;
    Ok(Dataset { n: rows, dim, data })
}

/// Writes `data` (rows of `dim` values) as an `.fbin` file.
pub fn write_fbin(path: impl AsRef<Path>, dim: usize, data: &[f32]) -> io::Result<()> {
    let path = path.as_ref();
    if dim == 0 || !data.len().is_multiple_of(dim) {
        return Err(invalid(
            path,
            format!("{} values do not form rows of {dim}", data.len()),
        ));
    }
    let n = header_u32(path, data.len() / dim, "row count")?;
    let dim32 = header_u32(path, dim, "dimension")?;
    let mut writer = BufWriter::with_capacity(1 << 20, File::create(path)?);
    writer.write_all(&n.to_le_bytes())?;
    writer.write_all(&dim32.to_le_bytes())?;
    write_values(&mut writer, data)?;
    writer.into_inner().map_err(|e| e.into_error())?.sync_all()
}

fn header_u32(path: &Path, value: usize, what: &str) -> io::Result<u32> {
    u32::try_from(value)
        .map_err(|_| invalid(path, format!("{what} {value} does not fit the u32 header")))
}

/// Exact nearest neighbours of a query set.
#[derive(Clone, Debug, PartialEq)]
pub struct GroundTruth {
    pub nq: usize,
    pub k: usize,
    /// `nq · k` ids, row `q` nearest first.
    pub ids: Vec<VertexId>,
    /// `nq · k` distances matching `ids` (as `Metric::search_distance`), or empty when the file
    /// had none.
    pub distances: Vec<f32>,
}

impl GroundTruth {
    /// The `k` nearest ids of query `q`. Panics if `q >= nq`.
    pub fn neighbors(&self, q: usize) -> &[VertexId] {
        &self.ids[q * self.k..(q + 1) * self.k]
    }

    /// One list per query, in the shape [`recall_at_k`] takes.
    pub fn to_lists(&self) -> Vec<Vec<VertexId>> {
        (0..self.nq).map(|q| self.neighbors(q).to_vec()).collect()
    }
}

/// Reads a ground-truth file, with or without its distance block.
pub fn read_ground_truth(path: impl AsRef<Path>) -> io::Result<GroundTruth> {
    let path = path.as_ref();
    let file = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let length = file.metadata()?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let (nq, k) = read_header(&mut reader)
        .map_err(|_| invalid(path, "shorter than the 8-byte header".into()))?;
    let blocks = expect_length(path, length, nq, k, &[2, 1])?;
    let ids = read_values::<u32>(&mut reader, nq * k)?;
    let distances = if blocks == 2 {
        read_values::<f32>(&mut reader, nq * k)?
    } else {
        Vec::new()
    };
    Ok(GroundTruth {
        nq,
        k,
        ids,
        distances,
    })
}

/// Writes a ground-truth file; the distance block is written when `truth.distances` is not
/// empty.
pub fn write_ground_truth(path: impl AsRef<Path>, truth: &GroundTruth) -> io::Result<()> {
    let path = path.as_ref();
    let cells = truth.nq.checked_mul(truth.k);
    if cells != Some(truth.ids.len())
        || !(truth.distances.is_empty() || cells == Some(truth.distances.len()))
    {
        return Err(invalid(
            path,
            format!(
                "ground truth of {} x {} with {} ids and {} distances",
                truth.nq,
                truth.k,
                truth.ids.len(),
                truth.distances.len()
            ),
        ));
    }
    let mut writer = BufWriter::with_capacity(1 << 20, File::create(path)?);
    writer.write_all(&header_u32(path, truth.nq, "query count")?.to_le_bytes())?;
    writer.write_all(&header_u32(path, truth.k, "k")?.to_le_bytes())?;
    write_values(&mut writer, &truth.ids)?;
    write_values(&mut writer, &truth.distances)?;
    writer.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// A neighbour candidate ordered by distance, then by id, so that ties go to the smaller id.
#[derive(Copy, Clone, Debug)]
struct Candidate {
    distance: f32,
    id: VertexId,
}

impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Candidate {}

/// The `k` nearest base rows of `query` (fewer if the base is smaller), nearest first.
fn exact_top_k(
    base: &[f32],
    dim: usize,
    query: &[f32],
    k: usize,
    metric: Metric,
) -> Vec<Candidate> {
    // A max-heap of the best k so far: its top is the candidate to evict.
    let mut heap = BinaryHeap::with_capacity(k + 1);
    for (id, row) in base.chunks_exact(dim).enumerate() {
        let candidate = Candidate {
            distance: metric.search_distance(query, row),
            id: id as VertexId,
        };
        if heap.len() < k {
            heap.push(candidate);
        } else if heap.peek().is_some_and(|worst| candidate < *worst) {
            heap.pop();
            heap.push(candidate);
        }
    }
    heap.into_sorted_vec()
}

/// Exact k nearest neighbours of every query, with distances (`Metric::search_distance`).
///
/// For `Metric::Cosine` the caller passes unit vectors (see `distance::normalize`), as the
/// index stores them: the ranking distance is then the squared L2 distance, which orders like
/// the cosine distance only on unit vectors.
///
/// Ties are broken by the smaller id, so the result is deterministic. `k` is capped at the
/// base size. Parallel over queries with `threads` threads.
///
/// # Panics
/// If `dim` is 0 or `base` or `queries` is not a whole number of rows (the bench validates
/// its files before calling).
pub fn brute_force_ground_truth(
    base: &[f32],
    dim: usize,
    queries: &[f32],
    k: usize,
    metric: Metric,
    threads: usize,
) -> GroundTruth {
    assert!(
        dim > 0 && base.len().is_multiple_of(dim) && queries.len().is_multiple_of(dim),
        "rows must have {dim} values"
    );
    let k = k.min(base.len() / dim);
    let nq = queries.len() / dim;
    let mut rows: Vec<Vec<Candidate>> = vec![Vec::new(); nq];
    let per_thread = nq.div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        for (chunk_index, chunk) in rows.chunks_mut(per_thread).enumerate() {
            scope.spawn(move || {
                for (i, out) in chunk.iter_mut().enumerate() {
                    let q = chunk_index * per_thread + i;
                    *out = exact_top_k(base, dim, &queries[q * dim..(q + 1) * dim], k, metric);
                }
            });
        }
    });
    let ids = rows.iter().flatten().map(|c| c.id).collect();
    let distances = rows.iter().flatten().map(|c| c.distance).collect();
    GroundTruth {
        nq,
        k,
        ids,
        distances,
    }
}

/// The ids of [`brute_force_ground_truth`], one list per query.
pub fn brute_force_knn(
    base: &[f32],
    dim: usize,
    queries: &[f32],
    k: usize,
    metric: Metric,
    threads: usize,
) -> Vec<Vec<VertexId>> {
    brute_force_ground_truth(base, dim, queries, k, metric, threads).to_lists()
}

/// Recall@k: the share of each query's true top-k (the first `k` of `truth[q]`) that appears
/// among the first `k` of `found[q]`, pooled over all queries. Duplicates in `found` count
/// once; a missing `found[q]` counts as empty. Returns 0 when there is nothing to find.
pub fn recall_at_k(found: &[Vec<VertexId>], truth: &[Vec<VertexId>], k: usize) -> f64 {
    let mut hits = 0usize;
    let mut wanted = 0usize;
    for (q, true_ids) in truth.iter().enumerate() {
        let true_ids = &true_ids[..k.min(true_ids.len())];
        let mut returned: Vec<VertexId> = found
            .get(q)
            .map_or(&[][..], |f| &f[..k.min(f.len())])
            .to_vec();
        returned.sort_unstable();
        wanted += true_ids.len();
        hits += true_ids
            .iter()
            .filter(|id| returned.binary_search(id).is_ok())
            .count();
    }
    if wanted == 0 {
        0.0
    } else {
        hits as f64 / wanted as f64
    }
}

/// A standard normal sample (Box-Muller).
fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    let u1: f64 = 1.0 - rng.gen::<f64>(); // (0, 1]: ln stays finite
    let u2: f64 = rng.gen();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}

/// One cluster of [`synthetic_clustered`]: rows are `centre + basis·z + noise`.
struct SyntheticCluster {
    centre: Vec<f32>,
    /// `dim × rank`, row-major; scaled so each coordinate's spread is `spread`.
    basis: Vec<f32>,
    spread: f32,
}

/// Deterministic clustered test data: `n` rows of `dim` values, row-major.
///
/// Built to resemble embeddings more than uniform noise does: `clusters` centres drawn from
/// N(0, 1) per coordinate; cluster sizes uneven (weights 1/√(c+1)); inside each cluster the
/// rows vary mostly along a random low-dimensional subspace (rank ≈ dim/4, at most 16, so the
/// intrinsic dimension is far below `dim`) with a per-cluster spread of 0.25–0.5, plus small
/// isotropic noise. Clusters overlap somewhat, so neighbourhoods cross cluster boundaries.
///
/// For queries from the same distribution, generate `n + nq` rows and split off the tail.
/// The same arguments give the same data on every run.
pub fn synthetic_clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let clusters = clusters.max(1);
    let rank = (dim / 4).clamp(2, 16).min(dim);
    let groups: Vec<SyntheticCluster> = (0..clusters)
        .map(|_| {
            let centre = (0..dim).map(|_| gaussian(&mut rng)).collect();
            let spread = rng.gen_range(0.25..0.5);
            let scale = spread / (rank as f32).sqrt();
            let basis = (0..dim * rank)
                .map(|_| gaussian(&mut rng) * scale)
                .collect();
            SyntheticCluster {
                centre,
                basis,
                spread,
            }
        })
        .collect();
    let cumulative: Vec<f64> = (0..clusters)
        .scan(0.0, |total, c| {
            *total += 1.0 / ((c + 1) as f64).sqrt();
            Some(*total)
        })
        .collect();
    let total_weight = cumulative[clusters - 1];

    let mut data = Vec::with_capacity(n * dim);
    let mut z = vec![0f32; rank];
    for _ in 0..n {
        let pick = rng.gen::<f64>() * total_weight;
        let group = &groups[cumulative.partition_point(|&c| c <= pick).min(clusters - 1)];
        z.iter_mut().for_each(|v| *v = gaussian(&mut rng));
        let noise = 0.1 * group.spread;
        for (j, &centre) in group.centre.iter().enumerate() {
            let along: f32 = group.basis[j * rank..(j + 1) * rank]
                .iter()
                .zip(&z)
                .map(|(b, z)| b * z)
                .sum();
            data.push(centre + along + noise * gaussian(&mut rng));
        }
    }
    data
}

#[cfg(test)]
mod tests;
