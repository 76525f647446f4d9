//! On-disk NAVIS search (digest §1.2, §1.3; issue 3 item 6), resumable until the index is
//! exhausted.
//!
//! A query runs in passes. The first pass is the NAVIS search:
//!
//! 1. **Entry points**: the in-memory entrance graph is searched with a list of 10 and its
//!    results seed the candidate list; the no-entrance ablation seeds it with the medoid alone.
//! 2. **Traversal over edge pages only.** The list holds the best `L` candidates by PQ
//!    distance. Each hop takes the `W` (beam width, 4) closest unexpanded candidates,
//!    resolves them through the indirection table, reads their edge pages as ONE batch, checks
//!    each slot's owner stamp (a moved list is re-resolved and retried), and scores every new
//!    neighbour with PQ. The pass ends when no unexpanded candidate is left in the list.
//!    Optionally ([`SearchParams::colocated`]) the other lists on a fetched page whose owners
//!    are unexpanded candidates are expanded too, for free; this is counted apart
//!    (`colocated_lists_used`) because the paper reads a page for one vertex's list only.
//! 3. **Windowed CASR** over the list in PQ order ([`crate::casr`]), loading full vectors in
//!    batches, or every candidate when CASR is off. The exact top-`k` is returned.
//!
//! When more results are wanted (a LIMIT above `k`, a filter that drops rows) the cursor goes
//! on, in two phases:
//!
//! - **Graph passes** (`iterative.rs`) continue the traversal as a shell that moves outwards
//!   from the query. Every vertex scored waits in a spill by PQ distance; vectors are loaded
//!   from it in PQ order into `due` (exact distance known), due vertices are expanded closest
//!   first with a look-ahead of `L`, and the closest due vertex is returned once it is
//!   expanded and no spilled vertex can beat it, given twice the largest PQ overestimate seen
//!   in this query. Each vertex is loaded and expanded at most once. A pass queues a batch
//!   that doubles from `k` up to [`SearchParams::max_batch`].
//! - **Exhaustive rounds** (`exhaustive.rs`) read every live vertex's vector, sequentially in
//!   id order, and queue in exact order the next batch after the last result. They start when
//!   one round costs less than the graph passes so far plus the next one (on small or
//!   low-dimensional indexes, right after the first pass; [`SearchParams::sequential_page_cost`]),
//!   when the graph state outgrows [`SearchParams::scan_memory`], or when the graph has nothing
//!   left: then only the live vertices no traversal reached are read (islands, copies a prune
//!   among equals left without an edge leading to them).
//!
//! # Ordering guarantee of [`SearchCursor`]
//!
//! The cursor yields every live vertex at most once, in **non-decreasing exact search
//! distance** ([`Metric::search_distance`]) over the whole cursor, and keeps going until every
//! live vertex has been returned or skipped, or [`SearchParams::max_results`] were returned.
//! A vertex found only after a farther one was returned is skipped, never returned out of
//! order (counted in [`SearchCursor::order_skips`]; pgvector's strict iterative scans do the
//! same): no ordered stream can return it any more. With [`SearchParams::relaxed_order`] it
//! is returned late instead (counted in `late_results`), and the exhaustive rounds return
//! every live vertex not returned yet, so no row is ever left out. Skips are misses of the approximate
//! parts: the first pass's top-`k` (the NAVIS search's recall), and graph passes that found a
//! vertex late (no expanded vertex linked to it, or its PQ error beat the margin). The
//! exhaustive rounds are exact and complete: every live vertex at least as far as the last
//! result comes back from them.
//!
//! # Memory
//!
//! The first pass holds what the NAVIS search holds: the list of `L` candidates, the visited
//! set and spill (at most entry points + expansions × max_degree), the vectors its rerank
//! loaded (at most `L`) and one batch of `W` pages. Before every step a graph pass estimates
//! its state from the containers' capacities (visited set, spill, `due`, queued results,
//! first-pass vectors) and drops it all for the exhaustive rounds once it exceeds
//! `scan_memory`; one step adds at most `W × max_degree` spilled candidates or 32 loaded ones,
//! and a pass queues at most `max_batch` (1024) results of 16 bytes. An exhaustive round
//! holds at most `scan_memory / 32` results (16 bytes in its selection heap, 16 once queued),
//! the ids returned at the last distance (ties; one id unless distances repeat), the list of
//! unreached ids (at most `scan_memory / 2` bytes, else every vertex is read) and one read
//! batch (256 KiB of vectors, about three times that with the reader's buffers). So a cursor
//! holds about `scan_memory` plus the first pass's state while on the graph, and at most
//! `1.5 × scan_memory` plus about 1 MiB in its exhaustive rounds; nothing grows with the
//! number of vertices in the index. PostgreSQL passes `work_mem` as `scan_memory`.

