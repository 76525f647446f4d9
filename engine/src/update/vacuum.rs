//! Lazy deletes and their consolidation (VACUUM).
//!
//! [`Index::bulk_delete`] (`ambulkdelete`) only sets the deleted flag of vertices whose heap
//! tuples are dead: they stay traversable, so the graph keeps its paths, but searches never
//! return them, never start from them, and inserts never link to them; searches and inserts
//! widen their lists for the deleted share (NAVIS).
//!
//! NAVIS never reclaims that space. [`Index::consolidate`] (`amvacuumcleanup`, once the
//! deleted share passes a threshold) does, in the manner of FreshDiskANN's delete phase:
//! 1. one sequential pass over the edge file finds the current lists of deleted vertices and
//!    of the live vertices that point at them;
//! 2. each such live list is repaired: its deleted neighbours are replaced by their own
//!    undeleted neighbours, and RobustPrune (PQ-reconstructed vectors, no vector reads) cuts
//!    the result to the degree; repaired lists are written out of place like an insert's;
//! 3. the deleted vertices are freed: their ids (with vector slots and PQ codes) go on the
//!    free-vertex list, their edge slots are retired;
//! 4. sparse pages are compacted (`compact` module): their current lists move, unchanged, to
//!    fresh dense pages, and the emptied pages join the free-page list;
//! 5. live vertices that only deleted vertices led to (and that the repairs did not
//!    reconnect) are linked from the nearest reachable vertex a search finds for them.
//!
//! The cost is one read of the edge file for the repairs, the sweeps of step 5 (`reach`
//! module: a few reads of the edge file, one byte of memory per vertex), and writes
//! proportional to the repaired lists; the entrance-graph vertices and the medoid are kept
//! (deleted but traversable), as entry points that other backends may hold. Consolidation checks `cancel` between batches; an
//! interruption leaves a consistent index with part of the work done.

use super::alloc::release_vertex;
use super::alloc::retire_slot;
use super::locks::{StripeGuard, WriteLocks};
use super::log::IndexLog;
use super::repairs::{hand_out, RepairSink};
use super::vectors::VectorCache;
use super::write::{read_current_list, write_lists, ListChange};
use crate::index::{Index, IndexError};
use crate::search::{CasrMode, SearchCursor, SearchParams};
use crate::storage::state::{Counter, Field};
use crate::storage::HeapTid;
use crate::VertexId;
use std::collections::HashMap;

/// Vertices between cancellation checks in table scans.
const CHECK_EVERY: usize = 4096;

struct RepairScan {
    deleted_lists: HashMap<VertexId, Vec<VertexId>>,
    to_repair: Vec<VertexId>,
    /// The doomed neighbours of each list in `to_repair`.
    doomed_out: HashMap<VertexId, Vec<VertexId>>,
}

/// What [`Index::bulk_delete`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BulkDeleteReport {
    /// Published vertices examined.
    pub scanned: u64,
    /// Vertices this call marked deleted.
    pub newly_deleted: u64,
    /// Vertices carrying the flag afterwards (this call's and earlier ones).
    pub deleted: u64,
    /// Vertices a search can return afterwards.
    pub live: u64,
}

/// What [`Index::consolidate`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsolidateReport {
    pub edge_pages_read: u64,
    pub lists_repaired: u64,
    /// Repairs handed out as tasks ([`Index::consolidate_handing_out`]).
    pub repairs_deferred: u64,
    pub vertices_freed: u64,
    /// Doomed vertices kept for the next VACUUM: a list whose repair was handed out still
    /// points at them.
    pub vertices_held: u64,
    /// Lists of held vertices that pointed at vertices this consolidation freed, rewritten
    /// without them.
    pub held_lists_trimmed: u64,
    /// Deleted vertices kept as entry points.
    pub vertices_kept: u64,
    pub lists_compacted: u64,
    /// Live vertices the repairs left unreachable, linked from their nearest reachable one.
    pub orphans_linked: u64,
    /// Back-edges given again to vertices left with few in-edges (a crash lost their
    /// queued LIOS tasks), `update::back_edges`.
    pub back_edges_restored: u64,
    pub pages_written: u64,
    pub free_pages_after: u64,
}

pub(super) fn interrupted() -> IndexError {
    IndexError::Cancelled
}

