//! Repairs of lists that point at deleted vertices: inline in VACUUM's consolidation, or
//! handed out by it as tasks (LIOS, RFC 0004 §1) that searches, the background worker or the
//! next VACUUM run.
//!
//! A repair replaces `u`'s doomed neighbours (deleted, and not kept as entry points) by their
//! own neighbours that are not doomed, and RobustPrune (PQ reconstructions) cuts the result to
//! the degree. A consolidation that hands repairs out keeps the doomed vertices a handed-out
//! list still points at, and drops from their own lists the doomed vertices it frees, so that
//! no list points at a freed vertex; the next VACUUM runs what is still queued, then frees
//! them. (Keeping instead every doomed vertex a kept one leads to would keep nearly all of
//! them: deleted rows' vertices link to each other.)

use super::locks::{StripeGuard, WriteLocks};
use super::log::IndexLog;
use super::vectors::VectorCache;
use super::write::{read_current_list, write_lists, ListChange};
use crate::graph::prune::robust_prune;
use crate::graph::vamana::prune_metric;
use crate::index::{Index, IndexError};
use crate::storage::HeapTid;
use crate::VertexId;
use std::collections::{HashMap, HashSet};

/// Where a consolidation leaves the repairs it does not run itself.
pub trait RepairSink {
    /// Takes the repair of `vertex`'s list; `false` when there is no room (VACUUM runs it).
    fn defer(&self, vertex: VertexId) -> bool;
}

/// Offers each list of `to_repair` to `sink`, keeps in `to_repair` the ones it refused, and
/// takes out of `doomed` (to free later) every doomed vertex a handed-out list points at
/// (`doomed_out`). Returns the repairs handed out and the vertices held, sorted.
pub(super) fn hand_out(
    sink: &dyn RepairSink,
    to_repair: &mut Vec<VertexId>,
    doomed_out: &HashMap<VertexId, Vec<VertexId>>,
    doomed: &mut [bool],
) -> (u64, Vec<VertexId>) {
    let mut held: Vec<VertexId> = Vec::new();
    let mut deferred = 0u64;
    to_repair.retain(|&u| {
        let taken = sink.defer(u);
        if taken {
            deferred += 1;
            for &w in doomed_out.get(&u).into_iter().flatten() {
                if std::mem::replace(&mut doomed[w as usize], false) {
                    held.push(w);
                }
            }
        }
        !taken
    });
    held.sort_unstable();
    (deferred, held)
}

/// What [`Index::run_repairs`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// Lists that no longer point at a doomed vertex (repaired now, or found so).
    pub done: u64,
    /// Tasks whose vertex was freed or deleted since (its list goes with it).
    pub dropped: u64,
    pub lists_written: u64,
    pub pages_written: u64,
    pub pages_read: u64,
}

impl Index {
    /// Deleted vertices that stay as entry points (the entrance graph's, the medoid):
    /// consolidation neither frees them nor repairs lists for them.
    pub(super) fn kept_entry_points(&self) -> HashSet<VertexId> {
        let mut kept: HashSet<VertexId> = self.entrance().ids().iter().copied().collect();
        kept.insert(self.files().manifest().medoid);
        kept
    }

