//! LIOS work in a search's read stalls (RFC 0004 §2, "Sliced tasks"): between submitting a
//! hop's reads and waiting for them, a scan works on its own index's tasks a step at a time
//! (a group of back-edges as [`SlicedBackEdges`], a repair as [`SlicedRepair`]), within the
//! engine's overrun-bounded budget times the utilisation ratio of its tuner, both per
//! backend. The work under way stays with the backend for its next scan of the same index;
//! it goes back to the queue when the backend scans another index or exits, and is dropped
//! if its build was retired meanwhile.

use crate::guc;
use crate::lios::{count, queue, split_tasks, tag_of, tasks_failed, uncount, Count, SCAN_SLOTS};
use crate::open::OpenIndex;
use navis_engine::index::IndexError;
use navis_engine::io_wait::StallWork;
use navis_engine::lios::{
    IdleBudgets, IndexRef, StallClock, StepCosts, Task, TaskKind, UtilisationTuner,
};
use navis_engine::update::{SlicedBackEdges, SlicedRepair, StepKind, WriteLocks};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// This backend's budgets and tuner, kept across scans.
struct Pacing {
    theta: f64,
    budgets: IdleBudgets,
    tuner: UtilisationTuner,
    /// The mean cost of each kind of task step, as this backend's stalls measured it.
    steps: StepCosts,
}

thread_local! {
    static PACING: RefCell<Option<Pacing>> = const { RefCell::new(None) };
}

fn with_pacing<R>(f: impl FnOnce(&mut Pacing) -> R) -> R {
    let theta = guc::LIOS_LATENCY_BUDGET.get();
    PACING.with(|p| {
        let mut p = p.borrow_mut();
        let pacing = p.get_or_insert_with(|| Pacing {
            theta,
            budgets: IdleBudgets::new(theta),
            tuner: UtilisationTuner::new(theta),
            steps: StepCosts::default(),
        });
        if pacing.theta != theta {
            pacing.theta = theta;
            pacing.budgets.set_theta(theta);
            pacing.tuner = UtilisationTuner::new(theta);
        }
        f(pacing)
    })
}

/// A finished search's latency (its first pass), for the utilisation tuner.
pub fn record_search(latency: Duration) {
    with_pacing(|p| p.tuner.record_search(latency.as_secs_f64() * 1e6));
}

/// Task work run in slices: a group of back-edges, or one repair.
enum Work {
    BackEdges(SlicedBackEdges),
    Repair(Box<SlicedRepair>),
}

impl Work {
    fn len(&self) -> usize {
        match self {
            Work::BackEdges(group) => group.len(),
            Work::Repair(_) => 1,
        }
    }

    /// Its tasks, to queue again.
    fn into_tasks(self, tag: u64) -> Vec<Task> {
        match self {
            Work::BackEdges(group) => group
                .into_tasks()
                .into_iter()
                .map(|edge| Task {
                    tag,
                    vertex: edge.vertex,
                    kind: TaskKind::BackEdge { to: edge.to },
                })
                .collect(),
            Work::Repair(repair) => vec![Task {
                tag,
                vertex: repair.vertex(),
                kind: TaskKind::Repair,
            }],
        }
    }

    /// Runs steps while `may_start` allows: `Some((done, dropped))` once committed.
    fn advance(
        &mut self,
        open: &OpenIndex,
        locks: &dyn WriteLocks,
        may_start: &mut dyn FnMut(StepKind) -> bool,
    ) -> Result<Option<(u64, u64)>, IndexError> {
        Ok(match self {
            Work::BackEdges(group) => group
                .advance(&open.index, locks, may_start)?
                .map(|r| (r.done, r.dropped)),
            Work::Repair(repair) => repair
                .advance(&open.index, locks, may_start)?
                .map(|r| (r.done, r.dropped)),
        })
    }
}

/// The work this backend has under way, and the index (tag) it belongs to. Its tasks are
/// out of the queue until it commits. It outlives the scan that took it: out of memory a
/// search has only a few stalls (most of its reads hit NAVIS-Cache), fewer than a group or
/// a repair needs, so the next scan of the same index goes on with it. (VACUUM cannot see
/// it: a list a held repair would fix, VACUUM repairs itself or hands out again before it
/// frees what the list points at; the held repair's commit then finds it repaired.)
struct Pending {
    /// The index and its tag when the work was taken: by the time it goes back to the
    /// queue, another session may have rebuilt or dropped the index (and forgotten the
    /// tag's queued tasks), so the worker is told to check.
    index: IndexRef,
    work: Work,
}

