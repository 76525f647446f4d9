//! Back-edge tasks run a slice at a time inside a search's read stalls (LIOS, RFC 0004 §2).
//!
//! A stall lasts tens of microseconds; a group of back-edge tasks costs more, most of it in
//! the re-prunes of lists that overflow. [`SlicedBackEdges`] splits a group into steps that
//! each fit a stall and checks the caller's clock between steps:
//!
//! 1. **Read**: each target vertex's current list, without locks (one edge-page read each).
//! 2. **Extend**: the list with its new back-edges, appended while the degree allows,
//!    otherwise re-pruned by a [`ResumablePrune`] that stops every [`PRUNE_SLICE`] distance
//!    computations to look at the clock and resumes where it stopped, bit-identical to an
//!    uninterrupted prune. The pool is fixed before the prune starts (the paper's candidate
//!    preparation, in one step).
//! 3. **Commit**: the group's stripes locked, each list read again and the task re-validated;
//!    an extension computed from a list that changed since (or a task whose target was
//!    deleted meanwhile) is computed again here, as [`Index::run_back_edges`] would; then the
//!    displaced vertices are handed on and the lists written to one fresh page through the
//!    log. This step is not divided: the paper's adjacency finalisation, one page write.
//!
//! Nothing is shared with other backends until the commit, so a group dropped unfinished
//! leaves no trace, and its tasks can go back to the queue ([`SlicedBackEdges::into_tasks`]).
//! A group borrows nothing: a backend keeps the one under way from one scan to the next. Unlike an inline group, a sliced one absorbs no sparse
//! pages into its page (absorption reads up to [`super::MAX_ABSORBED_PAGES`] pages, which
//! would not fit a stall); VACUUM's compaction keeps such pages from accumulating.

use super::back_edges::{BackEdge, BackEdgeReport, Extended};
use super::locks::{StripeGuard, WriteLocks};
use super::vectors::VectorCache;
use super::write::{read_current_list, write_lists, ListChange};
use crate::graph::vamana::prune_metric;
use crate::graph::ResumablePrune;
use crate::index::{Index, IndexError};
use crate::storage::HeapTid;
use crate::VertexId;
use rustc_hash::FxHashMap as HashMap;

/// Distance computations between two looks at the clock in a re-prune (about 2–6 µs of
/// 384- to 960-d distances on PQ reconstructions).
pub const PRUNE_SLICE: usize = 32;

/// One vertex whose list the group changes, and how far its change has come.
struct Target {
    u: VertexId,
    /// The vertices the group's tasks link from `u`, in task order.
    to: Vec<VertexId>,
    /// `u`'s list as the read step found it (`None`: not read yet, or unreadable then).
    current: Option<Vec<VertexId>>,
    /// The targets the extension adds (those `current` lacks, live when it was computed).
    new: Vec<VertexId>,
    /// The re-prune under way.
    prune: Option<ResumablePrune>,
    /// The extension of `current` by `new`.
    extended: Option<Extended>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read(usize),
    Extend(usize),
    Commit,
    Done,
}

/// A group of back-edge tasks whose lists fit one edge page, run in slices. It borrows
/// nothing, so that a backend can keep it from one scan to the next; every call must pass
/// the index it was made for.
pub struct SlicedBackEdges {
    tasks: Vec<BackEdge>,
    targets: Vec<Target>,
    /// PQ reconstructions computed so far.
    deflated: HashMap<VertexId, Vec<f32>>,
    page_buf: Vec<u8>,
    step: Step,
}

impl SlicedBackEdges {
    /// How many tasks one group takes at most: each may change two lists (its vertex's and,
    /// by displacement, its target's), and all of them go to one page.
    pub fn max_tasks(index: &Index) -> usize {
        (index.files().edge_layout().slots_per_page() / 2).max(1)
    }

