//! The query filter: a small flat graph over the representatives' query vectors that finds
//! the cached query nearest a new one (the paper uses an HNSW with m = 4, efSearch = 16; with
//! at most a few thousand representatives per index one layer of degree 8 does the same job
//! without levels). There are two, by epoch: the active filter admits new representatives;
//! the standby one, sealed earlier, only loses them. Evicted representatives stay in their
//! graph as tombstones that route but never answer, until their whole filter is dropped.

use super::body::Body;
use super::layout::*;
use rustc_hash::FxHashSet;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Candidates a lookup keeps (the paper's efSearch).
pub(super) const EF_SEARCH: usize = 16;
/// Candidates an insert keeps while linking (the paper's efConstruction).
const EF_BUILD: usize = 8;

#[derive(Clone, Copy, PartialEq)]
struct Near(f32, u32);

impl Eq for Near {}

impl Ord for Near {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Body<'_> {
    /// The header words of the filter of `epoch`: entry point, live, tombstones.
    pub fn filter_words(&self, epoch: u32) -> usize {
        H_FILTER + 3 * (epoch & 1) as usize
    }

    fn in_filter(&self, e: u32, epoch: u32) -> bool {
        matches!(self.state(e), STATE_REPRESENTATIVE | STATE_TOMBSTONE)
            && self.w.get(self.e(e, E_EPOCH)) == epoch
    }

    fn squared_distance(&self, e: u32, query: &[f32]) -> f32 {
        crate::kernels().l2_squared(query, self.query(e))
    }

    /// Best-first search of one filter: up to `ef` nodes (tombstones included), closest
    /// first, with squared Euclidean distances.
    fn search_filter(&self, epoch: u32, query: &[f32], ef: usize) -> Vec<Near> {
        let start = self.w.get(self.filter_words(epoch));
        if start == NONE || start as usize >= self.g.entries || !self.in_filter(start, epoch) {
            return Vec::new();
        }
        let mut visited = FxHashSet::default();
        visited.insert(start);
        let d0 = self.squared_distance(start, query);
        let mut frontier = BinaryHeap::from([std::cmp::Reverse(Near(d0, start))]);
        let mut best = BinaryHeap::from([Near(d0, start)]);
        while let Some(std::cmp::Reverse(c)) = frontier.pop() {
            if best.len() >= ef && c.0 > best.peek().map_or(f32::INFINITY, |b| b.0) {
                break;
            }
            let degree = (self.w.get(self.e(c.1, E_DEGREE)) as usize).min(FILTER_DEGREE);
            for i in 0..degree {
                let n = self.w.get(self.e(c.1, E_NEIGHBOURS) + i);
                if n as usize >= self.g.entries || !self.in_filter(n, epoch) || !visited.insert(n) {
                    continue;
                }
                let d = self.squared_distance(n, query);
                if best.len() < ef || d < best.peek().map_or(f32::INFINITY, |b| b.0) {
                    frontier.push(std::cmp::Reverse(Near(d, n)));
                    best.push(Near(d, n));
                    if best.len() > ef {
                        best.pop();
                    }
                }
            }
        }
        best.into_sorted_vec()
    }

    /// The live representative nearest `query` in either filter, with its Euclidean distance.
    pub fn nearest_representative(&self, query: &[f32]) -> Option<(u32, f32)> {
        let active = self.w.get(H_ACTIVE_EPOCH);
        [active, active.wrapping_sub(1)]
            .into_iter()
            .flat_map(|epoch| self.search_filter(epoch, query, EF_SEARCH))
            .filter(|n| self.state(n.1) == STATE_REPRESENTATIVE)
            .min()
            .map(|n| (n.1, n.0.sqrt()))
    }

    /// Adds representative `e` (query already stored) to the active filter.
    pub fn filter_insert(&self, e: u32, query: &[f32]) {
        let epoch = self.w.get(H_ACTIVE_EPOCH);
        let f = self.filter_words(epoch);
        let near = self.search_filter(epoch, query, EF_BUILD.max(FILTER_DEGREE));
        self.w.set(self.e(e, E_EPOCH), epoch);
        let links: Vec<Near> = near.into_iter().take(FILTER_DEGREE).collect();
        self.w.set(self.e(e, E_DEGREE), links.len() as u32);
        for (i, n) in links.iter().enumerate() {
            self.w.set(self.e(e, E_NEIGHBOURS) + i, n.1);
        }
        if self.w.get(f) == NONE {
            self.w.set(f, e);
        }
        self.bump(f + 1, 1);
        for n in links {
            self.link_back(n.1, e, n.0);
        }
    }

    /// Adds the edge `from -> to` (squared distance `d`), replacing `from`'s farthest
    /// neighbour when its list is full and `to` is closer.
    fn link_back(&self, from: u32, to: u32, d: f32) {
        let degree = self.w.get(self.e(from, E_DEGREE)) as usize;
        let at = self.e(from, E_NEIGHBOURS);
        if degree < FILTER_DEGREE {
            self.w.set(at + degree, to);
            self.w.set(self.e(from, E_DEGREE), degree as u32 + 1);
            return;
        }
        let own = self.query(from);
        let farthest = (0..FILTER_DEGREE)
            .map(|i| {
                let n = self.w.get(at + i);
                (self.squared_distance(n, own), i)
            })
            .max_by(|a, b| a.0.total_cmp(&b.0));
        if let Some((far, i)) = farthest {
            if d < far {
                self.w.set(at + i, to);
            }
        }
    }

    /// Frees the slots of all tombstones, routing around them: a node that linked to one
    /// takes instead that tombstone's live neighbour nearest to it (or loses the link when it
    /// has none). One pass over the filter links, no filter search: a cache whose entry slots
    /// run out before its objects frees slots in batches instead of evicting entry after
    /// entry until a whole filter is dropped. Returns the slots freed.
    pub fn free_tombstones(&self) -> usize {
        let entries = self.g.entries as u32;
        let doomed: FxHashSet<u32> = (0..entries)
            .filter(|&e| self.state(e) == STATE_TOMBSTONE)
            .collect();
        if doomed.is_empty() {
            return 0;
        }
        // A doomed node's links that are not doomed themselves: where its in-edges go instead.
        let detours = |t: u32| self.links(t).filter(|n| !doomed.contains(n));
        for p in (0..entries).filter(|&p| self.state(p) == STATE_REPRESENTATIVE) {
            let at = self.e(p, E_NEIGHBOURS);
            let mut degree = self.w.get(self.e(p, E_DEGREE)) as usize;
            let mut i = 0;
            while i < degree {
                let t = self.w.get(at + i);
                if !doomed.contains(&t) {
                    i += 1;
                    continue;
                }
                let own = self.query(p);
                let replacement = detours(t)
                    .filter(|&n| n != p && !(0..degree).any(|j| self.w.get(at + j) == n))
                    .map(|n| Near(self.squared_distance(n, own), n))
                    .min();
                match replacement {
                    Some(Near(_, n)) => {
                        self.w.set(at + i, n);
                        i += 1;
                    }
                    None => {
                        degree -= 1;
                        self.w.set(at + i, self.w.get(at + degree));
                        self.w.set(self.e(p, E_DEGREE), degree as u32);
                    }
                }
            }
        }
        let active = self.w.get(H_ACTIVE_EPOCH);
        for epoch in [active, active.wrapping_sub(1)] {
            let f = self.filter_words(epoch);
            if doomed.contains(&self.w.get(f)) {
                let start = (0..entries).find(|&e| {
                    self.state(e) == STATE_REPRESENTATIVE && self.w.get(self.e(e, E_EPOCH)) == epoch
                });
                self.w.set(f, start.unwrap_or(NONE));
            }
            self.w.set(f + 2, 0);
        }
        doomed.iter().for_each(|&t| self.free_entry(t));
        doomed.len()
    }

    /// The filter neighbours of `e` that are nodes of its filter.
    fn links(&self, e: u32) -> impl Iterator<Item = u32> + '_ {
        let epoch = self.w.get(self.e(e, E_EPOCH));
        let degree = (self.w.get(self.e(e, E_DEGREE)) as usize).min(FILTER_DEGREE);
        (0..degree)
            .map(move |i| self.w.get(self.e(e, E_NEIGHBOURS) + i))
            .filter(move |&n| (n as usize) < self.g.entries && self.in_filter(n, epoch))
    }

    /// Seals the active filter: the standby's live representatives are evicted (they are the
    /// oldest), its tombstones freed, and the active filter becomes the standby of a new,
    /// empty active one.
    pub fn seal_active(&self, evictions: &mut u64) {
        let active = self.w.get(H_ACTIVE_EPOCH);
        let standby = active.wrapping_sub(1);
        for e in 0..self.g.entries as u32 {
            if self.state(e) == STATE_REPRESENTATIVE && self.w.get(self.e(e, E_EPOCH)) == standby {
                self.evict(e);
                *evictions += 1;
            }
        }
        for e in 0..self.g.entries as u32 {
            if self.state(e) == STATE_TOMBSTONE && self.w.get(self.e(e, E_EPOCH)) == standby {
                self.free_entry(e);
            }
        }
        let next = active.wrapping_add(1);
        let f = self.filter_words(next);
        self.w.set(f, NONE);
        self.w.set(f + 1, 0);
        self.w.set(f + 2, 0);
        self.w.set(H_ACTIVE_EPOCH, next);
    }
}
