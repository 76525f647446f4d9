//! Back-edge tasks run a slice at a time inside a search's read stalls (LIOS, RFC 0004 §2).
//!
//! A stall lasts tens of microseconds; a group of back-edge tasks costs more, most of it in
//! the re-prunes of lists that overflow. [`SlicedBackEdges`] splits a group into steps that
//! each fit a stall and asks the caller before each step whether to start it:
//!
//! 1. **Read**: each target vertex's current list, without locks (one edge-page read each).
//! 2. **Extend**: the list with its new back-edges, appended while the degree allows,
//!    otherwise in two steps: the list's distances from its vertex (the paper's candidate
//!    preparation), then the admission of the new back-edges (`graph::admit`, one distance
//!    per neighbour each), the same computation as an inline insert's.
//! 3. **Commit**: the group's stripes taken (if one is busy, a later stall tries again: a
//!    search does not wait for a writer, up to [`COMMIT_TRIES`] tries), each list read again
//!    and the task re-validated;
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

use super::back_edges::{BackEdge, BackEdgeReport, Extended, Staged};
use super::locks::{StripeGuard, WriteLocks};
use super::vectors::{Deflated, VectorCache};
use super::write::{read_current_list, write_lists};
use crate::index::{Index, IndexError};
use crate::storage::HeapTid;
use crate::VertexId;

/// Distance computations in one slice of a repair's re-prune (about 2–6 µs of 384- to
/// 960-d distances on PQ reconstructions).
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
    /// `current`'s live neighbours with their distances from `u`, closest first, once the
    /// pool step computed them for a list that has no room.
    pool: Option<Vec<(VertexId, f32)>>,
    /// The extension of `current` by `new`.
    extended: Option<Extended>,
}

/// Commits tried without waiting, each in its own stall, before one waits for the stripes
/// (a writer holds a stripe for one list write; a group must not starve behind a busy one).
pub const COMMIT_TRIES: u32 = 8;

/// The kinds of step a group runs, for callers that time them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// One list read (usually from NAVIS-Cache).
    Read,
    /// A list with room takes its new back-edges.
    Append,
    /// A full list's distances from its vertex: a PQ reconstruction and a distance per
    /// neighbour.
    Pool,
    /// [`PRUNE_SLICE`] distance computations of a repair's re-prune.
    PruneSlice,
    /// Locks, reads again, writes one page through the log.
    Commit,
    /// A repair's candidate pool ([`super::SlicedRepair`]): its doomed neighbours' lists
    /// merged, a PQ reconstruction and a distance per candidate (often a few hundred).
    RepairPool,
    /// A full list's new back-edges admitted (`graph::admit`): at most a distance per
    /// neighbour for each.
    Admit,
}

