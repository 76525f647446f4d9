//! One formatted partition: slot allocation, entries, neighbour objects, admission and FIFO
//! eviction. Every method runs under the partition lock its caller holds (exclusive for
//! anything that changes the body); none takes a lock, allocates shared memory or fails
//! half-way, so an ERROR or cancel between two calls never leaves the body inconsistent.

use super::layout::*;
use super::table::{key, Table};
use super::words::Words;
use crate::storage::HeapTid;
use crate::Metric;

pub(super) struct Body<'a> {
    pub w: Words<'a>,
    pub g: Geometry,
    pub metric: Metric,
}

/// Why an entry was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The search found no rows.
    NoRows,
    /// Another backend cached the same query first.
    Duplicate,
    /// A VACUUM of the index ran during the search: its rows may name reused TIDs.
    Vacuum,
    /// Not even evicting everything makes room (the rows need more objects than the pool).
    NoSpace,
}

/// When entry slots run out, 1/64 of them are freed at once (about 1.5% of the cache).
const SLOT_BATCH_DIVISOR: usize = 64;

pub(super) fn pack_tid(tid: HeapTid) -> u64 {
    (tid.block as u64) << 16 | tid.offset as u64
}

pub(super) fn euclidean(a: &[f32], b: &[f32]) -> f32 {
    crate::kernels().l2_squared(a, b).sqrt()
}

impl<'a> Body<'a> {
    /// The body if it is formatted under `claim`.
    pub fn open(w: Words<'a>, claim: u64, metric: Metric) -> Option<Body<'a>> {
        if w.u64(H_CLAIM) != claim || w.get(H_DIM) == 0 {
            return None;
        }
        let g = Geometry::fit(w.get(H_DIM) as usize, w.0.len())?;
        (g.entries == w.get(H_ENTRIES) as usize && g.objects == w.get(H_OBJECTS) as usize)
            .then_some(Body { w, g, metric })
    }

    /// Formats `w` for an index of dimension `dim`: everything free, empty filters.
    pub fn format(w: Words<'a>, claim: u64, dim: usize, metric: Metric) -> Option<Body<'a>> {
        w.set(H_DIM, 0);
        let g = Geometry::fit(dim, w.0.len())?;
        w.fill(0, HEADER_WORDS, 0);
        w.set(H_ENTRIES, g.entries as u32);
        w.set(H_OBJECTS, g.objects as u32);
        w.set(H_LOG, g.log as u32);
        w.set(H_ACTIVE_EPOCH, 1);
        for p in 0..2 {
            w.set(H_FILTER + 3 * p, NONE);
        }
        let b = Body { w, g, metric };
        for e in 0..g.entries as u32 {
            w.set(g.entry(e) + E_STATE, STATE_FREE);
            // Stacked so that slot 0 is handed out first.
            w.set(g.free_entries_at + e as usize, g.entries as u32 - 1 - e);
        }
        for o in 0..g.objects as u32 {
            w.set(g.object(o) + O_REFS, 0);
            w.set(g.free_objects_at + o as usize, g.objects as u32 - 1 - o);
        }
        w.set(H_FREE_ENTRIES, g.entries as u32);
        w.set(H_FREE_OBJECTS, g.objects as u32);
        b.queries().clear();
        b.object_table().clear();
        w.set_u64(H_CLAIM, claim);
        w.set(H_DIM, dim as u32);
        Some(b)
    }

    pub fn queries(&self) -> Table<'a> {
        Table {
            words: self.w,
            at: self.g.query_table_at,
            slots: 2 * self.g.entries,
        }
    }

    pub fn object_table(&self) -> Table<'a> {
        Table {
            words: self.w,
            at: self.g.object_table_at,
            slots: 2 * self.g.objects,
        }
    }

    pub fn e(&self, e: u32, field: usize) -> usize {
        self.g.entry(e) + field
    }

    pub fn state(&self, e: u32) -> u32 {
        self.w.get(self.e(e, E_STATE))
    }

