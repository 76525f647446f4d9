//! LIOS in PostgreSQL (RFC 0004, issue 18): inserts leave their neighbours' back-edges as
//! tasks in a queue in shared memory, and searches run them in their read stalls.
//!
//! - The queue (`navis.lios_queue_size` tasks, postmaster shared memory) and the server's
//!   LIOS counters live in one named block. Tasks are not WAL-logged: a crash loses them, and
//!   what they would have written is a back-edge that VACUUM's reconnect restores. What a
//!   task writes goes through `PgLog` like any other list change.
//! - `aminsert` with `navis.lios = on` uses the engine's deferring insert with a sink over the
//!   queue; a full queue hands the back-edges back and the inserting session runs them.
//! - A scan installs [`SearchStalls`] as the engine's stall work: between submitting a hop's
//!   reads and waiting for them, it works on a group of its own index's back-edge tasks a
//!   step at a time ([`SlicedBackEdges`]: read, extend with a resumable prune, commit), looking
//!   at the clock between steps, until the budget is spent; the group it has under way stays
//!   with the backend for its next scan. Repairs run one at a time. The budget is the
//!   engine's overrun-bounded τ_est per number of reads in flight, times the utilisation
//!   ratio of the engine's tuner, both per backend.
//! - VACUUM runs every queued task of its index first (before it frees vertices).
//! - A background worker per database drains the queue while no search runs
//!   (`lios_worker.rs`).
//! - A hot standby never runs tasks: it has no inserts to queue them, and its scans check.

use crate::guc;
use crate::open::OpenIndex;
use navis_engine::io_wait::StallWork;
use navis_engine::lios::{
    IdleBudgets, IndexRef, QueueHeader, QueueSink, StallClock, StepCosts, Task, TaskKind,
    TaskQueue, TaskSlot, UtilisationTuner, WorkerRegistry,
};
use navis_engine::update::{BackEdge, SlicedBackEdges, StepKind};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::Duration;

const SHMEM_NAME: &CStr = c"navis lios queue";

/// Queue slots a search looks through for its own index's tasks.
const SCAN_SLOTS: usize = 512;

/// The server's LIOS counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Deferred,
    RepairsQueued,
    RunBySearches,
    RunByInserters,
    RunByVacuum,
    RunByWorker,
    WorkerStarts,
    WorkerStartsFailed,
    Dropped,
    Failed,
    Stalls,
    StallsWorked,
    Overruns,
    WorkMicros,
}

const COUNTS: [(Count, &str); 14] = [
    (Count::Deferred, "tasks_queued"),
    (Count::RepairsQueued, "repairs_queued"),
    (Count::RunBySearches, "tasks_run_by_searches"),
    (Count::RunByInserters, "tasks_run_by_inserters"),
    (Count::RunByVacuum, "tasks_run_by_vacuum"),
    (Count::RunByWorker, "tasks_run_by_worker"),
    (Count::WorkerStarts, "worker_starts"),
    (Count::WorkerStartsFailed, "worker_starts_failed"),
    (Count::Dropped, "tasks_dropped"),
    (Count::Failed, "tasks_failed"),
    (Count::Stalls, "search_stalls"),
    (Count::StallsWorked, "search_stalls_used"),
    (Count::Overruns, "budget_overruns"),
    (Count::WorkMicros, "task_microseconds_in_stalls"),
];

#[repr(C)]
pub struct Region {
    header: QueueHeader,
    counters: [AtomicU64; COUNTS.len()],
    /// What the background workers share (`lios_worker.rs`).
    pub workers: WorkerRegistry,
    capacity: u64,
    // `capacity` TaskSlots follow.
}

static REGION: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());

fn capacity_setting() -> usize {
    guc::LIOS_QUEUE_SIZE.get().max(0) as usize
}

fn region_bytes(capacity: usize) -> usize {
    std::mem::size_of::<Region>() + capacity * std::mem::size_of::<TaskSlot>()
}

/// Requests the queue's memory (shmem-request hook).
///
/// # Safety
/// Only from the shmem-request hook.
pub unsafe fn request() {
    let capacity = capacity_setting();
    if capacity > 0 {
        // SAFETY: the caller is the shmem-request hook.
        unsafe { pg_sys::RequestAddinShmemSpace(region_bytes(capacity)) };
    }
}