    /// A group of `tasks` (at most [`Self::max_tasks`]; the rest are ignored: callers take
    /// no more than that).
    pub fn new(index: &Index, mut tasks: Vec<BackEdge>) -> Self {
        tasks.truncate(Self::max_tasks(index));
        let mut targets: Vec<Target> = Vec::new();
        for t in &tasks {
            match targets.iter_mut().find(|x| x.u == t.vertex) {
                Some(x) if x.to.contains(&t.to) => {}
                Some(x) => x.to.push(t.to),
                None => targets.push(Target {
                    u: t.vertex,
                    to: vec![t.to],
                    current: None,
                    new: Vec::new(),
                    prune: None,
                    extended: None,
                }),
            }
        }
        SlicedBackEdges {
            tasks,
            targets,
            deflated: HashMap::default(),
            page_buf: vec![0u8; index.files().edge_layout().page_size()],
            step: Step::Read(0),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// How many tasks the group holds.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// The group's tasks, for a caller that gives up on it before it committed (they go
    /// back to the queue); empty once committed.
    pub fn into_tasks(self) -> Vec<BackEdge> {
        if self.step == Step::Done {
            Vec::new()
        } else {
            self.tasks
        }
    }

    /// Runs steps until the group has committed (`Some`, with what it did) or `out_of_time`
    /// says to stop (`None`; call again to resume). `out_of_time` is asked between steps and
    /// every [`PRUNE_SLICE`] distances of a re-prune; the commit runs whole once reached.
    pub fn advance(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        out_of_time: &mut dyn FnMut() -> bool,
    ) -> Result<Option<BackEdgeReport>, IndexError> {
        let mut vectors = VectorCache::with_deflated(index, std::mem::take(&mut self.deflated));
        let result = self.steps(index, locks, &mut vectors, out_of_time);
        self.deflated = vectors.into_deflated();
        result
    }

    fn steps(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        vectors: &mut VectorCache<'_>,
        out_of_time: &mut dyn FnMut() -> bool,
    ) -> Result<Option<BackEdgeReport>, IndexError> {
        loop {
            match self.step {
                Step::Read(i) if i < self.targets.len() => {
                    self.read(index, i);
                    self.step = Step::Read(i + 1);
                }
                Step::Read(_) => self.step = Step::Extend(0),
                Step::Extend(i) if i < self.targets.len() => {
                    if self.extend(index, i, vectors, out_of_time) {
                        self.step = Step::Extend(i + 1);
                    } else {
                        return Ok(None);
                    }
                }
                Step::Extend(_) => self.step = Step::Commit,
                Step::Commit => {
                    let report = self.commit(index, locks, vectors)?;
                    self.step = Step::Done;
                    return Ok(Some(report));
                }
                Step::Done => return Ok(Some(BackEdgeReport::default())),
            }
            if out_of_time() {
                return Ok(None);
            }
        }
    }

    /// The read step for target `i`: its list as it is now, read without its stripe (a
    /// list that moves meanwhile shows up as a slot owned by someone else: the commit reads
    /// it then).
    fn read(&mut self, index: &Index, i: usize) {
        let files = index.files();
        let u = self.targets[i].u;
        let Some(entry) = files.indirection().entry(u) else {
            return; // freed: the commit drops its tasks
        };
        let at = entry.edge;
        if files.read_edge_page(at.page, &mut self.page_buf).is_err() {
            return;
        }
        self.targets[i].current = files
            .edge_layout()
            .slot_owned_by(&self.page_buf, at.slot as usize, u)
            .map(|s| s.to_vec());
    }

    /// The extend step for target `i`; false when `out_of_time` stopped its re-prune.
    fn extend(
        &mut self,
        index: &Index,
        i: usize,
        vectors: &mut VectorCache<'_>,
        out_of_time: &mut dyn FnMut() -> bool,
    ) -> bool {
        let max_degree = index.files().edge_layout().max_degree();
        let target = &mut self.targets[i];
        let Some(current) = target.current.as_ref() else {
            return true;
        };
        if target.prune.is_none() {
            target.new = new_targets(index, current, &target.to);
            if target.new.is_empty() {
                return true;
            }
            if current.len() + target.new.len() <= max_degree {
                target.extended =
                    Some(index.extend_list(target.u, current.clone(), &target.new, None, vectors));
                return true;
            }
            let pool = index.prune_pool(target.u, current, &target.new, vectors);
            let alpha = index.files().manifest().params.alpha;
            target.prune = Some(ResumablePrune::new(pool, alpha, max_degree));
        }
        let metric = prune_metric(index.metric());
        let prune = target.prune.as_mut().expect("started above");
        loop {
            let mut budget = PRUNE_SLICE;
            if prune.advance(&mut budget, |a, b| vectors.distance(metric, a, b)) {
                break;
            }
            if out_of_time() {
                return false;
            }
        }
        let kept = prune.result();
        target.extended = Some(index.finish_extension(current, kept));
        target.prune = None;
        true
    }

    /// The commit step: under the group's stripes, every task validated and every list read
    /// again; what changed since its extension was computed is computed again now.
    fn commit(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        vectors: &mut VectorCache<'_>,
    ) -> Result<BackEdgeReport, IndexError> {
        let files = index.files();
        let spp = files.edge_layout().slots_per_page();
        let mut report = BackEdgeReport::default();
        let mut members: Vec<VertexId> = Vec::new();
        for t in &self.tasks {
            for x in [t.vertex, t.to] {
                if !members.contains(&x) {
                    members.push(x);
                }
            }
        }
        let _stripes = StripeGuard::lock(locks, &members);
        let mut changes: Vec<ListChange> = Vec::new();
        let mut displaced_to: Vec<(VertexId, Vec<VertexId>)> = Vec::new();
        for target in &mut self.targets {
            let u = target.u;
            let Some(entry) = files.indirection().entry(u) else {
                report.dropped += target.to.len() as u64;
                continue;
            };
            // The tasks still meaningful now, as run_task_group validates them.
            let valid: Vec<VertexId> = target
                .to
                .iter()
                .copied()
                .filter(|&v| v != u && index.is_live_undeleted(v))
                .collect();
            report.dropped += (target.to.len() - valid.len()) as u64;
            let current = read_current_list(files, u, entry.edge, &mut self.page_buf)?;
            report.pages_read += 1;
            report.done += valid.len() as u64;
            let new: Vec<VertexId> = valid
                .iter()
                .copied()
                .filter(|v| !current.contains(v))
                .collect();
            if new.is_empty() {
                continue;
            }
            let precomputed = target
                .extended
                .take()
                .filter(|_| target.current.as_ref() == Some(&current) && target.new == new);
            let extended = match precomputed {
                Some(e) => e,
                None => index.extend_list(u, current, &new, None, vectors),
            };
            report.pruned += extended.pruned as u64;
            if !extended.displaced.is_empty() {
                let v = new
                    .iter()
                    .copied()
                    .find(|v| extended.list.contains(v))
                    .unwrap_or(new[0]);
                displaced_to.push((v, extended.displaced));
            }
            changes.push(ListChange {
                vertex: u,
                list: extended.list,
                old: Some(entry.edge),
            });
        }
        for (v, displaced) in displaced_to {
            index.take_displaced(v, &displaced, &mut changes, &mut self.page_buf, &mut report)?;
        }
        if changes.is_empty() {
            return Ok(report);
        }
        let log = index.log()?;
        for page in changes.chunks(spp) {
            write_lists(files, &*log, locks, page, HeapTid::default())?;
            report.pages_written += 1;
        }
        report.lists_written += changes.len() as u64;
        Ok(report)
    }
}

/// The targets in `to` that `current` lacks and that are still live (the read step's view;
/// the commit validates again).
fn new_targets(index: &Index, current: &[VertexId], to: &[VertexId]) -> Vec<VertexId> {
    to.iter()
        .copied()
        .filter(|v| !current.contains(v) && index.is_live_undeleted(*v))
        .collect()
}
