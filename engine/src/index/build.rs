//! The build pipeline: [`build_index`] and [`build_in_memory`] run the build phases over the
//! input rows under the memory budget and report them.

use std::path::Path;
use std::time::{Duration, Instant};

use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{IndexError, IndexParams};
use crate::distance::{normalize, Metric};
use crate::entrance::shared::SharedEntrance;
use crate::entrance::{EntranceError, EntranceGraph, EntranceParams, DEFAULT_BUILD_LIST};
use crate::graph::{self, BuildControl, BuildError};
use crate::placement::{
    greedy_placement_until, identity_placement, overlap_ratio, Placement, RefineOptions,
};
use crate::pq::{PqTrainConfig, PqTraining, ProductQuantizer};
use crate::storage::{
    names, BuildInput, BuildParams, EdgePageLayout, HeapTid, IndexWriter, StorageError,
};
use crate::VertexId;

/// Named build phases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildPhase {
    Sampling,
    PqTraining,
    /// A memory-bounded build's assignment of rows to partitions.
    Partitioning,
    GraphBuild,
    Placement,
    Entrance,
    Writing,
}

impl BuildPhase {
    pub fn name(self) -> &'static str {
        match self {
            BuildPhase::Sampling => "sampling",
            BuildPhase::PqTraining => "PQ training",
            BuildPhase::Partitioning => "partitioning",
            BuildPhase::GraphBuild => "graph build",
            BuildPhase::Placement => "placement",
            BuildPhase::Entrance => "entrance graph",
            BuildPhase::Writing => "writing",
        }
    }
}

/// Progress callback: (phase, work done, work total) in phase-specific units.
pub type Progress<'a> = &'a (dyn Fn(BuildPhase, u64, u64) + Sync);
/// Cancel check, polled between chunks of work.
pub type Cancel<'a> = &'a (dyn Fn() -> bool + Sync);

/// What a build did.
#[derive(Clone, Debug, Default)]
pub struct BuildReport {
    pub vertices: usize,
    pub dim: usize,
    pub pq_bytes: usize,
    /// Phases one after the other, wall-clock time each; their sum is the build's time.
    pub phases: Vec<(BuildPhase, Duration)>,
    /// Parts of one of `phases` timed on their own, not added to the total: placement alone,
    /// inside the phase that also trains PQ.
    pub parts: Vec<(BuildPhase, Duration)>,
    /// Estimated peak bytes, stated before the build started.
    pub memory_estimate: u64,
    /// The process's peak resident set after the build (VmHWM), if readable.
    pub peak_rss: Option<u64>,
    pub overlap_greedy: f64,
    pub overlap_identity: f64,
    pub edge_pages: u32,
    pub entrance_size: usize,
    /// Bytes of each side file written.
    pub file_sizes: Vec<(String, u64)>,
}

impl BuildReport {
    pub fn total_time(&self) -> Duration {
        self.phases.iter().map(|p| p.1).sum()
    }
}

/// The edge pages a build places its lists on. Placement packs neighbours per page, so it
/// is computed for the pages that will hold the lists: 10 slots per 4 KiB side-file page at
/// R = 96, 20 per 8 KiB relation page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgePageFormat {
    /// The side directory's 4 KiB pages ([`EdgePageLayout`]).
    SideFile,
    /// The relation's 8 KiB pages ([`crate::pages::edge::EdgeLayout`], RFC 0001 §2).
    Relation,
}

impl EdgePageFormat {
    pub fn slots_per_page(self, max_degree: usize) -> Result<usize, StorageError> {
        Ok(match self {
            EdgePageFormat::SideFile => EdgePageLayout::new(max_degree)?.slots_per_page(),
            EdgePageFormat::Relation => {
                crate::pages::edge::EdgeLayout::new(max_degree)?.slots_per_page()
            }
        })
    }
}

