//! LIOS work in a search's read stalls (RFC 0004 §2, "Sliced tasks"): between submitting a
//! hop's reads and waiting for them, a scan works on a group of its own index's back-edge
//! tasks a step at a time ([`SlicedBackEdges`]), within the engine's overrun-bounded budget
//! times the utilisation ratio of its tuner, both per backend. The group under way stays with
//! the backend for its next scan of the same index; it goes back to the queue when the backend
//! scans another index or exits, and is dropped if its build was retired meanwhile. Repairs
//! run one at a time.

use crate::guc;
use crate::lios::{
    count, queue, run_repairs, split_tasks, tag_of, tasks_failed, Count, SCAN_SLOTS,
};
use crate::open::OpenIndex;
use navis_engine::io_wait::StallWork;
use navis_engine::lios::{
    IdleBudgets, IndexRef, StallClock, StepCosts, Task, TaskKind, UtilisationTuner,
};
use navis_engine::update::{SlicedBackEdges, StepKind};
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

/// The back-edge group this backend has under way, and the index (tag) it belongs to. Its
/// tasks are out of the queue until it commits. It outlives the scan that took it: out of
/// memory a search has only a few stalls (most of its reads hit NAVIS-Cache), fewer than a
/// group needs, so the next scan of the same index goes on with it.
struct PendingGroup {
    /// The index and its tag when the group was taken: by the time the group goes back to
    /// the queue, another session may have rebuilt or dropped the index (and forgotten the
    /// tag's queued tasks), so the worker is told to check.
    index: IndexRef,
    group: SlicedBackEdges,
}

thread_local! {
    static PENDING: RefCell<Option<PendingGroup>> = const { RefCell::new(None) };
}

/// Whether this backend registered [`requeue_at_exit`].
static EXIT_HOOKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Puts a pending group's tasks back in the queue and notes its index for the worker; hands
/// the group back (nothing queued) when the queue lacks room for them all. The tasks of a
/// build retired since (the index dropped or rebuilt by another session) are dropped
/// instead; should the retirement come between the check and the pushes, the worker, noted
/// here (and started if `launch_allowed` and none runs), finds the index's tag changed and
/// forgets them.
fn requeue(pending: PendingGroup, launch_allowed: bool) -> Option<PendingGroup> {
    // (no queue, no group: a group's tasks came from it)
    let (queue, region) = queue()?;
    if region.workers.is_retired(pending.index.tag) {
        count(Count::Dropped, pending.group.len() as u64);
        return None;
    }
    if queue.len() + pending.group.len() > queue.capacity() {
        return Some(pending);
    }
    let index = pending.index;
    let tag = index.tag;
    let mut lost = 0;
    for edge in pending.group.into_tasks() {
        let task = Task {
            tag,
            vertex: edge.vertex,
            kind: TaskKind::BackEdge { to: edge.to },
        };
        // (another backend may have filled the room meanwhile)
        lost += queue.push(task).is_err() as u64;
    }
    count(Count::Failed, lost);
    crate::lios_worker::note_tasks_of(index, launch_allowed);
    None
}

/// At backend exit: the group under way goes back to the queue (if the queue is full, its
/// tasks are lost, as a crash loses queued ones). It starts no worker from an exiting
/// backend: the next insert or requeue of the database does.
#[pg_guard]
unsafe extern "C-unwind" fn requeue_at_exit(_code: i32, _arg: pg_sys::Datum) {
    if let Some(pending) = PENDING.with(|p| p.borrow_mut().take()) {
        let n = pending.group.len() as u64;
        if requeue(pending, false).is_some() {
            count(Count::Failed, n);
        }
    }
}

/// What a stall found to do.
enum Taken {
    Group(SlicedBackEdges),
    /// A repair, which ran.
    RepairsRan,
    Nothing,
}

/// The stall work of one scan: its own index's tasks, a slice at a time, within the
/// budget. Back-edges run as [`SlicedBackEdges`] groups that look at the clock between
/// steps and resume in the next stall (of this scan or the next); repairs (VACUUM's,
/// rarer) run whole.
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

    /// The group to work on: the pending one if it is this index's, else a new one from the
    /// queue (a pending group of another index goes back to the queue first; if there is no
    /// room for it, it stays and this stall runs nothing).
    fn take_group(&self, clock: &mut StallClock<'_>) -> Taken {
        if let Some(pending) = PENDING.with(|p| p.borrow_mut().take()) {
            if pending.index == self.index {
                return Taken::Group(pending.group);
            }
            if let Some(pending) = requeue(pending, guc::LIOS_WORKER.get()) {
                PENDING.with(|p| *p.borrow_mut() = Some(pending));
                return Taken::Nothing;
            }
        }
        let Some((queue, _)) = queue() else {
            return Taken::Nothing;
        };
        let mut tasks: Vec<Task> = Vec::new();
        let max = SlicedBackEdges::max_tasks(&self.open.index);
        queue.pop_kind(self.index.tag, false, max, SCAN_SLOTS, &mut tasks);
        if tasks.is_empty() {
            // Repairs are not sliced: one at a time, each started only if a repair's mean
            // cost fits what is left (else it goes back to the queue).
            queue.pop_kind(self.index.tag, true, 1, SCAN_SLOTS, &mut tasks);
            let Some(&repair) = tasks.first() else {
                return Taken::Nothing;
            };
            if !clock.may_start(StepKind::Repair) && queue.push(repair).is_ok() {
                return Taken::Nothing;
            }
            run_repairs(self.open, &[repair.vertex], Count::RunBySearches);
            return Taken::RepairsRan;
        }
        let (edges, _) = split_tasks(&tasks);
        if !EXIT_HOOKED.swap(true, Ordering::Relaxed) {
            // SAFETY: registers a callback without an argument, once per backend; it only
            // moves this backend's pending tasks into the queue in shared memory.
            unsafe {
                pg_sys::before_shmem_exit(Some(requeue_at_exit), pg_sys::Datum::from(0usize))
            };
        }
        Taken::Group(SlicedBackEdges::new(&self.open.index, edges))
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
        loop {
            let mut group = match self.take_group(&mut clock) {
                Taken::Group(group) => group,
                Taken::RepairsRan => {
                    self.worked = true;
                    if clock.out_of_time() {
                        break;
                    }
                    continue;
                }
                Taken::Nothing => break,
            };
            // (a PostgreSQL ERROR inside unwinds past here and loses the group's tasks,
            // as a crash loses queued ones)
            let advanced =
                group.advance(&self.open.index, &locks, &mut |kind| clock.may_start(kind));
            match advanced {
                Ok(Some(report)) => {
                    count(Count::RunBySearches, report.done);
                    count(Count::Dropped, report.dropped);
                }
                Ok(None) => {
                    let pending = PendingGroup {
                        index: self.index,
                        group,
                    };
                    PENDING.with(|p| *p.borrow_mut() = Some(pending));
                    break;
                }
                Err(e) => {
                    tasks_failed(group.len(), e);
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
