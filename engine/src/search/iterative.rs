//! Resumed graph passes: the search after its first pass, as a shell that moves outwards
//! from the query and returns a vertex only once nothing the traversal has seen can be closer.
//!
//! State between passes: the spill (every vertex scored but not loaded, by PQ distance) and
//! `due` (loaded, not yet returned, by exact distance). Each step does one of three things:
//!
//! - **expand** the closest due vertices that are not expanded yet (`W` edge pages, one
//!   batch): a vertex is returned only after its neighbours were scored;
//! - **return** the closest due vertex when it is expanded and no spilled vertex can beat it:
//!   its exact distance is at most the spill's smallest PQ distance minus the largest amount
//!   by which a PQ distance has overestimated an exact one in this query (`margin`);
//! - **load** the closest spilled vertices (one batch of vectors), those whose PQ distance
//!   leaves them a chance of beating the closest due vertex.
//!
//! A vertex can thus be skipped (found after a farther one was returned) only if no expanded
//! vertex links to it or its PQ error exceeds every error seen so far, or if the first pass,
//! which returns its top-`k` the NAVIS way, missed it. When spill and `due` are both empty the
//! traversal has finished every vertex it can reach, and the live vertices it never reached
//! go to an exhaustive round; when the state outgrows `scan_memory`, every live vertex does.

use std::io;

use super::candidates::{hashed_bytes, Candidate, Due};
use super::exhaustive::Exhaustive;
use super::{check_loaded, IndexSource, SearchCursor, SearchHit};
use crate::storage::PAGE_SIZE;
use crate::VertexId;

/// Vectors loaded from the spill per batch (a CASR window is of the same order).
const LOAD_BATCH: usize = 32;
/// The PQ margin is this many times the largest overestimate seen: the largest of a few
/// hundred samples falls short of the tail of the error (measured on 8-d data with 2-byte
/// codes, a factor of 2 halved the skips of an unbounded scan).
const MARGIN_FACTOR: f32 = 2.0;

#[derive(Debug, PartialEq)]
pub(super) enum Phase {
    /// First pass, then resumed passes over the graph.
    Graph,
    Exhaustive(Exhaustive),
    Done,
}

