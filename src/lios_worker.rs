//! The LIOS background worker (RFC 0004 §2): drains the task queue while no search runs.
//!
//! A background worker connects to one database for its life, so there is one per database
//! with tasks, started on demand: an insert that queues tasks notes its index in the shared
//! [`WorkerRegistry`] and, when no worker serves its database, registers a dynamic background
//! worker for it (`navis lios worker` in `pg_stat_activity`). The worker runs the noted indexes'
//! tasks, in transactions of at most [`TASKS_PER_TRANSACTION`], only after no search has run
//! for [`QUIET`]: searches run tasks in their own stalls, and the worker must not take their
//! CPU. It exits after [`IDLE_EXIT`] with nothing to do, and never runs on a hot standby
//! (dynamic workers start only once recovery has finished, and inserts queue nothing there).
//!
//! It also forgets what is stale: a noted index that was dropped, or whose relfilenode or
//! build changed (REINDEX, TRUNCATE, an online rebuild), has its tasks removed from the queue.

use crate::guc;
use crate::lios::{self, Count};
use crate::open::{open_index, read_meta};
use crate::regrow;
use navis_engine::lios::{IndexRef, Launch, Ticket, WorkerRegistry};
use pgrx::bgworkers::{BackgroundWorker, BackgroundWorkerBuilder, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long no search must have run before the worker takes tasks.
const QUIET: Duration = Duration::from_millis(100);
/// How long the worker waits for work before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(10);
/// How often an idle worker looks at the queue.
const POLL: Duration = Duration::from_millis(100);
/// Tasks the worker runs in one transaction (the index's locks are held that long).
const TASKS_PER_TRANSACTION: usize = 1024;
/// Tasks one call takes (one or several page groups).
const TASKS_PER_CALL: usize = 64;

/// This worker's ticket (a worker may claim a new one before it would have exited).
static CURRENT_TICKET: AtomicU64 = AtomicU64::new(u64::MAX);

fn now_us() -> i64 {
    // SAFETY: reads the clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

fn registry() -> Option<&'static WorkerRegistry> {
    lios::queue().map(|(_, region)| &region.workers)
}

/// A search is running: the worker waits for a quiet spell. Every scan calls this per row,
/// so without a worker it reads no clock (a few atomic loads).
pub fn note_search() {
    if let Some(registry) = registry().filter(|r| r.workers_active()) {
        registry.note_search(now_us());
    }
}

/// An insert queued tasks of `index` (tagged `tag`): notes the index for the worker of its
/// database, and starts that worker when none runs. A worker that cannot be started (every
/// `max_worker_processes` slot in use) is tried again after `LAUNCH_PATIENCE_US`; until then
/// searches, inserters and VACUUM run the tasks.
pub fn after_deferring(index: pg_sys::Relation, tag: u64) {
    // SAFETY: an open relation; MyDatabaseId is this backend's database.
    let (relation, database) = unsafe { ((*index).rd_id, pg_sys::MyDatabaseId) };
    let noted = IndexRef {
        tag,
        database: database.to_u32(),
        relation: relation.to_u32(),
    };
    note_tasks_of(noted, guc::LIOS_WORKER.get());
}

/// Tasks of `noted` are in the queue: notes the index for its database's worker, which runs
/// them or, when the index was dropped or rebuilt meanwhile, forgets them; starts that worker
/// when none runs and `launch_allowed`.
pub fn note_tasks_of(noted: IndexRef, launch_allowed: bool) {
    let Some(registry) = registry() else {
        return;
    };
    match registry.note_insert(noted, now_us(), launch_allowed) {
        Launch::Start(ticket) => launch(ticket),
        Launch::NotNeeded | Launch::NoSlot => {}
    }
}

fn launch(ticket: Ticket) {
    let started = BackgroundWorkerBuilder::new(&format!(
        "navis lios worker for database {}",
        ticket.database
    ))
    .set_type("navis lios worker")
    .set_library("navis")
    .set_function("navis_lios_worker_main")
    .enable_spi_access() // a database connection; starts only after recovery
    .set_restart_time(None)
    .set_argument(Some(pg_sys::Datum::from(ticket.to_word())))
    .load_dynamic();
    match started {
        Ok(_) => lios::count(Count::WorkerStarts, 1),
        // The claim stays until its patience runs out: no retry on every insert.
        Err(_) => lios::count(Count::WorkerStartsFailed, 1),
    }
}

/// SIGTERM arrived (the handler sets PostgreSQL's flag; reading it does not consume it).
fn shutdown_requested() -> bool {
    // SAFETY: a sig_atomic_t the signal handler writes; a volatile read of it.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::ShutdownRequestPending) != 0 }
}

/// The worker's entry point (a dynamic background worker; the argument is its ticket).
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn navis_lios_worker_main(arg: pg_sys::Datum) {
    let Some(mut ticket) = Ticket::from_word(arg.value() as u64) else {
        return;
    };
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let Some(registry) = registry() else {
        return;
    };
    CURRENT_TICKET.store(ticket.to_word(), Ordering::Relaxed);
    // SAFETY: registers a callback without an argument; it runs at process exit, also after
    // an ERROR ends the worker, and only releases this worker's current ticket.
    unsafe { pg_sys::before_shmem_exit(Some(release_at_exit), pg_sys::Datum::from(0usize)) };
    BackgroundWorker::connect_worker_to_spi_by_oid(Some(pg_sys::Oid::from(ticket.database)), None);
    pgrx::log!("navis lios worker started for database {}", ticket.database);
    let mut ran_total = 0usize;
    let why = run_until_done(registry, &mut ticket, &mut ran_total);
    pgrx::log!(
        "navis lios worker for database {} exiting ({why}) after running {ran_total} tasks",
        ticket.database
    );
}

/// The worker's loop; returns why it ends.
fn run_until_done(
    registry: &WorkerRegistry,
    ticket: &mut Ticket,
    ran_total: &mut usize,
) -> &'static str {
    let mut idle_since = now_us();
    loop {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the worker's main loop, outside any transaction, as PostgreSQL's own
            // workers reload their configuration.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        if !guc::LIOS_WORKER.get() {
            return "navis.lios_worker is off"; // release_at_exit gives the slot up
        }
        let now = now_us();
        if !registry.beat(*ticket, now) {
            return "presumed gone and replaced by another worker";
        }
        let mut wait = POLL;
        if registry.searches_quiet(now, QUIET.as_micros() as i64) {
            let database = ticket.database;
            let ran = BackgroundWorker::transaction(move || run_some(database));
            *ran_total += ran;
            if ran > 0 {
                idle_since = now_us();
                wait = Duration::ZERO;
            } else if now - idle_since >= IDLE_EXIT.as_micros() as i64 {
                match exit_or_continue(registry, *ticket) {
                    Some(next) => {
                        *ticket = next;
                        CURRENT_TICKET.store(ticket.to_word(), Ordering::Relaxed);
                        idle_since = now_us();
                    }
                    None => return "no task for 10 s",
                }
            }
        } else {
            wait = QUIET;
        }
        if !BackgroundWorker::wait_latch(Some(wait)) || shutdown_requested() {
            return "shutdown";
        }
    }
}

