//! NAVIS insert: position seeking, then out-of-place edge-list writes (digest §1.3.3, §1.5).
//!
//! 1. **Position seeking** is a search for the new vector with the insert list
//!    (`navis.insert_list`) and the insert CASR window: the explored candidates carry PQ
//!    distances, the ones CASR loaded carry exact vectors, and every edge list read on the
//!    way is kept with its location.
//! 2. **Neighbours**: RobustPrune over the explored candidates (deleted ones excluded), with
//!    exact vectors where CASR loaded them and PQ-reconstructed ("deflated") vectors
//!    elsewhere; nothing more is read from the vector file.
//! 3. **Writes**: the new vertex's vector goes into its vector slot and its code into the PQ
//!    file. Then the edge lists that change (each chosen neighbour's with the back-edge
//!    added, pruned when over the degree, and last the new vertex's, which also takes over
//!    neighbours the pruning pushed out) are written **out of place**,
//!    packed `slots_per_page` to a freshly allocated page, group by group: lock the group's
//!    vertex stripes, take each list as it is now (the copy read while seeking if the
//!    indirection still points where it was read, else one page read), write the page,
//!    publish (the new vertex) or relocate (the neighbours) through the indirection table,
//!    retire the old slots, unlock. The free slots of the last page take, unchanged, the
//!    current lists of sparse pages this insert saw, which then become free (absorption,
//!    `compact` module). So an insert writes `ceil(lists / slots_per_page)` edge pages and
//!    one vector slot, never rewrites a page that holds other current lists, and holds at
//!    most `slots_per_page` stripes at a time.
//!
//! With a [`BackEdgeSink`] ([`Index::insert_deferring`], LIOS), step 3 writes only the nearest
//! neighbour's list and the new vertex's; the other neighbours' back-edges go to the sink
//! after the new vertex is published, and whoever takes them runs them later
//! (`back_edges` module).
//!
//! An error before the new vertex is published (with the last group) returns its id to the
//! free list; back-edges already written to it then point at a free id, which readers skip.
//! The index is consistent at every step (a missing edge costs recall, not correctness).

use super::alloc::{allocate_vertex, release_vertex};
use super::back_edges::{BackEdge, BackEdgeSink};
use super::compact::Absorption;
use super::locks::{StripeGuard, WriteLocks};
use super::log::{IndexLog, VectorChange};
use super::vectors::VectorCache;
use super::write::{read_current_list, write_lists, ListChange};
use crate::cache::Caller;
use crate::counters::SearchCounters;
use crate::graph::prune::{robust_prune, top_up};
use crate::graph::vamana::prune_metric;
use crate::index::{DiskReader, Index, IndexError};
use crate::search::{CasrMode, SearchCursor, SearchParams};
use crate::storage::state::Counter;
use crate::storage::{EdgeLocation, HeapTid};
use crate::VertexId;
use rustc_hash::FxHashMap as HashMap;

/// The out-neighbours an inserted vertex keeps at least ([`top_up`]): 8, or a quarter of
/// the degree bound if that is less. Measured on Fashion-MNIST grown from 2,000 to 10,000
/// rows (`tests/grown_reach.rs`, max_degree 32): rows missed by a search for their own
/// vector 6 of 2,000 without it, 2 at 4, 0 at 8. Not a share of max_degree: at the default
/// 96 the prune keeps 12 neighbours on average there, and topping up to 24 doubled the lists
/// an insert writes, to 8 added 5%.
fn min_out_degree(max_degree: usize) -> usize {
    8.min(max_degree / 4)
}

/// Parameters of one insert.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct InsertParams {
    /// Search list of position seeking (before widening for deleted vertices).
    pub list: usize,
    pub beam_width: usize,
    pub entry_list: usize,
    /// The K whose stability ends the insert's CASR.
    pub rerank_k: usize,
    /// Rerank window; `None` reranks every explored candidate.
    pub casr_window: Option<usize>,
}

impl Default for InsertParams {
    /// `navis.insert_list`'s default: 64, not the paper's 100 (RFC 0009).
    fn default() -> Self {
        InsertParams {
            list: 64,
            beam_width: 4,
            entry_list: 10,
            rerank_k: 10,
            casr_window: None,
        }
    }
}