/// Creates the queue, empty (startup hook; after a crash-restart the tasks are gone).
///
/// # Safety
/// Only from the shmem startup hook while holding AddinShmemInitLock.
pub unsafe fn init_shared() {
    let capacity = capacity_setting();
    if capacity == 0 {
        return;
    }
    let mut found = false;
    // SAFETY: requested with the same (postmaster) setting; the caller holds
    // AddinShmemInitLock. ShmemInitStruct returns cache-line aligned memory.
    let region =
        unsafe { pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), region_bytes(capacity), &mut found) }
            as *mut Region;
    if !found {
        // SAFETY: fresh memory of region_bytes(capacity); nobody else uses it yet. The slots
        // follow the header at its size, which keeps their 8-byte alignment.
        unsafe {
            region.write(Region {
                header: QueueHeader::new(),
                counters: [const { AtomicU64::new(0) }; COUNTS.len()],
                workers: WorkerRegistry::new(),
                capacity: capacity as u64,
            });
            let slots = region.add(1) as *mut TaskSlot;
            for i in 0..capacity {
                slots.add(i).write(TaskSlot::new());
            }
        }
        queue_of(region).expect("just made").0.reset();
    }
    REGION.store(region, Ordering::Release);
}

fn queue_of(region: *mut Region) -> Option<(TaskQueue<'static>, &'static Region)> {
    // SAFETY: REGION is set only to the block init_shared formatted, which lives as long as
    // the postmaster's shared memory; `capacity` slots follow the header.
    unsafe {
        let r = region.as_ref()?;
        let slots =
            std::slice::from_raw_parts(region.add(1) as *const TaskSlot, r.capacity as usize);
        Some((TaskQueue::new(&r.header, slots), r))
    }
}

/// The queue and the block it lives in, when navis was preloaded with a queue.
pub fn queue() -> Option<(TaskQueue<'static>, &'static Region)> {
    queue_of(REGION.load(Ordering::Acquire))
}

pub fn count(what: Count, n: u64) {
    if let Some((_, region)) = queue() {
        let i = COUNTS.iter().position(|c| c.0 == what).expect("listed");
        region.counters[i].fetch_add(n, Ordering::Relaxed);
    }
}

/// The tag of `index`'s tasks: its NAVIS-Cache tag (never 0, which marks a forgotten task).
pub fn tag_of(index: pg_sys::Relation, build_id: u64) -> u64 {
    crate::open::relation_cache_tag(index, build_id).max(1)
}

/// On a primary with a queue and `navis.lios = on`: runs `f` with a sink for `index`'s
/// tasks (an insert's back-edges, a VACUUM's repairs); otherwise `f(None)`.
pub fn with_task_sink<R>(
    index: pg_sys::Relation,
    open: &OpenIndex,
    f: impl FnOnce(Option<&QueueSink<'_, '_>>) -> R,
) -> R {
    // SAFETY: reads shared recovery state.
    let standby = unsafe { pg_sys::RecoveryInProgress() };
    match queue() {
        Some((queue, _)) if guc::LIOS.get() && !standby => {
            let sink = QueueSink {
                queue: &queue,
                tag: tag_of(index, open.build_id),
            };
            f(Some(&sink))
        }
        _ => f(None),
    }
}

/// Forgets the queued tasks of a build that is gone (its index dropped or rebuilt) and
/// retires its tag, so that a group a backend holds of it is dropped rather than queued again;
/// how many tasks were queued. If the DROP or rebuild rolls back, those tasks are lost: a
/// back-edge each, which the next VACUUM reconnects, as after a crash.
pub fn forget(tag: u64) -> usize {
    let Some((queue, region)) = queue() else {
        return 0;
    };
    let tag = tag.max(1);
    region.workers.retire(tag);
    let n = queue.forget(tag);
    count(Count::Dropped, n as u64);
    n
}

/// `index` has a new build (`build_id`) under the same relation: REINDEX, TRUNCATE and
/// VACUUM FULL build anew. The tasks of the builds it replaces (those noted for the worker)
/// name vertex ids that mean nothing now.
pub fn new_build(index: pg_sys::Relation, build_id: u64) {
    let Some((_, region)) = queue() else {
        return;
    };
    // SAFETY: an open relation; MyDatabaseId is this backend's database.
    let (relation, database) = unsafe { ((*index).rd_id, pg_sys::MyDatabaseId) };
    let current = tag_of(index, build_id);
    for tag in region
        .workers
        .retire_superseded(database.to_u32(), relation.to_u32(), current)
    {
        forget(tag);
    }
}

