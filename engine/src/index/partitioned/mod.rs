//! The memory-bounded build: an index over more rows than an in-memory build holds in its
//! memory budget, built from overlapping partitions and merged (DiskANN's sharded build,
//! "DiskANN", §3.4, adapted). RFC 0005 gives the reasons; the steps:
//!
//! 1. **Sample** a seeded set of rows from the spool ([`RowSpool`], every row on disk):
//!    the PQ training sample and the partitioning's k-means sample, as large as the budget
//!    allows up to PQ's default.
//! 2. **PQ training** on it, as the in-memory build does.
//! 3. **Partitioning**: k-means over the sample with `k` centres; one pass over the spool
//!    puts each row into the partitions of its two nearest centres that still have room, so
//!    that neighbouring partitions share the rows along their border, and finds the medoid
//!    (the row nearest the sample's mean).
//! 4. **Graph build**, one partition at a time: its rows read from the spool, an in-memory
//!    Vamana graph built over them exactly as the in-memory build does, and each row's list
//!    (global ids, nearest first) appended to one list file.
//! 5. **Entrance graph** over the seeded 1% sample, its vectors read from the spool.
//! 6. **Writing**, streamed ([`RowSource`]): row v's list is the merge of its two partitions'
//!    lists, taken alternately nearest first without repeats up to R, read from the list
//!    file through one cursor per partition (each partition's records are in ascending id
//!    order, so no sort is needed); vectors and PQ codes come from a sequential pass over
//!    the spool. Edge lists are placed in id order (identity placement).
//!
//! What the budget must hold at once is small per row (the caller's heap TIDs, the two
//! partition numbers, the placement arrays: [`FIXED_BYTES_PER_ROW`]) plus the largest of
//! the phases; the partition size is what is left for one in-memory graph build. The
//! temporary files (spool and list file) hold about `n (4 dim + 4 R)` bytes on disk.

use super::build::{entrance_error, entrance_params, entrance_sample, train_pq};
use super::spool::RowSpool;
use super::{BuildPhase, BuildReport, Cancel, IndexError, IndexParams, Progress};
use crate::entrance::EntranceGraph;
use crate::graph::memory::{
    entrance_member_bytes, graph_rows_within, most_within, pq_training_bytes,
};
use crate::graph::BuildControl;
use crate::pq::{ProductQuantizer, DEFAULT_TRAINING_SAMPLE};
use crate::VertexId;
use assign::{assign, mean_row, partition_centres};
use lists::{build_partitions, ListFile};
use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

mod assign;
mod lists;

pub use lists::MergedRows;

/// Bytes the build holds per row through every phase: the caller's 8-byte heap TID, two
/// 2-byte partition numbers, and the identity placement's page, slot and page-cell arrays
/// (4 + 2 + 4) the writer keeps.
pub const FIXED_BYTES_PER_ROW: u64 = 8 + 4 + 10;
/// Fewest rows per partition (or all rows, when there are fewer): below this, partitions are
/// too small to hold a useful graph and the budget is refused (the documented floor).
pub const MIN_PARTITION_ROWS: usize = 1000;
/// Partitions are filled to at most this share of their capacity on average, leaving room
/// for clusters of unequal sizes (only the floor's count of partitions uses it).
const FILL: f64 = 0.75;
/// Each partition's list-file cursor reads at most this many bytes at a time...
const CURSOR_BYTES: usize = 32 << 10;
/// ...and at least this many (a record is at most `4 (R + 1)` bytes; a cursor reads more when
/// one does not fit).
const MIN_CURSOR_BYTES: usize = 4 << 10;
/// Fewest rows the sample keeps for PQ training and k-means, whatever the budget.
const MIN_SAMPLE: usize = 2048;
/// Fewest members the entrance graph keeps when its usual share of the rows (the index's
/// entrance_ratio) does not fit in the budget.
const MIN_ENTRANCE: usize = 1000;
/// A row in only one partition has this as its second.
const NONE: u16 = u16::MAX;

