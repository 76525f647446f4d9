//! On-disk NAVIS search (digest §1.2, §1.3; issue 3 item 6), resumable.
//!
//! A query runs in passes. Each pass:
//!
//! 1. **Entry points** (first pass only): the in-memory entrance graph is searched with a list
//!    of 10 and its results seed the candidate list; the no-entrance ablation seeds it with
//!    the medoid alone.
//! 2. **Traversal over edge pages only.** The list holds the best `L` candidates by PQ
//!    distance. Each hop takes the `W` (beam width, 4) closest unexpanded candidates,
//!    resolves them through the indirection table, reads their edge pages as ONE batch, checks
//!    each slot's owner stamp (a moved list is re-resolved and retried), and scores every new
//!    neighbour with PQ. The pass ends when no unexpanded candidate is left in the list.
//!    Optionally ([`SearchParams::colocated`]) the other lists on a fetched page whose owners
//!    are unexpanded candidates are expanded too, for free; this is counted apart
//!    (`colocated_lists_used`) because the paper reads a page for one vertex's list only.
//! 3. **Windowed CASR** over the list in PQ order ([`crate::casr`]), loading full vectors in
//!    batches, or every candidate when CASR is off.
//!
//! # Ordering guarantee of [`SearchCursor`]
//!
//! The cursor yields every result at most once and in **non-decreasing exact search
//! distance** ([`Metric::search_distance`]) over the whole cursor, across passes. Pass `i`
//! (list `L_i = min(L * 2^i, max_list)`, top-K `K_i = k * 2^i`) emits, in exact-distance order,
//! the exact top-`K_i` of the candidates it reranked that were not emitted before. A vertex a
//! later pass finds that is *closer* than the last result already emitted is dropped rather
//! than returned out of order (counted in [`SearchCursor::order_skips`]), the contract of
//! pgvector's strict iterative scans; results are as good as the approximate search, not exact.
//! Passes after the first continue the same traversal: candidates that fell off the list are
//! kept in a spill and the best of them re-enter the larger list. The cursor ends when a
//! pass finds nothing new to expand or emit.
//!
//! # Memory
//!
//! Per-query state is the list of `L_i` candidates, the spill of candidates that fell off it
//! and a visited hash set of the vertices scored (both at most entry points + expanded ×
//! max_degree; expansions per pass are capped at `max_expansions_per_pass × L_i`), one batch
//! of `W` pages, and the vectors reranking loaded (at most the list sizes summed over passes).
//! Nothing is sized by the number of vertices in the index.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::VecDeque;
use std::io;

use crate::casr::{self, RerankPolicy};
use crate::counters::SearchCounters;
use crate::distance::{normalize, Metric};
use crate::storage::{EdgeLocation, EdgePageLayout, HeapTid, IndirEntry};
use crate::VertexId;

/// What a search needs from an index: metadata, PQ scoring, the entrance graph and two batched
/// read paths. One value per thread; its `&mut self` methods own that thread's I/O queue.
pub trait IndexSource {
    /// Per-query PQ lookup table.
    type PqTable;