/// Takes up to `max` of the index's tasks among the first `scan` queued and runs them;
/// returns how many it took. An engine error loses the tasks taken (counted as failed):
/// VACUUM's reconnect restores what back-edges would have linked, and the next consolidation
/// finds the lists a repair would have fixed.
pub fn run_tasks(open: &OpenIndex, tag: u64, max: usize, scan: usize, who: Count) -> usize {
    let Some((queue, _)) = queue() else {
        return 0;
    };
    let mut tasks: Vec<Task> = Vec::new();
    queue.pop_for(tag, max, scan, &mut tasks);
    let (edges, repairs) = split_tasks(&tasks);
    run_back_edges(open, &edges, who);
    run_repairs(open, &repairs, who);
    tasks.len()
}

/// The back-edges and the repairs among `tasks`.
fn split_tasks(tasks: &[Task]) -> (Vec<BackEdge>, Vec<u32>) {
    let mut edges: Vec<BackEdge> = Vec::new();
    let mut repairs: Vec<u32> = Vec::new();
    for t in tasks {
        match t.kind {
            TaskKind::BackEdge { to } => edges.push(BackEdge {
                vertex: t.vertex,
                to,
            }),
            TaskKind::Repair => repairs.push(t.vertex),
        }
    }
    (edges, repairs)
}

fn tasks_failed(n: usize, e: navis_engine::index::IndexError) {
    count(Count::Failed, n as u64);
    pgrx::debug1!("navis: LIOS tasks failed and were dropped: {e}");
}

fn run_back_edges(open: &OpenIndex, edges: &[BackEdge], who: Count) {
    if edges.is_empty() {
        return;
    }
    match open.index.run_back_edges(&open.locks(), edges) {
        Ok(report) => {
            count(who, report.done);
            count(Count::Dropped, report.dropped);
        }
        Err(e) => tasks_failed(edges.len(), e),
    }
}

fn run_repairs(open: &OpenIndex, repairs: &[u32], who: Count) {
    if repairs.is_empty() {
        return;
    }
    match open.index.run_repairs(&open.locks(), repairs) {
        Ok(report) => {
            count(who, report.done);
            count(Count::Dropped, report.dropped);
        }
        Err(e) => tasks_failed(repairs.len(), e),
    }
}

/// VACUUM: runs every queued task of the index (before it frees vertices or reconnects);
/// returns how many it took.
pub fn drain(index: pg_sys::Relation, open: &OpenIndex) -> usize {
    // SAFETY: reads shared recovery state.
    if unsafe { pg_sys::RecoveryInProgress() } {
        return 0;
    }
    let Some((queue, _)) = queue() else {
        return 0;
    };
    let tag = tag_of(index, open.build_id);
    let mut taken = 0;
    loop {
        let took = run_tasks(open, tag, 64, queue.capacity(), Count::RunByVacuum);
        if took == 0 {
            return taken;
        }
        taken += took;
        pgrx::check_for_interrupts!();
    }
}

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

/// The queue's length and capacity and the server's counters, one row each.
#[pg_extern(volatile, parallel_safe)]
fn navis_lios_stats() -> TableIterator<'static, (name!(name, String), name!(value, f64))> {
    let mut rows: Vec<(String, f64)> = Vec::new();
    if let Some((queue, region)) = queue() {
        rows.push(("queue_length".into(), queue.len() as f64));
        rows.push(("queue_capacity".into(), queue.capacity() as f64));
        for (i, (_, name)) in COUNTS.iter().enumerate() {
            rows.push((
                name.to_string(),
                region.counters[i].load(Ordering::Relaxed) as f64,
            ));
        }
    }
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
    TableIterator::new(rows)
}

pgrx::extension_sql!(
    r#"
CREATE VIEW navis_lios_stats AS SELECT s.name, s.value FROM navis_lios_stats() s;
COMMENT ON VIEW navis_lios_stats IS
    'LIOS: deferred back-edge tasks queued and run (by searches, inserters, VACUUM), stalls used, budget overruns; backend_* rows are this session''s pacing';
GRANT SELECT ON navis_lios_stats TO PUBLIC;
"#,
    name = "navis_lios_stats_view",
    requires = [navis_lios_stats]
);