mod beam;
mod candidates;
mod exhaustive;
mod first_pass;
mod iterative;
mod source;
mod traverse;

pub use beam::{device_width, BeamAdvisor, DEVICE_WIDTH, IN_MEMORY_WIDTH};
pub(crate) use source::live_entry_points;
pub use source::IndexSource;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::{BTreeSet, VecDeque};
use std::io;

use crate::counters::SearchCounters;
use crate::distance::{normalize, Metric};
use crate::storage::{EdgeLocation, EdgePageLayout, HeapTid};
use crate::VertexId;
use candidates::{CandidateList, Due, LoadedVectors, Spill};
use iterative::Phase;

/// Reranking mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasrMode {
    /// Windowed CASR with this window (calibrated by the caller, see [`crate::casr`]).
    Window(usize),
    /// Rerank every explored candidate: the CASR-off ablation and the calibration warm-up.
    Off,
}

/// Query-time parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchParams {
    /// Results the first pass returns, and the K whose stability ends CASR.
    pub k: usize,
    /// Search list size L of the first pass.
    pub list: usize,
    /// Edge pages read per hop.
    pub beam_width: usize,
    /// List size of the entrance-graph search (number of entry points).
    pub entry_list: usize,
    pub casr: CasrMode,
    /// Ablation: every expanded vertex also loads its vector (DiskANN/OdinANN packed layout);
    /// reranking then uses those vectors and loads nothing more.
    pub packed: bool,
    /// Ablation switch off: start from the medoid only.
    pub use_entrance: bool,
    /// Expand unexpanded candidates whose lists share a fetched page.
    pub colocated: bool,
    /// Most results one resumed pass queues: passes double their batch from `k` up to this.
    pub max_batch: usize,
    /// Safety cap on expansions per resumed pass, as a multiple of its batch.
    pub max_expansions_per_pass: usize,
    /// Keep every edge list read (with its location): position seeking for an insert
    /// reuses them instead of reading the neighbours' pages again.
    pub record_lists: bool,
    /// Bytes of state the resumed search may hold (roughly: see the module's Memory
    /// section). Past it the graph passes give way to the exhaustive rounds, whose result
    /// batches it also sizes. The PostgreSQL layer passes `work_mem`.
    pub scan_memory: usize,
    /// Results the caller will take at most (`navis.max_scan_tuples`): the cursor ends there
    /// and sizes its last exhaustive batch to it.
    pub max_results: usize,
    /// Relaxed order (pgvector's `relaxed_order`): a vertex found after a farther one was
    /// returned is returned late instead of skipped, and the exhaustive rounds return every
    /// live vertex not returned yet, so an unbounded scan returns every row exactly once, in
    /// nearly ascending distance. Costs a set of the returned ids (4-8 bytes per row).
    pub relaxed_order: bool,
    /// Cost of reading a vector-file page sequentially, relative to a random read: decides
    /// when an exhaustive round is cheaper than more graph passes. `INFINITY` keeps to the
    /// graph until it is dry; 0 goes exhaustive right after the first pass.
    pub sequential_page_cost: f64,
    /// The index state may lag its edge pages (a hot standby's copy, synced to the redo
    /// generation the scan started at while redo goes on): a list that moved away from the
    /// slot the state names moved in a later change, so it is treated as read with no
    /// neighbours instead of as corruption (counted in `stale_slots`).
    pub state_may_lag: bool,
    /// Rows of the first pass's rerank to keep, closest first, with their exact vectors
    /// ([`SearchCursor::first_pass_rows`]): a result cache admits them. CASR scores at least
    /// `k`; rows past `k` are kept only if the rerank loaded them anyway, so keeping costs no
    /// read.
    pub keep_ranked: usize,
    /// The caller runs the first pass only (position seeking for an insert): candidates
    /// that fall off the list are dropped instead of kept for passes that will never run
    /// (pushing each into the spill's heap was part of an insert's position seeking).
    pub single_pass: bool,
    /// A CASR batch that would leave at most w / 2 candidates behind reads them too, saving
    /// the round trip one more change of the top-K would cost out of memory. Position seeking
    /// turns it off: there every loaded vector enters the insert's pool as an exact distance
    /// instead of a reconstructed one, so it would change the graph inserts build.
    pub read_rerank_tail: bool,
}