/// How a memory-bounded build splits its rows, decided from the budget before any work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionPlan {
    pub rows: usize,
    pub partitions: usize,
    /// Most rows one partition takes (each row goes to two).
    pub partition_rows: usize,
    /// Rows sampled for PQ training and the partitioning's k-means.
    pub sample_rows: usize,
    /// Bytes each partition's list-file cursor reads at a time while the lists are merged.
    pub cursor_bytes: usize,
    /// Members of the entrance graph: `entrance_ratio` of the rows, or fewer when those do
    /// not fit in the budget beside the merge's cursors (at least [`MIN_ENTRANCE`]).
    pub entrance_rows: usize,
}

impl PartitionPlan {
    /// The plan for `n` rows of `dim` dimensions under `budget` bytes, or the error that
    /// names the smallest budget that would do.
    pub fn new(
        n: usize,
        dim: usize,
        params: &IndexParams,
        budget: u64,
    ) -> Result<Self, IndexError> {
        let threads = params.threads.max(1);
        let fixed = n as u64 * FIXED_BYTES_PER_ROW;
        let floor = Self::floor(n, dim, params);
        if budget < floor {
            return Err(IndexError::Memory(format!(
                "a memory-bounded build of {n} rows of {dim} dimensions needs at least {} \
                 (partitions of {MIN_PARTITION_ROWS} rows); the budget is {}",
                crate::graph::memory::human_bytes(floor),
                crate::graph::memory::human_bytes(budget)
            )));
        }
        let left = budget - fixed;
        let per_sample_row = pq_training_bytes(1, dim, threads as u64).max(1);
        let sample_rows = ((left / 2 / per_sample_row) as usize)
            .clamp(MIN_SAMPLE, DEFAULT_TRAINING_SAMPLE)
            .min(n);
        // Phases run one after another: each partition's graph build may use all that is
        // left; the merge's cursors share it only with the serialised entrance graph.
        let fits = graph_rows_within(left, dim, params.max_degree, params.build_list, threads);
        let partition_rows = fits.max(MIN_PARTITION_ROWS.min(n)).min(n);
        // An estimate until the sample is partitioned (`partition_centres`).
        let partitions = (2 * n)
            .div_ceil(partition_rows)
            .clamp(1, (NONE - 1) as usize);
        // The entrance graph shares the writing phase with the cursors at their smallest.
        let wanted = entrance_rows_wanted(n, params);
        let cursors_at_least = partitions as u64 * MIN_CURSOR_BYTES as u64;
        let entrance_rows = if entrance_member_bytes(wanted, dim) + cursors_at_least <= left {
            wanted
        } else {
            let need = |rows: usize| entrance_member_bytes(rows, dim) + cursors_at_least;
            most_within(left, wanted, need).max(minimum_entrance(n, params))
        };
        let for_cursors = left.saturating_sub(entrance_member_bytes(entrance_rows, dim));
        let cursor_bytes = (for_cursors / partitions as u64) as usize;
        Ok(PartitionPlan {
            rows: n,
            partitions,
            partition_rows,
            sample_rows,
            cursor_bytes: cursor_bytes.clamp(MIN_CURSOR_BYTES, CURSOR_BYTES),
            entrance_rows,
        })
    }

    /// The smallest budget a memory-bounded build of `n` rows accepts.
    pub fn floor(n: usize, dim: usize, params: &IndexParams) -> u64 {
        let threads = params.threads.max(1);
        let fixed = n as u64 * FIXED_BYTES_PER_ROW;
        let graph = crate::graph::memory::graph_build_bytes(
            MIN_PARTITION_ROWS.min(n),
            dim,
            params.max_degree,
            params.build_list,
            threads,
        );
        // The gathered sample and PQ training's copy of it.
        let sample = 2 * pq_training_bytes(MIN_SAMPLE.min(n), dim, threads as u64);
        let writing = entrance_member_bytes(minimum_entrance(n, params), dim)
            + max_partitions(n) * MIN_CURSOR_BYTES as u64;
        fixed + graph.max(sample).max(writing)
    }
}

/// The entrance graph's members at the index's entrance_ratio (at least one).
fn entrance_rows_wanted(n: usize, params: &IndexParams) -> usize {
    ((n as f64 * f64::from(params.entrance_ratio)).ceil() as usize).clamp(1.min(n), n)
}