thread_local! {
    static PENDING: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// Takes this backend's work under way, if any (no longer counted as held).
fn take_pending() -> Option<Pending> {
    let pending = PENDING.with(|p| p.borrow_mut().take())?;
    uncount(Count::Held, pending.work.len() as u64);
    Some(pending)
}

/// Keeps `pending` for this backend's next stall (counted as held: out of the queue).
fn keep_pending(pending: Pending) {
    count(Count::Held, pending.work.len() as u64);
    PENDING.with(|p| *p.borrow_mut() = Some(pending));
}

/// Whether this backend registered [`requeue_at_exit`].
static EXIT_HOOKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Puts pending work's tasks back in the queue and notes its index for the worker; hands
/// the work back (nothing queued) when the queue lacks room for them all. The tasks of a
/// build retired since (the index dropped or rebuilt by another session) are dropped
/// instead; should the retirement come between the check and the pushes, the worker, noted
/// here (and started if `launch_allowed` and none runs), finds the index's tag changed and
/// forgets them.
fn requeue(pending: Pending, launch_allowed: bool) -> Option<Pending> {
    // (no queue, no pending work: its tasks came from it)
    let (queue, region) = queue()?;
    if region.workers.is_retired(pending.index.tag) {
        count(Count::Dropped, pending.work.len() as u64);
        return None;
    }
    if queue.len() + pending.work.len() > queue.capacity() {
        return Some(pending);
    }
    let index = pending.index;
    let mut lost = 0;
    for task in pending.work.into_tasks(index.tag) {
        // (another backend may have filled the room meanwhile)
        lost += queue.push(task).is_err() as u64;
    }
    count(Count::Failed, lost);
    crate::lios_worker::note_tasks_of(index, launch_allowed);
    None
}

/// At backend exit: the work under way goes back to the queue (if the queue is full, its
/// tasks are lost, as a crash loses queued ones). It starts no worker from an exiting
/// backend: the next insert or requeue of the database does.
#[pg_guard]
unsafe extern "C-unwind" fn requeue_at_exit(_code: i32, _arg: pg_sys::Datum) {
    if let Some(pending) = take_pending() {
        let n = pending.work.len() as u64;
        if requeue(pending, false).is_some() {
            count(Count::Failed, n);
        }
    }
}

/// The stall work of one scan: its own index's tasks, a slice at a time, within the
/// budget. Back-edges run as [`SlicedBackEdges`] groups, repairs (VACUUM's, rarer) one at a
/// time as [`SlicedRepair`]s; both look at the clock between steps and resume in the next
/// stall (of this scan or the next).
pub struct SearchStalls<'a> {
    open: &'a OpenIndex,
    /// The scanned index (its tag, relation and database).
    index: IndexRef,
    /// Work ran in the current stall.
    worked: bool,
}