impl StepKind {
    pub const ALL: [StepKind; 7] = [
        StepKind::Read,
        StepKind::Append,
        StepKind::Pool,
        StepKind::PruneSlice,
        StepKind::Commit,
        StepKind::RepairPool,
        StepKind::Admit,
    ];

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The stripes of `members` for a commit step: taken only if all are free while `tries`
/// (counted here) stays under [`COMMIT_TRIES`], waited for after that; `None` when one is
/// taken (a later stall tries again).
pub(super) fn commit_stripes<'a>(
    locks: &'a dyn WriteLocks,
    members: &[VertexId],
    tries: &mut u32,
) -> Option<StripeGuard<'a>> {
    *tries += 1;
    match StripeGuard::try_lock(locks, members) {
        Some(stripes) => Some(stripes),
        None if *tries < COMMIT_TRIES => None,
        None => Some(StripeGuard::lock(locks, members)),
    }
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
    /// Tasks that repeat an earlier one of the group (done when that one is).
    repeats: u64,
    /// Times the commit step was tried.
    commit_tries: u32,
    /// PQ reconstructions computed so far.
    deflated: Deflated,
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
        let mut repeats = 0;
        for t in &tasks {
            match targets.iter_mut().find(|x| x.u == t.vertex) {
                Some(x) if x.to.contains(&t.to) => repeats += 1,
                Some(x) => x.to.push(t.to),
                None => targets.push(Target {
                    u: t.vertex,
                    to: vec![t.to],
                    current: None,
                    new: Vec::new(),
                    pool: None,
                    extended: None,
                }),
            }
        }
        SlicedBackEdges {
            tasks,
            targets,
            repeats,
            commit_tries: 0,
            deflated: Deflated::default(),
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

    /// Runs steps until the group has committed (`Some`, with what it did) or `may_start`
    /// declines the next step (`None`; call again to resume). `may_start` is asked before
    /// every step with the step's kind (so that a caller can time the steps and start only
    /// what it expects to fit); a full list's extension is a [`StepKind::Pool`] step and
    /// then a [`StepKind::Admit`] step.
    pub fn advance(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        may_start: &mut dyn FnMut(StepKind) -> bool,
    ) -> Result<Option<BackEdgeReport>, IndexError> {
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
    ) -> Result<Option<BackEdgeReport>, IndexError> {
        loop {
            let kind = match self.step {
                Step::Read(i) if i < self.targets.len() => StepKind::Read,
                Step::Read(_) => {
                    self.step = Step::Extend(0);
                    continue;
                }
                Step::Extend(i) if i < self.targets.len() => match self.extend_kind(index, i) {
                    Some(kind) => kind,
                    None => {
                        self.step = Step::Extend(i + 1);
                        continue;
                    }
                },
                Step::Extend(_) => {
                    self.step = Step::Commit;
                    continue;
                }
                Step::Commit => StepKind::Commit,
                Step::Done => return Ok(Some(BackEdgeReport::default())),
            };
            if !may_start(kind) {
                return Ok(None);
            }
            match self.step {
                Step::Read(i) => {
                    self.read(index, i);
                    self.step = Step::Read(i + 1);
                }
                Step::Extend(i) => {
                    if self.extend(index, i, vectors) {
                        self.step = Step::Extend(i + 1);
                    }
                }
                Step::Commit => {
                    let Some(report) = self.commit(index, locks, vectors)? else {
                        return Ok(None); // a stripe was taken: a later stall tries again
                    };
                    self.step = Step::Done;
                    return Ok(Some(report));
                }
                Step::Done => unreachable!("returned above"),
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
        if let Some(current) = &self.targets[i].current {
            self.targets[i].new = new_targets(index, current, &self.targets[i].to);
        }
    }

    /// What the next extend step of target `i` is; `None` when it has nothing to do (its
    /// list was unreadable, the commit extends it, or it lacks no target).
    fn extend_kind(&self, index: &Index, i: usize) -> Option<StepKind> {
        let target = &self.targets[i];
        let current = target.current.as_ref()?;
        if target.extended.is_some() || target.new.is_empty() {
            return None;
        }
        Some(if target.pool.is_some() {
            StepKind::Admit
        } else if current.len() + target.new.len() <= index.files().edge_layout().max_degree() {
            StepKind::Append
        } else {
            StepKind::Pool
        })
    }

    /// One extend step of target `i`: the append, the full list's pool, or the admission
    /// into it; true when the target's extension is computed. Together the steps compute
    /// what [`Index::extend_list`] does in one call.
    fn extend(&mut self, index: &Index, i: usize, vectors: &mut VectorCache<'_>) -> bool {
        let max_degree = index.files().edge_layout().max_degree();
        let target = &mut self.targets[i];
        let current = target.current.as_ref().expect("extend_kind checked");
        let Some(pool) = target.pool.take() else {
            if current.len() + target.new.len() <= max_degree {
                target.extended =
                    Some(index.extend_list(target.u, current.clone(), &target.new, None, vectors));
                return true;
            }
            target.pool = Some(index.admission_pool(target.u, current, vectors));
            return false;
        };
        let extended = index.admit_all(target.u, current, pool, &target.new, None, vectors);
        target.extended = Some(extended);
        true
    }

    /// The commit step: under the group's stripes, every task validated and every list read
    /// again; what changed since its extension was computed is computed again now. `None`
    /// when a stripe is taken: a search does not wait for a writer, and tries again in a
    /// later stall, up to [`COMMIT_TRIES`] times before it waits.
    fn commit(
        &mut self,
        index: &Index,
        locks: &dyn WriteLocks,
        vectors: &mut VectorCache<'_>,
    ) -> Result<Option<BackEdgeReport>, IndexError> {
        let files = index.files();
        let spp = files.edge_layout().slots_per_page();
        let mut report = BackEdgeReport {
            done: self.repeats,
            ..BackEdgeReport::default()
        };
        let mut members: Vec<VertexId> = Vec::new();
        for t in &self.tasks {
            for x in [t.vertex, t.to] {
                if !members.contains(&x) {
                    members.push(x);
                }
            }
        }
        let Some(_stripes) = commit_stripes(locks, &members, &mut self.commit_tries) else {
            return Ok(None);
        };
        let mut staged = Staged::default();
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
            staged.stage(u, entry.edge, &new, extended, &mut report);
        }
        let changes = staged.place_displaced(index, &mut self.page_buf, &mut report)?;
        if changes.is_empty() {
            return Ok(Some(report));
        }
        let log = index.log()?;
        for page in changes.chunks(spp) {
            write_lists(files, &*log, locks, page, HeapTid::default())?;
            report.pages_written += 1;
        }
        report.lists_written += changes.len() as u64;
        Ok(Some(report))
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
