//! Keeping entries true while the table changes (Aker's del-consistency).
//!
//! - Deletes are eager: VACUUM hands the dead heap TIDs to [`Body::remove_dead`], which drops
//!   their objects from every entry (the reserved rows move up) and from the insert log, and
//!   evicts an entry left with fewer than k rows. Until VACUUM runs, PostgreSQL's visibility
//!   check hides a deleted row whatever the cache returns.
//! - Inserts are lazy: [`Body::record_insert`] appends the row to the insert log and runs the
//!   fast path (the row enters the nearest representative's list if it is closer than that
//!   list's farthest row); the risk model decides when the slow path checks the next
//!   representative against `SLOW_PATH_BATCH` more log records.

use super::body::Body;
use super::layout::*;
use crate::storage::HeapTid;

/// Log records one slow-path step checks (the paper's B).
pub const SLOW_PATH_BATCH: u64 = 16;
/// Risk above which an insert runs a slow-path step (the paper's τ_risk).
pub const RISK_THRESHOLD: f64 = 0.3;

/// What one recorded insert did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InsertRefresh {
    /// The row entered the nearest representative's list.
    pub fast: bool,
    /// A slow-path step ran, and how many rows it added.
    pub slow: bool,
    pub slow_rows: u32,
    /// Entries invalidated because the log overwrote records they had not checked.
    pub log_wrapped: u32,
}