/// The fewest entrance members a memory-bounded build accepts.
fn minimum_entrance(n: usize, params: &IndexParams) -> usize {
    entrance_rows_wanted(n, params).min(MIN_ENTRANCE)
}

/// Partitions of `n` rows at the smallest partition size.
fn max_partitions(n: usize) -> u64 {
    ((2 * n) as f64 / (MIN_PARTITION_ROWS as f64 * FILL)).ceil() as u64
}

/// What the partitioned phases left for the writer: the PQ codebook, the entrance graph,
/// the medoid, and the list file with each partition's records.
pub struct PartitionedBuild<'a> {
    pub report: BuildReport,
    pub plan: PartitionPlan,
    pub medoid: VertexId,
    pub pq: ProductQuantizer,
    /// The entrance graph, serialised (the graph itself is dropped before the lists merge).
    pub entrance: Vec<u8>,
    spool: &'a RowSpool,
    pairs: Vec<[u16; 2]>,
    lists: ListFile,
}

impl<'a> PartitionedBuild<'a> {
    /// Runs steps 1-5 over the finished `spool`. Temporary files go beside it.
    pub fn run(
        spool: &'a RowSpool,
        params: &IndexParams,
        budget: u64,
        progress: Progress,
        cancel: Cancel,
    ) -> Result<Self, IndexError> {
        let n = spool.len();
        let dim = spool.dim();
        params.validate(dim)?;
        let plan = PartitionPlan::new(n, dim, params, budget)?;
        let pq_bytes = params.pq_bytes_for(dim);
        let mut report = BuildReport {
            vertices: n,
            dim,
            pq_bytes,
            memory_estimate: budget,
            ..BuildReport::default()
        };
        let check = || {
            if cancel() {
                Err(IndexError::Cancelled)
            } else {
                Ok(())
            }
        };
        let io =
            |e: std::io::Error| IndexError::Invalid(format!("{}: {e}", spool.path().display()));
        let phase = |p: BuildPhase, total: u64, report: &mut BuildReport, started: Instant| {
            progress(p, total, total);
            report.phases.push((p, started.elapsed()));
        };

        let started = Instant::now();
        progress(BuildPhase::Sampling, 0, plan.sample_rows as u64);
        let mut rng = ChaCha8Rng::seed_from_u64(params.seed ^ 0x7061_7274);
        let mut sample_ids: Vec<u32> = sample(&mut rng, n, plan.sample_rows)
            .into_iter()
            .map(|i| i as u32)
            .collect();
        sample_ids.sort_unstable();
        let mut sample_rows = Vec::with_capacity(sample_ids.len() * dim);
        spool.read_rows(&sample_ids, &mut sample_rows).map_err(io)?;
        drop(sample_ids);
        phase(
            BuildPhase::Sampling,
            plan.sample_rows as u64,
            &mut report,
            started,
        );
        check()?;

        let started = Instant::now();
        progress(BuildPhase::PqTraining, 0, plan.sample_rows as u64);
        let pq = train_pq(&sample_rows, dim, plan.sample_rows, pq_bytes, params)?;
        phase(
            BuildPhase::PqTraining,
            plan.sample_rows as u64,
            &mut report,
            started,
        );
        check()?;

        let started = Instant::now();
        // Two passes over the rows (firsts, then seconds).
        progress(BuildPhase::Partitioning, 0, 2 * n as u64);
        // Each partition's own rows fill about half of it; rows that link it to a neighbour
        // (their second partition) the rest.
        let target =
            (plan.sample_rows as u64 * plan.partition_rows as u64 / (2 * n as u64)) as usize;
        let centres = partition_centres(&sample_rows, dim, target, params)?;
        // The cursors share what the estimate gave them among the partitions there are.
        let mut plan = plan;
        plan.cursor_bytes = (plan.cursor_bytes * plan.partitions / centres.k().max(1))
            .clamp(MIN_CURSOR_BYTES, CURSOR_BYTES);
        plan.partitions = centres.k();
        let mean = mean_row(&sample_rows, dim);
        drop(sample_rows);
        let (pairs, medoid) = assign(spool, &centres, &plan, &mean, progress).map_err(io)?;
        drop(centres);
        phase(BuildPhase::Partitioning, 2 * n as u64, &mut report, started);
        check()?;

        let started = Instant::now();
        let members_total = pairs
            .iter()
            .map(|p| 1 + usize::from(p[1] != NONE))
            .sum::<usize>();
        progress(BuildPhase::GraphBuild, 0, members_total as u64);
        let lists = build_partitions(spool, &pairs, &plan, params, progress, cancel)?;
        phase(
            BuildPhase::GraphBuild,
            members_total as u64,
            &mut report,
            started,
        );
        check()?;

        let started = Instant::now();
        // The plan's share, which is the index's entrance_ratio unless the budget is short.
        let ratio = (plan.entrance_rows as f64 / n.max(1) as f64) as f32;
        let ids = entrance_sample(n, ratio.min(params.entrance_ratio), params.seed);
        progress(BuildPhase::Entrance, 0, ids.len() as u64);
        let mut vectors = Vec::with_capacity(ids.len() * dim);
        spool.read_rows(&ids, &mut vectors).map_err(io)?;
        let total = ids.len() as u64;
        let report_entrance = |done: u64, total: u64| progress(BuildPhase::Entrance, done, total);
        let control = BuildControl {
            progress: Some(&report_entrance),
            should_stop: Some(&cancel),
        };
        let entrance = EntranceGraph::build_from_gathered(
            ids,
            vectors,
            dim,
            params.metric,
            &entrance_params(params),
            &control,
        )
        .map_err(entrance_error)?;
        report.entrance_size = entrance.len();
        let entrance = entrance.to_bytes();
        phase(BuildPhase::Entrance, total, &mut report, started);
        check()?;

        Ok(PartitionedBuild {
            report,
            plan,
            medoid,
            pq,
            entrance,
            spool,
            pairs,
            lists,
        })
    }

