//! The cursor's candidate structures: the sorted list a pass traverses, the spill of
//! candidates that fell off it, and the exact vectors the first pass loaded.

use rustc_hash::FxHashMap as HashMap;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::storage::HeapTid;
use crate::VertexId;

#[derive(Clone, Copy, Debug)]
pub(super) struct Candidate {
    /// PQ distance: what steers the traversal.
    pub distance: f32,
    pub id: VertexId,
    pub expanded: bool,
    /// Returned by the first pass. It stays in the list, which position seeking reads whole
    /// ([`super::SearchCursor::explored`]); resumed passes leave it out.
    pub finished: bool,
}

/// Candidates sorted by PQ distance (then id), at most `capacity` of them.
#[derive(Debug, Default)]
pub(super) struct CandidateList {
    pub items: Vec<Candidate>,
    pub capacity: usize,
}

impl CandidateList {
    pub fn with_capacity(capacity: usize) -> CandidateList {
        CandidateList {
            items: Vec::with_capacity(capacity + 1),
            capacity,
        }
    }

    /// Inserts a new candidate; returns the one pushed out (or the candidate itself) when full.
    pub fn insert(&mut self, id: VertexId, distance: f32) -> Option<Candidate> {
        self.insert_candidate(Candidate {
            distance,
            id,
            expanded: false,
            finished: false,
        })
    }

    pub fn insert_candidate(&mut self, c: Candidate) -> Option<Candidate> {
        let (distance, id) = (c.distance, c.id);
        // Once the list is full most candidates scored are farther than its last entry:
        // one comparison turns them away instead of a binary search.
        if self.items.len() >= self.capacity {
            match self.items.last() {
                Some(last) if closer(distance, id, last.distance, last.id) => {}
                _ => return Some(c),
            }
        }
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
    pub fn take_frontier(&mut self, n: usize, out: &mut Vec<VertexId>) {
        out.clear();
        for c in self.items.iter_mut().filter(|c| !c.expanded).take(n) {
            c.expanded = true;
            out.push(c.id);
        }
    }

    /// Marks `id` expanded if it is an unexpanded candidate; returns whether it was.
    pub fn claim(&mut self, id: VertexId) -> bool {
        match self.items.iter_mut().find(|c| c.id == id && !c.expanded) {
            Some(c) => {
                c.expanded = true;
                true
            }
            None => false,
        }
    }

    /// Puts a vertex whose list could not be read this hop back in line.
    pub fn unclaim(&mut self, id: VertexId) {
        if let Some(c) = self.items.iter_mut().find(|c| c.id == id) {
            c.expanded = false;
        }
    }
}

pub(super) fn closer(da: f32, ia: VertexId, db: f32, ib: VertexId) -> bool {
    da.total_cmp(&db).then(ia.cmp(&ib)).is_lt()
}

/// A candidate in a heap, closest (by distance, then id) on top.
#[derive(Clone, Copy, Debug)]
struct Nearest(Candidate);

impl PartialEq for Nearest {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Nearest {}
impl PartialOrd for Nearest {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Nearest {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        (other.0.distance.total_cmp(&self.0.distance)).then(other.0.id.cmp(&self.0.id))
    }
}

/// Candidates that fell off the list, kept whole for resumed passes: they are the next best
/// places to continue from. Each visited vertex is in the list, here, or finished, so the
/// spill holds at most `entry points + expanded * max_degree` entries.
#[derive(Debug, Default)]
pub(super) struct Spill {
    heap: BinaryHeap<Nearest>,
}

impl Spill {
    pub fn push(&mut self, c: Candidate) {
        self.heap.push(Nearest(c));
    }

    /// The closest spilled candidate.
    pub fn pop(&mut self) -> Option<Candidate> {
        self.heap.pop().map(|n| n.0)
    }

    /// The closest spilled candidate, left in place.
    pub fn peek(&self) -> Option<&Candidate> {
        self.heap.peek().map(|n| &n.0)
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.heap.capacity()
    }
}

/// A live candidate of a resumed pass whose exact distance is known, not yet returned;
/// ordered by (distance, id), `expanded` aside.
#[derive(Clone, Copy, Debug)]
pub(super) struct Due {
    pub distance: f32,
    pub id: VertexId,
    pub tid: HeapTid,
    pub expanded: bool,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.id.cmp(&other.id))
    }
}

/// Exact vectors loaded by the first pass (CASR or the packed emulation), for position
/// seeking and so that resumed passes never reload one.
#[derive(Debug, Default)]
pub(super) struct LoadedVectors {
    pub slot: HashMap<VertexId, usize>,
    pub data: Vec<f32>,
    tids: Vec<HeapTid>,
}

impl LoadedVectors {
    pub fn get(&self, id: VertexId, dim: usize) -> Option<(&[f32], HeapTid)> {
        self.slot
            .get(&id)
            .map(|&i| (&self.data[i * dim..(i + 1) * dim], self.tids[i]))
    }

    pub fn insert_batch(&mut self, ids: &[VertexId], vectors: &[f32], tids: &[HeapTid]) {
        for (i, &id) in ids.iter().enumerate() {
            let dim = vectors.len() / ids.len();
            let slot = self.tids.len();
            self.data
                .extend_from_slice(&vectors[i * dim..(i + 1) * dim]);
            self.tids.push(tids[i]);
            self.slot.insert(id, slot);
        }
    }

    pub fn len(&self) -> usize {
        self.tids.len()
    }

    /// Heap bytes held, roughly (hash buckets counted with their control byte).
    pub fn bytes(&self) -> usize {
        self.data.capacity() * 4
            + self.tids.capacity() * std::mem::size_of::<HeapTid>()
            + hashed_bytes::<(VertexId, usize)>(self.slot.capacity())
    }
}

/// Heap bytes of a hash table holding `capacity` entries of `T`: hashbrown keeps one control
/// byte per bucket and at most 7/8 of its buckets full.
pub(super) fn hashed_bytes<T>(capacity: usize) -> usize {
    capacity * (std::mem::size_of::<T>() + 1) * 8 / 7
}