/// Everything the build phases produced, before anything is written: what a writer needs
/// ([`BuiltIndex::input`]) and the report so far (every phase but writing).
pub struct BuiltIndex<'a> {
    pub report: BuildReport,
    pub metric: Metric,
    pub dim: usize,
    pub max_degree: usize,
    pub pq_bytes: usize,
    /// The rows as indexed: normalised for cosine, else the input itself.
    pub vectors: std::borrow::Cow<'a, [f32]>,
    pub tids: &'a [HeapTid],
    pub adjacency: Vec<Vec<VertexId>>,
    /// The graph's medoid (0 for an empty index).
    pub medoid: VertexId,
    /// Computed for the [`EdgePageFormat`] the build was asked for.
    pub placement: Placement,
    pub codes: Vec<u8>,
    pub codebook: Vec<u8>,
    pub entrance: EntranceGraph,
    pub entrance_bytes: Vec<u8>,
    pub params: BuildParams,
}

impl BuiltIndex<'_> {
    /// The writers' view of the build.
    pub fn input(&self) -> BuildInput<'_> {
        BuildInput {
            metric: self.metric,
            dim: self.dim,
            max_degree: self.max_degree,
            vectors: &self.vectors,
            heap_tids: self.tids,
            adjacency: &self.adjacency,
            placement: &self.placement,
            pq_bytes: self.pq_bytes,
            pq_codebook: &self.codebook,
            pq_codes: &self.codes,
            entrance: &self.entrance_bytes,
            params: self.params,
        }
    }
}

/// Builds a complete index over `vectors` (`tids.len()` rows, row-major) into `dir`.
pub fn build_index(
    dir: &Path,
    vectors: &[f32],
    tids: &[HeapTid],
    params: &IndexParams,
    progress: Progress,
    cancel: Cancel,
) -> Result<BuildReport, IndexError> {
    let mut built = build_in_memory(
        vectors,
        tids,
        params,
        EdgePageFormat::SideFile,
        progress,
        cancel,
    )?;
    let mut report = std::mem::take(&mut built.report);
    let mut clock = PhaseClock::new(progress);
    clock.start(BuildPhase::Writing, tids.len() as u64);
    let manifest = IndexWriter::create_with_medoid(dir, &built.input(), built.medoid)?;
    // The shared entrance graph for the server lifetime the fresh state belongs to (epoch 0
    // until the first recovery rebuilds it).
    SharedEntrance::create(&dir.join(names::ENTRANCE_SHM), &built.entrance, 0)
        .map_err(|e| IndexError::Invalid(format!("{}: {e}", dir.display())))?;
    report.edge_pages = manifest.edge_pages;
    clock.finish(&mut report);
    report.file_sizes = file_sizes(dir);
    report.peak_rss = peak_rss_bytes();
    Ok(report)
}

