//! Wait events for navis's reads: while a backend waits for edge or vector pages (io_uring or
//! pread, around shared_buffers), `pg_stat_activity` shows `IO` / `DataFileRead`, what
//! PostgreSQL shows for a backend reading a relation's data file, which is what it does. Lock
//! waits need nothing here: PostgreSQL reports navis's LWLocks (`navis_vertex_locks`,
//! `navis_allocator_locks`) and heavyweight page locks itself.

use pgrx::pg_sys;
use std::cell::Cell;

thread_local! {
    /// Set on the thread that loaded navis (the backend's own thread, or the postmaster's,
    /// which every backend inherits): compute threads must not touch the backend's PGPROC.
    static BACKEND_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Installs the engine's wait hooks. Called from `_PG_init`.
pub fn register() {
    BACKEND_THREAD.with(|b| b.set(true));
    navis_engine::io_wait::set_wait_hooks(navis_engine::io_wait::WaitHooks {
        start: || set(pg_sys::WaitEventIO::WAIT_EVENT_DATA_FILE_READ),
        end: || set(0),
    });
}

/// `pgstat_report_wait_start` / `pgstat_report_wait_end`: one store into this backend's
/// wait-event word, on the backend's own thread only.
fn set(event: u32) {
    if BACKEND_THREAD.with(|b| b.get()) {
        // SAFETY: my_wait_event_info points at this backend's PGPROC word (or a local dummy
        // before the PGPROC exists), as pgstat_report_wait_start assumes; a plain store.
        unsafe { std::ptr::write_volatile(pg_sys::my_wait_event_info, event) };
    }
}