impl Default for SearchParams {
    fn default() -> SearchParams {
        SearchParams {
            k: 10,
            list: 40,
            beam_width: 4,
            entry_list: 10,
            casr: CasrMode::Off,
            packed: false,
            use_entrance: true,
            colocated: false,
            max_batch: 1024,
            max_expansions_per_pass: 16,
            record_lists: false,
            scan_memory: 4 << 20,
            max_results: usize::MAX,
            relaxed_order: false,
            sequential_page_cost: 0.25,
            state_may_lag: false,
            keep_ranked: 0,
            single_pass: false,
            read_rerank_tail: true,
        }
    }
}

impl SearchParams {
    fn validate(&self) -> io::Result<()> {
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if self.k == 0 {
            return bad("search k must be at least 1".into());
        }
        if self.list == 0 || self.beam_width == 0 || self.entry_list == 0 {
            return bad(format!(
                "search list ({}), beam width ({}) and entry list ({}) must be at least 1",
                self.list, self.beam_width, self.entry_list
            ));
        }
        if self.casr == CasrMode::Window(0) {
            return bad("CASR window must be at least 1".into());
        }
        if self.max_expansions_per_pass == 0 || self.max_batch == 0 {
            return bad("max_expansions_per_pass and max_batch must be at least 1".into());
        }
        if self.sequential_page_cost.is_nan() || self.sequential_page_cost < 0.0 {
            return bad("sequential_page_cost must be 0 or more".into());
        }
        Ok(())
    }
}

/// One search result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchHit {
    pub id: VertexId,
    /// Exact [`Metric::search_distance`] to the (normalised, for cosine) query.
    pub distance: f32,
    pub tid: HeapTid,
}

/// A resumable search: an iterator of hits in non-decreasing exact distance.
pub struct SearchCursor<'a, S: IndexSource> {
    source: &'a mut S,
    params: SearchParams,
    query: Vec<f32>,
    table: S::PqTable,
    list: CandidateList,
    spill: Spill,
    visited: HashSet<VertexId>,
    loaded: LoadedVectors,
    /// Resumed passes: loaded vertices not yet returned, closest first.
    due: BTreeSet<Due>,
    /// Resumed passes: the most a PQ distance has exceeded the exact one in this query.
    margin: f32,
    /// Vertices whose edge list moved while a hop read it (to be read again).
    stale: Vec<VertexId>,
    retries: HashMap<VertexId, u32>,
    pending: VecDeque<SearchHit>,
    /// Distance of the last result queued; nothing closer may follow.
    last_emitted: f32,
    /// The results queued at exactly `last_emitted`: the only ones an exhaustive round could
    /// not tell from the vertices it still has to return.
    ties: HashSet<VertexId>,
    /// Relaxed order only: every id returned (or queued) so far.
    returned: HashSet<VertexId>,
    emitted: usize,
    pass_k: usize,
    passes: usize,
    phase: Phase,
    first_min_window: Option<usize>,
    counters: SearchCounters,
    /// The source's [`IndexSource::page_cache_bytes`] when the cursor started.
    page_cache_start: u64,
    page_buf: Vec<u8>,
    frontier: Vec<VertexId>,
    lists: HashMap<VertexId, (EdgeLocation, Vec<VertexId>)>,
    entry_points: Vec<VertexId>,
    /// The first pass's best reranked rows, with [`SearchParams::keep_ranked`].
    ranked: Vec<(VertexId, f32)>,
}