    /// Whether a vertex is doomed: deleted and not kept as an entry point (the test
    /// [`Index::run_repairs`] applies, with the entry points as they are now).
    pub(super) fn doomed_test(&self) -> impl Fn(VertexId) -> bool + '_ {
        let kept = self.kept_entry_points();
        move |w| self.is_doomed(w, &kept)
    }

    /// Whether `w` is deleted and not among `kept` ([`Self::kept_entry_points`]).
    pub(super) fn is_doomed(&self, w: VertexId, kept: &HashSet<VertexId>) -> bool {
        self.files()
            .indirection()
            .entry(w)
            .is_some_and(|e| e.is_deleted())
            && !kept.contains(&w)
    }

    /// `u`'s list `current` with its doomed neighbours replaced by their own lists
    /// (`list_of`), doomed and freed vertices left out, pruned to the degree.
    pub(super) fn repaired_list(
        &self,
        u: VertexId,
        current: &[VertexId],
        is_doomed: &dyn Fn(VertexId) -> bool,
        list_of: impl FnMut(VertexId) -> Vec<VertexId>,
        vectors: &mut VectorCache<'_>,
    ) -> Vec<VertexId> {
        let pool = self.repair_pool(u, current, is_doomed, list_of);
        if pool.len() <= self.files().edge_layout().max_degree() {
            return pool;
        }
        let max_degree = self.files().edge_layout().max_degree();
        let alpha = self.files().manifest().params.alpha;
        let prune = prune_metric(self.metric());
        let mut scored = self.score_repair_pool(u, &pool, vectors);
        robust_prune(&mut scored, alpha, max_degree, |a, b| {
            vectors.distance(prune, a, b)
        })
    }

    /// The candidates of `u`'s repaired list: `current` with each doomed neighbour replaced
    /// by its own list (`list_of`), without `u`, doomed or freed vertices, sorted, once each.
    /// At most the degree: the repaired list itself; more: what RobustPrune cuts down.
    pub(super) fn repair_pool(
        &self,
        u: VertexId,
        current: &[VertexId],
        is_doomed: &dyn Fn(VertexId) -> bool,
        mut list_of: impl FnMut(VertexId) -> Vec<VertexId>,
    ) -> Vec<VertexId> {
        let table = self.files().indirection();
        let mut pool: Vec<VertexId> = Vec::new();
        for &w in current {
            if is_doomed(w) {
                pool.extend(list_of(w));
            } else {
                pool.push(w);
            }
        }
        pool.retain(|&w| w != u && !is_doomed(w) && table.entry(w).is_some());
        pool.sort_unstable();
        pool.dedup();
        pool
    }

    /// `pool` with each candidate's distance from `u`, for RobustPrune.
    pub(super) fn score_repair_pool(
        &self,
        u: VertexId,
        pool: &[VertexId],
        vectors: &mut VectorCache<'_>,
    ) -> Vec<(VertexId, f32)> {
        let prune = prune_metric(self.metric());
        pool.iter()
            .map(|&w| (w, vectors.distance(prune, u, w)))
            .collect()
    }

    /// Drops from the lists of `held` (doomed vertices kept for a later VACUUM, still
    /// traversable) the vertices `is_doomed` says this VACUUM frees; returns the lists
    /// written. Their other entries stay: a repair reads them to replace the held vertex.
    pub(super) fn trim_held_lists(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        held: &[VertexId],
        is_doomed: &dyn Fn(VertexId) -> bool,
        cancel: &dyn Fn() -> bool,
    ) -> Result<u64, IndexError> {
        let files = self.files();
        let table = files.indirection();
        let mut page_buf = vec![0u8; files.edge_layout().page_size()];
        let mut written = 0u64;
        for group in held.chunks(files.edge_layout().slots_per_page()) {
            if cancel() {
                return Err(IndexError::Cancelled);
            }
            let _stripes = StripeGuard::lock(locks, group);
            let mut changes: Vec<ListChange> = Vec::new();
            for &w in group {
                let Some(entry) = table.entry(w) else {
                    continue;
                };
                let current = read_current_list(files, w, entry.edge, &mut page_buf)?;
                if current.iter().any(|&x| is_doomed(x)) {
                    changes.push(ListChange {
                        vertex: w,
                        list: current.into_iter().filter(|&x| !is_doomed(x)).collect(),
                        old: Some(entry.edge),
                    });
                }
            }
            if !changes.is_empty() {
                write_lists(files, log, locks, &changes, HeapTid::default())?;
                written += changes.len() as u64;
            }
        }
        Ok(written)
    }

    /// Runs repair tasks (from a queue): each vertex's list is read as it is now and, if it
    /// still points at doomed vertices, repaired; the lists of one page's worth of vertices
    /// are written together, in one log record.
    pub fn run_repairs(
        &self,
        locks: &dyn WriteLocks,
        vertices: &[VertexId],
    ) -> Result<RepairReport, IndexError> {
        let files = self.files();
        let table = files.indirection();
        let log = self.log()?;
        let is_doomed = self.doomed_test();
        let spp = files.edge_layout().slots_per_page();
        let mut vectors = VectorCache::new(self);
        let mut page_buf = vec![0u8; files.edge_layout().page_size()];
        let mut doomed_buf = vec![0u8; files.edge_layout().page_size()];
        let mut report = RepairReport::default();
        let mut sorted: Vec<VertexId> = vertices.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        for group in sorted.chunks(spp) {
            let _stripes = StripeGuard::lock(locks, group);
            let mut changes: Vec<ListChange> = Vec::new();
            for &u in group {
                // (a deleted vertex kept as an entry point is still traversed: repaired too)
                let Some(entry) = table.entry(u).filter(|_| !is_doomed(u)) else {
                    report.dropped += 1;
                    continue;
                };
                let current = read_current_list(files, u, entry.edge, &mut page_buf)?;
                report.pages_read += 1;
                report.done += 1;
                if !current.iter().any(|&w| is_doomed(w)) {
                    continue;
                }
                let mut reads = 0u64;
                let list = self.repaired_list(
                    u,
                    &current,
                    &is_doomed,
                    |w| {
                        reads += 1;
                        self.doomed_list(w, &mut doomed_buf)
                    },
                    &mut vectors,
                );
                report.pages_read += reads;
                changes.push(ListChange {
                    vertex: u,
                    list,
                    old: Some(entry.edge),
                });
            }
            if !changes.is_empty() {
                write_lists(files, &*log, locks, &changes, HeapTid::default())?;
                report.pages_written += 1;
                report.lists_written += changes.len() as u64;
            }
        }
        Ok(report)
    }

    /// The list of the doomed vertex `w`, read without its stripe: nothing changes a doomed
    /// vertex's list but a compaction moving it (until the VACUUM that frees it, which runs
    /// the queued repairs first), so a read that finds the slot moved reads again. Empty if
    /// it keeps moving or `w` is gone: the repair then only drops `w`.
    pub(super) fn doomed_list(&self, w: VertexId, buf: &mut [u8]) -> Vec<VertexId> {
        let files = self.files();
        for _ in 0..3 {
            let Some(entry) = files.indirection().entry(w) else {
                return Vec::new();
            };
            if let Ok(list) = read_current_list(files, w, entry.edge, buf) {
                return list;
            }
        }
        Vec::new()
    }
}