    fn metric(&self) -> Metric;
    fn dim(&self) -> usize;
    fn edge_layout(&self) -> EdgePageLayout;
    /// Indirection entry of `v`; `None` for an id that is not (or no longer) in the index.
    fn entry(&self, v: VertexId) -> Option<IndirEntry>;
    fn pq_table(&self, query: &[f32]) -> Self::PqTable;
    fn pq_distance(&self, table: &Self::PqTable, v: VertexId) -> f32;
    /// Entry points for `query` from the entrance graph, closest first; adds the distances it
    /// computed to `counters.entrance_distances`.
    fn entry_points(
        &self,
        query: &[f32],
        list: usize,
        counters: &mut SearchCounters,
    ) -> Vec<VertexId>;
    /// The single start vertex of the no-entrance ablation.
    fn medoid(&self) -> VertexId;
    /// An index without vertices. Its search finds nothing for any valid query, of any
    /// dimension: an index built over an empty table may not know its column's dimension.
    fn is_empty(&self) -> bool {
        false
    }
    /// Reads edge pages `pages` into `out` (`pages.len() * edge_layout().page_size()` bytes) as
    /// one batch.
    fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64>;
    /// Loads the vectors and heap TIDs of `ids` as one batch, appending to `vectors` and
    /// `tids`; returns the bytes read from the device. A vertex that stopped being a result
    /// candidate since the search saw it (deleted, or freed by a consolidation) gets a NaN
    /// vector, which ranks it out of the results.
    fn load_vectors(
        &mut self,
        ids: &[VertexId],
        vectors: &mut Vec<f32>,
        tids: &mut Vec<HeapTid>,
    ) -> io::Result<u64>;
}

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
    /// Largest list a resumed pass may grow to.
    pub max_list: usize,
    /// Safety cap on expansions per pass, as a multiple of the pass's list size.
    pub max_expansions_per_pass: usize,
    /// Keep every edge list read (with its location): position seeking for an insert
    /// reuses them instead of reading the neighbours' pages again.
    pub record_lists: bool,
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
            max_list: 10_000,
            max_expansions_per_pass: 16,
            record_lists: false,
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
        if self.max_expansions_per_pass == 0 {
            return bad("max_expansions_per_pass must be at least 1".into());
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

#[derive(Clone, Copy, Debug)]
struct Candidate {
    distance: f32,
    id: VertexId,
    expanded: bool,
}

/// Candidates sorted by PQ distance (then id), at most `capacity` of them.
#[derive(Debug, Default)]
struct CandidateList {
    items: Vec<Candidate>,
    capacity: usize,
}

impl CandidateList {
    /// Inserts a new candidate; returns the one pushed out (or the candidate itself) when full.
    fn insert(&mut self, id: VertexId, distance: f32) -> Option<Candidate> {
        self.insert_candidate(Candidate {
            distance,
            id,
            expanded: false,
        })
    }

    fn insert_candidate(&mut self, c: Candidate) -> Option<Candidate> {
        let (distance, id) = (c.distance, c.id);
        let at = self
            .items
            .partition_point(|x| closer(x.distance, x.id, distance, id));
        if at >= self.capacity {
            return Some(c);
        }
        self.items.insert(at, c);
        if self.items.len() > self.capacity {
            self.items.pop()
        } else {
            None
        }
    }

    /// Up to `n` closest unexpanded candidates, marked expanded.
    fn take_frontier(&mut self, n: usize, out: &mut Vec<VertexId>) {
        out.clear();
        for c in self.items.iter_mut().filter(|c| !c.expanded).take(n) {
            c.expanded = true;
            out.push(c.id);
        }
    }

    /// Marks `id` expanded if it is an unexpanded candidate; returns whether it was.
    fn claim(&mut self, id: VertexId) -> bool {
        match self.items.iter_mut().find(|c| c.id == id && !c.expanded) {
            Some(c) => {
                c.expanded = true;
                true
            }
            None => false,
        }
    }

    /// Puts a vertex whose list could not be read this hop back in line.
    fn unclaim(&mut self, id: VertexId) {
        if let Some(c) = self.items.iter_mut().find(|c| c.id == id) {
            c.expanded = false;
        }
    }
}

fn closer(da: f32, ia: VertexId, db: f32, ib: VertexId) -> bool {
    da.total_cmp(&db).then(ia.cmp(&ib)).is_lt()
}

/// Candidates that fell off the list, kept whole for resumed passes: they are the next best
/// places to continue from. Each visited vertex is in the list, here, or was expanded, so the
/// spill holds at most `1 + expanded * max_degree` entries.
#[derive(Debug, Default)]
struct Spill {
    items: Vec<Candidate>,
}

impl Spill {
    fn push(&mut self, c: Candidate) {
        self.items.push(c);
    }

    fn drain_sorted(&mut self) -> Vec<Candidate> {
        self.items
            .sort_by(|a, b| a.distance.total_cmp(&b.distance).then(a.id.cmp(&b.id)));
        std::mem::take(&mut self.items)
    }
}

/// Exact vectors loaded so far in this query, so a resumed pass never reloads one.
#[derive(Debug, Default)]
struct LoadedVectors {
    slot: HashMap<VertexId, usize>,
    data: Vec<f32>,
    tids: Vec<HeapTid>,
}

impl LoadedVectors {
    fn get(&self, id: VertexId, dim: usize) -> Option<(&[f32], HeapTid)> {
        self.slot
            .get(&id)
            .map(|&i| (&self.data[i * dim..(i + 1) * dim], self.tids[i]))
    }

    fn insert_batch(&mut self, ids: &[VertexId], vectors: &[f32], tids: &[HeapTid]) {
        for (i, &id) in ids.iter().enumerate() {
            let dim = vectors.len() / ids.len();
            let slot = self.tids.len();
            self.data
                .extend_from_slice(&vectors[i * dim..(i + 1) * dim]);
            self.tids.push(tids[i]);
            self.slot.insert(id, slot);
        }
    }

    fn len(&self) -> usize {
        self.tids.len()
    }
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
    emitted: HashSet<VertexId>,
    pending: VecDeque<SearchHit>,
    last_emitted: f32,
    pass_k: usize,
    passes: usize,
    finished: bool,
    order_skips: u64,
    first_min_window: Option<usize>,
    counters: SearchCounters,
    page_buf: Vec<u8>,
    frontier: Vec<VertexId>,
    lists: HashMap<VertexId, (EdgeLocation, Vec<VertexId>)>,
    entry_points: Vec<VertexId>,
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
        Ok(SearchCursor {
            source,
            list: CandidateList {
                items: Vec::with_capacity(params.list + 1),
                capacity: params.list,
            },
            spill: Spill::default(),
            params,
            query,
            table,
            visited: HashSet::default(),
            loaded: LoadedVectors::default(),
            emitted: HashSet::default(),
            pending: VecDeque::new(),
            last_emitted: f32::NEG_INFINITY,
            pass_k: params.k,
            passes: 0,
            finished: empty,
            order_skips: 0,
            first_min_window: None,
            counters: SearchCounters::one_query(),
            page_buf: Vec::new(),
            frontier: Vec::new(),
            lists: HashMap::default(),
            entry_points: Vec::new(),
        })
    }

    /// Work done so far by this query.
    pub fn counters(&self) -> &SearchCounters {
        &self.counters
    }

    /// Passes run so far (1 after the first results).
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// The CASR calibration sample of this query: the smallest window that would have kept
    /// the first pass's top-K, available when that pass ran with [`CasrMode::Off`].
    pub fn calibration_sample(&self) -> Option<usize> {
        self.first_min_window
    }

    /// Results dropped because a later pass found them closer than one already returned.
    pub fn order_skips(&self) -> u64 {
        self.order_skips
    }

    /// Runs the first pass (traversal and rerank) if it has not run; position seeking for an
    /// insert needs exactly that and no results.
    pub fn run_first_pass(&mut self) -> io::Result<()> {
        if self.passes == 0 && !self.finished {
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

    /// The exact vector of `id` if this search loaded it.
    pub fn exact_vector(&self, id: VertexId) -> Option<&[f32]> {
        self.loaded.get(id, self.query.len()).map(|(v, _)| v)
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
        while self.pending.is_empty() && !self.finished {
            self.run_pass()?;
        }
        Ok(self.pending.pop_front())
    }

    fn run_pass(&mut self) -> io::Result<()> {
        if self.passes == 0 {
            self.seed()?;
        } else {
            self.counters.resumes += 1;
            self.grow()?;
        }
        self.passes += 1;
        let expanded_before = self.counters.expanded;
        self.traverse()?;
        let expanded = self.counters.expanded - expanded_before;
        self.counters.visited = self.visited.len() as u64;
        let new_hits = self.rerank_and_emit()?;
        self.finished = new_hits == 0 && expanded == 0 && self.cannot_grow();
        Ok(())
    }

    /// Whether another pass could change anything: a larger list fed from the spill, or a
    /// larger K over a list that holds more than K candidates.
    fn cannot_grow(&self) -> bool {
        let list_can_grow =
            self.list.capacity < self.params.max_list && !self.spill.items.is_empty();
        !list_can_grow && self.pass_k >= self.list.items.len()
    }

    fn seed(&mut self) -> io::Result<()> {
        let entries = if self.params.use_entrance {
            let mut e =
                self.source
                    .entry_points(&self.query, self.params.entry_list, &mut self.counters);
            if e.is_empty() {
                e.push(self.source.medoid());
            }
            e
        } else {
            vec![self.source.medoid()]
        };
        for &v in &entries {
            self.score(v);
        }
        self.entry_points = entries;
        Ok(())
    }

    /// Doubles the list (and the pass's K) and lets spilled candidates back in.
    fn grow(&mut self) -> io::Result<()> {
        let new_cap = (self.list.capacity * 2).min(self.params.max_list.max(self.params.list));
        self.list.capacity = new_cap.max(self.list.capacity);
        self.pass_k = self.pass_k.saturating_mul(2);
        for c in self.spill.drain_sorted() {
            if let Some(out) = self.list.insert_candidate(c) {
                self.spill.push(out);
            }
        }
        Ok(())
    }

    /// PQ-scores a newly seen vertex and offers it to the list.
    fn score(&mut self, v: VertexId) {
        if !self.visited.insert(v) {
            return;
        }
        let d = self.source.pq_distance(&self.table, v);
        self.counters.pq_distances += 1;
        if let Some(out) = self.list.insert(v, d) {
            self.spill.push(out);
        }
    }

    fn traverse(&mut self) -> io::Result<()> {
        let cap = self.list.capacity * self.params.max_expansions_per_pass;
        let mut expansions = 0;
        let mut retries: HashMap<VertexId, u32> = HashMap::default();
        loop {
            let mut frontier = std::mem::take(&mut self.frontier);
            self.list
                .take_frontier(self.params.beam_width, &mut frontier);
            if frontier.is_empty() || expansions >= cap {
                self.frontier = frontier;
                return Ok(());
            }
            expansions += frontier.len();
            let result = self.hop(&frontier, &mut retries);
            self.frontier = frontier;
            result?;
        }
    }

    /// Reads the pages of `frontier` as one batch and expands the vertices on them.
    fn hop(
        &mut self,
        frontier: &[VertexId],
        retries: &mut HashMap<VertexId, u32>,
    ) -> io::Result<()> {
        let layout = self.source.edge_layout();
        let page_size = layout.page_size();
        let mut located: Vec<(VertexId, EdgeLocation)> = Vec::with_capacity(frontier.len());
        for &v in frontier {
            match self.source.entry(v) {
                Some(e) if e.is_live() => located.push((v, e.edge)),
                _ => {} // vanished vertex: nothing to expand
            }
        }
        let mut pages: Vec<u32> = located.iter().map(|(_, loc)| loc.page).collect();
        pages.sort_unstable();
        pages.dedup();
        self.counters.hops += 1;
        if !pages.is_empty() {
            self.page_buf.resize(pages.len() * page_size, 0);
            let cached = self.source.read_edge_pages(&pages, &mut self.page_buf)?;
            self.counters.edge_pages_read += pages.len() as u64;
            self.counters.edge_page_cache_hits += cached;
            self.counters.bytes_read += (pages.len() as u64 - cached) * page_size as u64;
            self.counters.read_batches += 1;
        }
        if self.params.packed {
            self.load_packed(&located)?;
        }
        let page_buf = std::mem::take(&mut self.page_buf);
        let mut neighbours: Vec<VertexId> = Vec::new();
        for &(v, loc) in &located {
            let index = pages.binary_search(&loc.page).expect("page was requested");
            let page = &page_buf[index * page_size..(index + 1) * page_size];
            check_page_number(&layout, page, loc.page)?;
            match layout.slot_owned_by(page, loc.slot as usize, v) {
                Some(slot) => {
                    self.counters.expanded += 1;
                    neighbours.extend(slot.neighbours());
                    if self.params.record_lists {
                        self.lists.insert(v, (loc, slot.to_vec()));
                    }
                }
                None => self.stale_slot(v, loc, retries)?,
            }
        }
        if self.params.colocated {
            for (index, _) in pages.iter().enumerate() {
                let page = &page_buf[index * page_size..(index + 1) * page_size];
                for s in 0..layout.slots_per_page() {
                    let slot = layout.slot(page, s);
                    if slot.is_free() || !self.list.claim(slot.owner()) {
                        continue;
                    }
                    // Only trust the co-resident list if the indirection still points here.
                    let here = self
                        .source
                        .entry(slot.owner())
                        .is_some_and(|e| e.edge.page == pages[index] && e.edge.slot as usize == s);
                    if here {
                        self.counters.colocated_lists_used += 1;
                        self.counters.expanded += 1;
                        neighbours.extend(slot.neighbours());
                    } else {
                        self.list.unclaim(slot.owner());
                    }
                }
            }
        }
        self.page_buf = page_buf;
        for u in neighbours {
            self.score(u);
        }
        Ok(())
    }

    /// A slot no longer owned by `v`: its list moved since we resolved it (an insert relocated
    /// it). Re-resolve; if the indirection still names the same slot the file is corrupt.
    fn stale_slot(
        &mut self,
        v: VertexId,
        loc: EdgeLocation,
        retries: &mut HashMap<VertexId, u32>,
    ) -> io::Result<()> {
        self.counters.stale_slots += 1;
        let now = self.source.entry(v).map(|e| e.edge);
        let tries = retries.entry(v).or_insert(0);
        *tries += 1;
        if now == Some(loc) || *tries > 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "edge slot {} of page {} does not belong to vertex {v}, \
                     though the indirection table points there",
                    loc.slot, loc.page
                ),
            ));
        }
        self.list.unclaim(v);
        Ok(())
    }

    /// Packed-layout emulation: the expanded vertices' vectors come with their pages.
    fn load_packed(&mut self, located: &[(VertexId, EdgeLocation)]) -> io::Result<()> {
        let dim = self.query.len();
        let ids: Vec<VertexId> = located
            .iter()
            .map(|&(v, _)| v)
            .filter(|v| self.loaded.get(*v, dim).is_none())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let mut vectors = Vec::with_capacity(ids.len() * dim);
        let mut tids = Vec::with_capacity(ids.len());
        let bytes = self.source.load_vectors(&ids, &mut vectors, &mut tids)?;
        check_loaded(&ids, dim, &vectors, &tids)?;
        self.counters.packed_vector_loads += ids.len() as u64;
        self.counters.bytes_read += bytes;
        self.loaded.insert_batch(&ids, &vectors, &tids);
        Ok(())
    }

    /// Reranks this pass's candidates and queues the new exact top-K; returns how many.
    fn rerank_and_emit(&mut self) -> io::Result<usize> {
        let dim = self.query.len();
        let metric = self.source.metric();
        let mut scored: Vec<(VertexId, f32)> = if self.params.packed {
            self.rerank_packed(metric)
        } else {
            self.rerank_casr(metric)?
        };
        casr::sort_by_distance(&mut scored);
        let mut new_hits = 0;
        for &(id, distance) in scored.iter().take(self.pass_k) {
            if self.emitted.contains(&id) || distance.is_nan() {
                continue; // NaN: the vertex vanished while this search ran (load_vectors)
            }
            if distance < self.last_emitted {
                self.order_skips += 1;
                self.emitted.insert(id);
                continue;
            }
            let (_, tid) = self
                .loaded
                .get(id, dim)
                .expect("reranked vectors are loaded");
            self.emitted.insert(id);
            self.last_emitted = distance;
            self.pending.push_back(SearchHit { id, distance, tid });
            new_hits += 1;
        }
        Ok(new_hits)
    }

    /// Packed layout: every expanded vertex's vector is already here; rank them all.
    fn rerank_packed(&mut self, metric: Metric) -> Vec<(VertexId, f32)> {
        let dim = self.query.len();
        self.counters.reranks += 1;
        self.counters.explored_set += self.loaded.len() as u64;
        let mut out = Vec::with_capacity(self.loaded.len());
        for (&id, &slot) in &self.loaded.slot {
            if self.is_deleted(id) {
                continue;
            }
            let v = &self.loaded.data[slot * dim..(slot + 1) * dim];
            out.push((id, metric.search_distance(&self.query, v)));
            self.counters.exact_distances += 1;
        }
        out
    }

    fn is_deleted(&self, id: VertexId) -> bool {
        self.source
            .entry(id)
            .is_none_or(|e| !e.is_live() || e.is_deleted())
    }

    fn rerank_casr(&mut self, metric: Metric) -> io::Result<Vec<(VertexId, f32)>> {
        let dim = self.query.len();
        let sorted: Vec<VertexId> = self
            .list
            .items
            .iter()
            .map(|c| c.id)
            .filter(|&id| !self.is_deleted(id))
            .collect();
        let policy = match self.params.casr {
            CasrMode::Window(w) => RerankPolicy::Window(w),
            CasrMode::Off => RerankPolicy::All,
        };
        let k = self.pass_k.min(sorted.len()).max(1);
        let source = &mut *self.source;
        let loaded = &mut self.loaded;
        let counters = &mut self.counters;
        let mut loader = |ids: &[VertexId], out: &mut Vec<f32>| -> io::Result<()> {
            let missing: Vec<VertexId> = ids
                .iter()
                .copied()
                .filter(|&id| loaded.get(id, dim).is_none())
                .collect();
            if !missing.is_empty() {
                let mut vectors = Vec::with_capacity(missing.len() * dim);
                let mut tids = Vec::with_capacity(missing.len());
                let bytes = source.load_vectors(&missing, &mut vectors, &mut tids)?;
                check_loaded(&missing, dim, &vectors, &tids)?;
                counters.rerank_vector_loads += missing.len() as u64;
                counters.bytes_read += bytes;
                counters.read_batches += 1;
                loaded.insert_batch(&missing, &vectors, &tids);
            }
            for &id in ids {
                out.extend_from_slice(loaded.get(id, dim).expect("just loaded").0);
            }
            Ok(())
        };
        let result = casr::rerank(&self.query, metric, &sorted, k, policy, &mut loader)?;
        self.counters.reranks += 1;
        self.counters.explored_set += sorted.len() as u64;
        self.counters.casr_window_sum += result.window as u64;
        self.counters.exact_distances += result.loads() as u64;
        if self.passes == 1 && policy == RerankPolicy::All && result.loads() > 0 {
            self.first_min_window = Some(result.min_safe_window());
        }
        Ok(result.scored)
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
    Ok((hits, *cursor.counters()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FLAG_DELETED;
    use crate::storage::FLAG_LIVE;
    use crate::storage::PAGE_SIZE;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// An index held in memory: real edge-page bytes, an indirection vector, a coarse
    /// "PQ" (coordinates rounded to a grid) and a brute-force entrance sample.
    struct MemorySource {
        dim: usize,
        layout: EdgePageLayout,
        pages: Vec<Vec<u8>>,
        entries: Vec<IndirEntry>,
        vectors: Vec<f32>,
        coarse: Vec<f32>,
        medoid: VertexId,
        entrance: Vec<VertexId>,
        batches: Vec<usize>,
    }

    fn clustered(n: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let centres: Vec<f32> = (0..8 * dim).map(|_| rng.gen_range(-10.0..10.0)).collect();
        let mut out = Vec::with_capacity(n * dim);
        for _ in 0..n {
            let c = rng.gen_range(0..8);
            for j in 0..dim {
                out.push(centres[c * dim + j] + rng.gen_range(-2.0f32..2.0));
            }
        }
        out
    }

    fn row(data: &[f32], dim: usize, i: usize) -> &[f32] {
        &data[i * dim..(i + 1) * dim]
    }

    fn brute_force(data: &[f32], dim: usize, q: &[f32], k: usize) -> Vec<(VertexId, f32)> {
        let mut all: Vec<(VertexId, f32)> = (0..data.len() / dim)
            .map(|i| {
                (
                    i as VertexId,
                    Metric::L2.search_distance(q, row(data, dim, i)),
                )
            })
            .collect();
        casr::sort_by_distance(&mut all);
        all.truncate(k);
        all
    }

    impl MemorySource {
        /// A k-NN graph (degree 12) plus two random long edges per vertex, pages in id order.
        fn build(n: usize, dim: usize, seed: u64) -> MemorySource {
            let vectors = clustered(n, dim, seed);
            let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
            let layout = EdgePageLayout::new(16).unwrap();
            let per_page = layout.slots_per_page();
            let mut pages = vec![vec![0u8; PAGE_SIZE]; n.div_ceil(per_page)];
            for (p, page) in pages.iter_mut().enumerate() {
                layout.init_page(page, p as u32);
            }
            let mut entries = Vec::new();
            for v in 0..n {
                let mut nbrs: Vec<VertexId> = brute_force(&vectors, dim, row(&vectors, dim, v), 13)
                    .into_iter()
                    .map(|(id, _)| id)
                    .filter(|&id| id as usize != v)
                    .take(12)
                    .collect();
                while nbrs.len() < 14 {
                    let r = rng.gen_range(0..n as VertexId);
                    if r as usize != v && !nbrs.contains(&r) {
                        nbrs.push(r);
                    }
                }
                let (page, slot) = (v / per_page, v % per_page);
                layout
                    .put_slot(&mut pages[page], slot, v as VertexId, &nbrs)
                    .unwrap();
                entries.push(IndirEntry {
                    edge: EdgeLocation {
                        page: page as u32,
                        slot: slot as u16,
                    },
                    tid: HeapTid {
                        block: v as u32,
                        offset: 1,
                    },
                    flags: FLAG_LIVE,
                });
            }
            for page in &mut pages {
                layout.seal(page);
            }
            let coarse = vectors.iter().map(|x| x.round()).collect();
            let entrance = (0..n as VertexId).step_by(50).collect();
            MemorySource {
                dim,
                layout,
                pages,
                entries,
                vectors,
                coarse,
                medoid: 0,
                entrance,
                batches: Vec::new(),
            }
        }
    }

    impl IndexSource for MemorySource {
        type PqTable = Vec<f32>;

        fn metric(&self) -> Metric {
            Metric::L2
        }
        fn dim(&self) -> usize {
            self.dim
        }
        fn edge_layout(&self) -> EdgePageLayout {
            self.layout
        }
        fn entry(&self, v: VertexId) -> Option<IndirEntry> {
            self.entries.get(v as usize).copied()
        }
        fn pq_table(&self, query: &[f32]) -> Vec<f32> {
            query.to_vec()
        }
        fn pq_distance(&self, table: &Vec<f32>, v: VertexId) -> f32 {
            Metric::L2.search_distance(table, row(&self.coarse, self.dim, v as usize))
        }
        fn entry_points(&self, q: &[f32], list: usize, c: &mut SearchCounters) -> Vec<VertexId> {
            let mut scored: Vec<(VertexId, f32)> = self
                .entrance
                .iter()
                .map(|&v| {
                    (
                        v,
                        Metric::L2.search_distance(q, row(&self.vectors, self.dim, v as usize)),
                    )
                })
                .collect();
            c.entrance_distances += scored.len() as u64;
            casr::sort_by_distance(&mut scored);
            scored.into_iter().take(list).map(|p| p.0).collect()
        }
        fn medoid(&self) -> VertexId {
            self.medoid
        }
        fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64> {
            self.batches.push(pages.len());
            for (i, &p) in pages.iter().enumerate() {
                out[i * PAGE_SIZE..(i + 1) * PAGE_SIZE].copy_from_slice(&self.pages[p as usize]);
            }
            Ok(0)
        }
        fn load_vectors(
            &mut self,
            ids: &[VertexId],
            vectors: &mut Vec<f32>,
            tids: &mut Vec<HeapTid>,
        ) -> io::Result<u64> {
            for &id in ids {
                vectors.extend_from_slice(row(&self.vectors, self.dim, id as usize));
                tids.push(HeapTid {
                    block: id,
                    offset: 1,
                });
            }
            Ok((ids.len() * PAGE_SIZE) as u64)
        }
    }

    fn queries(n: usize, dim: usize) -> Vec<f32> {
        clustered(n, dim, 99)
    }

    fn recall(src: &mut MemorySource, params: SearchParams, nq: usize) -> (f64, SearchCounters) {
        let dim = src.dim;
        let qs = queries(nq, dim);
        let mut hit = 0;
        let mut total = SearchCounters::default();
        for qi in 0..nq {
            let q = row(&qs, dim, qi);
            let (hits, c) = search(src, q, params).unwrap();
            total.merge(&c);
            let truth: HashSet<VertexId> = brute_force(&src.vectors, dim, q, params.k)
                .iter()
                .map(|p| p.0)
                .collect();
            hit += hits.iter().filter(|h| truth.contains(&h.id)).count();
            assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
        }
        (hit as f64 / (nq * params.k) as f64, total)
    }

    #[test]
    fn recall_against_brute_force_and_counters() {
        let mut src = MemorySource::build(1500, 16, 7);
        let params = SearchParams {
            list: 40,
            ..SearchParams::default()
        };
        let (r_off, off) = recall(&mut src, params, 50);
        assert!(r_off >= 0.85, "recall@10 with rerank-all {r_off}");
        assert_eq!(
            off.rerank_vector_loads, off.explored_set,
            "CASR off loads everything"
        );
        assert_eq!(off.explored_set, 50 * 40);
        assert!(src.batches.iter().all(|&b| (1..=4).contains(&b)));
        assert!(off.edge_pages_read <= off.expanded);
        assert_eq!(off.packed_vector_loads, 0);

        let casr = SearchParams {
            casr: CasrMode::Window(4),
            ..params
        };
        let (r_casr, on) = recall(&mut src, casr, 50);
        assert!(r_casr >= r_off - 0.05, "CASR {r_casr} vs off {r_off}");
        assert!(on.rerank_vector_loads < off.rerank_vector_loads);
        assert!(
            on.rerank_vector_loads >= 50 * 14,
            "at least K + w loads each"
        );
        assert_eq!(on.mean_window(), 4.0);
        // Traversal is identical: CASR only changes what reranking loads.
        assert_eq!(on.edge_pages_read, off.edge_pages_read);
        assert_eq!(on.hops, off.hops);
    }

    #[test]
    fn ablations_give_sensible_recall() {
        let mut src = MemorySource::build(1500, 16, 8);
        let base = SearchParams {
            list: 40,
            ..SearchParams::default()
        };
        let packed = SearchParams {
            packed: true,
            ..base
        };
        let (r, c) = recall(&mut src, packed, 30);
        assert!(r >= 0.85, "packed recall {r}");
        assert_eq!(c.packed_vector_loads, c.expanded);
        assert_eq!(c.rerank_vector_loads, 0);

        let no_entrance = SearchParams {
            use_entrance: false,
            ..base
        };
        let (r_ne, c_ne) = recall(&mut src, no_entrance, 30);
        assert!(r_ne >= 0.85, "no-entrance recall {r_ne}");
        assert_eq!(c_ne.entrance_distances, 0);
        let (_, c_e) = recall(&mut src, base, 30);
        assert!(c_e.entrance_distances > 0);

        let colocated = SearchParams {
            colocated: true,
            ..base
        };
        let (r_co, c_co) = recall(&mut src, colocated, 30);
        assert!(r_co >= 0.85, "colocated recall {r_co}");
        assert!(c_co.colocated_lists_used > 0);
        assert!(c_co.edge_pages_read < c_e.edge_pages_read);
    }

    #[test]
    fn cursor_resumes_in_distance_order_past_the_list() {
        let mut src = MemorySource::build(1200, 16, 9);
        let q = row(&queries(1, 16), 16, 0).to_vec();
        let params = SearchParams {
            list: 40,
            k: 10,
            casr: CasrMode::Window(4),
            ..SearchParams::default()
        };
        let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
        let hits = cursor.next_batch(300).unwrap();
        assert_eq!(hits.len(), 300, "resumed passes go well past L = 20");
        assert!(cursor.passes() > 3);
        assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
        let ids: HashSet<VertexId> = hits.iter().map(|h| h.id).collect();
        assert_eq!(ids.len(), 300, "no duplicates");
        assert!(hits.iter().all(|h| h.tid.block == h.id));
        // The first 100 are mostly the true first 100.
        let truth: HashSet<VertexId> = brute_force(&src.vectors, 16, &q, 100)
            .iter()
            .map(|p| p.0)
            .collect();
        let found = hits[..100].iter().filter(|h| truth.contains(&h.id)).count();
        assert!(found >= 80, "only {found} of the true top-100");
    }

    #[test]
    fn cursor_exhausts_a_small_index() {
        let mut src = MemorySource::build(150, 8, 10);
        let q = row(&queries(1, 8), 8, 0).to_vec();
        let params = SearchParams {
            list: 10,
            casr: CasrMode::Window(2),
            ..SearchParams::default()
        };
        let mut cursor = SearchCursor::new(&mut src, &q, params).unwrap();
        let mut hits = Vec::new();
        while let Some(hit) = cursor.next_hit().unwrap() {
            hits.push(hit);
        }
        // Every vertex is either returned or skipped for arriving after a farther one.
        assert_eq!(hits.len() as u64 + cursor.order_skips(), 150);
        assert!(hits.len() >= 100, "only {} of 150 vertices", hits.len());
        assert!(cursor.next_hit().unwrap().is_none(), "stays exhausted");
        assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
    }

    #[test]
    fn deleted_vertices_are_traversed_but_not_returned() {
        let mut src = MemorySource::build(800, 8, 11);
        let q = row(&queries(1, 8), 8, 0).to_vec();
        let truth = brute_force(&src.vectors, 8, &q, 5);
        for &(id, _) in &truth {
            src.entries[id as usize].flags |= FLAG_DELETED;
        }
        let (hits, _) = search(&mut src, &q, SearchParams::default()).unwrap();
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| !truth.iter().any(|t| t.0 == h.id)));
    }

    #[test]
    fn moved_edge_list_is_re_resolved() {
        let mut src = MemorySource::build(400, 8, 12);
        // Move every list of page 0 to a fresh page; the old slots now belong to nobody.
        let layout = src.layout;
        let old = src.pages[0].clone();
        let new_no = src.pages.len() as u32;
        let mut fresh = vec![0u8; PAGE_SIZE];
        layout.init_page(&mut fresh, new_no);
        for s in 0..layout.slots_per_page() {
            let slot = layout.slot(&old, s);
            layout
                .put_slot(&mut fresh, s, slot.owner(), &slot.to_vec())
                .unwrap();
            layout.free_slot(&mut src.pages[0], s);
            src.entries[slot.owner() as usize].edge = EdgeLocation {
                page: new_no,
                slot: s as u16,
            };
        }
        layout.seal(&mut fresh);
        layout.seal(&mut src.pages[0]);
        src.pages.push(fresh);
        // A reader that resolved before the move sees the freed slot: simulate by pointing
        // vertex 0 at the old location for its first read only.
        struct Racy {
            inner: MemorySource,
            stale_once: bool,
        }
        impl IndexSource for Racy {
            type PqTable = Vec<f32>;
            fn metric(&self) -> Metric {
                Metric::L2
            }
            fn dim(&self) -> usize {
                self.inner.dim
            }
            fn edge_layout(&self) -> EdgePageLayout {
                self.inner.layout
            }
            fn entry(&self, v: VertexId) -> Option<IndirEntry> {
                let mut e = self.inner.entry(v)?;
                if v == 0 && self.stale_once {
                    e.edge = EdgeLocation { page: 0, slot: 0 };
                }
                Some(e)
            }
            fn pq_table(&self, q: &[f32]) -> Vec<f32> {
                q.to_vec()
            }
            fn pq_distance(&self, t: &Vec<f32>, v: VertexId) -> f32 {
                self.inner.pq_distance(t, v)
            }
            fn entry_points(&self, _: &[f32], _: usize, _: &mut SearchCounters) -> Vec<VertexId> {
                vec![0]
            }
            fn medoid(&self) -> VertexId {
                0
            }
            fn read_edge_pages(&mut self, pages: &[u32], out: &mut [u8]) -> io::Result<u64> {
                let r = self.inner.read_edge_pages(pages, out);
                self.stale_once = false;
                r
            }
            fn load_vectors(
                &mut self,
                ids: &[VertexId],
                v: &mut Vec<f32>,
                t: &mut Vec<HeapTid>,
            ) -> io::Result<u64> {
                self.inner.load_vectors(ids, v, t)
            }
        }
        let q = row(&src.vectors, 8, 0).to_vec();
        let mut racy = Racy {
            inner: src,
            stale_once: true,
        };
        let (hits, c) = search(&mut racy, &q, SearchParams::default()).unwrap();
        assert_eq!(c.stale_slots, 1);
        assert_eq!(hits[0].id, 0);
        assert_eq!(hits[0].distance, 0.0);

        // A slot that does not match although the indirection points there is corruption.
        let mut src = racy.inner;
        src.entries[5].edge = src.entries[6].edge;
        let q = row(&src.vectors, 8, 5).to_vec();
        let params = SearchParams {
            use_entrance: false,
            ..SearchParams::default()
        };
        src.medoid = 5;
        let err = search(&mut src, &q, params).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(
            err.to_string().contains("does not belong to vertex 5"),
            "{err}"
        );
    }

    #[test]
    fn bad_queries_and_params_are_rejected() {
        let mut src = MemorySource::build(100, 8, 13);
        let err = |r: io::Result<SearchCursor<'_, MemorySource>>| r.err().unwrap().to_string();
        assert!(err(SearchCursor::new(
            &mut src,
            &[0.0; 7],
            SearchParams::default()
        ))
        .contains("7 dimensions, the index has 8"));
        let mut nan = vec![0.0; 8];
        nan[3] = f32::NAN;
        assert!(
            err(SearchCursor::new(&mut src, &nan, SearchParams::default()))
                .contains("invalid query")
        );
        let zero_k = SearchParams {
            k: 0,
            ..SearchParams::default()
        };
        assert!(err(SearchCursor::new(&mut src, &[0.0; 8], zero_k)).contains("k must be"));
        let zero_w = SearchParams {
            casr: CasrMode::Window(0),
            ..SearchParams::default()
        };
        assert!(err(SearchCursor::new(&mut src, &[0.0; 8], zero_w)).contains("window"));
        assert!(prepare_query(Metric::Cosine, 2, &[0.0, 0.0]).is_err());
        let unit = prepare_query(Metric::Cosine, 2, &[3.0, 4.0]).unwrap();
        assert!((unit[0] - 0.6).abs() < 1e-6 && (unit[1] - 0.8).abs() < 1e-6);
    }

    #[test]
    fn calibration_sample_only_from_rerank_all() {
        let mut src = MemorySource::build(600, 8, 14);
        let q = row(&queries(1, 8), 8, 0).to_vec();
        let mut cursor = SearchCursor::new(&mut src, &q, SearchParams::default()).unwrap();
        cursor.next_batch(10).unwrap();
        let w = cursor.calibration_sample().unwrap();
        assert!((1..=40).contains(&w));
        let windowed = SearchParams {
            casr: CasrMode::Window(w),
            ..SearchParams::default()
        };
        let mut cursor = SearchCursor::new(&mut src, &q, windowed).unwrap();
        let hits_w = cursor.next_batch(10).unwrap();
        assert_eq!(cursor.calibration_sample(), None);
        let (hits_all, _) = search(&mut src, &q, SearchParams::default()).unwrap();
        // With the query's own minimal safe window CASR finds exactly the rerank-all top-K.
        assert_eq!(
            hits_w.iter().map(|h| h.id).collect::<Vec<_>>(),
            hits_all.iter().map(|h| h.id).collect::<Vec<_>>()
        );
    }
}