impl Index {
    /// Marks every published vertex whose heap TID `is_dead` says is dead. Calls `cancel`
    /// every few thousand vertices and stops with [`IndexError::Cancelled`] when it says so
    /// (the vertices marked so far stay marked; a later VACUUM finds the rest).
    pub fn bulk_delete(
        &self,
        mut is_dead: impl FnMut(HeapTid) -> bool,
        cancel: &dyn Fn() -> bool,
    ) -> Result<BulkDeleteReport, IndexError> {
        let files = self.files();
        let table = files.indirection();
        let state = files.state();
        let log = self.log()?;
        let mut report = BulkDeleteReport::default();
        let end = (state.get(Field::NextVertex) as usize).min(table.capacity());
        // Flags are logged a batch at a time, then set: a flag a reader can see is durable.
        let mut dead: Vec<VertexId> = Vec::new();
        for first in (0..end).step_by(CHECK_EVERY) {
            if cancel() {
                return Err(interrupted());
            }
            dead.clear();
            for v in first..end.min(first + CHECK_EVERY) {
                let Some(entry) = table.entry(v as VertexId) else {
                    continue;
                };
                report.scanned += 1;
                if !entry.is_deleted() && is_dead(entry.tid) {
                    dead.push(v as VertexId);
                }
            }
            if dead.is_empty() {
                continue;
            }
            log.delete_flags(&dead)?;
            for &v in &dead {
                if !table.mark_deleted(v)? {
                    state.add(Field::Deleted, 1);
                    report.newly_deleted += 1;
                }
            }
        }
        report.deleted = self.deleted_len() as u64;
        report.live = self.live_len() as u64;
        Ok(report)
    }

    /// Repairs the lists that point at deleted vertices, frees those vertices, and compacts
    /// sparse pages (module comment). `locks` must be the index's writer locks.
    pub fn consolidate(
        &self,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
    ) -> Result<ConsolidateReport, IndexError> {
        self.consolidate_with(locks, cancel, None)
    }

    /// [`Index::consolidate`], offering each repair to `sink` first (LIOS): what it takes
    /// runs later ([`Index::run_repairs`]), and the doomed vertices those lists may lead to
    /// are freed by a later VACUUM instead of this one (`repairs` module).
    pub fn consolidate_handing_out(
        &self,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
        sink: &dyn RepairSink,
    ) -> Result<ConsolidateReport, IndexError> {
        self.consolidate_with(locks, cancel, Some(sink))
    }

    fn consolidate_with(
        &self,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
        sink: Option<&dyn RepairSink>,
    ) -> Result<ConsolidateReport, IndexError> {
        let files = self.files();
        let table = files.indirection();
        let state = files.state();
        let log = self.log()?;
        let log: &dyn IndexLog = &*log;
        let mut report = ConsolidateReport::default();
        let next_vertex = (state.get(Field::NextVertex) as usize).min(table.capacity());

        // Deleted vertices to free; entry points stay.
        let kept = self.kept_entry_points();
        let mut doomed = vec![false; next_vertex];
        for (v, mark) in doomed.iter_mut().enumerate() {
            if table.entry(v as VertexId).is_some_and(|e| e.is_deleted()) {
                if kept.contains(&(v as VertexId)) {
                    report.vertices_kept += 1;
                } else {
                    *mark = true;
                }
            }
        }
        let is_doomed = |v: VertexId| doomed.get(v as usize).copied().unwrap_or(false);

        // 1. One pass over the edge file.
        let scan = self.scan_for_repairs(&is_doomed, cancel, &mut report)?;
        let (deleted_lists, mut to_repair) = (scan.deleted_lists, scan.to_repair);

        // 2. Hand repairs out (LIOS), then repair the rest, one page of lists at a time.
        let mut held: Vec<VertexId> = Vec::new();
        if let Some(sink) = sink {
            (report.repairs_deferred, held) =
                hand_out(sink, &mut to_repair, &scan.doomed_out, &mut doomed);
            report.vertices_held = held.len() as u64;
        }
        let is_doomed = |v: VertexId| doomed.get(v as usize).copied().unwrap_or(false);
        // Held vertices stay traversable: their lists must not lead to what step 3 frees.
        report.held_lists_trimmed = self.trim_held_lists(log, locks, &held, &is_doomed, cancel)?;
        let spp = files.edge_layout().slots_per_page();
        // Repairs read no vectors: PQ reconstructions, each computed once.
        let mut vectors = VectorCache::new(self);
        let mut page_buf = vec![0u8; files.edge_layout().page_size()];
        for group in to_repair.chunks(spp) {
            if cancel() {
                return Err(interrupted());
            }
            let _stripes = StripeGuard::lock(locks, group);
            let mut changes = Vec::with_capacity(group.len());
            for &u in group {
                let Some(entry) = table.entry(u) else {
                    continue;
                };
                let current = read_current_list(files, u, entry.edge, &mut page_buf)?;
                if !current.iter().any(|&w| is_doomed(w)) {
                    continue;
                }
                let list = self.repaired_list(
                    u,
                    &current,
                    &is_doomed,
                    |w| deleted_lists.get(&w).cloned().unwrap_or_default(),
                    &mut vectors,
                );
                changes.push(ListChange {
                    vertex: u,
                    list,
                    old: Some(entry.edge),
                });
            }
            if !changes.is_empty() {
                write_lists(files, log, locks, &changes, HeapTid::default())?;
                report.pages_written += 1;
                report.lists_repaired += changes.len() as u64;
            }
        }
        state.count(Counter::ListsRepaired, report.lists_repaired);

        // 3. Free the deleted vertices: nothing current points at them any more (step 2),
        // and the free is logged before any of them can be handed out again.
        let doomed_ids: Vec<VertexId> = (0..next_vertex as VertexId)
            .filter(|&v| is_doomed(v))
            .collect();
        for batch in doomed_ids.chunks(CHECK_EVERY) {
            if cancel() {
                return Err(interrupted());
            }
            log.free_vertices(batch)?;
            for &v in batch {
                let _stripe = StripeGuard::lock(locks, &[v]);
                let Some(entry) = table.entry(v) else {
                    continue;
                };
                release_vertex(files, locks, v)?;
                retire_slot(files, locks, entry.edge.page)?;
                state.add(Field::Published, -1);
                state.add(Field::Deleted, -1);
                report.vertices_freed += 1;
            }
        }
        state.count(Counter::VerticesFreed, report.vertices_freed);

        // 4. Back-edges a crash lost (`back_edges` module), then compact sparse pages
        // (`compact` module), which also packs the pages the first wrote.
        self.restore_lost_back_edges(log, locks, cancel, &mut report)?;
        self.compact(log, locks, cancel, &mut report)?;

        // 5. Vertices whose every path from the entry points ran through deleted vertices
        // (and that the repairs did not reconnect) are linked from their nearest reachable
        // vertex, as an insert would link them.
        self.reconnect_unreachable(log, locks, cancel, &mut report)?;
        state.count(Counter::OrphansLinked, report.orphans_linked);
        state.count(Counter::ListsCompacted, report.lists_compacted);
        state.count(Counter::Consolidations, 1);
        state.set_counter(
            Counter::InsertsAtLastReconnect,
            state.counter(Counter::Inserts),
        );
        report.free_pages_after = state.get(Field::FreePageCount) as u64;
        Ok(report)
    }