impl<'a> SearchStalls<'a> {
    /// Stall work for a scan of `index`, or `None` when LIOS is off, there is no queue, or
    /// this is a hot standby.
    pub fn new(index: pg_sys::Relation, open: &'a OpenIndex) -> Option<SearchStalls<'a>> {
        if !guc::LIOS.get() {
            return None; // every scan asks, per row: the cheapest check first
        }
        // SAFETY: reads shared recovery state.
        if unsafe { pg_sys::RecoveryInProgress() } {
            return None;
        }
        queue()?;
        // SAFETY: an open relation; MyDatabaseId is this backend's database.
        let (relation, database) = unsafe { ((*index).rd_id, pg_sys::MyDatabaseId) };
        Some(SearchStalls {
            open,
            index: IndexRef {
                tag: tag_of(index, open.build_id),
                database: database.to_u32(),
                relation: relation.to_u32(),
            },
            worked: false,
        })
    }

    /// The work to do: the pending work if it is this index's, else new work from the
    /// queue, back-edges first (pending work of another index goes back to the queue first;
    /// if there is no room for it, it stays and this stall runs nothing).
    fn take_work(&self) -> Option<Work> {
        if let Some(pending) = take_pending() {
            if pending.index == self.index {
                return Some(pending.work);
            }
            if let Some(pending) = requeue(pending, guc::LIOS_WORKER.get()) {
                keep_pending(pending);
                return None;
            }
        }
        let (queue, _) = queue()?;
        let mut tasks: Vec<Task> = Vec::new();
        let max = SlicedBackEdges::max_tasks(&self.open.index);
        queue.pop_kind(self.index.tag, false, max, SCAN_SLOTS, &mut tasks);
        if tasks.is_empty() {
            queue.pop_kind(self.index.tag, true, 1, SCAN_SLOTS, &mut tasks);
        }
        let (edges, repairs) = split_tasks(&tasks);
        let work = if let Some(&u) = repairs.first() {
            Work::Repair(Box::new(SlicedRepair::new(&self.open.index, u)))
        } else if !edges.is_empty() {
            Work::BackEdges(SlicedBackEdges::new(&self.open.index, edges))
        } else {
            return None;
        };
        if !EXIT_HOOKED.swap(true, Ordering::Relaxed) {
            // SAFETY: registers a callback without an argument, once per backend; it only
            // moves this backend's pending tasks into the queue in shared memory.
            unsafe {
                pg_sys::before_shmem_exit(Some(requeue_at_exit), pg_sys::Datum::from(0usize))
            };
        }
        Some(work)
    }
}

impl StallWork for SearchStalls<'_> {
    fn stalled(&mut self, in_flight: usize) {
        self.worked = false;
        let budget_us = with_pacing(|p| p.budgets.budget(in_flight) * p.tuner.ratio());
        if budget_us <= 0.0 {
            return;
        }
        // (out of the thread-local while the steps run, so that nothing they call can find
        // it borrowed)
        let mut costs = with_pacing(|p| std::mem::take(&mut p.steps));
        let mut clock = StallClock::new(&mut costs, budget_us);
        let locks = self.open.locks();
        while let Some(mut work) = self.take_work() {
            // (a PostgreSQL ERROR inside unwinds past here and loses the work's tasks, as a
            // crash loses queued ones)
            match work.advance(self.open, &locks, &mut |kind| clock.may_start(kind)) {
                Ok(Some((done, dropped))) => {
                    count(Count::RunBySearches, done);
                    count(Count::Dropped, dropped);
                }
                Ok(None) => {
                    let pending = Pending {
                        index: self.index,
                        work,
                    };
                    keep_pending(pending);
                    break;
                }
                Err(e) => {
                    tasks_failed(work.len(), e);
                    break;
                }
            }
            if clock.out_of_time() {
                break;
            }
        }
        clock.finish();
        self.worked |= clock.worked();
        let elapsed_us = clock.elapsed_us();
        with_pacing(|p| p.steps = costs);
        if self.worked {
            count(Count::StallsWorked, 1);
            count(Count::WorkMicros, elapsed_us as u64);
        }
    }

    fn completed(&mut self, in_flight: usize, since_submit: Duration, worked: Duration) {
        count(Count::Stalls, 1);
        if !self.worked {
            with_pacing(|p| {
                p.budgets
                    .record(in_flight, since_submit.as_secs_f64() * 1e6)
            });
        } else if since_submit.saturating_sub(worked) < Duration::from_micros(2) {
            // The reads were in before the work ended: the wait after it was (nearly) nil.
            count(Count::Overruns, 1);
        }
        self.worked = false;
    }
}

/// This backend's pacing, as rows of `navis_lios_stats`.
pub fn pacing_rows(rows: &mut Vec<(String, f64)>) {
    with_pacing(|p| {
        rows.push(("backend_utilisation_ratio".into(), p.tuner.ratio()));
        rows.push(("backend_baseline_latency_us".into(), p.tuner.baseline()));
        for kind in StepKind::ALL {
            rows.push((
                format!("backend_step_us_{}", format!("{kind:?}").to_lowercase()),
                p.steps.mean_us(kind),
            ));
        }
        for in_flight in 1..=navis_engine::lios::budget::BUCKETS {
            rows.push((
                format!("backend_budget_us_{in_flight}_reads"),
                p.budgets.budget(in_flight),
            ));
        }
    });
}
