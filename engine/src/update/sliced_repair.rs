//! A repair task (a list VACUUM's consolidation handed out, RFC 0004 §1) run a slice at a time
//! inside a search's read stalls, as [`super::sliced`] runs back-edge groups.
//!
//! A whole repair reads the list, the lists of its doomed neighbours, scores a pool of up to
//! a few hundred candidates and re-prunes it: hundreds of microseconds, more than most stalls.
//! Its steps:
//!
//! 1. **Read** the list, without locks; then each doomed neighbour's list, one per step (a
//!    doomed vertex's list does not change until the VACUUM that frees it, which repairs
//!    inline whatever list still points at it first).
//! 2. **Pool**: the candidates (the list with each doomed neighbour replaced by its own list)
//!    and their distances; at most the degree of them is already the repaired list.
//! 3. **Prune** slices of [`PRUNE_SLICE`] distance computations of a [`ResumablePrune`],
//!    bit-identical to the whole repair's RobustPrune.
//! 4. **Commit** under the vertex's stripe (declined while it is taken, up to
//!    [`super::sliced::COMMIT_TRIES`] times, then waited for): the list read again; if it,
//!    or which of its neighbours are doomed, changed since the read, or a vertex the repaired
//!    list keeps was deleted or freed meanwhile, the repair is computed again here, whole, as
//!    [`Index::run_repairs`] does. Then one list written through the log.
//!
//! Nothing is shared until the commit, so a repair given up on leaves no trace and its task
//! can go back to the queue. It borrows nothing, so a backend can keep it between scans.

use super::locks::WriteLocks;
use super::repairs::RepairReport;
use super::sliced::{commit_stripes, StepKind, PRUNE_SLICE};
use super::vectors::{Deflated, VectorCache};
use super::write::{read_current_list, write_lists, ListChange};
use crate::graph::vamana::prune_metric;
use crate::graph::ResumablePrune;
use crate::index::{Index, IndexError};
use crate::storage::HeapTid;
use crate::VertexId;
use std::collections::HashSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    ReadList,
    /// The doomed neighbour lists read so far.
    ReadDoomed(usize),
    Pool,
    Prune,
    Commit,
    Done,
}

/// The repair of one vertex's list, run in slices.
pub struct SlicedRepair {
    u: VertexId,
    /// The list as the read step found it, and which of its entries were doomed then.
    current: Option<(Vec<VertexId>, Vec<bool>)>,
    /// The doomed neighbours' lists, in `current`'s order of them.
    doomed_lists: Vec<(VertexId, Vec<VertexId>)>,
    /// The deleted entry points the read step kept out of the doomed (the pool uses the
    /// same; the commit checks against the ones of its time).
    kept: HashSet<VertexId>,
    prune: Option<ResumablePrune>,
    /// The repaired list, once computed.
    repaired: Option<Vec<VertexId>>,
    commit_tries: u32,
    /// PQ reconstructions computed so far.
    deflated: Deflated,
    page_buf: Vec<u8>,
    step: Step,
}

impl SlicedRepair {
    pub fn new(index: &Index, u: VertexId) -> Self {
        SlicedRepair {
            u,
            current: None,
            doomed_lists: Vec::new(),
            kept: HashSet::new(),
            prune: None,
            repaired: None,
            commit_tries: 0,
            deflated: Deflated::default(),
            page_buf: vec![0u8; index.files().edge_layout().page_size()],
            step: Step::ReadList,
        }
    }

    /// The vertex whose list this repairs (its task, for a caller that gives up on it).
    pub fn vertex(&self) -> VertexId {
        self.u
    }

    /// Runs steps until the repair has committed (`Some`) or `may_start` declines the next
    /// step (`None`; call again to resume), as [`super::SlicedBackEdges::advance`] does. The
    /// pool is a [`StepKind::RepairPool`] step.
    pub fn advance(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        may_start: &mut dyn FnMut(StepKind) -> bool,
    ) -> Result<Option<RepairReport>, IndexError> {
        let mut deflated = std::mem::take(&mut self.deflated);
        let result = VectorCache::resuming(index, &mut deflated, |vectors| {
            self.steps(index, locks, vectors, may_start)
        });
        self.deflated = deflated;
        result
    }

    fn steps(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        vectors: &mut VectorCache<'_>,
        may_start: &mut dyn FnMut(StepKind) -> bool,
    ) -> Result<Option<RepairReport>, IndexError> {
        loop {
            let kind = match self.step {
                Step::ReadList | Step::ReadDoomed(_) => StepKind::Read,
                Step::Pool => StepKind::RepairPool,
                Step::Prune => StepKind::PruneSlice,
                Step::Commit => StepKind::Commit,
                Step::Done => return Ok(Some(RepairReport::default())),
            };
            if !may_start(kind) {
                return Ok(None);
            }
            match self.step {
                Step::ReadList => self.read_list(index),
                Step::ReadDoomed(i) => self.read_doomed(index, i),
                Step::Pool => self.pool(index, vectors),
                Step::Prune => self.prune_slice(index, vectors),
                Step::Commit => {
                    let Some(report) = self.commit(index, locks, vectors)? else {
                        return Ok(None); // the stripe was taken: a later stall tries again
                    };
                    self.step = Step::Done;
                    return Ok(Some(report));
                }
                Step::Done => unreachable!("returned above"),
            }
        }
    }