    /// The query vector of entry `e`, in place.
    pub fn query(&self, e: u32) -> &'a [f32] {
        self.w.floats(self.e(e, E_QUERY), self.g.dim)
    }

    /// The vector of object `o`, in place.
    pub fn object(&self, o: u32) -> &'a [f32] {
        self.w.floats(self.g.object(o) + O_VECTOR, self.g.dim)
    }

    pub fn object_tid(&self, o: u32) -> HeapTid {
        let at = self.g.object(o) + O_TID;
        HeapTid {
            block: self.w.get(at),
            offset: self.w.get(at + 1) as u16,
        }
    }

    pub fn rows(&self, e: u32) -> impl Iterator<Item = u32> + '_ {
        let at = self.e(e, E_ROWS);
        (0..self.w.get(self.e(e, E_LEN)) as usize).map(move |i| self.w.get(at + i))
    }

    /// A representative that may answer: of this redo generation, still holding k rows, and
    /// whose unchecked insert-log records have not been overwritten.
    pub fn valid(&self, e: u32, generation: u64) -> bool {
        self.state(e) == STATE_REPRESENTATIVE
            && self.w.u64(self.e(e, E_GENERATION)) == generation
            && self.w.get(self.e(e, E_LEN)) >= self.w.get(self.e(e, E_K))
            && self.w.u64(self.e(e, E_LOG_CHECKPOINT)) >= self.w.u64(H_LOG_HEAD)
    }

    /// The entry (representative or alias) cached for exactly `query`.
    pub fn find_query(&self, hash: u64, query: &[f32]) -> Option<u32> {
        self.queries().find(key(hash), |e| {
            matches!(self.state(e), STATE_REPRESENTATIVE | STATE_ALIAS)
                && self.w.floats_equal(self.e(e, E_QUERY), query)
        })
    }

    fn pop(&self, len_at: usize, stack_at: usize) -> Option<u32> {
        let len = self.w.get(len_at);
        (len > 0).then(|| {
            self.w.set(len_at, len - 1);
            self.w.get(stack_at + len as usize - 1)
        })
    }

    fn push(&self, len_at: usize, stack_at: usize, v: u32) {
        let len = self.w.get(len_at);
        self.w.set(stack_at + len as usize, v);
        self.w.set(len_at, len + 1);
    }

    pub fn free_entries(&self) -> usize {
        self.w.get(H_FREE_ENTRIES) as usize
    }

    pub fn free_objects(&self) -> usize {
        self.w.get(H_FREE_OBJECTS) as usize
    }

    pub fn alloc_entry(&self, state: u32) -> Option<u32> {
        let e = self.pop(H_FREE_ENTRIES, self.g.free_entries_at)?;
        self.w.fill(self.g.entry(e), E_ROWS, 0);
        self.w.set(self.e(e, E_STATE), state);
        self.w.set(self.e(e, E_LINK), NONE);
        self.w.set(self.e(e, E_NEXT), NONE);
        Some(e)
    }

    pub fn free_entry(&self, e: u32) {
        self.w.set(self.e(e, E_STATE), STATE_FREE);
        self.push(H_FREE_ENTRIES, self.g.free_entries_at, e);
    }

    /// The object holding row `tid`, if cached.
    pub fn find_object(&self, tid: HeapTid) -> Option<u32> {
        self.object_table()
            .find(key(pack_tid(tid)), |o| self.object_tid(o) == tid)
    }

    /// One more reference to the object of `tid`, made from `vector` if the row is not cached.
    pub fn acquire_object(&self, tid: HeapTid, vector: &[f32]) -> Option<u32> {
        let o = match self.find_object(tid) {
            Some(o) => o,
            None => {
                let o = self.pop(H_FREE_OBJECTS, self.g.free_objects_at)?;
                let at = self.g.object(o);
                self.w.set(at + O_TID, tid.block);
                self.w.set(at + O_TID + 1, tid.offset as u32);
                self.w.write_floats(at + O_VECTOR, vector);
                self.object_table().insert(key(pack_tid(tid)), o);
                self.w.set(H_OBJECTS_USED, self.w.get(H_OBJECTS_USED) + 1);
                o
            }
        };
        let refs = self.g.object(o) + O_REFS;
        self.w.set(refs, self.w.get(refs) + 1);
        Some(o)
    }

    pub fn release_object(&self, o: u32) {
        let refs = self.g.object(o) + O_REFS;
        let n = self.w.get(refs).saturating_sub(1);
        self.w.set(refs, n);
        if n == 0 {
            let tid = self.object_tid(o);
            self.object_table().remove(key(pack_tid(tid)), o);
            self.push(H_FREE_OBJECTS, self.g.free_objects_at, o);
            self.w.set(H_OBJECTS_USED, self.w.get(H_OBJECTS_USED) - 1);
        }
    }

    /// Objects the rows would take that are not cached yet.
    fn objects_needed(&self, rows: &[(HeapTid, &[f32])]) -> usize {
        rows.iter()
            .filter(|(tid, _)| self.find_object(*tid).is_none())
            .count()
    }

    /// Admits a representative for `query` holding `rows` (closest first by the index
    /// metric), evicting FIFO victims to make room.
    pub fn admit(
        &self,
        query: &[f32],
        hash: u64,
        generation: u64,
        k: usize,
        rows: &[(HeapTid, &[f32])],
        evictions: &mut u64,
    ) -> Result<u32, Refusal> {
        let rows = &rows[..rows.len().min(NRL_CAPACITY)];
        if rows.is_empty() {
            return Err(Refusal::NoRows);
        }
        if let Some(e) = self.find_query(hash, query) {
            let rep = self.representative_of(e);
            if self.valid(rep, generation) {
                return Err(Refusal::Duplicate);
            }
            self.evict(rep);
            *evictions += 1;
        }
        let mut guard = 3 * self.g.entries + 8;
        while self.free_entries() < 1 || self.free_objects() < self.objects_needed(rows) {
            guard -= 1;
            if guard == 0 {
                return Err(Refusal::NoSpace);
            }
            if self.free_entries() < 1 {
                // Out of entry slots: the tombstones give theirs up; if none holds one, a
                // batch of FIFO victims becomes tombstones first, so that the pass over the
                // filter links is paid once per batch, not once per admission.
                if self.free_tombstones() > 0 {
                    continue;
                }
                for _ in 0..(self.g.entries / SLOT_BATCH_DIVISOR).max(1) {
                    if !self.evict_oldest(evictions) {
                        break;
                    }
                }
                if self.free_tombstones() > 0 || self.free_entries() > 0 {
                    continue;
                }
                return Err(Refusal::NoSpace);
            }
            if !self.evict_oldest(evictions) {
                return Err(Refusal::NoSpace);
            }
        }
        let e = self
            .alloc_entry(STATE_REPRESENTATIVE)
            .expect("a free entry was made");
        let mut min_d = f32::INFINITY;
        for (i, (tid, v)) in rows.iter().enumerate() {
            let o = self
                .acquire_object(*tid, v)
                .expect("enough free objects were made");
            self.w.set(self.e(e, E_ROWS) + i, o);
            min_d = min_d.min(euclidean(query, v));
        }
        let k = k.clamp(1, rows.len());
        self.w.write_floats(self.e(e, E_QUERY), query);
        self.w.set(self.e(e, E_LEN), rows.len() as u32);
        self.w.set(self.e(e, E_K), k as u32);
        self.w.set(self.e(e, E_WANT), rows.len() as u32);
        self.w.set_f32(self.e(e, E_MIN_D), min_d);
        self.w.set_f32(self.e(e, E_TAU), min_d / 4.0);
        self.write_row_distances(e, query);
        self.w
            .set_u64(self.e(e, E_LOG_CHECKPOINT), self.w.u64(H_LOG_TAIL));
        self.account(e, true);
        self.w.set_u64(self.e(e, E_HASH), hash);
        self.w.set_u64(self.e(e, E_GENERATION), generation);
        self.queries().insert(key(hash), e);
        self.filter_insert(e, query);
        let tail = self.w.u64(H_FIFO_TAIL);
        self.w
            .set(self.g.fifo_at + (tail % self.g.entries as u64) as usize, e);
        self.w.set_u64(self.e(e, E_FIFO), tail);
        self.w.set_u64(H_FIFO_TAIL, tail + 1);
        self.bump(H_REPRESENTATIVES, 1);
        Ok(e)
    }

    /// Recomputes d_k and maxD (index metric) of representative `e` from its rows.
    pub fn set_row_distances(&self, e: u32, query: &[f32]) {
        self.account(e, false);
        self.write_row_distances(e, query);
        self.account(e, true);
    }

    fn write_row_distances(&self, e: u32, query: &[f32]) {
        let len = self.w.get(self.e(e, E_LEN)) as usize;
        let k = self.w.get(self.e(e, E_K)) as usize;
        let dist_of = |i: usize| {
            let o = self.w.get(self.e(e, E_ROWS) + i);
            self.metric.search_distance(query, self.object(o))
        };
        let (d_k, max_d) = if len == 0 {
            (f32::INFINITY, f32::INFINITY)
        } else {
            (dist_of(k.min(len) - 1), dist_of(len - 1))
        };
        self.w.set_f32(self.e(e, E_D_K), d_k);
        self.w.set_f32(self.e(e, E_MAX_D), max_d);
    }

    pub fn bump(&self, at: usize, by: i64) {
        self.w.set(at, (self.w.get(at) as i64 + by) as u32);
    }

    pub fn representative_of(&self, e: u32) -> u32 {
        if self.state(e) == STATE_ALIAS {
            self.w.get(self.e(e, E_LINK))
        } else {
            e
        }
    }

    /// Links an alias for `query` to representative `rep`.
    pub fn add_alias(&self, rep: u32, query: &[f32], hash: u64) -> bool {
        if self.state(rep) != STATE_REPRESENTATIVE || self.find_query(hash, query).is_some() {
            return false;
        }
        let Some(a) = self.alloc_entry(STATE_ALIAS) else {
            return false;
        };
        self.w.write_floats(self.e(a, E_QUERY), query);
        self.w.set_u64(self.e(a, E_HASH), hash);
        self.w.set(self.e(a, E_LINK), rep);
        self.w
            .set(self.e(a, E_NEXT), self.w.get(self.e(rep, E_LINK)));
        self.w.set(self.e(rep, E_LINK), a);
        self.queries().insert(key(hash), a);
        self.bump(H_ALIASES, 1);
        true
    }

    /// Evicts representative `e`: its rows' references and its aliases go, it leaves the
    /// query table and stays in its filter graph as a tombstone (routing only).
    pub fn evict(&self, e: u32) {
        if self.state(e) != STATE_REPRESENTATIVE {
            return;
        }
        self.account(e, false);
        let rows: Vec<u32> = self.rows(e).collect();
        rows.into_iter().for_each(|o| self.release_object(o));
        self.w.set(self.e(e, E_LEN), 0);
        let mut a = self.w.get(self.e(e, E_LINK));
        while a != NONE {
            let next = self.w.get(self.e(a, E_NEXT));
            self.queries().remove(key(self.w.u64(self.e(a, E_HASH))), a);
            self.free_entry(a);
            self.bump(H_ALIASES, -1);
            a = next;
        }
        self.w.set(self.e(e, E_LINK), NONE);
        self.queries().remove(key(self.w.u64(self.e(e, E_HASH))), e);
        self.w.set(self.e(e, E_STATE), STATE_TOMBSTONE);
        let f = self.filter_words(self.w.get(self.e(e, E_EPOCH)));
        self.bump(f + 1, -1);
        self.bump(f + 2, 1);
        self.bump(H_REPRESENTATIVES, -1);
    }

    /// Evicts the oldest representative (FIFO). Evictions happen in the standby filter: when
    /// the oldest entry is in the active one, the standby has no live entries left and the
    /// active filter is sealed first. False when nothing is left to evict.
    pub fn evict_oldest(&self, evictions: &mut u64) -> bool {
        loop {
            let (head, tail) = (self.w.u64(H_FIFO_HEAD), self.w.u64(H_FIFO_TAIL));
            if head == tail {
                // Only tombstones hold entries: dropping both filters frees them.
                let held = self.g.entries - self.free_entries();
                if held > 0 && self.w.get(H_REPRESENTATIVES) == 0 && self.w.get(H_ALIASES) == 0 {
                    self.seal_active(evictions);
                    self.seal_active(evictions);
                    return self.free_entries() > 0;
                }
                return false;
            }
            self.w.set_u64(H_FIFO_HEAD, head + 1);
            let e = self
                .w
                .get(self.g.fifo_at + (head % self.g.entries as u64) as usize);
            if self.state(e) != STATE_REPRESENTATIVE || self.w.u64(self.e(e, E_FIFO)) != head {
                continue; // evicted out of order (invalidated) since
            }
            if self.w.get(self.e(e, E_EPOCH)) == self.w.get(H_ACTIVE_EPOCH) {
                self.seal_active(evictions);
            }
            self.evict(e);
            *evictions += 1;
            let standby = self.filter_words(self.w.get(H_ACTIVE_EPOCH).wrapping_sub(1));
            let active = self.filter_words(self.w.get(H_ACTIVE_EPOCH));
            if self.w.get(standby + 2) > self.w.get(standby + 1) + self.w.get(active + 1) {
                self.seal_active(evictions);
            }
            return true;
        }
    }
}
