//! Back-edges: adding `u -> v` to a neighbour `u` of a newly inserted vertex `v`, either
//! inline in the insert or later, as a task (LIOS, RFC 0004 §1).
//!
//! An insert that is given a [`BackEdgeSink`] writes only its own list and its nearest
//! neighbour's back-edge before publishing (so the new row is searchable and reachable at
//! once) and offers every other back-edge to the sink. Whoever takes tasks later runs them
//! with [`Index::run_back_edges`]; so does the insert itself for back-edges the sink refused
//! (a full queue). A task re-reads `u`'s list when it runs, so tasks never depend on each
//! other or on when they were queued; one whose `u` was freed or whose `v` was deleted since
//! is dropped.
//!
//! Running tasks writes like an insert does: lists packed `slots_per_page` to a fresh page
//! (several tasks share one), the page's free slots filled by absorbing sparse pages, and a
//! vertex `z` that a re-prune pushes out of `u`'s list appended to the new vertex's list
//! (`u -> v -> z`), which means rewriting `v`'s list in the same page.

use super::compact::Absorption;
use super::locks::{StripeGuard, WriteLocks};
use super::log::IndexLog;
use super::vectors::VectorCache;
use super::write::{read_current_list, write_lists, ListChange};
use crate::graph::admit::{admit, place};
use crate::graph::prune::sort_and_dedup;
use crate::graph::vamana::prune_metric;
use crate::index::{Index, IndexError};
use crate::storage::{EdgeLocation, HeapTid};
use crate::VertexId;

/// A VACUUM that restores lost back-edges gives vertices with fewer in-edges than
/// `max_degree / RESTORE_BELOW_DEGREE_SHARE` their back-edges again
/// (`Index::restore_back_edges`). A vertex whose deferred
/// back-edges a crash lost keeps its nearest neighbour's (every insert writes it itself)
/// and the few later inserts gave it; inserts that ran their back-edges leave in-degrees
/// near the out-degree.
pub const RESTORE_BELOW_DEGREE_SHARE: usize = 4;

/// The back-edge `vertex -> to` that an insert of `to` left to be written later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackEdge {
    pub vertex: VertexId,
    pub to: VertexId,
}

/// Where an insert leaves the back-edges it does not write itself.
pub trait BackEdgeSink {
    /// Takes `edge` to be written later; `false` when there is no room (the insert then
    /// writes it itself).
    fn defer(&self, edge: BackEdge) -> bool;
}

/// What [`Index::run_back_edges`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackEdgeReport {
    /// Tasks whose edge is now in the list (written now, or found there already).
    pub done: u64,
    /// Tasks dropped: the vertex was freed, or the target deleted or freed, since.
    pub dropped: u64,
    /// Full lists the back-edges were admitted into (`graph::admit`).
    pub pruned: u64,
    pub lists_written: u64,
    pub lists_absorbed: u64,
    pub pages_written: u64,
    /// Edge pages read to take the current lists.
    pub pages_read: u64,
}

impl BackEdgeReport {
    fn add(&mut self, other: &BackEdgeReport) {
        self.done += other.done;
        self.dropped += other.dropped;
        self.pruned += other.pruned;
        self.lists_written += other.lists_written;
        self.lists_absorbed += other.lists_absorbed;
        self.pages_written += other.pages_written;
        self.pages_read += other.pages_read;
    }
}

/// `u`'s list with back-edges added, and the vertices the change pushed out of it.
pub(super) struct Extended {
    pub list: Vec<VertexId>,
    pub displaced: Vec<VertexId>,
    pub pruned: bool,
    /// False when the list holds the same neighbours as before (every new one was occluded):
    /// nothing needs writing.
    pub changed: bool,
}

impl Index {
    /// `current` (the list of `u`) with the back-edges to `new` added: appended while the
    /// degree allows; once the list is full, each remaining one is admitted into it
    /// ([`admit`]: kept unless a closer neighbour occludes it, and then pushing out the
    /// farther neighbours it occludes), with deleted vertices dropped on the way (they never
    /// enter new lists). `keep`, if it was not admitted, replaces the list's farthest entry.
    ///
    /// Admission costs one distance per neighbour where the RobustPrune of the whole list it
    /// replaced cost up to R²/2 (about 3,500 per re-prune on 384-d MiniLM, a third of an
    /// insert's CPU); on a list that is a fixed point of the prune's final round it gives
    /// the same list.
    pub(super) fn extend_list(
        &self,
        u: VertexId,
        current: Vec<VertexId>,
        new: &[VertexId],
        keep: Option<VertexId>,
        vectors: &mut VectorCache<'_>,
    ) -> Extended {
        let max_degree = self.files().edge_layout().max_degree();
        if current.len() + new.len() <= max_degree {
            let mut list = current;
            list.extend_from_slice(new);
            return Extended {
                list,
                displaced: Vec::new(),
                pruned: false,
                changed: true,
            };
        }
        let list = self.admission_pool(u, &current, vectors);
        self.admit_all(u, &current, list, new, keep, vectors)
    }