impl<'a, S: IndexSource> SearchCursor<'a, S> {
    /// Starts a search; nothing is read until the first result is asked for. Errors on a query
    /// of the wrong dimension, with NaN/Inf, or (cosine) of zero length.
    pub fn new(
        source: &'a mut S,
        query: &[f32],
        params: SearchParams,
    ) -> io::Result<SearchCursor<'a, S>> {
        params.validate()?;
        let empty = source.is_empty();
        let query = if empty {
            crate::vector::validate(query).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("invalid query: {e}"))
            })?;
            // Nothing is scored; a table of the index's shape keeps the cursor well formed.
            vec![0.0; source.dim()]
        } else {
            prepare_query(source.metric(), source.dim(), query)?
        };
        let table = source.pq_table(&query);
        let page_cache_start = source.page_cache_bytes();
        Ok(SearchCursor {
            source,
            list: CandidateList::with_capacity(params.list),
            spill: Spill::default(),
            params,
            query,
            table,
            // A first pass scores about 25-30 vertices per list entry (Fashion-MNIST: 547 at
            // L = 20, 1,082 at L = 80); sized once, the set never rehashes in it (rehashing
            // was 1.6% of a search backend's time in memory).
            visited: HashSet::with_capacity_and_hasher(
                params.list.saturating_mul(32).min(1 << 16),
                Default::default(),
            ),
            loaded: LoadedVectors::default(),
            due: BTreeSet::new(),
            margin: 0.0,
            stale: Vec::new(),
            retries: HashMap::default(),
            pending: VecDeque::new(),
            last_emitted: f32::NEG_INFINITY,
            ties: HashSet::default(),
            returned: HashSet::default(),
            emitted: 0,
            pass_k: params.k,
            passes: 0,
            phase: if empty { Phase::Done } else { Phase::Graph },
            first_min_window: None,
            counters: SearchCounters::one_query(),
            page_cache_start,
            page_buf: Vec::new(),
            frontier: Vec::new(),
            lists: HashMap::default(),
            entry_points: Vec::new(),
            ranked: Vec::new(),
        })
    }

    /// Work done so far by this query.
    pub fn counters(&self) -> SearchCounters {
        SearchCounters {
            page_cache_bytes: self.source.page_cache_bytes() - self.page_cache_start,
            ..self.counters
        }
    }

    /// Passes run so far (1 after the first results), exhaustive rounds included.
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// The CASR calibration sample of this query: the smallest window that would have kept
    /// the first pass's top-K, available when that pass ran with [`CasrMode::Off`].
    pub fn calibration_sample(&self) -> Option<usize> {
        self.first_min_window
    }

    /// Live vertices that will never be returned because a result farther than them came
    /// first. Graph passes count those they find; the first exhaustive round counts them all.
    pub fn order_skips(&self) -> u64 {
        self.counters.order_skips
    }

    /// Exhaustive rounds run so far (each reads every live vertex's vector once).
    pub fn exhaustive_rounds(&self) -> u64 {
        self.counters.exhaustive_rounds
    }

    /// Runs the first pass (traversal and rerank) if it has not run; position seeking for an
    /// insert needs exactly that and no results.
    pub fn run_first_pass(&mut self) -> io::Result<()> {
        if self.passes == 0 && self.phase == Phase::Graph {
            self.run_pass()?;
        }
        Ok(())
    }

    /// The query as searched (unit length for cosine).
    pub fn query(&self) -> &[f32] {
        &self.query
    }

    /// The candidate list: `(vertex, PQ distance)`, closest first.
    pub fn explored(&self) -> Vec<(VertexId, f32)> {
        self.list.items.iter().map(|c| (c.id, c.distance)).collect()
    }

    /// Where the search started (entrance-graph entry points, or the medoid).
    pub fn entry_points(&self) -> &[VertexId] {
        &self.entry_points
    }

    /// The exact vector of `id` if the first pass loaded it.
    pub fn exact_vector(&self, id: VertexId) -> Option<&[f32]> {
        self.loaded.get(id, self.query.len()).map(|(v, _)| v)
    }

    /// The first pass's best reranked rows (at most [`SearchParams::keep_ranked`]), closest
    /// first: heap TID, exact vector as stored, exact distance. Empty before the first pass.
    pub fn first_pass_rows(&self) -> Vec<(HeapTid, &[f32], f32)> {
        let dim = self.query.len();
        self.ranked
            .iter()
            .filter_map(|&(id, d)| self.loaded.get(id, dim).map(|(v, tid)| (tid, v, d)))
            .collect()
    }

    /// The edge list of `id` and where it was read, with [`SearchParams::record_lists`].
    pub fn expanded_list(&self, id: VertexId) -> Option<(EdgeLocation, &[VertexId])> {
        self.lists.get(&id).map(|(loc, l)| (*loc, l.as_slice()))
    }

    /// The next `n` hits (fewer when the search is exhausted).
    pub fn next_batch(&mut self, n: usize) -> io::Result<Vec<SearchHit>> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            match self.next_hit()? {
                Some(hit) => out.push(hit),
                None => break,
            }
        }
        Ok(out)
    }

    /// The next hit, running another pass when the current one is used up.
    pub fn next_hit(&mut self) -> io::Result<Option<SearchHit>> {
        self.fill_queue()?;
        Ok(self.pending.pop_front())
    }

    /// Runs passes until a hit is queued or the search is exhausted, so that the caller can
    /// look at what [`SearchCursor::next_hit`] will return next ([`SearchCursor::queued`]).
    pub fn fill_queue(&mut self) -> io::Result<()> {
        while self.pending.is_empty() && self.phase != Phase::Done {
            self.run_pass()?;
        }
        Ok(())
    }

    /// The hits queued for [`SearchCursor::next_hit`], in the order it returns them: the
    /// scan reads their heap rows ahead of the executor.
    pub fn queued(&self) -> impl ExactSizeIterator<Item = &SearchHit> {
        self.pending.iter()
    }

    fn run_pass(&mut self) -> io::Result<()> {
        // A single-pass cursor dropped what later passes would start from.
        if self.emitted >= self.params.max_results || (self.params.single_pass && self.passes > 0) {
            self.phase = Phase::Done;
            return Ok(());
        }
        self.passes += 1;
        match self.phase {
            Phase::Graph if self.passes == 1 => self.first_pass(),
            Phase::Graph => self.graph_pass(),
            Phase::Exhaustive(_) => self.exhaustive_round(),
            Phase::Done => Ok(()),
        }
    }

    /// Queues `hit` unless a farther result came first (then it is an order skip).
    fn emit(&mut self, hit: SearchHit) -> bool {
        if self.params.relaxed_order {
            // Out of order allowed, twice never.
            if !self.returned.insert(hit.id) {
                return false;
            }
            if hit.distance < self.last_emitted {
                self.counters.late_results += 1;
                self.emitted += 1;
                self.pending.push_back(hit);
                return true;
            }
        } else if hit.distance < self.last_emitted {
            self.counters.order_skips += 1;
            return false;
        }
        if hit.distance > self.last_emitted {
            self.ties.clear();
            self.last_emitted = hit.distance;
        }
        self.ties.insert(hit.id);
        self.emitted += 1;
        self.pending.push_back(hit);
        true
    }

    /// PQ-scores a newly seen vertex and offers it to the list.
    fn score(&mut self, v: VertexId) {
        if self.visited.insert(v) {
            self.score_unvisited(v);
        }
    }

    /// [`SearchCursor::score`] for a vertex already entered in the visited set.
    fn score_unvisited(&mut self, v: VertexId) {
        let d = self.source.pq_distance(&self.table, v);
        self.counters.pq_distances += 1;
        if let Some(out) = self.list.insert(v, d) {
            if !self.params.single_pass {
                self.spill.push(out);
            }
        }
    }

    fn is_deleted(&self, id: VertexId) -> bool {
        self.source
            .entry(id)
            .is_none_or(|e| !e.is_live() || e.is_deleted())
    }
}