/// Runs every build phase but writing (sampling, PQ, graph, placement for `format`'s pages,
/// entrance graph) and returns the result in memory; the caller writes it (side files:
/// [`build_index`]; the relation: `crate::relation::build_relation`) and reports the
/// writing phase itself.
pub fn build_in_memory<'a>(
    vectors: &'a [f32],
    tids: &'a [HeapTid],
    params: &IndexParams,
    format: EdgePageFormat,
    progress: Progress,
    cancel: Cancel,
) -> Result<BuiltIndex<'a>, IndexError> {
    let n = tids.len();
    let dim = infer_dim(vectors.len(), n, params)?;
    params.validate(dim)?;
    let pq_bytes = params.pq_bytes_for(dim);
    let mut report = BuildReport {
        vertices: n,
        dim,
        pq_bytes,
        ..BuildReport::default()
    };
    report.memory_estimate = graph::memory::estimate_build_memory_detailed(
        n,
        dim,
        params.max_degree,
        pq_bytes,
        params.build_list,
        params.threads,
    )
    .total();
    if let Some(budget) = params.memory_budget {
        graph::check_budget(report.memory_estimate, budget).map_err(IndexError::Memory)?;
    }
    let check = || {
        if cancel() {
            Err(IndexError::Cancelled)
        } else {
            Ok(())
        }
    };
    let mut clock = PhaseClock::new(progress);

    clock.start(BuildPhase::Sampling, n as u64);
    let data = match prepared_rows(vectors, dim, params.metric)? {
        Some(copy) => std::borrow::Cow::Owned(copy),
        None => std::borrow::Cow::Borrowed(vectors),
    };
    let entrance_ids = entrance_sample(n, params.entrance_ratio, params.seed);
    clock.finish(&mut report);
    check()?;

    // One Vamana pass reports one unit per inserted vertex.
    clock.start(BuildPhase::GraphBuild, n as u64);
    let vamana = params.vamana();
    let report_graph = |done: u64, total: u64| progress(BuildPhase::GraphBuild, done, total);
    let control = BuildControl {
        progress: Some(&report_graph),
        should_stop: Some(&cancel),
    };
    let graph = graph::build_vamana(&data, dim, params.metric, &vamana, &control)?;
    clock.finish(&mut report);
    check()?;

    // PQ training does not need the graph, so it runs beside placement: a scoped worker
    // trains PQ subspaces while the caller places edge lists (refining pages on all the
    // build's threads, crate::placement), then the caller joins the training
    // (crate::pq_training), and both threads encode. Placement was 20% of a 1M x 384 build
    // when it refined on one thread, PQ training a few seconds of it
    // (benchmarks/results/compare.md). The codebook is the one a serial training gives. The
    // worker never calls `progress` or `cancel`. Placement asks `cancel` between refinement
    // batches (at 1M rows it runs for half a minute); on a cancel the PQ worker is told to
    // stop after the subspace it is training.
    clock.start(BuildPhase::Placement, n as u64);
    let slots_per_page = format.slots_per_page(params.max_degree)?;
    let started = Instant::now();
    let job = prepare_pq(&data, dim, n, pq_bytes, params)?;
    let mut placed_in = Duration::ZERO;
    let placement = std::thread::scope(|scope| {
        if let (true, Some(job)) = (params.threads >= 2, &job) {
            scope.spawn(|| job.work());
        }
        let placement = place(
            &graph.adjacency,
            slots_per_page,
            params,
            progress,
            cancel,
            &mut report,
        );
        placed_in = started.elapsed();
        if let Some(job) = &job {
            if placement.is_ok() {
                job.train_on(params.threads.saturating_sub(1).max(1));
            } else {
                // Cancelled: the worker stops after the subspace it is training.
                job.abandon();
            }
        }
        placement
    })?;
    let pq = finish_pq(job, dim, pq_bytes, params)?;
    let codes = pq.encode_batch(&data, params.threads);
    clock.finish(&mut report);
    report.parts.push((BuildPhase::Placement, placed_in));
    check()?;

    clock.start(BuildPhase::Entrance, entrance_ids.len() as u64);
    let report_entrance = |done: u64, total: u64| progress(BuildPhase::Entrance, done, total);
    let control = BuildControl {
        progress: Some(&report_entrance),
        should_stop: Some(&cancel),
    };
    let entrance = build_entrance(entrance_ids, &data, dim, params, &control)?;
    report.entrance_size = entrance.len();
    clock.finish(&mut report);
    check()?;

    Ok(BuiltIndex {
        report,
        metric: params.metric,
        dim,
        max_degree: params.max_degree,
        pq_bytes,
        vectors: data,
        tids,
        adjacency: graph.adjacency,
        medoid: graph.medoid,
        placement,
        codes,
        codebook: pq.to_bytes(),
        entrance_bytes: entrance.to_bytes(),
        entrance,
        params: BuildParams {
            build_list: params.build_list as u32,
            alpha: params.alpha,
            entrance_ratio: params.entrance_ratio,
            entrance_degree: params.entrance_degree as u32,
        },
    })
}