/// Gives the slot up when the worker exits normally. After an ERROR (code 1) the claim stays
/// until its heartbeat patience runs out, so that an index whose tasks fail is not retried
/// by a new worker on every insert.
#[pg_guard]
unsafe extern "C-unwind" fn release_at_exit(code: i32, _arg: pg_sys::Datum) {
    if code != 0 {
        return;
    }
    let word = CURRENT_TICKET.load(Ordering::Relaxed);
    if let (Some(registry), Some(ticket)) = (registry(), Ticket::from_word(word)) {
        registry.release(ticket);
    }
}

/// Idle for long enough: forgets the database's indexes without tasks and gives the slot up.
/// If tasks arrived meanwhile (an insert saw this worker running and launched none), claims a
/// slot again and goes on with the new ticket.
fn exit_or_continue(registry: &WorkerRegistry, ticket: Ticket) -> Option<Ticket> {
    let (queue, _) = lios::queue()?;
    registry.release(ticket);
    let mut pending = None;
    for index in registry.indexes_of(ticket.database) {
        if queue.holds(index.tag) {
            pending = Some(index);
        } else {
            registry.forget(index.tag);
        }
    }
    match registry.note_insert(pending?, now_us(), guc::LIOS_WORKER.get()) {
        Launch::Start(next) => Some(next),
        _ => None,
    }
}

/// Runs tasks of the database's noted indexes while searches stay quiet; how many it took.
fn run_some(database: u32) -> usize {
    let Some(registry) = registry() else {
        return 0;
    };
    let mut ran = 0;
    for index in registry.indexes_of(database) {
        if ran >= TASKS_PER_TRANSACTION {
            break;
        }
        ran += run_index(registry, index, TASKS_PER_TRANSACTION - ran);
    }
    ran
}

/// Runs up to `max` tasks of one noted index; forgets the index and its tasks when it is
/// gone or no longer the build the tasks were queued for.
fn run_index(registry: &WorkerRegistry, noted: IndexRef, max: usize) -> usize {
    let lock = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: opens by OID, NULL if the relation no longer exists; the lock is held until
    // the transaction ends.
    let index = unsafe { pg_sys::try_relation_open(pg_sys::Oid::from(noted.relation), lock) };
    let current_tag = if index.is_null() {
        None
    } else {
        // SAFETY: an open relation.
        let is_index = unsafe { (*(*index).rd_rel).relkind } == pg_sys::RELKIND_INDEX as i8;
        is_index
            .then(|| read_meta(index))
            .flatten()
            .map(|meta| lios::tag_of(index, meta.build_id))
    };
    if current_tag != Some(noted.tag) {
        lios::forget(noted.tag);
        close(index);
        return 0;
    }
    regrow::lock_writers_shared(index);
    let open = open_index(index);
    let _bound = open.bind(index);
    let mut ran = 0;
    let scan = lios::queue().map_or(0, |(queue, _)| queue.capacity());
    while ran < max
        && registry.searches_quiet(now_us(), QUIET.as_micros() as i64)
        && !shutdown_requested()
    {
        pgrx::check_for_interrupts!();
        let took = lios::run_tasks(
            &open,
            noted.tag,
            TASKS_PER_CALL.min(max - ran),
            scan,
            Count::RunByWorker,
        );
        if took == 0 {
            break;
        }
        ran += took;
    }
    drop(_bound);
    drop(open);
    regrow::unlock_writers_shared(index);
    close(index);
    ran
}

fn close(index: pg_sys::Relation) {
    if !index.is_null() {
        // SAFETY: opened by run_index in this transaction; the lock stays until commit.
        unsafe { pg_sys::relation_close(index, pg_sys::NoLock as pg_sys::LOCKMODE) };
    }
}