    /// The doomed neighbours of the list read, in order.
    fn doomed_in_current(&self) -> impl Iterator<Item = VertexId> + '_ {
        self.current
            .iter()
            .flat_map(|(list, doomed)| list.iter().zip(doomed).filter(|(_, &d)| d))
            .map(|(&w, _)| w)
    }

    fn read_list(&mut self, index: &Index) {
        let files = index.files();
        self.kept = index.kept_entry_points();
        let is_doomed = |w: VertexId| index.is_doomed(w, &self.kept);
        let entry = files
            .indirection()
            .entry(self.u)
            .filter(|_| !is_doomed(self.u));
        let list =
            entry.and_then(|e| read_current_list(files, self.u, e.edge, &mut self.page_buf).ok());
        // Freed, doomed, unreadable now, or nothing to repair: the commit decides.
        self.step = Step::Commit;
        if let Some(list) = list {
            let doomed: Vec<bool> = list.iter().map(|&w| is_doomed(w)).collect();
            if doomed.contains(&true) {
                self.step = Step::ReadDoomed(0);
            }
            self.current = Some((list, doomed));
        }
    }

    fn read_doomed(&mut self, index: &Index, i: usize) {
        let next = self.doomed_in_current().nth(i);
        match next {
            Some(w) => {
                let list = index.doomed_list(w, &mut self.page_buf);
                self.doomed_lists.push((w, list));
                self.step = Step::ReadDoomed(i + 1);
            }
            None => self.step = Step::Pool,
        }
    }

    fn pool(&mut self, index: &Index, vectors: &mut VectorCache<'_>) {
        let (list, _) = self.current.as_ref().expect("read before the pool");
        let is_doomed = |w: VertexId| index.is_doomed(w, &self.kept);
        let lists = &self.doomed_lists;
        let pool = index.repair_pool(self.u, list, &is_doomed, |w| {
            lists
                .iter()
                .find(|(x, _)| *x == w)
                .map(|(_, l)| l.clone())
                .unwrap_or_default()
        });
        let max_degree = index.files().edge_layout().max_degree();
        if pool.len() <= max_degree {
            self.repaired = Some(pool);
            self.step = Step::Commit;
            return;
        }
        let scored = index.score_repair_pool(self.u, &pool, vectors);
        let alpha = index.files().manifest().params.alpha;
        self.prune = Some(ResumablePrune::new(scored, alpha, max_degree));
        self.step = Step::Prune;
    }

    fn prune_slice(&mut self, index: &Index, vectors: &mut VectorCache<'_>) {
        let prune = self.prune.as_mut().expect("pool before the prune");
        let metric = prune_metric(index.metric());
        let mut budget = PRUNE_SLICE;
        if prune.advance(&mut budget, |a, b| vectors.distance(metric, a, b)) {
            self.repaired = Some(prune.result());
            self.prune = None;
            self.step = Step::Commit;
        }
    }

    fn commit(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        vectors: &mut VectorCache<'_>,
    ) -> Result<Option<RepairReport>, IndexError> {
        let Some(_stripe) = commit_stripes(locks, &[self.u], &mut self.commit_tries) else {
            return Ok(None);
        };
        let files = index.files();
        let table = files.indirection();
        let is_doomed = index.doomed_test();
        let mut report = RepairReport::default();
        let Some(entry) = table.entry(self.u).filter(|_| !is_doomed(self.u)) else {
            report.dropped = 1; // freed or deleted since: its list goes with it
            return Ok(Some(report));
        };
        let current = read_current_list(files, self.u, entry.edge, &mut self.page_buf)?;
        report.pages_read = 1;
        report.done = 1;
        let doomed: Vec<bool> = current.iter().map(|&w| is_doomed(w)).collect();
        if !doomed.contains(&true) {
            return Ok(Some(report)); // repaired meanwhile (or never needed it)
        }
        let unchanged = self.current.as_ref() == Some(&(current.clone(), doomed))
            && self.repaired.as_ref().is_some_and(|list| {
                list.iter()
                    .all(|&w| table.entry(w).is_some() && !is_doomed(w))
            });
        let list = match self.repaired.take().filter(|_| unchanged) {
            Some(list) => list,
            None => {
                let page_buf = &mut self.page_buf;
                index.repaired_list(
                    self.u,
                    &current,
                    &is_doomed,
                    |w| {
                        report.pages_read += 1;
                        index.doomed_list(w, page_buf)
                    },
                    vectors,
                )
            }
        };
        let change = ListChange {
            vertex: self.u,
            list,
            old: Some(entry.edge),
        };
        let log = index.log()?;
        write_lists(files, &*log, locks, &[change], HeapTid::default())?;
        report.pages_written = 1;
        report.lists_written = 1;
        Ok(Some(report))
    }
}
