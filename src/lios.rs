//! LIOS in PostgreSQL (RFC 0004, issue 18): inserts leave their neighbours' back-edges as
//! tasks in a queue in shared memory, and searches run them in their read stalls.
//!
//! - The queue (`navis.lios_queue_size` tasks, postmaster shared memory) and the server's
//!   LIOS counters live in one named block. Tasks are not WAL-logged: a crash loses them, and
//!   what they would have written is a back-edge that VACUUM's reconnect restores. What a
//!   task writes goes through `PgLog` like any other list change.
//! - `aminsert` with `navis.lios = on` uses the engine's deferring insert with a sink over the
//!   queue; a full queue hands the back-edges back and the inserting session runs them.
//! - A scan installs `lios_stalls::SearchStalls` as the engine's stall work: between
//!   submitting a hop's reads and waiting for them, it works on its own index's tasks a step
//!   at a time, within a budget per backend (`lios_stalls.rs`).
//! - VACUUM runs every queued task of its index first (before it frees vertices).
//! - A background worker per database drains the queue while no search runs
//!   (`lios_worker.rs`).
//! - A hot standby never runs tasks: it has no inserts to queue them, and its scans check.

use crate::guc;
use crate::open::OpenIndex;
use navis_engine::lios::{
    QueueHeader, QueueSink, Task, TaskKind, TaskQueue, TaskSlot, WorkerRegistry,
};
use navis_engine::update::BackEdge;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

const SHMEM_NAME: &CStr = c"navis lios queue";

/// Queue slots a search looks through for its own index's tasks.
pub(crate) const SCAN_SLOTS: usize = 512;

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
    /// A gauge: tasks out of the queue in backends' work under way (kept between scans).
    Held,
}

const COUNTS: [(Count, &str); 15] = [
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
    (Count::Held, "tasks_held_by_backends"),
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

/// Takes `n` back from a gauge ([`Count::Held`]).
pub fn uncount(what: Count, n: u64) {
    if let Some((_, region)) = queue() {
        let i = COUNTS.iter().position(|c| c.0 == what).expect("listed");
        region.counters[i].fetch_sub(n, Ordering::Relaxed);
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
pub(crate) fn split_tasks(tasks: &[Task]) -> (Vec<BackEdge>, Vec<u32>) {
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

pub(crate) fn tasks_failed(n: usize, e: navis_engine::index::IndexError) {
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
    crate::lios_stalls::pacing_rows(&mut rows);
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