    /// The current lists of doomed vertices and the live vertices whose current list points
    /// at one, from one sequential pass over the edge file.
    fn scan_for_repairs(
        &self,
        is_doomed: &dyn Fn(VertexId) -> bool,
        cancel: &dyn Fn() -> bool,
        report: &mut ConsolidateReport,
    ) -> Result<RepairScan, IndexError> {
        let mut deleted_lists = HashMap::new();
        let mut to_repair = Vec::new();
        let mut doomed_out = HashMap::new();
        self.for_each_current_list(cancel, &mut report.edge_pages_read, |owner, list, _| {
            if is_doomed(owner) {
                deleted_lists.insert(owner, list.to_vec());
            } else if list.iter().any(|&w| is_doomed(w)) {
                to_repair.push(owner);
                doomed_out.insert(
                    owner,
                    list.iter().copied().filter(|&w| is_doomed(w)).collect(),
                );
            }
        })?;
        to_repair.sort_unstable();
        Ok(RepairScan {
            deleted_lists,
            to_repair,
            doomed_out,
        })
    }

    /// Restores reachability without consolidating: the VACUUM of a table that had inserts
    /// but too few deletes to consolidate. Insert back-edge pruning can leave a vertex
    /// without any path from the entry points; this finds and links such vertices. When the
    /// edge pages in use are sparse ([`Index::edge_pages_sparse`]) it compacts them first.
    /// Skipped
    /// (returns `None`) when no insert happened since the last time.
    pub fn reconnect(
        &self,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
    ) -> Result<Option<ConsolidateReport>, IndexError> {
        let state = self.files().state();
        let inserts = state.counter(Counter::Inserts);
        if inserts == state.counter(Counter::InsertsAtLastReconnect) {
            return Ok(None);
        }
        let log = self.log()?;
        let log: &dyn IndexLog = &*log;
        let mut report = ConsolidateReport::default();
        self.restore_lost_back_edges(log, locks, cancel, &mut report)?;
        // Inserts' pages that absorption could not keep dense (`compact` module).
        if self.edge_pages_sparse() {
            self.compact(log, locks, cancel, &mut report)?;
            state.count(Counter::ListsCompacted, report.lists_compacted);
        }
        self.reconnect_unreachable(log, locks, cancel, &mut report)?;
        state.count(Counter::OrphansLinked, report.orphans_linked);
        state.set_counter(Counter::InsertsAtLastReconnect, inserts);
        report.free_pages_after = state.get(Field::FreePageCount) as u64;
        Ok(Some(report))
    }

