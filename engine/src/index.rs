//! Build pipeline and the searchable, opened index.
//!
//! [`build_index`] runs the phases of a NAVIS build in order and reports each through a
//! callback (for `pg_stat_progress_create_index`):
//!
//! 1. **Sampling**: validate every row, normalise for cosine, choose the entrance sample.
//! 2. **PQ training** on a seeded sample, then encoding of every row.
//! 3. **Graph build**: two-pass Vamana (RobustPrune with alpha).
//! 4. **Placement**: Starling-style greedy page placement; its overlap ratio is reported
//!    against identity placement.
//! 5. **Entrance graph**: an in-memory Vamana graph ([`EntranceGraph`], R_ent from the
//!    parameters, build list 64) over the seeded sample of about `entrance_ratio` of the
//!    vertices, holding their full vectors.
//! 6. **Writing** every side file through [`IndexWriter`]; the main graph's medoid goes
//!    into the manifest as the start of searches without entry points. (A build into the
//!    relation layout runs phases 1-5 through [`build_in_memory`], placing lists for 8 KiB
//!    pages, and writes with `crate::relation::build_relation`.)
//!
//! An index over zero rows is valid (PostgreSQL builds one for `CREATE INDEX` on an empty
//! table): it has a placeholder PQ codebook, an empty entrance graph, and every search of
//! it finds nothing, whatever the query's dimension. Its dimension is
//! [`IndexParams::dim`], or a placeholder when the caller does not know one.
//!
//! The memory estimate is computed and checked against the caller's budget *before* any
//! allocation that scales with the input beyond the input itself.
//!
//! [`Index::open`] maps an existing directory; [`Index::reader`] gives a per-thread
//! [`DiskReader`] (it owns that thread's I/O queue) that implements
//! [`crate::search::IndexSource`], and [`Index::search`] runs one query with CASR
//! calibrated automatically on the first queries.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rand::seq::index::sample;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::cache::{Caller, Ticket};
use crate::casr::WindowCalibrator;
use crate::counters::SearchCounters;
use crate::distance::{normalize, Metric};
use crate::entrance::shared::SharedEntrance;
use crate::entrance::{
    EntranceError, EntranceGraph, EntranceParams, EntranceView, DEFAULT_BUILD_LIST,
};
use crate::graph::{self, BuildControl, BuildError, VamanaParams};
use crate::io::{AlignedPage, IoOptions, PageReader};
use crate::placement::{greedy_placement, identity_placement, overlap_ratio, Placement};
use crate::pq::ProductQuantizer;
use crate::search::{CasrMode, IndexSource, SearchCursor, SearchHit, SearchParams};
use crate::segments::SegmentReader;
use crate::storage::state::Field;
use crate::storage::{
    names, BuildInput, BuildParams, EdgePageLayout, HeapTid, IndexFiles, IndexWriter, IndirEntry,
    StorageError,
};
use crate::update::{IndexLog, SideFileLog};
use crate::VertexId;

/// Why a build or an open failed. Messages are meant for a PostgreSQL ERROR.
#[derive(Debug)]
pub enum IndexError {
    /// Bad parameters or input rows.
    Invalid(String),
    /// The memory estimate exceeds the budget.
    Memory(String),
    /// The caller's cancel check returned true.
    Cancelled,
    Storage(StorageError),
    Io(io::Error),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Invalid(m) | IndexError::Memory(m) => f.write_str(m),
            IndexError::Cancelled => f.write_str("navis operation cancelled"),
            IndexError::Storage(e) => write!(f, "{e}"),
            IndexError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for IndexError {}

impl From<StorageError> for IndexError {
    fn from(e: StorageError) -> Self {
        IndexError::Storage(e)
    }
}

impl From<io::Error> for IndexError {
    fn from(e: io::Error) -> Self {
        IndexError::Io(e)
    }
}

impl From<BuildError> for IndexError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Cancelled => IndexError::Cancelled,
            other => IndexError::Invalid(other.to_string()),
        }
    }
}

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