impl<S: IndexSource> SearchCursor<'_, S> {
    /// One resumed graph pass: steps until it has queued its batch (doubling from `k` up to
    /// `max_batch`), the graph has nothing left, or its expansions reach the safety cap.
    pub(super) fn graph_pass(&mut self) -> io::Result<()> {
        self.counters.resumes += 1;
        if self.passes == 2 {
            self.leave_first_pass();
        }
        self.pass_k = (self.pass_k * 2).min(self.params.max_batch).max(1);
        if self.exhaustive_is_cheaper() {
            self.start_exhaustive(None);
            return Ok(());
        }
        let target = self.emitted + self.pass_k;
        let cap = self.pass_k * self.params.max_expansions_per_pass;
        let mut expansions = 0;
        while self.emitted < target {
            if self.over_budget() {
                self.start_exhaustive(None);
                return Ok(());
            }
            if self.lookahead_unexpanded() {
                if expansions >= cap {
                    break;
                }
                expansions += self.expand_due()?;
                continue;
            }
            let front = self
                .spill
                .peek()
                .map_or(f32::INFINITY, |c| c.distance - self.margin);
            match self.due.first().copied() {
                Some(best) if best.distance <= front => {
                    self.due.pop_first();
                    self.emit(SearchHit {
                        id: best.id,
                        distance: best.distance,
                        tid: best.tid,
                    });
                }
                Some(best) => self.load_from_spill(best.distance + self.margin)?,
                None if !self.spill.is_empty() => self.load_from_spill(f32::INFINITY)?,
                None => {
                    self.graph_exhausted();
                    break;
                }
            }
        }
        self.counters.visited = self.visited.len() as u64;
        Ok(())
    }

    /// Moves the first pass's list into the resumed state: candidates it loaded go to `due`
    /// (and teach the PQ margin), the others to the spill. From now on the list stays empty,
    /// so every neighbour scored goes straight to the spill.
    fn leave_first_pass(&mut self) {
        let dim = self.query.len();
        let metric = self.source.metric();
        for c in std::mem::take(&mut self.list.items) {
            let Some((vector, tid)) = self.loaded.get(c.id, dim) else {
                if !c.finished {
                    self.spill.push(c);
                }
                continue;
            };
            let distance = metric.search_distance(&self.query, vector);
            self.counters.exact_distances += 1;
            if distance.is_nan() {
                continue;
            }
            self.note_pq_error(c.distance, distance);
            if !c.finished {
                self.due.insert(Due {
                    distance,
                    id: c.id,
                    tid,
                    expanded: c.expanded,
                });
            }
        }
        self.list.capacity = 0;
        self.loaded = Default::default();
        self.stale.clear();
    }

    fn note_pq_error(&mut self, pq: f32, exact: f32) {
        let over = MARGIN_FACTOR * (pq - exact);
        if over.is_finite() && over > self.margin {
            self.margin = over;
        }
    }

    /// Whether one of the closest `L + 1` due vertices (the one to return next and its
    /// look-ahead) is not expanded yet.
    fn lookahead_unexpanded(&self) -> bool {
        self.due
            .iter()
            .take(self.params.list + 1)
            .any(|d| !d.expanded)
    }

    /// Expands up to `W` unexpanded due vertices, closest first, from twice the look-ahead
    /// (a hop reads `W` pages as one batch); returns how many.
    fn expand_due(&mut self) -> io::Result<usize> {
        let frontier: Vec<Due> = self
            .due
            .iter()
            .take(2 * (self.params.list + 1))
            .filter(|d| !d.expanded)
            .take(self.params.beam_width)
            .copied()
            .collect();
        let ids: Vec<VertexId> = frontier.iter().map(|d| d.id).collect();
        self.expand(&ids)?;
        for mut d in frontier {
            // A vertex whose list moved while it was read is read again.
            d.expanded = !self.stale.contains(&d.id);
            self.due.replace(d);
        }
        self.stale.clear();
        Ok(ids.len())
    }

    /// Reads the edge lists of `ids`, `W` pages at a time; neighbours go to the spill.
    fn expand(&mut self, ids: &[VertexId]) -> io::Result<()> {
        let mut retries = std::mem::take(&mut self.retries);
        let mut result = Ok(());
        for chunk in ids.chunks(self.params.beam_width) {
            result = self.hop(chunk, &mut retries);
            if result.is_err() {
                break;
            }
        }
        self.retries = retries;
        result
    }

    /// Loads a batch of the closest spilled vertices: the first always, then those whose PQ
    /// distance is at most `limit`. Deleted ones are expanded instead (their edges are all
    /// they are good for); vanished ones are dropped.
    fn load_from_spill(&mut self, limit: f32) -> io::Result<()> {
        let mut taken: Vec<Candidate> = Vec::with_capacity(LOAD_BATCH);
        let mut deleted = Vec::new();
        let mut popped = 0;
        while popped < LOAD_BATCH {
            match self.spill.peek() {
                Some(c) if popped == 0 || c.distance <= limit => {}
                _ => break,
            }
            let c = self.spill.pop().expect("peeked");
            popped += 1;
            if self.is_deleted(c.id) {
                if !c.expanded {
                    deleted.push(c.id);
                }
            } else {
                taken.push(c);
            }
        }
        if !deleted.is_empty() {
            self.expand(&deleted)?;
            // A deleted vertex whose list moved is not retried: it is no result, and its
            // neighbours have other ways in.
            self.stale.clear();
        }
        if taken.is_empty() {
            return Ok(());
        }
        let dim = self.query.len();
        let ids: Vec<VertexId> = taken.iter().map(|c| c.id).collect();
        let mut vectors = Vec::with_capacity(ids.len() * dim);
        let mut tids = Vec::with_capacity(ids.len());
        let bytes = self.source.load_vectors(&ids, &mut vectors, &mut tids)?;
        check_loaded(&ids, dim, &vectors, &tids)?;
        self.counters.rerank_vector_loads += ids.len() as u64;
        self.counters.exact_distances += ids.len() as u64;
        self.counters.bytes_read += bytes;
        self.counters.read_batches += 1;
        let metric = self.source.metric();
        for (j, c) in taken.iter().enumerate() {
            let distance = metric.search_distance(&self.query, &vectors[j * dim..(j + 1) * dim]);
            if distance.is_nan() {
                continue; // vanished since it was scored
            }
            self.note_pq_error(c.distance, distance);
            self.due.insert(Due {
                distance,
                id: c.id,
                tid: tids[j],
                expanded: c.expanded,
            });
        }
        Ok(())
    }

    /// Spill and `due` are empty: every vertex the traversal reached is finished. The live
    /// vertices it never reached (duplicates a prune cut off, islands) get an exhaustive
    /// round of their own; if there are too many to list, every live vertex does.
    fn graph_exhausted(&mut self) {
        let most = self.params.scan_memory / (2 * std::mem::size_of::<VertexId>());
        let mut unreached = Vec::new();
        for v in 0..self.source.id_bound() {
            let live = self.source.entry(v);
            if live.is_some_and(|e| e.is_live() && !e.is_deleted()) && !self.visited.contains(&v) {
                if unreached.len() == most {
                    self.start_exhaustive(None);
                    return;
                }
                unreached.push(v);
            }
        }
        if unreached.is_empty() {
            self.phase = Phase::Done;
        } else {
            self.start_exhaustive(Some(unreached));
        }
    }

    /// Whether one exhaustive round would cost less than the graph passes so far plus the
    /// next one. Costs are in random 4 KiB reads: the graph's device reads (edge pages missed
    /// by the cache, vectors) projected over the next batch at their rate per result so far,
    /// against the vector file read sequentially at `sequential_page_cost` per page (a quarter
    /// by default, PostgreSQL's `seq_page_cost / random_page_cost`). Small or low-dimensional
    /// indexes thus go exhaustive (and exact) at once; large ones only for scans far deeper
    /// than a LIMIT.
    fn exhaustive_is_cheaper(&self) -> bool {
        let c = &self.counters;
        let spent = (c.edge_pages_read - c.edge_page_cache_hits
            + c.rerank_vector_loads
            + c.packed_vector_loads) as f64;
        let next = spent / self.emitted.max(1) as f64 * self.pass_k as f64;
        let vector_bytes = self.source.id_bound() as f64 * (4 * self.query.len()) as f64;
        let exhaustive = vector_bytes / PAGE_SIZE as f64 * self.params.sequential_page_cost;
        spent + next >= exhaustive
    }

    /// Whether the resumed state has outgrown [`super::SearchParams::scan_memory`].
    pub(super) fn over_budget(&self) -> bool {
        self.state_bytes() > self.params.scan_memory
    }

    /// Heap bytes of the search state, from the containers' capacities.
    fn state_bytes(&self) -> usize {
        use std::mem::size_of;
        hashed_bytes::<VertexId>(self.visited.capacity())
            + (self.list.items.capacity() + self.spill.capacity()) * size_of::<Candidate>()
            // B-tree nodes hold 11 entries and are at least half full.
            + self.due.len() * size_of::<Due>() * 2
            + hashed_bytes::<VertexId>(self.ties.capacity())
            + hashed_bytes::<VertexId>(self.returned.capacity())
            + self.pending.capacity() * size_of::<SearchHit>()
            + hashed_bytes::<(VertexId, u32)>(self.retries.capacity())
            + self.loaded.bytes()
    }
}