impl<S: IndexSource> Iterator for SearchCursor<'_, S> {
    type Item = io::Result<SearchHit>;

    fn next(&mut self) -> Option<io::Result<SearchHit>> {
        self.next_hit().transpose()
    }
}

fn check_page_number(layout: &EdgePageLayout, page: &[u8], expected: u32) -> io::Result<()> {
    let found = layout.page_number(page);
    if found != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("edge page {expected} read back with header page number {found}"),
        ));
    }
    Ok(())
}

fn check_loaded(ids: &[VertexId], dim: usize, vectors: &[f32], tids: &[HeapTid]) -> io::Result<()> {
    if vectors.len() != ids.len() * dim || tids.len() != ids.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "vector source returned {} floats and {} TIDs for {} vectors of dimension {dim}",
                vectors.len(),
                tids.len(),
                ids.len()
            ),
        ));
    }
    Ok(())
}

/// Validates the query and brings it into the index's space (unit length for cosine).
pub fn prepare_query(metric: Metric, dim: usize, query: &[f32]) -> io::Result<Vec<f32>> {
    let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
    if query.len() != dim {
        return Err(invalid(format!(
            "query has {} dimensions, the index has {dim}",
            query.len()
        )));
    }
    crate::vector::validate(query).map_err(|e| invalid(format!("invalid query: {e}")))?;
    let mut q = query.to_vec();
    if metric.needs_normalization() && !normalize(&mut q) {
        return Err(invalid(
            "cosine distance to a zero query vector is undefined".into(),
        ));
    }
    Ok(q)
}

/// Runs one search and returns its first `params.k` hits with the query's counters.
pub fn search<S: IndexSource>(
    source: &mut S,
    query: &[f32],
    params: SearchParams,
) -> io::Result<(Vec<SearchHit>, SearchCounters)> {
    let mut cursor = SearchCursor::new(source, query, params)?;
    let hits = cursor.next_batch(params.k)?;
    Ok((hits, cursor.counters()))
}

#[cfg(test)]
mod iterative_tests;
#[cfg(test)]
mod robustness_tests;
#[cfg(test)]
mod tests;