impl Default for IndexParams {
    fn default() -> IndexParams {
        IndexParams {
            metric: Metric::L2,
            dim: None,
            max_degree: 96,
            build_list: 128,
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

    fn validate(&self, dim: usize) -> Result<(), IndexError> {
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

/// Named build phases, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildPhase {
    Sampling,
    PqTraining,
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
    pub phases: Vec<(BuildPhase, Duration)>,
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

    clock.start(BuildPhase::PqTraining, n as u64);
    let pq = train_pq(&data, dim, n, pq_bytes, params)?;
    let codes = pq.encode_batch(&data, params.threads);
    clock.finish(&mut report);
    check()?;

    // One Vamana pass reports one unit per inserted vertex.
    clock.start(BuildPhase::GraphBuild, n as u64);
    let vamana = VamanaParams {
        max_degree: params.max_degree,
        build_list: params.build_list,
        alpha: params.alpha,
        seed: params.seed,
        threads: params.threads,
    };
    let report_graph = |done: u64, total: u64| progress(BuildPhase::GraphBuild, done, total);
    let control = BuildControl {
        progress: Some(&report_graph),
        should_stop: Some(&cancel),
    };
    let graph = graph::build_vamana(&data, dim, params.metric, &vamana, &control)?;
    clock.finish(&mut report);
    check()?;

    clock.start(BuildPhase::Placement, n as u64);
    let slots_per_page = format.slots_per_page(params.max_degree)?;
    let placement = place(&graph.adjacency, slots_per_page, &mut report)?;
    clock.finish(&mut report);
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

fn entrance_sample(n: usize, ratio: f32, seed: u64) -> Vec<VertexId> {
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

fn train_pq(
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
    .map_err(|e| IndexError::Invalid(format!("PQ training failed: {e}")))
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
    let entrance = EntranceParams {
        ratio: params.entrance_ratio as f64,
        min_size: 1,
        max_degree: params.entrance_degree,
        build_list: DEFAULT_BUILD_LIST.max(params.entrance_degree),
        alpha: params.alpha,
        seed: params.seed ^ 0x656e_7472,
        threads: params.threads,
    };
    EntranceGraph::build_from_ids(ids, data, dim, params.metric, &entrance, control).map_err(|e| {
        match e {
            EntranceError::Build(BuildError::Cancelled) => IndexError::Cancelled,
            other => IndexError::Invalid(other.to_string()),
        }
    })
}

fn place(
    adjacency: &[Vec<VertexId>],
    slots_per_page: usize,
    report: &mut BuildReport,
) -> Result<Placement, IndexError> {
    let err = |e: crate::placement::PlacementError| IndexError::Invalid(e.to_string());
    let identity = identity_placement(adjacency.len(), slots_per_page).map_err(err)?;
    let greedy = greedy_placement(adjacency, slots_per_page).map_err(err)?;
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

/// CASR window for searches: fixed, off, or calibrated on the index's first queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasrSetting {
    /// Calibrate on the first `warmup` queries (they rerank everything), then use the window.
    Auto,
    Window(usize),
    Off,
}

/// An opened index.
pub struct Index {
    files: IndexFiles,
    pq: ProductQuantizer,
    /// The shared entrance graph (`entrance.shm`), mapped; or, when that file cannot be
    /// used, a private copy built from the durable files (then nothing is promoted).
    entrance: RwLock<Arc<SharedEntrance>>,
    entrance_is_shared: AtomicBool,
    /// The state epoch at which `entrance` was last (re)opened.
    entrance_checked: AtomicU64,
    calibrator: Mutex<WindowCalibrator>,
    /// The log of a relation index (`Index::log`).
    log: std::sync::OnceLock<Arc<dyn IndexLog>>,
}

impl Index {
    /// Opens and validates an index directory.
    pub fn open(dir: &Path) -> Result<Index, IndexError> {
        Self::from_files(IndexFiles::open(dir)?)
    }

    /// The index whose files (side directory, or runtime directory and relation) are open.
    pub fn from_files(files: IndexFiles) -> Result<Index, IndexError> {
        let dir = files.dir().to_path_buf();
        let dir = dir.as_path();
        let pq = ProductQuantizer::from_bytes(files.pq_codebook())
            .map_err(|e| IndexError::Invalid(format!("{}: bad PQ codebook: {e}", dir.display())))?;
        let entrance = EntranceGraph::from_bytes(files.entrance())
            .map_err(|e| IndexError::Invalid(format!("{}: {e}", dir.display())))?;
        let m = files.manifest();
        if pq.dim() != m.dim as usize || entrance.dim() != m.dim as usize {
            return Err(IndexError::Invalid(format!(
                "{}: PQ codebook or entrance graph disagrees with the manifest's dimension {}",
                dir.display(),
                m.dim
            )));
        }
        if entrance.metric() != m.metric || entrance.ids().iter().any(|&v| v >= m.vertex_count) {
            return Err(IndexError::Invalid(format!(
                "{}: entrance graph does not match the manifest's metric or {} vertices",
                dir.display(),
                m.vertex_count
            )));
        }
        let epoch = files.state().epoch();
        let (shared, is_shared) = match open_shared_entrance(&files) {
            Some(shared) => (shared, true),
            None => (private_entrance(&files, entrance)?, false),
        };
        Ok(Index {
            files,
            pq,
            entrance: RwLock::new(Arc::new(shared)),
            entrance_is_shared: AtomicBool::new(is_shared),
            entrance_checked: AtomicU64::new(epoch),
            calibrator: Mutex::new(WindowCalibrator::for_search()),
            log: std::sync::OnceLock::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        self.files.dir()
    }

    /// Where this index's changes become durable (`update::log`): the side files
    /// themselves, or for a relation index the log its opener set ([`Index::set_log`]).
    pub fn log(&self) -> Result<Box<dyn IndexLog + '_>, StorageError> {
        match (self.files.relation(), self.log.get()) {
            (None, _) => Ok(Box::new(SideFileLog::new(&self.files)?)),
            (Some(_), Some(log)) => Ok(Box::new(Arc::clone(log))),
            (Some(relation), None) => Err(StorageError::invalid(format!(
                "the index in {} was opened read-only: it has no log to write through",
                relation.fork.display()
            ))),
        }
    }

    /// Sets the log a relation index writes through (once; false if one was set already).
    pub fn set_log(&self, log: Arc<dyn IndexLog>) -> bool {
        self.log.set(log).is_ok()
    }

    pub fn files(&self) -> &IndexFiles {
        &self.files
    }

    pub fn metric(&self) -> Metric {
        self.files.manifest().metric
    }

    pub fn dim(&self) -> usize {
        self.files.manifest().dim as usize
    }

    /// Vertices in the graph: published, lazily deleted ones included.
    pub fn len(&self) -> usize {
        self.files.state().get(Field::Published) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lazily deleted vertices (still in the graph, never in results).
    pub fn deleted_len(&self) -> usize {
        (self.files.state().get(Field::Deleted) as usize).min(self.len())
    }

    /// Vertices a search can return.
    pub fn live_len(&self) -> usize {
        self.len() - self.deleted_len()
    }

    /// The share of the graph that is lazily deleted.
    pub fn deleted_fraction(&self) -> f64 {
        if self.is_empty() {
            0.0
        } else {
            self.deleted_len() as f64 / self.len() as f64
        }
    }

    /// A search list widened for lazily deleted vertices, as NAVIS does:
    /// `ceil(L / (1 - d)) + 10` with `d` the deleted fraction; `L` when nothing is deleted.
    pub fn widened_list(&self, list: usize) -> usize {
        let d = self.deleted_fraction();
        if d <= 0.0 {
            return list;
        }
        let widened = (list as f64 / (1.0 - d).max(0.01)).ceil() as usize + 10;
        widened.min(list.saturating_mul(100).max(list))
    }

    /// Whether inserts are possible: an index built over an empty table has a placeholder
    /// quantizer (and maybe no dimension), so it cannot place or encode vectors.
    pub fn accepts_inserts(&self) -> bool {
        self.files.manifest().vertex_count > 0
    }

    /// Published and not lazily deleted.
    pub fn is_live_undeleted(&self, v: VertexId) -> bool {
        self.files
            .indirection()
            .entry(v)
            .is_some_and(|e| e.is_live() && !e.is_deleted())
    }

    pub(crate) fn pq(&self) -> &ProductQuantizer {
        &self.pq
    }

    /// The entrance graph every process shares (see `entrance::shared`). After a recovery
    /// rebuilt the shared file (a new server lifetime), the new file is mapped.
    pub fn entrance(&self) -> Arc<SharedEntrance> {
        let epoch = self.files.state().epoch();
        let current = Arc::clone(&self.entrance.read().expect("entrance lock"));
        if self.entrance_checked.load(Ordering::Acquire) == epoch {
            return current;
        }
        self.entrance_checked.store(epoch, Ordering::Release);
        match open_shared_entrance(&self.files) {
            Some(fresh) if fresh.epoch() == epoch || !self.entrance_is_shared() => {
                let fresh = Arc::new(fresh);
                *self.entrance.write().expect("entrance lock") = Arc::clone(&fresh);
                self.entrance_is_shared.store(true, Ordering::Release);
                fresh
            }
            _ => current,
        }
    }

    /// Whether [`Index::entrance`] is the shared graph (false: a private copy, because the
    /// shared file could not be opened; promotions are then skipped).
    pub fn entrance_is_shared(&self) -> bool {
        self.entrance_is_shared.load(Ordering::Acquire)
    }

    /// Replaces the search-window calibrator (e.g. to change the warm-up count).
    pub fn set_calibrator(&self, calibrator: WindowCalibrator) {
        *self.calibrator.lock().expect("calibrator lock") = calibrator;
    }

    /// The calibrated search window, once warm-up is done.
    pub fn search_window(&self) -> Option<usize> {
        self.calibrator.lock().expect("calibrator lock").window()
    }

    /// A reader for one thread: it owns an io_uring queue (or the pread fallback, chosen at
    /// run time; `NAVIS_IO=pread` forces it) over the edge and vector files.
    pub fn reader(&self) -> io::Result<DiskReader<'_>> {
        self.reader_reusing(None)
    }

    /// A reader that takes over what an earlier reader of this index left
    /// ([`DiskReader::into_spare`]): its open files, io_uring queue and buffers. PostgreSQL
    /// starts a reader per index scan; reusing one saves two `open`s, an `io_uring_setup`
    /// and freshly faulted buffers on every query. A spare from another index is dropped and
    /// a new reader opened.
    pub fn reader_reusing(&self, spare: Option<SpareReader>) -> io::Result<DiskReader<'_>> {
        match spare {
            Some(s) if s.index == self.identity() => Ok(DiskReader {
                index: self,
                io: s.io,
                slot_buf: s.slot_buf,
                miss_buf: s.miss_buf,
                caller: Caller::Search,
            }),
            _ => Ok(DiskReader {
                index: self,
                io: match self.files.relation() {
                    None => ReaderIo::Side(PageReader::for_index(&self.files, READER_QUEUE_DEPTH)?),
                    Some(relation) => ReaderIo::Relation(SegmentReader::open(
                        &relation.fork,
                        IoOptions::from_env(READER_QUEUE_DEPTH)?,
                    )?),
                },
                slot_buf: Vec::new(),
                miss_buf: Vec::new(),
                caller: Caller::Search,
            }),
        }
    }

    /// Tells this index's spare readers from another's while both are alive.
    fn identity(&self) -> usize {
        self as *const Index as usize
    }

    /// One top-k search. With [`CasrSetting::Auto`] the first queries rerank everything and
    /// feed the calibrator; later ones use the calibrated window.
    pub fn search(
        &self,
        reader: &mut DiskReader<'_>,
        query: &[f32],
        mut params: SearchParams,
        casr: CasrSetting,
    ) -> io::Result<(Vec<SearchHit>, SearchCounters)> {
        let calibrating = match casr {
            // The packed-layout emulation reranks every vector it loaded while expanding, so
            // there is no window to apply and its reranks yield no calibration sample.
            _ if params.packed => {
                params.casr = CasrMode::Off;
                false
            }
            CasrSetting::Auto => match self.search_window() {
                Some(w) => {
                    params.casr = CasrMode::Window(w);
                    false
                }
                None => {
                    params.casr = CasrMode::Off;
                    true
                }
            },
            CasrSetting::Window(w) => {
                params.casr = CasrMode::Window(w);
                false
            }
            CasrSetting::Off => {
                params.casr = CasrMode::Off;
                false
            }
        };
        let mut cursor = SearchCursor::new(reader, query, params)?;
        let hits = cursor.next_batch(params.k)?;
        if let (true, Some(w)) = (calibrating, cursor.calibration_sample()) {
            self.calibrator
                .lock()
                .expect("calibrator lock")
                .record_window(w);
        }
        Ok((hits, *cursor.counters()))
    }
}

impl Index {
    /// Runs [`CasrSetting::Auto`] searches over `queries` (row-major, cycled) until the CASR
    /// window is calibrated, and returns it. Gives up (returning `None`, after which `Auto`
    /// searches keep reranking everything) when no query can feed the calibrator: packed
    /// searches, an index or query set with nothing to rerank, or `max_queries` searches
    /// without completing the warm-up.
    pub fn warm_up(
        &self,
        reader: &mut DiskReader<'_>,
        queries: &[f32],
        params: SearchParams,
        max_queries: usize,
    ) -> io::Result<Option<usize>> {
        let dim = self.dim();
        if params.packed || self.is_empty() || queries.len() < dim {
            return Ok(self.search_window());
        }
        let rows: Vec<&[f32]> = queries.chunks_exact(dim).collect();
        for q in rows.iter().cycle().take(max_queries) {
            if let Some(w) = self.search_window() {
                return Ok(Some(w));
            }
            self.search(reader, q, params, CasrSetting::Auto)?;
        }
        Ok(self.search_window())
    }
}

/// Maps `entrance.shm` if it exists and matches the manifest.
fn open_shared_entrance(files: &IndexFiles) -> Option<SharedEntrance> {
    let shared = SharedEntrance::open(&files.dir().join(names::ENTRANCE_SHM)).ok()?;
    let m = files.manifest();
    (shared.dim() == m.dim as usize && shared.metric() == m.metric).then_some(shared)
}

/// A private entrance graph (build plus logged promotions) in an unlinked temporary file,
/// for when the shared one cannot be opened.
fn private_entrance(
    files: &IndexFiles,
    mut graph: EntranceGraph,
) -> Result<SharedEntrance, IndexError> {
    let logged = files.state().get(Field::EntranceLogBytes) as u64;
    crate::update::promote::apply_log(
        &files.dir().join(names::ENTRANCE_LOG),
        0,
        logged,
        &mut graph,
    );
    let path = std::env::temp_dir().join(format!(
        "navis-entrance-{}-{:x}.shm",
        std::process::id(),
        rand::random::<u64>()
    ));
    let invalid = |e: EntranceError| IndexError::Invalid(format!("{}: {e}", files.dir().display()));
    SharedEntrance::create(&path, &graph, u64::MAX).map_err(invalid)?;
    let opened = SharedEntrance::open(&path).map_err(invalid);
    let _ = std::fs::remove_file(&path);
    opened
}

/// Per-thread read access to an [`Index`]: implements [`IndexSource`].
pub struct DiskReader<'a> {
    index: &'a Index,
    io: ReaderIo,
    slot_buf: Vec<u8>,
    miss_buf: Vec<AlignedPage>,
    caller: Caller,
}

/// A finished [`DiskReader`]'s reusable parts, for [`Index::reader_reusing`]. Every read of
/// a reader completes before the call that issued it returns, so a spare has nothing in
/// flight.
pub struct SpareReader {
    index: usize,
    io: ReaderIo,
    slot_buf: Vec<u8>,
    miss_buf: Vec<AlignedPage>,
}

/// Reads in flight per reader: a hop reads W = 4 pages, a CASR window tens of vectors.
const READER_QUEUE_DEPTH: u32 = 64;

/// A reader's I/O: the side files' edge and vector files, or the relation's segment files.
enum ReaderIo {
    Side(PageReader),
    Relation(SegmentReader),
}

impl ReaderIo {
    #[cfg(test)]
    fn stats(&self) -> crate::io::IoStats {
        match self {
            ReaderIo::Side(io) => io.stats(),
            ReaderIo::Relation(io) => io.stats(),
        }
    }
}

impl DiskReader<'_> {
    /// Gives up the reader's files, queue and buffers for the next reader of the same index.
    pub fn into_spare(self) -> SpareReader {
        SpareReader {
            index: self.index.identity(),
            io: self.io,
            slot_buf: self.slot_buf,
            miss_buf: self.miss_buf,
        }
    }

    /// `io_uring+O_DIRECT`, `pread+buffered`, ...
    pub fn backend_name(&self) -> &'static str {
        match &self.io {
            ReaderIo::Side(io) => io.backend_name(),
            ReaderIo::Relation(io) if io.is_direct() => "segments+O_DIRECT",
            ReaderIo::Relation(_) => "segments+buffered",
        }
    }

    /// Whose reads these are, for the edge-page cache's promotion rule and statistics
    /// (searches by default; inserts set [`Caller::Insert`] for their position seeking).
    pub fn set_caller(&mut self, caller: Caller) {
        self.caller = caller;
    }

    pub fn caller(&self) -> Caller {
        self.caller
    }

    /// Checks the checksum and page number of every page read from disk; a page that fails
    /// is never handed out or cached.
    fn verify_pages(&self, pages: &[u32], bytes: &[u8]) -> io::Result<()> {
        let files = &self.index.files;
        let layout = files.edge_layout();
        for (&page_no, page) in pages.iter().zip(bytes.chunks_exact(layout.page_size())) {
            files
                .bulk()
                .verify_edge_page(&layout, page, page_no)
                .map_err(storage_to_io)?;
        }
        Ok(())
    }

    /// Reads edge pages `pages` from disk into `self.miss_buf`, back to back in the edge
    /// layout's page size, and verifies them; returns their bytes' length. Side files: 4 KiB
    /// pages of the edge file; a relation: 8 KiB blocks of its segment files, where the
    /// extent map places each ordinal.
    fn read_from_disk(&mut self, pages: &[u32]) -> io::Result<usize> {
        let page_size = self.index.files.edge_layout().page_size();
        let units = pages.len() * page_size / std::mem::size_of::<AlignedPage>();
        self.miss_buf.resize(units, AlignedPage::zeroed());
        match &mut self.io {
            ReaderIo::Side(io) => io.read_edge_pages(pages, &mut self.miss_buf[..units])?,
            ReaderIo::Relation(io) => {
                let relation = self.index.files.relation().expect("a relation index");
                let blocks: Vec<u32> = pages
                    .iter()
                    .map(|&p| {
                        relation
                            .block(crate::pages::PageKind::Edge, p)
                            .map_err(storage_to_io)?
                            .ok_or_else(|| {
                                io::Error::new(
                                    io::ErrorKind::InvalidData,
                                    format!("edge page {p} is beyond the extent map"),
                                )
                            })
                    })
                    .collect::<io::Result<_>>()?;
                io.read_blocks(&blocks, &mut self.miss_buf[..units])?;
            }
        }
        let bytes: &[u8] = bytemuck::cast_slice(&self.miss_buf[..units]);
        self.verify_pages(pages, bytes)?;
        Ok(bytes.len())
    }
}

pub(crate) fn storage_to_io(e: StorageError) -> io::Error {
    match e {
        StorageError::Io { source, .. } => source,
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

impl IndexSource for DiskReader<'_> {
    type PqTable = crate::pq::QueryTable;

    fn metric(&self) -> Metric {
        self.index.metric()
    }

    fn dim(&self) -> usize {
        self.index.dim()
    }

    fn edge_layout(&self) -> EdgePageLayout {
        self.index.files.edge_layout()
    }

    fn entry(&self, v: VertexId) -> Option<IndirEntry> {
        self.index.files.indirection().entry(v)
    }

    fn pq_table(&self, query: &[f32]) -> Self::PqTable {
        self.index.pq.query_table(query)
    }

    fn pq_distance(&self, table: &Self::PqTable, v: VertexId) -> f32 {
        self.index
            .files
            .pq_code(v)
            .map_or(f32::INFINITY, |code| table.distance(code))
    }

    fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn entry_points(
        &self,
        query: &[f32],
        list: usize,
        counters: &mut SearchCounters,
    ) -> Vec<VertexId> {
        let live = |v: VertexId| {
            self.entry(v)
                .is_some_and(|e| e.is_live() && !e.is_deleted())
        };
        // The query was checked against the index's dimension, which the entrance graph
        // shares (checked at open), so the search cannot fail.
        match self.index.entrance().search_live_counted(query, list, live) {
            Ok(((entry, _), distances)) => {
                counters.entrance_distances += distances as u64;
                entry
            }
            Err(_) => Vec::new(),
        }
    }

    fn medoid(&self) -> VertexId {
        self.index.files.manifest().medoid
    }

    fn id_bound(&self) -> VertexId {
        // Ids are handed out in order (or reused below the mark); every id below the mark has
        // its vector slot in the file.
        let files = &self.index.files;
        (files.state().get(Field::NextVertex)).min(files.indirection().capacity() as u32)
    }

    fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64> {
        // The index outlives this reader: its cache binding is not a borrow of `self`.
        let index = self.index;
        let page_size = index.files.edge_layout().page_size();
        let Some(binding) = index.files.page_cache() else {
            match &mut self.io {
                // Straight into `out` (zero-copy when it is aligned).
                ReaderIo::Side(io) => {
                    io.read_edge_pages_into(pages, out)?;
                    self.verify_pages(pages, out)?;
                }
                ReaderIo::Relation(_) => {
                    let len = self.read_from_disk(pages)?;
                    out[..len].copy_from_slice(&bytemuck::cast_slice(&self.miss_buf)[..len]);
                }
            }
            return Ok(0);
        };
        let cache = &binding.cache;
        // Hits are copied straight into place; misses are read as one batch. The frames are
        // this index's edge pages (`IndexFiles::attach_cache` checks their size).
        let mut misses: Vec<(usize, u32, Ticket)> = Vec::new();
        for (i, (&page_no, page)) in pages
            .iter()
            .zip(out.chunks_exact_mut(page_size))
            .enumerate()
        {
            let key = binding.key(page_no);
            if !cache.lookup(key, self.caller, page) {
                // Taken before the read: see `PageCache::admit`.
                misses.push((i, page_no, cache.ticket(key)));
            }
        }
        let hits = (pages.len() - misses.len()) as u64;
        if misses.is_empty() {
            return Ok(hits);
        }
        let miss_pages: Vec<u32> = misses.iter().map(|m| m.1).collect();
        // Verified before anything is admitted: a page that fails is never cached.
        let len = self.read_from_disk(&miss_pages)?;
        let miss_bytes: &[u8] = &bytemuck::cast_slice(&self.miss_buf)[..len];
        for (&(i, page_no, ticket), page) in misses.iter().zip(miss_bytes.chunks_exact(page_size)) {
            out[i * page_size..(i + 1) * page_size].copy_from_slice(page);
            cache.admit(binding.key(page_no), self.caller, page, ticket);
        }
        Ok(hits)
    }

    fn load_vectors(
        &mut self,
        ids: &[VertexId],
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64> {
        let slot_size = self.index.files.vector_layout().slot_size();
        // The vector of vertex v is in slot v (ids are reused together with their slots).
        self.slot_buf.resize(ids.len() * slot_size, 0);
        let bytes = match &mut self.io {
            ReaderIo::Side(io) => io.read_vectors(ids, &mut self.slot_buf)?,
            ReaderIo::Relation(io) => {
                let relation = self.index.files.relation().expect("a relation index");
                let read = io.read_vector_slots(
                    &relation.map(),
                    &relation.vectors,
                    ids,
                    &mut self.slot_buf,
                );
                match read {
                    Ok(bytes) => bytes,
                    // A slot beyond this copy of the map: the relation grew since it was read.
                    Err(_) => {
                        relation.refresh().map_err(storage_to_io)?;
                        io.read_vector_slots(
                            &relation.map(),
                            &relation.vectors,
                            ids,
                            &mut self.slot_buf,
                        )?
                    }
                }
            }
        };
        self.parse_slots(ids.iter().copied(), vectors, tids)?;
        Ok(bytes)
    }

    fn load_vector_run(
        &mut self,
        first: VertexId,
        count: usize,
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64> {
        let io = match &mut self.io {
            ReaderIo::Side(io) => io,
            ReaderIo::Relation(_) => {
                // Slots of a relation straddle page headers: read them as slots.
                let ids: Vec<VertexId> = (first..first + count as VertexId).collect();
                return self.load_vectors(&ids, vectors, tids);
            }
        };
        let slot_size = self.index.files.vector_layout().slot_size();
        self.slot_buf.resize(count * slot_size, 0);
        let bytes = io.read_vector_run(first, count, &mut self.slot_buf)?;
        self.parse_slots(first..first + count as VertexId, vectors, tids)?;
        Ok(bytes)
    }
}

impl DiskReader<'_> {
    /// Decodes the slots of `ids` from `slot_buf`, appending to `vectors` and `tids`.
    fn parse_slots(
        &self,
        ids: impl Iterator<Item = VertexId>,
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<()> {
        let layout = self.index.files.vector_layout();
        layout.accept_loaded(ids, &self.slot_buf, |v| self.entry(v), vectors, tids)
    }
}

/// Convenience for tests and tools: the directory's files, named.
pub fn index_paths(dir: &Path) -> Vec<PathBuf> {
    crate::storage::names::ALL
        .iter()
        .map(|n| dir.join(n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: BuildPhase, _: u64, _: u64) {}
    fn never() -> bool {
        false
    }

    fn small_params(metric: Metric) -> IndexParams {
        IndexParams {
            metric,
            max_degree: 16,
            build_list: 32,
            pq_bytes: Some(2),
            threads: 2,
            ..IndexParams::default()
        }
    }

    fn tids(n: usize) -> Vec<HeapTid> {
        (0..n)
            .map(|i| HeapTid {
                block: 100 + i as u32,
                offset: 1,
            })
            .collect()
    }

    fn search_all(index: &Index, query: &[f32], params: SearchParams) -> Vec<SearchHit> {
        let mut reader = index.reader().unwrap();
        let mut cursor = SearchCursor::new(&mut reader, query, params).unwrap();
        let mut hits = Vec::new();
        while let Some(hit) = cursor.next_hit().unwrap() {
            hits.push(hit);
        }
        hits
    }

    #[test]
    fn empty_index_opens_and_finds_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        for (name, declared, metric) in [
            ("undeclared", None, Metric::L2),
            ("declared", Some(6), Metric::Cosine),
        ] {
            let dir = tmp.path().join(name);
            let params = IndexParams {
                dim: declared,
                ..small_params(metric)
            };
            let report = build_index(&dir, &[], &[], &params, &none, &never).unwrap();
            assert_eq!((report.vertices, report.entrance_size), (0, 0));
            let index = Index::open(&dir).unwrap();
            assert!(index.is_empty());
            assert_eq!(index.dim(), declared.unwrap_or(2));
            assert_eq!(index.files().manifest().medoid, 0);
            assert!(index.entrance().is_empty());
            // Any dimension finds nothing, with and without the entrance graph.
            for query in [vec![1.0, 2.0, 3.0], vec![0.5; 6], vec![7.0]] {
                for use_entrance in [true, false] {
                    let p = SearchParams {
                        use_entrance,
                        ..SearchParams::default()
                    };
                    assert!(search_all(&index, &query, p).is_empty());
                }
                let mut reader = index.reader().unwrap();
                let (hits, c) = index
                    .search(
                        &mut reader,
                        &query,
                        SearchParams::default(),
                        CasrSetting::Auto,
                    )
                    .unwrap();
                assert!(hits.is_empty());
                assert_eq!((c.hops, c.pq_distances, c.entrance_distances), (0, 0, 0));
            }
            // Invalid queries are still refused.
            let mut reader = index.reader().unwrap();
            assert!(SearchCursor::new(&mut reader, &[f32::NAN], SearchParams::default()).is_err());
            assert!(SearchCursor::new(&mut reader, &[], SearchParams::default()).is_err());
        }
    }

    #[test]
    fn spare_readers_are_reused_only_by_their_own_index() {
        let tmp = tempfile::tempdir().unwrap();
        let (n, dim) = (400, 8);
        let data = crate::dataset::synthetic_clustered(n, dim, 4, 7);
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let params = small_params(Metric::L2);
        build_index(&a, &data, &tids(n), &params, &none, &never).unwrap();
        let other = crate::dataset::synthetic_clustered(n, dim, 4, 8);
        build_index(&b, &other, &tids(n), &params, &none, &never).unwrap();
        let (a, b) = (Index::open(&a).unwrap(), Index::open(&b).unwrap());
        let query = &data[3 * dim..4 * dim];
        let expected = search_all(&a, query, SearchParams::default());
        assert_eq!(expected[0].tid, tids(n)[3], "the query is row 3");

        // A reused reader (files, queue and buffers carried over) finds the same rows with
        // the same per-query counters, and its I/O totals keep counting.
        let mut spare = None;
        let mut counters = Vec::new();
        for _ in 0..3 {
            let mut reader = a.reader_reusing(spare.take()).unwrap();
            let bytes_before = reader.io.stats().bytes;
            let mut cursor =
                SearchCursor::new(&mut reader, query, SearchParams::default()).unwrap();
            let mut hits = Vec::new();
            while let Some(hit) = cursor.next_hit().unwrap() {
                hits.push(hit);
            }
            counters.push(cursor.counters().rerank_vector_loads);
            drop(cursor);
            assert_eq!(hits, expected);
            assert!(reader.io.stats().bytes > bytes_before);
            spare = Some(reader.into_spare());
        }
        assert!(counters.windows(2).all(|w| w[0] == w[1]), "{counters:?}");

        // A spare of index a given to index b is not used: b's reader reads b's files.
        let spare = spare.unwrap();
        assert_eq!(spare.index, a.identity());
        let mut reader = b.reader_reusing(Some(spare)).unwrap();
        assert_eq!(reader.io.stats().bytes, 0, "a fresh reader");
        let hits = {
            let mut cursor =
                SearchCursor::new(&mut reader, query, SearchParams::default()).unwrap();
            let mut hits = Vec::new();
            while let Some(hit) = cursor.next_hit().unwrap() {
                hits.push(hit);
            }
            hits
        };
        assert_eq!(hits, search_all(&b, query, SearchParams::default()));
    }

    #[test]
    fn auto_casr_warm_up_ends_for_packed_and_empty_searches() {
        let tmp = tempfile::tempdir().unwrap();
        let (n, dim) = (600, 8);
        let data = crate::dataset::synthetic_clustered(n, dim, 6, 3);
        let dir = tmp.path().join("idx");
        build_index(
            &dir,
            &data,
            &tids(n),
            &small_params(Metric::L2),
            &none,
            &never,
        )
        .unwrap();
        let index = Index::open(&dir).unwrap();
        let mut reader = index.reader().unwrap();
        let queries = &data[..20 * dim];
        let packed = SearchParams {
            packed: true,
            ..SearchParams::default()
        };
        index.set_calibrator(WindowCalibrator::new(5, 100.0).unwrap());
        // Packed searches never calibrate, so warm-up returns at once instead of spinning.
        assert_eq!(
            index.warm_up(&mut reader, queries, packed, 1000).unwrap(),
            None
        );
        for q in queries.chunks_exact(dim) {
            let (hits, c) = index
                .search(&mut reader, q, packed, CasrSetting::Auto)
                .unwrap();
            assert_eq!(hits.len(), 10);
            assert_eq!(c.packed_vector_loads, c.expanded);
        }
        assert_eq!(index.search_window(), None, "packed reranks are no samples");
        // A warm-up longer than the cap stops at the cap.
        let plain = SearchParams::default();
        index.set_calibrator(WindowCalibrator::new(1000, 100.0).unwrap());
        assert_eq!(
            index.warm_up(&mut reader, queries, plain, 30).unwrap(),
            None
        );
        assert_eq!(index.calibrator.lock().unwrap().samples(), 30);
        // An ordinary warm-up calibrates after exactly `warmup` searches.
        index.set_calibrator(WindowCalibrator::new(5, 100.0).unwrap());
        let w = index.warm_up(&mut reader, queries, plain, 1000).unwrap();
        assert!(w.is_some_and(|w| (1..=plain.list).contains(&w)), "{w:?}");
        assert_eq!(index.calibrator.lock().unwrap().samples(), 5);

        let empty = tmp.path().join("empty");
        build_index(&empty, &[], &[], &small_params(Metric::L2), &none, &never).unwrap();
        let index = Index::open(&empty).unwrap();
        let mut reader = index.reader().unwrap();
        assert_eq!(
            index
                .warm_up(&mut reader, &[1.0, 2.0], plain, 1000)
                .unwrap(),
            None
        );
    }

    #[test]
    fn one_and_two_vector_indexes_return_every_row() {
        let tmp = tempfile::tempdir().unwrap();
        let rows: [&[f32]; 2] = [&[1.0, 0.0, 0.0, 0.0], &[0.0, 3.0, 0.0, 4.0]];
        for n in [1usize, 2] {
            for metric in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
                let dir = tmp.path().join(format!("{n}-{}", metric.code()));
                let data: Vec<f32> = rows[..n].concat();
                let report =
                    build_index(&dir, &data, &tids(n), &small_params(metric), &none, &never)
                        .unwrap();
                assert_eq!((report.vertices, report.entrance_size), (n, 1));
                let index = Index::open(&dir).unwrap();
                assert_eq!(index.len(), n);
                assert!(index.files().manifest().medoid < n as u32);
                for use_entrance in [true, false] {
                    let p = SearchParams {
                        use_entrance,
                        ..SearchParams::default()
                    };
                    // The query equal to the last row finds it first, then the other one.
                    let hits = search_all(&index, rows[n - 1], p);
                    let ids: Vec<VertexId> = hits.iter().map(|h| h.id).collect();
                    let expected: Vec<VertexId> = (0..n as VertexId).rev().collect();
                    assert_eq!(ids, expected, "n={n} {metric:?} entrance={use_entrance}");
                    assert_eq!(hits[0].tid, tids(n)[n - 1]);
                    let exact = metric.search_distance(rows[n - 1], rows[n - 1]);
                    let d0 = if metric == Metric::Cosine { 0.0 } else { exact };
                    assert!((hits[0].distance - d0).abs() < 1e-5, "{}", hits[0].distance);
                }
            }
        }
    }

    #[test]
    fn entrance_graph_is_persisted_and_seeds_the_search() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("idx");
        let (n, dim) = (3000, 8);
        let data = crate::dataset::synthetic_clustered(n, dim, 8, 5);
        let params = IndexParams {
            entrance_ratio: 0.02,
            entrance_degree: 12,
            ..small_params(Metric::L2)
        };
        let phases = Mutex::new(Vec::new());
        let progress = |p: BuildPhase, done: u64, total: u64| {
            phases.lock().unwrap().push((p, done, total));
        };
        let report = build_index(&dir, &data, &tids(n), &params, &progress, &never).unwrap();
        assert_eq!(report.entrance_size, 60);
        assert!(phases
            .lock()
            .unwrap()
            .contains(&(BuildPhase::Entrance, 60, 60)));
        let phases = phases.into_inner().unwrap();
        for phase in [BuildPhase::GraphBuild, BuildPhase::Entrance] {
            let events: Vec<_> = phases.iter().filter(|e| e.0 == phase).collect();
            let total = events[0].2;
            assert!(
                events.iter().all(|e| e.2 == total && e.1 <= total),
                "{phase:?} keeps one total: {events:?}"
            );
            assert!(events.len() > 2, "{phase:?} reports between start and end");
        }
        let index = Index::open(&dir).unwrap();
        let entrance = index.entrance();
        assert_eq!(entrance.ids(), entrance_sample(n, 0.02, params.seed));
        assert_eq!(entrance.max_degree(), 12);
        assert!(entrance
            .ids()
            .iter()
            .all(|&v| entrance.vector(v).unwrap() == &data[v as usize * dim..][..dim]));
        let reader = index.reader().unwrap();
        let query = &data[17 * dim..18 * dim];
        let mut c = SearchCounters::default();
        let entry = reader.entry_points(query, 10, &mut c);
        assert_eq!(entry.len(), 10);
        assert!(entry.iter().all(|&v| entrance.contains(v)));
        assert!(c.entrance_distances >= 10 && c.entrance_distances <= 60);
        // The closest sampled vertex, by brute force, is the first entry point.
        let closest = entrance
            .ids()
            .iter()
            .copied()
            .min_by(|&a, &b| {
                let d =
                    |v: VertexId| Metric::L2.search_distance(query, entrance.vector(v).unwrap());
                d(a).total_cmp(&d(b))
            })
            .unwrap();
        assert_eq!(entry[0], closest);
        // The query is vertex 17: both seeding modes find it first.
        for use_entrance in [true, false] {
            let p = SearchParams {
                use_entrance,
                ..SearchParams::default()
            };
            assert_eq!(search_all(&index, query, p)[0].id, 17);
        }
        // The start of unseeded searches is the main graph's medoid, kept in the manifest.
        let medoid = index.files().manifest().medoid;
        assert!(medoid < n as u32);
        let manifest = std::fs::read_to_string(dir.join("manifest")).unwrap();
        assert!(manifest.contains(&format!("\nmedoid={medoid}\n")));
        assert_eq!(reader.medoid(), medoid);
    }

    #[test]
    fn bad_build_input_is_rejected_before_work() {
        let dir = tempfile::tempdir().unwrap();
        let p = IndexParams::default();
        let err = build_index(dir.path(), &[1.0], &[], &p, &none, &never).unwrap_err();
        assert!(err.to_string().contains("for zero rows"), "{err}");
        let tids = [HeapTid::default(); 3];
        let declared = IndexParams {
            dim: Some(3),
            ..IndexParams::default()
        };
        let err = build_index(dir.path(), &[1.0; 12], &tids, &declared, &none, &never).unwrap_err();
        assert!(err.to_string().contains("declared with 3"), "{err}");
        let err = build_index(dir.path(), &[0.0; 7], &tids, &p, &none, &never).unwrap_err();
        assert!(err.to_string().contains("rows of equal dimension"), "{err}");
        let mut rows = vec![1.0f32; 12];
        rows[5] = f32::NAN;
        let err = build_index(dir.path(), &rows, &tids, &p, &none, &never).unwrap_err();
        assert!(err.to_string().starts_with("row 1:"), "{err}");
        let cosine = IndexParams {
            metric: Metric::Cosine,
            ..IndexParams::default()
        };
        let zero = [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0];
        let err = build_index(dir.path(), &zero, &tids, &cosine, &none, &never).unwrap_err();
        assert!(err.to_string().contains("row 1 is a zero vector"), "{err}");
        let tight = IndexParams {
            memory_budget: Some(1024),
            ..IndexParams::default()
        };
        let err = build_index(dir.path(), &[1.0; 12], &tids, &tight, &none, &never).unwrap_err();
        assert!(matches!(err, IndexError::Memory(_)), "{err}");
        let cancelled = || true;
        let err = build_index(dir.path(), &[1.0; 12], &tids, &p, &none, &cancelled).unwrap_err();
        assert!(matches!(err, IndexError::Cancelled), "{err}");
    }
}