    /// `u`'s current neighbours that are live and not deleted, each with its distance from
    /// `u`, closest first: what [`Index::admit_all`] admits new neighbours into.
    pub(super) fn admission_pool(
        &self,
        u: VertexId,
        current: &[VertexId],
        vectors: &mut VectorCache<'_>,
    ) -> Vec<(VertexId, f32)> {
        let prune = prune_metric(self.metric());
        vectors.prefetch(current);
        vectors.with_table(prune, u);
        let mut list: Vec<(VertexId, f32)> = current
            .iter()
            .copied()
            .filter(|&t| t != u && self.is_live_undeleted(t))
            .map(|t| (t, vectors.distance(prune, u, t)))
            .collect();
        sort_and_dedup(&mut list);
        list
    }

    /// The second half of [`Index::extend_list`] for a full list: `new` admitted one by one
    /// into `list` (from [`Index::admission_pool`] over `current`).
    pub(super) fn admit_all(
        &self,
        u: VertexId,
        current: &[VertexId],
        mut list: Vec<(VertexId, f32)>,
        new: &[VertexId],
        keep: Option<VertexId>,
        vectors: &mut VectorCache<'_>,
    ) -> Extended {
        let max_degree = self.files().edge_layout().max_degree();
        let alpha = self.files().manifest().params.alpha;
        let prune = prune_metric(self.metric());
        let from = vectors.get(u).to_vec();
        for &t in new.iter().filter(|&&t| t != u) {
            let d_ut = vectors.distance_from(prune, &from, t);
            if d_ut.is_nan() {
                continue;
            }
            if list.len() < max_degree {
                place(&mut list, (t, d_ut)); // room left by deleted neighbours
                continue;
            }
            // `t` is compared with the members of every list it enters.
            vectors.with_table(prune, t);
            admit(&mut list, (t, d_ut), alpha, max_degree, |a, b| {
                vectors.distance(prune, a, b)
            });
        }
        let mut kept: Vec<VertexId> = list.into_iter().map(|(id, _)| id).collect();
        if let Some(k) = keep.filter(|k| !kept.contains(k)) {
            if kept.len() >= max_degree {
                kept.pop();
            }
            kept.push(k);
        }
        self.finish_extension(current, kept)
    }

    /// An extended list: `kept`, and what it pushed out of `current`.
    pub(super) fn finish_extension(&self, current: &[VertexId], kept: Vec<VertexId>) -> Extended {
        let displaced = current
            .iter()
            .copied()
            .filter(|z| !kept.contains(z))
            .collect();
        let changed = kept.len() != current.len() || kept.iter().any(|t| !current.contains(t));
        Extended {
            list: kept,
            displaced,
            pruned: true,
            changed,
        }
    }

    /// Appends to `v`'s `list` the live vertices of `displaced` it lacks, while the degree
    /// allows; returns how many.
    pub(super) fn append_displaced(
        &self,
        v: VertexId,
        list: &mut Vec<VertexId>,
        displaced: &[VertexId],
    ) -> usize {
        let max_degree = self.files().edge_layout().max_degree();
        let before = list.len();
        for &z in displaced {
            if list.len() >= max_degree {
                break;
            }
            if z != v && !list.contains(&z) && self.is_live_undeleted(z) {
                list.push(z);
            }
        }
        list.len() - before
    }

