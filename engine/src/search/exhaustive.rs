//! Exhaustive rounds: exact and complete, for what the graph passes cannot reach or hold.
//!
//! Everything returned before the rounds is at most `floor` away (results come in
//! non-decreasing distance), so a vertex is still due iff it is farther than `floor`, or
//! exactly that far and not among the ids returned at `floor`: no set of returned ids is
//! needed. Each round reads the vectors of every live vertex (or of the listed vertices the
//! traversal never reached), keeps the closest `rows` still due after the previous round's
//! last result in a bounded heap, and queues them in (distance, id) order. A round that keeps
//! fewer than `rows` has found everything still due, and the cursor ends.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::io;

use rustc_hash::FxHashSet as HashSet;

use super::iterative::Phase;
use super::{check_loaded, IndexSource, SearchCursor, SearchHit};
use crate::storage::HeapTid;
use crate::VertexId;

/// Bytes of vectors an exhaustive round reads per batch.
const READ_BYTES: usize = 256 << 10;
/// Heap bytes per result a round holds: its entry in the selection heap ([`Ranked`]) and,
/// once selected, in the cursor's queue ([`SearchHit`]).
pub(super) const BYTES_PER_RESULT: usize = 32;

#[derive(Debug, PartialEq)]
pub(super) struct Exhaustive {
    floor: f32,
    floor_ties: HashSet<VertexId>,
    /// Only these vertices (the live ones the traversal never reached), or every live one.
    only: Option<Vec<VertexId>>,
    /// The last result of the previous round, in (distance, id) order.
    after: Option<(f32, VertexId)>,
}

/// A vertex a round selected; ordered by (distance, id).
#[derive(Clone, Copy, Debug)]
struct Ranked {
    distance: f32,
    id: VertexId,
    tid: HeapTid,
}

impl Ranked {
    fn key_cmp(&self, distance: f32, id: VertexId) -> Ordering {
        self.distance.total_cmp(&distance).then(self.id.cmp(&id))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key_cmp(other.distance, other.id)
    }
}

/// One round in progress: the `rows` closest vertices due so far (farthest on top), and
/// how many live vertices were not due.
struct Round<'s> {
    state: &'s Exhaustive,
    rows: usize,
    best: BinaryHeap<Ranked>,
    not_due: usize,
}

impl<S: IndexSource> SearchCursor<'_, S> {
    /// Leaves the graph: its state is dropped, and what was returned is summed up by the
    /// last distance and the ids returned at it.
    pub(super) fn start_exhaustive(&mut self, only: Option<Vec<VertexId>>) {
        self.list.items = Vec::new();
        self.spill = Default::default();
        self.due = Default::default();
        self.visited = Default::default();
        self.retries = Default::default();
        self.loaded = Default::default();
        self.lists = Default::default();
        self.pending.shrink_to_fit();
        self.phase = Phase::Exhaustive(Exhaustive {
            floor: self.last_emitted,
            floor_ties: self.ties.clone(),
            only,
            after: None,
        });
    }

    /// Reads the vectors and queues, in exact order, the next batch of vertices still due.
    /// The first round also completes the count of order skips: the live vertices not
    /// farther than the floor that were never returned.
    pub(super) fn exhaustive_round(&mut self) -> io::Result<()> {
        let Phase::Exhaustive(state) = std::mem::replace(&mut self.phase, Phase::Done) else {
            return Ok(());
        };
        self.counters.exhaustive_rounds += 1;
        let rows = (self.params.scan_memory / BYTES_PER_RESULT)
            .min(self.params.max_results.saturating_sub(self.emitted))
            .max(1);
        let chunk = (READ_BYTES / (4 * self.query.len()).max(1)).clamp(1, 1024);
        let mut round = Round {
            state: &state,
            rows,
            best: BinaryHeap::with_capacity(rows + 1),
            not_due: 0,
        };
        match &state.only {
            Some(ids) => {
                for batch in ids.chunks(chunk) {
                    self.select(batch, false, &mut round)?;
                }
            }
            None => {
                let bound = self.source.id_bound();
                let mut ids = Vec::with_capacity(chunk);
                for first in (0..bound).step_by(chunk) {
                    ids.clear();
                    ids.extend(first..bound.min(first.saturating_add(chunk as VertexId)));
                    if ids.iter().any(|&v| self.is_result(v)) {
                        self.select(&ids, true, &mut round)?;
                    }
                }
            }
        }
        if state.after.is_none() {
            let skips = match state.only {
                // Never reached, so never returned: every one not due is a skip.
                Some(_) => self.counters.order_skips + round.not_due as u64,
                None => round.not_due.saturating_sub(self.emitted) as u64,
            };
            self.counters.order_skips = self.counters.order_skips.max(skips);
        }
        let full = round.best.len() == rows;
        let batch = round.best.into_sorted_vec();
        let last = batch.last().map(|r| (r.distance, r.id));
        for r in batch {
            self.emit(SearchHit {
                id: r.id,
                distance: r.distance,
                tid: r.tid,
            });
        }
        if full {
            self.phase = Phase::Exhaustive(Exhaustive {
                after: last.or(state.after),
                ..state
            });
        }
        Ok(())
    }

    /// Loads one batch of a round (consecutive ids read as one run, or a list) and keeps
    /// the closest vertices still due.
    fn select(&mut self, ids: &[VertexId], run: bool, round: &mut Round<'_>) -> io::Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let dim = self.query.len();
        let mut vectors = Vec::with_capacity(ids.len() * dim);
        let mut tids = Vec::with_capacity(ids.len());
        let bytes = if run {
            self.source
                .load_vector_run(ids[0], ids.len(), &mut vectors, &mut tids)?
        } else {
            self.source.load_vectors(ids, &mut vectors, &mut tids)?
        };
        check_loaded(ids, dim, &vectors, &tids)?;
        self.counters.exhaustive_vector_loads += ids.len() as u64;
        self.counters.bytes_read += bytes;
        self.counters.read_batches += 1;
        let metric = self.source.metric();
        let state = round.state;
        for (j, (&id, &tid)) in ids.iter().zip(&tids).enumerate() {
            if !self.is_result(id) {
                continue;
            }
            let distance = metric.search_distance(&self.query, &vectors[j * dim..(j + 1) * dim]);
            self.counters.exact_distances += 1;
            if distance.is_nan() {
                continue; // vanished since its entry was read
            }
            let returned = if self.params.relaxed_order {
                self.returned.contains(&id)
            } else {
                distance < state.floor
                    || (distance == state.floor && state.floor_ties.contains(&id))
            };
            if returned {
                round.not_due += 1;
                continue;
            }
            let r = Ranked { distance, id, tid };
            if state.after.is_some_and(|(d, i)| r.key_cmp(d, i).is_le()) {
                continue; // queued by an earlier round
            }
            if round.best.len() < round.rows {
                round.best.push(r);
            } else if round.best.peek().is_some_and(|top| r < *top) {
                round.best.pop();
                round.best.push(r);
            }
        }
        Ok(())
    }

    /// Published and not deleted: a vertex a search may return.
    fn is_result(&self, v: VertexId) -> bool {
        self.source
            .entry(v)
            .is_some_and(|e| e.is_live() && !e.is_deleted())
    }
}