impl Body<'_> {
    /// Puts row `o`'s neighbour (`tid`, `vector`, index-metric distance `d` to `e`'s query)
    /// into `e`'s list in distance order, dropping the farthest row when the list is full.
    /// False when it is already there, not close enough, or no object is free.
    fn insert_row(&self, e: u32, query: &[f32], tid: HeapTid, vector: &[f32], d: f32) -> bool {
        let len = self.w.get(self.e(e, E_LEN)) as usize;
        let want = self.w.get(self.e(e, E_WANT)) as usize;
        if len >= want && d >= self.w.f32(self.e(e, E_MAX_D)) {
            return false;
        }
        if let Some(o) = self.find_object(tid) {
            if self.rows(e).any(|r| r == o) {
                return false;
            }
        }
        let Some(o) = self.acquire_object(tid, vector) else {
            return false;
        };
        let mut rows: Vec<u32> = self.rows(e).collect();
        let pos = rows
            .iter()
            .position(|&r| self.metric.search_distance(query, self.object(r)) > d)
            .unwrap_or(rows.len());
        rows.insert(pos, o);
        if rows.len() > want {
            let dropped = rows.pop().expect("longer than want >= 1");
            self.release_object(dropped);
        }
        self.write_rows(e, &rows);
        self.w.set_f32(
            self.e(e, E_MIN_D),
            self.w
                .f32(self.e(e, E_MIN_D))
                .min(super::body::euclidean(query, vector)),
        );
        self.set_row_distances(e, query);
        true
    }

    fn write_rows(&self, e: u32, rows: &[u32]) {
        for (i, o) in rows.iter().enumerate() {
            self.w.set(self.e(e, E_ROWS) + i, *o);
        }
        self.w.set(self.e(e, E_LEN), rows.len() as u32);
    }

    /// Entry `e`'s share of the risk sums: r(e) = d_k / d_(k+Δ) in 1/65536ths (1 when the
    /// two coincide or are not positive distances), and its log checkpoint.
    fn risk_terms(&self, e: u32) -> (u64, u64) {
        let (d_k, max_d) = (self.w.f32(self.e(e, E_D_K)), self.w.f32(self.e(e, E_MAX_D)));
        let ratio = if d_k > 0.0 && max_d > 0.0 {
            (d_k / max_d).min(1.0)
        } else {
            1.0
        };
        (
            (ratio * 65536.0) as u64,
            self.w.u64(self.e(e, E_LOG_CHECKPOINT)),
        )
    }

    /// Adds (`add`) or removes representative `e`'s terms to or from the risk sums: called
    /// with `false` before any of them changes and with `true` after.
    pub(super) fn account(&self, e: u32, add: bool) {
        if self.state(e) != STATE_REPRESENTATIVE {
            return;
        }
        let (ratio, checkpoint) = self.risk_terms(e);
        let (r, c) = (self.w.u64(H_RATIO_SUM), self.w.u64(H_CHECKPOINT_SUM));
        if add {
            self.w.set_u64(H_RATIO_SUM, r + ratio);
            self.w.set_u64(H_CHECKPOINT_SUM, c + checkpoint);
        } else {
            self.w.set_u64(H_RATIO_SUM, r - ratio);
            self.w.set_u64(H_CHECKPOINT_SUM, c - checkpoint);
        }
    }

    /// The sums `account` keeps, recomputed from every representative (for tests).
    #[cfg(test)]
    pub(super) fn risk_sums_by_scan(&self) -> (u64, u64) {
        (0..self.g.entries as u32)
            .filter(|&e| self.state(e) == STATE_REPRESENTATIVE)
            .map(|e| self.risk_terms(e))
            .fold((0, 0), |(r, c), (a, b)| (r + a, c + b))
    }

    pub(super) fn risk_sums(&self) -> (u64, u64) {
        (self.w.u64(H_RATIO_SUM), self.w.u64(H_CHECKPOINT_SUM))
    }

    /// The paper's risk R = r̄ · Ū / W: r̄ the mean d_k / d_(k+Δ) of the representatives, Ū
    /// the mean number of log records a representative has not checked, W the log's length.
    /// O(1): every representative's checkpoint lies in [head, tail] (the log-wrap check evicts
    /// the others before this runs), so Ū = tail − mean checkpoint.
    pub fn risk(&self) -> f64 {
        let (head, tail) = (self.w.u64(H_LOG_HEAD), self.w.u64(H_LOG_TAIL));
        let log_len = tail - head;
        let reps = self.w.get(H_REPRESENTATIVES) as u64;
        if log_len == 0 || reps == 0 {
            return 0.0;
        }
        let (ratio_sum, checkpoint_sum) = self.risk_sums();
        let unchecked = (reps * tail).saturating_sub(checkpoint_sum);
        (ratio_sum as f64 / 65536.0 / reps as f64) * (unchecked as f64 / reps as f64)
            / log_len as f64
    }

    /// Appends an inserted row to the log and runs the fast path and, when the risk says so,
    /// one slow-path step. `vector` is as the index stores it (unit length for cosine).
    pub fn record_insert(
        &self,
        tid: HeapTid,
        vector: &[f32],
        evictions: &mut u64,
    ) -> InsertRefresh {
        let mut out = InsertRefresh::default();
        let (head, tail) = (self.w.u64(H_LOG_HEAD), self.w.u64(H_LOG_TAIL));
        if tail - head == self.g.log as u64 {
            self.w.set_u64(H_LOG_HEAD, head + 1);
        }
        let at = self.g.log_record(tail);
        self.w.set(at + L_TID, tid.block);
        self.w.set(at + L_TID + 1, tid.offset as u32);
        self.w.write_floats(at + L_VECTOR, vector);
        self.w.set_u64(H_LOG_TAIL, tail + 1);
        out.log_wrapped = self.evict_unrefreshable(evictions);

        if let Some((e, _)) = self.nearest_representative(vector) {
            let query = self.query(e);
            let d = self.metric.search_distance(query, vector);
            out.fast = self.insert_row(e, query, tid, vector, d);
        }
        if self.risk() >= RISK_THRESHOLD {
            if let Some(added) = self.slow_path_step() {
                out.slow = true;
                out.slow_rows = added;
            }
        }
        out
    }

    /// Evicts representatives whose unchecked log records were overwritten: they could miss
    /// inserted rows for ever, so they stop answering (never stale without bound).
    /// Scans only when the log's head has passed the checkpoint floor, and each scan evicts
    /// at least the entry that set the floor, so the inserts pay O(entries) at most once per
    /// eviction, not once per insert.
    fn evict_unrefreshable(&self, evictions: &mut u64) -> u32 {
        let head = self.w.u64(H_LOG_HEAD);
        if head <= self.w.u64(H_CHECKPOINT_FLOOR) {
            return 0;
        }
        let (mut n, mut floor) = (0, self.w.u64(H_LOG_TAIL));
        for e in 0..self.g.entries as u32 {
            if self.state(e) != STATE_REPRESENTATIVE {
                continue;
            }
            let checkpoint = self.w.u64(self.e(e, E_LOG_CHECKPOINT));
            if checkpoint < head {
                self.evict(e);
                *evictions += 1;
                n += 1;
            } else {
                floor = floor.min(checkpoint);
            }
        }
        self.w.set_u64(H_CHECKPOINT_FLOOR, floor);
        n
    }

    /// Checks the next representative (round robin) against up to `SLOW_PATH_BATCH` log
    /// records past its checkpoint. The rows it added, or `None` with no representative.
    pub fn slow_path_step(&self) -> Option<u32> {
        let entries = self.g.entries as u32;
        let start = self.w.get(H_ROUND_ROBIN) % entries;
        let e = (0..entries)
            .map(|i| (start + i) % entries)
            .find(|&e| self.state(e) == STATE_REPRESENTATIVE)?;
        self.w.set(H_ROUND_ROBIN, (e + 1) % entries);
        let (head, tail) = (self.w.u64(H_LOG_HEAD), self.w.u64(H_LOG_TAIL));
        let from = self.w.u64(self.e(e, E_LOG_CHECKPOINT)).max(head);
        let to = (from + SLOW_PATH_BATCH).min(tail);
        let query = self.query(e);
        let mut added = 0;
        for seq in from..to {
            let at = self.g.log_record(seq);
            let block = self.w.get(at + L_TID);
            if block == NONE {
                continue; // removed by VACUUM
            }
            let tid = HeapTid {
                block,
                offset: self.w.get(at + L_TID + 1) as u16,
            };
            let vector = self.w.floats(at + L_VECTOR, self.g.dim);
            let d = self.metric.search_distance(query, vector);
            if self.insert_row(e, query, tid, vector, d) {
                added += 1;
            }
        }
        self.account(e, false);
        self.w.set_u64(self.e(e, E_LOG_CHECKPOINT), to);
        self.account(e, true);
        Some(added)
    }

    /// Removes every cached row `is_dead` says VACUUM is removing: from the objects, from the
    /// entries (reserved rows move up; an entry left with fewer than k rows is evicted) and
    /// from the insert log. Returns (objects removed, entries evicted).
    pub fn remove_dead(
        &self,
        is_dead: &mut dyn FnMut(HeapTid) -> bool,
        evictions: &mut u64,
    ) -> (u64, u64) {
        let mut dead = vec![false; self.g.objects];
        let mut any = false;
        for o in 0..self.g.objects as u32 {
            let refs = self.w.get(self.g.object(o) + O_REFS);
            if refs > 0 && is_dead(self.object_tid(o)) {
                dead[o as usize] = true;
                any = true;
            }
        }
        let (head, tail) = (self.w.u64(H_LOG_HEAD), self.w.u64(H_LOG_TAIL));
        for seq in head..tail {
            let at = self.g.log_record(seq);
            let block = self.w.get(at + L_TID);
            if block != NONE
                && is_dead(HeapTid {
                    block,
                    offset: self.w.get(at + L_TID + 1) as u16,
                })
            {
                self.w.set(at + L_TID, NONE);
            }
        }
        if !any {
            return (0, 0);
        }
        let (mut removed, mut evicted) = (0u64, 0u64);
        for e in 0..self.g.entries as u32 {
            if self.state(e) != STATE_REPRESENTATIVE {
                continue;
            }
            let rows: Vec<u32> = self.rows(e).collect();
            if !rows.iter().any(|&o| dead[o as usize]) {
                continue;
            }
            let kept: Vec<u32> = rows
                .iter()
                .copied()
                .filter(|&o| !dead[o as usize])
                .collect();
            for &o in rows.iter().filter(|&&o| dead[o as usize]) {
                self.release_object(o);
                removed += 1;
            }
            self.write_rows(e, &kept);
            if kept.len() < self.w.get(self.e(e, E_K)) as usize {
                self.evict(e);
                *evictions += 1;
                evicted += 1;
            } else {
                self.set_row_distances(e, self.query(e));
            }
        }
        (removed, evicted)
    }
}