/// What one insert did: the deterministic counters the benchmarks report per insert.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InsertReport {
    pub vertex: VertexId,
    /// Out-neighbours chosen for the new vertex.
    pub degree: usize,
    /// Position seeking's counters (pages read, vectors loaded, distances, ...).
    pub search: SearchCounters,
    /// Edge pages read again because a neighbour's list moved after it was read.
    pub pages_reread: u64,
    pub lists_written: u64,
    /// Unchanged lists moved into the room left on this insert's pages, each from a page
    /// that became free by it (`compact` module).
    pub lists_absorbed: u64,
    pub pages_written: u64,
    /// Distinct pages the modified lists were on before the insert: what an in-place
    /// update would have rewritten (plus the new vertex's page).
    pub pages_in_place: u64,
    /// Back-edges left to a sink ([`Index::insert_deferring`]), not written by this insert.
    pub back_edges_deferred: u64,
    /// Back-edges the sink refused (a full queue), which this insert ran itself.
    pub back_edges_refused: u64,
    /// Whether the new vertex was promoted into the entrance graph.
    pub promoted: bool,
    /// With `casr_window: None`: the smallest window that would have kept this rerank's
    /// top-K, for the caller's insert-window calibration.
    pub calibration_sample: Option<usize>,
}

impl Index {
    /// Inserts `vector` (the row at `tid`) and returns what it did. The vector is validated
    /// like a query (dimension, finite values, non-zero for cosine).
    pub fn insert(
        &self,
        reader: &mut DiskReader<'_>,
        locks: &dyn WriteLocks,
        vector: &[f32],
        tid: HeapTid,
        params: InsertParams,
    ) -> Result<InsertReport, IndexError> {
        self.insert_with(reader, locks, vector, tid, params, None)
    }

    /// Like [`Index::insert`], but the back-edges of every neighbour except the nearest are
    /// offered to `sink`, to be written later by [`Index::run_back_edges`] (LIOS, RFC 0004);
    /// those it refuses are written before this returns. The new row is searchable when this
    /// returns, as with `insert`.
    pub fn insert_deferring(
        &self,
        reader: &mut DiskReader<'_>,
        locks: &dyn WriteLocks,
        vector: &[f32],
        tid: HeapTid,
        params: InsertParams,
        sink: &dyn BackEdgeSink,
    ) -> Result<InsertReport, IndexError> {
        self.insert_with(reader, locks, vector, tid, params, Some(sink))
    }