    /// Back-edges a crash lost (queued tasks are not durable, RFC 0004 §3): for every live
    /// vertex with few in-edges ([`RESTORE_BELOW_DEGREE_SHARE`]) among the current lists,
    /// `u -> v` for each out-neighbour `u` that lacks it, which is what its insert left to
    /// tasks. VACUUM's reconnect and consolidation run this first, on an index told to
    /// ([`Index::set_restore_lost_back_edges`]: PostgreSQL's VACUUM with `navis.lios = on`).
    /// Two sweeps over the edge pages (`reach` module): the in-degrees, then the lists of the
    /// vertices with few and the edges into them; memory is three bytes a vertex plus those
    /// lists, never the whole graph.
    pub(super) fn restore_back_edges(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        cancel: &dyn Fn() -> bool,
        pages_read: &mut u64,
    ) -> Result<BackEdgeReport, IndexError> {
        let n = self.id_bound();
        let few = self.files().edge_layout().max_degree() / RESTORE_BELOW_DEGREE_SHARE;
        // Saturating: only counts below `few` (at most max_degree / 2) matter.
        let mut in_degree = vec![0u16; n];
        self.for_each_current_list(cancel, pages_read, |_, list, _| {
            for &w in list {
                if let Some(d) = in_degree.get_mut(w as usize) {
                    *d = d.saturating_add(1);
                }
            }
        })?;
        let short: Vec<bool> = (0..n)
            .map(|v| (in_degree[v] as usize) < few && self.is_live_undeleted(v as VertexId))
            .collect();
        drop(in_degree);
        if !short.contains(&true) {
            return Ok(BackEdgeReport::default());
        }
        // Each short vertex has fewer than `few` in-edges, so `linked` stays small.
        let mut out_lists: Vec<(VertexId, Vec<VertexId>)> = Vec::new();
        let mut linked: rustc_hash::FxHashSet<(VertexId, VertexId)> = Default::default();
        self.for_each_current_list(cancel, pages_read, |owner, list, _| {
            for &w in list {
                if short.get(w as usize) == Some(&true) {
                    linked.insert((owner, w));
                }
            }
            if short.get(owner as usize) == Some(&true) {
                out_lists.push((owner, list.to_vec()));
            }
        })?;
        out_lists.sort_unstable_by_key(|&(v, _)| v);
        let mut tasks: Vec<BackEdge> = Vec::new();
        for (v, list) in &out_lists {
            let v = *v;
            tasks.extend(
                list.iter()
                    .copied()
                    .filter(|&u| {
                        u != v
                            && (u as usize) < n
                            && !linked.contains(&(u, v))
                            && self.is_live_undeleted(u)
                    })
                    .map(|u| BackEdge { vertex: u, to: v }),
            );
        }
        let mut report = BackEdgeReport::default();
        for chunk in tasks.chunks(256) {
            if cancel() {
                return Err(IndexError::Cancelled);
            }
            report.add(&self.run_back_edges_logged(log, locks, chunk)?);
        }
        Ok(report)
    }

    /// Runs back-edge tasks (from a queue, or ones an insert's sink refused). Consecutive
    /// tasks whose lists fit one page run together: their stripes are locked at once, each
    /// list is read as it is now, and all of them go to one fresh page in one log record.
    pub fn run_back_edges(
        &self,
        locks: &dyn WriteLocks,
        tasks: &[BackEdge],
    ) -> Result<BackEdgeReport, IndexError> {
        let log = self.log()?;
        self.run_back_edges_logged(&*log, locks, tasks)
    }

    pub(super) fn run_back_edges_logged(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        tasks: &[BackEdge],
    ) -> Result<BackEdgeReport, IndexError> {
        let spp = self.files().edge_layout().slots_per_page();
        let mut report = BackEdgeReport::default();
        let mut start = 0;
        while start < tasks.len() {
            // Every task may rewrite its vertex's list and its target's (displacement).
            let mut members: Vec<VertexId> = Vec::new();
            let mut end = start;
            while end < tasks.len() {
                let t = tasks[end];
                let mut extra: Vec<VertexId> = Vec::with_capacity(2);
                for x in [t.vertex, t.to] {
                    if !members.contains(&x) && !extra.contains(&x) {
                        extra.push(x);
                    }
                }
                if end > start && members.len() + extra.len() > spp {
                    break;
                }
                members.extend(extra);
                end += 1;
            }
            let group = self.run_task_group(log, locks, &tasks[start..end], &members)?;
            report.add(&group);
            start = end;
        }
        Ok(report)
    }