    /// Finds the live vertices no search can reach from the entry points (sweeps over the
    /// edge pages, `reach` module) and links each from the nearest reachable vertex a search
    /// for its vector finds.
    fn reconnect_unreachable(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
        report: &mut ConsolidateReport,
    ) -> Result<(), IndexError> {
        let files = self.files();
        let mut reached = self.reachable(cancel, &mut report.edge_pages_read)?;
        let n = reached.len();
        let lost: Vec<VertexId> = (0..n as VertexId)
            .filter(|&v| !reached[v as usize] && self.is_live_undeleted(v))
            .collect();
        if lost.is_empty() {
            return Ok(());
        }
        let mut reader = self.reader()?;
        let layout = files.vector_layout();
        let mut slot = vec![0u8; layout.slot_size()];
        let mut page_buf = vec![0u8; files.edge_layout().page_size()];
        for w in lost {
            if reached[w as usize] {
                continue; // reconnected through an earlier link
            }
            if cancel() {
                return Err(interrupted());
            }
            files.read_vector_slot(w, &mut slot)?;
            let vector = layout.parse_slot(&slot)?.vector();
            let params = SearchParams {
                k: 10,
                list: self.widened_list(40),
                casr: CasrMode::Off,
                ..SearchParams::default()
            };
            let mut cursor = SearchCursor::new(&mut reader, &vector, params)?;
            let hits = cursor.next_batch(10)?;
            let mut linkers: Vec<VertexId> = hits
                .iter()
                .map(|h| h.id)
                .filter(|&x| x != w && (x as usize) < n && reached[x as usize])
                .collect();
            // No reachable live vertex near `w` (the table was deleted down to a few rows):
            // link it from where a search for it starts. Entry points are kept, deleted or
            // not, and always reached.
            if linkers.is_empty() {
                linkers.extend(
                    cursor
                        .entry_points()
                        .iter()
                        .copied()
                        .filter(|&x| x != w && (x as usize) < n && reached[x as usize]),
                );
            }
            drop(cursor);
            // Prefer a vertex whose list has room: evicting an entry could cut off another.
            let mut linked = false;
            for &x in &linkers {
                if self.link_from(log, locks, x, w, false, &mut page_buf)? {
                    linked = true;
                    break;
                }
            }
            if !linked {
                if let Some(&x) = linkers.first() {
                    linked = self.link_from(log, locks, x, w, true, &mut page_buf)?;
                }
            }
            if linked {
                report.orphans_linked += 1;
                report.pages_written += 1;
                reached[w as usize] = true;
                self.reach_further(&[w], &mut reached, cancel, &mut report.edge_pages_read)?;
            }
        }
        Ok(())
    }

    /// With [`Index::set_restore_lost_back_edges`], gives vertices left with few in-edges
    /// their back-edges again ([`Index::restore_back_edges`]).
    fn restore_lost_back_edges(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
        report: &mut ConsolidateReport,
    ) -> Result<(), IndexError> {
        if !self.restores_lost_back_edges() {
            return Ok(());
        }
        let restored = self.restore_back_edges(log, locks, cancel, &mut report.edge_pages_read)?;
        report.back_edges_restored += restored.done;
        report.pages_written += restored.pages_written;
        Ok(())
    }

    /// Adds `w` to the list of `x`; a full list is left alone unless `evict` allows
    /// replacing its last entry. Returns whether a list was written.
    fn link_from(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        x: VertexId,
        w: VertexId,
        evict: bool,
        page_buf: &mut [u8],
    ) -> Result<bool, IndexError> {
        let files = self.files();
        let _stripe = StripeGuard::lock(locks, &[x]);
        let Some(entry) = files.indirection().entry(x) else {
            return Ok(false);
        };
        let mut list = read_current_list(files, x, entry.edge, page_buf)?;
        if list.contains(&w) {
            return Ok(false);
        }
        if list.len() >= files.edge_layout().max_degree() {
            if !evict {
                return Ok(false);
            }
            list.pop();
        }
        list.push(w);
        let change = ListChange {
            vertex: x,
            list,
            old: Some(entry.edge),
        };
        write_lists(files, log, locks, &[change], HeapTid::default())?;
        Ok(true)
    }
}