    fn insert_with(
        &self,
        reader: &mut DiskReader<'_>,
        locks: &dyn WriteLocks,
        vector: &[f32],
        tid: HeapTid,
        params: InsertParams,
        sink: Option<&dyn BackEdgeSink>,
    ) -> Result<InsertReport, IndexError> {
        if !self.accepts_inserts() {
            return Err(IndexError::Invalid(
                "this navis index was built over no rows and has no trained quantizer: \
                 build it from its first row (index::regrow) before inserting into it"
                    .into(),
            ));
        }
        let search = SearchParams {
            k: params.rerank_k.max(1),
            list: self.widened_list(params.list),
            beam_width: params.beam_width,
            entry_list: params.entry_list,
            casr: params.casr_window.map_or(CasrMode::Off, CasrMode::Window),
            record_lists: true,
            read_rerank_tail: false,
            single_pass: true,
            ..SearchParams::default()
        };
        let log = self.log()?;
        // Position seeking counts as the insert path in the edge-page cache.
        let previous_caller = reader.caller();
        reader.set_caller(Caller::Insert);
        let result = self.insert_seeking(reader, &*log, locks, vector, tid, search, sink);
        reader.set_caller(previous_caller);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn insert_seeking(
        &self,
        reader: &mut DiskReader<'_>,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        vector: &[f32],
        tid: HeapTid,
        search: SearchParams,
        sink: Option<&dyn BackEdgeSink>,
    ) -> Result<InsertReport, IndexError> {
        let mut cursor = SearchCursor::new(reader, vector, search)?;
        cursor.run_first_pass()?;
        let mut report = InsertReport {
            search: cursor.counters(),
            calibration_sample: cursor.calibration_sample(),
            ..InsertReport::default()
        };
        let query = cursor.query().to_vec();
        let explored = cursor.explored();
        let mut vectors = VectorCache::new(self);
        for &(id, _) in &explored {
            match cursor.exact_vector(id) {
                Some(v) if !v[0].is_nan() => {
                    vectors.add_exact(id, v);
                }
                _ => {}
            }
        }
        let recorded: HashMap<VertexId, (EdgeLocation, Vec<VertexId>)> = explored
            .iter()
            .filter_map(|&(id, _)| cursor.expanded_list(id).map(|(l, n)| (id, (l, n.to_vec()))))
            .collect();
        let entry_points = cursor.entry_points().to_vec();
        drop(cursor);

        let max_degree = self.files().manifest().max_degree as usize;
        let alpha = self.files().manifest().params.alpha;
        let prune = prune_metric(self.metric());
        let mut pool: Vec<(VertexId, f32)> = explored
            .iter()
            .filter(|&&(id, _)| self.is_live_undeleted(id))
            .map(|&(id, _)| (id, vectors.distance_from(prune, &query, id)))
            .filter(|(_, d)| !d.is_nan())
            .collect();
        let mut neighbours = robust_prune(&mut pool, alpha, max_degree, |a, b| {
            vectors.distance(prune, a, b)
        });
        top_up(&mut neighbours, &pool, min_out_degree(max_degree));
        report.degree = neighbours.len();

        let v = allocate_vertex(self.files(), locks)?;
        report.vertex = v;
        let prepared = (|| -> Result<(), IndexError> {
            let code = self.pq().encode(&query);
            log.vector(&VectorChange {
                vertex: v,
                vector: &query,
                tid,
                code: &code,
            })?;
            self.files().write_pq_code(v, &code)?;
            self.files().indirection().set_tid(v, tid)?;
            Ok(())
        })();
        if let Err(e) = prepared {
            let _ = release_vertex(self.files(), locks, v);
            return Err(e);
        }
        self.files().state().count(Counter::VectorsWritten, 1);
        vectors.add_exact(v, &query);

        // The neighbours' lists first and the new vertex's last, so that the new list can
        // take over neighbours that the back-edges pushed out of their lists (below).
        //
        // Back-edges come from the chosen neighbours. When position seeking found no live
        // vertex to choose (everything near the new one is deleted: a table deleted down to
        // a few rows), they come from the search's entry points, which route while deleted
        // and are never freed; otherwise nothing would point at the new vertex and no search
        // could reach it.
        let mut lists: Vec<VertexId> = if neighbours.is_empty() {
            entry_points
                .iter()
                .copied()
                .filter(|&e| e != v && self.files().indirection().entry(e).is_some())
                .collect()
        } else {
            neighbours.clone()
        };
        // Deferring: the nearest neighbour's back-edge stays inline, so that the new vertex
        // has an in-edge when it is published; the rest wait until v is published (a task
        // that ran earlier would find v not live and drop itself).
        let deferred: Vec<VertexId> = match sink {
            Some(_) if !neighbours.is_empty() => lists.split_off(1),
            _ => Vec::new(),
        };
        lists.push(v);
        let spp = self.files().edge_layout().slots_per_page();
        let mut old_pages: Vec<u32> = Vec::new();
        let mut displaced: Vec<VertexId> = Vec::new();
        for group in lists.chunks(spp) {
            // A page with room left takes the lists of pages that then become free.
            let plan = if group.len() < spp {
                let seen = recorded.values().map(|(at, _)| at.page);
                self.absorption_plan(group, seen, spp - group.len())
                    .unwrap_or_default()
            } else {
                Absorption::new()
            };
            let outcome = self.write_group(
                log,
                locks,
                group,
                v,
                tid,
                &neighbours,
                &recorded,
                &plan,
                &mut vectors,
                &mut report,
                &mut old_pages,
                &mut displaced,
            );
            if let Err(e) = outcome {
                // The new vertex is published with the last group: until then it can go back.
                let _ = release_vertex(self.files(), locks, v);
                return Err(e);
            }
        }
        if let Some(sink) = sink {
            let refused: Vec<BackEdge> = deferred
                .iter()
                .map(|&u| BackEdge { vertex: u, to: v })
                .filter(|&edge| !sink.defer(edge))
                .collect();
            report.back_edges_deferred = (deferred.len() - refused.len()) as u64;
            report.back_edges_refused = refused.len() as u64;
            let ran = self.run_back_edges_logged(log, locks, &refused)?;
            report.pages_reread += ran.pages_read;
            report.lists_written += ran.lists_written;
            report.lists_absorbed += ran.lists_absorbed;
            report.pages_written += ran.pages_written;
        }
        let e_pos: Vec<VertexId> = explored.iter().map(|&(id, _)| id).collect();
        // Best effort: the row is in the index already, a failed promotion only leaves the
        // entrance graph a little smaller.
        report.promoted = self
            .maybe_promote(log, locks, v, &query, &entry_points, &e_pos)
            .unwrap_or(false);
        old_pages.sort_unstable();
        old_pages.dedup();
        report.pages_in_place = old_pages.len() as u64 + 1;
        let state = self.files().state();
        state.count(Counter::Inserts, 1);
        state.count(Counter::InsertPagesInPlace, report.pages_in_place);
        state.count(
            Counter::InsertPagesRead,
            report.search.edge_pages_read + report.pages_reread,
        );
        state.count(
            Counter::InsertVectorsLoaded,
            report.search.rerank_vector_loads,
        );
        Ok(report)
    }

    /// Writes one page worth of modified lists: `group` holds neighbours that get the
    /// back-edge to `v` and, in the last group, `v` itself.
    ///
    /// A neighbour whose list is full is re-pruned, which can push out an old neighbour `z`;
    /// if that was `z`'s only in-edge, no search could reach `z` any more. Such `z` are
    /// collected in `displaced` and appended to the new vertex's list while it has room:
    /// the new vertex is what displaced them, so it is close to them, and the path
    /// `u -> v -> z` replaces `u -> z`.
    #[allow(clippy::too_many_arguments)]
    fn write_group(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        group: &[VertexId],
        v: VertexId,
        tid: HeapTid,
        v_list: &[VertexId],
        recorded: &HashMap<VertexId, (EdgeLocation, Vec<VertexId>)>,
        plan: &Absorption,
        vectors: &mut VectorCache<'_>,
        report: &mut InsertReport,
        old_pages: &mut Vec<u32>,
        displaced: &mut Vec<VertexId>,
    ) -> Result<(), IndexError> {
        let files = self.files();
        let layout = files.edge_layout();
        let locked: Vec<VertexId> = group
            .iter()
            .copied()
            .chain(plan.iter().map(|&(u, _)| u))
            .collect();
        let _stripes = StripeGuard::lock(locks, &locked);

        let mut changes: Vec<ListChange> = Vec::new();
        let mut page_buf = vec![0u8; layout.page_size()];
        for &u in group {
            if u == v {
                // Displaced vertices may have lost their only in-edge, so they go before the
                // new vertex's farthest own neighbours, which existed before it and keep
                // their in-edges (the nearest one always stays). With deferred back-edges the
                // nearest neighbour's edge is often a vertex's only in-edge: 3-d duplicates
                // left 15 of 1,000 vertices unreachable until their tasks ran when displaced
                // vertices only took free slots.
                let max_degree = files.edge_layout().max_degree();
                let mut taken = Vec::new();
                self.append_displaced(v, &mut taken, displaced);
                taken.retain(|z| !v_list.contains(z));
                let own = v_list
                    .len()
                    .min(max_degree.saturating_sub(taken.len()).max(1));
                let mut list = v_list[..own].to_vec();
                self.append_displaced(v, &mut list, &taken);
                changes.push(ListChange {
                    vertex: v,
                    list,
                    old: None,
                });
                continue;
            }
            let Some(entry) = files.indirection().entry(u) else {
                continue; // freed since position seeking: nothing to link
            };
            let current: Vec<VertexId> = match recorded.get(&u) {
                Some((loc, list)) if *loc == entry.edge => list.clone(),
                _ => {
                    report.pages_reread += 1;
                    read_current_list(files, u, entry.edge, &mut page_buf)?
                }
            };
            if current.contains(&v) {
                continue;
            }
            // The nearest neighbour always keeps the back-edge, so that every new vertex has
            // an in-edge when it is published. Without this, a vertex identical to one
            // already in the list (distance 0 occludes it) lost every back-edge: inserting
            // many copies of a vector left most of them unreachable until a VACUUM
            // reconnected them. The entry it replaces, the last one the prune chose, is
            // displaced into the new vertex's list (u -> v -> z).
            let nearest = v_list.first() == Some(&u);
            let extended = self.extend_list(u, current, &[v], nearest.then_some(v), vectors);
            if !extended.changed {
                continue; // v was occluded: u's list stays as it is
            }
            displaced.extend(extended.displaced);
            let new_list = extended.list;
            changes.push(ListChange {
                vertex: u,
                list: new_list,
                old: Some(entry.edge),
            });
        }
        if changes.is_empty() {
            return Ok(());
        }
        let absorbed_from = changes.len();
        let absorbed = self.absorb(plan, &mut changes, layout.slots_per_page(), &mut page_buf)?;

        write_lists(files, log, locks, &changes, tid)?;
        report.pages_written += 1;
        report.lists_written += absorbed_from as u64;
        report.lists_absorbed += absorbed as u64;
        old_pages.extend(
            changes[..absorbed_from]
                .iter()
                .filter_map(|c| c.old)
                .map(|l| l.page),
        );
        Ok(())
    }
}