    fn run_task_group(
        &self,
        log: &dyn IndexLog,
        locks: &dyn WriteLocks,
        tasks: &[BackEdge],
        members: &[VertexId],
    ) -> Result<BackEdgeReport, IndexError> {
        let files = self.files();
        let layout = files.edge_layout();
        let spp = layout.slots_per_page();
        let mut report = BackEdgeReport::default();
        let plan = if members.len() < spp {
            self.absorption_plan(members, std::iter::empty(), spp - members.len())
                .unwrap_or_default()
        } else {
            Absorption::new()
        };
        let locked: Vec<VertexId> = members
            .iter()
            .copied()
            .chain(plan.iter().map(|&(u, _)| u))
            .collect();
        let _stripes = StripeGuard::lock(locks, &locked);

        // The targets of each vertex, in task order; tasks that lost their meaning are dropped.
        let mut targets: Vec<(VertexId, Vec<VertexId>)> = Vec::new();
        for t in tasks {
            let valid = t.vertex != t.to
                && files.indirection().entry(t.vertex).is_some()
                && self.is_live_undeleted(t.to);
            if !valid {
                report.dropped += 1;
                continue;
            }
            match targets.iter_mut().find(|(u, _)| *u == t.vertex) {
                Some((_, to)) if to.contains(&t.to) => report.done += 1,
                Some((_, to)) => to.push(t.to),
                None => targets.push((t.vertex, vec![t.to])),
            }
        }

        let mut vectors = VectorCache::new(self);
        let mut page_buf = vec![0u8; layout.page_size()];
        let mut staged = Staged::default();
        for (u, to) in targets {
            let entry = files
                .indirection()
                .entry(u)
                .expect("checked under u's stripe");
            let current = read_current_list(files, u, entry.edge, &mut page_buf)?;
            report.pages_read += 1;
            let new: Vec<VertexId> = to
                .iter()
                .copied()
                .filter(|v| !current.contains(v))
                .collect();
            report.done += to.len() as u64;
            if new.is_empty() {
                continue;
            }
            let extended = self.extend_list(u, current, &new, None, &mut vectors);
            staged.stage(u, entry.edge, &new, extended, &mut report);
        }
        let mut changes = staged.place_displaced(self, &mut page_buf, &mut report)?;
        if changes.is_empty() {
            return Ok(report);
        }
        let changed = changes.len();
        let absorbed = self.absorb(&plan, &mut changes, spp, &mut page_buf)?;
        for page in changes.chunks(spp) {
            write_lists(files, log, locks, page, HeapTid::default())?;
            report.pages_written += 1;
        }
        report.lists_written += changed as u64;
        report.lists_absorbed += absorbed as u64;
        Ok(report)
    }

    /// Appends `displaced` to `v`'s list while it has room (the list already in `changes`,
    /// or `v`'s current one, read now). The caller holds `v`'s stripe.
    pub(super) fn take_displaced(
        &self,
        v: VertexId,
        displaced: &[VertexId],
        changes: &mut Vec<ListChange>,
        page_buf: &mut [u8],
        report: &mut BackEdgeReport,
    ) -> Result<(), IndexError> {
        let files = self.files();
        if let Some(change) = changes.iter_mut().find(|c| c.vertex == v) {
            self.append_displaced(v, &mut change.list, displaced);
            return Ok(());
        }
        let Some(entry) = files.indirection().entry(v) else {
            return Ok(());
        };
        let mut list = read_current_list(files, v, entry.edge, page_buf)?;
        report.pages_read += 1;
        if self.append_displaced(v, &mut list, displaced) > 0 {
            changes.push(ListChange {
                vertex: v,
                list,
                old: Some(entry.edge),
            });
        }
        Ok(())
    }
}

/// Extended lists staged as changes under their stripes, and the vertices each one
/// displaced, by the vertex that takes them in.
#[derive(Default)]
pub(super) struct Staged {
    pub(super) changes: Vec<ListChange>,
    displaced_to: Vec<(VertexId, Vec<VertexId>)>,
}

impl Staged {
    /// Stages `u`'s extended list (its current one at `old`, with `new` added), and sends
    /// the vertices it displaced to the new vertex that took their place.
    pub(super) fn stage(
        &mut self,
        u: VertexId,
        old: EdgeLocation,
        new: &[VertexId],
        extended: Extended,
        report: &mut BackEdgeReport,
    ) {
        report.pruned += extended.pruned as u64;
        if !extended.changed {
            return;
        }
        if !extended.displaced.is_empty() {
            let v = new
                .iter()
                .copied()
                .find(|v| extended.list.contains(v))
                .unwrap_or(new[0]);
            self.displaced_to.push((v, extended.displaced));
        }
        self.changes.push(ListChange {
            vertex: u,
            list: extended.list,
            old: Some(old),
        });
    }

    /// Hands every displaced vertex on to its taker ([`Index::take_displaced`]); returns all
    /// the changes to write. The caller holds the stripes of the takers.
    pub(super) fn place_displaced(
        mut self,
        index: &Index,
        page_buf: &mut [u8],
        report: &mut BackEdgeReport,
    ) -> Result<Vec<ListChange>, IndexError> {
        for (v, displaced) in std::mem::take(&mut self.displaced_to) {
            index.take_displaced(v, &displaced, &mut self.changes, page_buf, report)?;
        }
        Ok(self.changes)
    }
}