/// The index's dimension: the rows', checked against a declared one; for zero rows the
/// declared one or a placeholder.
fn infer_dim(values: usize, n: usize, params: &IndexParams) -> Result<usize, IndexError> {
    if n == 0 {
        if values != 0 {
            return Err(IndexError::Invalid(format!(
                "{values} vector values given for zero rows"
            )));
        }
        return Ok(params.dim.unwrap_or_else(|| empty_index_dim(params)));
    }
    if values == 0 || !values.is_multiple_of(n) {
        return Err(IndexError::Invalid(format!(
            "{values} vector values do not form {n} rows of equal dimension"
        )));
    }
    let dim = values / n;
    match params.dim {
        Some(declared) if declared != dim => Err(IndexError::Invalid(format!(
            "rows have {dim} dimensions, the index was declared with {declared}"
        ))),
        _ => Ok(dim),
    }
}

/// Placeholder dimension of an empty index whose column declares none: the smallest that
/// the PQ code size accepts. No vector has it; the search of an empty index ignores it.
fn empty_index_dim(params: &IndexParams) -> usize {
    params.pq_bytes.unwrap_or(1).max(1)
}

/// Validates every row; returns a normalised copy for cosine (None: use the input as is).
fn prepared_rows(
    vectors: &[f32],
    dim: usize,
    metric: Metric,
) -> Result<Option<Vec<f32>>, IndexError> {
    for (i, row) in vectors.chunks_exact(dim).enumerate() {
        crate::vector::validate(row).map_err(|e| IndexError::Invalid(format!("row {i}: {e}")))?;
    }
    if !metric.needs_normalization() {
        return Ok(None);
    }
    let mut copy = vectors.to_vec();
    for (i, row) in copy.chunks_exact_mut(dim).enumerate() {
        if !normalize(row) {
            return Err(IndexError::Invalid(format!(
                "row {i} is a zero vector, which has no cosine distance"
            )));
        }
    }
    Ok(Some(copy))
}

pub(super) fn entrance_sample(n: usize, ratio: f32, seed: u64) -> Vec<VertexId> {
    // At least one vertex, unless there are none.
    let size = ((n as f64 * ratio as f64).ceil() as usize).clamp(1.min(n), n);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x656e_7472);
    let mut ids: Vec<VertexId> = sample(&mut rng, n, size)
        .into_iter()
        .map(|i| i as VertexId)
        .collect();
    ids.sort_unstable();
    ids
}

/// The PQ training job for `n` rows, `None` for an empty index (see [`train_pq`]).
fn prepare_pq(
    data: &[f32],
    dim: usize,
    n: usize,
    pq_bytes: usize,
    params: &IndexParams,
) -> Result<Option<PqTraining>, IndexError> {
    if n == 0 {
        return Ok(None);
    }
    let config = PqTrainConfig::new(params.seed, params.threads);
    PqTraining::prepare(data, dim, n, pq_bytes, params.metric, &config)
        .map(Some)
        .map_err(pq_error)
}

/// The codebook of a finished job, or [`train_pq`]'s placeholder for an empty index.
fn finish_pq(
    job: Option<PqTraining>,
    dim: usize,
    pq_bytes: usize,
    params: &IndexParams,
) -> Result<ProductQuantizer, IndexError> {
    match job {
        Some(job) => job.finish().map_err(pq_error),
        None => train_pq(&[], dim, 0, pq_bytes, params),
    }
}

fn pq_error(e: crate::pq::PqError) -> IndexError {
    IndexError::Invalid(format!("PQ training failed: {e}"))
}