    /// The writer's source of lists, vectors and codes.
    pub fn rows(&self, max_degree: usize) -> MergedRows<'_> {
        MergedRows::new(self, max_degree)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_splits_by_the_budget_and_refuses_below_the_floor() {
        let params = IndexParams {
            max_degree: 32,
            build_list: 64,
            threads: 2,
            ..IndexParams::default()
        };
        let (n, dim) = (200_000, 128);
        let floor = PartitionPlan::floor(n, dim, &params);
        let err = PartitionPlan::new(n, dim, &params, floor - 1).unwrap_err();
        assert!(matches!(err, IndexError::Memory(_)), "{err}");
        let small = PartitionPlan::new(n, dim, &params, floor).unwrap();
        assert!(small.partition_rows >= MIN_PARTITION_ROWS);
        let large = PartitionPlan::new(n, dim, &params, 8 * floor).unwrap();
        assert!(
            large.partition_rows > 4 * small.partition_rows,
            "{small:?} {large:?}"
        );
        assert!(large.partitions < small.partitions);
        for (plan, budget) in [(small, floor), (large, 8 * floor)] {
            // Room for every row twice, with slack for unequal clusters.
            assert!(plan.partitions * plan.partition_rows >= 2 * n, "{plan:?}");
            // Every phase within the budget, beside the per-row arrays.
            let fixed = n as u64 * FIXED_BYTES_PER_ROW;
            let graph =
                crate::graph::memory::graph_build_bytes(plan.partition_rows, dim, 32, 64, 2);
            let sample = pq_training_bytes(plan.sample_rows, dim, 2)
                + plan.sample_rows as u64 * dim as u64 * 4;
            let writing = entrance_member_bytes(plan.entrance_rows, dim)
                + (plan.partitions * plan.cursor_bytes) as u64;
            for (phase, bytes) in [("graph", graph), ("sample", sample), ("writing", writing)] {
                assert!(
                    fixed + bytes <= budget,
                    "{phase}: {bytes} + {fixed} > {budget}, {plan:?}"
                );
            }
        }
    }
}