pub(super) fn train_pq(
    data: &[f32],
    dim: usize,
    n: usize,
    pq_bytes: usize,
    params: &IndexParams,
) -> Result<ProductQuantizer, IndexError> {
    if n == 0 {
        // Nothing to train on, and nothing will ever be encoded with it: one zero centroid
        // per subspace keeps the codebook file valid.
        return ProductQuantizer::from_codebook(params.metric, dim, pq_bytes, 1, vec![0.0; dim])
            .map_err(|e| IndexError::Invalid(format!("empty PQ codebook: {e}")));
    }
    ProductQuantizer::train(
        data,
        dim,
        n,
        pq_bytes,
        params.metric,
        params.seed,
        params.threads,
    )
    .map_err(pq_error)
}

/// The entrance graph over `ids` (the index's own seeded sample), built like the main graph
/// but with R_ent and the entrance build list.
fn build_entrance(
    ids: Vec<VertexId>,
    data: &[f32],
    dim: usize,
    params: &IndexParams,
    control: &BuildControl,
) -> Result<EntranceGraph, IndexError> {
    EntranceGraph::build_from_ids(
        ids,
        data,
        dim,
        params.metric,
        &entrance_params(params),
        control,
    )
    .map_err(entrance_error)
}

/// The entrance graph's build parameters for an index built with `params`.
pub(super) fn entrance_params(params: &IndexParams) -> EntranceParams {
    EntranceParams {
        ratio: params.entrance_ratio as f64,
        min_size: 1,
        max_degree: params.entrance_degree,
        build_list: DEFAULT_BUILD_LIST.max(params.entrance_degree),
        alpha: params.alpha,
        seed: params.seed ^ 0x656e_7472,
        threads: params.threads,
    }
}

pub(super) fn entrance_error(e: EntranceError) -> IndexError {
    match e {
        EntranceError::Build(BuildError::Cancelled) => IndexError::Cancelled,
        other => IndexError::Invalid(other.to_string()),
    }
}

fn place(
    adjacency: &[Vec<VertexId>],
    slots_per_page: usize,
    params: &IndexParams,
    progress: Progress,
    cancel: Cancel,
    report: &mut BuildReport,
) -> Result<Placement, IndexError> {
    let err = |e: crate::placement::PlacementError| IndexError::Invalid(e.to_string());
    let identity = identity_placement(adjacency.len(), slots_per_page).map_err(err)?;
    let refine = RefineOptions::with_threads(params.threads);
    // Progress in the phase's unit (vertices), so that the total stays the one the phase
    // started with.
    let n = adjacency.len() as u64;
    let between_batches = |done: u64, most: u64| {
        progress(BuildPhase::Placement, done * n / most.max(1), n);
        cancel()
    };
    let greedy = greedy_placement_until(adjacency, slots_per_page, &refine, &between_batches)
        .map_err(err)?
        .ok_or(IndexError::Cancelled)?;
    report.overlap_identity = overlap_ratio(adjacency, &identity, slots_per_page);
    report.overlap_greedy = overlap_ratio(adjacency, &greedy, slots_per_page);
    Ok(greedy)
}

fn file_sizes(dir: &Path) -> Vec<(String, u64)> {
    crate::storage::names::ALL
        .iter()
        .filter_map(|name| {
            let len = std::fs::metadata(dir.join(name)).ok()?.len();
            Some((name.to_string(), len))
        })
        .collect()
}

/// Peak resident set size of this process (VmHWM), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Times phases and reports their start and end through the progress callback.
struct PhaseClock<'a> {
    progress: Progress<'a>,
    current: Option<(BuildPhase, Instant, u64)>,
}

impl<'a> PhaseClock<'a> {
    fn new(progress: Progress<'a>) -> Self {
        PhaseClock {
            progress,
            current: None,
        }
    }

    fn start(&mut self, phase: BuildPhase, total: u64) {
        (self.progress)(phase, 0, total);
        self.current = Some((phase, Instant::now(), total));
    }

    fn finish(&mut self, report: &mut BuildReport) {
        if let Some((phase, started, total)) = self.current.take() {
            (self.progress)(phase, total, total);
            report.phases.push((phase, started.elapsed()));
        }
    }
}
